"""A cuBLAS handle whose products are legal inside a CUDA graph capture.

cuBLAS allocates when it makes a handle and may load kernels on the first run
of a shape; neither is legal inside a capture. :class:`CublasCaptureHandle`
therefore does all of that up front: it makes the handle, binds it to one
stream, gives it an eagle-owned workspace (so cuBLAS never allocates one), and
runs each distinct product once in :meth:`~CublasCaptureHandle.warm`. Inside
the capture only :meth:`~CublasCaptureHandle.sgemm` (float32) and
:meth:`~CublasCaptureHandle.gemm` (every dtype of :mod:`eagle.gemm.dtypes`)
run, or a product bound once with :meth:`~CublasCaptureHandle.bind`. A capture
of a stream no handle was made for records warmed products through
:func:`eagle.gemm.lending.record_lent`, which lends the handle to that stream.
fp8 products run on cuBLASLt (:mod:`eagle.gemm._scaled`), made on the handle's
first one, with the handle's stream and workspace; their per-tensor scales are
operands, ``"a_scale"`` and ``"b_scale"``.

A product's checks (dtypes, layout, overlap, device) run the first time the
handle sees its params with operands of that pointer, shape, strides, dtype
and device; the prepared call is kept under exactly those values, so a later
call with the same ones only enqueues.

``nvmath.bindings.cublas`` is imported on first use (``cublasLt`` on the first fp8
product), so importing eagle.gemm loads neither a driver nor cuBLAS.
"""

from __future__ import annotations

import math as _math
import threading
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from eagle._cache import on_clear
from eagle.arrays import Array, _holder
from eagle.cuda._runtime import CudaUnavailable, cudart, ensure_device
from eagle.cuda.graph import is_capturing, record_use
from eagle.cuda.memory import default_pool
from eagle.cuda.stream import Stream, as_stream_ptr
from eagle.errors import EagleTypeError, check_option
from eagle.gemm import _library
from eagle.gemm._bound_gemm import BoundGemm
from eagle.gemm._library import CheckedLibrary
from eagle.gemm._operands import ROLES, SCALES, handle_operands
from eagle.gemm._prepared import (
    ALIGNMENT,
    CACHED_CALLS,
    Call,
    Prepared,
    host_scalars,
    product_key,
    real_scalars,
    write_span,
)
from eagle.gemm._scaled import ScaledProducts
from eagle.gemm.dtypes import SCALED_DTYPES, cublas_entry, dtype_of, product_dtypes
from eagle.gemm.errors import (
    CaptureInProgress,
    CublasUnavailable,
    GemmMappingUnavailable,
    HandleDestroyed,
    NotCapturable,
)
from eagle.gemm.params import (
    GemmParams,
    SgemmParams,
    check_scaled_pointer,
    gemm_params_for_arrays,
    sgemm_params_for_arrays,
)
from hawk.dtypes import TABLE, Float32Math

__all__ = ["WORKSPACE_BYTES", "BoundGemm", "CublasCaptureHandle"]

WORKSPACE_BYTES = 32 * 1024 * 1024
"""The bytes of cuBLAS workspace each handle owns (32 MiB, NVIDIA's recommendation for Hopper)."""

_MATH_MODES: dict[Float32Math, str] = {"fp32": "DEFAULT_MATH", "tf32": "TF32_TENSOR_OP_MATH"}
# the element types cublasGemmEx is told: each product dtype's cudaDataType_t
_DATA_TYPES = {row.name: row.cuda for row in TABLE if row.product is not None}
_FLOAT32 = np.dtype(np.float32)

Params = SgemmParams | GemmParams
_Scales = tuple[Any, Any]
"""The scale arrays of cuBLAS's first and second operand (None: no scale), in that order."""


