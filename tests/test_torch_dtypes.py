"""eagle.torch over bfloat16 and float16 CPU tensors (the host programs store 16-bit planes
and compute in float32): values, gradients in each input's dtype, torch's promotion rule
for the outputs, and a bfloat16 autocast training step."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import eagle.torch  # noqa: E402
from tests import _torch_kernels as k  # noqa: E402

HALVES = [torch.bfloat16, torch.float16]
KERNELS = [k.affine, k.axpb, k.tally, k.gather, k.branchy, k.binned, k.contract]
#: ||got - want|| / ||want|| allowed: results computed in float32, rounded once to 8
#: (bfloat16) or 11 (float16) bits
TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3}


def _relative_error(got, want) -> float:
    return float((got.double() - want).norm() / want.norm())


def _outputs(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda kernel: kernel.name)
def test_values_and_gradients_in_16_bits(kernel, dtype):
    planes = {
        name: t.detach().to(dtype).requires_grad_()
        for name, t in k.inputs(kernel, torch.float64, "cpu").items()
    }
    reference = {name: t.detach().double().requires_grad_() for name, t in planes.items()}
    got = _outputs(eagle.torch.function(kernel)(**planes))
    want = _outputs(k.REFERENCES[kernel](**reference))
    # the cotangents in the outputs' dtype, as autograd hands them in, for both
    bars = [torch.randn(w.shape, dtype=torch.float64).to(dtype) for w in want]
    for g, w in zip(got, want, strict=True):
        assert g.dtype == dtype
        assert _relative_error(g.detach(), w.detach()) < TOLERANCE[dtype]
    names = list(planes)
    grads = torch.autograd.grad(got, [planes[n] for n in names], bars)
    wants = torch.autograd.grad(want, [reference[n] for n in names], [b.double() for b in bars])
    for name, g, w in zip(names, grads, wants, strict=True):
        assert g.dtype == dtype, name
        assert _relative_error(g, w) < TOLERANCE[dtype], name


def test_the_outputs_take_torchs_promotion_of_the_tensors_params_aside():
    x16 = torch.randn(5, dtype=torch.bfloat16, requires_grad=True)
    a32 = torch.tensor(1.5, requires_grad=True)
    y = eagle.torch.function(k.affine)(x=x16, a=a32, b=0.25)
    assert y.dtype == torch.bfloat16  # a Param, like torch's scalars, does not widen it
    y.sum().backward()
    assert x16.grad.dtype == torch.bfloat16 and a32.grad.dtype == torch.float32
    torch.testing.assert_close(a32.grad, x16.detach().float().sum(), rtol=1e-2, atol=1e-2)
    t32 = torch.randn(k.N)
    y, z = eagle.torch.function(k.gather)(t=t32, x=torch.randn(4, dtype=torch.float16))
    assert y.dtype == z.dtype == torch.float32
    mixed = eagle.torch.function(k.scale_add)(
        x=torch.randn(4, dtype=torch.float16), z=torch.randn(4, dtype=torch.bfloat16)
    )
    assert mixed.dtype == torch.float32  # torch.promote_types(float16, bfloat16)
    only = eagle.torch.function(k.ramp)(a=torch.tensor(2.0, dtype=torch.float16), lanes=3)
    assert only.dtype == torch.float16  # the Params are the only tensors


def test_a_bfloat16_autocast_training_step_matches_torch():
    f = eagle.torch.function(k.affine)
    grads = []
    for use_eagle in (True, False):
        torch.manual_seed(1)
        layer = torch.nn.Linear(8, 8)
        a = torch.nn.Parameter(torch.tensor(0.5))
        x = torch.randn(16, 8)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = layer(x).reshape(-1)
            assert h.dtype == torch.bfloat16
            y = f(x=h, a=a, b=0.1) if use_eagle else a * h + 0.1
            assert y.dtype == torch.bfloat16  # torch's own: a 0-d float32 does not widen
            loss = y.float().square().mean()
        loss.backward()
        grads.append((layer.weight.grad, a.grad))
    (eagle_weight, eagle_a), (torch_weight, torch_a) = grads
    assert eagle_weight.dtype == torch.float32 and eagle_a.dtype == torch.float32
    assert _relative_error(eagle_weight, torch_weight.double()) < 2e-2
    assert _relative_error(eagle_a, torch_a.double()) < 2e-2


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_float64_sums_round_once_into_float16(compiled):
    """A float64 Param makes the kernel compute in float64 beside float16 planes: a sum
    over lanes (a table output, a Param's or a table's gradient) rounds once into float16,
    as the lane stores do, where torch's own conversion rounds through float32."""
    v = 1 + 2**-11 + 2**-40  # just above the float16 tie between 1 and 1 + 2**-10
    want = torch.tensor([v], dtype=torch.float64)
    once, twice = np.float16(v), np.float16(np.float32(v))
    assert once != twice  # (the case this test is about)
    f = eagle.torch.function(k.stored_and_summed)
    call = torch.compile(lambda **p: f(**p), fullgraph=True) if compiled else f
    a = want.clone().requires_grad_()
    x = torch.ones(1, dtype=torch.float16, requires_grad=True)
    w = torch.ones(1, dtype=torch.float16, requires_grad=True)
    y, t = call(a=a, x=x, w=w)
    assert y.dtype == t.dtype == torch.float16
    assert y.item() == t.item() == once
    (y.sum() + t.sum()).backward()
    assert x.grad.item() == w.grad.item() == np.float16(2 * v)
    start = torch.zeros(1, dtype=torch.float16, requires_grad=True)
    out = eagle.torch.function(k.passed_through)(x=torch.ones(1, dtype=torch.float64), t=start)
    (out * want).sum().backward()  # the initial value's gradient: its cotangent, v
    assert start.grad.dtype == torch.float16 and start.grad.item() == once
