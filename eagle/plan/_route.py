"""The GEMM route of :mod:`eagle.plan`: a recognised contraction run as one cuBLAS product.

A plan built under ``hawk.emit.policy.using(contraction="gemm")`` takes the
route on the device when its kernel is one dense two-operand contraction
(:func:`kernel_reasons` is empty), its planes share one dtype a product takes
(:data:`ROUTE_DTYPES`: bfloat16 and float16 sum in float32 on tensor cores,
float32 is exact or, under ``math="tf32"``, TF32, float64 is Dgemm) and its
lanes cover the product once (:func:`bind_reasons` is empty).
:class:`GemmLaunch` then binds the caller's own planes, seen as matrices
without copies (:func:`gemm_operands`), to the one product of
``lower_dense_gemm(record, direction="forward", dtype=<the planes' dtype>)``,
written straight into the output's lane plane through the stream's
capture-legal cuBLAS handle. The routed adjoint (:mod:`eagle.diff`) is the same
machinery over ``lower_dense_gemm(record, direction="adjoint")``: one product
per gradient plane the caller passes, issued with beta = 1 so it adds into it
(summed in float32 for 16-bit planes), each bound as a step of its own
(:class:`GemmPart`) that a capture may run on a branch.

Everything a launch needs is checked when it is bound (:class:`GemmLaunch`):
the planes' layout, dtypes and overlap, and, per stream, the warmed cuBLAS
call; a launch only enqueues. A capture of a stream that was never prepared
(torch's capture stream, a CUDA-graph tree's, CuPy's) records the products
through a handle of the device that warmed them, lent to the capture with a
workspace the capture allocates and frees.

A plan built with ``host_route="gemm"`` takes the route on the host too
(:class:`HostGemm`): the same products over numpy views of your planes, 16-bit
planes summed in float32 and rounded once when stored.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from eagle._cache import KeyedCache
from eagle.arrays import Array
from eagle.arrays._dlpack import compact
from eagle.cuda.graph import is_capturing
from eagle.cuda.stream import as_stream_ptr, launch_stream
from eagle.errors import EagleValueError, check_option
from eagle.gemm._host import host_product, product_views
from eagle.gemm.capture import BoundGemm, CublasCaptureHandle
from eagle.gemm.contraction import RecognizedContraction
from eagle.gemm.dtypes import PRODUCT_DTYPES, CublasEntry, cublas_entry, dtype_of
from eagle.gemm.errors import CaptureInProgress, GemmCaptureUnavailable, PlanUnavailable
from eagle.gemm.handles import stream_handle, warmed_handle
from eagle.gemm.lending import record_lent
from eagle.gemm.lowering import CapturedCall, Direction, captured_calls, lower_dense_gemm
from eagle.gemm.steps import LoweredPlan
from hawk.contraction import LaneLayout
from hawk.dtypes import Float32Math
from hawk.emit import policy

__all__ = [
    "MATH",
    "ROUTE_DTYPE",
    "ROUTE_DTYPES",
    "GemmLaunch",
    "GemmOperands",
    "GemmPart",
    "HostGemm",
    "bind_reasons",
    "dtype_reasons",
    "gemm_operands",
    "kernel_reasons",
    "products_source",
]

ROUTE_DTYPE = np.dtype(np.float32)
"""The dtype a plan's ``reasons`` speak for: float32 planes (cuBLAS Sgemm, exact FP32)."""

ROUTE_DTYPES = PRODUCT_DTYPES
"""The plane dtypes the route takes (by name): bfloat16, float16, float32, float64."""

_ROUTE_NAMES = f"{', '.join(ROUTE_DTYPES[:-1])} or {ROUTE_DTYPES[-1]}"

MATH = policy.MATH
"""The route's float32 policies: exact FP32, or TF32 tensor cores (float32 planes only)."""


