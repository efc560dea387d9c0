"""Limits users meet: kernel names that hawk's own C identifiers use, and long
expressions (host runs and NVRTC compiles; the device runs are in test_limits_gpu.py)."""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
import hawk.diff
from eagle.cuda import compile_cuda
from hawk import ir
from hawk._expressions import DEPTH, GUARDED_DEPTH
from hawk.diff import RERUN_WARNING
from hawk.emit import cuda
from hawk.emit._cuda_helpers import RESERVED, SUM_PREFIX
from tests._generated import horner, load, long_sum, scale_kernel
from tests._hawk_kernels import CASES, contract, signature
from tests._util import rel_error


@pytest.mark.parametrize("name", ["pack", "f16", "bf16", "widen", "rec", "fail"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_kernel_named_like_a_helper_compiles(tmp_path: Path, name: str, dtype: str) -> None:
    kernel = scale_kernel(tmp_path, name)
    emitted = cuda.emit(kernel.ir, {"x": dtype, "y": dtype})
    assert emitted.name == f"hawk_kernel_{name}"
    assert f"__global__ void hawk_kernel_{name}(" in emitted.source
    compile_cuda(emitted.source, name=emitted.name, arch="sm_90")
    x = np.arange(4.0)
    y = np.zeros(4)
    eagle.plan.auto(kernel).run(x=x, y=y)
    np.testing.assert_array_equal(y, 2 * x)


def test_other_names_keep_their_symbol(tmp_path: Path) -> None:
    kernel = scale_kernel(tmp_path, "packed")
    assert cuda.emit(kernel.ir, {"x": "float32", "y": "float32"}).name == "hawk_packed"


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_every_hawk_identifier_emitted_is_reserved(dtype: str) -> None:
    for case in CASES:
        emitted = cuda.emit(case.kernel.ir, signature(case, dtype))
        used = set(re.findall(r"\bhawk_\w+", emitted.source)) - {emitted.name}
        sums = {name for name in used if name.startswith(SUM_PREFIX)}  # reserved as a family
        assert used - sums <= RESERVED, (case.name, used - sums - RESERVED)


TERMS = 2000  # compiles on CPython 3.11; nests far deeper than its recursion limit


def test_a_long_sum_runs_on_the_host(tmp_path: Path, rng: np.random.Generator) -> None:
    kernel = long_sum(tmp_path, TERMS, reads=True)
    assert all(_depth(stmt) <= DEPTH + 2 for stmt in kernel.ir.body)
    x, w = rng.standard_normal(50), rng.standard_normal(TERMS)
    y = np.full(50, np.nan)
    plan = eagle.plan.auto(kernel)
    plan.run(x=x, w=w, y=y)
    # a sum of 2,000 terms may nearly cancel: bound the error by the terms' sizes
    total, size = math.fsum(w), float(np.abs(w).sum())
    assert np.abs(y - x * total).max() <= 1e-12 * size * np.abs(x).max()
    compile(plan.source("host"), "<program>", "exec")  # within Python's parser's limits
    str(kernel.ir)
    x_bar, w_bar = np.zeros(50), np.zeros(TERMS)
    eagle.diff.reverse(plan).run(x=x, w=w, y_bar=np.ones(50), x_bar=x_bar, w_bar=w_bar)
    assert np.abs(x_bar - total).max() <= 1e-12 * size
    assert rel_error(w_bar, np.full(TERMS, x.sum())) < 1e-12


def test_a_long_sum_compiles_for_the_device(tmp_path: Path) -> None:
    kernel = long_sum(tmp_path, TERMS)
    for ir_ in (kernel.ir, hawk.diff.vjp(kernel).ir):
        emitted = cuda.emit(ir_, {p.name: "float32" for p in ir_.planes})
        compile_cuda(emitted.source, name=emitted.name, arch="sm_90")


def test_a_long_sum_of_table_reads_compiles_for_the_device(tmp_path: Path) -> None:
    """Its 2,000 reads at constant indices are checked at launch, and its long body is
    emitted once per loop, neither vectorised nor unrolled: NVRTC takes seconds (it ran
    for more than 25 minutes with a clamp per read in 16 copies)."""
    kernel = long_sum(tmp_path, TERMS, reads=True)
    emitted = cuda.emit(kernel.ir, {"x": "float32", "w": "float32", "y": "float32"})
    assert len(emitted.launch_checks) == TERMS and "hawk_clamp" not in emitted.source
    assert emitted.width == 1 and "#pragma unroll 1\n" in emitted.source
    assert "#pragma unroll 4" not in emitted.source
    compile_cuda(emitted.source, name=emitted.name, arch="sm_90")


def test_a_long_product_and_conjunction_run(tmp_path: Path) -> None:
    product = " * ".join(["x"] * TERMS)
    both = " and ".join(f"x > {i}.0" for i in range(TERMS))
    source = (
        "import hawk\n\n\n@hawk.kernel\n"
        "def chains(x: hawk.Scalar, p: hawk.Mutable[hawk.Scalar], c: hawk.Mutable[hawk.Scalar]):\n"
        f"    p = {product}\n"
        f"    c = 1.0 if {both} else 0.0\n"
    )
    kernel = load(tmp_path, "chains", source, "chains")
    x = np.array([1.0001, 0.5, 2500.0])
    p, c = np.zeros(3), np.zeros(3)
    eagle.plan.auto(kernel).run(x=x, p=p, c=c)
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(p, x**TERMS, rtol=1e-12)
    np.testing.assert_array_equal(c, [0.0, 0.0, 1.0])


def test_a_long_side_of_a_conditional_runs(tmp_path: Path) -> None:
    terms = " + ".join(f"x * {i}.0" for i in range(TERMS))
    source = (
        "import hawk\n\n\n@hawk.kernel\n"
        "def side(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):\n"
        f"    y = x if x > 0.0 else {terms}\n"
    )
    kernel = load(tmp_path, "side", source, "side")
    x = np.array([-1.0, 2.0])
    y = np.zeros(2)
    eagle.plan.auto(kernel).run(x=x, y=y)
    np.testing.assert_array_equal(y, [-sum(range(TERMS)), 2.0])


def _depth(node: ir.Stmt | ir.Expr) -> int:
    """How deep the expressions of ``node`` nest."""
    depths = {}
    for item in reversed(list(ir.walk(node))):
        children = item.children()
        below = [depths[id(c)] for c in children if isinstance(c, ir.Expr)]
        depths[id(item)] = 1 + max(below, default=0) if isinstance(item, ir.Expr) else 0
    return max(depths.values())


def test_the_adjoint_of_a_long_rerun_loop_warns_its_cost(tmp_path: Path) -> None:
    long = horner(tmp_path, 3200)
    with pytest.warns(hawk.AdjointCostWarning) as caught:
        hawk.diff.vjp(long)
    (warning,) = caught
    text = str(warning.message)
    assert "kernel 'horner': the adjoint of the loop 'for t in range(0, 3200, 1)'" in text
    assert "needs the carried 'p'" in text and "5,121,600 evaluations" in text
    assert "1,600 times" in text and warning.filename == __file__
    assert isinstance(warning.message, UserWarning)
    x, c, x_bar = np.array([0.5]), np.ones(3200), np.zeros(1)
    adjoint = eagle.diff.reverse(eagle.plan.auto(horner(tmp_path, 400)))
    with pytest.warns(hawk.AdjointCostWarning, match="range.0, 400, 1.' reruns it") as caught:
        adjoint.run(x=x, c=c[:400], y_bar=np.ones(1), x_bar=x_bar)  # warns, and runs
    assert caught[0].filename == __file__  # the user's line, not eagle's
    assert x_bar[0] == pytest.approx(sum(t * 0.5 ** (t - 1) for t in range(1, 400)))


def test_short_or_tape_free_loops_do_not_warn(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hawk.diff.vjp(horner(tmp_path, RERUN_WARNING - 1))
        hawk.diff.vjp(contract)  # a fold whose gradient needs no carried value


def test_a_long_side_that_reads_tables_is_refused_by_name(tmp_path: Path) -> None:
    def side(terms: int) -> str:
        text = " + ".join(f"w.at({i}) * x" for i in range(terms))
        return (
            "import hawk\n\n\n@hawk.kernel\n"
            "def reads(x: hawk.Scalar, w: hawk.Table, y: hawk.Mutable[hawk.Scalar]):\n"
            f"    y = x if x > 0.0 else {text}\n"
        )

    with pytest.raises(hawk.HawkError, match="assign it to a variable before the conditional"):
        load(tmp_path, "deep", side(GUARDED_DEPTH), "reads")
    kernel = load(tmp_path, "shallow", side(GUARDED_DEPTH - 10), "reads")
    y = np.zeros(2)
    eagle.plan.auto(kernel).run(x=np.array([-1.0, 1.0]), w=np.ones(GUARDED_DEPTH - 10), y=y)
    np.testing.assert_array_equal(y, [-(GUARDED_DEPTH - 10), 1.0])
