"""AutoPlan and BoundPlan: a hawk kernel's plan, bound to planes and launched or run
(the public face is :mod:`eagle.plan`).

A plan runs on one backend per side (:mod:`eagle.plan._backends`): it checks
the planes, decides the route (:func:`decide`), and has the side's backend
bind the kernel's own loop or the recognised contraction's products.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import hawk
from eagle._cache import KeyedCache
from eagle.cuda.graph import any_capture_active
from eagle.cuda.stream import launch_stream
from eagle.errors import EagleValueError, check_option
from eagle.plan import _route as gemm_route
from eagle.plan._backends import DEFAULTS, Backend, Side, backend_named
from eagle.plan._bound import Bound, Placement, Route, Step, branch_plan
from eagle.plan._planes import (
    Planes,
    alike_keys,
    by_position,
    check_planes,
    detached,
    extents,
    layout_keys,
    moved,
    not_a_kernel,
    param_number,
)
from hawk import ir
from hawk.contraction import lane_layout, recognize
from hawk.dtypes import PLANE_DTYPES, Float32Math, numpy_dtype, plane_row
from hawk.emit import policy
from hawk.emit.checks import IntOverflow
from hawk.emit.policy import Contraction, Policy, TableAdds
from hawk.errors import HawkValueError

__all__ = ["AutoPlan", "BoundPlan", "Moves", "auto", "backend_for", "decide", "main_side"]

#: bindings :meth:`AutoPlan.run` keeps for reuse (a host one with the arrays it is bound to)
_REUSED_BINDINGS = 4
#: routes the plans of one kernel and options keep, by their bound planes' side,
#: signature and lane count
_ROUTES = 16
#: bindings over address views the plans of one kernel and options share
_SHARED_BINDINGS = 16
#: layouts whose bindings the plans of one kernel and options move to other addresses
_MOVES = 16


def auto(
    kernel: hawk.Kernel,
    *,
    contraction: Contraction | None = None,
    math: Float32Math | None = None,
    host_route: Contraction | None = None,
    adds: TableAdds | None = None,
    backend: str | None = None,
    int_overflow: IntOverflow | None = None,
) -> AutoPlan:
    """A plan that runs ``kernel`` on the host or the device, by where its planes are.

    Args:
        kernel: a ``@hawk.kernel`` function.
        contraction: ``"gemm"`` lets a kernel that is one dense two-operand
            contraction run as one cuBLAS product on the device; ``"loop"``
            always runs the kernel's own loop. None (the default) takes the
            policy current when the plan is built, :func:`hawk.emit.policy.current`
            (``"loop"`` unless inside ``hawk.emit.policy.using(...)``).
        math: how a routed product over float32 planes sums: ``"fp32"``
            (exact) or ``"tf32"`` (TF32 tensor cores); other dtypes ignore it.
            None takes the current policy's (``"fp32"`` unless inside
            ``hawk.emit.policy.using(math=...)``).
        host_route: ``"gemm"`` runs a routed contraction on the host as one
            numpy product (with ``contraction="gemm"``); ``"loop"`` or None
            (the default) keeps the host on the kernel's own loop.
        adds: where the device sums the kernel's adds into a small table:
            ``"shared"`` in a copy per block in shared memory (refused for a
            table that cannot be), ``"global"`` as global atomics, ``"auto"``
            in shared memory when the table and the lanes qualify
            (:mod:`hawk.emit.private`), ``"deterministic"`` in shared memory in
            an order fixed by the lane count (the same bits every run). None
            (the default) is ``"auto"``.
        backend: the backend that runs the kernel, by name: ``"numpy"`` (host
            arrays), ``"cuda"`` (device arrays) or ``"reference"`` (host arrays, a
            lane at a time in plain Python, for debugging: ``hm.debug_print`` and
            ``hm.breakpoint`` act there alone); the plan then takes planes on that
            backend's side only. None (the default) picks by where the
            planes are: numpy for host arrays, CUDA for device arrays.
        int_overflow: ``"wrap"``: an int value beyond int64 wraps, two's
            complement, on every backend; ``"check"``: a run raises
            ``hawk.errors.HawkOverflowError`` naming the expression and the first
            lane. None takes the current policy's (``"wrap"`` unless inside
            ``hawk.emit.policy.using(int_overflow=...)``).

    Raises:
        TypeError: ``kernel`` is not a ``@hawk.kernel``.
        ValueError: ``contraction`` is not ``"loop"``, ``"gemm"`` or None;
            ``math`` not ``"fp32"``, ``"tf32"`` or None; ``host_route`` not
            ``"loop"``, ``"gemm"`` or None; ``adds`` not ``"auto"``, ``"shared"``,
            ``"global"``, ``"deterministic"`` or None; ``backend`` not a registered
            backend's name or None; ``int_overflow`` not ``"wrap"``, ``"check"`` or None.
    """
    return AutoPlan(
        kernel,
        contraction=contraction,
        math=math,
        host_route=host_route,
        adds=adds,
        backend=backend,
        int_overflow=int_overflow,
    )


class AutoPlan:
    """A hawk kernel ready to run; made by :func:`auto`.

    Attributes:
        kernel: the hawk kernel.
        policy: the :class:`hawk.emit.policy.Policy` it was built under.
        record: the :class:`~eagle.gemm.contraction.RecognizedContraction` the
            kernel computes (:func:`hawk.contraction.recognize`), or None.
        backend: the name of the backend it was built for, or None when it
            picks one by where the planes are.
    """

    def __init__(
        self,
        kernel: hawk.Kernel,
        *,
        contraction: Contraction | None = None,
        math: Float32Math | None = None,
        host_route: Contraction | None = None,
        adds: TableAdds | None = None,
        backend: str | None = None,
        int_overflow: IntOverflow | None = None,
    ) -> None:
        if not isinstance(kernel, hawk.Kernel):
            raise not_a_kernel("eagle.plan.auto", kernel)
        chosen: dict[str, Any] = {
            key: value
            for key, value in (
                ("contraction", contraction),
                ("math", math),
                ("host_route", host_route),
                ("int_overflow", int_overflow),
                ("adds", adds),
            )
            if value is not None
        }
        if backend is not None:
            backend_named(backend)  # a registered name, before it keys the shared state
        current = policy.current()
        try:
            built = replace(current, **chosen) if chosen else current
        except HawkValueError as exc:  # an option outside its vocabulary: eagle's refusal
            raise EagleValueError(str(exc)) from None
        self._setup(kernel, built, backend)

    def _setup(self, kernel: hawk.Kernel, built: Policy, backend: str | None) -> None:
        """Take what plans of ``kernel`` built under ``built`` for ``backend`` share."""
        shared = _shared_state(kernel, built, backend)
        self.kernel = kernel
        self.policy = built
        self.backend = backend
        self.record = shared.record
        self._shared = shared
        self._backends = shared.backends  # the backend of each side the plan runs on
        self._layout = shared.layout
        self._names = shared.names
        self._routes = shared.routes
        # the bindings run keeps for reuse, by their planes' layout keys
        self._bindings: KeyedCache[tuple[Any, ...], BoundPlan] = KeyedCache(
            "plan bindings", _REUSED_BINDINGS
        )

    def __repr__(self) -> str:
        extra = "".join(
            f", {key}={getattr(self.policy, key)!r}"
            for key, default in (
                ("math", "fp32"),
                ("host_route", "loop"),
                ("int_overflow", "wrap"),
                ("adds", "auto"),
            )
            if getattr(self.policy, key) != default
        )
        if self.backend is not None:
            extra += f", backend={self.backend!r}"
        return f"AutoPlan({self.kernel.name}, contraction={self.policy.contraction!r}{extra})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (and copy) as what makes the plan: its kernel (by reference, as a
        function), its policy and its backend; it is built again on load, with nothing
        bound."""
        policy = self.policy
        build = functools.partial(
            AutoPlan,
            contraction=policy.contraction,
            math=policy.math,
            host_route=policy.host_route,
            adds=policy.adds,
            backend=self.backend,
            int_overflow=policy.int_overflow,
        )
        return (build, (self.kernel,))

    # -- routing -------------------------------------------------------------------------

    def route(self, side: Side, dtype: Any = "float32") -> str:
        """``"gemm"`` or ``"loop"``: how ``side`` runs the kernel over planes of ``dtype``.

        dtypes come from the arrays at run time, so name the one you mean
        (float32 by default): the device routes planes of any one of
        bfloat16, float16, float32 and float64; the host runs the kernel's
        loop unless the plan was built with ``host_route="gemm"``. A bound
        plan's ``route`` (:class:`BoundPlan`) says what it does with its own planes.

        Args:
            side: ``"host"`` or ``"device"``.
            dtype: the planes' dtype (or its name): any dtype hawk planes take
                (``hawk.dtypes.PLANE_DTYPES``; the fp8 ones and those the device does not
                route give ``"loop"``).

        Raises:
            ValueError: ``side`` is not ``"host"`` or ``"device"`` (or, for a plan
                built with ``backend=``, not its backend's side), or ``dtype`` is
                not a dtype hawk planes take.
        """
        resolved = _side_dtype(side, dtype)
        return decide(self, side, {name: resolved for name in self._names}).name

    def source(self, side: Side, dtype: Any = "float32") -> str:
        """The program ``side`` runs for the kernel over planes of ``dtype``.

        ``"host"`` gives the generated numpy program (Python source),
        ``"device"`` the generated CUDA C (what NVRTC compiles for fewer than
        2**31 lanes, the ints proved to fit 32 bits written as ``int``), with
        every Param a pointer to its one element, as for a Param given as an
        array (one given as a number is passed by value instead: a ``const
        float v_<name>`` parameter, ``hawk.emit.cuda.emit(..., values=...)``). Where the
        side takes the GEMM route (:meth:`route`) it gives the products that run
        instead, one line each (``y = f.T @ w``, numpy's on the host, cuBLAS's on the
        device, naming the cuBLAS function).

        Args:
            side: ``"host"`` or ``"device"``.
            dtype: the planes' dtype (float32 when left out): any dtype
                :meth:`route` takes.

        Raises:
            ValueError: as :meth:`route`.
        """
        resolved = _side_dtype(side, dtype)
        if self.route(side, resolved) == "gemm":
            assert self.record is not None
            return gemm_route.products_source(
                self.kernel.name, self.record, side, resolved.name, self.policy.math
            )
        signature = tuple(resolved.name for _ in self._names)
        backend = backend_for(self, side)
        return backend.emit(self.kernel, signature, int_overflow=self.policy.int_overflow).source

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the device does not take the GEMM route, or an empty tuple when it does
        (for a plan built with a host backend, why the host does not).

        Planes of any one of the dtypes hawk takes route alike, so these hold for
        each; planes of mixed dtypes keep the loop (a bound plan's ``reasons`` say so).
        """
        dtypes = {name: gemm_route.ROUTE_DTYPE for name in self._names}
        return decide(self, main_side(self), dtypes).reasons

    @functools.cached_property
    def _kernel_reasons(self) -> tuple[str, ...]:
        return gemm_route.kernel_reasons(self.record, self._layout)

    # -- running -------------------------------------------------------------------------

    def run(self, /, *arrays: Any, **planes: Any) -> None:
        """Run the kernel once over ``planes`` (one keyword per kernel plane).

        On the host it returns when the results are in your arrays; if it
        raises, every plane is as it was. On the device it enqueues (on the
        stream :meth:`BoundPlan.stream` names) and returns.

        The plan keeps its last four bindings and reuses one, on any stream,
        when every plane has the same address, shape, strides, dtype and
        device as then: a repeated run skips the checks and the preparation,
        and a Param given as a number is packed into the bound launch's
        arguments (on the device it is passed by value: no allocation, no
        memset, no synchronisation, legal inside a capture, which keeps the
        number it records). A binding is made over the planes' addresses and
        keeps no array alive; plans of the same kernel built with the same
        options share such bindings, so ``eagle.plan.auto(kernel).run(...)``
        in a loop binds once. Inside an eagle capture a run binds the arrays
        themselves, which the graph then keeps.
        :func:`eagle.clear_caches` drops the kept bindings.

        Raises:
            TypeError: an unknown or missing plane, not an array, or a dtype
                hawk planes do not take; arrays passed by position.
            ValueError: mixed residency, a wrong shape or lane count, a
                non-contiguous, null or misaligned array, a written plane that is
                read-only or a torch tensor that requires grad (pass ``.detach()``
                of it, or use ``eagle.torch.function``), overlapping outputs, or
                planes on a side the plan's backend does not run on.
            OverflowError: a Param number too large for the kernel's dtype.
            hawk.PlaneIndexError: (the kernel's loop) a table index of the lane
                and loop indices is out of range for some lane (checked before
                anything runs); on the host, any index out of range. On the device
                other indices raise at a later synchronizing call (see
                :doc:`the hawk guide </hawk>`).
            ZeroDivisionError, ValueError, OverflowError: on the host, a kernel's
                own check failed (an int ``//`` or ``%`` by zero, ``int()`` of NaN or
                inf, a negative int exponent, an int overflow under
                ``int_overflow="check"``); on the device, at a later synchronizing call.
        """
        if arrays:
            raise by_position("plan.run", self._names, len(arrays))
        # (planes on two sides or two devices have keys too: binding them raises, so no
        # binding is ever kept under such keys)
        key = layout_keys(planes, self._names)
        if key is None:
            self.bind(**planes).launch()
            return
        bindings = self._bindings
        last = bindings.last
        if last is not None and last[0] == key:  # the binding the last run used
            bound, reused = last[1], True
            bindings.hits += 1
        else:
            bound, reused = self._reused(key, planes)
        if bound._detached and bound.side == "device" and any_capture_active():
            # a graph keeps the arrays it uses (host runs are never recorded)
            bound, reused = self._bind(planes), False
        foreign = bound._foreign  # planes from torch, CuPy...: the objects given count
        if foreign is not None and reused and foreign.watched:
            foreign.order(planes, bound.stream)  # after what their producers queued since
        if not bound._setters:  # fixed arguments: an enqueue on any stream, or a host run
            bound.launch()
        else:
            with bound._lock:  # another thread may be giving the binding its numbers
                if reused:
                    bound._set_numbers(planes)
                bound.launch()  # (a launch copies its arguments: a later set leaves it alone)
        if foreign is not None and foreign.written:
            foreign.bump(planes)  # torch tensors written: their versions go up

    def _reused(self, key: tuple[Any, ...], planes: Mapping[str, Any]) -> tuple[BoundPlan, bool]:
        """The binding kept under ``key`` (now the most recent), or a new one kept there;
        and whether it was kept."""
        bound = self._bindings.get(key)
        if bound is not None:
            return bound, True
        shared = self._shared.bindings
        bound = shared.get(key)  # another plan's of this kernel, policy and backend
        if bound is not None:
            self._bindings[key] = bound
            return bound, True
        bound = self._bindings[key] = self._bind(planes, detach=True, keys=key)
        if bound._detached:
            shared[key] = bound
        return bound, False

    def bind(self, /, *arrays: Any, **planes: Any) -> BoundPlan:
        """Prepare a launch over ``planes``: check them, compile, pack arguments.

        A plan that takes the GEMM route binds your planes to one cuBLAS
        product (no copies) and prepares cuBLAS for the stream its launches go
        to (:meth:`BoundPlan.stream`); a launch on a stream that is being
        captured needs its product warmed before the capture, by a run or bind
        on that stream or on any other of the device (see :doc:`/torch`).
        A Param given as a number is fixed here (on the device, a kernel
        argument passed by value). The checks of table indices of the lane
        and loop indices are made here, once, for these planes' lane count.

        A routed bind of device planes laid out as an earlier one's (the same
        shapes, strides, dtypes, device, producers and flags), at addresses
        that agree modulo 16 bytes, is a move: plans of this kernel and
        options keep what such a bind checked and made, holding no plane, so
        only the new addresses are checked (non-null, each written plane apart
        from the others) and the products are moved to them.

        The planes are checked here, not at each launch: one a launch writes may not
        be made read-only after the bind (numpy's ``flags.writeable``), and a torch
        tensor it writes that comes to require grad is refused by the launch.

        Raises:
            TypeError, ValueError, OverflowError: as :meth:`run`.
            hawk.PlaneIndexError: (the kernel's loop) a table index of the lane
                and loop indices is out of range for some lane of this binding.
            GemmCaptureUnavailable: (GEMM route) no cuBLAS, or the stream is
                being captured and no stream of the device warmed its product.
        """
        if arrays:
            raise by_position("plan.bind", self._names, len(arrays))
        return self._bind(planes)

    def _bind(
        self,
        planes: Mapping[str, Any],
        *,
        detach: bool = False,
        keys: tuple[Any, ...] | None = None,
    ) -> BoundPlan:
        """:meth:`bind`. A binding of the kernel's own loop takes a later run's Param
        numbers (:meth:`BoundPlan._set_numbers`) when :meth:`run` reuses it. With
        ``detach``, planes are bound through address views (:func:`detached`), device
        ones outside any capture, for a binding that plans of this kernel, policy and
        backend share by the planes' layout keys (``keys``, when the caller has them)."""
        alike = None
        if self.record is not None:  # only a recognised contraction's products are moved
            keys = layout_keys(planes, self._names) if keys is None else keys
            alike = alike_keys(keys)
        kept = None if alike is None else self._shared.moves.get(alike)
        if kept is not None:
            assert keys is not None  # (alike keys are made of them)
            bound = kept.move(self, planes, keys, detach)
            if bound is not None:
                return bound
        checked = check_planes(self.kernel.ir, planes)
        # a binding run keeps names the bare plan: the plan keeping it in a cycle would
        # keep its planes alive until Python's cycle collector ran
        plan = self._shared.bare() if detach else self
        if detach and (checked.side == "host" or not any_capture_active()):
            checked = detached(checked)
        backend = self._backends.get(checked.side)  # type: ignore[call-overload]
        if backend is None:
            (only,) = self._backends.values()
            raise EagleValueError(
                f"this plan was built with backend={only.name!r}, which takes "
                f"{_SIDE_ARRAYS[only.side]}; the planes are {_SIDE_ARRAYS[checked.side]} "
                "(pass planes on its side, or build the plan without backend=)"
            )
        route_key = (checked.side, checked.signature, checked.lanes)
        route = self._routes.get(route_key)
        if route is None:
            names = zip(self._names, checked.signature, strict=True)
            dtypes = {name: np.dtype(dtype) for name, dtype in names}
            route = self._routes[route_key] = decide(self, checked.side, dtypes, checked.lanes)
        if route.name == "gemm":
            steps = backend.bind_products(plan, checked)
            if alike is not None and all(step.move is not None for step in steps):
                self._shared.moves[alike] = Moves.of(self.kernel.ir, checked, steps, route)
            return BoundPlan(plan, checked, steps, route)
        binding = backend.bind(plan, checked)
        return BoundPlan(plan, checked, (binding.step,), route, binding.setters)


#: what each side's planes are, for messages
_SIDE_ARRAYS = {"host": "host arrays", "device": "device arrays"}


def backend_for(plan: AutoPlan, side: str) -> Backend:
    """The backend ``plan`` runs on ``side``.

    Raises:
        ValueError: ``plan`` was built with a backend of the other side.
    """
    backend = plan._backends.get(side)  # type: ignore[call-overload]
    if backend is None:
        (only,) = plan._backends.values()
        raise EagleValueError(
            f"this plan was built with backend={only.name!r}, which runs over "
            f"{_SIDE_ARRAYS[only.side]}; it has no {side!r} side (build the plan without "
            "backend= to run on both)"
        )
    return backend


def main_side(plan: AutoPlan) -> Side:
    """The side whose route a plan's ``reasons`` speak for: the device, unless the plan
    runs on the host only."""
    return "device" if "device" in plan._backends else "host"


def decide(plan: AutoPlan, side: str, dtypes: Mapping[str, Any], lanes: int | None = None) -> Route:
    """The route ``plan`` takes on ``side`` for planes of these dtypes (by plane name) and,
    when bound, this lane count: ``"gemm"`` when the side's backend, the plan's policy,
    the kernel, the dtypes and the lanes all allow the products, else ``"loop"`` with
    the first reasons that keep it there.

    Raises:
        ValueError: the plan has no backend on ``side``.
    """
    reasons = backend_for(plan, side).product_reasons(plan.policy)
    if reasons:
        return Route("loop", reasons)
    if plan.policy.contraction != "gemm":
        return Route(
            "loop",
            (
                f"built under contraction={plan.policy.contraction!r}; build the plan with "
                "eagle.plan.auto(kernel, contraction='gemm') (or inside "
                "hawk.emit.policy.using(contraction='gemm')) to let it take the GEMM route",
            ),
        )
    reasons = plan._kernel_reasons
    math = plan.policy.math
    if not reasons and lanes is None:
        reasons = gemm_route.dtype_reasons(dtypes, math=math)
    elif not reasons and lanes is not None:
        assert plan._layout is not None
        reasons = gemm_route.bind_reasons(dtypes, lanes, plan._layout, math=math)
    return Route("loop" if reasons else "gemm", reasons)


def _side_dtype(side: str, dtype: Any) -> np.dtype:
    """Check ``side`` and ``dtype`` (a plane's) and resolve ``dtype``."""
    check_option(side, Side, "side")
    try:
        resolved = numpy_dtype(dtype) if dtype is not None else None  # np.dtype(None): float64
    except (TypeError, ValueError):  # (a tuple is a structured dtype's spelling to numpy)
        resolved = None
    if resolved is None or plane_row(resolved) is None:
        names = ", ".join(PLANE_DTYPES)
        raise EagleValueError(f"dtype must be one of {names} (a plane's dtype), not {dtype!r}")
    return resolved


@dataclass(frozen=True)
class Moves:
    """A device binding's parts that hold for planes laid out alike at addresses that align
    alike (the same :func:`~eagle.plan._planes.alike_keys`), none of them holding a plane: a
    later bind of such planes checks only their addresses and moves each step there
    (:attr:`Step.move`), as a rebind of a graph moves its nodes.

    Attributes:
        checked: the planes as checked, over address views (:func:`detached`).
        sizes: their :func:`~eagle.plan._planes.extents`.
        route: the route they took.
        steps: the steps' moves (:attr:`~Step.move`), each once.
        branches: the steps' :func:`~eagle.plan._bound.branch_plan`, which a move keeps.
    """

    checked: Planes
    sizes: tuple[tuple[bool, int], ...]
    route: Route
    steps: tuple[Callable[[Mapping[str, Any], int], tuple[Step, ...]], ...]
    branches: tuple[Placement, ...] | None

    @classmethod
    def of(cls, kernel: ir.KernelIR, checked: Planes, steps: Sequence[Step], route: Route) -> Moves:
        """What binds of ``kernel`` over ``checked`` into ``steps`` on ``route`` keep for
        planes laid out alike (every step has a move)."""
        kept = checked if checked.detached else detached(checked)
        moves = tuple(dict.fromkeys(step.move for step in steps))
        branches = branch_plan(steps)
        return cls(kept, extents(kernel, kept), route, moves, branches)  # type: ignore[arg-type]

    def move(
        self, plan: AutoPlan, planes: Mapping[str, Any], keys: tuple[Any, ...], detach: bool
    ) -> BoundPlan | None:
        """:meth:`AutoPlan._bind` of ``planes``, whose :func:`layout_keys` are ``keys``,
        moved: None when an address check fails (the full bind then says why)."""
        # (the stream of the first framework array in the kernel's plane order, as a full
        # bind finds it)
        device = self.checked.device
        assert device is not None  # (device planes alone have alike keys)
        stream = launch_stream((planes[name] for name in self.checked.values), device)
        checked = moved(self.checked, self.sizes, planes, keys, stream)
        if checked is None:
            return None
        if detach:  # kept by the plan: it names the bare plan, so no cycle keeps its planes
            plan = plan._shared.bare()
            if not any_capture_active():
                checked = detached(checked)
        values = checked.values
        steps = tuple(step for move in self.steps for step in move(values, stream))
        return BoundPlan(plan, checked, steps, self.route, branches=self.branches)


class _Shared:
    """What the plans of one kernel built under one policy for one backend share, none of
    it holding a plane: the kernel's analyses, the routes of bound planes, and the
    bindings :meth:`AutoPlan.run` makes over address views, by the planes' layout keys
    (so ``eagle.plan.auto(kernel).run(...)`` in a loop binds once)."""

    def __init__(self, kernel: hawk.Kernel, built: Policy, backend: str | None) -> None:
        self.key = (kernel, built, backend)
        self.record = recognize(kernel)
        self.backends: dict[Side, Backend] = (
            {side: backend_named(name) for side, name in DEFAULTS.items()}
            if backend is None
            else {(named := backend_named(backend)).side: named}
        )
        self.layout = lane_layout(kernel)
        self.names = tuple(p.name for p in kernel.planes)
        self.routes: KeyedCache[tuple[Any, ...], Route] = KeyedCache("plan routes", _ROUTES)
        self.bindings: KeyedCache[tuple[Any, ...], BoundPlan] = KeyedCache(
            "shared plan bindings", _SHARED_BINDINGS
        )
        # what a bind keeps for planes laid out alike, by their alike keys
        self.moves: KeyedCache[tuple[Any, ...], Moves] = KeyedCache("plan moves", _MOVES)
        self._bare: AutoPlan | None = None

    def bare(self) -> AutoPlan:
        """The plan the shared bindings name as theirs: one that keeps no binding."""
        if self._bare is None:
            bare = AutoPlan.__new__(AutoPlan)
            bare._setup(*self.key)
            self._bare = bare
        return self._bare


def _shared_state(kernel: hawk.Kernel, built: Policy, backend: str | None) -> _Shared:
    """What the plans of ``kernel`` built under ``built`` for ``backend`` share, kept on the
    kernel (``kernel.runtime``), so it goes with the kernel."""
    key = ("eagle.plan", built, backend)
    state = kernel.runtime.get(key)
    if state is None:  # (threads that race here all take the first one stored)
        state = kernel.runtime.setdefault(key, _Shared(kernel, built, backend))
    return state


class BoundPlan(Bound):
    """A plan bound to its planes; made by :meth:`AutoPlan.bind`.

    A host launch is all or nothing: if it raises, every plane is as it was.

    Attributes:
        plan: the :class:`AutoPlan`.
        side: ``"host"`` or ``"device"``.
        device: the device index, or None on the host.
        lanes: the lane count.
        route: ``"gemm"`` (one cuBLAS product) or ``"loop"`` (the kernel).
        reasons: why it does not take the GEMM route (empty when it does).
    """

    _what = "plan"

    def __init__(
        self,
        plan: AutoPlan,
        checked: Planes,
        steps: Sequence[Step],
        route: Route,
        setters: Mapping[str, Callable[[float], None]] | None = None,
        branches: tuple[Placement, ...] | None = None,
    ) -> None:
        foreign = checked.foreign
        tensors = () if foreign is None else foreign.tensors
        first, *rest = steps
        if tensors != first.tensors:  # bumped once a launch, by its first step
            first = first.bumping(tensors)
        # steps that fork are an adjoint's products, whose BoundAdjoint prepares their side
        # streams at its bind; alone, a BoundPlan prepares them in prepare() (capture())
        super().__init__(
            checked.side, checked.device, (first, *rest), sides=False, branches=branches
        )
        self._foreign = foreign
        self.plan = plan
        self.lanes = checked.lanes
        self.route = route.name
        self.reasons = route.reasons
        # how the launches after a run take its Param numbers: on the device, packed into
        # the kernel's arguments; on the host, written into the arrays the program reads
        self._setters = tuple((setters or {}).items())
        self._lock = threading.Lock()
        self._real = checked.real
        self._detached = checked.detached  # over address views, shared by plans

    def __repr__(self) -> str:
        return (
            f"BoundPlan({self.plan.kernel.name}, side={self.side!r}, lanes={self.lanes}, "
            f"route={self.route!r})"
        )

    def _set_numbers(self, planes: Mapping[str, Any]) -> None:
        """Take the Params given as numbers from ``planes`` for the next launches."""
        real = self._real
        for name, set_number in self._setters:
            set_number(param_number(name, planes[name], real))
