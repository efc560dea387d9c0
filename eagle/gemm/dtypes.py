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
refused by name. bfloat16 is ``ml_dtypes.bfloat16`` on the host; it is loaded
only when a bfloat16 dtype is named. Everything here is pure.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from eagle.gemm.errors import GemmMappingUnavailable

__all__ = ["HALVES", "OUT_DTYPES", "PRODUCT_DTYPES", "dtype_of", "product_dtypes"]

OUT_DTYPES: dict[str, tuple[str, ...]] = {
    "bfloat16": ("bfloat16", "float32"),
    "float16": ("float16", "float32"),
    "float32": ("float32",),
    "float64": ("float64",),
}
"""Operand dtype -> the dtypes ``out`` may have."""

PRODUCT_DTYPES = tuple(OUT_DTYPES)
"""The operand dtypes a product takes."""

HALVES = ("bfloat16", "float16")
"""The 16-bit operand dtypes, summed in float32 and rounded once when stored."""

_MATH = {"bfloat16": ("fp32",), "float16": ("fp32",), "float32": ("fp32", "tf32"),
         "float64": ("fp64",)}  # fmt: skip


def dtype_of(dtype: Any) -> np.dtype:
    """``numpy.dtype(dtype)``, where the name ``"bfloat16"`` loads ``ml_dtypes`` first.

    Raises:
        TypeError: not a dtype.
    """
    try:
        return np.dtype(dtype)
    except TypeError:
        if dtype != "bfloat16":
            raise
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


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
                f"operand {role!r} is {names[role]}; a product takes bfloat16, float16, "
                f"float32 or float64 factors (convert it with .astype('float32'))"
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
    exact = _MATH[dtype][0]
    resolved = exact if math is None else math
    if resolved not in _MATH[dtype]:
        raise GemmMappingUnavailable(
            f"math={math!r} does not apply to {dtype} factors: they sum in {exact}; "
            f"'tf32' is for float32 factors (leave math unset)"
        )
    return dtype, names["out"], resolved
