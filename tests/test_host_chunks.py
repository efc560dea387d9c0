# ruff: noqa: F821, F841
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["row":3], which pyflakes reads as forward references (F821).
"""Host loops that run a chunk of iterations at a time (hawk/emit/_batch.py): the same
results, checks that report the first iteration then the first lane, and the loops that
must keep running one iteration at a time."""

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
import hawk.diff
from hawk import math as hm
from hawk.emit import host
from tests import _bounds_kernels as bk
from tests._route_kernels import make_contract
from tests._util import rel_error


def _source(kernel: hawk.Kernel) -> str:
    dtypes = {plane.name: "float64" for plane in kernel.ir.planes}
    return host.emit(kernel.ir, dtypes).source


# (R, U, B): many rows over few lanes (chunks of many iterations), the seed's shape, and
# more lanes than a chunk holds (one iteration per pass)
@pytest.mark.parametrize("shape", [(300, 2, 3), (64, 32, 128), (5, 64, 512)])
def test_a_chunked_contraction_and_its_adjoint_match_numpy(
    shape: tuple[int, int, int], rng: np.random.Generator
) -> None:
    R, U, B = shape
    kernel = make_contract(R, U, B)
    assert "_carry_rows(" in _source(kernel)
    w, f = rng.standard_normal((R, U)), rng.standard_normal((R, B))
    y = np.full(B * U, np.nan)
    eagle.plan.auto(kernel).run(w=w, f=f, y=y)
    assert rel_error(y, (f.T @ w).reshape(-1)) < 1e-13
    y_bar = rng.standard_normal(B * U)
    w_bar, f_bar = np.zeros((R, U)), np.zeros((R, B))
    eagle.diff.reverse(eagle.plan.auto(kernel)).run(w=w, f=f, y_bar=y_bar, w_bar=w_bar, f_bar=f_bar)
    assert rel_error(w_bar, f @ y_bar.reshape(B, U)) < 1e-13
    assert rel_error(f_bar, w @ y_bar.reshape(B, U).T) < 1e-13


@hawk.kernel
def _scaled_sum(
    a: hawk.Param, t: hawk.Table["row":7], x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]
):
    acc = 0.0
    for r in range(7):
        acc = acc + a * t.at(row=r) * x
    y = acc


def test_a_params_gradient_added_in_a_chunked_loop_counts_every_iteration(
    rng: np.random.Generator,
) -> None:
    t, x, y_bar = rng.standard_normal(7), rng.standard_normal(5), rng.standard_normal(5)
    grads = {"a_bar": np.zeros(1), "t_bar": np.zeros(7), "x_bar": np.zeros(5)}
    adjoint = eagle.diff.reverse(eagle.plan.auto(_scaled_sum))
    adjoint.run(a=1.5, t=t, x=x, y_bar=y_bar, **grads)
    assert rel_error(grads["a_bar"], [t.sum() * (x @ y_bar)]) < 1e-13
    assert rel_error(grads["t_bar"], np.full(7, 1.5 * (x @ y_bar))) < 1e-13
    assert rel_error(grads["x_bar"], 1.5 * t.sum() * y_bar) < 1e-13


def test_a_chunked_check_reports_the_first_iteration_then_the_first_lane() -> None:
    assert "_carry_rows(" in _source(bk.window)  # y = sum of t.at(row=int(i) + r), r < 3
    # lane 1 fails at r = 1 (index 6), lane 0 only at r = 2: an iteration at a time, r = 1
    # comes first
    with pytest.raises(IndexError) as caught:
        eagle.plan.auto(bk.window).run(t=np.ones(6), i=np.array([4.0, 5.0, 0.0]), y=np.zeros(3))
    error = caught.value
    assert isinstance(error, hawk.PlaneIndexError)
    assert (error.lane, error.index, error.extent) == (1, 6, 6)


