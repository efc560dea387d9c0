"""AutoPlan and BoundPlan: a hawk kernel's plan, bound to planes and launched or run
(the public face is :mod:`eagle.plan`)."""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

import hawk
from eagle.cuda.stream import as_stream_ptr
from eagle.errors import EagleTypeError, EagleValueError, check_option
from eagle.gemm.steps import Side
from eagle.plan import _route as gemm_route
from eagle.plan._bound import Bound, Route, Step
from eagle.plan._planes import WRITTEN, Planes, check_planes, layout_keys, param_number
from eagle.plan._sites import kernel_site, product_site
from hawk import ir
from hawk.contraction import lane_layout, recognize
from hawk.dtypes import PLANE_DTYPES, Float32Math, numpy_dtype, plane_row
from hawk.emit import cuda, host, policy
from hawk.emit.checks import LaneCheck, check_launch, record_error
from hawk.emit.policy import Contraction

__all__ = ["BLOCK_SIZE", "AutoPlan", "BoundPlan", "auto"]

#: threads per block of a kernel launch
BLOCK_SIZE = 256

#: lane count from which each thread runs several lanes (see ``hawk.emit.cuda.UNROLL``)
WIDE_LANES = 1 << 20

#: bindings :meth:`AutoPlan.run` keeps for reuse (with the arrays they are bound to)
_REUSED_BINDINGS = 4
_NARROW_LANES = 2**31  # below it, lane loops may count in 32 bits (hawk.emit.cuda.emit)

_HOST_REASON = (
    "the host runs the kernel's own loop; build the plan with "
    "eagle.plan.auto(kernel, contraction='gemm', host_route='gemm') to run a recognised "
    "contraction on the host as one numpy product"
)

# Emitted programs, per kernel and dtype signature (and, for CUDA, the Params passed by
# value), shared by every plan of a kernel.
_host_programs: weakref.WeakKeyDictionary[hawk.Kernel, dict[tuple[str, ...], Any]] = (
    weakref.WeakKeyDictionary()
)
_cuda_sources: weakref.WeakKeyDictionary[hawk.Kernel, dict[tuple[Any, ...], Any]] = (
    weakref.WeakKeyDictionary()
)