class CublasCaptureHandle:
    """One cuBLAS handle, bound to one stream, whose products may be captured.

    Made outside any capture: the handle is created, bound to ``stream_ptr``
    once, given a :data:`~eagle.gemm.capture.WORKSPACE_BYTES` workspace from eagle's memory pool,
    and set to take alpha and beta from host memory (so their values are baked
    into a recorded node). Destroy the graphs that recorded its work first,
    then the handle, then the memory pool (see :meth:`destroy`). It may be
    shared by threads: each product runs under the handle's lock, which
    :func:`~eagle.gemm.lending.record_lent` holds while it lends the handle to
    another stream.

    Args:
        stream_ptr: the stream its products run on (a raw pointer or a
            :class:`~eagle.cuda.Stream`); its device is the handle's device.
        math: ``"fp32"`` (default, exact FP32) or ``"tf32"``, an opt-in for
            float32 products that accept TF32 rounding on tensor cores; it
            applies to :meth:`sgemm` and to float32 :meth:`gemm` params.

    Raises:
        GemmCaptureUnavailable: no CUDA driver or device, no cuBLAS, cuBLAS
            could not make a handle, or ``stream_ptr`` is being captured.
        ValueError: ``math`` is neither ``"fp32"`` nor ``"tf32"``.
        TypeError: ``stream_ptr`` is neither a stream nor a raw pointer.
    """

    def __init__(self, stream_ptr: Stream | int, *, math: Float32Math = "fp32") -> None:
        self._closed = True
        # held while cuBLAS runs through the handle; re-entrant, so that a garbage
        # collection that destroys the handle in the holding thread cannot deadlock
        self._lock = threading.RLock()
        check_option(math, Float32Math, "math")
        self.math = math
        self._live_graphs: weakref.WeakSet[Any] = weakref.WeakSet()
        self._warmed: set[tuple[Params, int, int, int]] = set()
        # prepared calls by (params, each operand's pointer, shape, strides, dtype, device)
        self._sgemm_calls = Prepared()
        self._gemm_calls = Prepared()
        self._scaled: ScaledProducts | None = None  # the cuBLASLt side, made on first use
        self.stream_ptr = as_stream_ptr(stream_ptr)  # (a bad argument first: no driver asked)
        cublas = _library.cublas()
        try:
            cudart.cudaGetDeviceCount()  # no driver or no device: CudaUnavailable
            # a stream object is kept alive with the handle, which is bound to it (a raw
            # pointer to an eagle Stream keeps it too, through the workspace's buffer)
            self._stream = self.stream_ptr if isinstance(stream_ptr, int) else stream_ptr
            capturing = is_capturing(self.stream_ptr)
            if capturing:
                raise CaptureInProgress(
                    f"stream {self.stream_ptr:#x} is being captured; make the "
                    f"CublasCaptureHandle (which allocates) before the capture begins"
                )
            self.device = int(cudart.cudaStreamGetDevice(self.stream_ptr))
            ensure_device(self.device)
        except CudaUnavailable as exc:
            raise CublasUnavailable(f"no CUDA driver or device: {exc}") from exc
        free_retired()  # outside a capture of this stream, as a new handle must be
        workspace = default_pool(self.device).allocate(WORKSPACE_BYTES, self._stream)
        try:
            handle = cublas.create()
        except (RuntimeError, OSError) as exc:  # (a CudaError, or the library not found)
            raise CublasUnavailable(f"cuBLAS could not make a handle: {exc}") from exc
        # The finalizer holds the raw handle and the workspace its replays use (freed after
        # the handle). destroy() and a failure in the rest of __init__ free both at once;
        # a handle the garbage collector finds is only retired, and freed at the next safe
        # point (see _retire). Nothing runs at interpreter exit: the driver frees both then.
        self._release = weakref.finalize(self, _retire, cublas, handle, workspace)
        self._release.atexit = False
        try:
            cublas.set_stream(handle, self.stream_ptr)  # resets the workspace: set it after
            cublas.set_workspace(handle, workspace.ptr, workspace.nbytes)
            cublas.set_pointer_mode(handle, cublas.PointerMode.HOST)
            cublas.set_math_mode(handle, getattr(cublas.Math, _MATH_MODES[math]))
        except BaseException:
            self._free_now()
            raise
        self._cublas = cublas
        self._handle = handle
        self._workspace = (workspace.ptr, workspace.nbytes)  # the finalizer holds the buffer
        self._closed = False
        self._ops = {"N": int(cublas.Operation.N), "T": int(cublas.Operation.T)}
        self._compute = {
            "fp32": int(cublas.ComputeType.COMPUTE_32F),
            "tf32": int(cublas.ComputeType.COMPUTE_32F_FAST_TF32),
        }
        self._algo = int(cublas.GemmAlgo.DEFAULT)

    @property
    def alive(self) -> bool:
        """Whether the handle takes work (False once :meth:`destroy` ran)."""
        return not self._closed

    def warm(self, params: Params, operands: Mapping[str, Any], *, keep_out: bool = False) -> None:
        """Run the product once, outside any capture, the first time it is seen.

        It writes ``operands["out"]`` and waits for the stream; later calls for
        the same product do nothing. A product is its ``params`` and how its
        operands are aligned (cuBLAS may pick another kernel for a view that
        starts mid-vector). Warm every distinct product before the capture that
        records it. The handle's record of what it has warmed is the only one:
        :meth:`sgemm` and :meth:`gemm` inside a capture consult it.

        Args:
            params: :class:`~eagle.gemm.SgemmParams` (from
                :func:`~eagle.gemm.sgemm_params_for_arrays`) or
                :class:`~eagle.gemm.GemmParams` (from
                :func:`~eagle.gemm.gemm_params_for_arrays`), any dtype.
            operands: ``{"a": ..., "b": ..., "out": ...}``, device arrays on
                this handle's device (eagle, torch, CuPy, CUDA array interface,
                DLPack), laid out as ``params`` describe; for fp8 params also
                ``"a_scale"`` and ``"b_scale"`` where the factors have scales
                (see :meth:`gemm`).
            keep_out: leave ``out`` as it is: the product runs into a scratch
                matrix from eagle's pool, laid out and aligned as ``out`` is
                (so it warms ``out``'s product), freed afterwards.

        Raises:
            GemmCaptureUnavailable: the handle was destroyed, the stream is being
                captured, or an operand is not a device array on this device.
            GemmMappingUnavailable: ``params`` do not describe the operands.
            TypeError: ``params`` is neither SgemmParams nor GemmParams, or
                ``operands`` not a mapping.
        """
        self._check_alive()
        kind = GemmParams if isinstance(params, GemmParams) else SgemmParams
        operands, held = handle_operands(operands)
        first, second, out, key, scales = self._checked(params, operands, kind)
        if key in self._warmed:
            return
        if is_capturing(self.stream_ptr):
            raise CaptureInProgress(
                "warm() runs the product, so it must come before the capture begins"
            )
        target = out.ptr
        if keep_out:  # the scratch lives until this returns, after the synchronize
            nbytes = write_span(params, dtype_of(out.dtype).itemsize) + ALIGNMENT
            scratch = default_pool(self.device).allocate(nbytes, self._stream)
            target = scratch.ptr + (out.ptr - scratch.ptr) % ALIGNMENT
        with self._lock:
            self._check_alive()
            _holder.order_after(held.values(), self.stream_ptr)
            prepared = self._call(
                params, first.ptr, second.ptr, target, key, 1.0, 0.0, _scale_pointers(scales)
            )
            prepared.run(1.0, 0.0)
            cudart.cudaStreamSynchronize(self.stream_ptr)
            self._warmed.add(key)
        if "out" in held and not keep_out:
            _holder.bump_versions((held["out"].tensor,))
        self._sgemm_calls.clear()  # prepared calls note whether they were warm: look again
        self._gemm_calls.clear()

    def sgemm(
        self,
        params: SgemmParams,
        operands: Mapping[str, Any],
        *,
        alpha: float = 1.0,
        beta: float = 0.0,
    ) -> None:
        """Enqueue ``out = alpha * op(a) @ op(b) + beta * out`` on the handle's stream.

        The one call made inside a capture: it records one cuBLAS product with
        ``alpha`` and ``beta`` baked in (change them and you record again). A
        capture keeps the handle and the operands alive.

        Args:
            params: from :func:`~eagle.gemm.sgemm_params_for_arrays`.
            operands: ``{"a": ..., "b": ..., "out": ...}``, float32 device arrays
                on this handle's device, laid out as ``params`` describe: eagle
                Arrays, or another producer's (torch, CuPy, CUDA array interface,
                DLPack), whose queued work the handle's stream waits for (an event,
                no host wait); a torch ``out`` has its version bumped.
            alpha: scales the product.
            beta: scales what ``out`` held (1.0 adds into it).

        Raises:
            GemmCaptureUnavailable: the handle was destroyed, an operand is not
                a device array on this device, or the stream is being captured
                and this product was never warmed.
            GemmMappingUnavailable: ``params`` do not describe the operands.
            TypeError: ``params`` is not SgemmParams, or ``operands`` not a mapping.
        """
        self._enqueue_product(params, operands, alpha, beta, SgemmParams, self._sgemm_calls)

    def gemm(
        self,
        params: GemmParams,
        operands: Mapping[str, Any],
        *,
        alpha: float = 1.0,
        beta: float = 0.0,
    ) -> None:
        """Enqueue ``out = alpha * op(a) @ op(b) + beta * out`` for any product dtype.

        :meth:`sgemm` for every dtype of :mod:`eagle.gemm.dtypes`: bfloat16 and
        float16 factors (cublasGemmEx, summed in float32, ``out`` bfloat16/
        float16 or float32), float32 (Sgemm, or TF32 tensor cores for params
        made with ``math="tf32"``), float64 (Dgemm) and fp8 (cublasLtMatmul,
        ``out`` bfloat16 or float32, on sm_89 or newer). The same rules: legal
        inside a capture once warmed, ``alpha`` and ``beta`` baked into the
        recorded node, in the arithmetic the sums are done in (float64 for
        float64 factors, float32 otherwise).

        An fp8 product computes ``out = alpha * (a_scale * b_scale) * op(a) @ op(b)
        + beta * out``: ``operands["a_scale"]`` and ``operands["b_scale"]`` are
        one-element float32 device arrays (either may be left out: a scale of 1),
        read by the device when the product runs, so a replayed graph uses the
        values they hold then (update them in place between replays). The
        product keeps their addresses: pass the same arrays to have it found
        again without checks.

        Args:
            params: from :func:`~eagle.gemm.gemm_params_for_arrays`.
            operands: ``{"a": ..., "b": ..., "out": ...}``, device arrays on
                this handle's device, laid out and typed as ``params`` describe
                (any producer, as for :meth:`sgemm`); for fp8 params, optionally
                ``"a_scale"`` and ``"b_scale"``.
            alpha: scales the product.
            beta: scales what ``out`` held (1.0 adds into it).

        Raises:
            GemmCaptureUnavailable: the handle was destroyed, an operand is not
                a device array on this device, the stream is being captured
                and this product was never warmed, a scale that is not a
                one-element float32 device array or given for a product that is
                not fp8, or (:class:`~eagle.gemm.CublasUnavailable`) an fp8
                product on a device older than sm_89.
            GemmMappingUnavailable: ``params`` do not describe the operands
                (their layout or dtypes), exact float32 params on a handle
                made with ``math="tf32"``, or an fp8 operand whose address is
                not 16-byte aligned.
            TypeError: ``params`` is not GemmParams, or ``operands`` not a mapping.
        """
        self._enqueue_product(params, operands, alpha, beta, GemmParams, self._gemm_calls)

    def _enqueue_product(
        self,
        params: Params,
        operands: Mapping[str, Any],
        alpha: float,
        beta: float,
        kind: type,
        calls: Prepared,
    ) -> None:
        """Enqueue one product through its prepared call (made on first sight)."""
        if self._closed:
            self._check_alive()
        key = None
        prepared = None  # the prepared call for exactly these params and operands, if any
        try:
            a, b, out = operands["a"], operands["b"], operands["out"]
            scaled = len(operands) > 3  # operands beside a, b and out: an fp8 product's scales
        except (KeyError, TypeError):  # a role missing, or no mapping: the checks say so
            a = b = out = None
        if isinstance(a, Array) and isinstance(b, Array) and isinstance(out, Array):
            # an Array's slots behind its read-only ptr and device_index (a third of the
            # Python this call costs when read through the properties)
            plain = (params, params.__class__,
                     a._ptr, a.shape, a.strides, a.dtype, a._device_index,
                     b._ptr, b.shape, b.strides, b.dtype, b._device_index,
                     out._ptr, out.shape, out.strides, out.dtype, out._device_index)  # fmt: skip
            # the prepared call of an fp8 product holds its scales' addresses (None: a scale
            # that is no eagle Array, for the checks to take)
            key = _with_scales(plain, operands) if scaled else plain
            if key is not None:
                last = calls.last
                if last is not None and last[0] == key:  # the last call's: no hashing
                    prepared = last[1]
                elif isinstance(params, kind):  # (other params: the checks refuse them)
                    prepared = calls.get(key)
                    if prepared is not None:
                        calls.last = (key, prepared)
        if prepared is None:  # not seen, or not eagle Arrays: taken and checked
            taken, held = handle_operands(operands)
            if held:  # arrays of another producer, as eagle Arrays over the same memory
                _holder.order_after(held.values(), self.stream_ptr)  # their work comes first
                self._enqueue_product(params, taken, alpha, beta, kind, calls)
                if "out" in held:  # a torch tensor written: its version goes up
                    _holder.bump_versions((held["out"].tensor,))
                return
            prepared = self._prepared(params, operands, kind, calls, key)
            a, b, out = operands["a"], operands["b"], operands["out"]
            scaled = len(operands) > 3
        if not prepared.warm and is_capturing(self.stream_ptr):
            self._refuse_unwarmed(params, operands)
        with self._lock:
            if self._closed:
                self._check_alive()
            prepared.run(alpha, beta)
        if prepared.swap:  # (two calls: building the swapped tuple costs as much again)
            record_use(self.stream_ptr, self, b, a, out)
        else:
            record_use(self.stream_ptr, self, a, b, out)
        if scaled:
            record_use(self.stream_ptr, *(operands[r] for r in SCALES if r in operands))

    def bind(
        self,
        params: Params,
        operands: Mapping[str, Any],
        *,
        alpha: float = 1.0,
        beta: float = 0.0,
    ) -> BoundGemm:
        """One product checked now and kept with its operands: calling it only enqueues.

        Everything :meth:`sgemm` or :meth:`gemm` checks is checked here, once;
        the returned :class:`BoundGemm` holds the operands (so their memory
        stays theirs) and enqueues the product with ``alpha`` and ``beta`` each
        time it is called, legal inside a capture once warmed.

        Raises:
            As :meth:`sgemm` (SgemmParams) or :meth:`gemm` (GemmParams).
        """
        self._check_alive()
        kind = GemmParams if isinstance(params, GemmParams) else SgemmParams
        operands, held = handle_operands(operands)
        first, second, out, key, scales = self._checked(params, operands, kind)
        _holder.order_after(held.values(), self.stream_ptr)
        at = _scale_pointers(scales)
        prepared = self._call(params, first.ptr, second.ptr, out.ptr, key, alpha, beta, at)
        written = held["out"].tensor if "out" in held else None
        return BoundGemm(self, params, prepared, (first, second, out), written, scales)

    def has_warmed(self, params: Params, operands: Mapping[str, Any]) -> bool:
        """Whether :meth:`warm` ran this product: its ``params``, with operands aligned as
        these are (nothing is checked)."""
        first, second = (operands[name] for name in params.operands)
        return product_key(params, first, second, operands["out"]) in self._warmed

    def destroy(self) -> None:
        """Close the handle to new work and free cuBLAS's handle and workspace (idempotent).

        Afterwards :meth:`warm`, :meth:`sgemm`, :meth:`gemm` and bound products
        raise :class:`~eagle.gemm.GemmCaptureUnavailable`. While a live graph
        (captured or instantiated, not yet destroyed) holds work recorded
        against the handle, its replays still use the workspace, so the cuBLAS
        handle and the workspace are freed only when the last such graph is
        destroyed. Until then the memory pool refuses to be destroyed, naming
        the buffers still held.
        """
        with self._lock:  # not while a product runs through the handle
            self._closed = True
            self._sgemm_calls.clear()
            self._gemm_calls.clear()
            if not self._live_graphs:
                self._free_now()
                if self._scaled is not None:
                    self._scaled.close()

    def _free_now(self) -> None:
        """Free the cuBLAS handle and its workspace now (the first call; later ones and
        the finalizer then do nothing)."""
        detached = self._release.detach()
        if detached is not None:
            _release(*detached[2])

    def _graphs_released(self) -> None:
        """The last live graph recorded against this handle is gone."""
        if self._closed:
            self.destroy()

    def _check_alive(self) -> None:
        if self._closed:
            raise HandleDestroyed(f"{self!r} was destroyed; make a new CublasCaptureHandle")

    def _refuse_unwarmed(self, params: Params, operands: Mapping[str, Any]) -> None:
        offsets = ", ".join(f"{name} +{operands[name].ptr % ALIGNMENT}" for name in ROLES)
        raise CaptureInProgress(
            f"this product was never warmed ({params}; operand bytes past {ALIGNMENT}-byte "
            f"alignment: {offsets}); call handle.warm(params, operands) with these operands "
            f"before the capture begins"
        )

    def _prepared(
        self,
        params: Params,
        operands: Mapping[str, Any],
        kind: type,
        calls: Prepared,
        key: tuple[Any, ...] | None,
    ) -> Call:
        """Check a product in full and keep its prepared call under ``key``, the operands'
        values as :meth:`_enqueue_product` reads them (None: operands that are not eagle
        Arrays, which that lookup never finds)."""
        first, second, out, warm_key, scales = self._checked(params, operands, kind)
        at = _scale_pointers(scales)
        prepared = self._call(params, first.ptr, second.ptr, out.ptr, warm_key, 1.0, 0.0, at)
        if key is not None:
            if len(calls) >= CACHED_CALLS:
                calls.clear()
            calls[key] = prepared
        return prepared

    def _checked(
        self, params: Params, operands: Mapping[str, Any], kind: type
    ) -> tuple[Any, Any, Any, tuple[Params, int, int, int], _Scales]:
        """Every check of a product: its params' type, the operands (device arrays on this
        device), their layout and dtypes against ``params``, ``out`` apart from ``a`` and
        ``b``; the handle's math; and for fp8 the scales and the operands' alignment.
        Returns cuBLAS's first and second operand, out, the product's key in the handle's
        record of what it warmed, and the scales of the first and second operand."""
        if not isinstance(params, kind):
            maker = "sgemm_params_for_arrays" if kind is SgemmParams else "gemm_params_for_arrays"
            raise EagleTypeError(
                f"params must be {kind.__name__} (from {maker}), not {type(params).__name__}"
            )
        if not isinstance(operands, Mapping):
            raise EagleTypeError(
                f"operands must be a mapping {{'a': ..., 'b': ..., 'out': ...}}, not "
                f"{type(operands).__name__}"
            )
        missing = [name for name in ROLES if name not in operands]
        if missing:
            raise NotCapturable(f"operands lack {missing}; pass {{'a': ..., 'b': ..., 'out': ...}}")
        for name in ROLES:
            self._check_device_array(name, operands[name])
        transpose_a, transpose_b, transpose_out = params.transposes
        a, b, out = operands["a"], operands["b"], operands["out"]
        actual: Params
        if isinstance(params, GemmParams):
            general = gemm_params_for_arrays(
                a, b, out,
                transpose_a=transpose_a, transpose_b=transpose_b, transpose_out=transpose_out,
            )  # fmt: skip
            actual = _with_math(general, params.math)
            maker = "gemm_params_for_arrays"
        else:
            actual = sgemm_params_for_arrays(
                a, b, out,
                transpose_a=transpose_a, transpose_b=transpose_b, transpose_out=transpose_out,
            )  # fmt: skip
            maker = "sgemm_params_for_arrays"
        if actual != params:
            raise GemmMappingUnavailable(
                f"params {params} do not describe these operands (their layout gives "
                f"{actual}); compute params with {maker}(a, b, out, ...)"
            )
        exact32 = isinstance(params, GemmParams) and params[9:12] == ("float32", "float32", "fp32")
        if exact32 and self.math != "fp32":
            raise GemmMappingUnavailable(
                f"params ask for exact float32 (math='fp32'), but this handle was made with "
                f"math={self.math!r}, which rounds every float32 product to TF32; make the "
                f"params with math='tf32', or use a handle made with math='fp32'"
            )
        scaled = isinstance(params, GemmParams) and params.dtype in SCALED_DTYPES
        given = self._checked_scales(operands, scaled)
        if scaled:
            for name in ROLES:
                check_scaled_pointer(name, operands[name].ptr)
        first, second = (operands[name] for name in params.operands)
        first_scale, second_scale = (given.get(f"{name}_scale") for name in params.operands)
        scales = (first_scale, second_scale)
        return first, second, out, product_key(params, first, second, out), scales

    def _checked_scales(self, operands: Mapping[str, Any], scaled: bool) -> dict[str, Any]:
        """The scales among ``operands``, by role, each a one-element float32 device array on
        this device; refused for a product that is not ``scaled`` (fp8)."""
        given = {role: operands[role] for role in SCALES if role in operands}
        if given and not scaled:
            raise NotCapturable(
                f"operands {sorted(given)} are per-tensor scales, which only fp8 products "
                f"take; leave them out"
            )
        for role, scale in given.items():
            self._check_device_array(role, scale)
            shape = tuple(scale.shape)
            if dtype_of(scale.dtype) != _FLOAT32 or _math.prod(shape) != 1:
                raise NotCapturable(
                    f"operand {role!r} is {dtype_of(scale.dtype)} of shape {shape}; a scale is "
                    f"a one-element float32 device array (arrays.full((1,), s, "
                    f"dtype='float32', device='cuda:{self.device}'))"
                )
        return given

    def _check_device_array(self, name: str, array: Any) -> None:
        if getattr(array, "is_host", True) or not isinstance(getattr(array, "ptr", None), int):
            raise NotCapturable(
                f"operand {name!r} is not a device array ({type(array).__name__}); move it "
                f"with arrays.asarray(x, device='cuda:{self.device}')"
            )
        if array.device_index != self.device:
            raise NotCapturable(
                f"operand {name!r} is on {array.device}, but this handle's stream is on "
                f"cuda:{self.device}"
            )

    def _call(
        self,
        params: Params,
        first: int,
        second: int,
        out: int,
        key: tuple[Any, ...],
        alpha: float,
        beta: float,
        scales: tuple[int, int] = (0, 0),
    ) -> Call:
        """The prepared cuBLAS call of checked ``params`` over these pointers, with its own
        ``alpha`` and ``beta`` in the compute type (float64 for float64 factors, float32
        otherwise); an fp8 product's on cuBLASLt, with the addresses of the scales of
        cuBLAS's first and second operand (0: none)."""
        alpha, beta = real_scalars(alpha, beta)
        dtype = params.dtype if isinstance(params, GemmParams) else "float32"
        math = params.math if isinstance(params, GemmParams) else self.math
        scalars, alpha_at, beta_at = host_scalars(
            alpha, beta, "float64" if dtype == "float64" else "float32"
        )
        swap = params.operands == ("b", "a")
        entry = cublas_entry(dtype, math, self.math)
        if entry == "lt_matmul":
            assert isinstance(params, GemmParams)
            scaled = self._scaled_products().call(
                params, (first, second, out), scales, (alpha_at, beta_at)
            )
            warm = key in self._warmed
            return Call(scaled, (), scalars, (alpha, beta), key, swap=swap, warm=warm)
        head = (self._handle, self._ops[params.op_a], self._ops[params.op_b],
                params.m, params.n, params.k, alpha_at)  # fmt: skip
        cublas = self._cublas
        if entry != "gemm_ex":  # the dtype's own function, summing as the handle does
            function = getattr(cublas, entry)
            args: tuple[Any, ...] = (
                *head, first, params.lda, second, params.ldb, beta_at, out, params.ldc,
            )  # fmt: skip
        else:
            assert isinstance(params, GemmParams)
            kind, out_kind = _DATA_TYPES[dtype], _DATA_TYPES[params.out_dtype]
            function = cublas.gemm_ex
            args = (*head, first, kind, params.lda, second, kind, params.ldb, beta_at,
                    out, out_kind, params.ldc, self._compute[math], self._algo)  # fmt: skip
        return Call(
            function, args, scalars, (alpha, beta), key, swap=swap, warm=key in self._warmed
        )

    def _scaled_products(self) -> ScaledProducts:
        """The handle's cuBLASLt side (made on its first fp8 product)."""
        if self._scaled is None:
            self._scaled = ScaledProducts(
                self.device, (self.stream_ptr, *self._workspace), self._cublas
            )
        return self._scaled

    def _point_at(self, stream_ptr: int, workspace: int, nbytes: int) -> None:
        """Point the handle's products, cuBLAS's and cuBLASLt's, at ``stream_ptr`` with the
        workspace at ``workspace`` (``nbytes``): lending does, and points it back."""
        self._cublas.set_stream(self._handle, stream_ptr)  # resets the workspace: set it after
        self._cublas.set_workspace(self._handle, workspace, nbytes)
        if self._scaled is not None:
            self._scaled.target = (stream_ptr, workspace, nbytes)

    def __repr__(self) -> str:
        state = ", destroyed" if self._closed else ""
        stream = getattr(self, "stream_ptr", 0)
        return f"CublasCaptureHandle(stream={stream:#x}, math={self.math!r}{state})"


