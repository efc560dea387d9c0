"""Reverse mode: ``vjp(kernel)`` is the adjoint of a kernel, itself a hawk kernel.

The adjoint runs once per lane, like its primal, and is emitted and run by
the same emitters and plans (``eagle.plan.auto(vjp(kernel))``, or
``eagle.diff.reverse(plan)``, which picks the planes for you). Its planes:

* the primal's inputs, params and tables, unchanged (not its outputs: the
  adjoint recomputes every value it needs from the inputs);
* ``<out>_bar`` for each output: the cotangent of a ``Mutable[Scalar]`` (one
  value per lane) or of a ``Mutable[Table]`` (a table of its shape);
* a gradient plane for each plane the gradient is taken with respect to,
  which the adjoint **adds into**: ``<x>_bar`` for a ``Scalar`` (per lane),
  ``<a>_bar`` for a ``Param`` (one element: the sum over lanes), ``<t>_bar``
  for a table (a ``Mutable[Table]`` of its shape: each read scatters its
  gradient into the element it read, atomic on the device);
* an output the primal reads before writing it (``y = a * x + y``) is also an
  input, its value before the launch: its gradient plane is ``<y>_in_bar``,
  and the adjoint takes that value as plane ``<y>`` only when it needs it.

A name the adjoint takes already (a plane named ``x_bar`` beside ``x``, or
an adjoint's own ``y_bar`` in an adjoint's adjoint) goes to the earlier of the
two; the later gets the first number free from 2 (``x_bar2``).
:func:`cotangent_planes` and :func:`gradient_planes` give every name.

Two options of :func:`vjp` serve a caller that makes fresh gradient planes
for every call (as a framework's backward does): ``lane_gradients="store"``
writes the per-lane gradient planes (``<x>_bar`` of a ``Scalar``,
``<y>_in_bar``) instead of adding into them — every lane writes its own,
zero where nothing depends on it, so they need no zeroing first; param and
table gradients, which several lanes reach, are still added into. And
``broadcast=("y",)`` takes the cotangent of output ``y`` as one value shared
by every lane (the gradient of ``y.sum()``): its plane ``y_bar`` is a
``Param`` instead of a ``Scalar``. A third, ``zero_cotangents=("w",)``,
serves a loss that does not read output ``w``: its cotangent is zero, so the
adjoint leaves out its stores and adds and takes no ``w_bar``. The partials
of ``w`` are then never formed, as a framework that prunes an unused output
does (a zero cotangent times an infinite partial, ``sqrt`` at 0, is NaN).

The gradient of a ``Mutable[Table]``'s initial value is its cotangent itself
(adds pass it through), so it has no plane.

How the reverse sweep gets the values it needs: it **recomputes** them. The
adjoint first reruns the primal body (without its stores and adds), then
walks it backwards. hawk values are per-lane scalars, with no per-lane arrays
to keep a tape in; storing a loop's carried values would take a scratch plane
of lanes x iterations per loop that every caller (and every captured graph)
would have to allocate and keep, so nothing is stored:

* **branches**: the reverse sweep of an ``if`` is an ``if`` on the same
  condition that recomputes the taken block and sends the gradient back
  through it only (the gradient follows the taken branch; a condition itself
  has no gradient);
* **loops**: the reverse sweep is a loop over the same range backwards, which
  recomputes each iteration's body from the loop index and carries the
  gradients of the carried values (and of the outer values the body reads)
  from one iteration to the one before. When the body's gradient needs a
  carried value (Horner's ``p * x`` needs ``p``), each reverse iteration first
  reruns the forward loop up to that iteration: T(T+1)/2 body evaluations
  for T iterations. A fold whose gradient needs no carried value (a sum of
  products, ``acc + w.at(..) * f.at(..)``) costs T. A rerun loop of
  ``RERUN_WARNING`` (128) iterations or more warns
  (:class:`~hawk.AdjointCostWarning`) with its estimated cost.

Steps have a zero derivative: comparisons, ``//``, and ``int()`` of a value
(the gradient is the one almost everywhere, as finite differences away from
the steps see it). The exception is a step in an address: a table read (or
an add whose value carries a gradient) at an index computed with ``int()``
from data the gradient is taken with respect to jumps between elements, and
has no derivative through its address; :func:`vjp` refuses it with a
:class:`~hawk.HawkError` naming the read and the cast. Take the gradient
with respect to other planes (``wrt``), or interpolate between two reads.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Iterable
from typing import Any, Literal, cast, get_args

from hawk import ir
from hawk._activity import Activity
from hawk._adjoint import BAR, Adjoint, GradientNamer, Key
from hawk._passes import base_name, flatten, prune
from hawk.errors import AdjointCostWarning, HawkError, HawkTypeError, HawkValueError
from hawk.kinds import PlaneKind, check_option
from hawk.trace import Kernel

__all__ = ["AdjointKernel", "LaneGradients", "cotangent_planes", "gradient_planes", "vjp"]

#: the suffix of the gradient of an output's value before the launch
INITIAL_BAR = "_in_bar"
#: the axis of a param's one-element gradient plane
PARAM_AXIS = "element"
LaneGradients = Literal["add", "store"]
"""What the adjoint does with the per-lane gradient planes (add into them, or write them)."""

#: the values ``lane_gradients`` may take
LANE_GRADIENTS: tuple[LaneGradients, ...] = get_args(LaneGradients)

# the primal planes the adjoint takes as they are
_GIVEN = (PlaneKind.INPUT, PlaneKind.PARAM, PlaneKind.TABLE)


class AdjointKernel(Kernel):
    """The reverse-mode kernel of a primal kernel; made by :func:`vjp`.

    Attributes:
        primal: the primal :class:`~hawk.trace.Kernel`.
        wrt: the primal planes the gradient is taken with respect to, in
            declaration order.
        gradients: ``{primal plane: gradient plane}`` for those planes.
        cotangents: ``{output: cotangent plane}`` for every output whose
            cotangent the adjoint takes (all but ``zero_cotangents``).
        fn: the primal's Python function (the adjoint was derived from it).
    """

    def __init__(
        self,
        primal: Kernel,
        wrt: tuple[str, ...],
        cotangents: dict[str, str],
        kernel_ir: ir.KernelIR,
    ) -> None:
        super().__init__(primal.fn, kernel_ir)
        self.primal = primal
        self.wrt = wrt
        all_gradients = gradient_planes(primal)
        self.gradients = {name: all_gradients[name] for name in wrt}
        self.cotangents = cotangents
        self.__doc__ = f"The adjoint of hawk kernel {primal.name!r} with respect to {wrt}."

    def __repr__(self) -> str:
        return f"<hawk adjoint {self.name}({', '.join(p.name for p in self.planes)})>"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as the request that made it: :func:`vjp` of the primal (itself pickled
        by reference) with the same planes and options."""
        for (names, lane_gradients, shared, zero), adjoint in self.primal._adjoints.items():
            if adjoint is self:
                options = functools.partial(
                    vjp, lane_gradients=lane_gradients, broadcast=shared, zero_cotangents=zero
                )
                return (options, (self.primal, names))
        raise HawkTypeError(
            f"{self!r} was not made by hawk.diff.vjp; make it with vjp to pickle it"
        )