@hawk.kernel
def _divide(i: hawk.Scalar, q: hawk.Mutable[hawk.Scalar]):
    acc = 0.0  # (an int carry is summed an iteration at a time)
    for r in range(4):
        acc = acc + float(int(i) // (r - 2))
    q = acc


def test_a_chunked_division_by_an_iterations_zero_raises() -> None:
    assert "_carry_rows(" in _source(_divide)
    with pytest.raises(ZeroDivisionError, match="integer // by zero at lane 0"):
        eagle.plan.auto(_divide).run(i=np.array([3.0, 4.0]), q=np.zeros(2))


def test_a_chunked_loop_over_no_lanes_raises_nothing() -> None:
    eagle.plan.auto(_divide).run(i=np.zeros(0), q=np.zeros(0))


@hawk.kernel
def _product(t: hawk.Table["row":5], x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    acc = 1.0
    for r in range(5):
        acc = acc * (x + t.at(row=r))
    y = acc


@hawk.kernel
def _branchy(t: hawk.Table["row":5], x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for r in range(5):
        v = t.at(row=r)
        if x > v:
            v = x
        acc = acc + v
    y = acc


@hawk.kernel
def _feedback(t: hawk.Table["row":5], x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    acc = x
    for r in range(5):
        acc = acc + acc * t.at(row=r)
    y = acc


@hawk.kernel
def _int_of_row(t: hawk.Table["row":5], x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for r in range(5):
        acc = acc + x * t.at(row=int(r * 0.5))
    y = acc


def _per_iteration(kernel: hawk.Kernel, t: np.ndarray, x: np.ndarray) -> np.ndarray:
    start = {"_product": np.ones_like(x), "_feedback": x.copy()}
    acc = start.get(kernel.name, np.zeros_like(x))
    for r in range(5):
        if kernel.name == "_product":
            acc = acc * (x + t[r])
        elif kernel.name == "_branchy":
            acc = acc + np.maximum(x, t[r])
        elif kernel.name == "_feedback":
            acc = acc + acc * t[r]
        else:
            acc = acc + x * t[int(r * 0.5)]
    return acc


@pytest.mark.parametrize("kernel", [_product, _branchy, _feedback, _int_of_row], ids=str)
def test_loops_that_depend_on_earlier_iterations_or_branch_run_one_at_a_time(
    kernel: hawk.Kernel, rng: np.random.Generator
) -> None:
    assert "_carry_rows(" not in _source(kernel)
    t, x = rng.standard_normal(5), rng.standard_normal(6)
    y = np.full(6, np.nan)
    eagle.plan.auto(kernel).run(t=t, x=x, y=y)
    assert rel_error(y, _per_iteration(kernel, t, x)) < 1e-13


@hawk.kernel
def _repeat(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for _r in range(9):
        acc = acc + x * 2.0
    y = acc


def test_a_term_the_index_does_not_change_is_summed_once_per_iteration(
    rng: np.random.Generator,
) -> None:
    assert "_carry_rows(" in _source(_repeat)
    x, y = rng.standard_normal(5), np.full(5, np.nan)
    eagle.plan.auto(_repeat).run(x=x, y=y)
    assert rel_error(y, 18.0 * x) < 1e-13


@hawk.kernel
def _bins(x: hawk.Scalar, runs: hawk.Mutable[hawk.Table], cycles: hawk.Mutable[hawk.Table]):
    i = hm.sample_index()
    runs.add(i // 16, value=x)
    cycles.add(i % 32 + 1, value=2.0)


@pytest.mark.parametrize("lanes", [32 * 16, 32 * 16 + 5, 7])
def test_adds_shared_by_groups_of_lanes_are_summed_per_group_first(
    lanes: int, rng: np.random.Generator
) -> None:
    assert "_add_groups(" in _source(_bins)
    x = rng.standard_normal(lanes)
    runs, cycles = rng.standard_normal(lanes // 16 + 1), rng.standard_normal(33)
    want_runs, want_cycles = runs.copy(), cycles.copy()
    np.add.at(want_runs, np.arange(lanes) // 16, x)
    np.add.at(want_cycles, np.arange(lanes) % 32 + 1, 2.0)
    eagle.plan.auto(_bins).run(x=x, runs=runs, cycles=cycles)
    assert rel_error(runs, want_runs) < 1e-13 and rel_error(cycles, want_cycles) < 1e-13


@pytest.mark.parametrize("lanes", [128 * 32, 128 * 32 - 3])
def test_a_contractions_adjoint_sums_its_groups_over_every_lane_count(
    lanes: int, rng: np.random.Generator
) -> None:
    R, U, B = 8, 32, 128
    kernel = make_contract(R, U, B)
    dtypes = {plane: "float64" for plane in ("w", "f", "y_bar", "w_bar", "f_bar")}
    source = host.emit(hawk.diff.vjp(kernel).ir, dtypes).source
    assert source.count("_add_groups(") == 2
    w, f = rng.standard_normal((R, U)), rng.standard_normal((R, B))
    y_bar = np.zeros(B * U)
    y_bar[:lanes] = rng.standard_normal(lanes)
    w_bar, f_bar = np.zeros((R, U)), np.zeros((R, B))
    eagle.diff.reverse(eagle.plan.auto(kernel)).run(
        w=w, f=f, y_bar=y_bar[:lanes], w_bar=w_bar, f_bar=f_bar
    )
    assert rel_error(w_bar, f @ y_bar.reshape(B, U)) < 1e-13
    assert rel_error(f_bar, w @ y_bar.reshape(B, U).T) < 1e-13


@hawk.kernel
def _subtract_and_set(t: hawk.Table["row":6], x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    acc = 10.0 * x
    last = 0.0
    first = 0
    for r in range(6):
        acc -= x * t.at(row=r)
        last = t.at(row=r) + x
        first = r * 2
    y = acc + last * float(first)


def test_carries_subtracted_or_set_by_a_loop_run_in_chunks(rng: np.random.Generator) -> None:
    assert "_last_row(" in _source(_subtract_and_set)
    t, x = rng.standard_normal(6), rng.standard_normal(20_000)
    for lanes in (7, 1, 20_000):  # chunks of every row; one lane; one row per pass
        y = np.full(lanes, np.nan)
        eagle.plan.auto(_subtract_and_set).run(t=t, x=x[:lanes], y=y)
        want = 10.0 * x[:lanes] - x[:lanes] * t.sum() + (t[5] + x[:lanes]) * 10.0
        assert rel_error(y, want) < 1e-13
