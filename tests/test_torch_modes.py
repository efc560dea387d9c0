"""eagle.torch calls under torch's modes and with tensors of every layout: Param numbers
kept by value and sign, nothing a call under inference mode or fake tensors makes serves a
later call, ``torch.jit.trace`` and meta tensors go through the registered op, and a
tensor eagle cannot read is refused by plane name (CPU tensors; the host path)."""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import eagle  # noqa: E402
import eagle.plan  # noqa: E402
import eagle.torch  # noqa: E402
from tests import _torch_kernels as k  # noqa: E402


def test_a_param_number_keeps_its_sign():
    f = eagle.torch.function(k.over)
    x = torch.ones(3, dtype=torch.float64)
    for a in (0.0, -0.0, 0.0):
        torch.testing.assert_close(f(x=x, a=a), x / a)


def test_the_param_numbers_kept_are_bounded():
    f = eagle.torch.function(k.affine)
    x = torch.randn(4, dtype=torch.float64)
    for step in range(600):
        lr = 1.0 / (step + 1)
        b = float("nan") if step % 7 else lr
        torch.testing.assert_close(f(x=x, a=lr, b=b), lr * x + b, equal_nan=True)
    assert len(eagle.torch._constants) <= eagle.torch._constants.size


def test_a_call_under_inference_mode_leaves_nothing_a_training_call_reuses():
    f = eagle.torch.function(k.affine)
    with torch.inference_mode():
        f(x=torch.randn(4, dtype=torch.float64), a=2.0, b=0.5)
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    f(x=x, a=2.0, b=0.5).sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))


def test_a_call_on_fake_tensors_leaves_nothing_a_real_call_reuses():
    from torch._subclasses.fake_tensor import FakeTensorMode

    f = eagle.torch.function(k.affine)
    with FakeTensorMode():
        fake = f(x=torch.randn(4, dtype=torch.float64), a=2.0, b=0.5)
    assert fake.shape == (4,)
    x = torch.randn(4, dtype=torch.float64)
    torch.testing.assert_close(f(x=x, a=2.0, b=0.5), 2.0 * x + 0.5)


@pytest.mark.parametrize("grad", [False, True])
def test_jit_trace_records_the_registered_op(grad):
    f = eagle.torch.function(k.affine)

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.b = torch.nn.Parameter(torch.tensor(0.5, dtype=torch.float64), requires_grad=grad)

        def forward(self, x):
            return f(x=x, a=2.0, b=self.b)

    layer = Layer()
    traced = torch.jit.trace(layer, torch.randn(5, dtype=torch.float64), check_trace=False)
    x = torch.randn(5, dtype=torch.float64)
    torch.testing.assert_close(traced(x), 2.0 * x + 0.5)
    assert any(node.kind().startswith("eagle::") for node in traced.graph.nodes())


def test_jit_trace_warns_of_nothing_and_the_traced_call_still_checks_lengths():
    """The call's length checks compare traced sizes under torch.jit.trace, which would
    warn that they are constants of the trace; they record nothing, and the plan checks
    the lengths on every traced call."""
    f = eagle.torch.function(k.scale_add)
    x, z = torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch.jit.TracerWarning)
        traced = torch.jit.trace(lambda x, z: f(x=x, z=z), (x, z))
    x, z = torch.randn(7, dtype=torch.float64), torch.randn(7, dtype=torch.float64)
    torch.testing.assert_close(traced(x, z), 0.5 * x + z)
    with pytest.raises(RuntimeError, match="plane 'z' has 6 values but plane 'x' has 7"):
        traced(x, torch.randn(6, dtype=torch.float64))


