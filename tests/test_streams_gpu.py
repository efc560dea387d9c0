"""Where eagle's work goes on the device, and the cuBLAS handles that follow streams:
torch's and CuPy's current streams without a synchronize, the CUDA default stream for
eagle's own arrays, ``plan.run`` and the torch op inside ``torch.cuda.graph`` (a mixed
graph with a routed product included), and per-stream handles that go with their
streams (run with ``nox -s gpu`` or ``python -m pytest -m gpu``)."""

from __future__ import annotations

import asyncio
import gc

import numpy as np
import pytest

import eagle.plan
from eagle import arrays, cuda
from eagle.cuda._runtime import cudart
from eagle.cuda.stream import launch_stream
from eagle.gemm import handles, matmul_step, release_handles
from tests import _torch_kernels as k

pytestmark = pytest.mark.gpu


def _relative_error(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def _busy_then_ones(torch, n: int):
    """A tensor torch sets to 1 behind a long kernel on its current stream."""
    x = torch.zeros(n, device="cuda")
    torch.cuda._sleep(200_000_000)  # keep the stream busy, so a race would read zeros
    x.fill_(1.0)
    return x


def test_plan_run_on_torch_tensors_is_ordered_on_torch_stream_both_ways():
    torch = pytest.importorskip("torch")
    plan = eagle.plan.auto(k.affine)
    side = torch.cuda.Stream()
    for stream in (torch.cuda.current_stream(), side):
        for wrap in (lambda t: t, arrays.asarray):
            with torch.cuda.stream(stream):
                x = _busy_then_ones(torch, 1 << 20)
                y = torch.full_like(x, float("nan"))
                plan.run(x=wrap(x), a=2.0, b=1.0, y=wrap(y))
                y.mul_(2.0)  # torch's later work runs after eagle's
            stream.synchronize()
            assert torch.all(y == 6.0), "eagle ran out of order with torch's stream"


def test_eagle_arrays_use_the_default_stream_and_with_stream_overrides(rng):
    plan = eagle.plan.auto(k.affine)
    values = rng.standard_normal(4096).astype(np.float32)
    x = arrays.asarray(values, device="cuda:0")
    y = arrays.full(4096, np.nan, "float32", "cuda:0")
    assert cuda.current_stream().ptr() == 0 and launch_stream([x, y]) == 0
    plan.run(x=x, a=2.0, b=1.0, y=y)
    assert _relative_error(y.numpy(), 2.0 * values.astype(np.float64) + 1.0) < 1e-6
    stream = cuda.Stream(non_blocking=True)
    with stream:
        assert launch_stream([x, y]) == stream.ptr()
        y.fill(np.nan)
        plan.run(x=x, a=3.0, b=0.0, y=y)
        stream.synchronize()
        assert _relative_error(y.numpy(), 3.0 * values.astype(np.float64)) < 1e-6


def test_plan_run_on_cupy_arrays_goes_to_cupys_stream(rng):
    cp = pytest.importorskip("cupy")
    values = rng.standard_normal(4096).astype(np.float32)
    x, y = cp.asarray(values), cp.full(4096, np.nan, np.float32)
    with cp.cuda.Stream(non_blocking=True) as stream:
        assert launch_stream([x]) == stream.ptr
        plan = eagle.plan.auto(k.affine)
        plan.run(x=x, a=2.0, b=1.0, y=y)
        y *= 2.0
        stream.synchronize()
    assert _relative_error(cp.asnumpy(y), 4.0 * values.astype(np.float64) + 2.0) < 1e-6


def _warm_then_capture(torch, step, warmups: int = 3):
    """torch's recipe: warm up on a side stream, capture on that same stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    used = cuda.default_pool().used_bytes()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        result = step()
    assert cuda.default_pool().used_bytes() == used  # nothing eagle allocated in the capture
    return graph, result


@pytest.mark.usefixtures("collector_paused")
def test_asyncio_tasks_launch_on_their_own_with_stream(rng):
    """Blocks of ``with stream:`` belong to the task that opens them: two tasks whose
    blocks overlap each launch on their own stream, and a third on the default."""
    plan = eagle.plan.auto(k.affine)
    values = rng.standard_normal(4096).astype(np.float32)
    x = arrays.asarray(values, device="cuda:0")
    outputs = [arrays.full(4096, np.nan, "float32", "cuda:0") for _ in range(3)]
    streams = [cuda.Stream(non_blocking=True), cuda.Stream(non_blocking=True), None]

    async def launch(index: int) -> int:
        await asyncio.sleep(0.01 * index)
        if streams[index] is None:
            await asyncio.sleep(0.01)
            bound = plan.bind(x=x, a=float(index + 1), b=0.0, y=outputs[index])
            bound.launch()
            return bound.stream()
        with streams[index]:
            await asyncio.sleep(0.02)
            bound = plan.bind(x=x, a=float(index + 1), b=0.0, y=outputs[index])
            bound.launch()
            return bound.stream()

    async def three() -> list[int]:
        return await asyncio.gather(*(launch(index) for index in range(3)))

    used = asyncio.run(three())
    assert used == [streams[0].ptr(), streams[1].ptr(), 0]
    cudart.cudaDeviceSynchronize()
    for index, y in enumerate(outputs):
        want = (index + 1) * values.astype(np.float64)
        assert _relative_error(y.numpy(), want) < 1e-6


def test_plan_run_with_numeric_params_is_recorded_into_a_torch_graph():
    torch = pytest.importorskip("torch")
    plan = eagle.plan.auto(k.affine)
    x = torch.randn(1 << 16, device="cuda")
    y = torch.full_like(x, float("nan"))
    graph, _ = _warm_then_capture(torch, lambda: plan.run(x=x, a=2.0, b=-1.0, y=y))
    fresh = torch.randn_like(x)
    x.copy_(fresh)
    y.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    want = 2.0 * fresh.double().cpu().numpy() - 1.0
    assert _relative_error(y.cpu().numpy(), want) < 1e-6


def test_a_run_on_another_stream_leaves_an_earlier_runs_numbers_alone():
    torch = pytest.importorskip("torch")
    plan = eagle.plan.auto(k.affine)
    x = torch.randn(1 << 16, device="cuda")
    y = torch.full_like(x, float("nan"))
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(first):
        plan.run(x=x, a=1.0, b=0.0, y=y)  # the binding, its numbers written on `first`
        torch.cuda.synchronize()
        torch.cuda._sleep(200_000_000)  # the next run waits on `first` behind this
        plan.run(x=x, a=3.0, b=0.0, y=y)
    with torch.cuda.stream(second):
        plan.run(x=x, a=-5.0, b=0.0, y=y)  # the same planes: runs at once, on `second`
    torch.cuda.synchronize()
    # the run queued on `first` ran last, and with its own number
    assert _relative_error(y.cpu().numpy(), 3.0 * x.double().cpu().numpy()) < 1e-6


def test_runs_on_two_streams_with_different_numbers_each_keep_their_own(rng):
    torch = pytest.importorskip("torch")
    from tests._hawk_kernels import saxpy

    plan = eagle.plan.auto(saxpy)  # y = a * x + y
    values = rng.standard_normal(1 << 16)
    x = torch.tensor(values, device="cuda")
    y = torch.zeros_like(x)
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(first):
        plan.run(a=0.0, x=x, y=y)  # the binding both streams' runs reuse
        torch.cuda.synchronize()
        torch.cuda._sleep(200_000_000)  # the next run waits on `first` behind this
        plan.run(a=3.0, x=x, y=y)
    with torch.cuda.stream(second):
        plan.run(a=-5.0, x=x, y=y)  # runs at once, while 3.0 waits on `first`
        early = y.clone()
    second.synchronize()
    torch.cuda.synchronize()
    assert len(plan._bindings) == 1
    assert _relative_error(early.cpu().numpy(), -5.0 * values) < 1e-14
    assert _relative_error(y.cpu().numpy(), (3.0 - 5.0) * values) < 1e-14  # each its own


@pytest.mark.usefixtures("collector_paused")
def test_a_mixed_graph_of_torch_hawk_a_routed_product_and_torch_replays():
    torch = pytest.importorskip("torch")
    shift = eagle.plan.auto(k.affine)
    product = eagle.plan.auto(k.contract, contraction="gemm")
    x = torch.randn(k.R * k.B, device="cuda")
    w = torch.randn(k.R, k.U, device="cuda")

    def step():
        h = x * 2.0  # torch
        u = torch.empty_like(h)
        shift.run(x=h, a=0.5, b=1.0, y=u)  # a hawk kernel, its Params as numbers
        y = torch.empty(k.B * k.U, device="cuda")
        product.run(w=w, f=u.view(k.R, k.B), y=y)  # one cuBLAS product
        return torch.tanh(y)  # torch again

    probe = torch.empty(k.B * k.U, device="cuda")
    assert product.bind(w=w, f=x.view(k.R, k.B), y=probe).route == "gemm"
    graph, out = _warm_then_capture(torch, step)
    fresh = torch.randn_like(x)
    x.copy_(fresh)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    features = fresh.double().cpu().numpy().reshape(k.R, k.B) + 1.0
    want = np.tanh(features.T @ w.double().cpu().numpy()).reshape(-1)
    assert _relative_error(out.cpu().numpy(), want) < 1e-5


@pytest.mark.usefixtures("collector_paused")
def test_the_routed_torch_op_forward_and_backward_are_recorded_into_a_torch_graph():
    torch = pytest.importorskip("torch")
    import eagle.torch

    layer = eagle.torch.function(k.contract, contraction="gemm")
    w = torch.randn(k.R, k.U, device="cuda", requires_grad=True)
    f = torch.randn(k.R, k.B, device="cuda")

    def step():
        y = layer(w=w, f=f)
        (grad,) = torch.autograd.grad(torch.tanh(y).sum(), w)
        return y, grad

    graph, (y, grad) = _warm_then_capture(torch, step)
    with torch.no_grad():
        w.copy_(torch.randn_like(w))
        f.copy_(torch.randn_like(f))
    graph.replay()
    torch.cuda.synchronize()
    ref_w = w.detach().double().requires_grad_()
    ref_y = (f.double().T @ ref_w).reshape(-1)
    (ref_grad,) = torch.autograd.grad(torch.tanh(ref_y).sum(), ref_w)
    assert _relative_error(y.detach().cpu(), ref_y.detach().cpu()) < 1e-5
    assert _relative_error(grad.cpu(), ref_grad.cpu()) < 1e-5


@pytest.mark.device_memory
def test_short_lived_streams_take_their_cublas_handles_with_them(rng):
    a, b = (arrays.asarray(rng.standard_normal((256, 256)), "float32", "cuda:0") for _ in "ab")
    out = arrays.full((256, 256), np.nan, "float32", "cuda:0")
    bufs = {"a": a, "b": b, "out": out}
    step = matmul_step("out", a="a", b="b", out="out")
    want = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
    release_handles()
    gc.collect()
    pool = cuda.default_pool()
    used = pool.used_bytes()
    pool.trim()
    free_before, _ = cudart.cudaMemGetInfo()
    for _ in range(100):
        stream = cuda.Stream(non_blocking=True)
        with stream:
            out.fill(np.nan)
            step.run(bufs, "device")
            stream.synchronize()
        assert _relative_error(out.numpy(), want) < 1e-5
        del stream
        gc.collect()
        assert pool.used_bytes() == used  # the stream's handle and workspace went with it
    assert not handles._stream_handles
    step.run(bufs, "device")  # the default stream's handle stays until released
    assert pool.used_bytes() > used
    release_handles()
    gc.collect()
    assert pool.used_bytes() == used
    pool.trim()
    free_after, _ = cudart.cudaMemGetInfo()
    assert free_after >= free_before - (4 << 20), (free_before, free_after)