def kernel_reasons(
    record: RecognizedContraction | None, layout: LaneLayout | None
) -> tuple[str, ...]:
    """Why a kernel with this contraction and lane layout does not fit the route (empty if it does).

    It fits when the record lowers to one product (one ``Mutable[Scalar]``
    output, a dense product of reads over a full unit-step range, two-axis
    tables), of two different tables, with lanes that are the product in
    row-major order.
    """
    if record is None or layout is None:
        return (
            "the kernel is not one additive fold of table reads over one loop "
            "(hawk.contraction.recognize finds no contraction), so it runs its loop",
        )
    try:
        _forward(record)
    except PlanUnavailable as exc:
        return (f"the contraction does not lower to one product: {exc}",)
    if record.operand_class != "gemm":
        return (
            f"the fold reads one table, {record.operand_names[0]!r} (a row sum, operand class "
            f"{record.operand_class!r}); the route takes a product of two tables",
        )
    first, second = record.operand_names
    if first == second:
        return (f"both factors read table {first!r}; the route takes two different tables",)
    if layout.reason is not None:
        return (layout.reason,)
    return ()


def dtype_reasons(dtypes: Mapping[str, Any], *, math: Float32Math = "fp32") -> tuple[str, ...]:
    """Why planes of these dtypes (by plane name) keep the loop (empty when they route).

    They route when they share one of :data:`ROUTE_DTYPES`. ``math`` is the
    plan's float32 policy (:data:`MATH`); it changes how float32 planes route
    (TF32 or exact), never whether they do, and other dtypes ignore it.

    Raises:
        ValueError: ``math`` is not one of :data:`MATH`.
    """
    _check_math(math)
    names = {name: dtype_of(dtype).name for name, dtype in dtypes.items()}
    odd = [name for name, dtype in names.items() if dtype not in ROUTE_DTYPES]
    if odd:
        named = ", ".join(f"{name!r} is {names[name]}" for name in odd)
        return (
            f"plane {named}; the GEMM route takes {_ROUTE_NAMES} planes, so the kernel "
            "keeps its loop",
        )
    if len(set(names.values())) > 1:
        named = ", ".join(f"{name!r} is {dtype}" for name, dtype in names.items())
        return (
            f"planes {named}; the GEMM route takes planes of one dtype, so a kernel over "
            "mixed planes keeps its loop",
        )
    return ()


def bind_reasons(
    dtypes: Mapping[str, Any], lanes: int, layout: LaneLayout, *, math: Float32Math = "fp32"
) -> tuple[str, ...]:
    """Why planes of these dtypes and this lane count keep the loop (empty when they fit)."""
    reasons = dtype_reasons(dtypes, math=math)
    if reasons:
        return reasons
    if lanes != layout.lanes:
        return (
            f"the planes hold {lanes} lanes but the product has {layout.rows} x {layout.cols} "
            f"= {layout.lanes} elements; the route writes the whole product, one per lane",
        )
    return ()


# -- the caller's planes as matrices -----------------------------------------------------


@dataclass(frozen=True)
class GemmOperands:
    """The caller's planes seen as the matrices of the forward product.

    Attributes:
        views: plane name -> the plane as a 2-D matrix sharing its memory (a
            numpy view on the host, a device matrix view on the device).
        roles: ``{"a": ..., "b": ..., "out": ...}``, the plane each role of
            ``out = op(a) @ op(b)`` is, as ``lower_dense_gemm(record)`` names
            its buffers.
    """

    views: dict[str, Any]
    roles: dict[str, str]