@pytest.mark.parametrize("capture", ["trace", "export"])
def test_a_traced_or_exported_graph_refuses_tensors_of_another_dtype(capture):
    """The registered op takes the outputs' dtype as an argument, which a trace or an
    export keeps (with its Param numbers' tensors): a float64 run of a graph made over
    float32 tensors rounded its float64 result to float32. Refused by name now."""
    f = eagle.torch.function(k.affine)

    class Layer(torch.nn.Module):
        def forward(self, x):
            return f(x=x, a=0.1, b=1.0 / 3.0)

    example = (torch.randn(5),)
    if capture == "trace":
        graph = torch.jit.trace(Layer(), example)
    else:
        graph = torch.export.export(Layer(), example).module()
    torch.testing.assert_close(graph(example[0]), 0.1 * example[0] + 1.0 / 3.0)
    x = torch.rand(5, dtype=torch.float64)
    with pytest.raises(Exception, match=r"recorded for torch.float32 outputs, but its tensors"):
        graph(x)


def test_a_traced_call_and_the_op_refuse_a_table_of_another_shape():
    """A transposed table has as many values: a trace (whose op skips the call's checks)
    and a direct call of f.op read it in the declared order."""
    f = eagle.torch.function(k.contract)
    planes = k.inputs(k.contract, torch.float64, "cpu")
    w, f_ = planes["w"].detach(), planes["f"].detach()
    traced = torch.jit.trace(lambda w, f_: f(w=w, f=f_), (w, f_))
    message = r"plane 'w' is Table\[.*\]: pass a tensor of shape \(12, 5\)"
    with pytest.raises(RuntimeError, match=message):
        traced(w.T.contiguous(), f_)
    with pytest.raises(ValueError, match=message):
        f.op(w.T.contiguous(), f_, None, -1, torch.float64, f.key)


def test_jit_trace_checks_its_trace_and_refuses_a_traced_shape_as_lanes():
    """Its check traces again: a Param number's tensor kept from the first trace made the
    two graphs differ. x.shape[0] is a 0-d tensor there, whose value the trace would keep:
    refused as lanes, naming what keeps it symbolic."""
    affine = eagle.torch.function(k.affine)
    ramp = eagle.torch.function(k.ramp)
    x = torch.randn(4, dtype=torch.float64)
    traced = torch.jit.trace(lambda x: affine(x=x, a=2.0, b=0.5), (x,))  # check_trace on
    torch.testing.assert_close(traced(x), 2.0 * x + 0.5)
    one = torch.ones(1, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"lanes must be an int .*torch\.jit\.trace .*export"):
        torch.jit.trace(lambda x: ramp(a=one, lanes=x.shape[0]), (x,), check_trace=False)


def test_the_op_and_its_fake_check_the_outputs_dtype_alike():
    """A dtype argument other than the one the op's tensors decide is refused by the op
    and its fake alike; with only Params, the argument decides."""
    f = eagle.torch.function(k.scale_add)
    x, z = torch.randn(5), torch.randn(5)
    torch.library.opcheck(f.op, (x, z, None, -1, torch.float32, f.key))
    for device in ("cpu", "meta"):
        with pytest.raises(TypeError, match=r"recorded for torch.float64 outputs, .* pass "):
            f.op(x.to(device), z.to(device), None, -1, torch.float64, f.key)
    ramp = eagle.torch.function(k.ramp)
    one = torch.ones(1, dtype=torch.float64)
    assert ramp.op(one, None, 3, torch.float32, ramp.key).dtype == torch.float32


