"""The row-major -> column-major mapping of one product onto one cuBLAS call.

cuBLAS is column-major; eagle's arrays are row-major. A row-major matrix with
row stride ``ld`` elements is, read column-major, its own transpose with
leading dimension ``ld``. So ``out = op(a) @ op(b)`` becomes the column-major
``out^T = op(b)^T op(a)^T``: cuBLAS's first operand is ``b`` and its second is
``a``. When the destination is stored transposed (``transpose_out``), the
column-major reading of ``out`` is the product itself and the operands keep
their order. Leading dimensions come from the byte strides, so row- and
column-sliced views of a larger buffer map without copies.

fp8 products (cuBLASLt's, on Hopper and Ada) take one layout, "TN": cuBLAS's first
operand transposed and its second not. Under the mapping above that is, with or
without ``transpose_out``, ``transpose_a=False`` and ``transpose_b=True``: ``a`` of
shape ``(M, K)`` and ``b`` of shape ``(N, K)``, both with ``K`` contiguous (as a
linear layer's input and weight are). They also need 16-byte-aligned leading
dimensions, the contracted extent ``K`` and ``out``'s contiguous extent multiples of
16, and (checked where the addresses are known, by the handle) 16-byte-aligned
pointers; :func:`check_scaled_layout` says which rule a layout breaks.

Everything here is pure: no device, no driver.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from eagle.errors import EagleTypeError, EagleValueError
from eagle.gemm._operands import check_flags, described
from eagle.gemm.dtypes import SCALED_DTYPES, dtype_of, product_dtypes
from eagle.gemm.errors import GemmMappingUnavailable

__all__ = [
    "SCALED_ALIGNMENT",
    "GemmParams",
    "SgemmParams",
    "check_scaled_layout",
    "check_scaled_pointer",
    "gemm_params_for_arrays",
    "product_shape",
    "sgemm_params",
    "sgemm_params_for_arrays",
]

_INT_MAX = 2**31 - 1  # cuBLAS's m, n, k and leading dimensions are 32-bit ints

SCALED_ALIGNMENT = 16
"""Bytes to which an fp8 product's pointers and leading dimensions are aligned, and of
which its ``K`` and ``out``'s contiguous extent are multiples (in elements)."""


class _SgemmFields(NamedTuple):
    op_a: str
    op_b: str
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    operands: tuple[str, str]


class SgemmParams(_SgemmFields):
    """The column-major cuBLAS call that computes a row-major ``out = op(a) @ op(b)``.

    A hashable named tuple, checked when made: ``m``, ``n`` and ``k`` are
    non-negative and each leading dimension is at least ``max(1, rows)`` of
    the column-major matrix it describes, as cuBLAS requires. ``k = 0`` is a
    product: cuBLAS then computes ``beta * out``.

    Attributes:
        op_a: ``"N"`` or ``"T"``, the operation cuBLAS applies to its first operand.
        op_b: ``"N"`` or ``"T"``, the operation cuBLAS applies to its second operand.
        m: rows of cuBLAS's column-major result.
        n: columns of cuBLAS's column-major result.
        k: the contracted extent.
        lda: leading dimension (elements) of cuBLAS's first operand.
        ldb: leading dimension (elements) of cuBLAS's second operand.
        ldc: leading dimension (elements) of the destination.
        operands: which of ``"a"``/``"b"`` is cuBLAS's first operand, then its
            second: ``("b", "a")``, or ``("a", "b")`` when ``transpose_out``.

    Raises:
        ValueError: an op that is not "N"/"T", a negative or non-integer
            extent, a leading dimension too small for its matrix, or
            ``operands`` other than ``("b", "a")``/``("a", "b")`` (each
            message names the field).
    """

    __slots__ = ()

    def __new__(
        cls,
        op_a: str,
        op_b: str,
        m: int,
        n: int,
        k: int,
        lda: int,
        ldb: int,
        ldc: int,
        operands: tuple[str, str],
    ) -> SgemmParams:
        layout = _checked_layout("SgemmParams", op_a, op_b, m, n, k, lda, ldb, ldc, operands)
        return super().__new__(cls, *layout)

    @property
    def transposes(self) -> tuple[bool, bool, bool]:
        """The ``(transpose_a, transpose_b, transpose_out)`` flags these params compute."""
        return _transposes(self)