def gradient_planes(kernel: Kernel) -> dict[str, str]:
    """``{plane: gradient plane}`` for every plane of ``kernel`` a gradient can
    be taken with respect to, in declaration order: inputs, params, tables
    (``<name>_bar``) and outputs read before they are written
    (``<name>_in_bar``, the gradient of the value before the launch).

    Raises:
        TypeError: ``kernel`` is not a ``@hawk.kernel``.
    """
    _check_kernel(kernel)
    return dict(_names_of(kernel)[1])


def cotangent_planes(kernel: Kernel) -> dict[str, str]:
    """``{output: cotangent plane}`` for every ``Mutable`` plane of ``kernel``,
    in declaration order (``y`` -> ``y_bar``).

    Raises:
        TypeError: ``kernel`` is not a ``@hawk.kernel``.
    """
    _check_kernel(kernel)
    return dict(_names_of(kernel)[0])


def _names_of(kernel: Kernel) -> tuple[dict[str, str], dict[str, str]]:
    """:func:`_adjoint_names` of ``kernel``, worked out once and kept with it."""
    names = kernel._adjoint_names
    if names is None:
        names = kernel._adjoint_names = _adjoint_names(kernel.ir)
    return names


def _adjoint_names(kernel_ir: ir.KernelIR) -> tuple[dict[str, str], dict[str, str]]:
    """The names of the planes an adjoint of ``kernel_ir`` adds: each output's cotangent
    (``<name>_bar``) and each differentiable plane's gradient (``<name>_bar``; an output
    read first, ``<name>_in_bar``), in that order. A name an adjoint already takes (a
    plane it takes as it is, or one named before) gets a number after it, the first one
    free from 2 (an adjoint's adjoint of ``y = x * sin(y)`` takes ``y_bar`` and names the
    gradient of ``y`` ``y_bar2``)."""
    read_first = _read_first(kernel_ir)
    taken = {p.name for p in kernel_ir.planes if p.kind in _GIVEN or p in read_first}

    def free(name: str) -> str:
        number, chosen = 2, name
        while chosen in taken:
            chosen, number = f"{name}{number}", number + 1
        taken.add(chosen)
        return chosen

    cotangents = {p.name: free(p.name + BAR) for p in kernel_ir.planes if p.is_written}
    gradients = {
        p.name: free(p.name + (BAR if p.kind in _GIVEN else INITIAL_BAR))
        for p in kernel_ir.planes
        if p.kind in _GIVEN or p in read_first
    }
    return cotangents, gradients