def test_functionalize_runs_the_registered_op_and_refuses_derivatives_through_it():
    """torch has no functionalization rule for the autograd.Function an eager call runs:
    under functionalize the call takes the registered op, which has no forward-mode rule,
    and functionalization hides the tangents from it (jvp gave zero tangents, under a
    dispatch mode too): a derivative through it is refused by name."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(5, dtype=torch.float64)
    torch.testing.assert_close(torch.func.functionalize(_sine_square)(x), torch.sin(x) ** 2)
    batched = torch.func.vmap(torch.func.functionalize(_sine_square))(torch.stack([x, -x]))
    torch.testing.assert_close(batched, torch.sin(torch.stack([x, -x])) ** 2)
    for mode in (contextlib.nullcontext(), FlopCounterMode(display=False)):
        with mode, pytest.raises(RuntimeError, match=r"derivative through torch.func.functio"):
            torch.func.jvp(torch.func.functionalize(_sine_square), (x,), (torch.ones_like(x),))
    with pytest.raises(RuntimeError, match=r"derivative through torch.func.functionalize"):
        torch.func.grad(lambda x: torch.func.functionalize(_sine_square)(x).sum())(x)
    f = eagle.torch.function(k.sine_square)  # (alive while the graph runs)
    graph = make_fx(torch.func.functionalize(lambda x: f(x=x)))(x)
    torch.testing.assert_close(graph(x), torch.sin(x) ** 2)


def test_meta_tensors_give_meta_outputs():
    f = eagle.torch.function(k.scale_add)
    y = f(x=torch.empty(6, device="meta"), z=torch.empty(6, device="meta"))
    assert y.device.type == "meta" and y.shape == (6,)


def _nested():
    return torch.nested.nested_tensor([torch.ones(2, dtype=torch.float64)] * 2)


@pytest.mark.parametrize(
    "make",
    [lambda: torch.ones(4, dtype=torch.float64).to_sparse(), _nested],
    ids=["sparse", "nested"],
)
def test_a_tensor_without_strided_memory_is_refused_by_plane_name(make):
    f = eagle.torch.function(k.scale_add)
    with pytest.raises(eagle.EagleError, match="plane 'x' is a .*tensor; eagle.torch ops take"):
        f(x=make(), z=torch.ones(4, dtype=torch.float64))


def test_a_plane_may_be_named_self():
    x = torch.randn(3, dtype=torch.float64)
    torch.testing.assert_close(eagle.torch.function(k.twice)(self=x), 2.0 * x)
    y = torch.full((3,), float("nan"), dtype=torch.float64)
    eagle.plan.auto(k.twice).run(self=x, y=y)
    torch.testing.assert_close(y, 2.0 * x)


def _sine_square(x):
    return eagle.torch.function(k.sine_square)(x=x)


def test_transforms_under_a_function_mode_take_the_eager_route():
    """Under ``torch.device`` (a function mode) a call went through the registered op, for
    which torch has no forward-mode rule: jvp gave zero tangents, grad torch's own error."""
    x = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    v = torch.ones(3, dtype=torch.float64)
    slope = torch.func.jvp(_sine_square, (x,), (v,))[1]
    torch.testing.assert_close(slope, torch.func.jvp(lambda x: torch.sin(x) ** 2, (x,), (v,))[1])
    with torch.device("cpu"):
        torch.testing.assert_close(torch.func.jvp(_sine_square, (x,), (v,))[1], slope)
        torch.testing.assert_close(torch.func.grad(lambda x: _sine_square(x).sum())(x), slope)
        with torch.autograd.forward_ad.dual_level():
            dual = _sine_square(torch.autograd.forward_ad.make_dual(x, v))
            torch.testing.assert_close(torch.autograd.forward_ad.unpack_dual(dual).tangent, slope)


def test_transforms_through_the_registered_op_are_refused_by_name():
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    v = torch.ones(3, dtype=torch.float64)
    with FlopCounterMode(display=False):
        with pytest.raises(RuntimeError, match=r"forward-mode AD .* of kernel 'sine_square' runs"):
            torch.func.jvp(_sine_square, (x,), (v,))
        with pytest.raises(RuntimeError, match=r"torch\.func\.grad .* runs eagerly only"):
            torch.func.grad(lambda x: _sine_square(x).sum())(x)
        torch.func.vmap(_sine_square)(x.reshape(3, 1))  # (torch's fallback loops)
    with pytest.raises(RuntimeError, match=r"forward-mode AD .* runs eagerly only"):
        torch.func.linearize(_sine_square, x)
    with FlopCounterMode(display=False), torch.autograd.forward_ad.dual_level():
        _sine_square(x)  # forward AD is on, but no tangent reaches the op: it runs
    with torch.device("cpu"):  # functionalize goes through the registered op, as before
        torch.testing.assert_close(torch.func.functionalize(_sine_square)(x), torch.sin(x) ** 2)
    f = eagle.torch.function(k.sine_square)  # (made outside the compiled code)
    compiled = torch.compile(
        lambda x, v: torch.func.jvp(lambda x: f(x=x), (x,), (v,))[1],
        backend="eager",
        fullgraph=True,
    )
    with pytest.raises(Exception, match=r"forward-mode AD .* runs eagerly only"):
        compiled(x, v)


