"""Checked table reads on the device (run with ``nox -s gpu``, and under memcheck): the load
is made at a clamped index, always inside the table; a failing lane reads 0 and its thread
records the failure once it has run its lanes."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.plan
import hawk
from tests import _bounds_kernels as bk
from tests import _clamped_kernels as ck
from tests._device_checks import DTYPES, dev, host_error
from tests._util import rel_error

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", DTYPES)
def test_scattered_bad_lanes_read_0_and_one_of_them_is_recorded(
    dtype: type, rng: np.random.Generator
) -> None:
    n = 1_000_003
    t = rng.standard_normal((3, 4))
    i = rng.integers(0, 3, n) + rng.uniform(0.0, 0.99, n)
    bad = np.sort(rng.choice(n, 40, replace=False))
    i[bad] = rng.choice([3.0, 7.5, -1.0, 1e12, -1e12], bad.size)  # int() of each is an int64
    y = dev(np.full(n, np.nan), dtype)
    eagle.plan.auto(bk.lookup).run(t=dev(t, dtype), i=dev(i, dtype), y=y)
    with pytest.raises(hawk.PlaneIndexError) as caught:
        y.numpy()
    error = caught.value
    assert error.lane in bad and (error.plane, error.axis, error.extent) == ("t", "row", 3)
    lane_i = dtype(i[error.lane])
    assert error.index == int(lane_i)
    values = y.numpy()
    assert np.array_equal(values[bad], np.zeros(bad.size))
    good = np.setdiff1d(np.arange(n), bad)
    reference = t.astype(dtype)[np.trunc(i[good].astype(dtype)).astype(int), 1]
    tolerance = 1e-6 if dtype == np.float32 else 1e-12
    assert rel_error(values[good], reference) < tolerance


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_empty_flat_table_is_never_loaded(dtype: type) -> None:
    i = np.array([0.0, 1.0, -1.0])
    expected = host_error(bk.flat, t=np.zeros(0), i=i, y=np.zeros(3))
    y = dev(np.full(3, np.nan), dtype)
    eagle.plan.auto(bk.flat).run(t=dev(np.zeros(0), dtype), i=dev(i, dtype), y=y)
    with pytest.raises(hawk.PlaneIndexError) as caught:
        y.numpy()
    assert "(length 0)" in str(caught.value) and caught.value.extent == 0
    assert str(expected).startswith("table 't' (length 0): index ")
    assert np.array_equal(y.numpy(), np.zeros(3))


@pytest.mark.parametrize("dtype", DTYPES)
def test_two_failing_axes_report_the_first(dtype: type) -> None:
    t = np.arange(12.0).reshape(3, 4)
    i, j = np.array([1.0, 9.0, 2.0]), np.array([2.0, -3.0, 3.0])
    expected = host_error(bk.lookup2, t=t, i=i, j=j, y=np.zeros(3))
    y = dev(np.full(3, np.nan), dtype)
    eagle.plan.auto(bk.lookup2).run(t=dev(t, dtype), i=dev(i, dtype), j=dev(j, dtype), y=y)
    with pytest.raises(hawk.PlaneIndexError) as caught:
        y.numpy()
    assert str(caught.value) == str(expected) and caught.value.axis == "row"
    assert np.array_equal(y.numpy(), [6.0, 0.0, 11.0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_uniform_read_fails_in_the_vectorised_loop(dtype: type) -> None:
    n = 4099  # whole groups, then the scalar loop's tail
    t, x = np.array([1.0, 2.0, 3.0, 4.0]), np.arange(float(n))
    plan = eagle.plan.auto(ck.scaled)
    y = dev(np.full(n, np.nan), dtype)
    plan.run(t=dev(t, dtype), k=2.0, x=dev(x, dtype), y=y)
    assert np.array_equal(y.numpy(), 3.0 * x.astype(dtype))
    expected = host_error(ck.scaled, t=t, k=np.array([7.0]), x=x, y=np.zeros(n))
    y = dev(np.full(n, np.nan), dtype)
    plan.run(t=dev(t, dtype), k=7.0, x=dev(x, dtype), y=y)
    with pytest.raises(hawk.PlaneIndexError) as caught:
        y.numpy()
    assert (caught.value.index, caught.value.extent) == (7, 4)
    assert str(caught.value).split(" at lane")[0] == str(expected).split(" at lane")[0]
    assert np.array_equal(y.numpy(), np.zeros(n))


@pytest.mark.parametrize("dtype", DTYPES)
def test_nested_lazy_reads_match_the_host(dtype: type) -> None:
    t, u = np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 20.0])
    i = np.array([0.0, 3.0, 4.0, 5.0, 6.0, -1.0, 9.0, 1e12, -1e12])
    host_y = np.zeros(i.size)
    eagle.plan.auto(ck.nested).run(t=t, u=u, i=i, y=host_y)
    y = dev(np.full(i.size, np.nan), dtype)
    eagle.plan.auto(ck.nested).run(t=dev(t, dtype), u=dev(u, dtype), i=dev(i, dtype), y=y)
    assert np.array_equal(y.numpy(), host_y.astype(dtype))
