"""Kernels of int64 arithmetic at its edges (wrapping, ``**``, ``int()``), shared by the
host and device tests. An int result leaves the kernel as two exact reals, its
floor-quotient and remainder by 2**32 (float64 planes hold both exactly)."""

# ruff: noqa: F821, F841 - kernels assign to their output planes and name table axes with
# string slices, Table["row":R], which pyflakes reads as forward references

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
def reciprocal_pow(y: hawk.Mutable[hawk.Scalar]):
    lane = hm.sample_index()
    y = hm.pow(lane + 1, -1) * (hm.pow(2, -1) * 2.0)  # hm.pow(a, b) is a ** b


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


@hawk.kernel
def widths(
    x: hawk.Scalar,
    t: hawk.Table["row":5, "col":7],
    quot: hawk.Mutable[hawk.Scalar],
    cell: hawk.Mutable[hawk.Scalar],
    mixed: hawk.Mutable[hawk.Scalar],
    looped: hawk.Mutable[hawk.Scalar],
):
    # ints that fit 32 bits below 2**31 lanes (the emitter then writes them as int) next
    # to ones that do not: floor division and modulo of negatives, a clamp of a floor that
    # may be any int64, a table read at proved indices, 32- and 64-bit operands mixed, and
    # an int carried through a loop whose index and divisors fit
    lane = hm.sample_index()
    d = lane % 1000 - 500
    quot = float(d // 7 * 1000 + d % 7)
    j = hm.floor(x)
    jc = hm.minimum(hm.maximum(j, -2), 6)
    row = hm.minimum(hm.maximum(jc, 0), 4)
    cell = float(jc * 1000 + j % 13) + t.at(row=row, col=lane % 7)
    far = lane * 3000000 + 2147483000
    mixed = float(far % 1000003 - d * jc) + float(j - jc)
    acc = 0
    for k in range(-3, 9, 2):
        acc = acc + (k - d) // 3 * k + jc % (k + 4)
    looped = float(acc)


@hawk.kernel
def picks(x: hawk.Scalar, t: hawk.Table, y: hawk.Mutable[hawk.Scalar]):
    # an int select that fits 32 bits, one of whose sides reads a table at a data-dependent
    # index (checked as the kernel runs, so the select becomes an if block)
    lane = hm.sample_index()
    a = lane % 7 - 3
    b = (lane % 5 if t.at(int(x * 3.0)) > 0.0 else -2) if x > 0.5 else a * 3
    y = float(hm.maximum(a, b) * 100 + b)


@hawk.kernel
def wrapped_index(x: hawk.Scalar, t: hawk.Table["k":5], y: hawk.Mutable[hawk.Scalar]):
    # i is 0 .. 4, but i * 2**62 wraps for i >= 2, so the index is 0, 1, -2, -1, 0: the
    # read's check stays (a range proof that ignored the wrap would leave it out)
    i = hm.minimum(hm.maximum(int(x), 0), 4)
    y = t.at(k=i * 4611686018427387904 // 4611686018427387904)


@hawk.kernel
def wrapped_add(x: hawk.Scalar, h: hawk.Mutable[hawk.Table["k":5]]):
    # the add's address wraps as wrapped_index's read
    i = hm.minimum(hm.maximum(int(x), 0), 4)
    h.add(k=i * 4611686018427387904 // 4611686018427387904, value=1.0)


@hawk.kernel
def wrapped_divisor(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    # d is i * 2**62 for i in 1 .. 4: never 0 before the wrap, 0 at i = 4 after it
    i = hm.minimum(hm.maximum(int(x), 1), 4)
    d = i * 4611686018427387904
    y = float(100 // d + 100 % d)


@hawk.kernel
def wrapped_lane_index(t: hawk.Table["k":5], y: hawk.Mutable[hawk.Scalar]):
    # lane * 2**64 wraps to 0, so every lane reads t[1]: checked as the kernel runs, not
    # refused when the plan is bound (a launch check assumes indices that never wrap)
    lane = hm.sample_index()
    y = t.at(k=(lane * 4611686018427387904 * 4 + 2) // 2)


@hawk.kernel
def folded(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], z: hawk.Mutable[hawk.Scalar]):
    # constants alone fold in float64 when decorated (1.0); over a plane of 2**40, float32
    # computes the same difference as 0.0
    y = x * 0.0 + (float(2**40 + 1) - 2.0**40)
    z = (x + 1.0) - x


@hawk.kernel
def least(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], z: hawk.Mutable[hawk.Scalar]):
    # the least int of each width as a constant: C reads -9223372036854775808LL as the
    # negation of an unsigned literal, which made the first comparison false on the device
    lane = hm.sample_index()
    below = lane > (-9223372036854775807 - 1)
    small = hm.minimum(hm.maximum(lane - 2**31, -(2**31)), 0)  # fits 32 bits
    y = x if below else -x
    z = float(small + (-(2**31)) * (lane % 2) + 2**31)