def _release(cublas: CheckedLibrary, handle: int, workspace: Any) -> None:
    """Destroy a cuBLAS handle; ``workspace`` is held until then, and freed after it."""
    cublas.destroy(handle)


#: handles the garbage collector found, freed by :func:`free_retired`
_retired: list[tuple[CheckedLibrary, int, Any]] = []


def _retire(cublas: CheckedLibrary, handle: int, workspace: Any) -> None:
    """The finalizer of a handle the garbage collector found: keep it for
    :func:`free_retired`. The collector may run inside anyone's stream capture (a
    ``torch.cuda.graph`` of another stream, which eagle cannot see), where destroying a
    cuBLAS handle, which may synchronise the device, would invalidate that capture."""
    _retired.append((cublas, handle, workspace))


def free_retired() -> None:
    """Free the handles (and workspaces) the garbage collector retired. Called where eagle
    is about to make a handle, by :func:`~eagle.gemm.release_handles` and by
    :func:`eagle.clear_caches`: outside any capture."""
    while _retired:
        _release(*_retired.pop())


on_clear(free_retired)


def _scale_pointers(scales: _Scales) -> tuple[int, int]:
    """The addresses of ``scales`` (0 for None), as :meth:`CublasCaptureHandle._call`
    takes them."""
    first, second = scales
    return (0 if first is None else first.ptr, 0 if second is None else second.ptr)


def _with_math(params: GemmParams, math: str) -> GemmParams:
    """``params`` (made with the exact math) with ``math`` instead, where their dtypes
    take it (else as they are, for the comparison with the params given to refuse)."""
    if math == params.math:
        return params
    try:
        product_dtypes(params.dtype, params.b_dtype, params.out_dtype, math)
    except GemmMappingUnavailable:
        return params
    return params._replace(math=math)


def _with_scales(key: tuple[Any, ...], operands: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """``key`` with each scale's address (an fp8 product's prepared call holds them), or
    None when a scale is no eagle Array."""
    if not isinstance(operands, Mapping):
        return None  # (the checks refuse it by name)
    scales = [operands.get(role) for role in SCALES]
    if not all(scale is None or isinstance(scale, Array) for scale in scales):
        return None
    return key + tuple(None if scale is None else scale._ptr for scale in scales)
