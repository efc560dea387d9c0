"""Run hawk kernels: ``eagle.plan.auto(kernel)`` -> :class:`AutoPlan`.

A plan runs on the host when its planes are host arrays (numpy or host
eagle Arrays: the kernel's numpy program, results written into your arrays)
and on the device when they are device Arrays (the kernel's CUDA C, launched
on eagle's current stream). ``plan.bind(**planes)`` prepares everything, so
``bound.launch()`` only enqueues work and is legal inside a capture;
``bound.capture(stream)`` records it into a graph.

Planes are checked by name before anything runs: unknown or missing planes,
mixed residency, dtypes other than float32/float64, wrong shapes, lane
planes of different lengths, non-contiguous arrays, read-only outputs, and
an output overlapping another plane.

A plan keeps the :mod:`hawk.emit.policy` it was built under. Built under
``policy.using(contraction="gemm")``, a kernel that is one dense two-operand
contraction (``plan.record``, from :func:`hawk.contraction.recognize`) runs on
the device as one cuBLAS product written straight into its output's lane
plane, when its planes are float32 and its lanes are the product in row-major
order; everything else runs the kernel's own loop. ``route(side, dtype)``
says which, ``reasons`` why the device does not take the GEMM route, and a
bound plan's ``route`` and ``reasons`` what it does with its own planes.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import hawk
from eagle import _route as gemm_route
from hawk import ir
from hawk.contraction import lane_layout, recognize
from hawk.emit import DTYPES, compute_dtype, cuda, host, policy

__all__ = ["BLOCK_SIZE", "AutoPlan", "BoundPlan", "auto"]

#: threads per block of a kernel launch
BLOCK_SIZE = 256

#: lane count from which each thread runs several lanes (see ``hawk.emit.cuda.UNROLL``)
WIDE_LANES = 1 << 20

_SIDES = ("host", "device")
_HOST_REASON = "the host always runs the kernel's own loop"

# Emitted programs, per kernel and dtype signature, shared by every plan of a kernel.
_host_programs: weakref.WeakKeyDictionary[hawk.Kernel, dict[tuple[str, ...], Any]] = (
    weakref.WeakKeyDictionary()
)
_cuda_sources: weakref.WeakKeyDictionary[hawk.Kernel, dict[tuple[str, ...], Any]] = (
    weakref.WeakKeyDictionary()
)


def auto(kernel: hawk.Kernel) -> AutoPlan:
    """A plan that runs ``kernel`` on the host or the device, by where its planes are.

    The plan keeps the :func:`hawk.emit.policy.current` policy.

    Raises:
        TypeError: ``kernel`` is not a ``@hawk.kernel``.
    """
    return AutoPlan(kernel)


@dataclass(frozen=True)
class _Route:
    name: str
    reasons: tuple[str, ...]


class AutoPlan:
    """A hawk kernel ready to run; made by :func:`auto`.

    Attributes:
        kernel: the hawk kernel.
        policy: the :class:`hawk.emit.policy.Policy` it was built under.
        record: the :class:`~eagle.gemm.contraction.RecognizedContraction` the
            kernel computes (:func:`hawk.contraction.recognize`), or None.
    """

    def __init__(self, kernel: hawk.Kernel) -> None:
        if not isinstance(kernel, hawk.Kernel):
            raise TypeError(
                f"eagle.plan.auto takes a @hawk.kernel function, not {type(kernel).__name__}"
            )
        self.kernel = kernel
        self.policy = policy.current()
        self.record = recognize(kernel)
        self._layout = lane_layout(kernel)
        self._device_kernels: dict[tuple[tuple[str, ...], int], Any] = {}

    def __repr__(self) -> str:
        return f"AutoPlan({self.kernel.name}, contraction={self.policy.contraction!r})"

    # -- routing -------------------------------------------------------------------------

    def route(self, side: str, dtype: Any = "float32") -> str:
        """``"gemm"`` or ``"loop"``: how ``side`` runs the kernel over planes of ``dtype``.

        dtypes come from the arrays at run time, so name the one you mean:
        the device takes the GEMM route only for float32 planes (the default),
        and the host always runs the kernel's loop. A bound plan's
        ``route`` (:class:`BoundPlan`) says what it does with its own planes.

        Args:
            side: ``"host"`` or ``"device"``.
            dtype: the planes' dtype, float32 or float64.

        Raises:
            ValueError: ``side`` is not ``"host"`` or ``"device"``, or ``dtype``
                is not float32 or float64.
        """
        if side not in _SIDES:
            raise ValueError(f"side must be 'host' or 'device', not {side!r}")
        try:
            resolved = np.dtype(dtype) if dtype is not None else None  # np.dtype(None) is float64
        except TypeError:
            resolved = None
        if resolved is None or resolved not in DTYPES:
            raise ValueError(f"dtype must be float32 or float64 (a plane's dtype), not {dtype!r}")
        return self._decide(side, {p.name: resolved for p in self.kernel.planes}).name

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the device does not take the GEMM route for float32 planes (empty when it does)."""
        planes = {p.name: gemm_route.ROUTE_DTYPE for p in self.kernel.planes}
        return self._decide("device", planes).reasons

    def _decide(
        self, side: str, dtypes: Mapping[str, np.dtype], lanes: int | None = None
    ) -> _Route:
        """The route of ``side`` for planes of these dtypes (and, when bound, this lane count)."""
        if side == "host":
            return _Route("loop", (_HOST_REASON,))
        if self.policy.contraction != "gemm":
            return _Route(
                "loop",
                (
                    f"built under contraction={self.policy.contraction!r}; build the plan inside "
                    "hawk.emit.policy.using(contraction='gemm') to let it take the GEMM route",
                ),
            )
        reasons = self._kernel_reasons
        if not reasons and lanes is None:
            reasons = gemm_route.dtype_reasons(dtypes)
        elif not reasons:
            assert self._layout is not None
            reasons = gemm_route.bind_reasons(dtypes, lanes, self._layout)
        return _Route("loop" if reasons else "gemm", reasons)

    @functools.cached_property
    def _kernel_reasons(self) -> tuple[str, ...]:
        return gemm_route.kernel_reasons(self.record, self._layout)

    # -- running -------------------------------------------------------------------------

    def run(self, **planes: Any) -> None:
        """Run the kernel once over ``planes`` (one keyword per kernel plane).

        On the host it returns when the results are in your arrays; on the
        device it enqueues on eagle's current stream and returns.

        Raises:
            TypeError: an unknown or missing plane, not an array, or a dtype
                other than float32/float64.
            ValueError: mixed residency, a wrong shape or lane count, a
                non-contiguous or read-only array, or overlapping outputs.
        """
        self.bind(**planes).launch()

    def bind(self, **planes: Any) -> BoundPlan:
        """Prepare a launch over ``planes``: check them, compile, pack arguments.

        A plan that takes the GEMM route binds your planes to one cuBLAS
        product (no copies) and prepares cuBLAS for eagle's current stream
        (bind inside ``with stream:`` to launch on ``stream`` inside a capture).

        Raises:
            TypeError, ValueError: as :meth:`run`.
            GemmCaptureUnavailable: (GEMM route) no cuBLAS, or eagle's current
                stream is being captured.
        """
        bound = _check_planes(self.kernel.ir, planes)
        names = [p.name for p in self.kernel.planes]
        dtypes = {name: np.dtype(dtype) for name, dtype in zip(names, bound.signature, strict=True)}
        route = self._decide(bound.side, dtypes, bound.lanes)
        if bound.side == "host":
            program = self._host_program(bound.signature)
            args = [bound.values[name] for name in program.arguments]
            return BoundPlan(
                self,
                "host",
                None,
                bound.lanes,
                lambda _stream: program.function(*args, bound.lanes),
                route=route.name,
                reasons=route.reasons,
            )
        if route.name == "gemm":
            assert self.record is not None and bound.device is not None
            launch = gemm_route.GemmLaunch(self, self.record, bound.values, bound.device)
            return BoundPlan(
                self, "device", bound.device, bound.lanes, launch,
                route="gemm", reasons=(), prepare=launch.prepare,
            )  # fmt: skip
        return self._bind_device(bound, route)

    def _host_program(self, signature: tuple[str, ...]) -> host.HostProgram:
        programs = _host_programs.setdefault(self.kernel, {})
        program = programs.get(signature)
        if program is None:
            dtypes = dict(zip((p.name for p in self.kernel.planes), signature, strict=True))
            program = programs[signature] = host.emit(self.kernel.ir, dtypes)
        return program

    def _cuda_source(self, signature: tuple[str, ...]) -> cuda.CudaSource:
        sources = _cuda_sources.setdefault(self.kernel, {})
        source = sources.get(signature)
        if source is None:
            dtypes = dict(zip((p.name for p in self.kernel.planes), signature, strict=True))
            source = sources[signature] = cuda.emit(self.kernel.ir, dtypes)
        return source

    def _bind_device(self, bound: _Planes, route: _Route) -> BoundPlan:
        from eagle.cuda.module import PackedArgs, load_kernel

        assert bound.device is not None
        key = (bound.signature, bound.device)
        kernel = self._device_kernels.get(key)
        if kernel is None:
            source = self._cuda_source(bound.signature)
            kernel = load_kernel(source.source, source.name, device=bound.device)
            self._device_kernels[key] = kernel
        args = [bound.values[p.name] for p in self.kernel.planes]
        packed = PackedArgs([*args, np.int64(bound.lanes)])
        grid = _grid(bound.lanes)

        def enqueue(stream: Any) -> None:
            if grid:
                kernel.launch(grid, BLOCK_SIZE, packed, stream)

        return BoundPlan(
            self, "device", bound.device, bound.lanes, enqueue,
            route=route.name, reasons=route.reasons,
        )  # fmt: skip