def vjp(
    kernel: Kernel,
    wrt: Iterable[str] | None = None,
    *,
    lane_gradients: LaneGradients = "add",
    broadcast: Iterable[str] = (),
    zero_cotangents: Iterable[str] = (),
) -> AdjointKernel:
    """The reverse-mode (vector-Jacobian product) kernel of ``kernel``.

    Args:
        kernel: a ``@hawk.kernel``.
        wrt: the primal planes to take the gradient with respect to (names
            from :func:`gradient_planes`); None for all of them. Only these
            gradients are computed, and only their planes are taken.
        lane_gradients: ``"add"`` (the adjoint adds into every gradient
            plane) or ``"store"`` (it writes the per-lane ones, ``<x>_bar``
            of a ``Scalar`` and ``<y>_in_bar``, whatever they held; param and
            table gradients are still added into).
        broadcast: outputs (``Mutable[Scalar]`` planes) whose cotangent is one
            value for every lane: their cotangent plane is a one-element
            ``Param``.
        zero_cotangents: outputs (``Mutable`` planes) whose cotangent is
            zero: the adjoint leaves out what they contribute (their partials
            are never formed) and takes no cotangent plane for them.

    Returns:
        The adjoint kernel (the same object for the same request), whose
        planes are described in :mod:`hawk.diff`.

    Raises:
        TypeError: ``kernel`` is not a ``@hawk.kernel``.
        HawkError: ``wrt`` names no plane, or a plane that has no gradient; or
            the gradient passes through an address computed with ``int()`` of
            differentiated data.
        HawkTypeError: ``wrt``, ``broadcast`` or ``zero_cotangents`` is not a
            plane name or a list of them.
        ValueError: ``lane_gradients`` is not ``"add"`` or ``"store"``;
            ``broadcast`` names a plane that is not a ``Mutable[Scalar]``, or
            leaves the adjoint no lane plane (a kernel whose only lane planes
            are the outputs broadcast or left out); ``zero_cotangents`` names a
            plane that is not a ``Mutable`` plane, or one that ``broadcast``
            names too.
    """
    candidates = gradient_planes(kernel)
    names = _check_wrt(kernel, tuple(candidates) if wrt is None else wrt, candidates)
    check_option(lane_gradients, LaneGradients, "lane_gradients")
    shared = _check_broadcast(kernel, broadcast)
    zero = _check_zero(kernel, zero_cotangents, shared)
    key = (names, lane_gradients, shared, zero)
    adjoint = kernel._adjoints.get(key)
    if not isinstance(adjoint, AdjointKernel):
        cotangents = {
            name: bar for name, bar in cotangent_planes(kernel).items() if name not in zero
        }
        store = lane_gradients == "store"
        adjoint_ir = _build(kernel.ir, names, cotangents, candidates, store, shared, zero)
        made = AdjointKernel(kernel, names, cotangents, adjoint_ir)
        # (threads that race here all take the first one stored, as the docstring promises)
        adjoint = cast(AdjointKernel, kernel._adjoints.setdefault(key, made))
    return adjoint


def _check_kernel(kernel: object) -> None:
    if not isinstance(kernel, Kernel):
        advice = (
            ": it is a plan; pass its kernel (plan.kernel), or run the gradient with "
            "eagle.diff.reverse(plan)"
            if isinstance(getattr(kernel, "kernel", None), Kernel)
            else ""
        )
        raise HawkTypeError(
            f"hawk.diff takes a @hawk.kernel function, not {type(kernel).__name__}{advice}"
        )


