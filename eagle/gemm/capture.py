"""A cuBLAS handle whose products are legal inside a CUDA graph capture.

cuBLAS allocates when it makes a handle and may load kernels on the first run
of a shape; neither is legal inside a capture. :class:`CublasCaptureHandle`
therefore does all of that up front: it makes the handle, binds it to one
stream, gives it an eagle-owned workspace (so cuBLAS never allocates one), and
runs each distinct product once in :meth:`~CublasCaptureHandle.warm`. Inside
the capture only :meth:`~CublasCaptureHandle.sgemm` runs.

``nvmath.bindings.cublas`` is imported on first use, so importing eagle.gemm
loads neither a driver nor cuBLAS.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np

from eagle.cuda._runtime import CudaUnavailable, call, ensure_device
from eagle.cuda.graph import is_capturing, record_use
from eagle.cuda.memory import default_pool
from eagle.cuda.stream import Stream, as_stream_ptr
from eagle.gemm.errors import GemmCaptureUnavailable, GemmMappingUnavailable
from eagle.gemm.params import SgemmParams, sgemm_params_for_arrays

__all__ = ["WORKSPACE_BYTES", "CublasCaptureHandle", "stream_handle"]

WORKSPACE_BYTES = 32 * 1024 * 1024
"""The bytes of cuBLAS workspace each handle owns (32 MiB, NVIDIA's recommendation for Hopper)."""

_MATH_MODES = {"fp32": "DEFAULT_MATH", "tf32": "TF32_TENSOR_OP_MATH"}
_ALIGNMENT = 16  # bytes: cuBLAS picks kernels by how operands align to its widest loads
_ROLES = ("a", "b", "out")


def _cublas() -> ModuleType:
    try:
        from nvmath.bindings import cublas  # type: ignore[import-untyped]
    except ImportError as exc:
        raise GemmCaptureUnavailable(
            f"cuBLAS is not reachable: nvmath-python is not installed ({exc}); "
            f"install nvmath-python"
        ) from exc
    return cublas


class CublasCaptureHandle:
    """One cuBLAS handle, bound to one stream, whose ``sgemm`` may be captured.

    Made outside any capture: the handle is created, bound to ``stream_ptr``
    once, given a :data:`~eagle.gemm.capture.WORKSPACE_BYTES` workspace from eagle's memory pool,
    and set to take alpha and beta from host memory (so their values are baked
    into a recorded node). Destroy the graphs that recorded its work first,
    then the handle, then the memory pool (see :meth:`destroy`).

    Args:
        stream_ptr: the stream its products run on (a raw pointer or a
            :class:`~eagle.cuda.Stream`); its device is the handle's device.
        math: ``"fp32"`` (default, exact FP32) or ``"tf32"``, an opt-in for
            products that accept TF32 rounding on tensor cores.

    Raises:
        GemmCaptureUnavailable: no CUDA driver or device, no cuBLAS, cuBLAS
            could not make a handle, or ``stream_ptr`` is being captured.
        ValueError: ``math`` is neither ``"fp32"`` nor ``"tf32"``.
    """

    def __init__(self, stream_ptr: Stream | int, *, math: str = "fp32") -> None:
        self._closed = True
        if math not in _MATH_MODES:
            raise ValueError(f"math must be 'fp32' or 'tf32', not {math!r}")
        self.math = math
        self._live_graphs: weakref.WeakSet[Any] = weakref.WeakSet()
        self._warmed: set[tuple[SgemmParams, int, int, int]] = set()
        cublas = _cublas()
        try:
            call("cudaGetDeviceCount")  # no driver or no device: CudaUnavailable
            self.stream_ptr = as_stream_ptr(stream_ptr)
            # a Stream object is kept alive with the handle, which is bound to it
            self._stream = stream_ptr if isinstance(stream_ptr, Stream) else self.stream_ptr
            capturing = is_capturing(self.stream_ptr)
            if capturing:
                raise GemmCaptureUnavailable(
                    f"stream {self.stream_ptr:#x} is being captured; make the "
                    f"CublasCaptureHandle (which allocates) before the capture begins"
                )
            self.device = int(call("cudaStreamGetDevice", self.stream_ptr))
            ensure_device(self.device)
        except CudaUnavailable as exc:
            raise GemmCaptureUnavailable(f"no CUDA driver or device: {exc}") from exc
        workspace = default_pool(self.device).allocate(WORKSPACE_BYTES, self._stream)
        try:
            handle = cublas.create()
        except (cublas.cuBLASError, RuntimeError, OSError) as exc:
            raise GemmCaptureUnavailable(f"cuBLAS could not make a handle: {exc}") from exc
        # The finalizer holds the raw handle and the workspace its replays use (freed after
        # the handle); it runs on destroy(), when the handle is collected, or if the rest of
        # __init__ fails. Nothing runs at interpreter exit: the driver frees both then.
        self._release = weakref.finalize(self, _release, cublas, handle, workspace)
        self._release.atexit = False
        try:
            cublas.set_stream(handle, self.stream_ptr)  # resets the workspace: set it after
            cublas.set_workspace(handle, workspace.ptr, workspace.nbytes)
            cublas.set_pointer_mode(handle, cublas.PointerMode.HOST)
            cublas.set_math_mode(handle, getattr(cublas.Math, _MATH_MODES[math]))
        except BaseException:
            self._release()
            raise
        self._cublas = cublas
        self._handle = handle
        self._closed = False
        self._ops = {"N": int(cublas.Operation.N), "T": int(cublas.Operation.T)}
        # alpha and beta live here; cuBLAS reads them when a call is made (or recorded)
        self._scalars = {
            double: np.zeros(2, dtype=np.float64 if double else np.float32)
            for double in (False, True)
        }
        self._scalar_addresses = {
            double: scalars.ctypes.data for double, scalars in self._scalars.items()
        }

    @property
    def alive(self) -> bool:
        """Whether the handle takes work (False once :meth:`destroy` ran)."""
        return not self._closed

    def warm(
        self, params: SgemmParams, operands: Mapping[str, Any], *, keep_out: bool = False
    ) -> None:
        """Run the product once, outside any capture, the first time it is seen.

        It writes ``operands["out"]`` and waits for the stream; later calls for
        the same product do nothing. A product is its ``params`` and how its
        operands are aligned (cuBLAS may pick another kernel for a view that
        starts mid-vector). Warm every distinct product before the capture that
        records it. The handle's record of what it has warmed is the only one:
        :meth:`sgemm` inside a capture consults it.

        Args:
            params: from :func:`~eagle.gemm.sgemm_params_for_arrays`.
            operands: ``{"a": ..., "b": ..., "out": ...}``, float32 device arrays
                on this handle's device, laid out as ``params`` describe.
            keep_out: leave ``out`` as it is: the product runs into a scratch
                matrix from eagle's pool, laid out and aligned as ``out`` is
                (so it warms ``out``'s product), freed afterwards.

        Raises:
            GemmCaptureUnavailable: the handle was destroyed, the stream is being
                captured, or an operand is not a device array on this device.
            GemmMappingUnavailable: ``params`` do not describe the operands.
            TypeError: ``params`` is not SgemmParams, or ``operands`` not a mapping.
        """
        self._check_alive()
        first, second, out = self._bind(params, operands)
        key = _product_key(params, first, second, out)
        if key in self._warmed:
            return
        if is_capturing(self.stream_ptr):
            raise GemmCaptureUnavailable(
                "warm() runs the product, so it must come before the capture begins"
            )
        target = out.ptr
        if keep_out:  # the scratch lives until this returns, after the synchronize
            scratch = default_pool(self.device).allocate(_span(params) + _ALIGNMENT, self._stream)
            target = scratch.ptr + (out.ptr - scratch.ptr) % _ALIGNMENT
        self._enqueue(params, first.ptr, second.ptr, target, 1.0, 0.0, double=False)
        call("cudaStreamSynchronize", self.stream_ptr)
        self._warmed.add(key)

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
                on this handle's device, laid out as ``params`` describe.
            alpha: scales the product.
            beta: scales what ``out`` held (1.0 adds into it).

        Raises:
            GemmCaptureUnavailable: the handle was destroyed, an operand is not
                a device array on this device, or the stream is being captured
                and this product was never warmed.
            GemmMappingUnavailable: ``params`` do not describe the operands.
            TypeError: ``params`` is not SgemmParams, or ``operands`` not a mapping.
        """
        self._check_alive()
        first, second, out = self._bind(params, operands)
        warmed = _product_key(params, first, second, out) in self._warmed
        if not warmed and is_capturing(self.stream_ptr):
            offsets = ", ".join(f"{name} +{operands[name].ptr % _ALIGNMENT}" for name in _ROLES)
            raise GemmCaptureUnavailable(
                f"this product was never warmed ({params}; operand bytes past {_ALIGNMENT}-byte "
                f"alignment: {offsets}); call handle.warm(params, operands) with these operands "
                f"before the capture begins"
            )
        self._enqueue(params, first.ptr, second.ptr, out.ptr, alpha, beta, double=False)
        record_use(self.stream_ptr, self, first, second, out)

    def destroy(self) -> None:
        """Close the handle to new work and free cuBLAS's handle and workspace (idempotent).

        Afterwards :meth:`warm` and :meth:`sgemm` raise
        :class:`~eagle.gemm.GemmCaptureUnavailable`. While a live graph (captured
        or instantiated, not yet destroyed) holds work recorded against the
        handle, its replays still use the workspace, so the cuBLAS handle and
        the workspace are freed only when the last such graph is destroyed.
        Until then the memory pool refuses to be destroyed, naming the buffers
        still held.
        """
        self._closed = True
        if not self._live_graphs:
            self._release()  # the first call frees; later ones do nothing

    def _graphs_released(self) -> None:
        """The last live graph recorded against this handle is gone."""
        if self._closed:
            self.destroy()

    def _check_alive(self) -> None:
        if self._closed:
            raise GemmCaptureUnavailable(f"{self!r} was destroyed; make a new CublasCaptureHandle")

    def _bind(self, params: SgemmParams, operands: Mapping[str, Any]) -> tuple[Any, Any, Any]:
        if not isinstance(params, SgemmParams):
            raise TypeError(
                f"params must be SgemmParams (from sgemm_params_for_arrays), "
                f"not {type(params).__name__}"
            )
        if not isinstance(operands, Mapping):
            raise TypeError(
                f"operands must be a mapping {{'a': ..., 'b': ..., 'out': ...}}, not "
                f"{type(operands).__name__}"
            )
        missing = [name for name in _ROLES if name not in operands]
        if missing:
            raise GemmCaptureUnavailable(
                f"operands lack {missing}; pass {{'a': ..., 'b': ..., 'out': ...}}"
            )
        for name in _ROLES:
            self._check_device_array(name, operands[name])
        transpose_a, transpose_b, transpose_out = params.transposes
        actual = sgemm_params_for_arrays(
            operands["a"], operands["b"], operands["out"],
            transpose_a=transpose_a, transpose_b=transpose_b, transpose_out=transpose_out,
        )  # fmt: skip
        if actual != params:
            raise GemmMappingUnavailable(
                f"params {params} do not describe these operands (their layout gives "
                f"{actual}); compute params with sgemm_params_for_arrays(a, b, out, ...)"
            )
        first, second = (operands[name] for name in params.operands)
        return first, second, operands["out"]

    def _check_device_array(self, name: str, array: Any) -> None:
        if getattr(array, "is_host", True) or not isinstance(getattr(array, "ptr", None), int):
            raise GemmCaptureUnavailable(
                f"operand {name!r} is not a device array ({type(array).__name__}); move it "
                f"with arrays.asarray(x, device='cuda:{self.device}')"
            )
        if array.device_index != self.device:
            raise GemmCaptureUnavailable(
                f"operand {name!r} is on {array.device}, but this handle's stream is on "
                f"cuda:{self.device}"
            )

    def _enqueue(
        self,
        params: SgemmParams,
        first: int,
        second: int,
        out: int,
        alpha: float,
        beta: float,
        *,
        double: bool,
    ) -> None:
        scalars = self._scalars[double]
        scalars[0] = alpha
        scalars[1] = beta
        address = self._scalar_addresses[double]
        gemm = self._cublas.dgemm if double else self._cublas.sgemm
        gemm(
            self._handle,
            self._ops[params.op_a], self._ops[params.op_b],
            params.m, params.n, params.k,
            address, first, params.lda, second, params.ldb,
            address + scalars.itemsize, out, params.ldc,
        )  # fmt: skip

    def __repr__(self) -> str:
        state = ", destroyed" if self._closed else ""
        stream = getattr(self, "stream_ptr", 0)
        return f"CublasCaptureHandle(stream={stream:#x}, math={self.math!r}{state})"


def _release(cublas: ModuleType, handle: int, workspace: Any) -> None:
    """Destroy a cuBLAS handle; ``workspace`` is held until then, and freed after it."""
    cublas.destroy(handle)


def _span(params: SgemmParams) -> int:
    """Bytes a float32 product writes from its destination's address: (n - 1) * ldc + m."""
    return ((params.n - 1) * params.ldc + params.m) * 4 if params.m and params.n else 0


def _product_key(params: SgemmParams, *arrays: Any) -> tuple[SgemmParams, int, int, int]:
    return (params, *(array.ptr % _ALIGNMENT for array in arrays))  # type: ignore[return-value]


_stream_handles: dict[tuple[int, int], CublasCaptureHandle] = {}
_stream_handles_lock = threading.Lock()


def stream_handle(stream_ptr: int, device: int = 0) -> CublasCaptureHandle:
    """The FP32 handle eagle's own products use on ``stream_ptr`` (made once, then cached).

    Args:
        stream_ptr: a raw stream pointer on ``device``.
        device: the stream's device.

    Raises:
        GemmCaptureUnavailable: as :class:`CublasCaptureHandle`.
    """
    key = (device, stream_ptr)
    handle = _stream_handles.get(key)
    if handle is None:
        with _stream_handles_lock:
            handle = _stream_handles.get(key)
            if handle is None:
                handle = _stream_handles[key] = CublasCaptureHandle(stream_ptr)
    return handle
