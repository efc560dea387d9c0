# ruff: noqa: F841, SIM108, UP037, B007
# The regression kernels assign to their output planes (F841), keep the if statement the
# generator found (SIM108), name table axes in quotes (UP037) and loop a number of times
# without reading the index (B007).
"""Differential test: random hawk kernels, the host program against a per-lane Python run.

:func:`tests._kernel_grammar.kernels` draws kernels from the whole language (its module
docstring lists the grammar). Each one runs through ``eagle.plan.auto(k).run`` on float64
numpy planes and, separately, lane by lane as plain Python over the same body with a
per-lane ``hawk.math``. Both compute the same IEEE double operations in the same order, so
they agree to 1e-12 (relative, or absolute near zero), NaN and inf in the same lanes.

Accumulators (``Mutable[Table]`` planes added into with ``.add``) are summed in another
order on each side (lane by lane here; ``numpy.add.at``, chunks of loop iterations or
groups of lanes summed first in the host program), so each element is compared within
``atol + rtol * (|start| + the sum of |value| added into it)``.

The float32 tolerance of the device test (``tests/test_differential_gpu.py``) is checked
here on the host: the float32 program against the float64 program.

The reference backend (``backend="reference"``, a lane at a time) runs the same kernels,
in float64 and in each kernel's own mix of storage dtypes (float32, float16, bfloat16,
float64), against the host program. Where the host makes the same operations in the same
order, they agree bit for bit. Two things change the order: a loop the host runs a chunk of
iterations at a time sums its carries in another order, and every add into a table may be
summed otherwise. Then an output is compared on stable lanes within ``1e-12`` (float64
compute) or ``1e-4`` (float32 compute), widened to one unit in the last place of its
storage dtype. A table element is compared within ``(adds + 1) * eps`` of its magnitude,
``eps`` that of its storage dtype or of the compute dtype, whichever is larger.

The suite runs 300 kernels; ``EAGLE_GRAMMAR_KERNELS=1000`` runs more. Recorded on the
2-core development host: 1,000 kernels, all passing, in 109 s (300 kernels: 47 s). The
first 1,000-kernel runs found two host bugs, regression-tested at the end of this file.
"""

from __future__ import annotations

import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import eagle.plan
import hawk
from eagle.cuda.module import compile_cuda
from hawk import ir
from hawk import math as hm
from hawk.emit import compute_dtype, cuda
from hawk.emit._batch import batch
from tests._kernel_grammar import (
    GeneratedKernel,
    KernelLoader,
    disagreements,
    evaluate_per_lane,
    kernels,
    stable_lanes,
)

RTOL = ATOL = 1e-12
#: float32 against float64: |f32 - f64| <= F32_TOL * |f64| + F32_TOL (see the GPU test)
F32_TOL = 1e-4
#: the relative perturbation that decides which lanes are stable, per tolerance
DELTA = {RTOL: 1e-13, F32_TOL: 1e-5}