def _names(option: str, value: object, choices: Iterable[str]) -> set[str]:
    """The plane names an option takes: one name, or an iterable of names (a list, a set,
    the keys of a dict such as :func:`gradient_planes`')."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, Iterable) and not isinstance(value, bytes):
        names = list(value)
        if all(isinstance(name, str) for name in names):
            return set(names)
    known = ", ".join(choices) or "none"
    raise HawkTypeError(
        f"{option} takes a plane name or a list of plane names (from {known}), not {value!r}"
    )


def _check_wrt(kernel: Kernel, wrt: Iterable[str], candidates: dict[str, str]) -> tuple[str, ...]:
    wanted = _names("wrt", wrt, candidates)
    for name in wanted:
        if name in candidates:
            continue
        planes = {p.name: p for p in kernel.planes}
        if name in planes and planes[name].kind == PlaneKind.ACCUMULATOR:
            why = (
                f"{name!r} is a table it adds into, and the gradient of its starting values "
                "is its cotangent itself, so it needs no adjoint"
            )
        elif name in planes:
            why = f"{name!r} is an output it writes without reading first"
        else:
            why = f"it has no plane {name!r}"
        raise HawkError(
            f"cannot take the gradient of kernel {kernel.name!r} with respect to {name!r}: {why}; "
            f"its differentiable planes are {', '.join(candidates) or 'none'}"
        )
    if not candidates:
        raise HawkError(
            f"kernel {kernel.name!r} has no plane to differentiate with respect to (no input, "
            "and no output it reads before writing), so it has no adjoint"
        )
    if not wanted:
        raise HawkError(
            f"vjp({kernel.name}) needs at least one plane to differentiate with respect to; "
            f"choose from {', '.join(candidates)}"
        )
    return tuple(name for name in candidates if name in wanted)


def _check_broadcast(kernel: Kernel, broadcast: Iterable[str]) -> tuple[str, ...]:
    """The outputs named in ``broadcast``, in declaration order."""
    scalars = [p.name for p in kernel.planes if p.kind == PlaneKind.OUTPUT]
    return _outputs_named(kernel, "broadcast", broadcast, scalars, "Mutable[Scalar]")


def _check_zero(
    kernel: Kernel, zero_cotangents: Iterable[str], broadcast: tuple[str, ...]
) -> tuple[str, ...]:
    """The outputs named in ``zero_cotangents``, in declaration order."""
    outputs = list(cotangent_planes(kernel))
    named = _outputs_named(kernel, "zero_cotangents", zero_cotangents, outputs, "Mutable")
    for name in named:
        if name in broadcast:
            raise HawkValueError(
                f"output {name!r} is named in both broadcast and zero_cotangents; a zero "
                "cotangent has no value to broadcast, so name it in zero_cotangents only"
            )
    return named


def _outputs_named(
    kernel: Kernel, option: str, value: Iterable[str], outputs: list[str], kind: str
) -> tuple[str, ...]:
    """The planes of ``outputs`` (each a ``kind`` plane) that option ``option`` names, in
    declaration order."""
    wanted = _names(option, value, outputs)
    for name in wanted:
        if name not in outputs:
            raise HawkValueError(
                f"{option} names {name!r}, which is not a {kind} plane of kernel "
                f"{kernel.name!r}; name some of: {', '.join(outputs) or 'none'}"
            )
    return tuple(name for name in outputs if name in wanted)


def _read_first(kernel_ir: ir.KernelIR) -> set[ir.Plane]:
    return {
        node.plane
        for node in ir.walk(kernel_ir)
        if isinstance(node, ir.Load) and node.plane.kind == PlaneKind.OUTPUT
    }


# -- building the adjoint ----------------------------------------------------------------

#: the trip count from which an adjoint that reruns a loop warns of its cost
#: (:class:`~hawk.errors.AdjointCostWarning`): (T + 1) / 2 times the forward loop, 64 times
RERUN_WARNING = 128


def _warn_cost(kernel: str, loop: ir.Loop, needs: tuple[str, ...]) -> None:
    """Warn when the reverse sweep of ``loop`` (which reruns it up to each iteration, to
    have the carried values ``needs``) is long."""
    trips = loop.trip_count
    if trips < RERUN_WARNING:
        return
    index = base_name(loop.index)
    message = (
        f"kernel {kernel!r}: the adjoint of the loop 'for {index} in range({loop.start}, "
        f"{loop.stop}, {loop.step})' reruns it up to each iteration (its gradient needs the "
        f"carried {', '.join(repr(n) for n in needs)}): about {trips * (trips + 1) // 2:,} "
        f"evaluations of the body per lane against {trips:,} forward, {(trips + 1) // 2:,} "
        "times the loop's cost; splitting the loop into k consecutive loops divides that "
        "by about k"
    )
    warnings.warn(AdjointCostWarning(message), stacklevel=_user_level())


#: the packages whose frames a warning passes over to name the user's line: hawk, and
#: those that call hawk.diff on a user's behalf (eagle.diff, an eagle.torch backward)
_LIBRARIES = frozenset(("hawk", "eagle", "torch"))


def _user_level() -> int:
    """The ``stacklevel`` of the first frame outside :data:`_LIBRARIES`, for a warning
    made by this function's caller (the last library frame when there is none)."""
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None:
        if frame.f_globals.get("__name__", "").partition(".")[0] not in _LIBRARIES:
            break
        frame, level = frame.f_back, level + 1
    return level


