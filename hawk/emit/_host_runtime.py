"""What the numpy programs of :mod:`hawk.emit.host` call at run time.

A value the checks see is a Python number, a lane array (shape ``(n,)``) or,
inside a loop run a chunk of iterations at a time (``hawk/emit/_batch.py``), an
array of one row per iteration (``(C, 1)`` or ``(C, n)``). A failure is reported
for the first iteration, then the first lane, that failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hawk.emit.checks import INT_INVALID, CheckSite

__all__ = ["RUNTIME"]


def _check_index(
    sites: Sequence[CheckSite],
    indices: Sequence[Any],
    extents: Sequence[int],
    mask: np.ndarray | None,
    n: int,
    last: list[Any],
    slot: int,
) -> None:
    """Raise for the first lane (under ``mask``) whose index on some axis is out of range.

    ``last[slot]`` remembers the arrays this call site passed last: a loop that
    checks the same index arrays on every iteration checks them once.
    """
    seen = last[slot]
    if (
        seen is not None
        and seen[1] is mask
        and all(a is b for a, b in zip(seen[0], indices, strict=True))
    ):
        return
    bad: Any = False
    for index, extent in zip(indices, extents, strict=True):
        out: Any = (
            np.asarray(index, np.int64).view(np.uint64) >= extent
            if isinstance(index, np.ndarray)
            else not 0 <= index < extent
        )
        bad = out if bad is False else bad | out
    if mask is not None:
        bad = mask & bad
    if isinstance(bad, np.ndarray):
        where = _first(bad, n)
    elif bad and n > 0:
        where = ()  # every index is a number: lane 0 fails
    else:
        where = None
    if where is not None:
        lane = where[-1] if where else 0
        for site, index, extent in zip(sites, indices, extents, strict=True):
            value = int(np.broadcast_to(index, bad.shape)[where] if where else index)
            if not 0 <= value < extent:
                raise site.error(lane, value, extent)
    last[slot] = (indices, mask)  # kept alive, so the identities stay theirs


def _first(bad: np.ndarray, n: int) -> tuple[int, ...] | None:
    """The position of the first true element of ``bad`` (row-major: the first
    iteration, then the first lane), or None when there is none or no lane runs."""
    if n == 0 or not bad.any():
        return None
    return tuple(int(i) for i in np.unravel_index(int(bad.argmax()), bad.shape))


def _check_divisor(site: CheckSite, divisor: Any, mask: np.ndarray | None, n: int) -> Any:
    """``divisor``, raising for the first lane (under ``mask``) where it is zero; a
    uniform zero divisor that no lane uses is given back as 1, so nothing divides by it."""
    if isinstance(divisor, np.ndarray):
        zero = divisor == 0
        if mask is not None:
            zero = zero & mask
        where = _first(zero, n)
        if where is not None:
            raise site.error(where[-1], 0)
        return divisor
    if divisor != 0:
        return divisor
    if mask is None and n > 0:
        raise site.error(0, 0)
    if mask is not None and mask.any():
        raise site.error(int(mask.argmax()), 0)
    return 1


def _to_int(value: np.ndarray) -> np.ndarray:
    """``int()`` of every lane: toward zero, :data:`INT_INVALID` for NaN, inf or beyond int64."""
    result = value.astype(np.int64)
    valid = np.abs(value) < 2.0**63
    if not valid.all():
        result[~valid] = INT_INVALID
    return result


def _to_int1(value: Any) -> int:
    """``int()`` of a uniform real, as :func:`_to_int`."""
    return int(value) if abs(value) < 2.0**63 else INT_INVALID


#: one element, broadcast to a column of a chunk's rows
_ONE = np.empty((1, 1), bool)


def _by_rows(offset: Any, value: Any, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``offset`` and ``value`` broadcast to ``rows`` rows of a common shape (one row per
    iteration of a chunk, also where neither depends on the iteration)."""
    offset, value, _ = np.broadcast_arrays(offset, value, np.broadcast_to(_ONE, (rows, 1)))
    return offset, value


def _add_rows(table: np.ndarray, offset: Any, value: Any, rows: int = 1) -> None:
    """Add ``value`` into ``table`` at ``offset``, both broadcast to ``rows`` rows
    (:func:`_by_rows`; repeated offsets add up)."""
    offset, value = _by_rows(offset, value, rows)
    np.add.at(table, offset.ravel(), value.ravel())


#: the smallest groups :func:`_add_groups` sums first: runs of one address, and
#: addresses repeating every ``size`` lanes
_SMALLEST_RUN, _SMALLEST_STRIDE = 16, 32


def _add_groups(
    table: np.ndarray, offset: Any, value: Any, n: int, size: int, runs: bool, rows: int = 1
) -> None:
    """:func:`_add_rows` where ``offset`` is the same for each run of ``size``
    consecutive lanes (``runs``) or for lanes ``size`` apart: each such group's
    values are summed first, then the sums added, ``size`` times fewer.

    Summing pays once the groups are large enough: ``numpy.add.at`` is slowest on
    runs of one address, and summing short groups costs more than it saves (the
    sizes below are where it paid on a 2-core x86 host, benchmarks/RESULTS.md)."""
    if n % size or size < (_SMALLEST_RUN if runs else _SMALLEST_STRIDE):
        _add_rows(table, offset, value, rows)
        return
    offset, value = _by_rows(offset, value, rows)
    groups = n // size
    value = value.reshape(rows, groups, size)
    offset = offset.reshape(rows, groups, size)
    if runs:
        sums, at = value.sum(axis=-1), offset[..., 0]
    else:
        sums, at = value.sum(axis=-2), offset[..., 0, :]
    np.add.at(table, at.ravel(), sums.ravel())


def _last_row(term: Any, uniform: bool) -> Any:
    """The last iteration's value of a term with one row per iteration (a 1-D lane
    term or a number is one iteration's); a uniform one as a number."""
    if np.ndim(term) < 2:
        return term
    return term[-1, 0] if uniform else term[-1]


def _masked(value: Any, mask: np.ndarray) -> np.ndarray:
    """The lanes of ``mask`` of a lane value (a number or a 1-D array: a value the IR
    calls varying can be a number at run time, such as a carry a loop set to its index)."""
    return np.broadcast_to(value, mask.shape)[mask]


def _take_flat(table: np.ndarray, offset: Any) -> Any:
    """``table.take(offset, mode='clip')``; zeros when the table is empty (the checks
    raise for a lane that reads it, so no lane uses them)."""
    if table.size:
        return table.take(offset, mode="clip")
    return np.zeros(np.shape(offset), table.dtype)


def _sum_rows(term: np.ndarray) -> Any:
    """The sum over a chunk's iterations (axis 0) of a lane term with one row per
    iteration; a 1-D term is one iteration's."""
    return term if term.ndim == 1 else term.sum(axis=0)


#: the names the emitted programs see
RUNTIME = {
    "_check_index": _check_index,
    "_check_divisor": _check_divisor,
    "_to_int": _to_int,
    "_to_int1": _to_int1,
    "_add_rows": _add_rows,
    "_add_groups": _add_groups,
    "_sum_rows": _sum_rows,
    "_last_row": _last_row,
    "_take_flat": _take_flat,
    "_masked": _masked,
}
