"""The device agrees with the host on the kernels of tests/test_host_agreement.py and on
``hm.floor`` of reals no int holds: the same values, and the same error where a run raises
(reported at the next synchronizing call)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import eagle.plan
import hawk
from eagle import arrays
from tests import test_host_agreement as cases
from tests._floor_kernels import KNOTS, floors, interpolate

pytestmark = pytest.mark.gpu


def _on_device(value: Any) -> Any:
    return arrays.asarray(value, device="cuda:0") if isinstance(value, np.ndarray) else value


def _agree(kernel: hawk.Kernel, int_overflow: str = "wrap", **planes: Any) -> None:
    """``kernel`` over ``planes`` gives the host's outputs on the device (reals to within
    rounding: the device may add in another order or fuse a multiply-add), or raises the
    host's error there."""
    host = {name: value.copy() if isinstance(value, np.ndarray) else value
            for name, value in planes.items()}  # fmt: skip
    try:
        eagle.plan.auto(kernel, int_overflow=int_overflow).run(**host)
        expected: BaseException | None = None
    except Exception as exc:
        expected = exc
    device = {name: _on_device(value) for name, value in planes.items()}
    eagle.plan.auto(kernel, int_overflow=int_overflow).run(**device)
    if expected is not None:
        with pytest.raises(type(expected)) as caught:
            for value in device.values():  # (a copy back synchronizes)
                if isinstance(value, arrays.Array):
                    value.numpy()
        assert str(caught.value) == str(expected)
        return
    for name, value in device.items():
        if isinstance(value, arrays.Array):
            got = value.numpy()
            if np.issubdtype(got.dtype, np.floating):  # (sums may round in another order)
                np.testing.assert_allclose(got, host[name], rtol=1e-12, err_msg=name)
            else:
                np.testing.assert_array_equal(got, host[name], err_msg=name)


@pytest.mark.parametrize("lanes", [4, 12, 10])
def test_a_uniform_carry_of_a_factored_loop(lanes: int, rng) -> None:
    _agree(
        cases.uniform_carry,
        x=rng.standard_normal(lanes),
        f=rng.standard_normal((40, 3)),
        y=np.full(lanes, np.nan),
    )


@pytest.mark.parametrize("a", [np.inf, np.nan, 2.5])
def test_an_add_no_lane_makes(a: float) -> None:
    _agree(cases.masked_add, a=a, x=np.array([-1.0, -2.0]), h=np.array([1.0, 2.0]))
    _agree(cases.masked_add, a=a, x=np.array([1.0, -1.0, 3.0]), h=np.array([1.0, 2.0]))


def test_int_carries_summed_by_a_loop() -> None:
    _agree(cases.int_sums, a=5.0, x=np.zeros(3), y=np.full(3, np.nan), z=np.full(3, np.nan))
    _agree(cases.int_climb, "check", x=np.zeros(2), y=np.full(2, np.nan))


def test_float_of_a_uniform_int() -> None:
    x = np.full(2, 2**24, np.float32)
    y, z = np.zeros(2, np.float32), np.zeros(2, np.float32)
    _agree(cases.int_to_real, a=np.float32(2**24), x=x, y=y, z=z)


def test_a_read_no_lane_takes() -> None:
    t = np.arange(12.0)
    _agree(cases.untaken_read, a=4e18, x=np.array([-1.0, -2.0]), t=t, y=np.full(2, np.nan))


@pytest.mark.parametrize("int_overflow", ["wrap", "check"])
def test_int_powers_and_abs(int_overflow: str) -> None:
    _agree(cases.powers, int_overflow, x=np.zeros(3), y=np.full(3, np.nan))
    x = np.array([3.5, -(2.0**63)])
    _agree(cases.magnitude, int_overflow, x=x, y=np.full(2, np.nan))
    _agree(cases.uniform_magnitude, int_overflow, a=-(2.0**63), x=np.zeros(2), y=np.full(2, np.nan))


def test_an_index_far_out_of_range_and_no_lanes() -> None:
    t = np.arange(12.0)
    _agree(cases.far_untaken, x=-np.ones(4), t=t, y=np.full(4, np.nan))
    _agree(cases.far_untaken, x=np.ones(4), t=t, y=np.full(4, np.nan))
    _agree(cases.histogram, x=np.ones(100), h=np.arange(64.0))


@pytest.mark.parametrize("int_overflow", ["wrap", "check"])
def test_an_int_power_of_a_huge_exponent(int_overflow: str) -> None:
    y, z = np.full(3, np.nan), np.full(3, np.nan)
    _agree(cases.huge_power, int_overflow, a=3.0, x=np.zeros(3), y=y, z=z)


@pytest.mark.parametrize("a", [1.0, -1.0])
def test_a_lane_value_that_a_uniform_condition_makes_one_number(a: float, rng) -> None:
    x = rng.standard_normal(32)
    _agree(cases.chosen_term, a=a, x=x, y=np.full(32, np.nan))
    t = rng.standard_normal(3)
    # adds in another order on the device: compared within rounding, not bit for bit
    host, device = np.zeros(2), arrays.asarray(np.zeros(2), device="cuda:0")
    eagle.plan.auto(cases.chosen_address).run(a=a, x=x, t=t, h=host)
    eagle.plan.auto(cases.chosen_address).run(a=a, x=_on_device(x), t=_on_device(t), h=device)
    np.testing.assert_allclose(device.numpy(), host, rtol=1e-12)


def test_a_condition_that_is_one_bool_at_run_time() -> None:
    _agree(cases.chosen_condition, x=np.array([1.0, 2.0, 4.0]), a=0.5, h=np.zeros(2))


@pytest.mark.parametrize("value", [np.nan, np.inf, -1e30, 2.5])
def test_floor_of_what_no_int_holds(value: float) -> None:
    for dtype in (np.float64, np.float32):
        x = np.array([1.5, -0.5, 2.5] * 50, dtype)
        x[100] = value  # one failing lane: the device reports whichever lane fails first
        _agree(floors, x=x, y=np.full(150, 7.0, dtype))
        _agree(interpolate, x=x, t=np.arange(float(KNOTS), dtype=dtype), y=np.full(150, 7.0, dtype))


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_a_power_of_one_half_at_minus_zero_and_minus_infinity(dtype: str) -> None:
    """The device's pow gives the host's +0 and +inf there (numpy's sqrt shortcut gave -0
    and NaN on the host before), with the sign of zero."""
    x = np.array([-0.0, -np.inf, 0.0, np.inf, 4.0, -4.0], dtype)
    for b in (0.5, np.array([0.5])):
        host = {name: np.full(x.size, 7.0, dtype) for name in ("y", "z", "w")}
        with np.errstate(invalid="ignore"):
            eagle.plan.auto(cases.half_powers).run(x=x, b=b, **host)
        device = {name: arrays.full((x.size,), 7.0, dtype, "cuda:0") for name in host}
        eagle.plan.auto(cases.half_powers).run(x=_on_device(x), b=_on_device(b), **device)
        for name, value in device.items():
            got = value.numpy()
            np.testing.assert_array_equal(got, host[name], err_msg=name)
            signed = ~np.isnan(got)  # (a NaN's sign bit means nothing)
            assert np.array_equal(np.signbit(got[signed]), np.signbit(host[name][signed])), name
