"""What the numpy programs of :mod:`hawk.emit.host` call at run time.

A value the checks see is a Python number, a lane array (shape ``(n,)``) or,
inside a loop run a chunk of iterations at a time (``hawk/emit/_batch.py``), an
array of one row per iteration (``(C, 1)`` or ``(C, n)``); in such a loop on
factored lanes (``hawk/emit/_factor.py``), an array of shape ``(C, G, U)`` or
broadcastable to it, whose lane at ``[c, g, u]`` is ``g * U + u`` (the checks
take ``unit=U``). A failure is reported for the first iteration, then the first
lane, that failed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hawk._registry.functions import floor_unchecked
from hawk._registry.integers import EXACT, int_power, wrapped
from hawk.dtypes import storable
from hawk.emit._factor import GROUP, LANES, UNIT, Grouping
from hawk.emit.checks import CheckSite
from hawk.errors import HawkError
from hawk.ir.expr import INT_MAX, INT_MIN, int_takes

__all__ = ["RUNTIME"]


def _check_index(
    sites: Sequence[CheckSite],
    indices: Sequence[Any],
    extents: Sequence[int],
    mask: np.ndarray | None,
    n: int,
    last: list[Any],
    slot: int,
    unit: int = 0,
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
        lane = _lane(where, unit)
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


def _lane(where: tuple[int, ...], unit: int) -> int:
    """The lane at position ``where`` of a checked array: its last index, or on factored
    lanes (``unit``, a ``(C, G, U)`` array) ``g * unit + u``."""
    if unit and len(where) == 3:
        return where[1] * unit + where[2]
    return where[-1] if where else 0


def _check_divisor(
    site: CheckSite, divisor: Any, mask: np.ndarray | None, n: int, unit: int = 0
) -> Any:
    """``divisor``, raising for the first lane (under ``mask``) where it is zero; a
    uniform zero divisor that no lane uses is given back as 1, so nothing divides by it."""
    if isinstance(divisor, np.ndarray):
        zero = divisor == 0
        if mask is not None:
            zero = zero & mask
        where = _first(zero, n)
        if where is not None:
            raise site.error(_lane(where, unit), 0)
        return divisor
    if divisor != 0:
        return divisor
    if mask is None and n > 0:
        raise site.error(0, 0)
    where = None if mask is None else _first(mask, n)
    if where is not None:
        raise site.error(_lane(where, unit), 0)
    return 1


def _fail_first(
    site: CheckSite, bad: Any, values: Any, mask: np.ndarray | None, n: int, unit: int
) -> None:
    """Raise ``site``'s error for the first lane (under ``mask``) where ``bad`` holds, with
    that lane's element of ``values``."""
    if mask is not None:
        bad = bad & mask
    where = _first(bad, n) if isinstance(bad, np.ndarray) else () if bad and n > 0 else None
    if where is not None:
        raise site.error(_lane(where, unit), np.broadcast_to(values, np.shape(bad))[where].item())


def _to_int(value: Any, site: CheckSite, mask: np.ndarray | None, n: int, unit: int = 0) -> Any:
    """``int()`` of a lane value, toward zero, raising for the first lane (under ``mask``)
    of NaN, +-inf or a real beyond int64 (its real's bits as a double, :mod:`hawk.emit.checks`)."""
    array = np.asarray(value)
    invalid = ~int_takes(array)
    if invalid.any():
        _fail_first(site, invalid, array.astype(np.float64).view(np.int64), mask, n, unit)
        array = np.where(invalid, 0, array)  # lanes outside the mask: never used
    return array.astype(np.int64) if array.ndim else int(array)


def _wrap(value: Any) -> Any:
    """An int value brought into int64 (two's complement): numpy's int64 wraps already,
    a Python int (a uniform value) is taken modulo 2**64."""
    if type(value) is int and not INT_MIN <= value <= INT_MAX:
        return wrapped(value)
    return value


