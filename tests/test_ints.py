"""int64 semantics on the host: values wrap two's complement (no warning, no unbounded
Python int), ``int ** int`` is exact, ``int()`` of a real that is no int64 raises, and
``int_overflow="check"`` reports the first overflow; the device's kernels compile here and
run in tests/test_ints_gpu.py."""

from __future__ import annotations

import re
import warnings
from typing import get_args

import numpy as np
import pytest

import eagle.plan
import hawk
from eagle.cuda.module import compile_cuda
from hawk.emit import checks, cuda, policy
from hawk.errors import HawkError, HawkOverflowError, HawkValueError
from tests import _int_kernels as k
from tests._int_reference import (
    OUTPUTS,
    edges_expected,
    edges_inputs,
    picks_expected,
    widths_expected,
    widths_inputs,
    wrap,
)

KERNELS = [value for value in vars(k).values() if isinstance(value, hawk.Kernel)]


def _run(kernel: hawk.Kernel, int_overflow: str = "wrap", **planes: object) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning escapes
        eagle.plan.auto(kernel, int_overflow=int_overflow).run(**planes)


def test_int_arithmetic_matches_python_with_explicit_wrapping(rng) -> None:
    inputs = edges_inputs(rng, 400)
    expected = edges_expected(inputs)
    out = {name: np.full(400, np.nan) for name in expected}
    _run(k.edges, **inputs, **out)
    for name, values in expected.items():
        np.testing.assert_array_equal(out[name], values, err_msg=name)


def test_a_lane_times_a_large_constant_wraps() -> None:
    y = np.full(4, np.nan)
    _run(k.lane_times, y=y)
    assert [int(v) for v in y] == [wrap(lane * 2**62) for lane in range(4)]
    assert y[2] == -(2.0**63)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_int_power_is_exact_modulo_2_64(dtype: type) -> None:
    y = np.full(80, np.nan, dtype)
    _run(k.power_mod, y=y)
    expected = [wrap(3**lane) % 1000 for lane in range(80)]
    assert [int(v) for v in y] == expected
    assert expected[35] == 3**35 % 1000  # exact where 3**lane fits int64


@pytest.mark.parametrize("kernel", [k.reciprocal, k.reciprocal_pow])
def test_an_int_to_a_negative_constant_power_is_a_real(kernel) -> None:
    y = np.full(5, np.nan)
    _run(kernel, y=y)
    np.testing.assert_array_equal(y, 1.0 / np.arange(1.0, 6.0))


def test_a_negative_int_exponent_raises_where_a_lane_takes_it() -> None:
    y = np.full(3, np.nan)
    _run(k.power_of, x=np.array([3.0, -200.0, 62.0]), y=y)  # -200: the other side
    np.testing.assert_array_equal(y, [8.0, 0.0, 2.0**62])
    message = "negative exponent -2 of an int ** at lane 1, in 2 ** e"
    with pytest.raises(HawkValueError, match=re.escape(message)):
        _run(k.power_of, x=np.array([3.0, -2.0]), y=np.zeros(2))


#: the reals just outside int64: 2**63, and the double next below -2**63
_BEYOND_INT64 = [2.0**63, float(np.nextafter(-(2.0**63), -np.inf))]


@pytest.mark.parametrize("backend", [None, "reference"])
@pytest.mark.parametrize(
    ("value", "kind"),
    [(np.nan, HawkValueError), (np.inf, HawkOverflowError), (-1e30, HawkOverflowError)]
    + [(value, HawkOverflowError) for value in _BEYOND_INT64],
)
def test_float_of_int_of_a_real_that_is_no_int64_raises(
    value: float, kind: type, backend: str | None
) -> None:
    y = np.zeros(3)
    with pytest.raises(kind, match=re.escape(f"int() of {value!r} at lane 2, in int(x)")):
        eagle.plan.auto(k.round_trip, backend=backend).run(x=np.array([1.5, -2.5, value]), y=y)
    assert not y.any()  # nothing half-written
    # int64's own edges: -2**63 exactly, and the greatest double below 2**63
    edges = [1.5, -(2.0**63), float(np.nextafter(2.0**63, 0.0))]
    eagle.plan.auto(k.round_trip, backend=backend).run(x=np.array(edges), y=y)
    np.testing.assert_array_equal(y, [1.0, -(2.0**63), 2.0**63 - 1024])


def test_check_mode_raises_naming_the_expression_and_the_first_lane() -> None:
    x = np.array([0.0, 1.0, 2.0, 3.0])
    y = np.full(4, np.nan)
    _run(k.scaled, x=x, y=y)  # wraps by default
    expected = [float(wrap(int(v) * 2**62 + i)) for i, v in enumerate(x)]
    np.testing.assert_array_equal(y[1:], expected[1:])
    message = "int64 overflow at lane 2, in int(x) * 4611686018427387904 (it wraps to "
    with pytest.raises(HawkOverflowError, match=re.escape(message)):
        _run(k.scaled, "check", x=x, y=y)
    x[2] = -2.0  # -2**63 fits: lane 3 is the first to overflow
    with policy.using(int_overflow="check"), pytest.raises(HawkOverflowError, match="lane 3"):
        eagle.plan.auto(k.scaled).run(x=x, y=y)


