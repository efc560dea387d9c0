"""Indices that add a lane part to a loop part on the device (run with ``nox -s gpu``): the
kernel makes no check of its own for them, in-range launches agree with a float64
reference, an index out of range raises the host's error at bind, before anything is
launched or written, and the near relatives that keep their check raise as the host does."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
from tests import _loop_check_kernels as k
from tests._device_checks import DTYPES, dev, guarded
from tests._util import rel_error
from tests.test_kan import kan

pytestmark = pytest.mark.gpu

TOLERANCE = {np.float32: 1e-6, np.float64: 1e-13}


def _host_error(kernel: hawk.Kernel, **planes: np.ndarray) -> Exception:
    with pytest.raises(IndexError) as caught:
        eagle.plan.auto(kernel).run(**{name: value.copy() for name, value in planes.items()})
    return caught.value


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_sliding_window_agrees_and_raises_at_bind_past_its_table(
    dtype: type, rng: np.random.Generator
) -> None:
    t = rng.standard_normal(k.ROWS)
    lanes = 2 * (k.ROWS - 2)  # the last lane reads rows ROWS - 3 .. ROWS - 1
    y = dev(np.full(lanes, np.nan), dtype)
    eagle.plan.auto(k.sliding).run(t=dev(t, dtype), y=y)
    stored = t.astype(dtype).astype(np.float64)
    reference = [stored[lane // 2 : lane // 2 + 3].sum() for lane in range(lanes)]
    assert rel_error(y.numpy(), np.array(reference)) < TOLERANCE[dtype]
    expected = _host_error(k.sliding, t=t, y=np.zeros(lanes + 1))
    buffer, y_long, initial = guarded(lanes + 1, dtype, np.nan)
    with pytest.raises(hawk.PlaneIndexError) as caught:
        eagle.plan.auto(k.sliding).bind(t=dev(t, dtype), y=y_long)
    assert str(caught.value) == str(expected)
    assert (caught.value.lane, caught.value.index) == (lanes, k.ROWS)
    np.testing.assert_array_equal(buffer.numpy(), initial)


@pytest.mark.parametrize("dtype", DTYPES)
def test_adds_over_a_loop_agree_and_out_of_range_add_nothing(dtype: type) -> None:
    acc = dev(np.zeros(k.ROWS), dtype)
    eagle.plan.auto(k.spread).run(x=dev(np.arange(1.0, 5.0), dtype), acc=acc)
    np.testing.assert_array_equal(acc.numpy(), [1.0, 2.0, 4.0, 6.0, 3.0, 4.0])
    expected = _host_error(k.spread, x=np.ones(5), acc=np.zeros(k.ROWS))
    with pytest.raises(hawk.PlaneIndexError) as caught:
        eagle.plan.auto(k.spread).run(x=dev(np.ones(5), dtype), acc=acc)
    assert str(caught.value) == str(expected) and (caught.value.lane, caught.value.index) == (4, 6)
    np.testing.assert_array_equal(acc.numpy(), [1.0, 2.0, 4.0, 6.0, 3.0, 4.0])


def test_the_first_iteration_out_of_range_is_the_hosts() -> None:
    expected = _host_error(k.backwards, t=np.ones(8), y=np.zeros(3))
    with pytest.raises(hawk.PlaneIndexError) as caught:
        eagle.plan.auto(k.backwards).bind(
            t=dev(np.ones(8), np.float32), y=dev(np.zeros(3), np.float32)
        )
    assert str(caught.value) == str(expected) and (caught.value.lane, caught.value.index) == (0, -1)


def test_a_loop_index_into_a_short_flat_table_raises_at_bind() -> None:
    expected = _host_error(k.coefficients, c=np.ones(3), x=np.ones(4), y=np.zeros(4))
    buffer, y, initial = guarded(4, np.float64, np.nan)
    with pytest.raises(hawk.PlaneIndexError) as caught:
        eagle.plan.auto(k.coefficients).bind(
            c=dev(np.ones(3), np.float64), x=dev(np.ones(4), np.float64), y=y
        )
    assert str(caught.value) == str(expected) and caught.value.lane == 0
    np.testing.assert_array_equal(buffer.numpy(), initial)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_adjoint_of_a_sliding_window_agrees_with_the_host(
    dtype: type, rng: np.random.Generator
) -> None:
    t, y_bar = rng.standard_normal(k.ROWS), rng.standard_normal(8)
    reference = np.zeros(k.ROWS)
    for lane in range(8):
        reference[lane // 2 : lane // 2 + 3] += y_bar.astype(dtype)[lane]
    t_bar = dev(np.zeros(k.ROWS), dtype)
    adjoint = eagle.diff.reverse(eagle.plan.auto(k.sliding))
    adjoint.run(t=dev(t, dtype), y_bar=dev(y_bar, dtype), t_bar=t_bar)
    assert rel_error(t_bar.numpy(), reference) < 10 * TOLERANCE[dtype]


def test_the_checks_left_in_the_kernel_raise_at_the_next_synchronizing_call() -> None:
    y = dev(np.zeros(11), np.float32)
    eagle.plan.auto(k.halves).run(t=dev(np.ones(k.ROWS), np.float32), y=y)
    with pytest.raises(hawk.PlaneIndexError) as caught:
        y.numpy()
    assert (caught.value.lane, caught.value.index) == (10, 6)
    t = np.arange(1.0, k.ROWS + 1)
    x = np.array([1.0] * 8 + [-1.0] * 2)  # lanes 8 and 9 skip their read of row 6
    y = dev(np.full(10, np.nan), np.float64)
    eagle.plan.auto(k.guarded).run(t=dev(t, np.float64), x=dev(x, np.float64), y=y)
    host_y = np.zeros(10)
    eagle.plan.auto(k.guarded).run(t=t, x=x, y=host_y)
    np.testing.assert_array_equal(y.numpy(), host_y)


def test_the_kan_basis_adjoint_agrees_with_the_reference(rng: np.random.Generator) -> None:
    layer = kan.kan_kernels(1000, 5, 7, 8)
    x = rng.uniform(-1.2, 1.2, (layer.inputs, layer.samples))
    c = rng.standard_normal((layer.rows, layer.outputs))
    y_bar = rng.standard_normal(layer.samples * layer.outputs)
    reference = kan.reference(layer, x, c, y_bar)
    x_bar = dev(np.zeros(layer.inputs * layer.samples), np.float64)  # it adds into x_bar
    eagle.plan.auto(layer.basis_adjoint).run(
        x=dev(x, np.float64), phi_bar=dev(reference["phi_bar"], np.float64), x_bar=x_bar
    )
    assert rel_error(x_bar.numpy(), reference["x_bar"].reshape(-1)) < 1e-12
