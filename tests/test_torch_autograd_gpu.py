"""eagle.torch on CUDA tensors past the basics: the accumulate kernels under torch.compile
(their gradcheck is in test_torch_gpu.py), bfloat16 and float16 tensors on the loop and the
GEMM route, double backward and torch.func, and torch.use_deterministic_algorithms."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

import eagle.torch  # noqa: E402
import hawk.emit.policy  # noqa: E402
from tests import _torch_kernels as k  # noqa: E402
from tests._util import rel_error  # noqa: E402

pytestmark = pytest.mark.gpu

ACCUMULATING = [k.axpb, k.tally, k.square_in_place]


@pytest.fixture(autouse=True)
def _seeded(rng):
    """torch's random tensors drawn from the test's reproducible seed."""
    torch.manual_seed(int(rng.integers(2**31)))


def _relative_error(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm())


def _outputs(result):
    return result if isinstance(result, tuple) else (result,)


def _poison_the_allocator(count: int) -> None:
    """Free a NaN-filled block, so the next uninitialised tensors of that size get it."""
    poison = torch.full((count,), float("nan"), dtype=torch.float64, device="cuda")
    del poison


@pytest.mark.parametrize("kernel", ACCUMULATING, ids=lambda kernel: kernel.name)
def test_torch_compile_fullgraph_forward_and_backward_equal_eager_on_the_device(kernel):
    torch._dynamo.reset()
    f = eagle.torch.function(kernel)
    planes = k.inputs(kernel, torch.float32, "cuda", lanes=3000)
    names = list(planes)

    def loss(*values):
        out = f(**dict(zip(names, values, strict=True)))
        return (out * out).sum()

    eager = loss(*planes.values())
    eager_grads = torch.autograd.grad(eager, list(planes.values()))
    compiled = torch.compile(loss, fullgraph=True)  # inductor
    got = compiled(*planes.values())
    grads = torch.autograd.grad(got, list(planes.values()))
    assert _relative_error(got, eager) < 1e-5
    for g, w in zip(grads, eager_grads, strict=True):
        assert _relative_error(g, w) < 1e-5


# -- 16-bit tensors ------------------------------------------------------------------------

TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    ("kernel", "contraction"),
    [(k.affine, "loop"), (k.tally, "loop"), (k.gather, "loop"), (k.contract, "loop"),
     (k.contract, "gemm")],
    ids=["affine", "tally", "gather", "contract-loop", "contract-gemm"],
)  # fmt: skip
def test_16_bit_tensors_on_the_device(kernel, contraction, dtype):
    f = eagle.torch.function(kernel, contraction=contraction)
    if contraction == "gemm":
        assert f.plan.route("device", str(dtype).removeprefix("torch.")) == "gemm"
    planes = {
        name: t.detach().to(dtype).requires_grad_()
        for name, t in k.inputs(kernel, torch.float64, "cuda", lanes=3000).items()
    }
    reference = {name: t.detach().double().requires_grad_() for name, t in planes.items()}
    _poison_the_allocator(3000)
    got = _outputs(f(**planes))
    want = _outputs(k.REFERENCES[kernel](**reference))
    bars = [torch.randn(w.shape, dtype=torch.float64, device="cuda").to(dtype) for w in want]
    for g, w in zip(got, want, strict=True):
        assert g.dtype == dtype and _relative_error(g, w) < TOLERANCE[dtype]
    names = list(planes)
    grads = torch.autograd.grad(got, [planes[n] for n in names], bars)
    wants = torch.autograd.grad(want, [reference[n] for n in names], [b.double() for b in bars])
    for name, g, w in zip(names, grads, wants, strict=True):
        assert g.dtype == dtype, name
        assert _relative_error(g, w) < TOLERANCE[dtype], name


# -- double backward and torch.func ----------------------------------------------------------


def test_a_gradient_penalty_matches_torch_on_the_device():
    f = eagle.torch.function(k.cubic)
    planes = k.inputs(k.cubic, torch.float64, "cuda", lanes=3000)
    reference = {name: t.detach().clone().requires_grad_() for name, t in planes.items()}
    grads = {}
    for run, call in (("eagle", f), ("torch", k.REFERENCES[k.cubic])):
        x, c = (planes if run == "eagle" else reference).values()
        y = call(x=x, c=c)
        (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        (y.square().sum() + 0.5 * gx.square().sum()).backward()
        grads[run] = (x.grad, c.grad)
    for got, want in zip(grads["eagle"], grads["torch"], strict=True):
        assert _relative_error(got, want) < 1e-12


class _Passing(torch.overrides.TorchFunctionMode):
    """Sends eagle.torch's calls through its registered ops (as a mode does)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("route", ["eager", "op", "compiled"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_an_output_no_loss_reads_puts_no_nan_in_a_gradient_on_the_device(route, dtype):
    """y = x sqrt(z) takes no part in a loss on w = x * x: z's gradient is 0 where dy/dz
    is infinite (z = 0), and x's are torch's, first and (but compiled) second order."""
    f = eagle.torch.function(k.root_and_square)

    def loss(x, z):
        return f(x=x, z=z)[1].square().sum()

    if route == "compiled":
        torch._dynamo.reset()
        loss = torch.compile(loss, fullgraph=True)
    x0 = torch.randn(3000, dtype=dtype, device="cuda")
    z0 = torch.rand(3000, dtype=dtype, device="cuda")
    z0[::7] = 0.0
    twice = route != "compiled"
    results = []
    for call in (loss, lambda x, z: (x * x).square().sum()):
        x, z = x0.clone().requires_grad_(), z0.clone().requires_grad_()
        with _Passing() if route == "op" else contextlib.nullcontext():
            gx, gz = torch.autograd.grad(
                call(x, z), (x, z), create_graph=twice, materialize_grads=True
            )
            second = torch.autograd.grad(gx.sum(), x)[0] if twice else gx
        results.append((gx, gz, second))
    (gx, gz, second), (want_gx, _, want_second) = results
    assert torch.equal(gz, torch.zeros_like(z0))
    tolerance = 1e-6 if dtype == torch.float32 else 1e-13
    assert _relative_error(gx, want_gx) < tolerance
    assert _relative_error(second, want_second) < tolerance


