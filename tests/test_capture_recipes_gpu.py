"""The capture recipes users take, on a device: PyTorch's whole-network
``torch.cuda.graph`` recipe (warm up on a side stream, capture on torch's own stream),
``torch.compile(mode="reduce-overhead")`` and CuPy's stream capture, each over a routed
op (or plan) and a loop one; the replay is compared with a float64 reference after the
inputs were changed in place. A capture no handle warmed the products for is refused
with ``GemmCaptureUnavailable`` and leaves the capture valid."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.plan
from eagle.gemm import GemmCaptureUnavailable
from hawk.emit import policy
from tests import _route_kernels as rk
from tests._util import rel_error

pytestmark = pytest.mark.gpu

# products of these extents are made by no other test, so nothing warmed them (one for
# torch, one for CuPy: the torch test runs its op afterwards)
NEVER_WARMED_TORCH = (29, 11, 23)
NEVER_WARMED_CUPY = (31, 9, 19)


def _torch():
    return pytest.importorskip("torch")


def _ops():
    """The routed contraction and the loop op of the torch tests (and the kernels' extents)."""
    import eagle.torch
    from tests import _torch_kernels as k

    layer = eagle.torch.function(k.contract, contraction="gemm")
    assert layer.plan.route("device") == "gemm" and layer.adjoint.route("device") == "gemm"
    shift = eagle.torch.function(k.scale_add)  # y = 0.5 * x + z, its own loop
    return layer, shift, k


def _inputs(torch, k):
    w = torch.randn(k.R, k.U, device="cuda", requires_grad=True)
    bias = torch.randn(k.B * k.U, device="cuda", requires_grad=True)
    features = torch.randn(k.R, k.B, device="cuda")
    return w, bias, features


def _reference(torch, w, bias, features):
    """The loss and its gradients in float64, with torch's own operations."""
    w64 = w.detach().double().requires_grad_()
    bias64 = bias.detach().double().requires_grad_()
    y = (features.double().T @ w64).reshape(-1)  # y[s, u] = sum_r w[r, u] f[r, s]
    loss = torch.tanh(0.5 * y + bias64).square().mean()
    grads = torch.autograd.grad(loss, (w64, bias64))
    return loss.detach(), *grads


def _relative(got, want) -> float:
    return rel_error(got.detach().double().cpu().numpy(), want.detach().cpu().numpy())


@pytest.mark.usefixtures("collector_paused")
def test_the_whole_network_recipe_records_routed_and_loop_ops_forward_and_backward():
    torch = _torch()
    layer, shift, k = _ops()
    w, bias, features = _inputs(torch, k)

    def step():
        loss = torch.tanh(shift(x=layer(w=w, f=features), z=bias)).square().mean()
        loss.backward()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            w.grad = bias.grad = None
            step()
    torch.cuda.current_stream().wait_stream(side)
    w.grad = bias.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # torch's own capture stream, which eagle never saw
        loss = step()

    for _ in range(2):  # new inputs, written in place, every replay
        with torch.no_grad():
            w.copy_(torch.randn_like(w))
            bias.copy_(torch.randn_like(bias))
            features.copy_(torch.randn_like(features))
            for out in (loss, w.grad, bias.grad):
                out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want_loss, want_w, want_bias = _reference(torch, w, bias, features)
        assert _relative(loss, want_loss) < 1e-5
        assert _relative(w.grad, want_w) < 1e-5
        assert _relative(bias.grad, want_bias) < 1e-5


def test_reduce_overhead_compiles_forward_and_backward_equal_to_eager():
    torch = _torch()
    from torch._dynamo.utils import counters

    layer, shift, k = _ops()

    def model(w, bias, features):
        return torch.tanh(shift(x=layer(w=w, f=features), z=bias)).square().mean()

    counters.clear()
    compiled = torch.compile(model, mode="reduce-overhead")
    for _ in range(4):  # warm-up, recording, then replays of the CUDA-graph tree
        w, bias, features = _inputs(torch, k)
        torch.compiler.cudagraph_mark_step_begin()
        loss = compiled(w, bias, features)
        grads = torch.autograd.grad(loss, (w, bias))
        got = [t.detach().clone() for t in (loss, *grads)]  # the tree reuses its outputs
        eager = model(w, bias, features)
        want = [eager.detach(), *torch.autograd.grad(eager, (w, bias))]
        reference = _reference(torch, w, bias, features)
        for g, e, r in zip(got, want, reference, strict=True):
            assert _relative(g, e) < 1e-5
            assert _relative(g, r) < 1e-5
    assert counters["inductor"]["cudagraph_skips"] == 0  # it did run as CUDA graphs


def _routed(kernel):
    with policy.using(contraction="gemm"):
        return eagle.plan.auto(kernel)


@pytest.mark.usefixtures("collector_paused")
def test_cupy_stream_capture_records_a_loop_plan_and_a_routed_plan(rng):
    cupy = pytest.importorskip("cupy")
    routed, loop = _routed(rk.contract), eagle.plan.auto(rk.square)  # y = x * x + 1
    assert routed.route("device") == "gemm" and loop.route("device") == "loop"
    w = cupy.asarray(rng.standard_normal((rk.R, rk.U)).astype(np.float32))
    f = cupy.asarray(rng.standard_normal((rk.R, rk.B)).astype(np.float32))
    y = cupy.full(rk.B * rk.U, np.nan, np.float32)
    z = cupy.full(rk.B * rk.U, np.nan, np.float32)
    routed.run(w=w, f=f, y=y)  # run once first, on CuPy's default stream
    loop.run(x=y, y=z)
    cupy.cuda.Device().synchronize()

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        routed.run(w=w, f=f, y=y)
        loop.run(x=y, y=z)
        graph = stream.end_capture()

    for _ in range(2):
        new_w = rng.standard_normal((rk.R, rk.U)).astype(np.float32)
        new_f = rng.standard_normal((rk.R, rk.B)).astype(np.float32)
        w[...], f[...] = cupy.asarray(new_w), cupy.asarray(new_f)
        y.fill(np.nan)
        z.fill(np.nan)
        cupy.cuda.Device().synchronize()
        graph.launch(stream)
        stream.synchronize()
        product = rk.reference({"w": new_w.astype(np.float64), "f": new_f.astype(np.float64)})
        assert rel_error(cupy.asnumpy(y), product) < 1e-5
        assert rel_error(cupy.asnumpy(z), product * product + 1.0) < 1e-5


@pytest.mark.usefixtures("collector_paused")
def test_a_torch_capture_nothing_warmed_for_is_refused_and_ends_cleanly():
    torch = _torch()
    import eagle.torch

    r, u, b = NEVER_WARMED_TORCH
    layer = eagle.torch.function(rk.make_contract(r, u, b), contraction="gemm")
    w, features = torch.randn(r, u, device="cuda"), torch.randn(r, b, device="cuda")
    graph = torch.cuda.CUDAGraph()
    # torch ends the capture as the error leaves the block; were it invalidated, ending
    # it would raise torch's RuntimeError instead of eagle's error
    with (
        pytest.raises(GemmCaptureUnavailable, match="no cuBLAS handle on cuda:0 has warmed"),
        torch.cuda.graph(graph),
    ):
        layer(w=w, f=features * 2.0)
    assert not torch.cuda.is_current_stream_capturing()
    got = layer(w=w, f=features)  # outside a capture it runs (and warms)
    want = (features.double().T @ w.double()).reshape(-1)
    assert _relative(got, want) < 1e-5


@pytest.mark.usefixtures("collector_paused")
def test_a_cupy_capture_nothing_warmed_for_is_refused_and_ends_cleanly(rng):
    cupy = pytest.importorskip("cupy")
    r, u, b = NEVER_WARMED_CUPY
    plan = _routed(rk.make_contract(r, u, b))
    w = cupy.asarray(rng.standard_normal((r, u)).astype(np.float32))
    f = cupy.asarray(rng.standard_normal((r, b)).astype(np.float32))
    y = cupy.full(b * u, np.nan, np.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        try:
            y.fill(0.5)
            with pytest.raises(GemmCaptureUnavailable, match="no cuBLAS handle on cuda:0"):
                plan.run(w=w, f=f, y=y)
        finally:
            graph = stream.end_capture()  # raises if the capture was invalidated
    assert not stream.is_capturing()
    graph.launch(stream)
    stream.synchronize()
    assert (cupy.asnumpy(y) == 0.5).all()
