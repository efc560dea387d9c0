# ruff: noqa: F841 - kernels assign to their output planes
"""Every test kernel run on the host (numpy) against its hand-written reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import eagle.plan
import hawk
from eagle import arrays
from hawk.emit import host
from tests._hawk_kernels import CASES, TOLERANCE, Case, saxpy, written
from tests._util import rel_error

IDS = [case.name for case in CASES]


def _run_and_check(case: Case, planes: dict[str, np.ndarray], dtype: np.dtype) -> None:
    expected = case.reference({k: v.copy() for k, v in planes.items()})
    eagle.plan.auto(case.kernel).run(**planes)
    for name in written(case):
        assert planes[name].dtype == dtype
        assert rel_error(planes[name], expected[name]) < TOLERANCE[np.dtype(dtype)], name


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_kernel_matches_numpy(case: Case, dtype: type, rng: np.random.Generator) -> None:
    _run_and_check(case, case.make(rng, np.dtype(dtype)), np.dtype(dtype))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_host_arrays_are_written_in_place(case: Case, rng: np.random.Generator) -> None:
    planes = case.make(rng, np.dtype(np.float64))
    expected = case.reference({k: v.copy() for k, v in planes.items()})
    wrapped = {name: arrays.asarray(value) for name, value in planes.items()}
    eagle.plan.auto(case.kernel).run(**wrapped)
    for name in written(case):
        assert wrapped[name].numpy() is planes[name] or np.shares_memory(
            wrapped[name].numpy(), planes[name]
        )
        assert rel_error(planes[name], expected[name]) < 1e-12


def test_mixed_dtypes_compute_in_float64(rng: np.random.Generator) -> None:
    case = next(c for c in CASES if c.name == "contract")
    planes = case.make(rng, np.dtype(np.float64))
    planes["w"] = planes["w"].astype(np.float32)
    expected = case.reference({k: v.copy() for k, v in planes.items()})
    eagle.plan.auto(case.kernel).run(**planes)
    assert rel_error(planes["y"], expected["y"]) < 1e-12


def test_float32_output_of_float64_compute_is_rounded_once(rng: np.random.Generator) -> None:
    x = rng.standard_normal(100)
    y = np.full(100, np.nan, np.float32)
    a = rng.uniform(1, 2)
    y0 = rng.standard_normal(100).astype(np.float32)
    y[:] = y0
    eagle.plan.auto(saxpy).run(a=a, x=x, y=y)
    np.testing.assert_array_equal(y, (a * x + y0.astype(np.float64)).astype(np.float32))


def test_param_as_number_or_one_element_array(rng: np.random.Generator) -> None:
    x, y0 = rng.standard_normal(50), rng.standard_normal(50)
    plan = eagle.plan.auto(saxpy)
    for a in (1.5, np.float64(1.5), np.array([1.5]), np.array(1.5), 3):
        y = y0.copy()
        plan.run(a=a, x=x, y=y)
        np.testing.assert_allclose(y, np.asarray(a).item() * x + y0, rtol=1e-15)


def test_bound_host_plan_runs_each_launch(rng: np.random.Generator) -> None:
    x, y = rng.standard_normal(64), rng.standard_normal(64)
    start = y.copy()
    bound = eagle.plan.auto(saxpy).bind(a=2.0, x=x, y=y)
    for _ in range(3):
        bound.launch()
    # three rounded adds against one: allow a few ulp of the terms where they cancel
    np.testing.assert_allclose(y, start + 6.0 * x, rtol=1e-14, atol=1e-13 * np.abs(x).max())
    assert (bound.side, bound.device, bound.lanes) == ("host", None, 64)


def test_zero_lanes_run_and_add_nothing(rng: np.random.Generator) -> None:
    case = next(c for c in CASES if c.name == "histogram")
    counts, stats = rng.standard_normal(8), rng.standard_normal(3)
    before = counts.copy(), stats.copy()
    eagle.plan.auto(case.kernel).run(x=np.empty(0), lo=0.0, counts=counts, stats=stats)
    np.testing.assert_array_equal(counts, before[0])
    np.testing.assert_array_equal(stats, before[1])


def test_untaken_branch_reads_stay_inside_the_table(rng: np.random.Generator) -> None:
    @hawk.kernel
    def neighbour(t: hawk.Table, y: hawk.Mutable[hawk.Scalar]):
        i = hawk.math.sample_index()
        if i + 1 < 8:
            v = t.at(i + 1)
            y = 2.0 * v
        else:
            y = -1.0

    t = rng.standard_normal(8)
    y = np.full(8, np.nan)
    eagle.plan.auto(neighbour).run(t=t, y=y)
    np.testing.assert_array_equal(y, [*(2.0 * t[1:]), -1.0])


def test_an_output_stored_after_another_reads_its_old_value(rng: np.random.Generator) -> None:
    @hawk.kernel
    def swap(a: hawk.Mutable[hawk.Scalar], b: hawk.Mutable[hawk.Scalar]):
        a, b = b, a

    a, b = rng.standard_normal(10), rng.standard_normal(10)
    a0, b0 = a.copy(), b.copy()
    eagle.plan.auto(swap).run(a=a, b=b)
    np.testing.assert_array_equal(a, b0)
    np.testing.assert_array_equal(b, a0)


def test_program_source_is_vectorised_numpy() -> None:
    case = next(c for c in CASES if c.name == "contract")
    program = host.emit(case.kernel.ir, {"w": "float32", "f": "float32", "y": "float32"})
    assert program.arguments == ("w", "f", "y")
    # the loop over 16 rows runs a chunk of its iterations per pass (hawk/emit/_batch.py)
    assert "for first" in program.source and "_carry_rows(" in program.source
    assert "_np.where" not in program.source  # no branch, no select


@settings(max_examples=30, deadline=None)
@given(
    x=hnp.arrays(np.float64, st.integers(1, 40), elements=st.floats(-1e3, 1e3)),
    a=st.floats(-10, 10),
)
def test_saxpy_property(x: np.ndarray, a: float) -> None:
    y0 = np.linspace(-1, 1, x.size)
    y = y0.copy()
    eagle.plan.auto(saxpy).run(a=a, x=x, y=y)
    np.testing.assert_array_equal(y, a * x + y0)
