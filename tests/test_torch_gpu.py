"""eagle.torch on CUDA tensors: gradients, the GEMM route against torch autograd, stream
order, torch.cuda.graph, the docs' training example, and DistributedDataParallel."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import eagle.torch  # noqa: E402
from tests import _torch_kernels as k  # noqa: E402
from tests.test_docs import examples  # noqa: E402

pytestmark = pytest.mark.gpu

GRADCHECKED = [
    k.scale_add,
    k.affine,
    k.branchy,
    k.gather,
    k.square_in_place,
    k.binned,
    k.axpb,
    k.tally,
]


def _relative_error(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm())


@pytest.mark.parametrize("kernel", GRADCHECKED, ids=lambda kernel: kernel.name)
def test_gradcheck_on_the_device(kernel):
    f = eagle.torch.function(kernel)
    planes = k.inputs(kernel, torch.float64, "cuda")
    names = list(planes)
    out = f(**planes)
    want = k.REFERENCES[kernel](**planes)
    for g, w in zip(*(v if isinstance(v, tuple) else (v,) for v in (out, want)), strict=True):
        assert g.is_cuda and _relative_error(g, w) < 1e-12
    assert torch.autograd.gradcheck(
        lambda *values: f(**dict(zip(names, values, strict=True))), tuple(planes.values())
    )


@pytest.mark.parametrize("kernel", GRADCHECKED, ids=lambda kernel: kernel.name)
def test_the_gradient_of_a_sum_matches_torch_on_the_device(kernel):
    """A broadcast (stride-0) cotangent, read as one element by the loop adjoint, which
    writes its lane gradients into uninitialised tensors (poisoned here first)."""
    planes = k.inputs(kernel, torch.float64, "cuda", lanes=3000)
    f = eagle.torch.function(kernel)
    poison = torch.full((3000,), float("nan"), dtype=torch.float64, device="cuda")
    del poison  # its block goes back to torch's cache: the next empty() can take it
    got = f(**planes)
    got = got if isinstance(got, tuple) else (got,)
    sum(3.0 * out.sum() for out in got).backward()
    grads = {name: value.grad for name, value in planes.items()}
    reference = {name: t.detach().clone().requires_grad_() for name, t in planes.items()}
    want = k.REFERENCES[kernel](**reference)
    want = want if isinstance(want, tuple) else (want,)
    sum(3.0 * out.sum() for out in want).backward()
    for name, value in reference.items():
        assert _relative_error(grads[name], value.grad) < 1e-12, name


@pytest.mark.parametrize("contraction", ["loop", "gemm"])
def test_contraction_gradcheck_in_float64_on_either_route(contraction):
    f = eagle.torch.function(k.contract, contraction=contraction)
    assert f.plan.route("device", "float64") == contraction  # "gemm": cuBLAS's dgemm
    planes = k.inputs(k.contract, torch.float64, "cuda")
    assert torch.autograd.gradcheck(lambda w, f_: f(w=w, f=f_), (planes["w"], planes["f"]))


@pytest.mark.parametrize("contraction", ["loop", "gemm"])
def test_float32_contraction_matches_torch_autograd(contraction):
    f = eagle.torch.function(k.contract, contraction=contraction)
    assert f.plan.route("device") == contraction
    assert f.adjoint.route("device") == contraction
    planes = k.inputs(k.contract, torch.float32, "cuda")
    y_bar = torch.randn(k.B * k.U, device="cuda")
    got = f(**planes)
    got_grads = torch.autograd.grad(got, (planes["w"], planes["f"]), y_bar)
    reference = {name: t.detach().double().requires_grad_() for name, t in planes.items()}
    want = k.REFERENCES[k.contract](**reference)
    want_grads = torch.autograd.grad(want, (reference["w"], reference["f"]), y_bar.double())
    assert _relative_error(got, want) < 1e-5
    for g, w in zip(got_grads, want_grads, strict=True):
        assert _relative_error(g, w) < 1e-5


def test_negated_views_and_float64_sums_into_float16_on_the_device():
    """As on CPU tensors: a lazily negated view reads as its values (input and cotangent,
    over kept bindings), and a float64 sum rounds once into a float16 output."""
    f = eagle.torch.function(k.scale_add)
    x = torch.linspace(1.0, 2.0, 1000, device="cuda", requires_grad=True)
    z = torch.rand(1000, device="cuda")
    plain = torch.complex(torch.zeros_like(z), z)
    for _ in range(3):
        torch.testing.assert_close(f(x=x, z=plain.conj().imag), 0.5 * x - z)
        g = torch.rand(1000, device="cuda")
        (grad,) = torch.autograd.grad(f(x=x, z=z), x, grad_outputs=torch._neg_view(g))
        torch.testing.assert_close(grad, -0.5 * g)
    v = 1 + 2**-11 + 2**-40  # just above the float16 tie between 1 and 1 + 2**-10
    a = torch.tensor([v], dtype=torch.float64, device="cuda", requires_grad=True)
    ones = {"x": torch.ones(1, dtype=torch.float16, device="cuda", requires_grad=True)}
    ones["w"] = torch.ones(1, dtype=torch.float16, device="cuda", requires_grad=True)
    y, t = eagle.torch.function(k.stored_and_summed)(a=a, **ones)
    assert y.dtype == t.dtype == torch.float16
    assert y.item() == t.item() == 1 + 2**-10  # v rounded once (twice: 1.0)
    (y.sum() + t.sum()).backward()
    assert ones["x"].grad.item() == ones["w"].grad.item() == 2 + 2**-9


def test_an_initial_value_the_backward_does_not_read_may_change_in_place_on_the_device():
    """As on CPU tensors: the backward keeps a stand-in for it (zeros made on the device)."""
    for kernel in (k.axpb, k.tally):
        f = eagle.torch.function(kernel)
        planes = k.inputs(kernel, torch.float32, "cuda")
        planes["x"].requires_grad_(True)
        (output,) = f._output_names
        start = planes[output].clone().requires_grad_(True)
        given = start.clone()
        out = f(**{**planes, output: given})
        given.mul_(3.0)  # not read by the backward: no error
        bar = torch.rand_like(out)
        x_grad, start_grad = torch.autograd.grad(out, (planes["x"], start), bar)
        reference = k.REFERENCES[kernel]
        x64 = planes["x"].detach().double().requires_grad_(True)
        start64 = start.detach().double().requires_grad_(True)
        rest = {n: (t.double() if isinstance(t, torch.Tensor) else t)
                for n, t in planes.items() if n not in ("x", output)}  # fmt: skip
        want = torch.autograd.grad(
            reference(x=x64, **rest, **{output: start64}), (x64, start64), bar.double()
        )
        for got, expected in zip((x_grad, start_grad), want, strict=True):
            assert (got.double() - expected).norm() / expected.norm() < 1e-5


def test_runs_after_torch_work_queued_on_its_stream():
    f = eagle.torch.function(k.scale_add)
    x = torch.full((1000,), float("nan"), device="cuda")
    z = torch.randn(1000, device="cuda")
    torch.cuda._sleep(50_000_000)  # keep the stream busy, so a race would read the NaNs
    x.fill_(2.0)
    y = f(x=x, z=z)
    torch.testing.assert_close(y, 1.0 + z)


def test_numeric_params_are_cached_constants_on_the_device():
    f = eagle.torch.function(k.affine)
    x = torch.randn(1000, device="cuda")
    torch.testing.assert_close(f(x=x, a=2.0, b=-1.0), 2.0 * x - 1.0)
    torch.testing.assert_close(f(x=x, a=3.0, b=-1.0), 3.0 * x - 1.0)


@pytest.mark.usefixtures("collector_paused")
def test_cuda_graph_captures_forward_and_backward():
    f = eagle.torch.function(k.branchy)
    c = torch.randn(4, device="cuda")
    x = torch.randn(1000, device="cuda", requires_grad=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            f(c=c, x=x, s=0.7).sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = f(c=c, x=x, s=0.7)
        y.sum().backward()
    with torch.no_grad():
        x.copy_(torch.randn_like(x))
        y.fill_(float("nan"))
    graph.replay()
    reference = x.detach().double().requires_grad_()
    want = k.REFERENCES[k.branchy](c=c.double(), x=reference, s=0.7)
    (want_grad,) = torch.autograd.grad(want.sum(), reference)
    assert _relative_error(y, want) < 1e-5
    assert _relative_error(x.grad, want_grad) < 1e-5


def test_the_docs_page_runs_its_examples_the_training_included():
    page = Path(__file__).resolve().parents[1] / "docs" / "torch.md"
    namespace = {"__name__": "docs_torch"}
    for example in examples(page):
        example.run(namespace)
    assert namespace["losses"][-1] < namespace["losses"][0] / 100


# -- DistributedDataParallel ----------------------------------------------------------

_STEPS = 3


def _ddp_batches(rank: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(100 + rank)
    return torch.randn(k.R, k.B, generator=generator)


def _ddp_model() -> torch.nn.Module:
    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            generator = torch.Generator().manual_seed(7)
            self.w = torch.nn.Parameter(torch.randn(k.R, k.U, generator=generator))
            self.layer = eagle.torch.function(k.contract, contraction="gemm")

        def forward(self, features):
            return torch.tanh(self.layer(w=self.w, f=features)).square().mean()

    return Layer()


def _ddp_worker(rank: int, world_size: int, port: int, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    torch.cuda.set_device(rank)
    model = torch.nn.parallel.DistributedDataParallel(_ddp_model().cuda(), device_ids=[rank])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    features = _ddp_batches(rank).cuda()
    for _ in range(_STEPS):
        optimizer.zero_grad()
        model(features).backward()
        optimizer.step()
    if rank == 0:
        torch.save({"w": model.module.w.detach().cpu(), "grad": model.module.w.grad.cpu()}, out)
    dist.destroy_process_group()


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs"
)
def test_distributed_data_parallel_matches_one_gpu(tmp_path):
    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = str(tmp_path / "rank0.pt")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    mp.spawn(_ddp_worker, args=(2, port, out), nprocs=2, join=True)
    distributed = torch.load(out)

    model = _ddp_model().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    batches = [_ddp_batches(rank).cuda() for rank in range(2)]
    for _ in range(_STEPS):
        optimizer.zero_grad()
        (sum(model(b) for b in batches) / 2).backward()
        optimizer.step()
    assert _relative_error(distributed["grad"], model.w.grad.cpu()) < 1e-5
    assert _relative_error(distributed["w"], model.w.detach().cpu()) < 1e-5
