"""int64 semantics on the device, against the host and a Python reference with explicit
wrapping: the same wrapped bits, ``int ** int`` exact, ``int()`` of a real that is no int64
and a negative exponent reported through the error record as the host raises them, and
``int_overflow="check"`` naming the same expression."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.plan
from eagle import arrays
from hawk.errors import HawkOverflowError, HawkValueError
from tests import _int_kernels as k
from tests._int_reference import (
    edges_expected,
    edges_inputs,
    picks_expected,
    widths_expected,
    widths_inputs,
)

pytestmark = pytest.mark.gpu


def _device(planes: dict[str, np.ndarray]) -> dict[str, arrays.Array]:
    return {name: arrays.asarray(value, device="cuda:0") for name, value in planes.items()}


def _host_error(kernel, planes, int_overflow="wrap") -> BaseException:
    with pytest.raises(Exception) as caught:
        eagle.plan.auto(kernel, int_overflow=int_overflow).run(**planes)
    return caught.value


def _agree(kernel, inputs: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    """``kernel`` run over ``inputs`` on the device and on the host gives ``expected``, bit
    for bit, in each output."""
    lanes = len(next(iter(expected.values())))
    device = _device({name: np.full(lanes, np.nan) for name in expected})
    eagle.plan.auto(kernel).run(**_device(inputs), **device)
    host = {name: np.full(lanes, np.nan) for name in expected}
    eagle.plan.auto(kernel).run(**inputs, **host)
    for name, values in expected.items():
        np.testing.assert_array_equal(device[name].numpy(), values, err_msg=name)
        np.testing.assert_array_equal(host[name], values, err_msg=name)


def test_the_least_int_constants_of_each_width(rng) -> None:
    """-2**63 and -2**31 written in a kernel: the device compared the first as an unsigned
    2**63 (C's reading of ``-9223372036854775808LL``), so it took the other side."""
    lanes = np.arange(5000)
    x = rng.standard_normal(5000)
    z = (-(2**31) * (lanes % 2) + 2**31 + (lanes - 2**31)).astype(np.float64)
    _agree(k.least, {"x": x}, {"y": x, "z": z})


def test_int_edges_match_the_host_and_python_bit_for_bit(rng) -> None:
    inputs = edges_inputs(rng, 5000)
    _agree(k.edges, inputs, edges_expected(inputs))


def test_ints_written_in_32_bits_match_python_and_the_host(rng) -> None:
    """Below 2**31 lanes the device writes the ints that fit 32 bits as ``int``
    (``tests/test_ints.py`` shows which): every value is still int64's."""
    inputs = widths_inputs(rng, 20_000)
    assert "((int)lane)" in eagle.plan.auto(k.widths).source("device")
    _agree(k.widths, inputs, widths_expected(inputs["x"], inputs["t"].reshape(5, 7)))


def test_an_int_select_in_32_bits_with_a_checked_read_matches_python(rng) -> None:
    x, t = rng.uniform(0.0, 1.0, 5000), rng.standard_normal(4)
    _agree(k.picks, {"x": x, "t": t}, {"y": picks_expected(x, t)})


@pytest.mark.parametrize("kernel", [k.lane_times, k.power_mod])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lane_products_and_powers_wrap_as_on_the_host(kernel, dtype) -> None:
    lanes = 100_000
    host = np.full(lanes, np.nan, dtype)
    eagle.plan.auto(kernel).run(y=host)
    device = arrays.asarray(np.full(lanes, np.nan, dtype), device="cuda:0")
    eagle.plan.auto(kernel).run(y=device)
    np.testing.assert_array_equal(device.numpy(), host)


@pytest.mark.parametrize("value", [np.nan, np.inf, -1e30])
def test_int_of_a_real_that_is_no_int64_is_the_hosts_error(rng, value) -> None:
    x = rng.standard_normal(4096) * 1e6
    x[1234] = value
    expected = _host_error(k.round_trip, {"x": x, "y": np.zeros(4096)})
    assert isinstance(expected, HawkValueError | HawkOverflowError)
    y = arrays.asarray(np.zeros(4096), device="cuda:0")
    eagle.plan.auto(k.round_trip).run(x=arrays.asarray(x, device="cuda:0"), y=y)
    with pytest.raises(type(expected)) as caught:  # reported where the stream is synchronised
        y.numpy()
    assert str(caught.value) == str(expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_int_of_int64s_edges_is_the_hosts(dtype: type) -> None:
    # -2**63 exactly is an int64; the next real below it and 2**63 are not
    x = np.array([-(2.0**63), np.nextafter(2.0**63, 0.0, dtype=dtype), 3.5], dtype)
    host = np.full(3, np.nan, dtype)
    eagle.plan.auto(k.round_trip).run(x=x, y=host)
    y = arrays.asarray(np.full(3, np.nan, dtype), device="cuda:0")
    eagle.plan.auto(k.round_trip).run(x=arrays.asarray(x, device="cuda:0"), y=y)
    np.testing.assert_array_equal(y.numpy(), host)
    for value in (2.0**63, np.nextafter(-(2.0**63), -np.inf, dtype=dtype)):
        x[2] = value
        expected = _host_error(k.round_trip, {"x": x, "y": np.zeros(3, dtype)})
        eagle.plan.auto(k.round_trip).run(x=arrays.asarray(x, device="cuda:0"), y=y)
        with pytest.raises(type(expected)) as caught:
            y.numpy()
        assert str(caught.value) == str(expected)


def test_a_negative_exponent_is_the_hosts_error() -> None:
    x = np.full(1000, 3.0)
    x[700] = -250.0  # the select's other side: no error
    x[800] = -5.0
    expected = _host_error(k.power_of, {"x": x, "y": np.zeros(1000)})
    y = arrays.asarray(np.zeros(1000), device="cuda:0")
    eagle.plan.auto(k.power_of).run(x=arrays.asarray(x, device="cuda:0"), y=y)
    with pytest.raises(HawkValueError) as caught:
        y.numpy()
    assert str(caught.value) == str(expected)


def test_check_mode_reports_the_overflow_the_host_reports() -> None:
    x = np.zeros(3000)
    x[2999] = 3.0  # the only lane that overflows
    expected = _host_error(k.scaled, {"x": x, "y": np.zeros(3000)}, "check")
    assert isinstance(expected, HawkOverflowError)
    y = arrays.asarray(np.zeros(3000), device="cuda:0")
    plan = eagle.plan.auto(k.scaled, int_overflow="check")
    plan.run(x=arrays.asarray(x, device="cuda:0"), y=y)
    with pytest.raises(HawkOverflowError) as caught:
        y.numpy()
    assert str(caught.value) == str(expected)


@pytest.mark.parametrize(
    ("kernel", "planes"),
    [
        (k.wrapped_index, {"x": [0.0, 1.0, 2.0], "t": [1.0, 11.0, 21.0, 31.0, 41.0], "y": 3}),
        (k.wrapped_add, {"x": [1.0, 3.0], "h": 5}),
        (k.wrapped_divisor, {"x": [1.0, 4.0], "y": 2}),
    ],
)
def test_an_index_or_divisor_whose_arithmetic_wraps_is_the_hosts_error(kernel, planes) -> None:
    host = {
        name: np.asarray(v, float) if isinstance(v, list) else np.zeros(v)
        for name, v in planes.items()
    }
    expected = _host_error(kernel, host)
    assert isinstance(expected, IndexError | ZeroDivisionError)
    device = _device(host)
    eagle.plan.auto(kernel).run(**device)
    with pytest.raises(type(expected)) as caught:
        next(iter(device.values())).numpy()
    assert str(caught.value) == str(expected)


def test_a_lane_index_that_wraps_into_range_reads_as_on_the_host() -> None:
    y = arrays.asarray(np.full(3000, np.nan), device="cuda:0")
    eagle.plan.auto(k.wrapped_lane_index).run(
        t=arrays.asarray(np.arange(5.0), device="cuda:0"), y=y
    )
    np.testing.assert_array_equal(y.numpy(), np.full(3000, 1.0))