def _checked_layout(
    owner: str,
    op_a: str,
    op_b: str,
    m: int,
    n: int,
    k: int,
    lda: int,
    ldb: int,
    ldc: int,
    operands: tuple[str, str],
) -> tuple[str, str, int, int, int, int, int, int, tuple[str, str]]:
    """The column-major layout fields, checked (ValueError naming the field) and normalised."""
    for name, op in (("op_a", op_a), ("op_b", op_b)):
        if op not in ("N", "T"):
            raise EagleValueError(f"{owner}: {name} must be 'N' or 'T', not {op!r}")
    for name, extent in (("m", m), ("n", n), ("k", k)):
        if not isinstance(extent, int | np.integer) or not 0 <= extent <= _INT_MAX:
            raise EagleValueError(
                f"{owner}: {name} = {extent!r}; extents are ints from 0 to {_INT_MAX}"
            )
    rows = {"lda": m if op_a == "N" else k, "ldb": k if op_b == "N" else n, "ldc": m}
    for name, ld in (("lda", lda), ("ldb", ldb), ("ldc", ldc)):
        least = max(1, rows[name])
        if not isinstance(ld, int | np.integer) or not least <= ld <= _INT_MAX:
            raise EagleValueError(
                f"{owner}: {name} = {ld!r}; it must be an int from max(1, rows) = "
                f"{least} to {_INT_MAX}"
            )
    if tuple(operands) not in (("b", "a"), ("a", "b")):
        raise EagleValueError(
            f"{owner}: operands must be ('b', 'a') or ('a', 'b'), not {operands!r}"
        )
    return (
        op_a, op_b, int(m), int(n), int(k), int(lda), int(ldb), int(ldc),
        (operands[0], operands[1]),
    )  # fmt: skip


def _transposes(params: SgemmParams | GemmParams) -> tuple[bool, bool, bool]:
    first, second = params.op_a == "T", params.op_b == "T"
    if params.operands == ("a", "b"):
        return not first, not second, True
    return second, first, False


class _GemmFields(NamedTuple):
    op_a: str
    op_b: str
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    operands: tuple[str, str]
    dtype: str
    out_dtype: str
    math: str
    b_dtype: str


