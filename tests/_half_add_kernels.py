"""Kernels that add into a 16-bit table at one element through every address form: a
constant, a computed index, a lane-derived index a warp shares, one that differs lane by
lane, inside a loop and under a condition. Each adds ``x`` of every lane into element 0
(the lane-dependent forms spread the lanes' values over elements 0..3)."""

# ruff: noqa: F821 - tables name their axes with string slices, Table["k":4]

import hawk
from hawk import math as hm


@hawk.kernel
def constant(x: hawk.Scalar, c: hawk.Mutable[hawk.Table["k":4]]):
    c.add(k=0, value=x)


@hawk.kernel
def computed(x: hawk.Scalar, z: hawk.Scalar, c: hawk.Mutable[hawk.Table["k":4]]):
    c.add(k=int(z), value=x)


@hawk.kernel
def flat(x: hawk.Scalar, z: hawk.Scalar, c: hawk.Mutable[hawk.Table]):
    c.add(int(z), value=x)


@hawk.kernel
def by_block(x: hawk.Scalar, c: hawk.Mutable[hawk.Table["k":4]]):
    lane = hm.sample_index()
    c.add(k=lane // 1048576, value=x)


@hawk.kernel
def by_lane(x: hawk.Scalar, c: hawk.Mutable[hawk.Table["k":4]]):
    lane = hm.sample_index()
    c.add(k=lane % 4, value=x)


@hawk.kernel
def looped(x: hawk.Scalar, c: hawk.Mutable[hawk.Table["k":4]]):
    for i in range(2):
        c.add(k=i * 0, value=0.5 * x)


@hawk.kernel
def guarded(x: hawk.Scalar, z: hawk.Scalar, c: hawk.Mutable[hawk.Table["k":4]]):
    if x > -1e30:
        c.add(k=int(z), value=x)


@hawk.kernel
def wide_store(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    # with a float64 Param the kernel computes in float64; a bfloat16 store then rounds
    # through float32, as the device's does
    y = a * x  # noqa: F841 - an output plane


@hawk.kernel
def wide_add(a: hawk.Param, x: hawk.Scalar, c: hawk.Mutable[hawk.Table["bin":2]]):
    c.add(bin=0, value=a * x)