def test_a_batched_cotangent_is_refused_by_plane_name():
    """``is_grads_batched=True`` hands the backward one legacy batched tensor, which has no
    memory: eagle named none of it (torch's "doesn't have storage")."""
    x = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64, requires_grad=True)
    eye = torch.eye(3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=r"a batched tensor .*plane 'y_bar'.*vectorize=False"):
        torch.autograd.grad(_sine_square(x), x, eye, is_grads_batched=True)
    with pytest.raises(RuntimeError, match=r"batched tensor .*forward-mode .*torch\.func .*jacfwd"):
        torch.autograd.functional.jacobian(
            _sine_square, x.detach(), vectorize=True, strategy="forward-mode"
        )
    jacobian = torch.autograd.functional.jacobian(_sine_square, x.detach(), vectorize=False)
    torch.testing.assert_close(jacobian.diagonal(), torch.sin(2 * x.detach()))


def test_call_slips_are_named():
    poly = eagle.torch.function(k.affine)
    x = torch.tensor([1.0, -2.0])
    with pytest.raises(TypeError, match=r"passed by position, as lanes; .* f\(x=\.\.\., a=\.\.\."):
        poly(x, a=2.0, b=1.0)
    with pytest.raises(
        TypeError, match=r"by name, one keyword each: f\(x=\.\.\., a=\.\.\., b=\.\.\.\); 3 "
    ):
        poly(x, 2.0, 1.0)
    with pytest.raises(TypeError, match=r"takes no plane 'A' \(and plane 'a' is missing\)"):
        poly(x=x, A=2.0, b=1.0)
    # numpy numbers are numbers, as torch's own ops take them
    assert poly(x=x, a=np.float32(2.0), b=np.int64(1)).tolist() == [3.0, -3.0]
    assert poly(x=x, a=np.float32("inf"), b=0.0).tolist() == [np.inf, -np.inf]
    ramp = eagle.torch.function(k.ramp)
    assert ramp(a=torch.tensor(1.0), lanes=np.int64(3)).shape == (3,)
    with pytest.raises(TypeError, match=r"plane 'a' \(Param\) is a bool"):
        poly(x=x, a=np.bool_(True), b=1.0)


def test_gemm_route_gradients_of_unused_planes_are_zero():
    """The GEMM route's backward writes into fresh tensors: the gradient of a plane no
    product reads was torch.empty's memory, silently."""
    from hawk.emit import policy
    from tests import _route_kernels as r

    with policy.using(host_route="gemm"):
        f = eagle.torch.function(r.contract_beside, contraction="gemm")
    assert f.plan.route("host") == "gemm"
    x = torch.randn(r.B * r.U, dtype=torch.float64, requires_grad=True)
    a = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    w = torch.randn(r.R, r.U, dtype=torch.float64, requires_grad=True)
    g = torch.randn(r.R, r.B, dtype=torch.float64)
    f(x=x, a=a, w=w, f=g).sum().backward()
    assert x.grad.eq(0).all() and a.grad.eq(0).all()
    torch.testing.assert_close(w.grad, g.sum(1, keepdim=True).expand(r.R, r.U))


def test_lane_planes_of_another_count_than_the_contraction_are_refused():
    """A 3-value initial ``y`` for a 35-lane contraction gave 3 lanes of the product,
    silently (a longer one failed inside the kernel)."""
    from tests import _route_kernels as r

    f = eagle.torch.function(r.contract)
    w = torch.randn(r.R, r.U, dtype=torch.float64)
    g = torch.randn(r.R, r.B, dtype=torch.float64)
    lanes = r.B * r.U
    for wrong in (3, lanes + 5):
        with pytest.raises(ValueError, match=f"'y' has {wrong} values, but kernel 'contract' has"):
            f(w=w, f=g, y=torch.zeros(wrong, dtype=torch.float64))
    assert f(w=w, f=g, y=torch.zeros(lanes, dtype=torch.float64)).shape == (lanes,)