SETTINGS = settings(
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def loader(tmp_path_factory: pytest.TempPathFactory) -> KernelLoader:
    return KernelLoader(Path(tmp_path_factory.mktemp("generated_kernels")))


def run_host(
    loader: KernelLoader,
    generated: GeneratedKernel,
    planes: dict[str, np.ndarray],
    backend: str | None = None,
) -> dict[str, np.ndarray]:
    """The planes after a host run of ``generated`` over copies of ``planes``."""
    out = {name: values.copy() for name, values in planes.items()}
    loader.plan(generated.source, backend).run(**out)
    return out


def _explain(name: str, bad: np.ndarray, got: np.ndarray, want: np.ndarray, source: str) -> str:
    got, want = got.reshape(-1), want.reshape(-1)
    return f"{name} differs at {bad.tolist()}: {got[bad]} != {want[bad]}\n{source}"


@settings(SETTINGS, max_examples=300)
@given(generated=kernels())
def test_host_matches_per_lane(loader: KernelLoader, generated: GeneratedKernel) -> None:
    planes = generated.make_planes(np.float64)
    host = run_host(loader, generated, planes)
    reference = evaluate_per_lane(loader.load(generated.source), generated, planes)
    for name in generated.outputs:
        want = reference.outputs[name]
        bad = disagreements(host[name], want, RTOL, ATOL)
        assert bad.size == 0, _explain(name, bad, host[name], want, generated.source)
    for name in generated.accumulators:
        want = reference.accumulators[name]
        bad = disagreements(host[name], want, RTOL, ATOL, reference.magnitudes[name])
        assert bad.size == 0, _explain(name, bad, host[name], want, generated.source)


@settings(SETTINGS, max_examples=60)
@given(generated=kernels())
def test_float32_host_within_tolerance_of_float64(
    loader: KernelLoader, generated: GeneratedKernel
) -> None:
    """The float32 program stays within F32_TOL of the float64 program on stable lanes,
    and on the accumulator elements that only stable lanes add into (the same
    float32-rounded inputs on both)."""
    planes = generated.make_planes(np.float32)
    wide = {name: values.astype(np.float64) for name, values in planes.items()}
    single, double = run_host(loader, generated, planes), run_host(loader, generated, wide)
    module = loader.load(generated.source)
    reference = evaluate_per_lane(module, generated, wide)
    stable = stable_lanes(
        module, generated, wide, DELTA[F32_TOL], F32_TOL, F32_TOL, reference=reference
    )
    for name in generated.outputs:
        bad = disagreements(single[name], double[name], F32_TOL, F32_TOL)
        bad = bad[stable[bad]]
        assert bad.size == 0, _explain(name, bad, single[name], double[name], generated.source)
    for name in generated.accumulators:
        magnitude = reference.magnitudes[name]
        bad = disagreements(single[name], double[name], F32_TOL, F32_TOL, magnitude)
        bad = bad[reference.comparable(name, stable)[bad]]
        assert bad.size == 0, _explain(name, bad, single[name], double[name], generated.source)


@settings(SETTINGS, max_examples=40)
@given(generated=kernels())
def test_the_device_source_below_2_to_the_31_lanes_compiles(
    loader: KernelLoader, generated: GeneratedKernel
) -> None:
    """The CUDA C of a kernel emitted ``narrow`` (its ints that fit 32 bits written as
    ``int``, mixed with 64-bit ones) compiles; tests/test_differential_gpu.py runs it."""
    kernel = loader.load(generated.source).kernel
    emitted = cuda.emit(kernel.ir, {p.name: "float64" for p in kernel.planes}, narrow=True)
    compile_cuda(emitted.source, name=emitted.name, arch="sm_90")


@settings(SETTINGS, max_examples=int(os.environ.get("EAGLE_GRAMMAR_KERNELS", "300")))
@given(generated=kernels())
def test_reference_backend_matches_host(loader: KernelLoader, generated: GeneratedKernel) -> None:
    """The reference backend against the host program, in float64 and in the kernel's own
    storage dtypes (see the module docstring for what is compared how)."""
    kernel = loader.load(generated.source).kernel
    exact = not any(isinstance(node, ir.Loop) and batch(node) for node in ir.walk(kernel.ir))
    for dtype in (np.float64, None) if generated.mixed else (np.float64,):
        planes = generated.make_planes(dtype)
        host = run_host(loader, generated, planes)
        lanes = run_host(loader, generated, planes, "reference")
        _compare_to_host(loader, generated, planes, host, lanes, exact)


def _compare_to_host(
    loader: KernelLoader,
    generated: GeneratedKernel,
    planes: dict[str, np.ndarray],
    host: dict[str, np.ndarray],
    lanes: dict[str, np.ndarray],
    exact: bool,
) -> None:
    wide = {name: values.astype(np.float64) for name, values in planes.items()}
    module = loader.load(generated.source)
    tolerance = (
        RTOL if compute_dtype({n: v.dtype for n, v in planes.items()}) == np.float64 else F32_TOL
    )
    stable = np.ones(generated.lanes, bool)
    if not exact:
        reference = evaluate_per_lane(module, generated, wide)
        stable = stable_lanes(
            module, generated, wide, DELTA[tolerance], tolerance, tolerance, reference=reference
        )
    for name in generated.outputs:
        got, want = lanes[name].astype(np.float64), host[name].astype(np.float64)
        if exact:
            assert np.array_equal(got, want, equal_nan=True), _explain(
                name, np.flatnonzero(got != want), got, want, generated.source
            )
            continue
        widened = max(tolerance, _eps(planes[name].dtype))
        bad = disagreements(got, want, widened, widened)
        bad = bad[stable[bad]]
        assert bad.size == 0, _explain(name, bad, got, want, generated.source)
    if generated.accumulators:
        reference = evaluate_per_lane(module, generated, wide)
    for name in generated.accumulators:
        got, want = lanes[name].astype(np.float64), host[name].astype(np.float64)
        eps = max(_eps(planes[name].dtype), tolerance if not exact else _eps(host[name].dtype))
        counts = reference.adds[name].sum(axis=0) + 1
        bad = disagreements(got, want, eps, eps, reference.magnitudes[name] * counts)
        if not exact:
            bad = bad[reference.comparable(name, stable)[bad]]
        assert bad.size == 0, _explain(name, bad, got, want, generated.source)


def _eps(dtype: np.dtype) -> float:
    """One unit in the last place, relative, of ``dtype``."""
    return float(ml_dtypes.finfo(dtype).eps)


@pytest.mark.parametrize("tolerance", [RTOL, F32_TOL])
def test_most_lanes_are_stable(loader: KernelLoader, tolerance: float) -> None:
    """The stability filter of the device comparison keeps almost every lane, so it cannot
    hide a disagreement that is more than a rounding accident."""
    examples: list[GeneratedKernel] = []

    @settings(SETTINGS, max_examples=40)
    @given(generated=kernels())
    def collect(generated: GeneratedKernel) -> None:
        examples.append(generated)

    collect()
    total = kept = 0
    for generated in examples:
        planes = generated.make_planes(np.float64)
        module = loader.load(generated.source)
        stable = stable_lanes(module, generated, planes, DELTA[tolerance], tolerance, tolerance)
        total, kept = total + stable.size, kept + int(stable.sum())
    assert kept >= 0.95 * total


def test_generated_kernels_cover_the_grammar(loader: KernelLoader) -> None:
    """The generator reaches every construct it is meant to (over a fixed sample)."""
    sources: list[str] = []

    @settings(SETTINGS, max_examples=200)
    @given(generated=kernels())
    def collect(generated: GeneratedKernel) -> None:
        sources.append(generated.source.split("def per_lane")[0])

    collect()
    text = "\n".join(sources)
    constructs = [
        "hawk.Param", "hawk.Table,", 'hawk.Table["', "y1:", "hm.split_index(",
        "hm.sample_index()", "int(", "float(", " // ", " % ", " / ", " ** ", "+=", "-=",
        "hm.exp(", "hm.log(", "hm.sqrt(", "hm.sin(", "hm.cos(", "hm.tanh(", "hm.abs(",
        "hm.minimum(", "hm.maximum(", "hm.pow(", " if (", "elif ", "else:", " and ", " or ",
        "(not ", "for ", ", -1):", ", -2):", "        for ", "hawk.Mutable[hawk.Table]",
        'hawk.Mutable[hawk.Table["bin":', ".add(bin=", ".add(hm.", "value=hm.",
        "hm.split_index(32)", "hm.sample_index() // ",
        "hm.sample_index() % ", "            h0.add(", " * 4611686018427387904 + ", " ** 70)",
        " ** 63)", "(-(hm.abs((",
    ]  # fmt: skip
    missing = [c for c in constructs if c not in text]
    assert not missing


# -- regressions found by the generator ---------------------------------------------------


@hawk.kernel
def uniform_select_then_cast(p: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    k = 0 if p > 0.0 else hm.sample_index()
    y = float(k)


@hawk.kernel
def uniform_if_then_cast(p: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    if p > 0.0:
        k = 0
    else:
        k = hm.sample_index()
    y = k + 0.5


@pytest.mark.parametrize(
    ("kernel", "expected"), [(uniform_select_then_cast, 0.0), (uniform_if_then_cast, 0.5)]
)
def test_uniform_choice_of_an_int_then_cast(kernel: hawk.Kernel, expected: float) -> None:
    y = np.full(3, np.nan)
    eagle.plan.auto(kernel).run(p=np.array([1.0]), x=np.zeros(3), y=y)
    assert np.array_equal(y, np.full(3, expected))


@hawk.kernel
def add_per_iteration(h: hawk.Mutable[hawk.Table["bin":2]], y: hawk.Mutable[hawk.Scalar]):
    for i in range(-3, -1):
        h.add(bin=(hm.sample_index() + 1) % 2, value=hm.sample_index())
    y = 0.0


@hawk.kernel
def add_per_iteration_by_runs(h: hawk.Mutable[hawk.Table["bin":2]], y: hawk.Mutable[hawk.Scalar]):
    for i in range(-3, -1):
        h.add(bin=hm.sample_index() // 16, value=hm.sample_index())
    y = 0.0


@pytest.mark.parametrize(
    ("kernel", "bins"),
    [
        (add_per_iteration, (np.arange(32) + 1) % 2),
        (add_per_iteration_by_runs, np.arange(32) // 16),
    ],
)
def test_a_loop_adds_once_per_iteration(kernel: hawk.Kernel, bins: np.ndarray) -> None:
    """A loop whose add depends on neither its index nor a carry adds once per iteration
    (not once per chunk of iterations)."""
    h = np.zeros(2)
    eagle.plan.auto(kernel).run(h=h, y=np.zeros(32))
    assert np.array_equal(h, 2 * np.bincount(bins, weights=np.arange(32.0), minlength=2))


@hawk.kernel
def masked_add_of_a_carry(
    x: hawk.Scalar, h: hawk.Mutable[hawk.Table["bin":2]], y: hawk.Mutable[hawk.Scalar]
):
    if x < 0.0:
        for i in range(-3, 1, 2):
            h.add(bin=hm.sample_index() // 16, value=y / 0.5)
            y = i


def test_a_masked_add_of_a_carry_that_became_uniform() -> None:
    """In a varying branch, a loop adds a carry that its first iteration set to a uniform
    value: the masked add takes it for every lane of the mask."""
    x, h, y = np.linspace(-1.0, 1.0, 32), np.zeros(2), np.full(32, 0.25)
    eagle.plan.auto(masked_add_of_a_carry).run(x=x, h=h, y=y)
    neg = x < 0.0
    want = np.bincount(np.arange(32)[neg] // 16, minlength=2) * (0.25 / 0.5 + -3 / 0.5)
    assert np.array_equal(h, want)


@hawk.kernel
def add_at_a_uniform_choice(
    p: hawk.Param, x: hawk.Scalar, h: hawk.Mutable[hawk.Table], y: hawk.Mutable[hawk.Scalar]
):
    for i in range(3):
        h.add(int(x if p > 0.0 else 1.0), value=-1.0)
    k = hm.sample_index() if p > 0.0 else 2
    h.add(k, value=x)
    y = x


@pytest.mark.parametrize("backend", ["numpy", "reference"])
def test_an_add_at_an_index_a_uniform_condition_chose_adds_once_per_lane(backend: str) -> None:
    """A lane index that is one number at run time (a uniform condition chose its uniform
    side) still adds once per lane: in a loop run a chunk at a time, and beside a value
    that varies (found by the reference backend)."""
    x, h = np.linspace(1.0, 2.0, 16), np.zeros(4)
    eagle.plan.auto(add_at_a_uniform_choice, backend=backend).run(p=-1.0, x=x, h=h, y=x.copy())
    np.testing.assert_allclose(h, [0.0, -48.0, x.sum(), 0.0], rtol=1e-15)


@hawk.kernel
def add_under_a_uniform_choice(
    p: hawk.Param, x: hawk.Scalar, h: hawk.Mutable[hawk.Table], y: hawk.Mutable[hawk.Scalar]
):
    k = 3.0 if p > 0.0 else x
    if k < 5.0:
        h.add(hm.sample_index() % 2, value=x)
    y = x


@pytest.mark.parametrize("backend", ["numpy", "reference"])
def test_a_branch_on_a_condition_a_uniform_choice_made_adds_per_lane(backend: str) -> None:
    """A varying condition that is one number at run time masks every lane (found by the
    reference backend)."""
    x, h = np.linspace(1.0, 2.0, 16), np.zeros(2)
    eagle.plan.auto(add_under_a_uniform_choice, backend=backend).run(p=1.0, x=x, h=h, y=x.copy())
    np.testing.assert_allclose(h, [x[0::2].sum(), x[1::2].sum()], rtol=1e-15)
