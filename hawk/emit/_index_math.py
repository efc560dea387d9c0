"""The arithmetic of launch checks (``hawk.emit.checks.LaneCheck``): an index split
into parts of the lane and of loop indices, those parts' values over a loop nest, and
int64 overflow, computed as the kernel computes them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hawk import ir
from hawk.ir.expr import INT_MAX, INT_MIN
from hawk.kinds import Type

#: a loop index and its range
LoopRange = tuple[ir.Var, range]


def evaluate(
    node: ir.Expr, lane: int, loops: Mapping[ir.Var, int] | None = None
) -> tuple[int, bool]:
    """A :class:`LaneCheck` index at ``lane`` and loop indices ``loops`` as the kernel
    computes it (in int64, floor division), and whether every value on the way fits int64
    (then it is exact)."""
    if isinstance(node, ir.Lane):
        return lane, True
    if isinstance(node, ir.Const):
        return int(node.value), True
    if isinstance(node, ir.Ref):
        assert loops is not None
        return loops[node.var], True
    assert isinstance(node, ir.Binary)
    left, left_fits = evaluate(node.left, lane, loops)
    right, right_fits = evaluate(node.right, lane, loops)
    value = node.builtin.evaluate(left, right)
    fits = INT_MIN <= value <= INT_MAX
    if not fits:
        value = (value - INT_MIN) % 2**64 + INT_MIN
    return value, fits and left_fits and right_fits


_ZERO = ir.Const(0)


@dataclass(frozen=True)
class Sum:
    """A value of a :class:`LaneCheck` index, the sum of lane parts and of one loop part
    (``_ZERO`` when there is none)."""

    lanes: tuple[ir.Expr, ...]
    loop: ir.Expr

    def shift(self, lane: int) -> tuple[int, bool]:
        """The lane parts' sum at ``lane``, exactly, and whether each part fits int64."""
        total, fits = 0, True
        for part in self.lanes:
            value, part_fits = evaluate(part, lane)
            total, fits = total + value, fits and part_fits
        return total, fits


def lane_loop_sums(index: ir.Expr) -> list[Sum]:
    """``index`` and every ``+`` and ``-`` the kernel computes on the way to it that depends
    on the lane, as sums of lane and loop parts, ``index`` last; empty when ``index`` is
    not such a sum.

    The lane parts are the largest terms that depend on the lane and are not a ``+`` or a
    ``-``, each never decreasing as the lane grows; the loop part is the sum of the terms
    that do not depend on the lane (loop indices and constants)."""
    sums: list[Sum] = []
    total = split_sum(index, sums)
    return [] if total is None else sums or [total]  # a +/- index is the last of sums


def split_sum(node: ir.Expr, sums: list[Sum]) -> Sum | None:
    """``node`` as a :class:`Sum` (noting in ``sums`` each sum inside it that depends on the
    lane), or None when it is not one."""
    if not node.varying:
        return Sum((), node)
    if not (isinstance(node, ir.Binary) and node.op in ("+", "-")):
        refs = any(isinstance(item, ir.Ref) for item in ir.walk(node))
        return Sum((node,), _ZERO) if not refs and never_decreasing(node) else None
    if node.op == "-" and node.right.varying:
        return None
    left, right = split_sum(node.left, sums), split_sum(node.right, sums)
    if left is None or right is None:
        return None
    if right.loop == _ZERO:
        loop = left.loop
    elif left.loop == _ZERO and node.op == "+":
        loop = right.loop
    else:
        loop = ir.Binary(node.op, left.loop, right.loop)
    sums.append(Sum(left.lanes + right.lanes, loop))
    return sums[-1]


def loop_grid(loops: Sequence[LoopRange]) -> tuple[dict[ir.Var, np.ndarray], int]:
    """Each loop index at every iteration of the nest ``loops`` (outermost first), in loop
    order, and the number of iterations."""
    steps = [np.arange(r.start, r.stop, r.step, dtype=np.int64) for _, r in loops]
    axes = np.meshgrid(*steps, indexing="ij")
    grid = {var: axis.ravel() for (var, _), axis in zip(loops, axes, strict=True)}
    return grid, math.prod(len(r) for _, r in loops)


def loop_values(node: ir.Expr, grid: Mapping[ir.Var, np.ndarray], size: int) -> np.ndarray:
    """A loop part at every iteration of ``grid`` (int64, exact: its values fit)."""
    if isinstance(node, ir.Const):
        return np.full(size, int(node.value), np.int64)
    if isinstance(node, ir.Ref):
        return grid[node.var]
    assert isinstance(node, ir.Binary)
    left, right = loop_values(node.left, grid, size), loop_values(node.right, grid, size)
    return node.builtin.evaluate(left, right)


def below(values: np.ndarray, bound: int) -> np.ndarray:
    """``values < bound`` for a ``bound`` of any size."""
    if bound > INT_MAX or bound <= INT_MIN:
        return np.full(values.shape, bound > INT_MAX)
    return values < bound


def above(values: np.ndarray, bound: int) -> np.ndarray:
    """``values > bound`` for a ``bound`` of any size."""
    if bound < INT_MIN or bound >= INT_MAX:
        return np.full(values.shape, bound < INT_MIN)
    return values > bound


def substitute(
    node: ir.Expr, lets: Mapping[ir.Var, ir.Expr], loops: Mapping[ir.Var, range]
) -> ir.Expr | None:
    """``node`` with every variable but the indices of ``loops`` replaced by its value, when
    it is built from the lane, those indices and int constants with int arithmetic; else
    None."""
    if isinstance(node, ir.Lane):
        return node
    if isinstance(node, ir.Const):
        return node if node.type == Type.INT else None
    if isinstance(node, ir.Ref):
        if node.var in loops:
            return node
        value = lets.get(node.var)
        return None if value is None else substitute(value, lets, loops)
    if not (isinstance(node, ir.Binary) and node.type == Type.INT):
        return None
    left, right = substitute(node.left, lets, loops), substitute(node.right, lets, loops)
    if left is None or right is None:
        return None
    return ir.Binary(node.op, left, right)


def never_decreasing(node: ir.Expr) -> bool:
    """True when ``node`` (with no variables) is built only from the lane, int constants,
    ``+``, ``-`` a constant, ``*`` a constant >= 0 and ``//`` a constant > 0, so it never
    decreases as the lane grows."""
    if isinstance(node, ir.Lane | ir.Const):
        return True
    if not (isinstance(node, ir.Binary) and never_decreasing(node.left)):
        return False
    if not never_decreasing(node.right):
        return False
    left = node.left.value if isinstance(node.left, ir.Const) else None
    right = node.right.value if isinstance(node.right, ir.Const) else None
    if node.op == "+" or (node.op == "-" and right is not None):
        return True
    if node.op == "*":
        return (left is not None and left >= 0) or (right is not None and right >= 0)
    return node.op == "//" and right is not None and right > 0
