# ruff: noqa: F821, F841, SIM108, UP037
# Kernels assign to their output planes (F841), keep an if block to test it (SIM108), and
# name table axes with string slices, Table["row":3], which pyflakes reads as forward
# references (F821, UP037).
"""Kernels whose table indices and integer divisors come from the data, or from the lane
alone (checked once per launch: ``hawk.emit.checks.LaneCheck``), shared by the host and
GPU tests of the run-time checks (:mod:`hawk.emit.checks`). The contraction among them,
``contract`` over ``R, U, B``, is the one of :mod:`tests._hawk_kernels`."""

from __future__ import annotations

import hawk
from hawk import math as hm
from tests._hawk_kernels import B, R, U, contract  # noqa: F401 - R, contract: for the tests


@hawk.kernel
def lookup(t: hawk.Table["row":3, "col":4], i: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = t.at(row=int(i), col=1)


@hawk.kernel
def lookup2(
    t: hawk.Table["row":3, "col":4], i: hawk.Scalar, j: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]
):
    y = t.at(row=int(i), col=int(j))


@hawk.kernel
def flat(t: hawk.Table, i: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = t.at(int(i))


@hawk.kernel
def add_named(i: hawk.Scalar, x: hawk.Scalar, acc: hawk.Mutable[hawk.Table["bin":5, "slot":2]]):
    acc.add(bin=int(i), slot=1, value=x)


@hawk.kernel
def add_flat(i: hawk.Scalar, x: hawk.Scalar, acc: hawk.Mutable[hawk.Table]):
    acc.add(int(i), value=x)


@hawk.kernel
def add_uniform(k: hawk.Param, x: hawk.Scalar, acc: hawk.Mutable[hawk.Table["bin":5]]):
    acc.add(bin=int(k), value=x)


@hawk.kernel
def guarded(t: hawk.Table, i: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    k = int(i)
    if k >= 0 and k < 4:
        y = t.at(k)
    else:
        y = -1.0


@hawk.kernel
def guarded_add(i: hawk.Scalar, acc: hawk.Mutable[hawk.Table["bin":4]]):
    k = int(i)
    if k >= 0 and k < 4:
        acc.add(bin=k, value=1.0)


@hawk.kernel
def guarded_select(t: hawk.Table["row":4], i: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    k = int(i)
    y = t.at(row=k) if k >= 0 and k < 4 else -1.0


@hawk.kernel
def guarded_logic(t: hawk.Table["row":4], i: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    k = int(i)
    y = 1.0 if k < 4 and k >= 0 and t.at(row=k) > 0.0 else 0.0


@hawk.kernel
def divide(
    a: hawk.Scalar, b: hawk.Scalar, q: hawk.Mutable[hawk.Scalar], r: hawk.Mutable[hawk.Scalar]
):
    q = float(int(a) // int(b))
    r = float(int(a) % int(b))


@hawk.kernel
def guarded_divide(a: hawk.Scalar, b: hawk.Scalar, q: hawk.Mutable[hawk.Scalar]):
    d = int(b)
    q = float(int(a) // d) if d != 0 else 0.0


@hawk.kernel
def divide_by_param(a: hawk.Scalar, k: hawk.Param, q: hawk.Mutable[hawk.Scalar]):
    q = float(int(a) % int(k))


@hawk.kernel
def window(t: hawk.Table["row":6], i: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    k = int(i)
    acc = 0.0
    for r in range(3):
        acc = acc + t.at(row=k + r)
    y = acc


@hawk.kernel
def add_twice(i: hawk.Scalar, x: hawk.Scalar, acc: hawk.Mutable[hawk.Table["bin":4]]):
    acc.add(bin=0, value=x)
    acc.add(bin=int(i), value=x)


# -- indices from the lane alone ------------------------------------------------------


@hawk.kernel
def previous(f: hawk.Table["sample":B], y: hawk.Mutable[hawk.Scalar]):
    y = f.at(sample=hm.sample_index() // U - 1)


@hawk.kernel
def odd(t: hawk.Table, y: hawk.Mutable[hawk.Scalar]):
    y = t.at(2 * hm.sample_index() + 1)


@hawk.kernel
def wrapped(t: hawk.Table["row":2], y: hawk.Mutable[hawk.Scalar]):
    y = t.at(row=hm.sample_index() % 3)


@hawk.kernel
def cycle(t: hawk.Table["row":3], y: hawk.Mutable[hawk.Scalar]):
    y = t.at(row=hm.sample_index() % 3)


@hawk.kernel
def backwards(t: hawk.Table["row":6], y: hawk.Mutable[hawk.Scalar]):
    y = t.at(row=5 - hm.sample_index())


@hawk.kernel
def pairs(x: hawk.Scalar, acc: hawk.Mutable[hawk.Table["bin":3]]):
    acc.add(bin=hm.sample_index() // 2, value=x)


@hawk.kernel
def chosen(t: hawk.Table["row":3], y: hawk.Mutable[hawk.Scalar]):
    lane = hm.sample_index()
    y = t.at(row=lane) if lane < 3 else -1.0


@hawk.kernel
def branch(t: hawk.Table["row":3], y: hawk.Mutable[hawk.Scalar]):
    lane = hm.sample_index()
    if lane < 3:
        y = t.at(row=lane)
    else:
        y = -1.0


@hawk.kernel
def both(t: hawk.Table["row":3], y: hawk.Mutable[hawk.Scalar]):
    lane = hm.sample_index()
    y = t.at(row=lane) + (t.at(row=lane) if lane > 0 else 0.0)