class GemmParams(_GemmFields):
    """One cuBLAS product of any dtype :mod:`eagle.gemm.dtypes` allows: layout and dtypes.

    The layout fields are those of :class:`SgemmParams` (the column-major
    call computing the row-major ``out = op(a) @ op(b)``), checked the same
    way when made; the rest say what the call computes in. Made by
    :func:`gemm_params_for_arrays`, run by
    :meth:`~eagle.gemm.CublasCaptureHandle.gemm`. A hashable named tuple whose
    first fields (``op_a`` to ``operands``) mean what they mean in
    :class:`SgemmParams`.

    Attributes:
        dtype: ``a``'s dtype name, the factors' dtype: ``"bfloat16"``,
            ``"float16"``, ``"float32"``, ``"float64"``, ``"float8_e4m3fn"`` or
            ``"float8_e5m2"``.
        out_dtype: ``out``'s dtype name (``dtype``, or ``"float32"`` for a
            half-precision product; ``"bfloat16"`` or ``"float32"`` for fp8).
        math: what the sums are done in: ``"fp32"`` (float32; exact for
            float32 factors), ``"tf32"`` (float32 factors rounded to TF32 on
            tensor cores), ``"fp64"``, or ``"fast_accum"`` (fp8 factors, summed
            in the tensor cores' own accumulator).
        b_dtype: ``b``'s dtype name: ``dtype``, except in a mixed fp8 pair
            (float8_e4m3fn with float8_e5m2). Given as None (or left out), it is
            ``dtype``.

    Raises:
        ValueError: a layout field as :class:`SgemmParams` refuses it, dtypes
            and math no product has, or (fp8) a layout its products do not take
            (:func:`~eagle.gemm.params.check_scaled_layout`); the message says which.
    """

    __slots__ = ()

    def __new__(
        cls,
        op_a: str,
        op_b: str,
        m: int,
        n: int,
        k: int,
        lda: int,
        ldb: int,
        ldc: int,
        operands: tuple[str, str],
        dtype: str,
        out_dtype: str,
        math: str,
        b_dtype: str | None = None,
    ) -> GemmParams:
        layout = _checked_layout("GemmParams", op_a, op_b, m, n, k, lda, ldb, ldc, operands)
        b_dtype = dtype if b_dtype is None else b_dtype
        try:
            dtypes = product_dtypes(dtype, b_dtype, out_dtype, math)
            if dtypes[0] in SCALED_DTYPES:
                check_scaled_layout(SgemmParams(*layout), dtype_of(dtypes[1]).itemsize)
        except (GemmMappingUnavailable, TypeError) as exc:
            raise EagleValueError(f"GemmParams: {exc}") from None
        if dtypes[2] != math:
            raise EagleValueError(
                f"GemmParams: math is {math!r}; name it: {dtypes[2]!r} for {dtypes[0]} factors"
            )
        return super().__new__(cls, *layout, *dtypes, dtype_of(b_dtype).name)

    @property
    def layout(self) -> SgemmParams:
        """The column-major layout alone, as :class:`SgemmParams`."""
        return SgemmParams(*self[:9])

    @property
    def transposes(self) -> tuple[bool, bool, bool]:
        """The ``(transpose_a, transpose_b, transpose_out)`` flags these params compute."""
        return _transposes(self)


def sgemm_params(
    a_shape: Sequence[int],
    a_strides: Sequence[int],
    b_shape: Sequence[int],
    b_strides: Sequence[int],
    out_shape: Sequence[int],
    out_strides: Sequence[int],
    itemsize: int,
    *,
    transpose_a: bool,
    transpose_b: bool,
    transpose_out: bool,
) -> SgemmParams:
    """Map the row-major product ``out = op(a) @ op(b)`` onto one column-major Sgemm.

    ``op(x)`` is ``x.T`` when its ``transpose_x`` flag is set. With
    ``transpose_out`` the destination holds the product transposed.

    Args:
        a_shape, b_shape, out_shape: the 2-D shapes of the three matrices.
        a_strides, b_strides, out_strides: their strides in bytes.
        itemsize: bytes per element (4 for float32, 8 for float64).
        transpose_a, transpose_b, transpose_out: the flags of the product.

    Returns:
        The :class:`SgemmParams` of the cuBLAS call.

    A contracted extent of 0 maps to a call with ``k = 0`` (cuBLAS then computes
    ``beta * out``); an operand with no elements may have any strides (numpy
    gives an empty array zero strides).

    Raises:
        GemmMappingUnavailable: naming the operand, when one is not 2-D, has a
            negative extent, is not unit-stride along its last axis (F-ordered,
            or a step along its columns), has a row stride smaller than its width
            (broadcast), when the contracted extents disagree, or when ``out``
            has the wrong shape (the message gives the shape it must have).
    """
    shapes = {"a": a_shape, "b": b_shape, "out": out_shape}
    strides = {"a": a_strides, "b": b_strides, "out": out_strides}
    for label, given in (("shape", shapes), ("strides", strides)):
        for name, value in given.items():
            given[name] = _ints(f"{name}_{label}", value)
    return _mapped(
        shapes,
        strides,
        {"a": itemsize, "b": itemsize, "out": itemsize},
        check_flags(transpose_a, transpose_b, transpose_out),
    )


