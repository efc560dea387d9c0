# ruff: noqa: F821, F841, UP037
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["i":M], which pyflakes reads as forward references (F821, UP037).
"""Kernels of the emitters' fast paths: vectorised lane loops and warp-summed table adds."""

from __future__ import annotations

import hawk
from hawk import math as hm


@hawk.kernel
def axpy(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + y


@hawk.kernel
def two_out(
    x: hawk.Scalar, z: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], w: hawk.Mutable[hawk.Scalar]
):
    y = x * z + 1.0
    w = x - z


@hawk.kernel
def by_sample(
    t: hawk.Table["row":3, "sample":40],
    x: hawk.Scalar,
    g: hawk.Mutable[hawk.Table["row":3, "sample":40]],
):
    sample, _unit = hm.split_index(64)
    for r in range(3):
        g.add(row=r, sample=sample, value=x * t.at(row=r, sample=sample))


@hawk.kernel
def by_odd_sample(x: hawk.Scalar, g: hawk.Mutable[hawk.Table["sample":100]]):
    sample, _unit = hm.split_index(48)
    g.add(sample=sample, value=x)


@hawk.kernel
def contract32(
    w: hawk.Table["row":4, "unit":32],
    f: hawk.Table["row":4, "sample":6],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(32)
    acc = 0.0
    for r in range(4):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = acc
