"""The dtypes a product takes, what it writes, and in what arithmetic it sums.

=============================  ===================  =====================================
operands ``a`` and ``b``       ``out``              sums (``math``)
=============================  ===================  =====================================
bfloat16 x bfloat16            bfloat16 or float32  float32 (``"fp32"``)
float16 x float16              float16 or float32   float32 (``"fp32"``)
float32 x float32              float32              ``"fp32"`` (exact) or ``"tf32"``
float64 x float64              float64              float64 (``"fp64"``)
float8_e4m3fn x float8_e4m3fn  bfloat16 or float32  float32 (``"fp32"``) or ``"fast_accum"``
float8_e4m3fn x float8_e5m2    bfloat16 or float32  as above
float8_e5m2 x float8_e4m3fn    bfloat16 or float32  as above
=============================  ===================  =====================================

Half-precision products round once, when they store ``out``. The fp8 products are
*scaled* (:data:`SCALED_DTYPES`): each factor may carry a per-tensor scale, they run
on cuBLASLt in one layout (:func:`~eagle.gemm.params.check_scaled_layout`), and
float8_e5m2 x float8_e5m2 is refused, as cuBLASLt has no such product. Anything else
is refused by name. Every rule here is read from the product column of hawk's dtype
table (:data:`hawk.dtypes.TABLE`), which also gives each dtype's ``cudaDataType`` code.
bfloat16 and the fp8 dtypes are ``ml_dtypes``' on the host; it is loaded only when
such a dtype is named. Everything here is pure.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import numpy as np

from eagle.gemm.errors import GemmMappingUnavailable
from hawk import dtypes as table

__all__ = [
    "HALVES",
    "OUT_DTYPES",
    "PRODUCT_DTYPES",
    "SCALED_DTYPES",
    "CublasEntry",
    "cublas_entry",
    "dtype_of",
    "product_dtypes",
]

_ROWS = {row.name: row for row in table.TABLE if row.product is not None}
_PRODUCTS = {name: row.product for name, row in _ROWS.items() if row.product is not None}

OUT_DTYPES: dict[str, tuple[str, ...]] = {
    name: _PRODUCTS[name].out for name in (*table.PRODUCT_DTYPES, *table.SCALED_DTYPES)
}
"""Factor dtype -> the dtypes ``out`` may have."""

PRODUCT_DTYPES = tuple(name for name in table.PRODUCT_DTYPES)
"""The factor dtypes of a product of one dtype without scales (bfloat16, float16,
float32, float64): what a plan of products is lowered in and the GEMM route takes."""

SCALED_DTYPES = tuple(name for name in table.SCALED_DTYPES)
"""The fp8 factor dtypes, whose products take per-tensor scales and run on cuBLASLt."""

HALVES = tuple(name for name in table.PRODUCT_DTYPES if _ROWS[name].storage_only)
"""The 16-bit operand dtypes, summed in float32 and rounded once when stored."""

_FACTORS = (
    ", ".join(PRODUCT_DTYPES[:-1])
    + f" or {PRODUCT_DTYPES[-1]} factors, or fp8 ones ({', '.join(SCALED_DTYPES)})"
)


CublasEntry = Literal["sgemm", "dgemm", "gemm_ex", "lt_matmul"]
"""Which cuBLAS function a product calls (``cublasSgemm``, ``cublasDgemm``,
``cublasGemmEx``, or ``cublasLtMatmul`` for scaled fp8 factors)."""

#: the dtypes with a cuBLAS function of their own, which sums as the handle's math says
_TYPED: dict[str, CublasEntry] = {"float32": "sgemm", "float64": "dgemm"}


def cublas_entry(dtype: str, math: str, handle_math: str = "fp32") -> CublasEntry:
    """The cuBLAS function a product of ``dtype`` factors summing by ``math`` calls on a
    handle whose float32 math is ``handle_math``: a scaled product's on cuBLASLt; the
    dtype's own function where it has one and the handle already sums as ``math`` asks
    (float64 always does); else ``cublasGemmEx``, which takes the math per call."""
    product = _PRODUCTS[dtype]
    if product.scaled:
        return "lt_matmul"
    typed = _TYPED.get(dtype)
    if typed is not None and (dtype != "float32" or math == handle_math):
        return typed
    return "gemm_ex"


def dtype_of(dtype: Any) -> np.dtype:
    """``numpy.dtype(dtype)``, where the name ``"bfloat16"`` (or an fp8 name) loads
    ``ml_dtypes`` first (:func:`hawk.dtypes.numpy_dtype`).

    Raises:
        TypeError: not a dtype.
    """
    return table.numpy_dtype(dtype)


@functools.lru_cache(maxsize=256)
def product_dtypes(a: Any, b: Any, out: Any, math: str | None = None) -> tuple[str, str, str]:
    """The ``(dtype, out_dtype, math)`` of a product over these dtypes, checked (each
    combination once: the answer is kept). ``dtype`` is ``a``'s; ``b``'s is the same
    except in a mixed fp8 pair.

    Args:
        a, b, out: the operands' dtypes (anything :func:`dtype_of` takes).
        math: ``None`` for the dtype's exact arithmetic (``"fp64"`` for float64,
            ``"fp32"`` otherwise), ``"tf32"`` (float32 only) for TF32 rounding on
            tensor cores, ``"fast_accum"`` (fp8 only) for the tensor cores' own
            accumulator, or the exact one by name.

    Raises:
        GemmMappingUnavailable: naming the operand, a dtype no product takes,
            factors of two dtypes that do not pair (float8_e5m2 x float8_e5m2
            among them), or an ``out`` the factors do not write; or a ``math``
            the dtype has no such arithmetic for.
    """
    names = {role: dtype_of(dtype).name for role, dtype in (("a", a), ("b", b), ("out", out))}
    for role, other_role in (("a", "b"), ("b", "a")):
        if names[role] not in OUT_DTYPES:
            # a dtype the other factor pairs with, where a product takes it
            other = names[other_role]
            like = _PRODUCTS[other].partners(other)[0] if other in OUT_DTYPES else "float32"
            raise GemmMappingUnavailable(
                f"operand {role!r} is {names[role]}; a product takes {_FACTORS} "
                f"(convert it with .astype({like!r}))"
            )
    dtype, other = names["a"], names["b"]
    product = _PRODUCTS[dtype]
    partners = product.partners(dtype)
    if other not in partners:
        raise GemmMappingUnavailable(_unpaired(dtype, other, partners))
    if names["out"] not in OUT_DTYPES[dtype]:
        allowed = " or ".join(OUT_DTYPES[dtype])
        raise GemmMappingUnavailable(
            f"operand 'out' is {names['out']}; a {dtype} x {other} product writes {allowed} "
            f"(pass an out of that dtype)"
        )
    maths = product.math
    exact = maths[0]
    resolved = exact if math is None else math
    if resolved not in maths:
        others = ", ".join(repr(m) for m in maths[1:])
        instead = f"leave math unset (exact), or pass {others}" if others else "leave math unset"
        raise GemmMappingUnavailable(
            f"math={math!r} does not apply to {dtype} factors: they sum in {exact}; {instead}"
        )
    return dtype, names["out"], resolved


def _unpaired(dtype: str, other: str, partners: tuple[str, ...]) -> str:
    """Why factors of ``dtype`` and ``other`` make no product, and what to pass."""
    if dtype == other:  # (an e5m2 x e5m2 product: the only dtype that does not pair with itself)
        return (
            f"operands 'a' and 'b' are both {dtype}: cuBLASLt has no {dtype} x {dtype} product "
            f"(nor does torch._scaled_mm); make one factor {' or '.join(partners)}"
        )
    if len(partners) == 1 and partners[0] == dtype:
        return (
            f"operand 'b' is {other} but operand 'a' is {dtype}; both factors have one dtype "
            f"(convert b with .astype({dtype!r}))"
        )
    return (
        f"operand 'b' is {other} but operand 'a' is {dtype}; a {dtype} factor pairs with "
        f"{' or '.join(partners)} (convert b to one of them)"
    )
