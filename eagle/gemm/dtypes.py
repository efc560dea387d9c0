"""The dtypes a product takes, what it writes, and in what arithmetic it sums.

=============================  ===================  ===========================
operands ``a`` and ``b``       ``out``              sums (``math``)
=============================  ===================  ===========================
bfloat16 x bfloat16            bfloat16 or float32  float32 (``"fp32"``)
float16 x float16              float16 or float32   float32 (``"fp32"``)
float32 x float32              float32              ``"fp32"`` (exact) or ``"tf32"``
float64 x float64              float64              float64 (``"fp64"``)
=============================  ===================  ===========================

Half-precision products round once, when they store ``out``. Anything else is
refused by name. Every rule here is read from the product column of hawk's dtype
table (:data:`hawk.dtypes.TABLE`), which also gives each dtype's ``cudaDataType``
code. bfloat16 is ``ml_dtypes.bfloat16`` on the host; it is loaded only when a
bfloat16 dtype is named. Everything here is pure.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from eagle.gemm.errors import GemmMappingUnavailable
from hawk import dtypes as table

__all__ = ["HALVES", "OUT_DTYPES", "PRODUCT_DTYPES", "dtype_of", "product_dtypes"]

_ROWS = {row.name: row for row in table.TABLE if row.product is not None}
_PRODUCTS = {name: row.product for name, row in _ROWS.items() if row.product is not None}

OUT_DTYPES: dict[str, tuple[str, ...]] = {
    name: _PRODUCTS[name].out for name in table.PRODUCT_DTYPES
}
"""Operand dtype -> the dtypes ``out`` may have."""

PRODUCT_DTYPES = tuple(OUT_DTYPES)
"""The operand dtypes a product takes."""

HALVES = tuple(name for name in table.PRODUCT_DTYPES if _ROWS[name].storage_only)
"""The 16-bit operand dtypes, summed in float32 and rounded once when stored."""

_FACTORS = ", ".join(table.PRODUCT_DTYPES[:-1]) + " or " + table.PRODUCT_DTYPES[-1]


def dtype_of(dtype: Any) -> np.dtype:
    """``numpy.dtype(dtype)``, where the name ``"bfloat16"`` loads ``ml_dtypes`` first
    (:func:`hawk.dtypes.numpy_dtype`).

    Raises:
        TypeError: not a dtype.
    """
    return table.numpy_dtype(dtype)


@functools.lru_cache(maxsize=256)
def product_dtypes(a: Any, b: Any, out: Any, math: str | None = None) -> tuple[str, str, str]:
    """The ``(dtype, out_dtype, math)`` of a product over these dtypes, checked (each
    combination once: the answer is kept).

    Args:
        a, b, out: the operands' dtypes (anything :func:`dtype_of` takes).
        math: ``None`` for the dtype's exact arithmetic (``"fp64"`` for float64,
            ``"fp32"`` otherwise), ``"tf32"`` (float32 only) for TF32 rounding on
            tensor cores, or the exact one by name.

    Raises:
        GemmMappingUnavailable: naming the operand, a dtype no product takes,
            factors of two dtypes, or an ``out`` the factors do not write; or
            a ``math`` the dtype has no such arithmetic for.
    """
    names = {role: dtype_of(dtype).name for role, dtype in (("a", a), ("b", b), ("out", out))}
    for role in ("a", "b"):
        if names[role] not in OUT_DTYPES:
            raise GemmMappingUnavailable(
                f"operand {role!r} is {names[role]}; a product takes {_FACTORS} factors "
                f"(convert it with .astype('float32'))"
            )
    dtype = names["a"]
    if names["b"] != dtype:
        raise GemmMappingUnavailable(
            f"operand 'b' is {names['b']} but operand 'a' is {dtype}; both factors have one "
            f"dtype (convert b with .astype({dtype!r}))"
        )
    if names["out"] not in OUT_DTYPES[dtype]:
        allowed = " or ".join(OUT_DTYPES[dtype])
        raise GemmMappingUnavailable(
            f"operand 'out' is {names['out']}; a {dtype} x {dtype} product writes {allowed} "
            f"(pass an out of that dtype)"
        )
    maths = _PRODUCTS[dtype].math
    exact = maths[0]
    resolved = exact if math is None else math
    if resolved not in maths:
        raise GemmMappingUnavailable(
            f"math={math!r} does not apply to {dtype} factors: they sum in {exact}; "
            f"'tf32' is for float32 factors (leave math unset)"
        )
    return dtype, names["out"], resolved