def gemm_operands(
    plan: Any, record: RecognizedContraction, planes: Mapping[str, Any]
) -> GemmOperands:
    """The 2-D views of ``planes`` and the operand mapping of the routed forward product.

    The forward product of a routed :class:`~eagle.plan.AutoPlan` is
    ``lower_dense_gemm(record, direction="forward")`` over these views: each
    table in its declared shape, the output's lane plane as the ``(rows,
    cols)`` product. A plane named ``<name>_bar`` is viewed like ``<name>``, so
    ``lower_dense_gemm(record, direction="adjoint")`` binds ``y_bar``, ``w_bar``
    and ``f_bar`` the same way (issue its products with beta = 1 to add into
    the gradients). Planes the product does not read are left out.

    Args:
        plan: the routed plan; every name in ``planes`` is one of its
            kernel's planes or ``<plane>_bar``.
        record: ``plan.record``.
        planes: the caller's arrays by plane name: numpy arrays, host or
            device eagle Arrays, each contiguous.

    Raises:
        PlanUnavailable: ``record`` does not lower to one product.
        ValueError: an unknown plane name, or a plane that is not contiguous
            or holds the wrong number of elements for its matrix.
    """
    names = [p.name for p in plan.kernel.planes]
    for name in planes:
        if name not in names and name.removesuffix("_bar") not in names:
            raise EagleValueError(
                f"kernel {plan.kernel.name!r} has no plane {name!r} (nor {name!r} = "
                f"<plane>_bar); its planes are {', '.join(names)}"
            )
    forward = _forward(record)
    shapes = {name: spec.shape for name, spec in forward.required.items()}
    views = {}
    for name, array in planes.items():
        shape = shapes.get(name, shapes.get(name.removesuffix("_bar")))
        if shape is not None:
            views[name] = _matrix(name, array, shape)
    (step,) = forward.steps  # the roles as the lowering names them (lowered once, there)
    assert step.matmul is not None
    roles = {"a": step.matmul.a, "b": step.matmul.b, "out": step.matmul.out}
    return GemmOperands(views, roles)


#: (record, direction, dtype) -> the record's products over buffers of that dtype
_lowerings: KeyedCache[tuple[RecognizedContraction, str, str], LoweredPlan] = KeyedCache(
    "lowered contractions", 256
)


def _lowered(record: RecognizedContraction, direction: Direction, dtype: str) -> LoweredPlan:
    """The record's products over ``dtype`` buffers (lowered once per record, direction
    and dtype, while kept)."""
    key = (record, direction, dtype)
    lowered = _lowerings.get(key)
    if lowered is None:
        lowered = _lowerings[key] = lower_dense_gemm(record, direction=direction, dtype=dtype)
    return lowered


def _forward(record: RecognizedContraction) -> LoweredPlan:
    return _lowered(record, "forward", ROUTE_DTYPE.name)


def _check_math(math: str) -> None:
    check_option(math, Float32Math, "math")


def _matrix(name: str, array: Any, shape: tuple[int, ...]) -> Any:
    count = math.prod(shape)
    size = math.prod(array.shape)
    if size != count:
        raise EagleValueError(
            f"plane {name!r} holds {size} values; its matrix is {shape} ({count} values)"
        )
    if isinstance(array, np.ndarray) or getattr(array, "is_host", False):
        host = np.asarray(array)
        if not host.flags.c_contiguous:
            raise EagleValueError(f"plane {name!r} is not contiguous; pass a contiguous array")
        return host.reshape(shape)
    if not array.is_contiguous:
        raise EagleValueError(f"plane {name!r} is not contiguous; pass a contiguous array")
    return array if tuple(array.shape) == shape else array.reshape(shape)


# -- the products, kept per layout -------------------------------------------------------


