"""Filling device memory: the exact-fit rule for fill values, memset nodes for
contiguous fills (capture-legal), and the writes of a Param's number into its
one-element array."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, SupportsFloat, cast

import numpy as np

from eagle.cuda._runtime import dcall, driver, raise_status

__all__ = ["exact_scalar", "memset", "number_writer"]


def exact_scalar(value: Any, dtype: np.dtype) -> np.generic:
    """``value`` as a scalar of ``dtype``, refused unless it fits: integers and bools
    exactly, floats without overflow, complex values only into complex dtypes."""
    given = np.asarray(value)
    if isinstance(value, int) and given.dtype.kind == "O":
        raise ValueError(f"value {value!r} does not fit {dtype} exactly")
    if given.ndim or given.dtype.kind not in "biufcV":
        raise ValueError(f"value {value!r} is not a number to store as {dtype}")
    if given.dtype.kind == "c" and dtype.kind != "c":
        raise ValueError(f"value {value!r} is complex; {dtype} is real")
    with np.errstate(all="ignore"):
        try:
            scalar = cast(np.generic, given.astype(dtype)[()])
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"value {value!r} cannot be stored as {dtype}") from exc
    if dtype.kind in "biu":
        if not np.isfinite(given) or scalar != given:
            raise ValueError(f"value {value!r} does not fit {dtype} exactly")
    elif np.isfinite(given) and not np.isfinite(scalar):
        raise ValueError(f"value {value!r} overflows {dtype}")
    return scalar


def memset(ptr: int, scalar: np.generic, count: int, stream_ptr: int) -> None:
    """Fill ``count`` contiguous elements with memset nodes (capture-legal)."""
    raw = np.asarray(scalar).tobytes()
    if len(raw) == 1:
        dcall("cuMemsetD8Async", ptr, raw[0], count, stream_ptr)
    elif len(raw) == 2:
        dcall("cuMemsetD16Async", ptr, int.from_bytes(raw, "little"), count, stream_ptr)
    elif len(raw) == 4:
        dcall("cuMemsetD32Async", ptr, int.from_bytes(raw, "little"), count, stream_ptr)
    else:
        for word in range(len(raw) // 4):
            bits = int.from_bytes(raw[4 * word : 4 * word + 4], "little")
            dcall("cuMemsetD2D32Async", ptr + 4 * word, len(raw), bits, 1, count, stream_ptr)


def number_writer(real: np.dtype) -> Callable[[int, SupportsFloat, int], None]:
    """How a reusable device binding writes a Param's number (checked to fit ``real``) into
    its one-element array of dtype ``real``, in a stream's order: a memset of each 32-bit
    word (legal in a capture, allocating nothing), the driver's function found once."""
    memset = driver().cuMemsetD32Async

    def write_float32(ptr: int, number: SupportsFloat, stream_ptr: int) -> None:
        (word,) = _WORD.unpack(_FLOAT32.pack(number))
        status = memset(ptr, word, 1, stream_ptr)[0]
        if status:
            raise_status("driver", "cuMemsetD32Async", status)

    def write_float64(ptr: int, number: SupportsFloat, stream_ptr: int) -> None:
        for offset, word in enumerate(_WORDS.unpack(_FLOAT64.pack(number))):
            status = memset(ptr + 4 * offset, word, 1, stream_ptr)[0]
            if status:
                raise_status("driver", "cuMemsetD32Async", status)

    return write_float32 if real == np.float32 else write_float64


_FLOAT32, _FLOAT64 = struct.Struct("<f"), struct.Struct("<d")
_WORD, _WORDS = struct.Struct("<I"), struct.Struct("<II")