def test_check_mode_checks_uniform_values_too() -> None:
    out = {f"{name}_{part}": np.zeros(1) for name in OUTPUTS for part in ("hi", "lo")}
    inputs = {"xa": np.ones(1), "xb": np.zeros(1), "xc": np.full(1, 2.0), "xe": np.ones(1)}
    with pytest.raises(HawkOverflowError, match="int64 overflow at lane 0, in acc"):
        _run(k.edges, "check", **inputs, **out)


def test_the_int_overflow_option_is_a_checked_vocabulary() -> None:
    assert policy.INT_OVERFLOWS == get_args(checks.IntOverflow) == ("wrap", "check")
    with pytest.raises(ValueError, match="int_overflow must be 'wrap' or 'check', not 'trap'"):
        eagle.plan.auto(k.scaled, int_overflow="trap")  # type: ignore[arg-type]
    plan = eagle.plan.auto(k.scaled, int_overflow="check")
    assert "int_overflow='check'" in repr(plan)
    assert "_checked(" in plan.source("host", "float64")
    assert "hawk_checked_mul(" in plan.source("device", "float64")


def test_an_operation_proved_within_int64_is_written_plainly() -> None:
    source = cuda.emit(k.power_mod.ir, {"y": "float32"}).source
    assert "hawk_ipow(3LL, v0_lane)" in source and "hawk_wrap" not in source
    lanes = cuda.emit(k.lane_times.ir, {"y": "float32"}).source
    assert "hawk_wrap_mul(" in lanes


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda kernel: kernel.name)
@pytest.mark.parametrize("int_overflow", ["wrap", "check"])
@pytest.mark.parametrize("narrow", [False, True], ids=["wide", "narrow"])
def test_every_int_kernel_compiles_for_the_device(
    kernel: hawk.Kernel, int_overflow: str, narrow: bool
) -> None:
    dtypes = {p.name: "float64" for p in kernel.planes}
    source = cuda.emit(kernel.ir, dtypes, int_overflow=int_overflow, narrow=narrow)  # type: ignore[arg-type]
    compile_cuda(source.source, name=source.name, arch="sm_90")


@pytest.mark.parametrize("narrow", [False, True])
def test_the_least_int_of_each_width_is_written_as_c_reads_it(narrow: bool) -> None:
    """-2**63 and -2**31 are written as one more, minus 1 (``-9223372036854775808LL`` is
    the negation of a literal C takes as unsigned); the kernel compiles, and the host
    gives Python's values."""
    dtypes = {p.name: "float64" for p in k.least.ir.planes}
    source = cuda.emit(k.least.ir, dtypes, narrow=narrow).source
    assert "(-9223372036854775807LL - 1LL)" in source
    assert "-9223372036854775808LL" not in source and "-2147483648)" not in source
    assert ("(-2147483647 - 1)" in source) == narrow  # an int's least, in 32 bits
    assert len(compile_cuda(source, name="hawk_least", arch="sm_90")) > 0
    lanes = np.arange(6)
    y, z = np.full(6, np.nan), np.full(6, np.nan)
    eagle.plan.auto(k.least).run(x=lanes + 1.0, y=y, z=z)
    assert y.tolist() == (lanes + 1.0).tolist()
    assert z.tolist() == [float(-(2**31) * (i % 2) + 2**31 + (i - 2**31)) for i in lanes]


def test_ints_that_fit_32_bits_match_python_on_the_host(rng) -> None:
    inputs = widths_inputs(rng, 3000)
    expected = widths_expected(inputs["x"], inputs["t"].reshape(5, 7))
    out = {name: np.full(3000, np.nan) for name in expected}
    _run(k.widths, **inputs, **out)
    for name, values in expected.items():
        np.testing.assert_array_equal(out[name], values, err_msg=name)


def test_an_int_select_in_32_bits_with_a_checked_read_on_a_side(rng) -> None:
    """The select is an ``if`` block (a lane checks only the read of the side it takes),
    whose value is declared ``int``: it fits 32 bits."""
    x, t = rng.uniform(0.0, 1.0, 500), rng.standard_normal(4)
    y = np.full(500, np.nan)
    _run(k.picks, x=x, t=t, y=y)
    np.testing.assert_array_equal(y, picks_expected(x, t))
    source = cuda.emit(k.picks.ir, {"x": "float64", "t": "float64", "y": "float64"}, narrow=True)
    assert re.search(r"\n\s*int sel\d+;\n", source.source), source.source
    assert "hawk_clamp(" in source.source


