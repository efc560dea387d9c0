"""eagle.torch's two ways in: plain eager calls skip torch's custom-op dispatch (an
``autograd.Function`` over the same forward and gradients); compiled code, fake
tensors and torch modes go through the registered op, one per signature, which finds
its function by key."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import eagle.plan  # noqa: E402
import eagle.torch  # noqa: E402
from eagle import _torch_autograd  # noqa: E402
from tests import _torch_kernels as k  # noqa: E402


@pytest.fixture
def paths(monkeypatch):
    """Counts the calls that take the eager path and those that take the op."""
    taken = {"eager": 0, "op": 0}
    eager_apply = _torch_autograd.Forward.apply

    def counted(*args):
        taken["eager"] += 1
        return eager_apply(*args)

    monkeypatch.setattr(_torch_autograd.Forward, "apply", counted)
    return taken


def test_a_plain_eager_call_skips_the_dispatch_with_the_same_values_and_gradients(paths):
    f = eagle.torch.function(k.affine)
    x = torch.randn(9, dtype=torch.float64, requires_grad=True)
    a = torch.tensor([1.5], dtype=torch.float64, requires_grad=True)
    eager = f(x=x, a=a, b=0.25)
    (eager_x, eager_a) = torch.autograd.grad(eager.square().sum(), (x, a))
    assert paths["eager"] == 1
    b = torch.tensor([0.25], dtype=torch.float64)
    through_op = f.op(x, a, b, None, -1, torch.float64, f.key)
    (op_x, op_a) = torch.autograd.grad(through_op.square().sum(), (x, a))
    torch.testing.assert_close(eager, through_op)
    torch.testing.assert_close((eager_x, eager_a), (op_x, op_a))
    torch.testing.assert_close(eager_x, 2 * (1.5 * x.detach() + 0.25) * 1.5)


def test_fake_tensors_and_torch_modes_take_the_registered_op(paths):
    from torch._subclasses.fake_tensor import FakeTensorMode

    f = eagle.torch.function(k.scale_add)
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.randn(5))
        y = f(x=x, z=x)
    assert paths["eager"] == 0 and y.shape == (5,) and type(y) is not torch.Tensor

    class Passing(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    x, z = torch.randn(5), torch.randn(5)
    with Passing():
        torch.testing.assert_close(f(x=x, z=z), 0.5 * x + z)
    assert paths["eager"] == 0
    f(x=x.requires_grad_(), z=z)
    assert paths["eager"] == 1


def test_a_call_autograd_does_not_record_runs_the_forward_alone(paths):
    f = eagle.torch.function(k.scale_add)
    x, z = torch.randn(6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    plain = f(x=x, z=z)  # no tensor requires a gradient
    torch.testing.assert_close(plain, 0.5 * x + z)
    x.requires_grad_()
    with torch.no_grad():
        unrecorded = f(x=x, z=z)
    assert paths["eager"] == 0
    assert not plain.requires_grad and not unrecorded.requires_grad
    torch.testing.assert_close(unrecorded, plain)
    recorded = f(x=x, z=z)
    assert paths["eager"] == 1 and recorded.requires_grad
    (gradient,) = torch.autograd.grad(recorded.sum(), (x,))
    torch.testing.assert_close(gradient, torch.full_like(x, 0.5))


def test_a_recorded_eager_call_reads_no_signature(monkeypatch):
    """torch's ``Function.apply`` reads the forward's signature (``inspect.signature``) on
    every call of a Function with a separate ``setup_context``: the plain eager route has
    none; torch.func transforms and forward-mode AD take the one that has."""
    import inspect

    f = eagle.torch.function(k.scale_add)
    x = torch.randn(7, dtype=torch.float64, requires_grad=True)
    z = torch.randn(7, dtype=torch.float64)
    f(x=x, z=z).sum().backward()  # the backward's runner made once
    read = []
    signature = inspect.signature
    monkeypatch.setattr(
        inspect, "signature", lambda *a, **kw: read.append(a) or signature(*a, **kw)
    )
    x.grad = None
    f(x=x, z=z).sum().backward()
    assert read == [] and torch.equal(x.grad, torch.full_like(x, 0.5))
    tangent = torch.randn(7, dtype=torch.float64)
    _, jvp = torch.func.jvp(lambda x: f(x=x, z=z), (x.detach(),), (tangent,))
    torch.testing.assert_close(jvp, 0.5 * tangent)
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x.detach(), tangent)
        (_, forward) = torch.autograd.forward_ad.unpack_dual(f(x=dual, z=z))
    torch.testing.assert_close(forward, 0.5 * tangent)


def test_a_bound_launch_refuses_a_tensor_it_writes_that_came_to_require_grad():
    """The bind checked it; a launch would write it behind autograd's back."""
    x, y = torch.randn(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    bound = eagle.plan.auto(k.scale_add).bind(x=x, z=x, y=y)
    bound.launch()
    torch.testing.assert_close(y, 1.5 * x)
    y.requires_grad_(True)
    with pytest.raises(ValueError, match="writes a torch tensor that requires grad since it"):
        bound.launch()
    with torch.no_grad():
        y.zero_()
    y.requires_grad_(False)
    x.requires_grad_(True)  # read through: launched
    bound.launch()
    torch.testing.assert_close(y, 1.5 * x.detach())
