"""Indices that depend on the lane alone on the device (run with ``nox -s gpu``): the
kernel makes no check of its own for them, in-range launches agree with the reference,
and an index out of range raises the host's error at bind, before anything is launched
or written."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
from tests import _bounds_kernels as k
from tests._device_checks import DTYPES, dev, guarded, host_error
from tests._util import rel_error

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_contraction_loop_agrees_with_the_reference(
    dtype: type, rng: np.random.Generator
) -> None:
    w, f = rng.standard_normal((k.R, k.U)), rng.standard_normal((k.R, k.B))
    y = dev(np.full(k.B * k.U, np.nan), dtype)
    bound = eagle.plan.auto(k.contract).bind(w=dev(w, dtype), f=dev(f, dtype), y=y)
    assert bound.route == "loop"
    bound.launch()
    reference = (f.astype(dtype).astype(np.float64).T @ w.astype(dtype)).reshape(-1)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    assert rel_error(y.numpy(), reference) < tolerance


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_contraction_over_more_lanes_raises_at_bind_and_writes_nothing(
    dtype: type, rng: np.random.Generator
) -> None:
    w, f = rng.standard_normal((k.R, k.U)), rng.standard_normal((k.R, k.B))
    lanes = (k.B + 1) * k.U
    expected = host_error(k.contract, w=w, f=f, y=np.zeros(lanes))
    buffer, y, initial = guarded(lanes, dtype, np.nan)
    with pytest.raises(hawk.PlaneIndexError) as caught:
        eagle.plan.auto(k.contract).run(w=dev(w, dtype), f=dev(f, dtype), y=y)
    assert str(caught.value) == str(expected) and caught.value.lane == k.B * k.U
    np.testing.assert_array_equal(buffer.numpy(), initial)


def test_the_adjoint_over_more_lanes_raises_at_bind(rng: np.random.Generator) -> None:
    w, f = rng.standard_normal((k.R, k.U)), rng.standard_normal((k.R, k.B))
    f_bar = dev(np.zeros((k.R, k.B)), np.float64)
    adjoint = eagle.diff.reverse(eagle.plan.auto(k.contract))
    with pytest.raises(hawk.PlaneIndexError) as caught:
        adjoint.bind(
            w=dev(w, np.float64),
            f=dev(f, np.float64),
            y_bar=dev(np.ones((k.B + 1) * k.U), np.float64),
            f_bar=f_bar,
        )
    assert (caught.value.plane, caught.value.lane) == ("f_bar", k.B * k.U)
    np.testing.assert_array_equal(f_bar.numpy(), 0.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_flat_tables_are_checked_against_their_length_at_bind(dtype: type) -> None:
    t = np.arange(10.0)
    y = dev(np.full(5, np.nan), dtype)
    eagle.plan.auto(k.odd).run(t=dev(t, dtype), y=y)
    np.testing.assert_array_equal(y.numpy(), [1.0, 3.0, 5.0, 7.0, 9.0])
    expected = host_error(k.odd, t=t, y=np.zeros(6))
    buffer, y_long, initial = guarded(6, dtype, np.nan)
    with pytest.raises(hawk.PlaneIndexError) as caught:
        eagle.plan.auto(k.odd).bind(t=dev(t, dtype), y=y_long)
    assert str(caught.value) == str(expected) and "(length 10)" in str(expected)
    np.testing.assert_array_equal(buffer.numpy(), initial)


def test_an_index_negative_at_lane_0_raises_at_bind() -> None:
    expected = host_error(k.previous, f=np.ones(k.B), y=np.zeros(5))
    with pytest.raises(hawk.PlaneIndexError) as caught:
        eagle.plan.auto(k.previous).bind(
            f=dev(np.ones(k.B), np.float32), y=dev(np.zeros(5), np.float32)
        )
    assert str(caught.value) == str(expected) and caught.value.lane == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_adds_at_a_lane_index_agree_and_out_of_range_add_nothing(dtype: type) -> None:
    acc = dev(np.zeros(3), dtype)
    eagle.plan.auto(k.pairs).run(x=dev(np.arange(6.0), dtype), acc=acc)
    np.testing.assert_array_equal(acc.numpy(), [1.0, 5.0, 9.0])
    with pytest.raises(hawk.PlaneIndexError) as caught:
        eagle.plan.auto(k.pairs).run(x=dev(np.ones(7), dtype), acc=acc)
    assert (caught.value.index, caught.value.lane) == (3, 6)
    np.testing.assert_array_equal(acc.numpy(), [1.0, 5.0, 9.0])


@pytest.mark.parametrize("kernel", [k.chosen, k.branch, k.both, k.cycle])
def test_lane_indices_some_lanes_skip_agree_with_the_host(kernel: hawk.Kernel) -> None:
    t = np.array([1.0, 2.0, 3.0])
    lanes = 3 if kernel is k.both else 6
    host_y = np.zeros(lanes)
    eagle.plan.auto(kernel).run(t=t, y=host_y)
    y = dev(np.full(lanes, np.nan), np.float64)
    eagle.plan.auto(kernel).run(t=dev(t, np.float64), y=y)
    np.testing.assert_array_equal(y.numpy(), host_y)


def test_an_index_that_is_not_monotone_raises_at_the_next_synchronizing_call() -> None:
    y = dev(np.zeros(5), np.float32)
    eagle.plan.auto(k.wrapped).run(t=dev(np.ones(2), np.float32), y=y)  # lane % 3 on 2
    with pytest.raises(hawk.PlaneIndexError) as caught:
        y.numpy()
    assert (caught.value.index, caught.value.lane) == (2, 2)
