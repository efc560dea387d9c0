"""The run-time checks on the device (run with ``nox -s gpu``): a failed check is
recorded, the access is not made, and eagle raises the host's error at the next
synchronizing call (or the next launch of the same kernel); an index that depends on
the lane alone raises at bind, before anything is launched."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.plan
import hawk
from eagle import cuda
from eagle.cuda._runtime import cudart
from hawk.emit import checks, policy
from tests import _bounds_kernels as k
from tests._device_checks import DTYPES, GUARD, dev, guarded, host_error
from tests._util import rel_error

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", DTYPES)
def test_in_range_lookups_agree_with_the_reference(dtype: type, rng: np.random.Generator) -> None:
    n = 100_003
    t = rng.standard_normal((3, 4))
    i = rng.integers(0, 3, n) + rng.uniform(0.0, 0.99, n)
    y = dev(np.full(n, np.nan), dtype)
    eagle.plan.auto(k.lookup).run(t=dev(t, dtype), i=dev(i, dtype), y=y)
    expected = t.astype(dtype)[np.trunc(i.astype(dtype)).astype(int), 1]
    tolerance = 1e-6 if dtype == np.float32 else 1e-12
    assert rel_error(y.numpy(), expected) < tolerance


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bad", [5.0, -2.0, np.nan, np.inf, -np.inf, 1e30])
def test_a_bad_lookup_raises_the_host_error_at_numpy(dtype: type, bad: float) -> None:
    t = np.arange(12.0).reshape(3, 4).astype(dtype)
    i = np.array([1.0, 2.0, bad, 0.0]).astype(dtype)  # 1e30 as float32 is 1.0000000150e30
    expected = host_error(k.lookup, t=t, i=i, y=np.zeros(4, dtype))
    y = dev(np.full(4, np.nan), dtype)
    eagle.plan.auto(k.lookup).run(t=dev(t, dtype), i=dev(i, dtype), y=y)
    # an index out of range, or int() of a real that is no int64 (NaN, inf, 1e30)
    with pytest.raises(type(expected)) as caught:
        y.numpy()
    assert str(caught.value) == str(expected) and "at lane 2" in str(expected)
    values = y.numpy()  # the record was cleared; the good lanes were written
    assert np.array_equal(values[[0, 1, 3]], [5.0, 9.0, 1.0])
    assert values[2] == 0.0  # the read was not made


def test_the_issue_lookup_raises_on_the_device() -> None:
    y = dev(np.zeros(3), np.float64)
    plan = eagle.plan.auto(k.lookup)
    plan.run(
        t=dev(np.arange(12.0).reshape(3, 4), np.float64),
        i=dev([5.0, -2.0, 7.0], np.float64),
        y=y,
    )
    with pytest.raises(IndexError, match=r"table 't', axis 'row' \(extent 3\)"):
        y.numpy()


def test_it_surfaces_at_stream_synchronize_and_at_the_next_launch() -> None:
    t, y = dev(np.ones((3, 4)), np.float32), dev(np.zeros(2), np.float32)
    bad, good = dev([0.0, 3.0], np.float32), dev([0.0, 1.0], np.float32)
    stream = cuda.Stream(non_blocking=True)
    plan = eagle.plan.auto(k.lookup)
    with stream:
        plan.run(t=t, i=bad, y=y)
    with pytest.raises(hawk.PlaneIndexError, match="lane 1"):
        stream.synchronize()
    with stream:
        plan.run(t=t, i=bad, y=y)
    cudart.cudaDeviceSynchronize()  # finished, but no eagle call has looked yet
    with pytest.raises(hawk.PlaneIndexError, match="lane 1"), stream:
        plan.run(t=t, i=good, y=y)  # the next launch of the same kernel
    with stream:
        plan.run(t=t, i=good, y=y)
    stream.synchronize()
    assert np.array_equal(y.numpy(), [1.0, 1.0])


def test_it_surfaces_at_a_launchers_synchronize() -> None:
    t, y = dev(np.ones((3, 4)), np.float64), dev(np.zeros(2), np.float64)
    i = dev([0.0, 1.0], np.float64)
    stream = cuda.Stream(non_blocking=True)
    launcher = eagle.plan.auto(k.lookup).bind(t=t, i=i, y=y).capture(stream)
    launcher.launch()
    launcher.synchronize()
    i.fill(7.0, stream)
    launcher.launch()
    with pytest.raises(hawk.PlaneIndexError, match="index 7 "):
        launcher.synchronize()
    launcher.synchronize()  # raised once


@pytest.mark.parametrize("dtype", DTYPES)
def test_flat_tables_are_checked_against_their_length(dtype: type) -> None:
    t = np.arange(6.0)
    i = np.array([0.0, 5.0, 6.0])
    expected = host_error(k.flat, t=t, i=i, y=np.zeros(3))
    y = dev(np.zeros(3), dtype)
    eagle.plan.auto(k.flat).run(t=dev(t, dtype), i=dev(i, dtype), y=y)
    with pytest.raises(hawk.PlaneIndexError) as caught:
        y.numpy()
    assert str(caught.value) == str(expected) and "length 6" in str(expected)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bad_adds_are_not_made_and_nothing_outside_the_plane_changes(dtype: type) -> None:
    buffer, acc, initial = guarded(5 * 2, dtype, 0.0)
    i = np.array([0.0, 4.0, -1.0, 5.0, 1e9, 1e12, -1e9, 2.0])
    expected = host_error(k.add_named, i=i, x=np.ones(8), acc=np.zeros((5, 2)))
    eagle.plan.auto(k.add_named).run(i=dev(i, dtype), x=dev(np.ones(8), dtype), acc=acc)
    with pytest.raises(hawk.PlaneIndexError) as caught:
        acc.numpy()
    assert caught.value.plane == "acc" and caught.value.axis == "bin"
    assert caught.value.lane in range(2, 7) and "acc.add(bin=int(i)" in str(expected)
    after = buffer.numpy()
    assert np.array_equal(after[:GUARD], initial[:GUARD])
    assert np.array_equal(after[-GUARD:], initial[-GUARD:])
    plane = after[GUARD:-GUARD].reshape(5, 2)
    assert plane[0, 1] == 1.0 and plane[4, 1] == 1.0 and plane[2, 1] == 1.0
    assert plane.sum() == 3.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_flat_adds_past_the_end_leave_the_guard_intact(dtype: type) -> None:
    buffer, acc, initial = guarded(4, dtype, 0.0)
    i = np.arange(-3.0, 9.0)
    eagle.plan.auto(k.add_flat).run(i=dev(i, dtype), x=dev(np.ones(12), dtype), acc=acc)
    with pytest.raises(hawk.PlaneIndexError):
        acc.numpy()
    after = buffer.numpy()
    assert np.array_equal(after[:GUARD], initial[:GUARD])
    assert np.array_equal(after[-GUARD:], initial[-GUARD:])
    assert np.array_equal(after[GUARD:-GUARD], np.ones(4))


@pytest.mark.parametrize("kernel", [k.guarded, k.guarded_select, k.guarded_logic])
def test_lanes_that_do_not_take_the_read_do_not_raise(kernel: hawk.Kernel) -> None:
    t, i = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.0, 9.0, -3.0, 3.0, 1e12])
    host_y = np.zeros(5)
    eagle.plan.auto(kernel).run(t=t, i=i, y=host_y)
    y = dev(np.full(5, np.nan), np.float64)
    eagle.plan.auto(kernel).run(t=dev(t, np.float64), i=dev(i, np.float64), y=y)
    assert np.array_equal(y.numpy(), host_y)


def test_lanes_that_do_not_take_the_add_do_not_raise() -> None:
    acc = dev(np.zeros(4), np.float64)
    i = dev([0.0, 9.0, -3.0, 3.0, 3.0, 1e12], np.float64)
    eagle.plan.auto(k.guarded_add).run(i=i, acc=acc)
    assert np.array_equal(acc.numpy(), [1.0, 0.0, 0.0, 2.0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_integer_division_by_a_lane_zero_raises(dtype: type) -> None:
    a, b = np.array([7.0, -7.0, 3.0, 4.0]), np.array([2.0, 2.0, 0.0, 3.0])
    expected = host_error(k.divide, a=a, b=b, q=np.zeros(4), r=np.zeros(4))
    q, r = dev(np.zeros(4), dtype), dev(np.zeros(4), dtype)
    eagle.plan.auto(k.divide).run(a=dev(a, dtype), b=dev(b, dtype), q=q, r=r)
    with pytest.raises(ZeroDivisionError) as caught:
        q.numpy()
    assert "at lane 2" in str(caught.value) and isinstance(expected, ZeroDivisionError)
    guarded = dev(np.full(4, np.nan), dtype)
    eagle.plan.auto(k.guarded_divide).run(a=dev(a, dtype), b=dev(b, dtype), q=guarded)
    assert np.array_equal(guarded.numpy(), [3.0, -4.0, 0.0, 1.0])


def test_mod_by_a_zero_param_raises() -> None:
    q = dev(np.zeros(3), np.float32)
    eagle.plan.auto(k.divide_by_param).run(a=dev(np.ones(3), np.float32), k=0.0, q=q)
    with pytest.raises(ZeroDivisionError, match="integer % by zero"):
        q.numpy()


@pytest.mark.parametrize("routed", [False, True])
def test_a_contraction_over_more_lanes_than_its_product_raises(
    routed: bool, rng: np.random.Generator
) -> None:
    w = rng.standard_normal((k.R, k.U)).astype(np.float32)
    f = rng.standard_normal((k.R, k.B)).astype(np.float32)
    with policy.using(contraction="gemm" if routed else "loop"):
        plan = eagle.plan.auto(k.contract)
    y = dev(np.full(k.B * k.U, np.nan), np.float32)
    plan.run(w=dev(w, np.float32), f=dev(f, np.float32), y=y)
    assert rel_error(y.numpy().reshape(k.B, k.U), f.T.astype(np.float64) @ w) < 1e-5
    buffer, y_long, initial = guarded((k.B + 1) * k.U, np.float32, 0.0)
    with pytest.raises(hawk.PlaneIndexError) as caught:  # lane // U is checked at bind
        plan.bind(w=dev(w, np.float32), f=dev(f, np.float32), y=y_long)
    expected = (caught.value.plane, caught.value.axis, caught.value.index, caught.value.extent)
    assert expected == ("f", "sample", k.B, k.B)
    assert caught.value.lane == k.B * k.U  # the first lane out of range, exactly
    assert np.array_equal(buffer.numpy(), initial)  # nothing was launched or written


def test_records_hold_the_documented_layout() -> None:
    assert checks.RECORD_WORDS == 8
    t, y = dev(np.ones((3, 4)), np.float64), dev(np.zeros(1), np.float64)
    for _ in range(3):  # a record raises once per failure, then takes the next one
        eagle.plan.auto(k.lookup).run(t=t, i=dev([4.0], np.float64), y=y)
        with pytest.raises(hawk.PlaneIndexError, match="index 4 "):
            y.numpy()
