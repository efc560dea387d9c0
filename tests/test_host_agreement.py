# ruff: noqa: F821, F841, UP037
# Kernels assign to their output planes (F841) and name table axes with string slices
# (F821, UP037: pyflakes reads Table["row":R] as forward references).
"""The numpy program and the reference backend give the same, right values where a
differential hunt of random kernels found them apart: each kernel runs on both and is
checked against the value Python's own arithmetic gives."""

from __future__ import annotations

import math

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
from eagle.cuda.module import compile_cuda
from hawk import math as hm
from hawk.emit import cuda
from hawk.errors import HawkError, HawkOverflowError
from tests._int_reference import wrap

BACKENDS = [None, "reference"]
K = 2**63 - 1


@hawk.kernel
def uniform_carry(
    x: hawk.Scalar, f: hawk.Table["row":40, "sample":3], y: hawk.Mutable[hawk.Scalar]
):
    sample, _unit = hm.split_index(4)
    acc = x
    total = 0.0
    for r in range(40):
        acc = acc + f.at(row=r, sample=sample)
        total = total - float(r)  # uniform: the same on every lane
    y = acc + total


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("lanes", [4, 12, 10])  # multiples of 4 run on factored lanes
def test_a_uniform_carry_of_a_factored_loop_is_one_lanes_sum(backend, lanes, rng) -> None:
    f, x = rng.standard_normal((40, 3)), rng.standard_normal(lanes)
    y = np.full(lanes, np.nan)
    eagle.plan.auto(uniform_carry, backend=backend).run(x=x, f=f, y=y)
    sample = np.arange(lanes) // 4
    np.testing.assert_allclose(y, x + f.sum(0)[sample] - 780.0, rtol=1e-12)


@hawk.kernel
def masked_add(a: hawk.Param, x: hawk.Scalar, h: hawk.Mutable[hawk.Table["b":2]]):
    if x > 0.0:
        h.add(b=0, value=a)


@hawk.kernel
def far_add(x: hawk.Scalar, h: hawk.Mutable[hawk.Table["b":2]]):
    h.add(b=5, value=x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("a", [np.inf, np.nan, 2.5])
def test_an_add_no_lane_makes_adds_nothing(backend, a) -> None:
    h = np.array([1.0, 2.0])
    plan = eagle.plan.auto(masked_add, backend=backend)
    plan.run(a=a, x=np.array([-1.0, -2.0]), h=h)  # no lane takes the branch
    plan.run(a=a, x=np.zeros(0), h=h)  # no lane at all
    assert list(h) == [1.0, 2.0]
    eagle.plan.auto(far_add, backend=backend).run(x=np.zeros(0), h=h)  # its index unmade
    assert list(h) == [1.0, 2.0]
    plan.run(a=a, x=np.array([1.0, -1.0, 3.0]), h=h)
    np.testing.assert_array_equal(h, [1.0 + 2 * a, 2.0])


@hawk.kernel
def int_sums(
    a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], z: hawk.Mutable[hawk.Scalar]
):
    s = hm.sample_index()
    t = int(a)
    for _ in range(4):
        s -= 9223372036854775807
        t += 9223372036854775807
    y = float(s % 1000) + x
    z = float(t)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_int_carry_summed_by_a_loop_wraps_each_add(backend) -> None:
    y, z = np.full(3, np.nan), np.full(3, np.nan)
    eagle.plan.auto(int_sums, backend=backend).run(a=5.0, x=np.zeros(3), y=y, z=z)
    assert list(y) == [float(wrap(lane - 4 * K) % 1000) for lane in range(3)]
    assert list(z) == [float(wrap(5 + 4 * K))] * 3