class _Products:
    """What binding a routed plan's products over planes of one layout makes, kept for the
    next planes laid out alike (:data:`_products_kept`): each product's params and the
    planes its operands view, and per stream the products bound on that stream's handle
    over address views that keep no memory alive.

    A later bind of such planes checks nothing of the layout again: each product is moved
    to the new addresses (:meth:`BoundGemm.rebound`), and warmed only when its operands
    align otherwise than any the handle warmed.
    """

    def __init__(
        self,
        record: RecognizedContraction,
        dtype: str,
        math: Float32Math | None,
        wanted: LoweredPlan,
        planes: Mapping[str, Any],
    ) -> None:
        self.record, self.dtype, self.math = record, dtype, math
        shapes = {name: spec.shape for name, spec in wanted.required.items()}
        # per product, each operand's plane, and the shape and strides it is seen in (None:
        # the plane's own), the same for every set of planes laid out as ``planes``
        self._roles: list[tuple[str, dict[str, tuple[str, _Seen]]]] = []
        for step in wanted.steps:
            spec = step.matmul
            assert spec is not None  # the lowered plan is products alone
            named = {"a": spec.a, "b": spec.b, "out": spec.out, **spec.scales}
            roles = {r: (n, _seen(planes[n], shapes[n])) for r, n in named.items()}
            self._roles.append((step.name, roles))
        self._params: tuple[Any, ...] = ()
        # per stream: its handle, and the products bound on it over address views
        self._bound: dict[int, tuple[CublasCaptureHandle, tuple[BoundGemm, ...]]] = {}

    @classmethod
    def made(
        cls,
        plan: Any,
        record: RecognizedContraction,
        planes: Mapping[str, Any],
        direction: Direction,
        math: Float32Math,
    ) -> tuple[_Products, tuple[CapturedCall, ...]]:
        """The products of ``record`` over ``planes``, every one checked, and what a later
        bind over planes laid out alike keeps of them."""
        views = gemm_operands(plan, record, planes).views
        dtype = dtype_of(views[record.operands[0].name].dtype).name
        kept_math = math if dtype == "float32" else None
        lowered = _lowered(record, direction, dtype)
        # an adjoint computes only the gradients passed
        wanted = lowered.subplan(spec.name for spec in lowered.outputs if spec.name in views)
        calls = captured_calls(wanted, views, math=kept_math)
        products = cls(record, dtype, kept_math, wanted, planes)
        products._params = tuple(call.params for call in calls)
        return products, calls

    def calls(self, planes: Mapping[str, Any]) -> tuple[CapturedCall, ...]:
        """The products over ``planes``, laid out as those they were made for."""
        return tuple(
            CapturedCall(name, params, {r: _view(planes[n], at) for r, (n, at) in roles.items()})
            for (name, roles), params in zip(self._roles, self._params, strict=True)
        )

    def moved(
        self, stream_ptr: int, handle: CublasCaptureHandle, calls: tuple[CapturedCall, ...]
    ) -> tuple[BoundGemm, ...] | None:
        """The products bound on ``handle`` over ``calls``' operands, moved from those kept
        for ``stream_ptr`` (each warmed there if it aligns otherwise than any the handle
        warmed, before it is returned); None when none are kept for this handle."""
        kept = self._bound.get(stream_ptr)
        if kept is None or kept[0] is not handle:
            return None
        moved = []
        for product, call in zip(kept[1], calls, strict=True):
            bound = product.rebound(call.operands, checked=True)  # (the planes were checked)
            if not bound.warm:  # (a product reads what its handle warmed when it runs)
                handle.warm(call.params, call.operands, keep_out=True)
            moved.append(bound)
        return tuple(moved)

    def names(self, index: int, roles: tuple[str, ...]) -> set[str]:
        """The planes that product ``index``'s operands of ``roles`` (``"a"``, ``"b"``,
        ``"out"``) view, by name."""
        seen = self._roles[index][1]
        return {seen[role][0] for role in roles}

    def keep(
        self, stream_ptr: int, handle: CublasCaptureHandle, products: tuple[BoundGemm, ...]
    ) -> None:
        """Keep ``products`` (bound on ``handle``, ``stream_ptr``'s) for later binds, over
        address views of their operands."""
        self._bound[stream_ptr] = (handle, tuple(p.rebound(_unheld(p)) for p in products))


def _layout(planes: Mapping[str, Any]) -> tuple[Any, ...]:
    """What products bound over ``planes`` depend on, besides their addresses: each plane's
    name, shape, strides, dtype, device and writability."""
    return tuple(
        (name, a.shape, a.strides, a.dtype, a.device_index, a.readonly)
        if hasattr(a, "ptr")
        else (name,)
        for name, a in planes.items()
    )