def _build(
    primal: ir.KernelIR,
    wrt: tuple[str, ...],
    cotangents: dict[str, str],
    gradients: dict[str, str],
    store: bool,
    broadcast: tuple[str, ...],
    zero: tuple[str, ...],
) -> ir.KernelIR:
    namer = GradientNamer(primal)  # (its names count on from the primal's own)
    body = flatten(primal.body, namer)
    # an output's Load is its value before the launch: an input of the adjoint
    loads = {
        p: ir.Plane(p.name, PlaneKind.INPUT) if p.kind == PlaneKind.OUTPUT else p
        for p in primal.planes
    }
    cotangent = {
        p: ir.Plane(cotangents[p.name], _cotangent_kind(p, broadcast), p.axes)
        for p in primal.planes
        if p.name in cotangents
    }
    gradient = {p: _gradient_plane(p, gradients[p.name]) for p in primal.planes if p.name in wrt}
    analysis = Activity(set(gradient))
    analysis.block(body)
    analysis.reaching(body)
    builder = Adjoint(primal.name, namer, analysis, loads, cotangent, gradient)
    env: dict[ir.Var, ir.Expr] = {}
    grads: dict[Key, ir.Expr] = {}
    builder.forward(body, env)
    builder.reverse(body, env, grads)
    for loop, needs in builder.reruns:
        _warn_cost(primal.name, loop, needs)
    for plane, target in gradient.items():
        if plane.kind == PlaneKind.PARAM and plane in grads:
            builder.emit(ir.Accumulate(target, (ir.Const(0),), grads[plane]))
    for plane, target in gradient.items():
        if not plane.is_lane:
            continue
        if store:  # every lane writes its gradient, zero where nothing depends on the plane
            builder.emit(ir.Store(target, grads.get(plane, ir.Const(0.0))))
        elif plane in grads:
            builder.emit(ir.Store(target, ir.Binary("+", ir.Load(target), grads[plane])))
    adjoint_body = prune(builder.out, set())
    used = {node.plane for s in adjoint_body for node in ir.walk(s) if isinstance(node, ir.Load)}
    planes = [loads[p] for p in primal.planes if p.kind in _GIVEN or loads[p] in used]
    planes += [cotangent[p] for p in primal.planes if p in cotangent]
    planes += [gradient[p] for p in primal.planes if p in gradient]
    if not any(p.is_lane for p in planes) and any(p.is_lane for p in primal.planes):
        options = [
            f"{name}={names}"
            for name, names in (("broadcast", broadcast), ("zero_cotangents", zero))
            if names
        ]
        raise HawkValueError(
            f"{' and '.join(options)} leaves the adjoint of kernel {primal.name!r} no lane "
            "plane to count its lanes by; pass one of those cotangents as one value per lane"
        )
    return ir.KernelIR(primal.name + "_vjp", tuple(planes), adjoint_body)


def _cotangent_kind(plane: ir.Plane, broadcast: tuple[str, ...]) -> PlaneKind:
    if plane.kind == PlaneKind.ACCUMULATOR:
        return PlaneKind.TABLE
    return PlaneKind.PARAM if plane.name in broadcast else PlaneKind.INPUT


def _gradient_plane(plane: ir.Plane, name: str) -> ir.Plane:
    """The gradient plane, named ``name``, of ``plane``."""
    if plane.is_lane:
        return ir.Plane(name, PlaneKind.OUTPUT)
    if plane.kind == PlaneKind.PARAM:
        return ir.Plane(name, PlaneKind.ACCUMULATOR, ((PARAM_AXIS, 1),))
    return ir.Plane(name, PlaneKind.ACCUMULATOR, plane.axes)