def _ints(argument: str, value: Any) -> tuple[Any, ...]:
    """``value`` as a tuple (of what should be ints: the callers check them).

    Raises:
        TypeError: it is not a sequence, naming ``argument``.
    """
    try:
        if not isinstance(value, str | bytes):  # (a sequence, of characters or bytes)
            return tuple(value)
    except TypeError:
        pass
    raise EagleTypeError(
        f"{argument} must be a sequence of ints (a tuple, as array.shape gives), not "
        f"{type(value).__name__}"
    )


def _mapped(
    shapes: Mapping[str, Sequence[int]],
    strides: Mapping[str, Sequence[int]],
    itemsizes: Mapping[str, int],
    flags: tuple[bool, bool, bool],
) -> SgemmParams:
    """:func:`sgemm_params` with an itemsize per operand."""
    for name in shapes:
        _require_matrix(name, shapes[name])
        if len(strides[name]) != 2:
            raise GemmMappingUnavailable(
                f"operand {name!r} has strides {tuple(strides[name])} for its 2-D shape "
                f"{tuple(shapes[name])}; give one stride per axis, in bytes"
            )
    ld = {name: _leading_dim(name, shapes[name], strides[name], itemsizes[name]) for name in shapes}
    transpose_a, transpose_b, transpose_out = flags
    m, n, k = _product_dims(
        tuple(shapes["a"]), tuple(shapes["b"]), tuple(shapes["out"]),
        transpose_a, transpose_b, transpose_out,
    )  # fmt: skip
    if transpose_out:
        return SgemmParams(
            "N" if transpose_a else "T",
            "N" if transpose_b else "T",
            m, n, k, ld["a"], ld["b"], ld["out"], ("a", "b"),
        )  # fmt: skip
    return SgemmParams(
        "T" if transpose_b else "N",
        "T" if transpose_a else "N",
        n, m, k, ld["b"], ld["a"], ld["out"], ("b", "a"),
    )  # fmt: skip


def sgemm_params_for_arrays(
    a: Any,
    b: Any,
    out: Any,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    transpose_out: bool = False,
) -> SgemmParams:
    """:func:`sgemm_params` read off three float32 arrays.

    Args:
        a, b, out: eagle Arrays, numpy arrays, torch tensors, CuPy arrays,
            CUDA array interface or DLPack objects (their layout is read; nothing
            waits for their streams), or anything with ``shape``, ``strides``
            (bytes) and ``dtype``.
        transpose_a, transpose_b, transpose_out: the flags of the product.

    Raises:
        GemmMappingUnavailable: an operand is not float32 (``"operand 'a' is
            float64"``), ``out`` shares memory with ``a`` or ``b`` (cuBLAS
            does not allow it; checked where the arrays give their address:
            eagle Arrays, numpy arrays, CUDA array interface objects), or any
            refusal of :func:`sgemm_params`.
        TypeError: an operand has no shape, strides or dtype.
    """
    arrays = described({"a": a, "b": b, "out": out})
    for name, array in arrays.items():
        dtype = _dtype_of(name, array)
        if dtype != np.float32:
            raise GemmMappingUnavailable(
                f"operand {name!r} is {dtype}; sgemm params (for handle.sgemm) are float32 "
                f"only: convert it with .astype('float32'), or make the params with "
                f"gemm_params_for_arrays for handle.gemm, which takes every product dtype"
            )
    return _layout_for_arrays(arrays, 4, transpose_a, transpose_b, transpose_out)


