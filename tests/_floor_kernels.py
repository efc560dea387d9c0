# ruff: noqa: F821, F841, UP037
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["k":N], which pyflakes reads as forward references (F821, UP037).
"""Kernels that address a table through ``hawk.math.floor``, shared by the host and GPU
tests of floor."""

from __future__ import annotations

import hawk
from hawk import math as hm

#: knots of the interpolation table
KNOTS = 9
#: knots per unit of x
SCALE = 3.0


@hawk.kernel
def interpolate(x: hawk.Scalar, t: hawk.Table["k":KNOTS], y: hawk.Mutable[hawk.Scalar]):
    # piecewise linear interpolation: the cell from floor, clamped so both reads are in
    # range (which the emitters prove), the weights from the fraction
    u = x * SCALE
    j = hm.minimum(hm.maximum(hm.floor(u), 0), KNOTS - 2)
    f = u - j
    y = t.at(k=j) * (1.0 - f) + t.at(k=j + 1) * f


@hawk.kernel
def floors(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    # floor's int, unclamped, as a real
    y = float(hm.floor(x))


@hawk.kernel
def truncated(x: hawk.Scalar, t: hawk.Table["k":KNOTS], y: hawk.Mutable[hawk.Scalar]):
    # the same address through int(): a step, whose gradient hawk.diff refuses
    u = x * SCALE
    j = hm.minimum(hm.maximum(int(u), 0), KNOTS - 2)
    y = t.at(k=j) * (u - j)


@hawk.kernel
def quarters(x: hawk.Scalar, t: hawk.Table["k":4], y: hawk.Mutable[hawk.Scalar]):
    # lane % 12 is in 0 .. 11, so its // 3 is in 0 .. 3: the read is proved in range
    y = x * t.at(k=(hm.sample_index() % 12) // 3)


@hawk.kernel
def unclamped(x: hawk.Scalar, t: hawk.Table["k":4], y: hawk.Mutable[hawk.Scalar]):
    # an unclamped floor address, each index checked as the kernel runs
    j = hm.floor(x)
    y = t.at(k=j) * x
