"""What a rebind refuses: checks of the arrays given to :meth:`eagle.cuda.Launcher.rebind`.

Every check runs before the graph is changed, so a refused rebind leaves it as it
was. Each error names the plane (and the launch it belongs to) or the array, and
says what to pass instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from eagle.errors import EagleTypeError, EagleValueError

__all__ = [
    "CheckedSite",
    "check_disjoint",
    "check_key",
    "check_written",
    "conflicts",
    "describe",
    "fits",
    "graph_device",
    "mismatch",
    "span_of",
]


class CheckedSite(Protocol):
    """What the checks read of a recorded step (an :class:`eagle.cuda._rebind.Site`)."""

    label: str  # what it is, for messages
    planes: dict[str, Any]  # plane name -> the array the step works on
    spans: dict[str, tuple[int, int]]  # plane name -> the bytes it covers
    conflicts: tuple[tuple[str, str], ...]  # the pairs of planes that may not share memory


def span_of(array: Any) -> tuple[int, int]:
    """The bytes ``array`` covers, ``(start, end)``."""
    ptr = array.ptr
    return ptr, ptr + array.nbytes


def graph_device(sites: Sequence[CheckedSite]) -> int | None:
    for site in sites:
        for array in site.planes.values():
            return int(array.device_index)
    return None


def describe(array: Any) -> str:
    return f"the array of shape {tuple(array.shape)}, {array.dtype}, at {array.ptr:#x}"


def check_key(array: Any) -> None:
    if not (hasattr(array, "ptr") and hasattr(array, "nbytes") and hasattr(array, "shape")):
        raise EagleTypeError(
            f"a key of the mapping is a {type(array).__name__}: name each plane by the eagle "
            "Array the graph works on now (or by its name, as a keyword)"
        )


def mismatch(old: Any, new: Any, device: int | None) -> tuple[type[Exception], str] | None:
    """What keeps ``new`` from taking ``old``'s place, or None."""
    try:
        _, shape, dtype, index = new.ptr, new.shape, new.dtype, new.device_index
    except AttributeError:
        return EagleTypeError, (
            f"the new array is a {type(new).__name__}, not an eagle Array; wrap other arrays "
            "with eagle.arrays.asarray (no copy)"
        )
    where = old.device_index if device is None else device
    if getattr(new, "is_host", False):
        return EagleValueError, f"the new array is a host array; the graph runs on cuda:{where}"
    if index != where:
        return (
            EagleValueError,
            f"the new array is on cuda:{index}, but the graph runs on cuda:{where}",
        )
    if shape != old.shape and tuple(shape) != tuple(old.shape):
        return EagleValueError, (
            f"the new array has shape {tuple(shape)}, the graph's has {tuple(old.shape)}; "
            f"pass an array of shape {tuple(old.shape)}"
        )
    if dtype != old.dtype:
        return EagleTypeError, (
            f"the new array is {dtype}, the graph's is {old.dtype}; pass a {old.dtype} array"
        )
    if new.strides != old.strides and tuple(new.strides) != tuple(old.strides):
        return EagleValueError, (
            f"the new array has strides {tuple(new.strides)}, the graph's has "
            f"{tuple(old.strides)}; pass a contiguous array"
        )
    return None


def fits(old: Any, new: Any, device: int | None) -> bool:
    """Whether ``new`` takes ``old``'s place as it is, wherever it is used: an array of
    ``old``'s type, shape, dtype (native) and strides, on the graph's ``device``, at a
    non-null address aligned for its dtype, and not read-only. False says only that
    :func:`mismatch` and :func:`~eagle._checks.check_buffer` must look, to say what is
    wrong (a read-only array is taken where nothing writes it)."""
    if type(new) is not type(old):
        return False
    ptr, dtype = new.ptr, new.dtype
    return bool(
        ptr
        and not ptr % dtype.alignment
        and dtype == old.dtype
        and dtype.isnative
        and new.shape == old.shape
        and new.strides == old.strides
        and new.device_index == (old.device_index if device is None else device)
        and not new.is_host
        and not new.readonly
    )


def conflicts(planes: Iterable[str], written: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """The pairs of planes that must not share memory, each once: one of the two is
    written."""
    names = list(planes)
    return tuple(
        (name, other)
        for at, name in enumerate(names)
        for other in names[at + 1 :]
        if name in written or other in written
    )


def check_written(site: CheckedSite, moved: Mapping[str, tuple[int, int]]) -> None:
    """Refuse new planes (``moved``: name -> the span of its new array) that share memory
    with another plane of the step it writes."""
    spans = site.spans
    for first, second in site.conflicts:
        one, two = moved.get(first), moved.get(second)
        if one is None and two is None:
            continue
        lo, hi = spans[first] if one is None else one
        start, end = spans[second] if two is None else two
        if start < hi and lo < end:
            name, other = (first, second) if one is not None else (second, first)
            raise EagleValueError(
                f"planes {name!r} and {other!r} of {site.label} would share memory and it "
                "writes one of them; pass separate arrays"
            )


def check_disjoint(pairs: list[tuple[Any, Any, tuple[int, int]]]) -> None:
    """Refuse old arrays (each with its span, ``(old, new, span)``) that share memory."""
    if len(pairs) < 2:
        return
    spans = sorted((*span, position) for position, (_, _, span) in enumerate(pairs))
    for (_, end, first), (start, _, second) in itertools.pairwise(spans):
        if start < end:
            raise EagleValueError(
                f"{describe(pairs[first][0])} and {describe(pairs[second][0])} share memory; "
                "name each plane once"
            )
