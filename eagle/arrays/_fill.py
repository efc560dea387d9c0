"""Filling device memory: the exact-fit rule for fill values and memset nodes for
contiguous fills (capture-legal)."""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from eagle.cuda._runtime import cudadrv
from eagle.errors import EagleValueError, shown
from hawk.dtypes import storable

__all__ = ["exact_scalar", "memset"]


def exact_scalar(value: Any, dtype: np.dtype) -> np.generic:
    """``value`` as a scalar of ``dtype``, refused unless it fits: integers and bools
    exactly (into a real dtype too), floats without overflow (a float64 one rounded as a
    kernel's store rounds it, :func:`hawk.dtypes.storable`), complex values only into
    complex dtypes."""
    if isinstance(value, int | np.integer) and dtype.kind not in "biu":
        return _exact_real(int(value), dtype)
    given = np.asarray(value)
    if isinstance(value, int) and given.dtype.kind == "O":
        raise EagleValueError(f"value {shown(value)} does not fit {dtype} exactly")
    if given.ndim or given.dtype.kind not in "biufcV":
        raise EagleValueError(
            f"value {shown(value)} is not a number to store as {dtype}; a fill takes one "
            "number (to make an array of values, use eagle.arrays.asarray(values))"
        )
    if given.dtype.kind == "c" and dtype.kind != "c":
        raise EagleValueError(f"value {shown(value)} is complex; {dtype} is real")
    with np.errstate(all="ignore"):
        try:
            scalar = cast(np.generic, np.asarray(storable(given, dtype)).astype(dtype)[()])
        except (TypeError, ValueError, OverflowError) as exc:
            raise EagleValueError(f"value {shown(value)} cannot be stored as {dtype}") from exc
    if dtype.kind in "biu":
        if not np.isfinite(given) or scalar != given:
            raise EagleValueError(f"value {shown(value)} does not fit {dtype} exactly")
    elif np.isfinite(given) and not np.isfinite(scalar):
        raise EagleValueError(f"value {shown(value)} overflows {dtype}")
    elif np.isinf(given) and not np.isinf(scalar):  # float8_e4m3fn has no infinity
        raise EagleValueError(
            f"value {shown(value)} is infinite, and {dtype} has no infinity (it would be NaN)"
        )
    return scalar


def _exact_real(value: int, dtype: np.dtype) -> np.generic:
    """The int ``value`` as a real (or complex) scalar of ``dtype``, refused unless that
    holds it exactly (float32 rounds 2**24 + 1, float64 2**53 + 1)."""
    try:
        with np.errstate(over="ignore"):
            scalar = cast(np.generic, np.asarray(float(value)).astype(dtype)[()])
        back = float(np.asarray(scalar).real.astype(np.float64))
    except OverflowError:  # beyond any float
        back = math.inf
    if not math.isfinite(back) or int(back) != value:
        shown = f"an int of {value.bit_length()} bits" if value.bit_length() > 64 else repr(value)
        raise EagleValueError(f"value {shown} does not fit {dtype} exactly")
    return scalar


def memset(ptr: int, scalar: np.generic, count: int, stream_ptr: int) -> None:
    """Fill ``count`` contiguous elements with memset nodes (capture-legal)."""
    raw = np.asarray(scalar).tobytes()
    if len(raw) == 1:
        cudadrv.cuMemsetD8Async(ptr, raw[0], count, stream_ptr)
    elif len(raw) == 2:
        cudadrv.cuMemsetD16Async(ptr, int.from_bytes(raw, "little"), count, stream_ptr)
    elif len(raw) == 4:
        cudadrv.cuMemsetD32Async(ptr, int.from_bytes(raw, "little"), count, stream_ptr)
    else:
        for word in range(len(raw) // 4):
            bits = int.from_bytes(raw[4 * word : 4 * word + 4], "little")
            cudadrv.cuMemsetD2D32Async(ptr + 4 * word, len(raw), bits, 1, count, stream_ptr)
