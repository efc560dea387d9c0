# ruff: noqa: F821, F841, UP037
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["row":6], which pyflakes reads as forward references (F821, UP037).
"""Kernels whose table indices add a part that depends on the lane alone to a part that
depends on loop indices alone (checked once per launch: ``hawk.emit.checks.LaneCheck``),
and near relatives that keep their check in the kernel, shared by the host and GPU tests.

Each has a ``BRUTE`` entry: its index as a function of the lane and the loop indices, and
the loops' ranges, outermost first, for a brute-force search of the first lane out of range.
"""

from __future__ import annotations

from collections.abc import Callable

import hawk
from hawk import math as hm

ROWS = 6


@hawk.kernel
def sliding(t: hawk.Table["row":ROWS], y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for k in range(3):
        acc = acc + t.at(row=hm.sample_index() // 2 + k)
    y = acc


@hawk.kernel
def backwards(t: hawk.Table, y: hawk.Mutable[hawk.Scalar]):
    lane = hm.sample_index()
    acc = 0.0
    for k in range(2, -1, -1):  # lane 0 reads 0, then -1 (and would read -2)
        acc = acc + t.at(lane + k - 2)
    y = acc


@hawk.kernel
def nested(t: hawk.Table["row":ROWS], y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for i in range(2):
        for j in range(3):
            r = 2 * hm.sample_index() + (j - i) % 3
            acc = acc + t.at(row=r - 1)
    y = acc


@hawk.kernel
def spread(x: hawk.Scalar, acc: hawk.Mutable[hawk.Table["bin":ROWS]]):
    for k in range(2):
        acc.add(bin=hm.sample_index() + 2 * k, value=x)


@hawk.kernel
def coefficients(c: hawk.Table, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for k in range(4):
        acc = acc * x + c.at(k)
    y = acc


@hawk.kernel
def halves(t: hawk.Table["row":ROWS], y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for k in range(3):
        acc = acc + t.at(row=(hm.sample_index() + k) // 2)
    y = acc


@hawk.kernel
def falling(t: hawk.Table["row":ROWS], y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for k in range(3):
        acc = acc + t.at(row=k + 3 - hm.sample_index())
    y = acc


@hawk.kernel
def guarded(t: hawk.Table["row":ROWS], x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for k in range(3):
        if x > 0.0:
            acc = acc + t.at(row=hm.sample_index() // 2 + k)
    y = acc


Index = Callable[..., int]

#: kernel name -> (index at (lane, *loop indices), the loops' ranges, outermost first)
BRUTE: dict[str, tuple[Index, tuple[range, ...]]] = {
    "sliding": (lambda lane, k: lane // 2 + k, (range(3),)),
    "backwards": (lambda lane, k: lane + k - 2, (range(2, -1, -1),)),
    "nested": (lambda lane, i, j: 2 * lane + (j - i) % 3 - 1, (range(2), range(3))),
    "spread": (lambda lane, k: lane + 2 * k, (range(2),)),
    "coefficients": (lambda lane, k: k, (range(4),)),
}
