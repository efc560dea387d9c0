"""Kernels of int64 arithmetic at its edges (wrapping, ``**``, ``int()``), shared by the
host and device tests. An int result leaves the kernel as two exact reals, its
floor-quotient and remainder by 2**32 (float64 planes hold both exactly)."""

# ruff: noqa: F841 - kernels assign to their output planes

import hawk
from hawk import math as hm

#: 2**32: a result ``v`` is stored as ``v // WORD`` and ``v % WORD``
WORD = 4294967296


@hawk.kernel
def edges(
    xa: hawk.Scalar,
    xb: hawk.Scalar,
    xc: hawk.Scalar,
    xe: hawk.Scalar,
    mul_hi: hawk.Mutable[hawk.Scalar],
    mul_lo: hawk.Mutable[hawk.Scalar],
    sum_hi: hawk.Mutable[hawk.Scalar],
    sum_lo: hawk.Mutable[hawk.Scalar],
    neg_hi: hawk.Mutable[hawk.Scalar],
    neg_lo: hawk.Mutable[hawk.Scalar],
    div_hi: hawk.Mutable[hawk.Scalar],
    div_lo: hawk.Mutable[hawk.Scalar],
    pow_hi: hawk.Mutable[hawk.Scalar],
    pow_lo: hawk.Mutable[hawk.Scalar],
    carry_hi: hawk.Mutable[hawk.Scalar],
    carry_lo: hawk.Mutable[hawk.Scalar],
):
    a = int(xa) * 1048576 + int(xb)
    b = int(xc)
    e = int(xe)
    product = a * b
    mul_hi = float(product // WORD)
    mul_lo = float(product % WORD)
    total = a + b * 1099511627776 - 9223372036854775807
    sum_hi = float(total // WORD)
    sum_lo = float(total % WORD)
    negated = -(a - b)
    neg_hi = float(negated // WORD)
    neg_lo = float(negated % WORD)
    quotient = a // b
    div_hi = float(quotient // WORD)
    div_lo = float(quotient % WORD)
    power = b**e
    pow_hi = float(power // WORD)
    pow_lo = float(power % WORD)
    acc = 1
    for i in range(70):
        acc = acc * 3 + i  # a uniform value: a Python int on the host
    mixed = acc + a
    carry_hi = float(mixed // WORD)
    carry_lo = float(mixed % WORD)


@hawk.kernel
def lane_times(y: hawk.Mutable[hawk.Scalar]):
    lane = hm.sample_index()
    y = float(lane * 4611686018427387904)


@hawk.kernel
def power_mod(y: hawk.Mutable[hawk.Scalar]):
    lane = hm.sample_index()
    y = float(3**lane % 1000)


@hawk.kernel
def reciprocal(y: hawk.Mutable[hawk.Scalar]):
    lane = hm.sample_index()
    y = (lane + 1) ** -1


@hawk.kernel
def power_of(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    e = int(x)
    y = float(2**e) if x > -100.0 else 0.0


@hawk.kernel
def round_trip(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = float(int(x))


@hawk.kernel
def scaled(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    lane = hm.sample_index()
    y = float(int(x) * 4611686018427387904 + lane) if x != 0.0 else -1.0
