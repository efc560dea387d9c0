"""The adjoint plans behind ``eagle.diff.reverse`` (the public face is :mod:`eagle.diff`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import hawk.diff
from eagle._cache import KeyedCache
from eagle.arrays import _holder
from eagle.errors import EagleTypeError, EagleValueError
from eagle.gemm.steps import Side
from eagle.plan._autoplan import AutoPlan, BoundPlan, Moves, backend_for, decide, main_side
from eagle.plan._bound import Bound, Route, Step, listed, one_place
from eagle.plan._planes import Planes, alike_keys, by_position, check_planes, layout_keys
from eagle.plan._route import dtype_reasons
from hawk.kinds import PlaneKind

__all__ = ["AdjointPlan", "AdjointSequence", "BoundAdjoint", "reverse"]


def reverse(
    plan: AutoPlan | Sequence[AutoPlan], *, accumulate: bool = True
) -> AdjointPlan | AdjointSequence:
    """The adjoint of ``plan``, or of a sequence of launches.

    Args:
        plan: an :class:`eagle.plan.AutoPlan`, or a list of them in the order
            they are launched.
        accumulate: True (the default) adds the gradients into the gradient
            planes you pass; False writes them, whatever the planes held: the
            routed products run with beta = 0, a loop adjoint stores its
            per-lane gradients, and table and param gradients, which several
            lanes add to, are zeroed first.

    Returns:
        An :class:`AdjointPlan`, or for a list an :class:`AdjointSequence`. The
        adjoints of plans of one kernel built alike share what they work out
        (adjoint kernels, routes; never a plane), so making one again, in a loop,
        costs little.

    Raises:
        TypeError: ``plan`` is not a plan or a list of plans; ``accumulate``
            is not a bool.
        ValueError: the list is empty; a plan's kernel has no plane to
            differentiate.
    """
    if not isinstance(accumulate, bool):
        raise EagleTypeError(
            f"accumulate is True (add into the gradient planes) or False (write them), not "
            f"{accumulate!r}"
        )
    if isinstance(plan, AutoPlan):
        _check_differentiable(plan)
        return AdjointPlan(plan, accumulate=accumulate)
    if isinstance(plan, list | tuple):
        if not plan:
            raise EagleValueError("eagle.diff.reverse takes a plan or a non-empty list of plans")
        for position, item in enumerate(plan):
            if not isinstance(item, AutoPlan):
                raise EagleTypeError(
                    f"launch {position} is a {type(item).__name__}, not a plan; make one with "
                    "eagle.plan.auto(kernel)"
                )
            _check_differentiable(item, f"launch {position}: ")
        return AdjointSequence(plan, accumulate=accumulate)
    advice = (
        f"; pass eagle.diff.reverse(eagle.plan.auto({plan.name}))"
        if isinstance(plan, hawk.Kernel)
        else ""
    )
    raise EagleTypeError(
        f"eagle.diff.reverse takes a plan from eagle.plan.auto(kernel) (or a list of them), not "
        f"{type(plan).__name__}{advice}"
    )


def _check_differentiable(plan: AutoPlan, where: str = "") -> None:
    """Refuse a plan whose kernel has no plane to take a gradient with respect to (read
    from the state its adjoints share: no walk of the kernel per call)."""
    if not _adjoint_state(plan).gradients:
        raise EagleValueError(
            f"{where}kernel {plan.kernel.name!r} has no plane to differentiate with respect to "
            "(no input, and no output it reads before writing), so it has no adjoint"
        )


class AdjointPlan:
    """The adjoint of one plan; made by :func:`reverse`.

    Attributes:
        primal: the :class:`eagle.plan.AutoPlan` it is the adjoint of.
        accumulate: True when it adds into the gradient planes, False when it
            writes them (see :func:`reverse`).
        gradients: ``{primal plane: gradient plane}`` for every plane a
            gradient can be taken with respect to.
        cotangents: ``{output: cotangent plane}`` for every output.
    """

    def __init__(self, primal: AutoPlan, *, accumulate: bool = True) -> None:
        self.primal = primal
        self.accumulate = accumulate
        self._shared = _adjoint_state(primal)
        self.gradients = dict(self._shared.gradients)
        self.cotangents = dict(self._shared.cotangents)
        # (flat table, its gradient plane): the adjoint's kernel cannot know their lengths
        self._flat = tuple(
            (p.name, self.gradients[p.name])
            for p in primal.kernel.planes
            if p.kind == PlaneKind.TABLE and p.axes is None and p.name in self.gradients
        )
        self._loop_plans: dict[hawk.diff.AdjointKernel, AutoPlan] = {}

    def __repr__(self) -> str:
        written = "" if self.accumulate else ", accumulate=False"
        return f"AdjointPlan({self.primal.kernel.name}{written})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (and copy) as ``reverse(primal, accumulate=...)``: built again on load."""
        return (functools.partial(AdjointPlan, accumulate=self.accumulate), (self.primal,))

    # -- routing -------------------------------------------------------------------------

    def route(self, side: Side, dtype: Any = "float32") -> str:
        """``"gemm"`` or ``"loop"``: how ``side`` runs the adjoint over planes of ``dtype``.

        Args:
            side: ``"host"`` or ``"device"``.
            dtype: the planes' dtype (or its name): float16, bfloat16, float32 or
                float64.

        Raises:
            ValueError: ``side`` is not ``"host"`` or ``"device"``, or ``dtype``
                is not a dtype hawk planes take.
        """
        return self._route(side, dtype).name

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the device adjoint does not take the GEMM route (the same for planes of
        any one dtype; for a primal built with a host backend, why the host adjoint does
        not)."""
        return self._route(main_side(self.primal), "float32").reasons

    def _route(self, side: Side, dtype: Any) -> Route:
        """The routing decision: the routed adjoint is its ``"gemm"`` outcome
        (see the module docstring)."""
        if self.primal.route(side, dtype) == "gemm":  # (which checks side and dtype)
            numbered = self._shared.numbered
            if numbered:
                return Route("loop", (_numbered_reason(self.primal.kernel.name, numbered),))
            return Route("gemm", ())
        primal = decide(self.primal, side, {p.name: dtype for p in self.primal.kernel.planes})
        return Route("loop", tuple(f"the primal runs its own loop: {r}" for r in primal.reasons))

    # -- running -------------------------------------------------------------------------

    def run(self, /, *arrays: Any, **planes: Any) -> None:
        """Add the gradients into the gradient planes passed (one keyword per plane), or
        write them there when made with ``accumulate=False``.

        On the host it returns when the gradients are in your arrays; on the
        device it enqueues on eagle's current stream and returns. An adjoint
        that runs its own loop keeps its bindings as
        :meth:`eagle.plan.AutoPlan.run` does (the last four, over the planes'
        addresses): a repeated run over the same planes only launches.

        Raises:
            TypeError: no gradient plane passed; an unknown, missing or
                misplaced plane (an output instead of its cotangent); a plane
                that is not an array or has a dtype hawk planes do not take;
                arrays passed by position.
            ValueError: as :meth:`eagle.plan.AutoPlan.run` (residency, shapes,
                lane counts, overlapping planes).
            hawk.HawkError: a requested gradient passes through an address
                computed with ``int()`` of data it is taken with respect to.
        """
        if arrays:
            raise self._by_position("adjoint.run", len(arrays))
        kernel = self._kernel_for(planes, self.accumulate)
        if self._routes() or (not self.accumulate and _shared_gradients(kernel)):
            # launched at once and dropped: no side streams to prepare for a capture
            BoundAdjoint([self._bind(planes, self.accumulate, set())], sides=False).launch()
            return
        # the adjoint's own loop: its plan keeps its bindings, as AutoPlan.run does
        self._check_names(kernel, planes)
        self._check_flat(planes)
        self._loop_plan(kernel).run(**planes)

    def bind(self, /, *arrays: Any, **planes: Any) -> BoundAdjoint:
        """Prepare the adjoint over ``planes`` (compile, pack arguments), so
        that :meth:`BoundAdjoint.launch` only enqueues work.

        Raises:
            TypeError, ValueError, hawk.HawkError: as :meth:`run`.
        """
        if arrays:
            raise self._by_position("adjoint.bind", len(arrays))
        return BoundAdjoint([self._bind(planes, self.accumulate, set())])

    def _by_position(self, call: str, count: int) -> EagleTypeError:
        """The refusal of arrays passed by position, naming the planes the adjoint takes."""
        names = [p.name for p in hawk.diff.vjp(self.primal.kernel).planes]
        return by_position(call, names, count)

    def _bind(self, planes: Mapping[str, Any], add: bool, zero: set[str]) -> _Part:
        """The adjoint over ``planes``, adding into its gradient planes (``add``) or
        writing them; ``zero``: gradient planes to zero first (an adding step of a
        sequence that writes)."""
        kernel = self._kernel_for(planes, add)
        self._check_names(kernel, planes)
        self._check_flat(planes)
        bound = self._bind_routed(kernel, planes, add)  # products with beta = 0 write
        if bound is None:
            bound = self._loop_plan(kernel).bind(**planes)
            if not add:  # what several lanes add to is zeroed first
                zero = zero | _shared_gradients(kernel)
        elif not add:  # the products write their operands' gradients; the others are zero
            zero = zero | self._beside_products(kernel)
        return _Part(bound, _zero_fills(kernel, planes, zero) if zero else ())

    def _bind_routed(
        self, kernel: hawk.diff.AdjointKernel, planes: Mapping[str, Any], add: bool
    ) -> BoundPlan | None:
        """The gradient products over ``planes`` when they take the GEMM route, else None
        (added into the gradient planes with beta = 1, or written with beta = 0)."""
        if not self._routes():
            return None  # decided by the kernel and policy alone: no need to look at planes
        names = tuple(p.name for p in kernel.planes)
        keys = layout_keys(planes, names)
        alike = alike_keys(keys)
        kept = None if alike is None else self._shared.moves.get((names, add, alike))
        if kept is not None:
            assert keys is not None  # (alike keys are made of them)
            bound = kept.move(self.primal, planes, keys, detach=False)
            if bound is not None:
                return bound
        checked = check_planes(kernel.ir, planes)
        side = checked.side
        key = (side, checked.signature, checked.lanes)
        routed = self._shared.routed.get(key)
        if routed is None:
            routed = self._decide(kernel, checked)
            self._shared.routed[key] = routed
        if not routed:
            return None
        backend = backend_for(self.primal, side)
        steps = backend.bind_products(
            self.primal, checked, direction="adjoint", kernel=kernel.ir, accumulate=add
        )
        route = Route("gemm", ())
        if alike is not None and all(step.move is not None for step in steps):
            self._shared.moves[(names, add, alike)] = Moves.of(kernel.ir, checked, steps, route)
        return BoundPlan(self.primal, checked, steps, route)

    def _decide(self, kernel: hawk.diff.AdjointKernel, checked: Planes) -> bool:
        """Whether the adjoint over ``checked`` planes takes the GEMM route: planes of one
        dtype over which the primal routes, with its lane count."""
        names = [p.name for p in kernel.planes]
        dtypes = dict(zip(names, (np.dtype(d) for d in checked.signature), strict=True))
        if self._shared.numbered or dtype_reasons(dtypes, math=self.primal.policy.math):
            return False  # numbered planes, or planes of mixed dtypes: the loop
        dtype = next(iter(dtypes.values()))
        primal_dtypes = {p.name: dtype for p in self.primal.kernel.planes}
        return decide(self.primal, checked.side, primal_dtypes, checked.lanes).name == "gemm"

    def _routes(self) -> bool:
        """Whether the adjoint may take the GEMM route at all (by the primal's kernel and
        policy, on its main side): else it runs its own loop whatever the planes."""
        shared = self._shared
        if shared.routes_at_all is None:
            shared.routes_at_all = self.route(main_side(self.primal)) == "gemm"
        return shared.routes_at_all

    def _kernel_for(self, planes: Mapping[str, Any], add: bool) -> hawk.diff.AdjointKernel:
        """The adjoint kernel for the gradient planes in ``planes``: adding into its
        per-lane gradient planes (``add``) or storing them."""
        wrt = tuple(name for name, gradient in self.gradients.items() if gradient in planes)
        kernel = self._shared.kernels.get((wrt, add))
        if kernel is not None:
            return kernel
        if not wrt:
            choices = ", ".join(self.gradients.values()) or "it has none"
            known = {
                *(p.name for p in self.primal.kernel.planes),
                *self.cotangents.values(),
                *self.gradients.values(),
            }
            unknown = [name for name in planes if name not in known]
            if unknown:  # a misspelt gradient plane, say
                raise EagleTypeError(
                    f"unknown plane {unknown[0]!r} for the adjoint of kernel "
                    f"{self.primal.kernel.name!r}; its gradient planes are {choices}"
                )
            raise EagleTypeError(
                f"pass at least one gradient plane for the adjoint of kernel "
                f"{self.primal.kernel.name!r} ({choices}); the adjoint "
                f"{'adds into' if self.accumulate else 'writes'} the ones you pass"
            )
        kernel = self._shared.kernels[(wrt, add)] = hawk.diff.vjp(
            self.primal.kernel, wrt, lane_gradients="add" if add else "store"
        )
        return kernel

    def _check_names(self, kernel: hawk.diff.AdjointKernel, planes: Mapping[str, Any]) -> None:
        gradients = set(self.gradients.values())
        takes = [p.name for p in kernel.planes if p.name not in gradients]
        if {p.name for p in kernel.planes}.issuperset(planes) and all(
            plane in planes for plane in takes
        ):
            return  # (the messages below are made only when a name is wrong)
        name = self.primal.kernel.name
        summary = (
            f"the adjoint of {name!r} takes {', '.join(takes)} and the gradient planes you want "
            f"from {', '.join(self.gradients.values())}"
        )
        outputs = {p.name for p in self.primal.kernel.planes if p.is_written}
        for given in planes:
            if any(p.name == given for p in kernel.planes):
                continue
            if given in outputs:
                raise EagleTypeError(
                    f"plane {given!r} is an output of kernel {name!r}: its adjoint recomputes "
                    f"what it needs and does not read it; pass its cotangent "
                    f"{self.cotangents[given]!r}"
                )
            raise EagleTypeError(f"unknown plane {given!r}: {summary}")
        missing = [plane for plane in takes if plane not in planes]
        if missing:
            notes = [
                f"{plane!r} is the value output {plane!r} held before the forward launch"
                for plane in missing
                if plane in outputs
            ]
            note = f" ({'; '.join(notes)})" if notes else ""
            raise EagleTypeError(
                f"missing plane(s) {', '.join(map(repr, missing))}{note}: {summary}"
            )

    def _beside_products(self, kernel: hawk.diff.AdjointKernel) -> set[str]:
        """The gradient planes of ``kernel`` no routed product writes: those of planes the
        contraction does not read (a plane declared and left unused), whose gradient is
        zero."""
        record = self.primal.record
        assert record is not None  # (the adjoint routes only where the primal does)
        products = {self.gradients[o.name] for o in record.operands if o.name in self.gradients}
        return set(kernel.gradients.values()) - products

    def _check_flat(self, planes: Mapping[str, Any]) -> None:
        """Refuse a flat table's gradient plane whose size is not the table's."""
        for table, gradient in self._flat:
            have = getattr(planes.get(gradient), "shape", None)
            want = getattr(planes.get(table), "shape", None)
            if have is not None and want is not None and math.prod(have) != math.prod(want):
                raise EagleValueError(
                    f"gradient plane {gradient!r} has {math.prod(have)} elements, but table "
                    f"{table!r} has {math.prod(want)}: pass a gradient plane of the table's size"
                )

    def _loop_plan(self, kernel: hawk.diff.AdjointKernel) -> AutoPlan:
        plan = self._loop_plans.get(kernel)
        if plan is None:
            # the adjoint's route is decided here: its kernel runs its loop
            plan = self._loop_plans[kernel] = AutoPlan(
                kernel,
                contraction="loop",
                adds=self.primal.policy.adds,
                backend=self.primal.backend,
                int_overflow=self.primal.policy.int_overflow,  # as the primal's ints
            )
        return plan


def _numbered_reason(kernel: str, numbered: tuple[str, ...]) -> str:
    return (
        f"hawk.diff numbered planes of the adjoint of kernel {kernel!r} ({', '.join(numbered)}: "
        "a plane of the kernel takes the plain name), which the routed products, named "
        "<plane>_bar, do not take; rename that plane of the kernel to route the adjoint"
    )


class _AdjointShared:
    """What the adjoints of the plans of one kernel built under one policy for one backend
    share, none of it holding a plane (so ``eagle.diff.reverse(plan).run(...)`` in a loop
    works nothing out again): the gradient and cotangent planes, the adjoint kernel of
    each set of gradients asked for, added or stored (``hawk.diff.vjp``'s own cache is
    reached only after it works out the kernel's gradient planes again), whether the
    adjoint routes at all, whether it routes over bound planes, by (side, signature,
    lanes), and what its routed binds keep for planes laid out alike (:class:`Moves`)."""

    def __init__(self, kernel: hawk.Kernel) -> None:
        self.gradients = hawk.diff.gradient_planes(kernel)
        self.cotangents = hawk.diff.cotangent_planes(kernel)
        # the adjoint's planes that hawk.diff numbered (x_bar2: the kernel has a plane x_bar),
        # which the routed products, named <plane>_bar, cannot take
        self.numbered = tuple(
            name for name in (*self.cotangents.values(), *self.gradients.values())
            if not name.endswith("_bar")
        )  # fmt: skip
        self.kernels: dict[tuple[tuple[str, ...], bool], hawk.diff.AdjointKernel] = {}
        self.routes_at_all: bool | None = None
        self.routed: KeyedCache[tuple[str, tuple[str, ...], int], bool] = KeyedCache(
            "adjoint routes", _ROUTES
        )
        # what a routed bind keeps for planes laid out alike, by the adjoint kernel's planes,
        # whether it adds, and the planes' alike keys
        self.moves: KeyedCache[tuple[Any, ...], Moves] = KeyedCache("adjoint moves", _MOVES)


#: the route decisions over bound planes an adjoint's shared state keeps
_ROUTES = 64
#: layouts whose routed binds an adjoint's shared state moves to other addresses
_MOVES = 16


def _adjoint_state(primal: AutoPlan) -> _AdjointShared:
    """The state the adjoints of plans like ``primal`` share, kept on its kernel
    (``kernel.runtime``, beside the plans' own), so it goes with the kernel."""
    key = ("eagle.diff", *primal._shared.key[1:])
    runtime = primal.kernel.runtime
    state = runtime.get(key)
    if state is None:
        state = runtime[key] = _AdjointShared(primal.kernel)
    return state


@dataclass(frozen=True)
class _Part:
    """One launch's bound adjoint and the fills that zero gradient planes before it."""

    bound: BoundPlan
    fills: tuple[Step, ...]


def _shared_gradients(kernel: hawk.diff.AdjointKernel) -> set[str]:
    """The gradient planes of ``kernel`` that several lanes add to (a table's or a
    param's): an adjoint that writes its gradients zeroes these first."""
    lane_planes = {p.name for p in kernel.planes if p.is_lane}
    return {name for name in kernel.gradients.values() if name not in lane_planes}


def _zero_fills(
    kernel: hawk.diff.AdjointKernel, planes: Mapping[str, Any], names: set[str]
) -> tuple[Step, ...]:
    """A step per plane of ``names`` in ``planes`` that fills it with zeros (stream-ordered
    and legal inside a capture on a device; saved for an all-or-nothing run on the host)."""
    checked = check_planes(kernel.ir, planes)
    fills = []
    for name in sorted(names & checked.values.keys()):
        value = checked.values[name]
        if checked.side == "host":
            fills.append(Step(functools.partial(_fill_host, value), written=(value,)))
        else:
            fills.append(Step(functools.partial(_fill_device, value), planes=(value,)))
    return tuple(fills)


def _memory(value: Any) -> tuple[int, int] | None:
    """Where an array's elements lie (address and size), read without taking it (no
    stream, no copy), or None for what is not an array (binding then refuses it by name)."""
    try:
        layout = _holder.describe(value)
    except (TypeError, ValueError):
        return None
    if layout is None:
        return None
    return layout.ptr, layout.dtype.itemsize * math.prod(layout.shape)


def _refuse_partial(
    gradients: Mapping[str, tuple[int, int]], reached: set[tuple[int, int]], position: int
) -> None:
    """Refuse a gradient plane that shares part, not all, of the memory of a gradient plane
    an adjoint run earlier writes: writing it whole would drop what that adjoint wrote, and
    adding into it would keep what was there before."""
    for name, (start, size) in gradients.items():
        for begun, length in reached:
            if (start, size) != (begun, length) and start < begun + length and begun < start + size:
                raise EagleValueError(
                    f"launch {position}: gradient plane {name!r} shares part of its memory "
                    "with a gradient plane of a later launch, whose adjoint runs first; with "
                    "accumulate=False pass each launch the same array or memory of its own, "
                    "or use accumulate=True (every adjoint adds) over zeroed planes"
                )


def _fill_host(array: np.ndarray, _stream: None) -> None:
    array.fill(0)


def _fill_device(array: Any, stream: Any) -> None:
    array.fill(0, stream)


class AdjointSequence:
    """The adjoint of a sequence of launches; made by ``reverse([plan, ...])``.

    Its methods take one mapping of planes per launch, in the order the
    launches ran forward; the adjoints run in reverse order.

    Attributes:
        primals: the plans, in forward order.
        steps: their :class:`AdjointPlan`, in the order they run (reversed).
    """

    def __init__(self, plans: Sequence[AutoPlan], *, accumulate: bool = True) -> None:
        self.primals = tuple(plans)
        self.accumulate = accumulate
        self.steps = tuple(
            AdjointPlan(plan, accumulate=accumulate) for plan in reversed(self.primals)
        )

    def __repr__(self) -> str:
        written = "" if self.accumulate else ", accumulate=False"
        return f"AdjointSequence({listed([s.primal.kernel.name for s in self.steps])}{written})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (and copy) as ``reverse(primals, accumulate=...)``: built again on load."""
        return (functools.partial(AdjointSequence, accumulate=self.accumulate), (self.primals,))

    def route(self, side: Side, dtype: Any = "float32") -> tuple[str, ...]:
        """Each step's route on ``side`` for planes of ``dtype``, in the order the steps run.

        Raises:
            ValueError: ``side`` is not ``"host"`` or ``"device"``, or ``dtype``
                is not a dtype hawk planes take.
        """
        return tuple(step.route(side, dtype) for step in self.steps)

    @property
    def reasons(self) -> tuple[tuple[str, ...], ...]:
        """Each step's :attr:`AdjointPlan.reasons`, in the order the steps run."""
        return tuple(step.reasons for step in self.steps)

    def run(self, *launches: Mapping[str, Any]) -> None:
        """Run the adjoints of every launch, the last launch's first.

        Made with ``accumulate=False``, each gradient plane ends holding the
        gradient of the whole sequence: the first adjoint to reach a plane
        writes it and later ones add into it.

        Args:
            launches: one mapping of planes per launch, in forward order (as
                for :meth:`AdjointPlan.run`).

        Raises:
            TypeError: not one mapping per launch; or as :meth:`AdjointPlan.run`,
                naming the launch.
            ValueError: launches on different sides or devices; or as
                :meth:`AdjointPlan.run`, naming the launch.
        """
        self._bind_launches(launches, sides=False).launch()  # launched at once and dropped

    def bind(self, *launches: Mapping[str, Any]) -> BoundAdjoint:
        """Prepare every launch's adjoint; :meth:`BoundAdjoint.launch` runs them in order.

        Raises:
            TypeError, ValueError, hawk.HawkError: as :meth:`run`.
        """
        return self._bind_launches(launches, sides=True)

    def _bind_launches(self, launches: Sequence[Mapping[str, Any]], *, sides: bool) -> BoundAdjoint:
        """:meth:`bind`; ``sides``: prepare the side streams a captured launch forks onto."""
        first = launches[0] if launches else None
        if isinstance(first, list | tuple) and all(isinstance(p, Mapping) for p in first):
            raise EagleTypeError(
                f"launches: pass one mapping of planes per launch, each as its own argument "
                f"(unpack a list with *launches), not one {type(first).__name__} of them"
            )
        if len(launches) != len(self.primals):
            raise EagleTypeError(
                f"pass one mapping of planes per launch: {len(self.primals)} launch(es), "
                f"{len(launches)} given"
            )
        parts: list[_Part] = []
        reached: set[tuple[int, int]] = set()  # the memory of the gradient planes so far
        read = self._forward_values(launches)
        for step, position in zip(self.steps, reversed(range(len(launches))), strict=True):
            planes = launches[position]
            if not isinstance(planes, Mapping):
                raise EagleTypeError(
                    f"launch {position}: pass its planes as a mapping (a dict of name -> array), "
                    f"not {type(planes).__name__}"
                )
            try:
                gradients = {
                    name: memory
                    for name in step.gradients.values()
                    if name in planes and (memory := _memory(planes[name])) is not None
                }
                _refuse_read(gradients, read, position)
                if self.accumulate:
                    parts.append(step._bind(planes, True, set()))
                else:
                    _refuse_partial(gradients, reached, position)
                    if reached.isdisjoint(gradients.values()):
                        parts.append(step._bind(planes, False, set()))
                    else:  # a plane an earlier adjoint wrote: add, the new planes zeroed first
                        fresh = {n for n, memory in gradients.items() if memory not in reached}
                        parts.append(step._bind(planes, True, fresh))
                reached.update(gradients.values())
            except (TypeError, ValueError) as exc:
                exc.add_note(f"in launch {position} ({step.primal.kernel.name}) of the adjoint")
                raise
        return BoundAdjoint(parts, sides=sides)

    def _forward_values(
        self, launches: Sequence[Mapping[str, Any]]
    ) -> list[tuple[int, str, tuple[int, int]]]:
        """(launch, plane, memory) of each array the launches take as the forward's values:
        every plane but the gradients and the cotangents, which no adjoint may write."""
        read = []
        for step, position in zip(self.steps, reversed(range(len(launches))), strict=True):
            planes = launches[position]
            if not isinstance(planes, Mapping):
                continue  # (refused by name when its launch is bound)
            adjoint = {*step.gradients.values(), *step.cotangents.values()}
            for name, value in planes.items():
                if name not in adjoint:
                    memory = _memory(value)
                    if memory is not None and memory[1]:
                        read.append((position, name, memory))
        return read


def _refuse_read(
    gradients: Mapping[str, tuple[int, int]],
    read: Sequence[tuple[int, str, tuple[int, int]]],
    position: int,
) -> None:
    """Refuse a gradient plane of launch ``position`` that shares memory with a plane a
    launch whose adjoint runs later (this one, or an earlier launch) takes as the
    forward's values: that adjoint would read what this one wrote."""
    for name, (start, size) in gradients.items():
        for launch, plane, (begun, length) in read:
            if launch <= position and size and start < begun + length and begun < start + size:
                raise EagleValueError(
                    f"launch {position}: gradient plane {name!r} shares memory with plane "
                    f"{plane!r} of launch {launch}, whose adjoint runs later and reads it as "
                    "the forward's values; give the gradient plane memory of its own (a "
                    "chain connects launches through a cotangent, as a gradient plane of "
                    "the later launch)"
                )


class BoundAdjoint(Bound):
    """An adjoint bound to its planes: the launches it enqueues, in order.

    A host launch is all or nothing over every step: if one raises, every
    plane is as it was before the first.

    Attributes:
        steps: the bound launches (:class:`eagle.plan.BoundPlan`), in the order
            they run.
        side: ``"host"`` or ``"device"``.
        device: the device index, or None on the host.
    """

    _what = "adjoint"

    def __init__(self, parts: Sequence[_Part], *, sides: bool = True) -> None:
        self.steps = tuple(part.bound for part in parts)
        names = [step.plan.kernel.name for step in self.steps]
        side, device = one_place(self.steps, names, "every launch's planes")
        work = [item for part in parts for item in (*part.fills, *part.bound._steps)]
        # one launch alone: its own steps, whose branch plan it knows (a moved one, kept)
        alone = len(parts) == 1 and not parts[0].fills
        branches = parts[0].bound._branches if alone else None
        super().__init__(side, device, work, sides=sides, branches=branches)

    def __repr__(self) -> str:
        names = listed([step.plan.kernel.name for step in self.steps])
        return f"BoundAdjoint({names}, side={self.side!r})"