@hawk.kernel
def int_climb(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    s = hm.sample_index() + 4611686018427387904
    for _ in range(2):
        s += 3458764513820540928  # the second add leaves int64
    y = float(s)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_checked_plan_checks_each_add_of_a_loops_int_carry(backend) -> None:
    y = np.full(2, np.nan)
    plan = eagle.plan.auto(int_climb, backend=backend, int_overflow="check")
    with pytest.raises(HawkOverflowError, match="int64 overflow at lane 0, in s.1 \\+ 3458"):
        plan.run(x=np.zeros(2), y=y)
    assert np.isnan(y).all()


@hawk.kernel
def int_to_real(
    a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], z: hawk.Mutable[hawk.Scalar]
):
    i = int(a) * 68719476736 + 68719476737  # 2**60 + 2**36 + 1 for a = 2**24: uniform
    y = float(i) - 1152921504606846976.0
    j = int(x) * 68719476736 + 68719476737  # the same value on each lane
    z = float(j) - 1152921504606846976.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_of_a_uniform_int_rounds_once_as_a_varying_one_does(backend) -> None:
    y, z = np.zeros(2, np.float32), np.zeros(2, np.float32)
    x = np.full(2, 2**24, np.float32)
    eagle.plan.auto(int_to_real, backend=backend).run(a=np.float32(2**24), x=x, y=y, z=z)
    once = np.float32(np.int64(2**60 + 2**36 + 1)) - np.float32(2**60)  # 2**37
    assert list(y) == list(z) == [once, once]


@hawk.kernel
def untaken_read(
    a: hawk.Param, x: hawk.Scalar, t: hawk.Table["r":3, "c":4], y: hawk.Mutable[hawk.Scalar]
):
    r = int(a)
    y = t.at(r=r, c=0) if x > 0.0 else -1.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_read_no_lane_takes_at_an_index_beyond_int64_offsets_is_not_made(backend) -> None:
    y, t = np.full(2, np.nan), np.arange(12.0)
    plan = eagle.plan.auto(untaken_read, backend=backend)
    plan.run(a=4e18, x=np.array([-1.0, -2.0]), t=t, y=y)  # 4e18 * 4 leaves int64
    assert list(y) == [-1.0, -1.0]
    with pytest.raises(IndexError, match="index 4000000000000000000 is out of range at lane 1"):
        plan.run(a=4e18, x=np.array([-1.0, 2.0]), t=t, y=y)


@hawk.kernel
def far_untaken(x: hawk.Scalar, t: hawk.Table["r":3, "c":4], y: hawk.Mutable[hawk.Scalar]):
    y = t.at(r=-(2**62), c=hm.sample_index() % 4) if x > 0.0 else -1.0


@hawk.kernel
def far_read(x: hawk.Scalar, t: hawk.Table["r":3, "c":4], y: hawk.Mutable[hawk.Scalar]):
    y = t.at(r=-(2**62), c=hm.sample_index() % 4)


