"""fp8 products on cuBLASLt: the scaled products of a
:class:`~eagle.gemm.CublasCaptureHandle`.

cuBLAS's ``cublasGemmEx`` has no fp8 products; cuBLASLt's ``cublasLtMatmul`` has, on
devices from sm_89 (Ada, Hopper), with a per-tensor scale for each factor read from
device memory when the product runs. :class:`ScaledProducts` is a handle's cuBLASLt
side, made on its first fp8 product: a cuBLASLt handle, the device's check, and one
algorithm per product (its params), chosen by cuBLASLt's heuristic the first time the
product is prepared, which is when the handle warms it, outside any capture. A
prepared product (:class:`ScaledCall`) holds its descriptors and arguments, so running
it, inside a capture too, only enqueues ``cublasLtMatmul``:

    out = alpha * (scale(a) * scale(b)) * op(a) @ op(b) + beta * out

with the scales given as device pointers (``CUBLASLT_MATMUL_DESC_A_SCALE_POINTER`` and
``B_SCALE_POINTER``: a replay reads the values they hold then), alpha and beta as
float32 host values (baked into a recorded node), sums in float32 (or, with
``math="fast_accum"``, in the tensor cores' own accumulator), ``out`` bfloat16 or
float32 (which also serves as cuBLASLt's ``C``). The product runs on the stream and
the workspace its handle is pointed at (:attr:`ScaledProducts.target`, which lending
the handle to another stream changes).

``nvmath.bindings.cublasLt`` is imported on the first fp8 product.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from eagle.cuda._runtime import CudaError, CudaUnavailable, cudart, runtime
from eagle.gemm import _library
from eagle.gemm._library import CheckedLibrary
from eagle.gemm.errors import CublasUnavailable, NotCapturable
from eagle.gemm.params import SCALED_ALIGNMENT, GemmParams
from hawk.dtypes import TABLE

__all__ = ["FP8_ARCH", "ScaledCall", "ScaledProducts"]

FP8_ARCH = (8, 9)
"""The first compute capability with fp8 tensor cores (Ada, sm_89; Hopper is sm_90)."""

_CACHED_ALGORITHMS = 1024  # algorithms a handle keeps (one per product) before starting afresh
_CODES = {row.name: row.cuda for row in TABLE if row.cuda is not None}  # cudaDataType_t


class ScaledProducts:
    """A handle's cuBLASLt side: its cuBLASLt handle and the algorithm of each product.

    Args:
        device: the handle's device.
        target: ``(stream, workspace pointer, workspace bytes)``: where the products
            run (the handle's stream and workspace).
        cublas: nvmath's cuBLAS bindings (their ``Operation`` and ``ComputeType``).

    Raises:
        CublasUnavailable: the device is older than sm_89 (naming it and its compute
            capability), nvmath has no cuBLASLt, or cuBLASLt could not make a handle.
    """

    def __init__(self, device: int, target: tuple[int, int, int], cublas: CheckedLibrary) -> None:
        _check_device(device)
        lt = _library.cublaslt()
        try:
            handle = lt.create()
        except (RuntimeError, OSError) as exc:  # (a CudaError, or the library not found)
            raise CublasUnavailable(f"cuBLASLt could not make a handle: {exc}") from exc
        self._release = weakref.finalize(self, lt.destroy, handle)
        self._release.atexit = False  # the driver frees it at exit
        self._lt = lt
        self._handle = handle
        self.target = target
        self._algorithms: dict[tuple[GemmParams, tuple[bool, bool]], Any] = {}
        self._trans = {"N": int(cublas.Operation.N), "T": int(cublas.Operation.T)}
        self._compute = int(cublas.ComputeType.COMPUTE_32F)
        self._algo_at = lt.matmul_heuristic_result_dtype.fields["algo"][1]

    def close(self) -> None:
        """Destroy the cuBLASLt handle (idempotent); prepared calls must not run after."""
        self._release()

    def call(
        self,
        params: GemmParams,
        pointers: tuple[int, int, int],
        scales: tuple[int, int],
        scalars: tuple[int, int],
    ) -> ScaledCall:
        """The prepared product of checked fp8 ``params`` over these device pointers.

        Args:
            params: fp8 params (their layout already checked for cuBLASLt).
            pointers: cuBLAS's first operand, its second, and ``out``.
            scales: the pointers of the first and second operand's float32 scales
                (0: none, a scale of 1).
            scalars: the addresses of float32 ``alpha`` and ``beta`` in host memory, read
                when the call runs.

        Raises:
            NotCapturable: cuBLASLt has no algorithm for this product.
        """
        lt = self._lt
        first_type, second_type = (
            _CODES[params.b_dtype if role == "b" else params.dtype] for role in params.operands
        )
        out_type = _CODES[params.out_dtype]
        descriptors = _Descriptors(lt)
        desc = descriptors.fields["desc"] = lt.matmul_desc_create(self._compute, _CODES["float32"])
        attribute = lt.MatmulDescAttribute
        self._set(desc, attribute.TRANSA, self._trans[params.op_a])
        self._set(desc, attribute.TRANSB, self._trans[params.op_b])
        if params.math == "fast_accum":
            self._set(desc, attribute.FAST_ACCUM, 1)
        pointers_of = (attribute.A_SCALE_POINTER, attribute.B_SCALE_POINTER)
        for attr, scale in zip(pointers_of, scales, strict=True):
            if scale:
                self._set(desc, attr, scale)
        # each matrix as stored, column-major (rows, columns, leading dimension): cuBLAS's
        # first operand k x m (read transposed), its second k x n, out (C and D) m x n
        layouts = descriptors.fields["layouts"]
        for stored in (
            (first_type, params.k, params.m, params.lda),
            (second_type, params.k, params.n, params.ldb),
            (out_type, params.m, params.n, params.ldc),
        ):
            layouts.append(lt.matrix_layout_create(*stored))
        first_layout, second_layout, out_layout = layouts
        scaled = (bool(scales[0]), bool(scales[1]))
        algorithm = self._algorithm(
            (params, scaled), desc, (first_layout, second_layout, out_layout)
        )
        first, second, out = pointers
        alpha_at, beta_at = scalars
        head = (
            self._handle, desc, alpha_at, first, first_layout, second, second_layout,
            beta_at, out, out_layout, out, out_layout,
            algorithm.ptr + self._algo_at,
        )  # fmt: skip
        return ScaledCall(self, head, descriptors, algorithm)

    def run(self, head: tuple[Any, ...]) -> None:
        """Enqueue one ``cublasLtMatmul`` with these arguments, on the stream and the
        workspace the handle is pointed at."""
        stream, workspace, nbytes = self.target
        self._lt.matmul(*head, workspace, nbytes, stream)

    def _algorithm(
        self, product: tuple[GemmParams, tuple[bool, bool]], desc: int, layouts: tuple[int, ...]
    ) -> Any:
        """The algorithm of ``product`` (params, and which factors have scales): cuBLASLt's
        first pick the first time it is seen (for pointers aligned to 16 bytes and the
        handle's workspace), then kept."""
        found = self._algorithms.get(product)
        if found is not None:
            return found
        lt = self._lt
        preference = lt.matmul_preference_create()
        try:
            attribute = lt.MatmulPreferenceAttribute
            nbytes, setter = self.target[2], lt.matmul_preference_set_attribute
            for attr, value in (
                (attribute.MAX_WORKSPACE_BYTES, nbytes),
                (attribute.MIN_ALIGNMENT_A_BYTES, SCALED_ALIGNMENT),
                (attribute.MIN_ALIGNMENT_B_BYTES, SCALED_ALIGNMENT),
                (attribute.MIN_ALIGNMENT_C_BYTES, SCALED_ALIGNMENT),
                (attribute.MIN_ALIGNMENT_D_BYTES, SCALED_ALIGNMENT),
            ):
                buffer = np.array(value, lt.get_matmul_preference_attribute_dtype(attr))
                setter(preference, attr, buffer.ctypes.data, buffer.itemsize)
            results = lt.MatmulHeuristicResult(1)
            count = np.zeros(1, np.int32)
            first, second, out = layouts
            try:
                lt.matmul_algo_get_heuristic(
                    self._handle, desc, first, second, out, out, preference, 1,
                    results.ptr, count.ctypes.data,
                )  # fmt: skip
            except CudaError as exc:
                raise NotCapturable(f"cuBLASLt has no algorithm for {product[0]}: {exc}") from exc
        finally:
            lt.matmul_preference_destroy(preference)
        if count[0] < 1:
            raise NotCapturable(f"cuBLASLt has no algorithm for {product[0]}")
        if len(self._algorithms) >= _CACHED_ALGORITHMS:
            self._algorithms.clear()
        self._algorithms[product] = results
        return results

    def _set(self, desc: int, attr: Any, value: int) -> None:
        """Set a matmul descriptor's attribute, in the C type cuBLASLt reads it as."""
        lt = self._lt
        buffer = np.array(value, lt.get_matmul_desc_attribute_dtype(attr))
        lt.matmul_desc_set_attribute(desc, attr, buffer.ctypes.data, buffer.itemsize)


class _Descriptors:
    """A prepared product's matmul descriptor and matrix layouts (in ``fields``, filled
    as they are made), destroyed with it, or with what was made of them when making the
    rest failed."""

    def __init__(self, lt: CheckedLibrary) -> None:
        self.fields: dict[str, Any] = {"desc": 0, "layouts": []}
        weakref.finalize(self, _destroy, lt, self.fields).atexit = False


def _destroy(lt: CheckedLibrary, fields: dict[str, Any]) -> None:
    for layout in fields["layouts"]:
        lt.matrix_layout_destroy(layout)
    if fields["desc"]:
        lt.matmul_desc_destroy(fields["desc"])


class ScaledCall:
    """One prepared fp8 product: calling it enqueues ``cublasLtMatmul`` (what a
    :class:`~eagle.gemm._prepared.Call` runs). It holds its descriptors and algorithm."""

    __slots__ = ("_algorithm", "_descriptors", "_head", "_products")

    def __init__(
        self, products: ScaledProducts, head: tuple[Any, ...], descriptors: Any, algorithm: Any
    ) -> None:
        self._products, self._head = products, head
        self._descriptors, self._algorithm = descriptors, algorithm

    def __call__(self) -> None:
        self._products.run(self._head)


def _check_device(device: int) -> None:
    """Refuse a device without fp8 tensor cores (below sm_89), naming it."""
    try:
        attr = runtime().cudaDeviceAttr
        major = int(cudart.cudaDeviceGetAttribute(attr.cudaDevAttrComputeCapabilityMajor, device))
        minor = int(cudart.cudaDeviceGetAttribute(attr.cudaDevAttrComputeCapabilityMinor, device))
    except CudaUnavailable as exc:
        raise CublasUnavailable(f"no CUDA driver or device: {exc}") from exc
    if (major, minor) < FP8_ARCH:
        name = cudart.cudaGetDeviceProperties(device).name
        name = name.decode().rstrip("\0") if isinstance(name, bytes) else str(name)
        raise CublasUnavailable(
            f"cuda:{device} ({name}) has compute capability {major}.{minor}; fp8 products need "
            f"{FP8_ARCH[0]}.{FP8_ARCH[1]} or newer (Ada, Hopper) for their tensor cores: "
            f"convert the factors with .astype('bfloat16') there"
        )
