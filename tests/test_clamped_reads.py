"""A checked table read on the device: an unconditional load at a clamped index, then a
select (the emitted CUDA, compiled with NVRTC here; run in tests/test_clamped_reads_gpu.py)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings

import eagle.plan
import hawk
from eagle.cuda.module import compile_cuda
from hawk.emit import cuda
from tests import _bounds_kernels as bk
from tests import _clamped_kernels as ck
from tests._kernel_grammar import GeneratedKernel, KernelLoader, kernels


def _body(kernel: hawk.Kernel, dtype: str = "float32", **options: bool) -> list[str]:
    """The lines of the emitted ``__global__`` function (the helpers left out)."""
    source = cuda.emit(kernel.ir, {p.name: dtype for p in kernel.planes}, **options).source
    return source[source.index('extern "C"') :].splitlines()


def _line(lines: list[str], pattern: str) -> int:
    """The index of the one line matching ``pattern``."""
    found = [k for k, line in enumerate(lines) if re.fullmatch(pattern, line.strip())]
    assert len(found) == 1, (pattern, "\n".join(lines))
    return found[0]


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip())


def test_a_gather_loads_at_its_clamped_index_with_no_branch() -> None:
    lines = _body(bk.lookup)
    text = "\n".join(lines)
    assert "[&]" not in text and "hawk_in(" not in text
    clamp = _line(lines, r"const long long (cx\d+) = hawk_clamp\((ix\d+), 3LL, hawk_rec, \d+LL, "
                         r"lane\);")  # fmt: skip
    load = _line(lines, r"const float rd\d+ = p_t\[cx\d+ \* 4LL \+ 1LL\];")
    select = _line(lines, r"const float v\d+_y = \(\(cx\d+ == ix\d+\) \? rd\d+ : \(float\)0\);")
    assert clamp < load < select and _depth(lines[clamp]) == _depth(lines[select])
    # a failing index is recorded by the clamp itself: the lane loop keeps no failure state
    assert "hawk_fail(" not in text


def test_a_flat_read_loads_only_from_a_table_that_is_not_empty() -> None:
    lines = _body(bk.flat, "float64")
    _line(lines, r"const long long cx\d+ = hawk_clamp\(ix\d+, n_t, hawk_rec, \d+LL, lane\);")
    _line(lines, r"const double rd\d+ = n_t > 0LL \? p_t\[cx\d+\] : \(double\)0;")


def test_each_checked_axis_is_clamped() -> None:
    lines = _body(bk.lookup2)
    _line(lines, r"const long long cx\d+ = hawk_clamp\(ix\d+, 3LL, hawk_rec, \d+LL, .*")
    _line(lines, r"const long long cx\d+ = hawk_clamp\(ix\d+, 4LL, hawk_rec, \d+LL, .*")
    _line(lines, r"const float rd\d+ = p_t\[cx\d+ \* 4LL \+ cx\d+\];")
    _line(lines, r".* = \(\(cx\d+ == ix\d+ && cx\d+ == ix\d+\) \? rd\d+ : \(float\)0\);")


def test_axes_proved_or_checked_at_bind_are_not_clamped() -> None:
    # row is a loop index and unit = lane % U (proved); sample = lane // U is checked
    # once, at bind (hawk.emit.checks.LaneCheck)
    text = "\n".join(_body(bk.contract))
    assert "hawk_clamp(" not in text
    assert re.search(r"p_f\[v\d+_r \* 12LL \+ v\d+_sample\]", text)


@pytest.mark.parametrize("kernel", [bk.add_named, bk.add_flat, bk.add_uniform, bk.guarded_add])
def test_adds_keep_their_predicate(kernel: hawk.Kernel) -> None:
    text = "\n".join(_body(kernel))
    assert re.search(r"if \(hawk_in\(ix\d+, [^)]*\)\) (atomicAdd|hawk_add_uniform)\(", text)
    assert "hawk_clamp" not in text


@pytest.mark.parametrize("kernel", [bk.guarded_select, bk.guarded_logic])
def test_a_read_on_a_lazy_side_is_made_in_an_if_block(kernel: hawk.Kernel) -> None:
    lines = _body(kernel)
    clamp = _line(lines, r"const long long cx\d+ = hawk_clamp\(v\d+_k, 4LL, .*")
    opened = max(k for k in range(clamp) if lines[k].lstrip().startswith("if ("))
    closed = next(k for k in range(clamp, len(lines)) if lines[k].strip() in ("}", "} else {"))
    assert _depth(lines[clamp]) == _depth(lines[opened]) + 4 == _depth(lines[closed]) + 4
    assert lines[opened].rstrip().endswith("{") and "hawk_rec" in lines[clamp]


def test_a_read_in_a_condition_is_made_by_every_lane() -> None:
    lines = _body(ck.cond_read)
    clamp = _line(lines, r"const long long cx\d+ = hawk_clamp\(.*")
    assert not any(line.lstrip().startswith("if (") for line in lines[:clamp])
    _line(lines, r"const float v\d+_y = \(\(\(\(cx\d+ == ix\d+\) \? rd\d+ : \(float\)0\) > "
                 r"0\.0f\) \? 1\.0f : 2\.0f\);")  # fmt: skip


def test_nested_lazy_reads_agree_with_the_per_lane_values() -> None:
    t, u = np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 20.0])
    i = np.array([0.0, 3.0, 4.0, 5.0, 6.0, -1.0, 9.0])
    y = np.zeros(i.size)
    eagle.plan.auto(ck.nested).run(t=t, u=u, i=i, y=y)
    assert np.array_equal(y, 3.0 * np.array([1.0, 4.0, 10.0, 20.0, -1.0, -1.0, -1.0]))


def test_a_uniform_read_is_clamped_in_both_lane_loops() -> None:
    text = "\n".join(_body(ck.scaled))
    assert "hawk_pack" in text and text.count("hawk_clamp(") == 2


@pytest.mark.parametrize(
    "kernel", [bk.divide, bk.add_twice, bk.contract], ids=["division", "adds", "unchecked"]
)
def test_kernels_without_a_checked_read_have_no_clamp(kernel: hawk.Kernel) -> None:
    checks = kernel is not bk.contract
    source = cuda.emit(kernel.ir, {p.name: "float32" for p in kernel.planes}, checks=checks)
    assert "hawk_clamp" not in source.source


@pytest.mark.parametrize("kernel", [ck.scaled, ck.nested, ck.cond_read])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_the_kernels_compile(kernel: hawk.Kernel, dtype: str) -> None:
    emitted = cuda.emit(kernel.ir, {p.name: dtype for p in kernel.planes})
    assert compile_cuda(emitted.source, name=emitted.name, arch="sm_90")


@pytest.fixture(scope="module")
def loader(tmp_path_factory: pytest.TempPathFactory) -> KernelLoader:
    return KernelLoader(Path(tmp_path_factory.mktemp("clamped_kernels")))


@settings(
    deadline=None,
    derandomize=True,
    max_examples=20,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
@given(generated=kernels())
def test_generated_kernels_compile(loader: KernelLoader, generated: GeneratedKernel) -> None:
    kernel = loader.load(generated.source).kernel
    emitted = cuda.emit(kernel.ir, {p.name: "float64" for p in kernel.planes})
    assume("hawk_clamp(" in emitted.source)  # a kernel with a checked read
    assert compile_cuda(emitted.source, name=emitted.name, arch="sm_90")