@hawk.kernel
def histogram(x: hawk.Scalar, h: hawk.Mutable[hawk.Table["b":64]]):
    h.add(b=hm.sample_index() % 64, value=x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_index_far_out_of_range_with_a_varying_one_only_raises_where_used(backend) -> None:
    t, y = np.arange(12.0), np.full(4, np.nan)
    eagle.plan.auto(far_untaken, backend=backend).run(x=-np.ones(4), t=t, y=y)
    assert list(y) == [-1.0] * 4
    eagle.plan.auto(far_read, backend=backend).run(x=np.zeros(0), t=t, y=np.zeros(0))
    with pytest.raises(IndexError, match="index -4611686018427387904 is out of range"):
        eagle.plan.auto(far_untaken, backend=backend).run(x=np.ones(4), t=t, y=y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_of_no_lanes_adds_nothing_whatever_the_address_period(backend) -> None:
    h = np.arange(64.0)
    eagle.plan.auto(histogram, backend=backend).run(x=np.zeros(0), h=h)
    np.testing.assert_array_equal(h, np.arange(64.0))


@hawk.kernel
def huge_power(
    a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], z: hawk.Mutable[hawk.Scalar]
):
    v = hm.sample_index() + 3
    y = float(v ** (v * 1099511627776)) + x  # exponents near 2**41: no exact power is made
    u = int(a)
    z = float(u ** (u * 1099511627776))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_int_power_of_a_huge_exponent_wraps_without_the_exact_power(backend) -> None:
    y, z = np.full(3, np.nan), np.full(3, np.nan)
    eagle.plan.auto(huge_power, backend=backend).run(a=3.0, x=np.zeros(3), y=y, z=z)
    powers_ = [float(wrap(pow(v, v * 2**40, 2**64))) for v in (3, 4, 5)]
    assert list(y) == powers_ and list(z) == [powers_[0]] * 3
    with pytest.raises(HawkOverflowError, match="at lane 0"):
        eagle.plan.auto(huge_power, backend=backend, int_overflow="check").run(
            a=3.0, x=np.zeros(3), y=y, z=z
        )


@hawk.kernel
def chosen_term(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    acc = x
    for i in range(3):
        acc = acc + (a if a > 0.0 else x * float(i))  # a number at run time where a > 0
    y = acc


@hawk.kernel
def chosen_address(
    a: hawk.Param, x: hawk.Scalar, t: hawk.Table["r":3], h: hawk.Mutable[hawk.Table["b":2]]
):
    s, _u = hm.split_index(16)
    h.add(b=(0 if a > 0.0 else s) % 2, value=x * t.at(r=(2 if a > 0.0 else s) % 3))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("a", [1.0, -1.0])
def test_a_lane_value_that_a_uniform_condition_makes_one_number(backend, a, rng) -> None:
    # the side a uniform condition takes may be the same on every lane and iteration:
    # it still counts once per iteration and adds once per lane, forward and adjoint
    x = rng.standard_normal(32)
    y = np.full(32, np.nan)
    eagle.plan.auto(chosen_term, backend=backend).run(a=a, x=x, y=y)
    np.testing.assert_allclose(y, x + (3 * a if a > 0 else 3 * x), rtol=1e-12)
    t, h = rng.standard_normal(3), np.zeros(2)
    plan = eagle.plan.auto(chosen_address, backend=backend)
    plan.run(a=a, x=x, t=t, h=h)
    s = np.arange(32) // 16
    b, r = (np.zeros(32, int), np.full(32, 2)) if a > 0 else (s % 2, s % 3)
    np.testing.assert_allclose(h, np.bincount(b, x * t[r], minlength=2), rtol=1e-12)
    h_bar, t_bar, x_bar = rng.standard_normal(2), np.zeros(3), np.zeros(32)
    eagle.diff.reverse(plan).run(a=a, x=x, t=t, h_bar=h_bar, t_bar=t_bar, x_bar=x_bar)
    np.testing.assert_allclose(t_bar, np.bincount(r, x * h_bar[b], minlength=3), rtol=1e-12)
    np.testing.assert_allclose(x_bar, t[r] * h_bar[b], rtol=1e-12)


@hawk.kernel
def chosen_condition(x: hawk.Scalar, a: hawk.Param, h: hawk.Mutable[hawk.Table["b":2]]):
    if x > 1.5:  # (a mask of lanes)
        if (1 if a != 0.0 else hm.sample_index()) == 2:  # one bool at run time: False
            h.add(b=1, value=x)
        else:
            h.add(b=0, value=x)
    if (1 if a != 0.0 else hm.sample_index()) != -1:  # True
        h.add(b=1, value=x)
    else:
        h.add(b=0, value=x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_condition_that_is_one_bool_at_run_time_takes_one_side(backend) -> None:
    h = np.zeros(2)
    x = np.array([1.0, 2.0, 4.0])
    eagle.plan.auto(chosen_condition, backend=backend).run(x=x, a=0.5, h=h)
    assert list(h) == [6.0, 7.0]  # (~True is -2 in Python, a true mask)


@hawk.kernel
def powers(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = float(hm.sample_index() ** 64)


@hawk.kernel
def magnitude(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = float(hm.abs(hm.floor(x)))


@hawk.kernel
def uniform_magnitude(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = float(hm.abs(hm.floor(a))) + x


@pytest.mark.parametrize("backend", BACKENDS)
def test_checked_int_powers_and_abs_raise_where_they_leave_int64(backend) -> None:
    y = np.full(3, np.nan)
    with pytest.raises(HawkOverflowError, match=r"at lane 2, in lane \*\* 64 "):
        eagle.plan.auto(powers, backend=backend, int_overflow="check").run(x=np.zeros(3), y=y)
    eagle.plan.auto(powers, backend=backend).run(x=np.zeros(3), y=y)
    assert list(y) == [0.0, 1.0, 0.0]  # wrapped: 2**64 is 0
    x = np.array([3.5, -(2.0**63)])
    with pytest.raises(HawkOverflowError, match="at lane 1, in abs\\(floor\\(x\\)\\)"):
        eagle.plan.auto(magnitude, backend=backend, int_overflow="check").run(x=x, y=y[:2])
    with pytest.raises(HawkOverflowError, match="at lane 0, in abs\\(floor\\(a\\)\\)"):
        eagle.plan.auto(uniform_magnitude, backend=backend, int_overflow="check").run(
            a=-(2.0**63), x=np.zeros(2), y=y[:2]
        )
    eagle.plan.auto(magnitude, backend=backend).run(x=x, y=y[:2])
    assert list(y[:2]) == [3.0, -(2.0**63)]  # wrapped: abs(-2**63) is -2**63


def _decorated(path, body: str) -> hawk.Kernel:
    """The kernel ``k(x, y)`` whose body is ``body``, read from a file at ``path``."""
    path.write_text(
        "import hawk\n\n@hawk.kernel\n"
        f"def k(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):\n    {body}\n"
    )
    namespace: dict[str, object] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace["k"]  # type: ignore[return-value]


def test_a_constant_int_too_large_for_a_float_is_refused_by_name(tmp_path) -> None:
    with pytest.raises(HawkError, match=r"is about 2\*\*1922, which does not fit in 64 bits"):
        _decorated(tmp_path / "huge.py", "y = float((2**31) ** 62)")


def test_a_constant_int_power_of_64_bits_or_more_is_refused_without_working_it_out(
    tmp_path,
) -> None:
    with pytest.raises(HawkError, match=r"3 \*\* 2 \*\* 40 is at least 2\*\*64 in size"):
        _decorated(tmp_path / "power.py", "y = x + float(3 ** (2**40))")


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_of_a_constant_infinity_raises_as_the_kernel_runs(tmp_path, backend) -> None:
    kernel = _decorated(tmp_path / "infinite.py", "y = float(int(1e300 * 1e300)) + x")
    with pytest.raises(HawkOverflowError, match="int\\(\\) of inf at lane 0"):
        eagle.plan.auto(kernel, backend=backend).run(x=np.zeros(2), y=np.zeros(2))


@pytest.mark.parametrize(
    "kernel", [uniform_carry, masked_add, int_sums, int_climb, int_to_real, untaken_read,
               far_untaken, histogram, huge_power, chosen_term, chosen_address,
               chosen_condition, powers,
               magnitude, uniform_magnitude],
    ids=lambda kernel: kernel.name
)  # fmt: skip
@pytest.mark.parametrize("int_overflow", ["wrap", "check"])
def test_each_kernel_compiles_for_the_device(kernel: hawk.Kernel, int_overflow: str) -> None:
    # their device runs are in tests/test_host_agreement_gpu.py
    dtypes = {p.name: "float32" for p in kernel.planes}
    source = cuda.emit(kernel.ir, dtypes, int_overflow=int_overflow)  # type: ignore[arg-type]
    compile_cuda(source.source, name=source.name, arch="sm_90")


@hawk.kernel
def half_powers(
    x: hawk.Scalar,
    b: hawk.Param,
    y: hawk.Mutable[hawk.Scalar],
    z: hawk.Mutable[hawk.Scalar],
    w: hawk.Mutable[hawk.Scalar],
):
    y = x**0.5
    z = hm.pow(x, b)
    w = (-0.0) ** b


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_a_power_of_one_half_is_pow_not_sqrt_at_minus_zero_and_minus_infinity(backend, dtype):
    """numpy computes an exponent of 0.5 as sqrt (-0 and NaN there); C's pow, which the
    device runs, and Python give +0 and +inf, whether the exponent is a constant or a Param."""
    x = np.array([-0.0, -np.inf, 0.0, np.inf, 4.0, -4.0], dtype)
    want = [math.pow(v, 0.5) if v >= 0 or v == -math.inf else math.nan for v in x.tolist()]
    for b in (0.5, np.array([0.5])):
        y, z, w = (np.full(x.size, 7.0, dtype) for _ in range(3))
        with np.errstate(invalid="ignore"):
            eagle.plan.auto(half_powers, backend=backend).run(x=x, b=b, y=y, z=z, w=w)
        for got in (y, z):
            np.testing.assert_array_equal(got, np.asarray(want, dtype))
            assert not np.signbit(got[:3]).any()  # +0, +inf, +0
        assert (w == 0).all() and not np.signbit(w).any()