def gemm_params_for_arrays(
    a: Any,
    b: Any,
    out: Any,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    transpose_out: bool = False,
    math: str | None = None,
) -> GemmParams:
    """The :class:`GemmParams` of ``out = op(a) @ op(b)`` over these three arrays, any dtype.

    The dtypes follow :mod:`eagle.gemm.dtypes`: bfloat16 x bfloat16 writes
    bfloat16 or float32, float16 x float16 writes float16 or float32 (both sum
    in float32), float32 x float32 writes float32, float64 x float64 writes
    float64; fp8 factors (float8_e4m3fn with either fp8 dtype, float8_e5m2 with
    float8_e4m3fn) write bfloat16 or float32, in the one layout their products
    take (:func:`~eagle.gemm.params.check_scaled_layout`: ``a`` as ``(M, K)``, ``b`` as ``(N, K)``
    with ``transpose_b=True``). Their per-tensor scales are operands of the call
    (:meth:`~eagle.gemm.CublasCaptureHandle.gemm`), not part of the params.

    Args:
        a, b, out: eagle Arrays, numpy arrays, torch tensors, CuPy arrays,
            CUDA array interface or DLPack objects (their layout is read; nothing
            waits for their streams), or anything with ``shape``, ``strides``
            (bytes) and ``dtype``.
        transpose_a, transpose_b, transpose_out: the flags of the product.
        math: None (exact: float32 sums, float64 for float64 factors),
            ``"tf32"`` for float32 factors rounded to TF32 on tensor cores, or
            ``"fast_accum"`` for fp8 factors summed in the tensor cores' own
            accumulator (``torch._scaled_mm``'s ``use_fast_accum=True``).

    Raises:
        GemmMappingUnavailable: naming the operand, dtypes outside those rules
            (with what to pass), a ``math`` the dtype has not, an ``out`` that
            shares memory with ``a`` or ``b``, an fp8 layout its products do not
            take (saying what to pass), or any refusal of :func:`sgemm_params`.
        TypeError: an operand has no shape, strides or dtype.
    """
    arrays = described({"a": a, "b": b, "out": out})
    dtypes = [_dtype_of(name, array) for name, array in arrays.items()]
    dtype, out_dtype, resolved = product_dtypes(dtypes[0], dtypes[1], dtypes[2], math)
    layout = _layout_for_arrays(
        arrays, dtypes[0].itemsize, transpose_a, transpose_b, transpose_out, dtypes[2].itemsize
    )
    if dtype in SCALED_DTYPES:
        check_scaled_layout(layout, dtypes[2].itemsize)
    return GemmParams(*layout, dtype, out_dtype, resolved, dtypes[1].name)


