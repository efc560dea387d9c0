# ruff: noqa: F821, F841, UP037
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["k":2], which pyflakes reads as forward references (F821, UP037).
"""Device-side loops and branches on the device (run with ``nox -s gpu``)."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.plan
import hawk
from eagle import arrays, cuda
from eagle.gemm import CublasCaptureHandle, sgemm_params_for_arrays
from hawk import math as hm

pytestmark = pytest.mark.gpu

N = 4096
TOL = 1e-5


@hawk.kernel
def _moments(v: hawk.Scalar, w: hawk.Scalar, sums: hawk.Mutable[hawk.Table["k":2]]):
    sums.add(k=0, value=w * w)  # |A v|^2
    sums.add(k=1, value=v * w)  # v . A v, the Rayleigh quotient of the unit vector v


@hawk.kernel
def _normalise(w: hawk.Scalar, sums: hawk.Table["k":2], v: hawk.Mutable[hawk.Scalar]):
    v = w / hm.sqrt(sums.at(k=0))


@hawk.kernel
def _converge(
    sums: hawk.Table["k":2],
    tol: hawk.Param,
    lam: hawk.Mutable[hawk.Scalar],
    flag: hawk.Mutable[hawk.Scalar],
    passes: hawk.Mutable[hawk.Table["k":1]],
):
    new = sums.at(k=1)
    flag = 1.0 if hm.abs(new - lam) > tol * hm.abs(new) else 0.0
    lam = new
    passes.add(k=0, value=1.0)


@hawk.kernel
def _count(flag: hawk.Mutable[hawk.Scalar], passes: hawk.Mutable[hawk.Table["k":1]]):
    flag = 1.0  # never converges: only max_iterations stops the loop
    passes.add(k=0, value=1.0)


def _spiked_matrix(rng: np.random.Generator) -> np.ndarray:
    """A symmetric N x N matrix whose top eigenvalue (about 6.2) is well clear of the
    rest (within about [-2, 2]): a rank-one spike on a Wigner matrix."""
    x = rng.standard_normal((N, N))
    u = rng.standard_normal(N)
    u /= np.linalg.norm(u)
    return (x + x.T) / np.sqrt(2 * N) + 6.0 * np.outer(u, u)


def _unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(N)
    return (v / np.linalg.norm(v)).astype(np.float32)


def test_power_iteration_converges_in_one_launch(rng: np.random.Generator) -> None:
    a64 = _spiked_matrix(rng)
    a = arrays.asarray(a64.astype(np.float32), device="cuda:0")
    v = arrays.asarray(_unit(rng), device="cuda:0")
    w = arrays.full((N,), np.nan, "float32", "cuda:0")
    sums = arrays.full((2,), np.nan, "float32", "cuda:0")
    lam = arrays.zeros((1,), "float32", "cuda:0")
    flag = arrays.full((1,), np.nan, "float32", "cuda:0")
    passes = arrays.zeros((1,), "float32", "cuda:0")
    stream = cuda.Stream(non_blocking=True)

    operands = {"a": a, "b": v.reshape(N, 1), "out": w.reshape(N, 1)}
    params = sgemm_params_for_arrays(*operands.values())
    handle = CublasCaptureHandle(stream)
    handle.warm(params, operands)
    moments = eagle.plan.auto(_moments).bind(v=v, w=w, sums=sums)
    normalise = eagle.plan.auto(_normalise).bind(w=w, sums=sums, v=v)
    converge = eagle.plan.auto(_converge).bind(
        sums=sums, tol=TOL, lam=lam, flag=flag, passes=passes
    )
    with cuda.StreamCapturer(stream) as cap, cap.while_loop(flag, max_iterations=500):
        sums.fill(0.0, stream)
        handle.sgemm(params, operands)  # w = A v
        moments.launch(stream)
        normalise.launch(stream)  # v = w / |w|
        converge.launch(stream)  # flag = the eigenvalue still moves
    graph = cuda.Graph.from_captured(cap.captured)
    assert graph.node_types() == ["conditional"]
    launcher = graph.launcher().stream(stream)
    launcher.launch()
    launcher.synchronize()

    reference = np.linalg.eigvalsh(a64.astype(np.float32).astype(np.float64))[-1]
    count = int(passes.numpy()[0])
    assert flag.numpy()[0] == 0.0 and 2 < count < 500  # converged, on the device
    assert abs(lam.numpy()[0] - reference) / abs(reference) < 1e-4
    vector = v.numpy().astype(np.float64)
    residual = a64 @ vector - reference * vector
    assert np.linalg.norm(residual) / abs(reference) < 2e-2  # the vector converges as sqrt(tol)

    # a second launch starts over: its first pass runs although the flag is poisoned
    v.fill(1.0 / np.sqrt(N), stream)  # another unit start vector
    lam.fill(0.0, stream)
    passes.fill(0.0, stream)
    flag.fill(np.nan, stream)
    launcher.launch()
    launcher.synchronize()
    assert flag.numpy()[0] == 0.0 and 2 < passes.numpy()[0] < 500
    assert abs(lam.numpy()[0] - reference) / abs(reference) < 1e-4
    graph.destroy()
    handle.destroy()


def test_max_iterations_stops_a_loop_that_never_converges(rng: np.random.Generator) -> None:
    flag = arrays.full((1,), np.nan, "float32", "cuda:0")
    passes = arrays.zeros((1,), "float32", "cuda:0")
    count = eagle.plan.auto(_count).bind(flag=flag, passes=passes)
    stream = cuda.Stream(non_blocking=True)
    limit = int(rng.integers(3, 20))
    with cuda.StreamCapturer(stream) as cap, cap.while_loop(flag, max_iterations=limit):
        count.launch(stream)
    launcher = cuda.Graph.from_captured(cap.captured).launcher().stream(stream)
    launcher.launch()
    launcher.synchronize()
    assert passes.numpy()[0] == limit and flag.numpy()[0] == 1.0  # stopped by the guard
    launcher.launch()  # the pass counter starts afresh on every launch
    launcher.synchronize()
    assert passes.numpy()[0] == 2 * limit


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
def test_an_int_or_float_flag_counts_down(dtype: str, rng: np.random.Generator) -> None:
    start = int(rng.integers(2, 9))
    counter = arrays.full((1,), start, dtype, "cuda:0")
    ctype = {"int32": "int", "float32": "float", "float64": "double"}[dtype]
    source = (
        f'extern "C" __global__ void tick_{dtype}({ctype}* c, float* passes) '
        "{ c[0] -= 1; passes[0] += 1.0f; }"
    )
    tick = cuda.load_kernel(source, f"tick_{dtype}")
    passes = arrays.zeros((1,), "float32", "cuda:0")
    stream = cuda.Stream(non_blocking=True)
    with cuda.StreamCapturer(stream) as cap, cap.while_loop(counter):
        tick.launch(1, 1, [counter, passes], stream)
    graph = cuda.Graph.from_captured(cap.captured)
    graph.launcher().stream(stream).launch()
    stream.synchronize()
    assert passes.numpy()[0] == start and counter.numpy()[0] == 0
    graph.destroy()


def test_an_if_runs_its_block_only_when_the_flag_is_set(rng: np.random.Generator) -> None:
    flag = arrays.zeros((1,), "int32", "cuda:0")
    out = arrays.full((4,), np.nan, "float32", "cuda:0")
    value = float(rng.standard_normal())
    stream = cuda.Stream(non_blocking=True)
    with cuda.StreamCapturer(stream) as cap:
        out.fill(-1.0, stream)
        with cap.if_(flag):
            out.fill(value, stream)
    launcher = cuda.Graph.from_captured(cap.captured).launcher().stream(stream)
    launcher.launch()
    launcher.synchronize()
    assert np.all(out.numpy() == -1.0)
    flag.fill(1, stream)
    launcher.launch()
    launcher.synchronize()
    assert np.all(out.numpy() == np.float32(value))


def test_loops_nest(rng: np.random.Generator) -> None:
    outer_flag = arrays.full((1,), 1.0, "float32", "cuda:0")
    inner_flag = arrays.full((1,), 1.0, "float32", "cuda:0")
    passes = arrays.zeros((1,), "float32", "cuda:0")
    outer_passes = arrays.zeros((1,), "float32", "cuda:0")
    inner = eagle.plan.auto(_count).bind(flag=inner_flag, passes=passes)
    outer = eagle.plan.auto(_count).bind(flag=outer_flag, passes=outer_passes)
    outer_limit, inner_limit = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    stream = cuda.Stream(non_blocking=True)
    with (
        cuda.StreamCapturer(stream) as cap,
        cap.while_loop(outer_flag, max_iterations=outer_limit),
    ):
        with cap.while_loop(inner_flag, max_iterations=inner_limit):
            inner.launch(stream)
        outer.launch(stream)
    launcher = cuda.Graph.from_captured(cap.captured).launcher().stream(stream)
    launcher.launch()
    launcher.synchronize()
    assert outer_passes.numpy()[0] == outer_limit
    assert passes.numpy()[0] == outer_limit * inner_limit


def test_work_after_the_loop_sees_its_result() -> None:
    counter = arrays.full((1,), 5, "int32", "cuda:0")
    copy = arrays.full((1,), -7, "int32", "cuda:0")
    step = cuda.load_kernel('extern "C" __global__ void step(int* c) { c[0] -= 1; }', "step")
    read = cuda.load_kernel(
        'extern "C" __global__ void read(const int* c, int* out) { out[0] = c[0] + 100; }',
        "read",
    )
    stream = cuda.Stream(non_blocking=True)
    with cuda.StreamCapturer(stream) as cap:
        with cap.while_loop(counter):
            step.launch(1, 1, [counter], stream)
        read.launch(1, 1, [counter, copy], stream)
    graph = cuda.Graph.from_captured(cap.captured)
    assert sorted(graph.node_types()) == ["conditional", "kernel"]
    graph.launcher().stream(stream).launch()
    stream.synchronize()
    assert copy.numpy()[0] == 100


def test_a_failing_block_leaves_no_capture_open() -> None:
    flag = arrays.zeros((1,), "int32", "cuda:0")
    stream = cuda.Stream(non_blocking=True)
    with pytest.raises(KeyError), cuda.StreamCapturer(stream) as cap, cap.while_loop(flag):
        raise KeyError("body failed")
    assert not cuda.is_capturing(stream)
    with (
        pytest.raises(RuntimeError, match="being captured"),
        stream,
        cuda.StreamCapturer(stream) as cap,
        cap.while_loop(flag),
    ):
        arrays.zeros((4,), "float32", "cuda:0")  # allocating inside a body is refused
    assert not cuda.is_capturing(stream)
