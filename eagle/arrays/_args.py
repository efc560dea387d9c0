"""The argument checks of :mod:`eagle.arrays`: devices, dtypes, shapes and indices.

Each refusal names the argument and says what to pass instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from eagle.errors import EagleTypeError, EagleValueError, shown
from hawk.dtypes import find, numpy_dtype

__all__ = [
    "ShapeLike",
    "check_basic",
    "check_dtype",
    "check_reshape",
    "check_shape",
    "device_name",
    "parse_device",
]

ShapeLike = int | Sequence[int]


def parse_device(device: Any) -> int | None:
    """``None`` for the host, the device index for ``"cuda"`` / ``"cuda:N"``."""
    if device is None or device == "cpu":
        return None
    if isinstance(device, str):
        if device == "cuda":
            return 0
        prefix, _, index = device.partition(":")
        if prefix == "cuda" and index.isdigit():
            return int(index)
    raise EagleValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', not {device!r}")


def device_name(index: int | None) -> str:
    return "cpu" if index is None else f"cuda:{index}"


def check_dtype(dtype: Any, argument: str = "dtype") -> np.dtype:
    """``dtype`` as a numpy dtype an Array may hold: a row of hawk's dtype table
    (:data:`hawk.dtypes.TABLE`) marked for arrays (numpy's numeric and bool dtypes,
    and bfloat16); a name such as ``"bfloat16"`` loads ``ml_dtypes`` when it needs it."""
    try:
        result = numpy_dtype(dtype)
    except TypeError as exc:
        raise EagleTypeError(
            f"{argument} {shown(dtype)} is not a numpy dtype; pass a name such as 'float32', "
            "'float64', 'int32' or 'bfloat16', or a numpy dtype"
        ) from exc
    row = find(result)
    if row is None:
        raise EagleTypeError(
            f"{argument} must be a numeric or bool dtype, not {result} "
            "(object, string and structured dtypes have no device layout)"
        )
    if not row.array:
        raise EagleTypeError(f"{argument} {result} is not an Array dtype yet: {row.note}")
    return result


def check_basic(key: Any) -> tuple[Any, ...]:
    """``key`` as a tuple of basic indices (ints, slices, ``...``, None)."""
    keys = key if isinstance(key, tuple) else (key,)
    for item in keys:
        if not (
            item is None
            or item is Ellipsis
            or isinstance(item, slice)
            or (isinstance(item, int | np.integer) and not isinstance(item, bool | np.bool_))
        ):
            raise EagleTypeError(
                f"Arrays take basic indices (ints, slices, ..., None), which give views, "
                f"not {type(item).__name__}; a gather makes a copy, so do it in numpy "
                "(a.numpy()[index]) and wrap the result with arrays.asarray"
            )
    return keys


def _is_int(value: Any) -> bool:
    """An int or numpy integer, not a bool (whose ``True`` would stand for 1)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def check_shape(shape: ShapeLike) -> tuple[int, ...]:
    dims: tuple[Any, ...]
    try:
        dims = tuple(shape)  # type: ignore[arg-type]
    except TypeError:
        dims = (shape,)  # an int, or what is neither an int nor a sequence
    if any(not _is_int(d) or int(d) < 0 for d in dims):
        raise EagleValueError(
            f"shape must be non-negative ints (an int or a sequence of them), not {shown(shape)}"
        )
    return tuple(int(d) for d in dims)


def check_size(dims: tuple[int, ...], dtype: np.dtype) -> None:
    """Refuse a shape whose elements of ``dtype`` no array can hold (more bytes than an
    address reaches)."""
    nbytes = math.prod(dims) * dtype.itemsize
    if nbytes > np.iinfo(np.intp).max:
        raise EagleValueError(
            f"shape {dims} of {dtype.name} is {nbytes:.3g} bytes, more than any array can "
            "hold; pass a smaller shape"
        )


def check_reshape(shape: tuple[Any, ...], size: int) -> tuple[int, ...]:
    given = shape
    if len(shape) == 1 and isinstance(shape[0], Iterable) and not isinstance(shape[0], str):
        given = tuple(shape[0])  # one sequence of extents (anything else is refused below)
    if any(not _is_int(d) for d in given):
        raise EagleTypeError(
            f"reshape takes ints (one may be -1), as separate arguments or one sequence, "
            f"not {shown(given)}"
        )
    dims = [int(d) for d in given]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise EagleValueError(
            f"shape must be non-negative ints with at most one -1, not {tuple(dims)}"
        )
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or size % known:
            raise EagleValueError(f"cannot view {size} elements as shape {tuple(dims)}")
        dims[dims.index(-1)] = size // known
    if math.prod(dims) != size:
        raise EagleValueError(f"cannot view {size} elements as shape {tuple(dims)}")
    return tuple(dims)