#: how a product sees an operand's plane: None as it is, else in a shape and byte strides
_Seen = tuple[tuple[int, ...], tuple[int, ...]] | None


def _seen(plane: Any, shape: tuple[int, ...]) -> _Seen:
    """How a product that takes ``plane`` (contiguous, as its layout was checked) in
    ``shape`` sees it (:func:`_view`)."""
    return None if plane.shape == shape else (shape, compact(shape, plane.itemsize))


def _view(plane: Any, seen: _Seen) -> Any:
    """``plane`` as a product sees it (:func:`_seen`)."""
    if seen is None:
        return plane
    shape, strides = seen
    return Array(
        ptr=plane.ptr, shape=shape, dtype=plane.dtype, strides=strides,
        device_index=plane.device_index, owner=plane._owner, readonly=plane.readonly,
    )  # fmt: skip


def _unheld(product: BoundGemm) -> dict[str, Any]:
    """The operands of ``product`` by role, as device Arrays over the same addresses that
    keep no memory alive."""
    return {role: _address(array) for role, array in product.operands.items()}


def _address(array: Any) -> Array:
    return Array(
        ptr=array.ptr, shape=tuple(array.shape), dtype=array.dtype,
        strides=tuple(array.strides), device_index=array.device_index,
    )  # fmt: skip


#: (id of the record, direction, math, planes' layout) -> the products bound over such planes
_products_kept: KeyedCache[tuple[Any, ...], _Products] = KeyedCache("routed products", 64)


# -- the launch --------------------------------------------------------------------------


