# ruff: noqa: F841
# Kernels assign to their output planes (F841).
"""All or nothing under warnings-as-errors: no numpy warning escapes a host run.

A host run meets ``inf * 0`` and NaN as the device does (NaN, no warning), on the
kernel's loop and on the host GEMM route, forward and adjoint, in every plane dtype;
``warnings.simplefilter("error")`` (what ``python -W error`` and ``pytest -W error`` set)
turns none of it into an exception half-way through a run, and a run that fails for
its own reason leaves every plane as it was.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
from eagle.gemm.plan import matmul_step
from tests._route_kernels import B, R, U, contract

DTYPES = [np.float64, np.float32, np.float16, ml_dtypes.bfloat16]
TOLERANCE = {np.float64: 1e-12, np.float32: 1e-5, np.float16: 1e-2, ml_dtypes.bfloat16: 2e-2}


def _plan(route: str) -> eagle.plan.AutoPlan:
    return eagle.plan.auto(contract, contraction="gemm", host_route=route)


def _tables(rng: np.random.Generator, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """``w`` and ``f`` whose product meets inf * 0, inf alone, NaN, and finite values."""
    w = rng.standard_normal((R, U))
    f = rng.standard_normal((R, B))
    w[0, 0], f[0, :2] = np.inf, 0.0  # lanes (0, 0), (1, 0): inf * 0
    f[0, 3] = 1.0  # lane (3, 0): inf * 1
    w[1, 2] = np.nan  # unit 2: NaN in every sample
    return w.astype(dtype), f.astype(dtype)


def _product(w: np.ndarray, f: np.ndarray) -> np.ndarray:
    """y[sample * U + unit] = sum over r of w[r, unit] * f[r, sample], in float64."""
    with np.errstate(all="ignore"):
        return (f.astype(np.float64).T @ w.astype(np.float64)).reshape(-1)


def _close(out: np.ndarray, ref: np.ndarray, dtype: type) -> None:
    tolerance = TOLERANCE[dtype]
    np.testing.assert_allclose(
        out.astype(np.float64), ref, rtol=tolerance, atol=tolerance, equal_nan=True
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("route", ["loop", "gemm"])
def test_a_host_run_meets_inf_times_zero_with_warnings_as_errors(rng, route, dtype):
    plan = _plan(route)
    w, f = _tables(rng, dtype)
    y = np.full(B * U, 7.0, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan.run(w=w, f=f, y=y)
    reference = _product(w, f)
    assert np.isnan(reference[[0, U, 2]]).all() and np.isposinf(reference[3 * U])
    _close(y, reference, dtype)
    assert plan.bind(w=w, f=f, y=y).route == route


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("route", ["loop", "gemm"])
def test_a_host_adjoint_meets_inf_and_nan_with_warnings_as_errors(rng, route, dtype):
    adjoint = eagle.diff.reverse(_plan(route))
    w, f = _tables(rng, dtype)
    y_bar = rng.standard_normal(B * U)
    y_bar[4], y_bar[U + 1] = np.inf, 0.0
    y_bar = y_bar.astype(dtype)
    w_bar, f_bar = (rng.standard_normal(shape).astype(dtype) for shape in ((R, U), (R, B)))
    start_w, start_f = w_bar.astype(np.float64), f_bar.astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adjoint.run(w=w, f=f, y_bar=y_bar, w_bar=w_bar, f_bar=f_bar)
    g = y_bar.astype(np.float64).reshape(B, U)
    with np.errstate(all="ignore"):
        _close(w_bar, start_w + f.astype(np.float64) @ g, dtype)
        _close(f_bar, start_f + w.astype(np.float64) @ g.T, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_host_matmul_step_meets_inf_times_zero_with_warnings_as_errors(rng, dtype):
    a = rng.standard_normal((4, 3)).astype(dtype)
    b = rng.standard_normal((3, 5)).astype(dtype)
    a[0, 0], b[0, :] = np.inf, 0.0
    out = np.full((4, 5), 7.0, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        matmul_step("out", a="a", b="b", out="out").run({"a": a, "b": b, "out": out}, "host")
    with np.errstate(all="ignore"):
        reference = a.astype(np.float64) @ b.astype(np.float64)
    _close(out, reference, dtype)
    assert np.isnan(out[0]).all()


@hawk.kernel
def scale_then_look_up(
    x: hawk.Scalar,
    at: hawk.Scalar,
    t: hawk.Table,
    s: hawk.Mutable[hawk.Scalar],
    y: hawk.Mutable[hawk.Scalar],
):
    s = x * t.at(0)  # inf * 0 where x is inf
    y = s + t.at(int(at))  # out of range where ``at`` is


def test_a_run_that_fails_under_warnings_as_errors_writes_nothing(rng):
    x = rng.standard_normal(64)
    x[5] = np.inf
    at = np.zeros(64)
    at[40] = 9  # t holds 4 values
    t = np.array([0.0, 1.0, 2.0, 3.0])
    s, y = rng.standard_normal(64), rng.standard_normal(64)
    before = s.copy(), y.copy()
    plan = eagle.plan.auto(scale_then_look_up)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(IndexError):
            plan.run(x=x, at=at, t=t, s=s, y=y)
        np.testing.assert_array_equal(s, before[0])
        np.testing.assert_array_equal(y, before[1])
        at[40] = 3
        plan.run(x=x, at=at, t=t, s=s, y=y)  # the next run is right
    with np.errstate(all="ignore"):
        expected = x * 0.0
    np.testing.assert_array_equal(s, expected)
    np.testing.assert_array_equal(y, expected + t[at.astype(int)])


def test_pytest_with_warnings_as_errors_runs_the_host_route(pytester):
    pytester.makepyfile(
        test_inf="""
        import numpy as np
        import eagle.plan
        from tests._route_kernels import B, R, U, contract

        def test_inf_times_zero():
            plan = eagle.plan.auto(contract, contraction="gemm", host_route="gemm")
            w, f = np.ones((R, U), np.float32), np.ones((R, B), np.float32)
            w[0, 0], f[0, :] = np.inf, 0.0
            y = np.zeros(B * U, np.float32)
            plan.run(w=w, f=f, y=y)
            assert np.isnan(y[::U]).all() and (y.reshape(B, U)[:, 1:] == R - 1).all()
        """
    )
    result = pytester.runpytest_inprocess("-W", "error", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