@pytest.mark.parametrize("kernel", [k.affine, k.tally, k.cubic], ids=lambda kernel: kernel.name)
def test_gradgradcheck_on_the_device(kernel):
    f = eagle.torch.function(kernel)
    planes = k.inputs(kernel, torch.float64, "cuda", lanes=5)
    names = list(planes)
    assert torch.autograd.gradgradcheck(
        lambda *values: f(**dict(zip(names, values, strict=True))), tuple(planes.values())
    )


def test_torch_func_on_the_device():
    f = eagle.torch.function(k.cubic)
    x, c = (t.detach() for t in k.inputs(k.cubic, torch.float64, "cuda", lanes=300).values())

    def eagle_f(x):
        return f(x=x, c=c)

    def torch_f(x):
        return k.REFERENCES[k.cubic](x=x, c=c)

    tangent = torch.randn_like(x)
    batch = torch.stack([x, 2 * x, -x])
    for transform in (
        lambda g: torch.func.grad(lambda x: g(x).square().sum())(x),
        lambda g: torch.func.jvp(g, (x,), (tangent,))[1],
        lambda g: torch.func.vmap(g)(batch),
        lambda g: torch.func.vmap(torch.func.grad(lambda x: g(x).sum()))(batch),
        lambda g: torch.func.hessian(lambda x: g(x).sum())(x[:20]),
    ):
        assert _relative_error(transform(eagle_f), transform(torch_f)) < 1e-12


# -- torch.use_deterministic_algorithms -------------------------------------------------------


@contextlib.contextmanager
def _deterministic(warn_only: bool = False):
    was, was_warn = (
        torch.are_deterministic_algorithms_enabled(),
        (torch.is_deterministic_algorithms_warn_only_enabled()),
    )
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn)


def test_atomic_adds_refuse_under_deterministic_algorithms_and_the_rest_runs():
    x = torch.randn(3000, device="cuda", requires_grad=True)
    with _deterministic():
        with pytest.raises(RuntimeError, match="'binned' adds floats atomically on the GPU"):
            eagle.torch.function(k.binned)(x=x, w=2.0)
        y = eagle.torch.function(k.affine)(x=x, a=torch.tensor(2.0, device="cuda"), b=1.0)
        y.sum().backward()  # a's gradient is not asked for: no sum over lanes
        a = torch.tensor(2.0, device="cuda", requires_grad=True)
        y = eagle.torch.function(k.affine)(x=x, a=a, b=1.0)  # the forward adds nothing
        with pytest.raises(RuntimeError, match="backward of the eagle.torch op of hawk kernel"):
            y.sum().backward()  # a's gradient is a sum over lanes, added atomically
        gemm = eagle.torch.function(k.contract, contraction="gemm")
        planes = k.inputs(k.contract, torch.float32, "cuda")
        gemm(**planes).sum().backward()  # cuBLAS products: deterministic
    with hawk.emit.policy.using(adds="deterministic"):
        fixed = eagle.torch.function(k.binned)
    with _deterministic():
        first, second = (fixed(x=x.detach(), w=2.0) for _ in range(2))
    assert torch.equal(first, second)  # summed in an order the lane count fixes
    with _deterministic(warn_only=True), pytest.warns(UserWarning, match="adds floats"):
        counts = eagle.torch.function(k.binned)(x=x, w=2.0)
    # each of the 6 bins sums 500 float32 values, in an order the launch decides (a block
    # sums its lanes in shared memory first): against float64, not float32 in torch's order
    ref = k.REFERENCES[k.binned](x=x.detach().double(), w=2.0)
    assert rel_error(counts.detach().cpu().numpy(), ref.cpu().numpy()) < 1e-5
