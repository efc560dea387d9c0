# ruff: noqa: F821, F841
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["row":R], which pyflakes reads as forward references (F821).
"""Kernels whose chunked loops have a factored form (hawk/emit/_factor.py), at any extents.

No ``from __future__ import annotations`` here: the table extents come from the factories'
arguments, and hawk evaluates annotations in the kernel's module, where those are not.
"""

import hawk
from hawk import math as hm


def scaled_contract(R: int, U: int, B: int) -> hawk.Kernel:
    """``y[s * U + u] = sum_r a * w[r, u] * f[r, s] * x[s * U + u]``: a product of four
    factors (a param, two tables, a lane value), each gradient a sum of a product."""

    @hawk.kernel
    def scaled_contract(
        a: hawk.Param,
        w: hawk.Table["row":R, "unit":U],
        f: hawk.Table["row":R, "sample":B],
        x: hawk.Scalar,
        y: hawk.Mutable[hawk.Scalar],
    ):
        sample, unit = hm.split_index(U)
        acc = 0.0
        for r in range(R):
            acc = acc + a * w.at(row=r, unit=unit) * f.at(row=r, sample=sample) * x
        y = acc

    return scaled_contract


def shifted_sum(R: int, U: int, B: int) -> hawk.Kernel:
    """``y[s * U + u] = sum_r w[r, u] + f[r, s] - t[r]`` and ``total[u] += w[r, u]`` for
    every lane and iteration: a summed term that is no product, and an add of a value
    that does not vary along what its address does not depend on (the groups)."""

    @hawk.kernel
    def shifted_sum(
        w: hawk.Table["row":R, "unit":U],
        f: hawk.Table["row":R, "sample":B],
        t: hawk.Table["row":R],
        y: hawk.Mutable[hawk.Scalar],
        total: hawk.Mutable[hawk.Table["unit":U]],
    ):
        sample, unit = hm.split_index(U)
        acc = 0.0
        for r in range(R):
            acc = acc + (w.at(row=r, unit=unit) + f.at(row=r, sample=sample) - t.at(row=r))
            total.add(unit=unit, value=w.at(row=r, unit=unit))
        y = acc

    return shifted_sum


def scaled_sums(R: int, U: int) -> hawk.Kernel:
    """``h[u] += x[s * U + u] * w[r, u]`` for every lane and iteration, and
    ``y[s * U + u] = sum_r x[s * U + u] * w[r, u]``: an add and a carry that sum a product
    whose factored form (``sum(x) * w``, ``x * sum(w)``) can overflow where the terms do
    not, and the other way round."""

    @hawk.kernel
    def scaled_sums(
        x: hawk.Scalar,
        w: hawk.Table["row":R, "unit":U],
        h: hawk.Mutable[hawk.Table["unit":U]],
        y: hawk.Mutable[hawk.Scalar],
    ):
        _sample, unit = hm.split_index(U)
        acc = 0.0
        for r in range(R):
            h.add(unit=unit, value=x * w.at(row=r, unit=unit))
            acc = acc + x * w.at(row=r, unit=unit)
        y = acc

    return scaled_sums


def grouped_add(R: int, U: int) -> hawk.Kernel:
    """``t[r, u] += x[s * U + u] * (w[r, u] * a)``: a product whose grouping decides
    whether it overflows (``(x * w) * a`` can where ``x * (w * a)`` does not)."""

    @hawk.kernel
    def grouped_add(
        x: hawk.Scalar,
        a: hawk.Param,
        w: hawk.Table["row":R, "unit":U],
        t: hawk.Mutable[hawk.Table["row":R, "unit":U]],
    ):
        _sample, unit = hm.split_index(U)
        for r in range(R):
            t.add(row=r, unit=unit, value=x * (w.at(row=r, unit=unit) * a))

    return grouped_add


def indirect(R: int, U: int, C: int) -> hawk.Kernel:
    """``y[s * U + u] = sum_r t[r, int(k[u]) + s + r]``: an index checked as it runs, of
    iteration, group and unit."""

    @hawk.kernel
    def indirect(
        t: hawk.Table["row":R, "col":C],
        k: hawk.Table["unit":U],
        y: hawk.Mutable[hawk.Scalar],
    ):
        sample, unit = hm.split_index(U)
        acc = 0.0
        for r in range(R):
            acc = acc + t.at(row=r, col=int(k.at(unit=unit)) + sample + r)
        y = acc

    return indirect


def carried(R: int, U: int) -> hawk.Kernel:
    """Carries that change in each of ``R`` iterations: from ``a``, by ``x * w[r, u]`` (a
    lane term), by ``a * v[r]`` (a uniform term) and by ``-s`` (a term no iteration
    changes); from ``s``, by ``-a``; ``x`` and ``s`` at lane ``sample * U + u``."""

    @hawk.kernel
    def carried(
        x: hawk.Scalar,
        s: hawk.Scalar,
        a: hawk.Param,
        w: hawk.Table["row":R, "unit":U],
        v: hawk.Table["row":R],
        by_lane: hawk.Mutable[hawk.Scalar],
        by_row: hawk.Mutable[hawk.Scalar],
        repeated: hawk.Mutable[hawk.Scalar],
        shifted: hawk.Mutable[hawk.Scalar],
    ):
        _sample, unit = hm.split_index(U)
        lane_acc, row_acc, repeat_acc, shift_acc = a, a, a, s
        for r in range(R):
            lane_acc = lane_acc + x * w.at(row=r, unit=unit)
            row_acc = row_acc + a * v.at(row=r)
            repeat_acc = repeat_acc - s
            shift_acc = shift_acc - a
        by_lane = lane_acc
        by_row = row_acc
        repeated = repeat_acc
        shifted = shift_acc

    return carried


def divided(R: int, U: int) -> hawk.Kernel:
    """``y[s * U + u] = sum_r (r + s) // (int(k[u]) - s)``: a divisor checked as it runs."""

    @hawk.kernel
    def divided(k: hawk.Table["unit":U], y: hawk.Mutable[hawk.Scalar]):
        sample, unit = hm.split_index(U)
        acc = 0.0
        for r in range(R):
            acc = acc + float((r + sample) // (int(k.at(unit=unit)) - sample))
        y = acc

    return divided


def two_splits(R: int) -> hawk.Kernel:
    """A loop reading ``lane % 4`` and ``lane % 6``: no one ``U``, so no factored form."""

    @hawk.kernel
    def two_splits(w: hawk.Table["row":R, "unit":12], y: hawk.Mutable[hawk.Scalar]):
        _, four = hm.split_index(4)
        _, six = hm.split_index(6)
        acc = 0.0
        for r in range(R):
            acc = acc + w.at(row=r, unit=four + six)
        y = acc

    return two_splits