class GemmLaunch:
    """The routed products of a plan (or of its adjoint) bound to the caller's device planes.

    Made by ``AutoPlan.bind`` (``direction="forward"``: the one product,
    written over the output) and by ``eagle.diff`` (``direction="adjoint"``:
    one product per gradient plane in ``planes``, added into it with beta =
    1, or written with beta = 0 for ``accumulate=False``). It lowers the
    record over the planes' dtype, binds the planes (no copies) through
    :func:`~eagle.gemm.captured_calls` as any caller would, and prepares
    cuBLAS for the stream its launches go to: every check of the products
    runs here, once. Calling it enqueues the products, legal inside a capture
    of a prepared stream.

    Args:
        plan: the routed plan.
        record: ``plan.record``.
        planes: the caller's device planes by name, of one dtype of
            :data:`ROUTE_DTYPES`.
        device: their device.
        direction: ``"forward"`` or ``"adjoint"``.
        math: the plan's float32 policy, ``"fp32"`` (exact) or ``"tf32"``;
            planes of other dtypes ignore it.
        accumulate: for an adjoint, True adds into the gradient planes (beta =
            1) and False writes them (beta = 0).

    Raises:
        PlanUnavailable: the record does not lower to products.
        ValueError: ``math`` is not one of :data:`MATH`.
        GemmCaptureUnavailable: no cuBLAS, or the launch stream is being
            captured and no cuBLAS handle of the device warmed these products
            before the capture (:meth:`prepare`).
        GemmMappingUnavailable: planes of dtypes no product takes.
    """

    def __init__(
        self,
        plan: Any,
        record: RecognizedContraction,
        planes: Mapping[str, Any],
        device: int,
        *,
        direction: Direction = "forward",
        math: Float32Math = "fp32",
        accumulate: bool = True,
    ) -> None:
        _check_math(math)
        beta = 1.0 if direction == "adjoint" and accumulate else 0.0
        # (the record by identity: its entry holds it, so no other record takes its id;
        # beta too, since the kept products are bound with it)
        key = (id(record), direction, math, beta, _layout(planes))
        products = _products_kept.get(key)
        if products is None or products.record is not record:
            products, calls = _Products.made(plan, record, planes, direction, math)
            _products_kept[key] = products
        else:
            calls = products.calls(planes)
        self._start(products, calls, device, beta, launch_stream(planes.values(), device))

    def _start(
        self,
        products: _Products,
        calls: tuple[CapturedCall, ...],
        device: int,
        beta: float,
        stream: int,
    ) -> None:
        """Take ``products`` bound over ``calls`` and prepare them for ``stream``, the raw
        stream a launch over their planes goes to."""
        self.device, self.beta, self.calls = device, beta, calls
        self.dtype, self.math = products.dtype, products.math
        self._kept = products
        # per stream, its handle and the products bound on it
        self._launches: dict[int, tuple[CublasCaptureHandle, tuple[BoundGemm, ...]]] = {}
        # the handle lent to captures of unprepared streams, and the products bound on it
        self._lent: tuple[CublasCaptureHandle, tuple[BoundGemm, ...]] | None = None
        self._products(stream)

    def mover(self) -> Callable[[Mapping[str, Any], int], GemmLaunch]:
        """What makes these products over other planes laid out as this launch's, at
        addresses the caller has checked (each written plane apart from the others), given
        those planes and the raw stream a launch over them goes to: the products are moved
        there, as a bind of such planes moves them, with nothing looked up or checked
        again. It holds no plane."""
        return functools.partial(GemmLaunch._moved, self._kept, self.device, self.beta)

    @classmethod
    def _moved(
        cls,
        products: _Products,
        device: int,
        beta: float,
        planes: Mapping[str, Any],
        stream: int,
    ) -> GemmLaunch:
        launch = cls.__new__(cls)
        launch._start(products, products.calls(planes), device, beta, stream)
        return launch

    def prepare(self, stream_ptr: int) -> tuple[BoundGemm, ...]:
        """The products bound on ``stream_ptr``'s cuBLAS handle, made and warmed on first use.

        A product the handle has not warmed (it keys products by their
        params and their operands' alignment) is run once into a scratch
        matrix aligned as the output plane is (so your planes are not
        written), waiting for the stream; later ones find the handle warm and
        enqueue nothing. Inside a capture of ``stream_ptr`` it binds the
        products to the handle made and warmed before the capture (pointers
        only: nothing allocates or waits), as when torch captures planes it
        allocated during the capture.

        Raises:
            GemmCaptureUnavailable: ``stream_ptr`` is being captured and its
                handle was never made or never warmed these products, or no cuBLAS.
        """
        prepared = self._launches.get(stream_ptr)
        if prepared is not None and prepared[0].alive:  # a handle dies with its stream
            return prepared[1]
        handle = stream_handle(stream_ptr, self.device)
        launches = self._kept.moved(stream_ptr, handle, self.calls)
        if launches is None:
            for call in self.calls:
                handle.warm(call.params, call.operands, keep_out=True)
            launches = tuple(
                handle.bind(call.params, call.operands, beta=self.beta) for call in self.calls
            )
            self._kept.keep(stream_ptr, handle, launches)
        self._launches[stream_ptr] = (handle, launches)
        return launches

    def _products(
        self, stream_ptr: int
    ) -> tuple[tuple[BoundGemm, ...], CublasCaptureHandle | None]:
        """The products a launch on ``stream_ptr`` enqueues, and the handle that lends
        itself to record them (None when they run on the stream's own handle, as
        :meth:`prepare` makes it).

        A capture of a stream that cannot be prepared (its handle cannot be made or warmed
        inside the capture) borrows a live handle of the device that warmed every product
        (:func:`~eagle.gemm.handles.warmed_handle`).

        Raises:
            GemmCaptureUnavailable: as :meth:`prepare`, or ``stream_ptr`` is being captured
                and no handle of the device warmed these products; nothing was enqueued.
        """
        try:
            return self.prepare(stream_ptr), None
        except GemmCaptureUnavailable as exc:
            if not is_capturing(stream_ptr):
                raise
            cause = exc
        handle = warmed_handle(self.device, ((c.params, c.operands) for c in self.calls))
        if handle is None:
            raise CaptureInProgress(
                f"stream {stream_ptr:#x} is being captured, and no cuBLAS handle on "
                f"cuda:{self.device} has warmed this routed plan's products; run the plan (or "
                "the torch op) once before the capture begins, on any stream of that device, "
                "over planes of these shapes aligned alike"
            ) from cause
        lent = self._lent
        if lent is None or lent[0] is not handle:
            bound = (handle.bind(c.params, c.operands, beta=self.beta) for c in self.calls)
            lent = self._lent = (handle, tuple(bound))
        return lent[1], handle

    def __call__(self, stream: Any) -> None:
        """Enqueue the products on ``stream`` (a Stream, a raw pointer, or None)."""
        self._enqueue(stream, slice(None))

    def planes_of(
        self, index: int, planes: Mapping[str, Any], roles: tuple[str, ...]
    ) -> tuple[Any, ...]:
        """The planes among ``planes`` (in their order) that product ``index``'s operands
        of ``roles`` (``"a"``, ``"b"``, ``"out"``) view."""
        names = self._kept.names(index, roles)
        return tuple(plane for name, plane in planes.items() if name in names)

    def parts(self) -> tuple[GemmPart, ...]:
        """Each product as work of its own (:class:`GemmPart`), in the order
        :meth:`__call__` enqueues them."""
        return tuple(GemmPart(self, index) for index in range(len(self.calls)))

    def ready(self, stream_ptr: int) -> bool:
        """Whether the products are bound on ``stream_ptr``'s live handle (:meth:`prepare`
        ran for it), so a launch there, captured or not, only enqueues them."""
        prepared = self._launches.get(stream_ptr)
        return prepared is not None and prepared[0].alive

    def _enqueue(self, stream: Any, which: slice) -> None:
        """Enqueue the products ``which`` selects on ``stream``."""
        stream_ptr = stream if type(stream) is int else as_stream_ptr(stream, self.device)
        prepared = self._launches.get(stream_ptr)
        if prepared is not None and prepared[0].alive:
            launches, lender = prepared[1], None
        else:
            launches, lender = self._products(stream_ptr)
        if lender is not None:
            record_lent(lender, stream_ptr, launches[which])
            return
        for launch in launches[which]:
            launch()