def test_below_2_to_the_31_lanes_the_ints_that_fit_are_written_in_32_bits() -> None:
    """``widths`` emitted ``narrow``: the lane's ints, the clamp of a floor and the loop's
    index are ``int`` and computed with the 32-bit helpers; the floor, ``far`` (beyond 32
    bits) and what mixes them stay ``long long``, their 32-bit operands widened. Emitted
    for any lane count, every int is ``long long``: the lane's are, and a 32-bit index
    mixed into a 64-bit address costs more than it saves."""
    dtypes = {p.name: "float64" for p in k.widths.ir.planes}
    narrow = cuda.emit(k.widths.ir, dtypes, narrow=True).source
    body = narrow[narrow.index('extern "C"') :]
    for declared in (
        r"const int v\d+_lane = \(\(int\)lane\);",
        r"const int v\d+_d = \(hawk_mod\(v\d+_lane, 1000\) - 500\);",
        r"const long long v\d+_j = hawk_to_int\(floor\(",
        r"const int v\d+_jc = \(int\)\(hawk_minimum\(hawk_maximum\(v\d+_j, \(-2LL\)\), 6LL\)\);",
        r"const long long v\d+_far = "
        r"\(\(\(\(long long\)v\d+_lane\) \* 3000000LL\) \+ 2147483000LL\);",
        r"for \(int v\d+_k = \(-3\); v\d+_k < 9; v\d+_k \+= 2\)",
        r"p_t\[v\d+_row \* 7 \+ hawk_mod\(v\d+_lane, 7\)\]",
        r"hawk_wrap_sub\(v\d+_j, \(\(long long\)v\d+_jc\)\)",
    ):
        assert re.search(declared, body), (declared, body)
    assert "$inline" not in narrow and "int hawk_floordiv(int a, int b)" in narrow
    wide = cuda.emit(k.widths.ir, dtypes).source  # for any lane count: every int 64-bit
    assert "const int" not in wide and "for (int" not in wide and "int hawk_" not in wide


@pytest.mark.parametrize("backend", [None, "reference"])
def test_an_index_whose_arithmetic_wraps_keeps_its_check(backend: str | None) -> None:
    t = np.arange(5.0) * 10.0 + 1.0
    y = np.full(3, np.nan)
    with pytest.raises(IndexError, match="index -2 is out of range at lane 2"):
        eagle.plan.auto(k.wrapped_index, backend=backend).run(x=np.array([0.0, 1.0, 2.0]), t=t, y=y)
    assert np.isnan(y).all()  # a host run that raises leaves the planes as they were
    eagle.plan.auto(k.wrapped_index, backend=backend).run(x=np.array([0.0, 1.0, 4.0]), t=t, y=y)
    assert list(y) == [1.0, 11.0, 1.0]  # lane 2: 4 * 2**62 wraps to 0
    h = np.zeros(5)
    with pytest.raises(IndexError, match="index -1 is out of range at lane 1"):
        eagle.plan.auto(k.wrapped_add, backend=backend).run(x=np.array([1.0, 3.0]), h=h)
    assert not h.any()
    with pytest.raises(ZeroDivisionError, match="at lane 1"):
        eagle.plan.auto(k.wrapped_divisor, backend=backend).run(
            x=np.array([1.0, 4.0]), y=np.zeros(2)
        )


@pytest.mark.parametrize("backend", [None, "reference"])
def test_a_lane_index_that_wraps_into_range_runs(backend: str | None) -> None:
    y = np.full(4, np.nan)
    eagle.plan.auto(k.wrapped_lane_index, backend=backend).run(t=np.arange(5.0), y=y)
    assert list(y) == [1.0] * 4


@pytest.mark.parametrize("narrow", [False, True])
def test_the_device_checks_an_index_or_divisor_whose_arithmetic_wraps(narrow: bool) -> None:
    dtypes = {"x": np.dtype(np.float64), "t": np.dtype(np.float64), "y": np.dtype(np.float64)}
    read = cuda.emit(k.wrapped_index.ir, dtypes, narrow=narrow).source
    assert re.search(r"hawk_in\(", read), read
    dtypes = {"x": np.dtype(np.float64), "h": np.dtype(np.float64)}
    add = cuda.emit(k.wrapped_add.ir, dtypes, narrow=narrow).source
    assert re.search(r"if \(hawk_in\(.*\) atomicAdd", add), add
    dtypes = {"x": np.dtype(np.float64), "y": np.dtype(np.float64)}
    divide = cuda.emit(k.wrapped_divisor.ir, dtypes, narrow=narrow).source
    assert divide.count("hawk_divisor(") >= 2, divide  # the // and the %


def test_constants_alone_fold_in_float64_and_enter_a_float32_kernel_rounded_once() -> None:
    x = np.full(3, 2.0**40, np.float32)
    y, z = np.full(3, np.nan, np.float32), np.full(3, np.nan, np.float32)
    _run(k.folded, x=x, y=y, z=z)
    np.testing.assert_array_equal(y, np.float32(1.0))
    np.testing.assert_array_equal(z, np.float32(0.0))


def test_the_host_overflow_check_refuses_an_op_it_has_no_rule_for() -> None:
    """Each checked int op has its own overflow rule; one without a rule is refused, never
    checked with another op's rule."""
    from hawk.emit import _host_runtime

    site = None  # (never reached: the rule is looked up first)
    lanes = np.array([1, 2], np.int64)
    for operands in ((lanes, lanes), (5, 3)):  # lanes' values, and a uniform value's
        with pytest.raises(HawkError, match=r"no int64 overflow rule for '%'; checked ops: \+"):
            _host_runtime._checked("%", *operands, site, None, 2)