def auto(
    kernel: hawk.Kernel,
    *,
    contraction: Contraction | None = None,
    math: Float32Math | None = None,
    host_route: Contraction | None = None,
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

    Raises:
        TypeError: ``kernel`` is not a ``@hawk.kernel``.
        ValueError: ``contraction`` is not ``"loop"``, ``"gemm"`` or None;
            ``math`` not ``"fp32"``, ``"tf32"`` or None; ``host_route`` not
            ``"loop"``, ``"gemm"`` or None.
    """
    return AutoPlan(kernel, contraction=contraction, math=math, host_route=host_route)


class AutoPlan:
    """A hawk kernel ready to run; made by :func:`auto`.

    Attributes:
        kernel: the hawk kernel.
        policy: the :class:`hawk.emit.policy.Policy` it was built under.
        record: the :class:`~eagle.gemm.contraction.RecognizedContraction` the
            kernel computes (:func:`hawk.contraction.recognize`), or None.
    """

    def __init__(
        self,
        kernel: hawk.Kernel,
        *,
        contraction: Contraction | None = None,
        math: Float32Math | None = None,
        host_route: Contraction | None = None,
    ) -> None:
        if not isinstance(kernel, hawk.Kernel):
            raise EagleTypeError(
                f"eagle.plan.auto takes a @hawk.kernel function, not {type(kernel).__name__}"
            )
        chosen: dict[str, Any] = {
            key: value
            for key, value in (
                ("contraction", contraction),
                ("math", math),
                ("host_route", host_route),
            )
            if value is not None
        }
        self.kernel = kernel
        self.policy = replace(policy.current(), **chosen)
        self.record = recognize(kernel)
        self._layout = lane_layout(kernel)
        self._names = tuple(p.name for p in kernel.planes)
        self._device_kernels: dict[tuple[Any, ...], Any] = {}
        self._bindings: OrderedDict[tuple[Any, ...], BoundPlan] = OrderedDict()
        self._last: tuple[tuple[Any, ...], BoundPlan] | None = None  # the last run's, kept
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        extra = "".join(
            f", {key}={getattr(self.policy, key)!r}"
            for key, default in (("math", "fp32"), ("host_route", "loop"))
            if getattr(self.policy, key) != default
        )
        return f"AutoPlan({self.kernel.name}, contraction={self.policy.contraction!r}{extra})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (and copy) as what makes the plan: its kernel (by reference, as a
        function) and its policy; it is built again on load, with nothing bound."""
        policy = self.policy
        build = functools.partial(
            AutoPlan,
            contraction=policy.contraction,
            math=policy.math,
            host_route=policy.host_route,
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
            dtype: the planes' dtype (or its name): float16, bfloat16, float32 or
                float64.

        Raises:
            ValueError: ``side`` is not ``"host"`` or ``"device"``, or ``dtype``
                is not a dtype hawk planes take.
        """
        resolved = _side_dtype(side, dtype)
        return self._decide(side, {name: resolved for name in self._names}).name

    def source(self, side: Side, dtype: Any = "float32") -> str:
        """The program ``side`` runs for the kernel over planes of ``dtype``.

        ``"host"`` gives the generated numpy program (Python source),
        ``"device"`` the generated CUDA C (what NVRTC compiles for fewer than
        2**31 lanes, its lane loops counting in 32 bits; a plan on the GEMM route
        runs a cuBLAS product instead, see :meth:`route`), with
        every Param a pointer to its one element, as for a Param given as an
        array (one given as a number is passed by value instead: a ``const
        float v_<name>`` parameter, ``hawk.emit.cuda.emit(..., values=...)``).

        Args:
            side: ``"host"`` or ``"device"``.
            dtype: the planes' dtype (float32 when left out): any dtype
                :meth:`route` takes.

        Raises:
            ValueError: as :meth:`route`.
        """
        signature = tuple(_side_dtype(side, dtype).name for _ in self._names)
        if side == "host":
            return self._host_program(signature).source
        return self._cuda_source(signature).source

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the device does not take the GEMM route, or an empty tuple when it does.

        Planes of any one of the dtypes hawk takes route alike, so these hold for
        each; planes of mixed dtypes keep the loop (a bound plan's ``reasons`` say so).
        """
        return self._decide(
            "device", {name: gemm_route.ROUTE_DTYPE for name in self._names}
        ).reasons

    def _decide(self, side: str, dtypes: Mapping[str, np.dtype], lanes: int | None = None) -> Route:
        """The route of ``side`` for planes of these dtypes (and, when bound, this lane count)."""
        if side == "host" and self.policy.host_route != "gemm":
            return Route("loop", (_HOST_REASON,))
        if self.policy.contraction != "gemm":
            return Route(
                "loop",
                (
                    f"built under contraction={self.policy.contraction!r}; build the plan with "
                    "eagle.plan.auto(kernel, contraction='gemm') (or inside "
                    "hawk.emit.policy.using(contraction='gemm')) to let it take the GEMM route",
                ),
            )
        reasons = self._kernel_reasons
        math = self.policy.math
        if not reasons and lanes is None:
            reasons = gemm_route.dtype_reasons(dtypes, math=math)
        elif not reasons and lanes is not None:
            assert self._layout is not None
            reasons = gemm_route.bind_reasons(dtypes, lanes, self._layout, math=math)
        return Route("loop" if reasons else "gemm", reasons)

    @functools.cached_property
    def _kernel_reasons(self) -> tuple[str, ...]:
        return gemm_route.kernel_reasons(self.record, self._layout)

    # -- running -------------------------------------------------------------------------

    def run(self, **planes: Any) -> None:
        """Run the kernel once over ``planes`` (one keyword per kernel plane).

        On the host it returns when the results are in your arrays; if it
        raises, every plane is as it was. On the device it enqueues (on the
        stream :meth:`BoundPlan.stream` names) and returns.

        The plan keeps its last four bindings (and so their arrays) and
        reuses one, on any stream, when every plane has the same address,
        shape, strides, dtype and device as then: a repeated run skips the
        checks and the preparation, and a Param given as a number is packed
        into the bound launch's arguments (on the device it is passed by
        value: no allocation, no memset, no synchronisation, legal inside a
        capture, which keeps the number it records).

        Raises:
            TypeError: an unknown or missing plane, not an array, or a dtype
                hawk planes do not take.
            ValueError: mixed residency, a wrong shape or lane count, a
                non-contiguous, null or misaligned array, a written plane that is
                read-only or a torch tensor that requires grad (pass ``.detach()``
                of it, or use ``eagle.torch.function``), or overlapping outputs.
            OverflowError: a Param number too large for the kernel's dtype.
            hawk.PlaneIndexError: (the kernel's loop) a table index of the lane
                and loop indices is out of range for some lane (checked before
                anything runs); on the host, any index out of range. On the device
                other indices raise at a later synchronizing call (see
                :doc:`the hawk guide </hawk>`).
        """
        # (planes on two sides or two devices have keys too: binding them raises, so no
        # binding is ever kept under such keys)
        key = layout_keys(planes, self._names)
        if key is None:
            self.bind(**planes).launch()
            return
        last = self._last
        if last is not None and last[0] == key:  # the binding the last run used
            bound, reused = last[1], True
        else:
            bound, reused = self._reused(key, planes)
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
        with self._lock:
            bound = self._bindings.get(key)
            if bound is not None:
                self._bindings.move_to_end(key)
                self._last = (key, bound)
                return bound, True
        bound = self._bind(planes)
        with self._lock:
            self._bindings[key] = bound
            if len(self._bindings) > _REUSED_BINDINGS:
                self._bindings.popitem(last=False)
            self._last = (key, bound)
        return bound, False

    def bind(self, **planes: Any) -> BoundPlan:
        """Prepare a launch over ``planes``: check them, compile, pack arguments.

        A plan that takes the GEMM route binds your planes to one cuBLAS
        product (no copies) and prepares cuBLAS for the stream its launches go
        to (:meth:`BoundPlan.stream`); a launch on a stream that is being
        captured needs its product warmed before the capture, by a run or bind
        on that stream or on any other of the device (see :doc:`/torch`).
        A Param given as a number is fixed here (on the device, a kernel
        argument passed by value). The checks of table indices of the lane
        and loop indices are made here, once, for these planes' lane count.

        Raises:
            TypeError, ValueError, OverflowError: as :meth:`run`.
            hawk.PlaneIndexError: (the kernel's loop) a table index of the lane
                and loop indices is out of range for some lane of this binding.
            GemmCaptureUnavailable: (GEMM route) no cuBLAS, or the stream is
                being captured and no stream of the device warmed its product.
        """
        return self._bind(planes)

    def _bind(self, planes: Mapping[str, Any]) -> BoundPlan:
        """:meth:`bind`. A binding of the kernel's own loop takes a later run's Param
        numbers (:meth:`BoundPlan._set_numbers`) when :meth:`run` reuses it."""
        checked = check_planes(self.kernel.ir, planes)
        dtypes = {name: np.dtype(d) for name, d in zip(self._names, checked.signature, strict=True)}
        route = self._decide(checked.side, dtypes, checked.lanes)
        if checked.side == "host" and route.name == "gemm":
            assert self.record is not None
            product = gemm_route.HostGemm(self, self.record, checked.values)
            step = Step(product, written=product.written, last=product.last)
            return BoundPlan(self, checked, step, route)
        if checked.side == "host":
            return self._bind_host(checked, route)
        if route.name == "gemm":
            assert self.record is not None and checked.device is not None
            launch = gemm_route.GemmLaunch(
                self, self.record, checked.values, checked.device, math=self.policy.math
            )
            site = product_site(self._label, self.kernel.ir, checked.values, launch)
            return BoundPlan(self, checked, Step(launch, launch.prepare, site=site), route)
        return self._bind_device(checked, route)

    def _host_program(self, signature: tuple[str, ...]) -> host.HostProgram:
        programs = _host_programs.setdefault(self.kernel, {})
        program = programs.get(signature)
        if program is None:
            dtypes = dict(zip(self._names, signature, strict=True))
            program = programs[signature] = host.emit(self.kernel.ir, dtypes)
        return program

    def _cuda_source(
        self, signature: tuple[str, ...], values: frozenset[str] = frozenset(), lanes: int = 0
    ) -> cuda.CudaSource:
        """The CUDA C for planes of ``signature`` over ``lanes`` lanes, the Params named in
        ``values`` passed by value. Below 2**31 lanes the lane loops of a kernel whose lanes
        run no loop of their own count in 32 bits; a looping lane keeps 64-bit counters (on
        the H200, no faster in 32 bits, and slower at 2048**3: more registers)."""
        key = (signature, values, lanes < _NARROW_LANES and not self._loops)
        sources = _cuda_sources.setdefault(self.kernel, {})
        source = sources.get(key)
        if source is None:
            dtypes = dict(zip(self._names, signature, strict=True))
            source = cuda.emit(self.kernel.ir, dtypes, values=values, narrow=key[2])
            sources[key] = source
        return source

    @functools.cached_property
    def _loops(self) -> bool:
        """Whether a lane of the kernel runs a loop of its own."""
        return self.kernel.ir.loops()

    def _bind_host(self, checked: Planes, route: Route) -> BoundPlan:
        program = self._host_program(checked.signature)
        self._check_lanes(program.launch_checks, checked)
        args = [checked.values[name] for name in program.arguments]
        lanes = checked.lanes
        # a Param given as a number is a one-element array the program reads
        setters = {
            name: functools.partial(checked.values[name].__setitem__, 0) for name in checked.numbers
        }

        def run(_stream: None) -> None:
            program.function(*args, lanes)

        last = self._written_last
        written = tuple(
            checked.values[p.name]
            for p in self.kernel.planes
            if p.kind in WRITTEN and p.name != last
        )
        step = Step(run, written=written, last=None if last is None else checked.values[last])
        return BoundPlan(self, checked, step, route, setters)

    @functools.cached_property
    def _written_last(self) -> str | None:
        """The plane the body's last statement stores into, when nothing else writes it,
        if any: the host program runs the statements in order, so that plane is untouched
        until the last one, which completes the run (``Step.last``: a run that writes no
        other plane needs no saved copy of it)."""
        body = self.kernel.ir.body
        last = body[-1] if body else None
        if not isinstance(last, ir.Store):
            return None
        writes = [
            s
            for s in ir.walk(self.kernel.ir)
            if isinstance(s, ir.Store | ir.Accumulate) and s.plane == last.plane
        ]
        return last.plane.name if writes == [last] else None

    def _bind_device(self, checked: Planes, route: Route) -> BoundPlan:
        from eagle.cuda._records import record_for
        from eagle.cuda.module import PackedArgs, load_kernel

        assert checked.device is not None
        # A Param given as a number is a kernel argument passed by value (the kernel is
        # compiled for that): packed with the others, as a scalar of the compute dtype
        # (checked to fit it, param_number), and copied by each launch, so a later
        # number (a setter of the packed arguments) never reaches a launch made before.
        values = frozenset(checked.numbers)
        key = (checked.signature, checked.device, values)
        source = self._cuda_source(checked.signature, values, checked.lanes)
        self._check_lanes(source.launch_checks, checked)
        kernel = self._device_kernels.get(key)
        if kernel is None:
            kernel = load_kernel(source.source, source.name, device=checked.device)
            self._device_kernels[key] = kernel
        # A failed check is noted in the kernel's error record (hawk.emit.checks)
        record = record_for(
            (source.source, source.name),
            checked.device,
            functools.partial(record_error, source.checks),
        )
        device = checked.device
        args = [checked.values[name] for name in self._names]
        lengths = [np.int64(checked.values[name].shape[0]) for name in source.lengths]
        # the packed arguments keep the arrays alive (in a capture too)
        packed = PackedArgs([*args, np.int64(checked.lanes), *lengths, record])
        setters = {name: packed.setter(self._names.index(name)) for name in values}
        grid = _grid(checked.lanes, source.width)

        def enqueue(stream: Any) -> None:
            record.check()  # an earlier launch's failure, once it is recorded
            if not grid:
                return
            stream_ptr = stream if type(stream) is int else as_stream_ptr(stream, device)
            kernel.launch(grid, BLOCK_SIZE, packed, stream_ptr)

        site = kernel_site(self._label, self.kernel.ir, checked.values, packed) if grid else None
        return BoundPlan(self, checked, Step(enqueue, site=site), route, setters)

    def _check_lanes(self, checks: tuple[LaneCheck, ...], checked: Planes) -> None:
        """Make the checks the emitted kernel leaves to its launch, for the bound lane
        count and flat-table lengths (raising the error the kernel's check would)."""
        if not checks:
            return
        lengths = {
            p.name: int(checked.values[p.name].shape[0])
            for p in self.kernel.planes
            if p.is_table and p.axes is None
        }
        check_launch(checks, checked.lanes, lengths)

    @property
    def _label(self) -> str:
        return f"plan {self.kernel.name!r}"


def _side_dtype(side: str, dtype: Any) -> np.dtype:
    """Check ``side`` and ``dtype`` (a plane's) and resolve ``dtype``."""
    check_option(side, Side, "side")
    try:
        resolved = numpy_dtype(dtype) if dtype is not None else None  # np.dtype(None): float64
    except TypeError:
        resolved = None
    if resolved is None or plane_row(resolved) is None:
        names = ", ".join(PLANE_DTYPES)
        raise EagleValueError(f"dtype must be one of {names} (a plane's dtype), not {dtype!r}")
    return resolved


def _grid(lanes: int, width: int = 1) -> int:
    """Blocks for ``lanes``: one lane per thread, or, once there are enough lanes to
    fill the device that way, :data:`hawk.emit.cuda.UNROLL` lanes per thread (each thread
    then keeps several independent loads in flight) and at least one vector group of
    ``width`` lanes (``CudaSource.width``: 8 for 16-bit planes), so no thread idles."""
    per_thread = max(cuda.UNROLL, width) if lanes >= WIDE_LANES else 1
    return -(-lanes // (BLOCK_SIZE * per_thread))


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
        step: Step,
        route: Route,
        setters: Mapping[str, Callable[[float], None]] | None = None,
    ) -> None:
        planes = tuple(checked.values.values()) if checked.side == "device" else ()
        foreign = checked.foreign
        tensors = () if foreign is None else foreign.tensors
        super().__init__(
            checked.side, checked.device, (replace(step, planes=planes, tensors=tensors),)
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