def _checked(
    op: str, a: Any, b: Any, site: CheckSite, mask: np.ndarray | None, n: int, unit: int = 0
) -> Any:
    """``a op b`` in int64 (``op`` one of ``+``, ``-``, ``*``, ``//`` and ``neg``, which
    negates ``a``), raising for the first lane (under ``mask``) where its value leaves
    int64."""
    overflows = _OVERFLOWS.get(op)
    if overflows is None:
        raise HawkError(f"no int64 overflow rule for {op!r}; checked ops: {', '.join(_OVERFLOWS)}")
    if type(a) is int and type(b) is int:
        exact = EXACT[op](a, b)
        _fail_first(site, exact != wrapped(exact), wrapped(exact), mask, n, unit)
        return wrapped(exact)
    x, y = np.asarray(a, np.int64), np.asarray(b, np.int64)
    result: np.ndarray = np.asarray(EXACT[op](x, y), np.int64)
    _fail_first(site, overflows(x, y, result), result, mask, n, unit)
    return result if result.ndim else result.item()


def _mul_overflows(x: np.ndarray, y: np.ndarray, product: np.ndarray) -> np.ndarray:
    """Where ``x * y`` leaves int64, given its wrapped ``product``."""
    divisor = np.where((x == 0) | (x == -1), 1, x)
    return np.where(x == -1, y == INT_MIN, (x != 0) & (product // divisor != y))


#: where ``x op y`` leaves int64, from the operands and the wrapped result, for each op
#: :func:`_checked` takes (``neg`` negates ``x``)
_OVERFLOWS: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    "+": lambda x, y, result: ((x ^ result) & (y ^ result)) < 0,
    "-": lambda x, y, result: ((x ^ y) & (x ^ result)) < 0,
    "*": _mul_overflows,
    "//": lambda x, y, result: (x == INT_MIN) & (y == -1),
    "neg": lambda x, y, result: x == INT_MIN,
}


def _ipow(
    base: Any,
    exponent: Any,
    negative: CheckSite | None,
    overflow: CheckSite | None,
    mask: np.ndarray | None,
    n: int,
    unit: int = 0,
) -> Any:
    """An int ``base ** exponent`` by squaring, modulo 2**64; a negative exponent raises
    ``negative``'s error (when it is a site; the power is then 0) and, when ``overflow``
    is a site, a power beyond int64 raises its error."""
    if type(base) is int and type(exponent) is int:
        if exponent < 0:
            if negative is not None:
                _fail_first(negative, True, exponent, mask, n, unit)
            return 0
        exact = int_power(base, exponent)
        if overflow is not None:
            _fail_first(overflow, not INT_MIN <= exact <= INT_MAX, wrapped(exact), mask, n, unit)
        return wrapped(exact)
    x, e = np.asarray(base, np.int64), np.asarray(exponent, np.int64)
    below = e < 0
    if negative is not None and below.any():
        _fail_first(negative, below, e, mask, n, unit)
    e = np.where(below, 0, e)
    shape = np.broadcast_shapes(x.shape, e.shape)
    result, beyond = np.ones(shape, np.int64), np.zeros(shape, bool)
    while e.any():
        odd = (e & 1) != 0
        product = result * x
        beyond |= odd & _mul_overflows(result, x, product)
        result = np.where(odd, product, result)
        e = e >> 1
        square = x * x
        beyond |= (e != 0) & _mul_overflows(x, x, square)
        x = square
    result = np.where(below, 0, result)
    if overflow is not None:
        _fail_first(overflow, beyond, result, mask, n, unit)
    return result if result.ndim else result.item()


def _round_sums(table: np.ndarray, sums: np.ndarray) -> None:
    """Add a launch's ``sums`` (in the compute type) into the 16-bit ``table``, rounding
    each element whose sum is not 0 once (as the device's last block does)."""
    added = sums != 0
    if added.any():
        table[added] = storable(table[added].astype(sums.dtype) + sums[added], table.dtype)


#: one element, broadcast to a column of a chunk's rows
_ONE = np.empty((1, 1), bool)


def _by_rows(offset: Any, value: Any, rows: int, lanes: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``offset`` and ``value`` broadcast to ``rows`` rows of a common shape (one row per
    iteration of a chunk, also where neither depends on the iteration), of at least
    ``lanes`` columns."""
    shape = (rows, lanes)
    offset, value, _ = np.broadcast_arrays(offset, value, np.broadcast_to(_ONE, shape))
    return offset, value


def _add_rows(table: np.ndarray, offset: Any, value: Any, rows: int = 1, lanes: int = 1) -> None:
    """Add ``value`` into ``table`` at ``offset``, both broadcast to ``rows`` rows of
    ``lanes`` columns (:func:`_by_rows`; repeated offsets add up): a lane index that is
    one number at run time (chosen by a uniform condition) still adds once per lane."""
    offset, value = _by_rows(offset, value, rows, lanes)
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
    # (an offset or value that is one number at run time still adds once per lane)
    if n % size or size < (_SMALLEST_RUN if runs else _SMALLEST_STRIDE):
        _add_rows(table, offset, value, rows, n)
        return
    offset, value = _by_rows(offset, value, rows, n)
    groups = n // size
    value = value.reshape(rows, groups, size)
    offset = offset.reshape(rows, groups, size)
    if runs:
        sums, at = value.sum(axis=-1), offset[..., 0]
    else:
        sums, at = value.sum(axis=-2), offset[..., 0, :]
    np.add.at(table, at.ravel(), sums.ravel())


def _factored(value: Any, groups: int, unit: int, axes: int) -> Any:
    """A lane value (a number or an ``(n,)`` array) on factored lanes: ``(1, G, U)``, or
    ``(1, G, 1)`` for a value of the group alone (``axes`` GROUP), ``(1, 1, U)`` for one
    of the unit alone (UNIT)."""
    if np.ndim(value) == 0:
        return value
    lanes = value.reshape(1, groups, unit)
    if axes == GROUP:
        return lanes[:, :, :1]
    if axes == UNIT:
        return lanes[:, :1, :]
    return lanes


def _flat_lanes(value: Any, sizes: tuple[int, int, int]) -> np.ndarray:
    """A value on factored lanes with one row (``sizes`` is ``(C, G, U)``) as lanes,
    ``(n,)``."""
    _, groups, unit = sizes
    return np.broadcast_to(value, (1, groups, unit)).reshape(groups * unit)


def _operand(factor: Any) -> tuple[np.ndarray, tuple[int, ...]]:
    """A factor broadcastable to ``(C, G, U)`` without its axes of size 1, and the axes
    (0, 1, 2) it keeps."""
    array = np.asarray(factor)
    shape = (1,) * (3 - array.ndim) + array.shape
    axes = tuple(k for k in range(3) if shape[k] != 1)
    return array.reshape([shape[k] for k in axes]), axes


def _sum_product(
    keep: int, sizes: tuple[int, int, int], grouping: Grouping, *factors: Any
) -> np.ndarray:
    """The product of ``factors`` (each broadcastable to ``sizes``, ``(C, G, U)``) summed
    over the axes not in ``keep`` (bits 1, 2, 4 for axes 0, 1, 2), with those axes kept
    as size 1; the product is never formed where it has more axes than the sum.

    Factoring the sum (``sum(x * w) = sum(x) * w``) moves where a float can overflow:
    where a term or a partial sum could leave the float range, or a factor is infinite,
    the terms are formed as the kernel multiplies them (``grouping``,
    :meth:`~hawk.emit._factor.Factoring.grouping`) and summed iteration by iteration
    (:func:`_sum_terms`), so an inf or NaN arises from them as in the lane-by-lane kernel."""
    if not _factored_sum_is_safe(keep, sizes, factors):
        return _sum_terms(keep, sizes, grouping, factors)
    return _contracted(keep, sizes, factors)


def _contracted(keep: int, sizes: tuple[int, int, int], factors: Sequence[Any]) -> np.ndarray:
    """:func:`_sum_product` summed factored, as matrix products of the factors."""
    operands = [_operand(factor) for factor in factors]
    scale: list[Any] = [a for a, axes in operands if not axes]
    arrays = [(a, axes) for a, axes in operands if axes]
    present = {k for _, axes in arrays for k in axes}
    # a summed axis no factor varies along: the sum is its size times one value
    scale += [sizes[k] for k in range(3) if not keep >> k & 1 and k not in present]
    out = tuple(sorted(k for k in present if keep >> k & 1))
    if not arrays:
        result: Any = np.ones((), np.result_type(*scale))
    elif len(arrays) == 1:
        array, axes = arrays[0]
        result = array.sum(axis=tuple(i for i, k in enumerate(axes) if k not in out))
    elif len(arrays) == 2:
        result = _contract(*arrays[0], *arrays[1], out)
    else:
        spec = ",".join("".join("abc"[k] for k in axes) for _, axes in arrays)
        spec += "->" + "".join("abc"[k] for k in out)
        result = np.einsum(spec, *(a for a, _ in arrays), optimize=True)
    for multiplier in scale:
        result = result * multiplier
    shape = [1, 1, 1]
    for k, extent in zip(out, np.shape(result), strict=True):
        shape[k] = extent
    return np.reshape(result, shape)


def _carry_product(
    acc: Any,
    how: str,
    lanes: bool,
    sizes: tuple[int, int, int],
    grouping: Grouping,
    *factors: Any,
) -> Any:
    """A carry ``acc`` (lanes, ``(n,)``, where ``lanes``; else one number) after a pass of
    a factored loop adds (``how`` ``"+"``) or subtracts (``"-"``) the product of
    ``factors`` (each broadcastable to ``sizes``, ``(C, G, U)``) in each of its ``C``
    iterations.

    The products are summed factored first, then added, where no order of the additions
    from ``acc`` can overflow (:func:`_factored_sum_is_safe`); else each iteration's terms
    are formed as the kernel multiplies them (``grouping``) and added to the running
    carry in turn, as the kernel's loop adds them."""
    if _factored_sum_is_safe(LANES, sizes, factors, acc):
        summed = _contracted(LANES, sizes, factors)
        total = _flat_lanes(summed, sizes) if lanes else summed[0, 0, 0]
        return acc - total if how == "-" else acc + total
    for block in _term_blocks(sizes, grouping, factors):
        acc = _added_in_order(acc, how, block.reshape(len(block), -1) if lanes else block[:, 0, 0])
    return acc


def _factored_sum_is_safe(
    keep: int, sizes: tuple[int, int, int], factors: Sequence[Any], start: Any = 0
) -> bool:
    """True when ``start`` plus the float sum of products of ``factors`` over the axes not
    in ``keep`` stays in range however it is factored and ordered (:func:`_in_range`):
    the count of terms times the product of the factors' largest magnitudes (each at
    least 1), plus ``start``'s largest magnitude, bounds every partial sum; an infinite
    factor or ``start`` makes it inf (integers wrap alike in any order). A NaN is left
    out: it makes NaN of the same sums in either form."""
    limits = _float_limits(np.result_type(start, *factors))
    if limits is None:
        return True
    count = math.prod(sizes[k] for k in range(3) if not keep >> k & 1)
    bound = float(count)
    if count:
        for factor in factors:
            largest = _largest(factor)
            if largest > 1.0:
                bound *= largest
    # (each factor rounds once in a product and once in the bound)
    return _in_range(bound + _largest(start), count + 2 * len(factors) + 2, limits)


def _largest(value: Any) -> float:
    """The largest magnitude in a number or an array, NaNs passed over (0 where there
    are only NaNs, or no elements)."""
    if np.ndim(value) == 0:
        largest = abs(float(value))
    elif value.size:  # (fmax and fmin pass over NaNs)
        largest = max(float(np.fmax.reduce(value, None)), -float(np.fmin.reduce(value, None)))
    else:
        return 0.0
    return 0.0 if math.isnan(largest) else largest


def _in_range(bound: float, roundings: int, limits: tuple[float, float]) -> bool:
    """True when a float sum of terms whose magnitudes add up to ``bound`` cannot overflow
    in any order: each of its ``roundings`` grows a partial sum by a factor of at most
    ``1 + u`` (``limits``: the largest finite value and ``u``, :func:`_float_limits`), so
    none passes ``bound * exp(roundings * u)``."""
    largest, roundoff = limits
    return bound * math.exp(roundings * roundoff) <= largest


@functools.cache
def _float_limits(dtype: np.dtype) -> tuple[float, float] | None:
    """The largest finite value of a float ``dtype`` and its unit roundoff (half its
    machine epsilon); None for any other dtype."""
    if not np.issubdtype(dtype, np.floating):
        return None
    info = np.finfo(dtype)
    return float(info.max), float(info.eps) / 2


#: the elements of terms :func:`_term_blocks` forms at once
_TERM_ELEMENTS = 1 << 18


def _term_blocks(
    sizes: tuple[int, int, int], grouping: Grouping, factors: Sequence[Any]
) -> Iterator[np.ndarray]:
    """The terms of a sum of products of ``factors`` (each broadcastable to ``sizes``,
    ``(C, G, U)``), the factors multiplied as the kernel groups them, a block of
    iterations (rows) at a time: ``(rows, G, U)`` each."""
    rows, groups, unit = sizes
    shaped = [
        f if np.ndim(f) == 0 else np.reshape(f, (1,) * (3 - np.ndim(f)) + np.shape(f))
        for f in factors
    ]

    def term(group: Grouping, span: slice) -> Any:
        if isinstance(group, tuple):
            return term(group[0], span) * term(group[1], span)
        factor = shaped[group]
        return factor[span] if np.ndim(factor) and np.shape(factor)[0] > 1 else factor

    block = max(1, _TERM_ELEMENTS // max(1, groups * unit))
    for first in range(0, rows, block):
        count = min(block, rows - first)
        yield np.broadcast_to(term(grouping, slice(first, first + count)), (count, groups, unit))


def _sum_terms(
    keep: int, sizes: tuple[int, int, int], grouping: Grouping, factors: Sequence[Any]
) -> np.ndarray:
    """:func:`_sum_product` with each term formed (:func:`_term_blocks`); the rows' sums
    are added in order, as the kernel's loop adds them."""
    lanes = tuple(k for k in (1, 2) if not keep >> k & 1)
    sums: list[np.ndarray] = []
    total: Any = None
    for formed in _term_blocks(sizes, grouping, factors):
        summed = formed.sum(axis=lanes, keepdims=True)
        if keep & 1:
            sums.append(summed)
        else:  # (a reduction over the first axis adds its rows one after another)
            part = np.add.reduce(summed, axis=0, keepdims=True)
            total = part if total is None else total + part
    return np.concatenate(sums) if keep & 1 else total


def _added_in_order(acc: Any, how: str, rows: np.ndarray) -> Any:
    """``acc`` with each of ``rows`` (axis 0) added (``how`` ``"+"``) or subtracted
    (``"-"``) in turn, as the kernel's loop does."""
    lanes = rows.shape[1:]
    shape = np.broadcast_shapes(np.shape(acc), lanes)
    running = np.empty((len(rows) + 1, *shape), np.result_type(acc, rows))
    running[0] = acc
    # (each row broadcast over the carry's lanes, never along the rows)
    running[1:] = rows.reshape(len(rows), *(1,) * (len(shape) - len(lanes)), *lanes)
    (np.subtract if how == "-" else np.add).accumulate(running, axis=0, out=running)
    return running[-1]


def _contract(
    a: np.ndarray,
    a_axes: tuple[int, ...],
    b: np.ndarray,
    b_axes: tuple[int, ...],
    out: tuple[int, ...],
) -> np.ndarray:
    """The product of two operands (with the axes they vary along) summed over the axes
    not in ``out``, as one matrix product; the result's axes are ``out``, in order.

    It is not eagle's host product (``eagle.gemm._host.host_product``, which a matmul
    step and the GEMM route run): that one writes ``op(a) @ op(b) + beta * out`` into a
    caller's 2-D matrix, while this one is a batched product over up to three lane axes
    whose factors first sum over axes the other lacks, returning a new array the
    program goes on with; and hawk's programs import nothing of eagle."""
    plan = _matmul_plan(a_axes, b_axes, out)
    if plan.a_sum:
        a = a.sum(axis=plan.a_sum)
    if plan.b_sum:
        b = b.sum(axis=plan.b_sum)
    extent = [1, 1, 1]
    for k, size in zip(plan.a_axes, a.shape, strict=True):
        extent[k] = size
    for k, size in zip(plan.b_axes, b.shape, strict=True):
        extent[k] = size
    batch, left, inner, right = (math.prod(extent[k] for k in part) for part in plan.parts)
    product = np.matmul(
        a.transpose(plan.a_order).reshape(batch, left, inner),
        b.transpose(plan.b_order).reshape(batch, inner, right),
    )
    return product.reshape([extent[k] for k in plan.order]).transpose(plan.out_order)


@dataclass(frozen=True)
class _MatmulPlan:
    """How :func:`_contract` lays two operands out as a (batched) matrix product.

    Attributes:
        a_sum, b_sum: the positions each operand is summed over first (axes the other
            operand and the result lack).
        a_axes, b_axes: the axes each keeps.
        parts: the axes of the batch, the rows (``a`` alone), the inner dimension (both,
            summed) and the columns (``b`` alone).
        a_order, b_order: the transpositions to (batch, rows, inner) and (batch, inner,
            columns).
        order: the axes of the product, (batch, rows, columns).
        out_order: the transposition of the product to the result's axes.
    """

    a_sum: tuple[int, ...]
    b_sum: tuple[int, ...]
    a_axes: tuple[int, ...]
    b_axes: tuple[int, ...]
    parts: tuple[tuple[int, ...], ...]
    a_order: tuple[int, ...]
    b_order: tuple[int, ...]
    order: tuple[int, ...]
    out_order: tuple[int, ...]


@functools.lru_cache(maxsize=256)
def _matmul_plan(
    a_axes: tuple[int, ...], b_axes: tuple[int, ...], out: tuple[int, ...]
) -> _MatmulPlan:
    """The layout of :func:`_contract` for operands along ``a_axes`` and ``b_axes`` and a
    result along ``out`` (worked out once per combination)."""
    a_sum = tuple(i for i, k in enumerate(a_axes) if k not in b_axes and k not in out)
    b_sum = tuple(i for i, k in enumerate(b_axes) if k not in a_axes and k not in out)
    a_kept = tuple(k for k in a_axes if k in b_axes or k in out)
    b_kept = tuple(k for k in b_axes if k in a_axes or k in out)
    both = [k for k in a_kept if k in b_kept]
    batch = tuple(k for k in both if k in out)
    inner = tuple(k for k in both if k not in out)
    left = tuple(k for k in a_kept if k not in b_kept)
    right = tuple(k for k in b_kept if k not in a_kept)
    order = (*batch, *left, *right)
    return _MatmulPlan(
        a_sum,
        b_sum,
        a_kept,
        b_kept,
        (batch, left, inner, right),
        tuple(a_kept.index(k) for k in (*batch, *left, *inner)),
        tuple(b_kept.index(k) for k in (*batch, *inner, *right)),
        order,
        tuple(order.index(k) for k in out),
    )


def _add_product(
    table: np.ndarray, offset: Any, sizes: tuple[int, int, int], grouping: Grouping, *factors: Any
) -> None:
    """Add the product of ``factors`` into ``table`` at ``offset``, all broadcastable to
    ``sizes`` (``(C, G, U)``, factored lanes): the product is first summed over the
    axes the offset does not vary along (:func:`_sum_product`)."""
    shape = (1,) * (3 - np.ndim(offset)) + np.shape(offset)
    keep = sum(1 << k for k in range(3) if shape[k] != 1)
    offset, value = np.broadcast_arrays(offset, _sum_product(keep, sizes, grouping, *factors))
    np.add.at(table, offset.ravel(), value.ravel())


def _last_row(term: Any, uniform: bool) -> Any:
    """The last iteration's value of a term with one row per iteration (a 1-D lane
    term or a number is one iteration's); a uniform one as a number."""
    if np.ndim(term) < 2:
        return term
    return term[-1, 0] if uniform else term[-1]


def _as_mask(cond: Any, shape: int | tuple[int, ...]) -> Any:
    """A condition as a mask of lanes: a condition the IR calls varying that is one number
    at run time (a uniform condition chose its uniform side) becomes ``shape`` of it."""
    return cond if np.ndim(cond) else np.full(shape, bool(cond))


def _masked(value: Any, mask: np.ndarray) -> np.ndarray:
    """The lanes of ``mask`` of a lane value (a number or a 1-D array: a value the IR
    calls varying can be a number at run time, such as a carry a loop set to its index)."""
    return np.broadcast_to(value, mask.shape)[mask]


def _lane_sum(value: Any, n: int) -> Any:
    """The sum over ``n`` lanes of a lane value: a 1-D array's sum, or ``n`` times a
    number (a value the IR calls varying is a number at run time where it is the same on
    every lane, such as a loop carry that starts uniform, in its first iteration)."""
    return np.sum(value) if np.ndim(value) else value * n


def _clamped(index: Any, extent: int) -> Any:
    """A uniform index that is a Python int brought into ``[0, extent)`` (an empty axis:
    -1, which no offset reaches); one with a row per iteration (int64) as it is."""
    if type(index) is int:
        return min(max(index, 0), extent - 1)
    return index


def _take_flat(table: np.ndarray, offset: Any) -> Any:
    """``table.take(offset, mode='clip')``; zeros when the table is empty (the checks
    raise for a lane that reads it, so no lane uses them)."""
    if table.size:
        return table.take(offset, mode="clip")
    return np.zeros(np.shape(offset), table.dtype)


def _carry_rows(acc: Any, how: str, term: Any, count: int) -> Any:
    """A carry ``acc`` after a chunk's ``count`` iterations each add (``how`` ``"+"``) or
    subtract (``"-"``) ``term``, which has one row per iteration (axis 0; ``(C, 1)`` for a
    uniform term). A term without rows at run time (a number, or one lane row: a uniform
    condition chose a side that does not depend on the iteration, or the chunk is one
    iteration) is the same in each iteration.

    The rows are summed first, then added, where that is the kernel's order (one
    iteration) or no order of the additions from ``acc`` can overflow
    (:func:`_in_range`); else each is added to the running carry in turn, as the
    kernel's loop adds them."""
    rowless = np.ndim(term) < 2
    rows = term if rowless or term.shape[1] > 1 else term[:, 0]
    if count == 1 or _rows_are_safe(acc, term, count):
        total = term * count if rowless else rows.sum(axis=0)
        return acc - total if how == "-" else acc + total
    if rowless:
        rows = np.broadcast_to(term, (count, *np.shape(term)))
    return _added_in_order(acc, how, rows)


def _rows_are_safe(acc: Any, term: Any, count: int) -> bool:
    """True when ``acc`` plus ``count`` terms no larger than those of ``term`` cannot
    overflow in any order (:func:`_in_range`; integers wrap alike in any order)."""
    limits = _float_limits(np.result_type(acc, term))
    if limits is None:
        return True
    bound = _largest(acc) + count * _largest(term)
    # (the additions, the bound's two operations and a term without rows times the count round)
    return _in_range(bound, count + 3, limits)


#: the names the emitted programs see
RUNTIME = {
    "_check_index": _check_index,
    "_check_divisor": _check_divisor,
    "_to_int": _to_int,
    "_round_sums": _round_sums,
    "_storable": storable,
    "_wrap": _wrap,
    "_checked": _checked,
    "_ipow": _ipow,
    "_floor_int": floor_unchecked,
    "_add_rows": _add_rows,
    "_add_groups": _add_groups,
    "_carry_rows": _carry_rows,
    "_last_row": _last_row,
    "_take_flat": _take_flat,
    "_clamped": _clamped,
    "_masked": _masked,
    "_as_mask": _as_mask,
    "_lane_sum": _lane_sum,
    "_factored": _factored,
    "_add_product": _add_product,
    "_carry_product": _carry_product,
}