def check_scaled_layout(layout: SgemmParams, out_itemsize: int) -> None:
    """Refuse a layout an fp8 (scaled) product does not take, saying what to pass.

    cuBLASLt's fp8 kernels on Hopper and Ada take cuBLAS's first operand transposed and
    its second not ("TN"), which for eagle's row-major ``out = op(a) @ op(b)`` is
    ``transpose_a=False`` and ``transpose_b=True`` (whatever ``transpose_out``); every
    leading dimension a multiple of :data:`SCALED_ALIGNMENT` bytes; ``K`` and
    ``out``'s contiguous extent (cuBLAS's ``m``) multiples of 16, neither of them 0.

    Args:
        layout: the column-major call (the layout fields of the product's params).
        out_itemsize: bytes per element of ``out``.

    Raises:
        GemmMappingUnavailable: naming the operand and what to pass instead.
    """
    if not (layout.m and layout.k):  # (n = 0, no rows of out: the call has nothing to do)
        raise GemmMappingUnavailable(
            f"an fp8 product has an extent of 0 (m={layout.m}, n={layout.n}, k={layout.k} in "
            f"cuBLAS's column-major call), which its kernels do not take: leave the product "
            f"out, or fill out with zeros where K is 0"
        )
    transpose_a, transpose_b, transpose_out = _transposes(layout)
    if transpose_a:
        raise GemmMappingUnavailable(
            "operand 'a' is read transposed (transpose_a=True), but an fp8 product reads a "
            "as (M, K) rows with K contiguous (the one layout cuBLASLt's fp8 kernels take): "
            "pass a.T as a C-ordered copy, of shape (M, K), with transpose_a=False"
        )
    if not transpose_b:
        raise GemmMappingUnavailable(
            "operand 'b' is read as (K, N) (transpose_b=False), but an fp8 product reads b as "
            "(N, K) rows with K contiguous (the one layout cuBLASLt's fp8 kernels take): pass "
            "b transposed, a C-ordered copy of b.T of shape (N, K), with transpose_b=True"
        )
    align = SCALED_ALIGNMENT
    if layout.k % align:
        raise GemmMappingUnavailable(
            f"the contracted extent K = {layout.k} is not a multiple of {align}, which fp8 "
            f"products need; pad a and b with zeros along K to a multiple of {align}"
        )
    if layout.m % align:
        source = "a's rows (M, as transpose_out=True)" if transpose_out else "b's rows (N)"
        raise GemmMappingUnavailable(
            f"operand 'out' has {layout.m} columns (its contiguous axis), not a multiple of "
            f"{align}, which fp8 products need; pad {source} with zeros to a multiple of {align}"
        )
    strides = ((layout.operands[0], layout.lda, 1), (layout.operands[1], layout.ldb, 1))
    for name, ld, itemsize in (*strides, ("out", layout.ldc, out_itemsize)):
        if ld * itemsize % align:
            raise GemmMappingUnavailable(
                f"operand {name!r} has a row stride of {ld * itemsize} bytes, not a multiple "
                f"of {align}, which fp8 products need; pass a C-ordered copy (or a view of a "
                f"buffer whose rows are a multiple of {align} bytes)"
            )


def _layout_for_arrays(
    arrays: Mapping[str, Any],
    itemsize: int,
    transpose_a: bool,
    transpose_b: bool,
    transpose_out: bool,
    out_itemsize: int | None = None,
) -> SgemmParams:
    a, b, out = arrays["a"], arrays["b"], arrays["out"]
    params = _mapped(
        {"a": tuple(a.shape), "b": tuple(b.shape), "out": tuple(out.shape)},
        {"a": tuple(a.strides), "b": tuple(b.strides), "out": tuple(out.strides)},
        {"a": itemsize, "b": itemsize, "out": out_itemsize or itemsize},
        check_flags(transpose_a, transpose_b, transpose_out),
    )
    _check_out_apart(arrays)
    return params


def check_scaled_pointer(name: str, ptr: int) -> None:
    """Refuse an fp8 product's operand ``name`` at ``ptr`` unless it is aligned to
    :data:`SCALED_ALIGNMENT` bytes, saying what to pass instead.

    Raises:
        GemmMappingUnavailable: naming the operand and how far past a boundary it starts.
    """
    offset = ptr % SCALED_ALIGNMENT
    if offset:
        raise GemmMappingUnavailable(
            f"operand {name!r} starts {offset} bytes past a {SCALED_ALIGNMENT}-byte boundary; "
            f"fp8 products need {SCALED_ALIGNMENT}-byte-aligned operands: pass an array of "
            f"its own, or a view that starts at a multiple of {SCALED_ALIGNMENT} bytes"
        )