class GemmPart:
    """One product of a :class:`GemmLaunch`, enqueued alone.

    An adjoint binds each of its gradient products as a step of its own, so that a
    capture may run them on parallel branches (:mod:`eagle.plan._bound`). It has the
    launch's surface for one product: :attr:`calls`, :meth:`prepare`, :meth:`ready`
    and a call that enqueues it.

    Args:
        launch: the products.
        index: which of ``launch.calls``.
    """

    def __init__(self, launch: GemmLaunch, index: int) -> None:
        self.launch = launch
        self.index = index
        self.calls = (launch.calls[index],)
        self._which = slice(index, index + 1)

    def prepare(self, stream_ptr: int) -> tuple[BoundGemm, ...]:
        """The product bound on ``stream_ptr``'s handle (:meth:`GemmLaunch.prepare`)."""
        return self.launch.prepare(stream_ptr)[self._which]

    def ready(self, stream_ptr: int) -> bool:
        """As :meth:`GemmLaunch.ready`."""
        return self.launch.ready(stream_ptr)

    def __call__(self, stream: Any) -> None:
        """Enqueue the product on ``stream`` (a Stream, a raw pointer, or None)."""
        self.launch._enqueue(stream, self._which)


class HostGemm:
    """The routed products of a plan (or of its adjoint) over the caller's host planes.

    The host twin of :class:`GemmLaunch`, made by a plan built with
    ``host_route="gemm"``: the products of ``lower_dense_gemm(record,
    direction)`` as numpy products over views of the planes (no copies of
    them), the forward written over the output, each adjoint product added
    into its gradient plane (written, for ``accumulate=False``). 16-bit
    planes are summed in float32 and rounded once, when stored.

    Args:
        plan: the routed plan.
        record: ``plan.record``.
        planes: the caller's host planes by name (numpy arrays or host eagle
            Arrays), of one dtype of :data:`ROUTE_DTYPES`.
        direction: ``"forward"`` or ``"adjoint"``.
        accumulate: for an adjoint, True adds into the gradient planes and False
            writes them.

    Attributes:
        written: the gradient planes an adjoint adds into or writes (empty for the
            forward).
        last: the forward's output, which its one product writes whole (None for an
            adjoint).
    """

    def __init__(
        self,
        plan: Any,
        record: RecognizedContraction,
        planes: Mapping[str, Any],
        *,
        direction: Direction = "forward",
        accumulate: bool = True,
    ) -> None:
        views = gemm_operands(plan, record, planes).views
        dtype = dtype_of(views[record.operands[0].name].dtype).name
        lowered = _lowered(record, direction, dtype)
        outputs = [spec.name for spec in lowered.outputs if spec.name in views]
        adjoint = direction == "adjoint"
        beta = 1.0 if adjoint and accumulate else 0.0
        self._products: list[functools.partial[None]] = []
        for step in lowered.subplan(outputs).steps:
            spec = step.matmul
            assert spec is not None  # the lowered plan is products alone
            left, right = product_views(
                views[spec.a], views[spec.b],
                transpose_a=spec.transpose_a, transpose_b=spec.transpose_b,
                transpose_out=spec.transpose_out,
            )  # fmt: skip
            product = functools.partial(host_product, left, right, views[spec.out], 1.0, beta)
            self._products.append(product)
        self.written = tuple(views[name] for name in outputs) if adjoint else ()
        self.last = None if adjoint else views[lowered.outputs[0].name]

    def __call__(self, _stream: None) -> None:
        """Run the products now."""
        for product in self._products:
            product()