def _grid(lanes: int) -> int:
    """Blocks for ``lanes``: one lane per thread, or :data:`hawk.emit.cuda.UNROLL` per
    thread once there are enough lanes to fill the device that way (each thread then
    keeps several independent loads in flight)."""
    per_thread = cuda.UNROLL if lanes >= WIDE_LANES else 1
    return -(-lanes // (BLOCK_SIZE * per_thread))


class BoundPlan:
    """A plan bound to its planes; made by :meth:`AutoPlan.bind`.

    Attributes:
        plan: the :class:`AutoPlan`.
        side: ``"host"`` or ``"device"``.
        device: the device index, or None on the host.
        lanes: the lane count.
        route: ``"gemm"`` (one cuBLAS product) or ``"loop"`` (the kernel).
        reasons: why it does not take the GEMM route (empty when it does).
    """

    def __init__(
        self,
        plan: AutoPlan,
        side: str,
        device: int | None,
        lanes: int,
        enqueue: Callable[[Any], None],
        *,
        route: str = "loop",
        reasons: tuple[str, ...] = (),
        prepare: Callable[[int], Any] | None = None,
    ) -> None:
        self.plan = plan
        self.side = side
        self.device = device
        self.lanes = lanes
        self.route = route
        self.reasons = reasons
        self._enqueue = enqueue
        self._prepare = prepare

    def __repr__(self) -> str:
        return (
            f"BoundPlan({self.plan.kernel.name}, side={self.side!r}, lanes={self.lanes}, "
            f"route={self.route!r})"
        )

    def launch(self, stream: Any = None) -> None:
        """Run once: on the device, enqueue on ``stream`` (a Stream, a raw
        pointer, or None for eagle's current stream) and return; legal inside a
        capture. On the host, run now (``stream`` must be None).

        Raises:
            ValueError: a stream given to a host-bound plan.
        """
        if self.side == "host" and stream is not None:
            raise ValueError("this plan is bound to host arrays; it runs now and takes no stream")
        self._enqueue(stream)

    def prepare(self, stream: Any = None) -> None:
        """Make what a launch on ``stream`` needs that a capture may not make
        (a GEMM route's cuBLAS handle for that stream, warmed); call it
        outside any capture. Nothing to do for a loop. :meth:`capture` calls it.

        Raises:
            GemmCaptureUnavailable: (GEMM route) ``stream`` is being captured,
                or no cuBLAS.
        """
        if self._prepare is not None:
            from eagle.cuda.stream import as_stream_ptr

            self._prepare(as_stream_ptr(stream, self.device or 0))

    def capture(self, stream: Any = None) -> Any:
        """Record one launch into a CUDA graph and return its :class:`~eagle.cuda.Launcher`
        (replaying on ``stream``, eagle's current stream by default).

        Raises:
            ValueError: the plan is bound to host arrays.
        """
        if self.side != "device":
            raise ValueError("a plan bound to host arrays cannot be captured; bind device Arrays")
        from eagle.cuda.graph import Graph, StreamCapturer
        from eagle.cuda.stream import as_stream_ptr

        stream_ptr = as_stream_ptr(stream, self.device or 0)
        self.prepare(stream_ptr)  # outside the capture: may make and warm a cuBLAS handle
        with StreamCapturer(stream_ptr) as capturer:
            self.launch(stream_ptr)
        assert capturer.captured is not None
        return Graph.from_captured(capturer.captured).launcher().stream(stream_ptr)


# -- checking the planes -----------------------------------------------------------------


@dataclass
class _Planes:
    side: str
    device: int | None
    lanes: int
    signature: tuple[str, ...]
    values: dict[str, Any]


@dataclass
class _Given:
    name: str
    plane: ir.Plane
    value: Any
    side: str  # "host", "device" or "number"
    device: int | None = None


def _check_planes(kernel: ir.KernelIR, planes: Mapping[str, Any]) -> _Planes:
    names = [p.name for p in kernel.planes]
    for name in planes:
        if name not in names:
            raise TypeError(
                f"kernel {kernel.name!r} has no plane {name!r}; its planes are {', '.join(names)}"
            )
    missing = [name for name in names if name not in planes]
    if missing:
        raise TypeError(
            f"missing plane(s) {', '.join(map(repr, missing))} of kernel {kernel.name!r}"
        )
    given = [_classify(p, planes[p.name]) for p in kernel.planes]
    side, device = _residency(given)
    for item in given:
        if item.side != "number":
            _check_array(item)
    lanes = _lane_count(given)
    _check_overlaps([g for g in given if g.side != "number"])
    array_dtypes = {g.name: np.dtype(g.value.dtype) for g in given if g.side != "number"}
    real = compute_dtype(array_dtypes)
    signature = tuple(array_dtypes[g.name].name if g.side != "number" else real.name for g in given)
    values = {g.name: _prepare(g, side, device, real) for g in given}
    return _Planes(side, device, lanes, signature, values)


def _classify(plane: ir.Plane, value: Any) -> _Given:
    if isinstance(value, np.ndarray):
        return _Given(plane.name, plane, value, "host")
    if hasattr(value, "is_host") and hasattr(value, "ptr") and hasattr(value, "device_index"):
        if value.is_host:
            return _Given(plane.name, plane, value.numpy(), "host")
        return _Given(plane.name, plane, value, "device", value.device_index)
    number = isinstance(value, int | float | np.integer | np.floating)
    if plane.kind == "param" and number and not isinstance(value, bool):
        return _Given(plane.name, plane, float(value), "number")
    what = "a number, " if plane.kind == "param" else ""
    raise TypeError(
        f"plane {plane.name!r} is a {type(value).__name__}; pass {what}a numpy array or an "
        "eagle Array (eagle.arrays.asarray wraps other arrays without a copy)"
    )


def _residency(given: list[_Given]) -> tuple[str, int | None]:
    host_planes = [g for g in given if g.side == "host"]
    device_planes = [g for g in given if g.side == "device"]
    if host_planes and device_planes:
        raise ValueError(
            f"plane {device_planes[0].name!r} is on cuda:{device_planes[0].device} but plane "
            f"{host_planes[0].name!r} is on the host; pass every plane on one side"
        )
    devices = {g.device for g in device_planes}
    if len(devices) > 1:
        first = device_planes[0]
        other = next(g for g in device_planes if g.device != first.device)
        raise ValueError(
            f"plane {first.name!r} is on cuda:{first.device} but plane {other.name!r} is on "
            f"cuda:{other.device}; pass every plane on one device"
        )
    if device_planes:
        return "device", device_planes[0].device
    return "host", None


def _check_array(item: _Given) -> None:
    plane, array = item.plane, item.value
    dtype = np.dtype(array.dtype)
    if dtype not in DTYPES:
        raise TypeError(f"plane {item.name!r} is {dtype}; hawk planes are float32 or float64")
    shape = tuple(array.shape)
    if plane.is_lane and len(shape) != 1:
        raise ValueError(
            f"plane {item.name!r} ({plane.declaration()}) takes a 1-D array with one value per "
            f"lane, not shape {shape}"
        )
    if plane.is_table and plane.axes is None and len(shape) != 1:
        raise ValueError(
            f"plane {item.name!r} is a flat {plane.declaration()}: pass a 1-D array, not "
            f"shape {shape}"
        )
    if (
        plane.shape is not None
        and shape != plane.shape
        and int(np.prod(shape)) != int(np.prod(plane.shape))
    ):
        raise ValueError(
            f"plane {item.name!r} is {plane.declaration()}: pass an array of shape {plane.shape} "
            f"(or any contiguous array of {int(np.prod(plane.shape))} values), not shape {shape}"
        )
    if plane.kind == "param" and int(np.prod(shape)) != 1:
        raise ValueError(
            f"plane {item.name!r} is a Param: pass a number or a one-element array, not shape "
            f"{shape}"
        )
    contiguous = array.flags.c_contiguous if item.side == "host" else array.is_contiguous
    if not contiguous:
        raise ValueError(
            f"plane {item.name!r} is not contiguous (a strided view); pass a contiguous copy"
        )
    if (
        item.side == "host"
        and plane.kind in ("output", "accumulator")
        and not array.flags.writeable
    ):
        raise ValueError(f"plane {item.name!r} is written by the kernel but its array is read-only")


def _lane_count(given: list[_Given]) -> int:
    lanes = [(g.name, int(g.value.shape[0])) for g in given if g.plane.is_lane]
    first_name, count = lanes[0]
    for name, other in lanes[1:]:
        if other != count:
            raise ValueError(
                f"plane {name!r} has {other} values but plane {first_name!r} has {count}; every "
                "lane plane (Scalar, Mutable[Scalar]) holds one value per lane"
            )
    return count


def _byte_range(item: _Given) -> tuple[int, int]:
    array = item.value
    start = array.ctypes.data if item.side == "host" else array.ptr
    return start, start + int(np.prod(array.shape)) * np.dtype(array.dtype).itemsize


def _check_overlaps(given: list[_Given]) -> None:
    ranges = [(g, _byte_range(g)) for g in given]
    for position, (item, (start, end)) in enumerate(ranges):
        for other, (other_start, other_end) in ranges[position + 1 :]:
            writes = item.plane.kind in ("output", "accumulator") or other.plane.kind in (
                "output",
                "accumulator",
            )
            if writes and start < other_end and other_start < end:
                raise ValueError(
                    f"planes {item.name!r} and {other.name!r} share memory and the kernel writes "
                    "one of them; pass separate arrays (a Mutable plane is read and written in "
                    "place)"
                )


def _prepare(item: _Given, side: str, device: int | None, real: np.dtype) -> Any:
    if side == "host":
        if item.side == "number":
            return np.array([item.value], dtype=real)
        return item.value.reshape(-1)
    if item.side == "number":
        from eagle import arrays

        return arrays.full((1,), item.value, real, device=f"cuda:{device}")
    return item.value