def product_shape(
    a_shape: Sequence[int],
    b_shape: Sequence[int],
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    transpose_out: bool = False,
    cublas: bool = True,
) -> tuple[int, int]:
    """The shape ``out`` must have for ``op(a) @ op(b)`` (transposed with ``transpose_out``);
    ``cublas=False`` for a product numpy computes, which has no 32-bit limit on extents.

    Raises:
        GemmMappingUnavailable: an operand is not 2-D, or the contracted
            extents disagree, or (``cublas``) an extent is beyond cuBLAS's 32 bits.
    """
    transpose_a, transpose_b, transpose_out = check_flags(transpose_a, transpose_b, transpose_out)
    for name, shape in (("a", a_shape), ("b", b_shape)):
        if not isinstance(shape, Sequence | np.ndarray):
            raise GemmMappingUnavailable(
                f"operand {name!r}: its shape is {shape!r}, not a sequence of extents; pass "
                f"a tuple such as (rows, cols)"
            )
        _require_matrix(name, shape, cublas=cublas)
    m, ka = _op_shape(tuple(map(int, a_shape)), transpose_a)
    kb, n = _op_shape(tuple(map(int, b_shape)), transpose_b)
    if ka != kb:
        raise GemmMappingUnavailable(
            f"operand 'b': contracted extent {kb} disagrees with operand 'a''s {ka} "
            f"(op(a) is {m}x{ka} from a of shape {tuple(a_shape)}, transpose_a={transpose_a}; "
            f"op(b) is {kb}x{n} from b of shape {tuple(b_shape)}, transpose_b={transpose_b}): "
            f"op(a) has {ka} columns, so op(b) needs {ka} rows; pass matching shapes, or set "
            "transpose_a or transpose_b"
        )
    return (n, m) if transpose_out else (m, n)


def _address(array: Any) -> int | None:
    """Where an array's first element is, when it says so (None when it does not)."""
    ptr = getattr(array, "ptr", None)
    if isinstance(ptr, int):
        return ptr
    for protocol in ("__cuda_array_interface__", "__array_interface__"):
        interface = getattr(array, protocol, None)
        if isinstance(interface, dict):
            return int(interface["data"][0])
    return None


def _check_out_apart(arrays: Mapping[str, Any]) -> None:
    """Refuse an ``out`` that shares an element with ``a`` or ``b`` (a product may not alias).

    ``arrays`` maps "a", "b", "out" to 2-D arrays; one that does not give its address
    (:func:`_address`) is not checked.
    """
    for name in ("a", "b"):
        if _shares_memory(arrays["out"], arrays[name]):
            raise GemmMappingUnavailable(
                f"operand 'out' shares memory with operand {name!r}: cuBLAS does not let a "
                f"product write over its inputs; write into a separate array"
            )


def _shares_memory(x: Any, y: Any) -> bool:
    """Exactly whether two strided arrays share a byte (False when one does not give its
    address, :func:`_address`)."""
    x_at, y_at = _address(x), _address(y)
    if x_at is None or y_at is None:
        return False
    x_span, y_span = _span(x, x_at), _span(y, y_at)
    return (
        x_span[0] < y_span[1]
        and y_span[0] < x_span[1]
        and _share(x, x_at, y, y_at, min(x_span[0], y_span[0]))
    )


def _span(array: Any, at: int) -> tuple[int, int]:
    """The bytes ``[lo, hi)`` a strided array touches (empty for no elements)."""
    shape, strides = tuple(array.shape), tuple(array.strides)
    if not math.prod(shape):
        return at, at
    reaches = [(extent - 1) * stride for extent, stride in zip(shape, strides, strict=True)]
    lo = at + sum(min(0, reach) for reach in reaches)
    hi = at + sum(max(0, reach) for reach in reaches) + dtype_of(array.dtype).itemsize
    return lo, hi


def _share(x: Any, x_at: int, y: Any, y_at: int, lowest: int) -> bool:
    """Exactly whether two strided arrays whose byte spans meet (from ``lowest`` up) share
    a byte. numpy decides it from the layouts alone (it reads no memory), over stand-ins
    at the same relative addresses, placed clear of NULL."""
    base = lowest - _PAGE
    return bool(np.shares_memory(_stand_in(x, x_at - base), _stand_in(y, y_at - base)))


_PAGE = 4096


def _stand_in(array: Any, at: int) -> np.ndarray:
    interface = {
        "data": (at, True),
        "shape": tuple(array.shape),
        "strides": tuple(array.strides),
        "typestr": dtype_of(array.dtype).str,
        "version": 3,
    }
    return np.asarray(type("_Layout", (), {"__array_interface__": interface})())