#: the C name of each cuBLAS function a product may call
_CUBLAS_NAMES: dict[CublasEntry, str] = {
    "sgemm": "cublasSgemm",
    "dgemm": "cublasDgemm",
    "gemm_ex": "cublasGemmEx",
    "lt_matmul": "cublasLtMatmul",
}


def _cublas_call(dtype: str, math: Float32Math) -> str:
    """The cuBLAS function a routed product over planes of ``dtype`` calls (a routed
    plan's handle computes float32 exactly, so TF32 and 16-bit products go through
    GemmEx)."""
    return _CUBLAS_NAMES[cublas_entry(dtype, math)]


def products_source(
    name: str, record: RecognizedContraction, side: str, dtype: str, math: Float32Math
) -> str:
    """What a plan of the kernel ``name`` on the GEMM route runs on ``side`` over planes
    of ``dtype`` under the float32 policy ``math``, as text: its products
    (``plan.source(side)``)."""
    lowered = _lowered(record, "forward", dtype)
    what = "numpy.matmul" if side == "host" else f"cuBLAS ({_cublas_call(dtype, math)})"
    lines = [
        f"# hawk kernel {name!r} on the GEMM route ({side}, {dtype}): the kernel's loop does",
        f"# not run; {what} computes, over views of the planes (no copies):",
    ]
    shapes = {spec.name: spec.shape for spec in (*lowered.inputs, *lowered.outputs)}
    for step in lowered.steps:
        spec = step.matmul
        assert spec is not None  # the lowered plan is products alone
        out = f"{spec.out}{'.T' if spec.transpose_out else ''}"
        a = f"{spec.a}{'.T' if spec.transpose_a else ''}"
        b = f"{spec.b}{'.T' if spec.transpose_b else ''}"
        lines.append(
            f"{out} = {a} @ {b}  # {spec.a}: {shapes[spec.a]}, {spec.b}: {shapes[spec.b]}, "
            f"{spec.out}: {shapes[spec.out]}"
        )
    return "\n".join([*lines, ""])