def _dtype_of(name: str, array: Any) -> np.dtype:
    if not all(hasattr(array, attr) for attr in ("shape", "strides", "dtype")):
        raise EagleTypeError(
            f"operand {name!r} must be an array with shape, strides and dtype "
            f"(an eagle Array or a numpy array), not {type(array).__name__}"
        )
    return dtype_of(array.dtype)


def _require_matrix(name: str, shape: Sequence[int], *, cublas: bool = True) -> None:
    if len(shape) != 2:
        raise GemmMappingUnavailable(
            f"operand {name!r} is {len(shape)}-D (shape {tuple(shape)}); a product takes "
            f"2-D matrices"
        )
    for axis, extent in enumerate(shape):
        if not isinstance(extent, int | np.integer) or isinstance(extent, bool) or extent < 0:
            raise GemmMappingUnavailable(
                f"operand {name!r} has shape {tuple(shape)}: extent {extent!r} along axis {axis} "
                f"is not a non-negative int"
            )
    if cublas and any(extent > _INT_MAX for extent in shape):
        raise GemmMappingUnavailable(
            f"operand {name!r} has shape {tuple(shape)}, beyond cuBLAS's 32-bit extents; "
            f"split the product"
        )


def _op_shape(shape: Sequence[int], transpose: bool) -> tuple[int, int]:
    rows, cols = shape
    return (cols, rows) if transpose else (rows, cols)


def _product_dims(
    a_shape: Sequence[int],
    b_shape: Sequence[int],
    out_shape: Sequence[int],
    transpose_a: bool,
    transpose_b: bool,
    transpose_out: bool,
) -> tuple[int, int, int]:
    want = product_shape(
        a_shape, b_shape,
        transpose_a=transpose_a, transpose_b=transpose_b, transpose_out=transpose_out,
    )  # fmt: skip
    if tuple(out_shape) != want:
        raise GemmMappingUnavailable(
            f"operand 'out' has shape {out_shape}; it must have shape {want} "
            f"(transpose_a={transpose_a}, transpose_b={transpose_b}, "
            f"transpose_out={transpose_out})"
        )
    m, k = _op_shape(a_shape, transpose_a)
    _, n = _op_shape(b_shape, transpose_b)
    return m, n, k


def _leading_dim(name: str, shape: Sequence[int], strides: Sequence[int], itemsize: int) -> int:
    rows, cols = shape
    row_stride, col_stride = strides
    if rows == 0 or cols == 0:
        return max(1, cols)  # no elements: the strides address nothing (numpy gives 0s)
    if cols > 1 and col_stride != itemsize:
        raise GemmMappingUnavailable(
            f"operand {name!r} is not unit-stride along its last axis (strides {tuple(strides)} "
            f"bytes, itemsize {itemsize}): an F-ordered view or a step along its columns; pass a "
            f"C-ordered array, or a slice of its rows or columns (a row step is fine)"
        )
    if rows == 1:
        return max(1, cols)  # the row stride never addresses anything
    if row_stride % itemsize:
        raise GemmMappingUnavailable(
            f"operand {name!r} has a row stride of {row_stride} bytes, not a multiple of its "
            f"itemsize {itemsize}"
        )
    ld = row_stride // itemsize
    if ld < cols:
        raise GemmMappingUnavailable(
            f"operand {name!r} has a row stride of {ld} elements, smaller than its width {cols} "
            f"(a broadcast, overlapping or reversed view); pass a contiguous copy"
        )
    if ld > _INT_MAX:
        raise GemmMappingUnavailable(
            f"operand {name!r} has a row stride of {ld} elements, beyond cuBLAS's 32-bit "
            f"leading dimension; pass a contiguous copy"
        )
    return ld
