"""eagle.torch past the first derivative, on CPU tensors: double backward (a gradient
penalty), torch.func's transforms, and the refusals where hawk.diff cannot go further."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import eagle.torch  # noqa: E402
import hawk  # noqa: E402
import hawk.diff  # noqa: E402
from tests import _torch_kernels as k  # noqa: E402

TWICE = [
    k.scale_add,
    k.affine,
    k.branchy,
    k.gather,
    k.binned,
    k.axpb,
    k.tally,
    k.cubic,
    k.contract,
]


def _call(f, names):
    def call(*values):
        return f(**dict(zip(names, values, strict=True)))

    return call


def _outputs(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("kernel", TWICE, ids=lambda kernel: kernel.name)
def test_gradgradcheck(kernel):
    f = eagle.torch.function(kernel)
    planes = k.inputs(kernel, torch.float64, "cpu", lanes=5)
    assert torch.autograd.gradgradcheck(_call(f, list(planes)), tuple(planes.values()))


@pytest.mark.parametrize("contraction", ["loop", "gemm"])
def test_gradgradcheck_of_the_contraction_on_both_routes(contraction):
    f = eagle.torch.function(k.contract, contraction=contraction)
    planes = k.inputs(k.contract, torch.float64, "cpu")
    assert torch.autograd.gradgradcheck(lambda w, f_: f(w=w, f=f_), (planes["w"], planes["f"]))


def test_a_gradient_penalty_matches_torchs_closed_form():
    """The probe: the gradient taken with create_graph=True is itself differentiated (it was
    detached, so the penalty's share of x.grad vanished)."""
    f = eagle.torch.function(k.cubic)
    planes = k.inputs(k.cubic, torch.float64, "cpu", lanes=7)
    reference = {name: t.detach().clone().requires_grad_() for name, t in planes.items()}
    grads = {}
    for run, call in (("eagle", f), ("torch", k.REFERENCES[k.cubic])):
        x, c = (planes if run == "eagle" else reference).values()
        y = call(x=x, c=c)
        (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        assert gx.requires_grad
        (y.square().sum() + 0.5 * gx.square().sum()).backward()
        grads[run] = (x.grad, c.grad)
    torch.testing.assert_close(grads["eagle"], grads["torch"])


def test_a_gradient_no_loss_reads_puts_no_nan_in_a_second_derivative():
    """z's gradient, infinite where z is 0 (sqrt), takes no part in a penalty on x's: the
    second derivative is finite there, as torch's own; so is forward mode in x alone."""
    f = eagle.torch.function(k.root_scaled)
    z = torch.tensor([0.0, 4.0], dtype=torch.float64, requires_grad=True)
    results = []
    for call in (f, lambda x, z: x * x * torch.sqrt(z)):
        x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
        (gx,) = torch.autograd.grad(call(x=x, z=z).sum(), x, create_graph=True)
        (second,) = torch.autograd.grad(gx.square().sum(), x)

        def along_x(x, call=call):
            return call(x=x, z=z.detach())

        tangent = torch.func.jvp(along_x, (x.detach(),), (torch.ones(2, dtype=torch.float64),))[1]
        results.append((second, tangent))
    assert torch.isfinite(results[0][0]).all() and torch.isfinite(results[0][1]).all()
    torch.testing.assert_close(results[0], results[1])


def _root_and_square(x, z):
    return x * torch.sqrt(z), x * x


@pytest.mark.parametrize("route", ["eager", "op", "compiled", "func"])
def test_an_output_no_loss_reads_puts_no_nan_in_a_gradient(route):
    """y = x sqrt(z) takes no part in a loss on w = x * x: z's gradient is 0, as torch's,
    where dy/dz is infinite (its zero cotangent times inf was NaN)."""
    f = eagle.torch.function(k.root_and_square)

    def loss(x, z):
        return f(x=x, z=z)[1].sum()

    if route == "compiled":
        torch._dynamo.reset()
        loss = torch.compile(loss, backend="aot_eager", fullgraph=True)
    results = []
    for call in (loss, lambda x, z: _root_and_square(x, z)[1].sum()):
        x = torch.tensor([1.0, 2.0, -3.0], dtype=torch.float64, requires_grad=True)
        z = torch.tensor([0.0, 4.0, 0.5], dtype=torch.float64, requires_grad=True)
        if route == "func":
            grads = torch.func.grad(call, argnums=(0, 1))(x, z)
        elif route == "op":
            with _Passing():
                grads = torch.autograd.grad(call(x, z), (x, z), materialize_grads=True)
        else:
            grads = torch.autograd.grad(call(x, z), (x, z), materialize_grads=True)
        results.append(grads)
    assert torch.equal(results[0][1], torch.zeros(3, dtype=torch.float64))
    torch.testing.assert_close(results[0], results[1])


def test_an_output_no_loss_reads_puts_no_nan_in_second_derivatives():
    f = eagle.torch.function(k.root_and_square)
    results = []
    for call in (lambda x, z: f(x=x, z=z), _root_and_square):
        x = torch.tensor([1.0, 2.0, -3.0], dtype=torch.float64, requires_grad=True)
        z = torch.tensor([0.0, 4.0, 0.5], dtype=torch.float64, requires_grad=True)
        _, w = call(x, z)
        gx, gz = torch.autograd.grad(
            w.square().sum(), (x, z), create_graph=True, materialize_grads=True
        )
        second = torch.autograd.grad(gx.square().sum(), (x, z), materialize_grads=True)
        results.append((gx, gz, *second))
        hessian = torch.func.hessian(lambda x, call=call, z=z: call(x, z.detach())[1].sum())
        results.append(hessian(x.detach()))
    for got, want in zip(results[0], results[2], strict=True):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(results[1], results[3])


def test_a_table_output_alone_in_the_loss_keeps_the_only_lane_output():
    """Leaving y out would leave the adjoint no lane plane to count its lanes by: its zero
    cotangent stays in, and the gradient is still right."""
    f = eagle.torch.function(k.rooted_tally)
    t = (torch.rand(k.N, dtype=torch.float64) + 0.5).requires_grad_()
    _, h = f(t=t, lanes=20)
    (gt,) = torch.autograd.grad((h * torch.arange(k.N, dtype=torch.float64)).sum(), t)
    counts = torch.bincount(torch.arange(20) % k.N, minlength=k.N).to(torch.float64)
    torch.testing.assert_close(gt, 3.0 * counts * torch.arange(k.N, dtype=torch.float64))
    h0 = torch.randn(k.N, dtype=torch.float64, requires_grad=True)  # a table no loss reads
    y, _ = f(t=t, h=h0, lanes=20)
    gt, gh = torch.autograd.grad(y.sum(), (t, h0), materialize_grads=True)
    torch.testing.assert_close(gt, counts / (2 * t.detach().sqrt()))
    assert torch.equal(gh, torch.zeros_like(h0))


class _Passing(torch.overrides.TorchFunctionMode):
    """Sends eagle.torch's calls through its registered ops (as a mode does)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_second_derivatives_of_a_param_and_the_cotangent():
    f = eagle.torch.function(k.affine)
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    a = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    bar = torch.randn(6, dtype=torch.float64, requires_grad=True)
    y = f(x=x, a=a, b=0.25)
    gx, ga = torch.autograd.grad(y, (x, a), bar, create_graph=True)
    # d(gx)/da = bar, d(ga)/dx = bar, d(ga)/dbar = x, d(gx)/dbar = a
    hx, ha, hbar = torch.autograd.grad(gx.sum() + ga, (x, a, bar))
    torch.testing.assert_close(hx, bar.detach())
    torch.testing.assert_close(ha, bar.detach().sum())
    torch.testing.assert_close(hbar, x.detach() + a.detach())


def test_the_registered_op_differentiates_twice_as_the_eager_path_does():
    class Passing(torch.overrides.TorchFunctionMode):  # sends calls through the op
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    f = eagle.torch.function(k.cubic)
    planes = k.inputs(k.cubic, torch.float64, "cpu")
    results = []
    for mode in (None, Passing()):
        x, c = (t.detach().clone().requires_grad_() for t in planes.values())
        if mode is not None:
            mode.__enter__()
        try:
            (gx,) = torch.autograd.grad(f(x=x, c=c).sum(), x, create_graph=True)
            results.append(torch.autograd.grad(gx.square().sum(), (x, c)))
        finally:
            if mode is not None:
                mode.__exit__(None, None, None)
    torch.testing.assert_close(results[0], results[1])


def test_a_third_derivative_is_refused_by_name():
    f = eagle.torch.function(k.cubic)
    x, c = k.inputs(k.cubic, torch.float64, "cpu").values()
    (gx,) = torch.autograd.grad(f(x=x, c=c).sum(), x, create_graph=True)
    (hx,) = torch.autograd.grad(gx.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="'cubic' is differentiable twice"):
        hx.sum().backward()


def test_hvp_says_to_use_vhp_and_vhp_gives_torchs_hvp():
    """torch.autograd.functional.hvp differentiates the backward's backward (its
    double-backward trick), which eagle cannot: refused, naming vhp, which gives the same."""
    f, reference, x = _closed(k.cubic)
    v = torch.linspace(-1.0, 1.0, 5, dtype=x.dtype)
    with pytest.raises(RuntimeError, match=r"functional.hvp .*functional\.vhp \(equal to hvp"):
        torch.autograd.functional.hvp(lambda x: f(x).sum(), x, v)
    _, want = torch.autograd.functional.hvp(lambda x: reference(x).sum(), x, v)
    _, got = torch.autograd.functional.vhp(lambda x: f(x).sum(), x, v)
    torch.testing.assert_close(got, want)


def test_a_second_derivative_through_an_initial_value_the_adjoint_reads():
    """square_in_place's adjoint reads y and takes y_bar, so its own adjoint names the
    gradient of y y_bar2 (it was refused as a clash of names)."""
    f = eagle.torch.function(k.square_in_place)
    x, y = k.inputs(k.square_in_place, torch.float64, "cpu").values()
    assert torch.autograd.gradgradcheck(lambda x, y: f(x=x, y=y), (x, y))
    (gx, _) = torch.autograd.grad(f(x=x, y=y).sum(), (x, y), create_graph=True)
    (hxy,) = torch.autograd.grad(gx.sum(), y)  # gx = y*y, so d(sum gx)/dy = 2y
    torch.testing.assert_close(hxy, 2 * y.detach())


def test_a_second_derivative_hawk_cannot_take_is_refused_never_detached(monkeypatch):
    """Where hawk.diff refuses the adjoint's adjoint, the gradient still carries the graph
    and its derivative raises, naming the kernel and hawk's reason."""
    vjp = hawk.diff.vjp

    def refusing(kernel, *args, **kwargs):
        if isinstance(kernel, hawk.diff.AdjointKernel):
            raise hawk.HawkError("a reason of hawk's")
        return vjp(kernel, *args, **kwargs)

    monkeypatch.setattr(hawk.diff, "vjp", refusing)
    f = eagle.torch.function(k.cubic)
    x, c = k.inputs(k.cubic, torch.float64, "cpu").values()
    (gx,) = torch.autograd.grad(f(x=x, c=c).sum(), x, create_graph=True)
    assert gx.requires_grad
    with pytest.raises(RuntimeError, match=r"'cubic' has no second derivative .*reason of hawk's"):
        torch.autograd.grad(gx.sum(), x)


# -- torch.func ------------------------------------------------------------------------


def _closed(kernel):
    """The kernel's eagle.torch function and torch reference, both as functions of x."""
    planes = k.inputs(kernel, torch.float64, "cpu", lanes=5)
    rest = {name: t.detach() for name, t in planes.items() if name != "x"}
    f = eagle.torch.function(kernel)
    return (
        lambda x: f(x=x, **rest),
        lambda x: k.REFERENCES[kernel](x=x, **rest),
        planes["x"].detach(),
    )


@pytest.mark.parametrize(
    "kernel", [k.cubic, k.affine, k.axpb, k.branchy, k.sine_square], ids=lambda k_: k_.name
)
@pytest.mark.parametrize(
    "transform",
    [
        lambda f, x: torch.func.grad(lambda x: f(x).square().sum())(x),
        lambda f, x: torch.func.vjp(f, x)[1](torch.linspace(-1.0, 1.0, 5, dtype=x.dtype)),
        lambda f, x: torch.func.jvp(f, (x,), (torch.linspace(-1.0, 1.0, 5, dtype=x.dtype),)),
        lambda f, x: torch.func.jacrev(f)(x),
        lambda f, x: torch.func.jacfwd(f)(x),
        lambda f, x: torch.func.hessian(lambda x: f(x).sum())(x),
        lambda f, x: torch.func.vmap(f)(torch.stack([x, 2 * x, -x])),
        lambda f, x: torch.func.vmap(torch.func.grad(lambda x: f(x).sum()))(torch.stack([x, -x])),
        lambda f, x: torch.func.grad(lambda x: torch.func.grad(lambda x: f(x).sum())(x).sum())(x),
        # an empty batch: empty results, shaped as one element's
        lambda f, x: torch.func.vmap(f)(x[None][:0]),
        lambda f, x: torch.func.vmap(torch.func.grad(lambda x: f(x).sum()))(x[None][:0]),
        lambda f, x: torch.func.vmap(torch.func.hessian(lambda x: f(x).sum()))(x[None][:0]),
    ],
    ids=[
        "grad", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "vmap", "vmap-grad", "grad-grad",
        "vmap-empty", "vmap-grad-empty", "vmap-hessian-empty",
    ],
)  # fmt: skip
def test_torch_func_transforms_match_torch(kernel, transform):
    f, reference, x = _closed(kernel)
    torch.testing.assert_close(transform(f, x), transform(reference, x))


@pytest.mark.parametrize(
    ("transform", "batched"),
    [
        (lambda g: torch.func.vmap(torch.func.grad(g)), True),
        (lambda g: torch.func.grad(g), False),
        (lambda g: torch.func.jacrev(g), False),
    ],
    ids=["vmap-grad", "grad", "jacrev"],
)
def test_a_param_number_seen_under_torch_func_serves_later_calls(transform, batched):
    """Its one-element tensor made under the transform was kept for the number, a wrapped
    tensor: a later call that autograd does not record refused it as batched."""
    f = eagle.torch.function(k.affine)
    x = torch.randn(2, 7, dtype=torch.float64)
    transform(lambda v: f(x=v, a=0.375, b=-1.625).sum())(x if batched else x[0])
    with torch.no_grad():
        y = f(x=x[0], a=0.375, b=-1.625)
    torch.testing.assert_close(y, 0.375 * x[0] - 1.625)


def test_vmap_and_jvp_of_several_outputs_and_a_table_add():
    for kernel in (k.gather, k.tally):
        planes = {name: t.detach() for name, t in k.inputs(kernel, torch.float64, "cpu").items()}
        f = eagle.torch.function(kernel)
        tangents = {name: torch.randn_like(t) for name, t in planes.items()}
        names = list(planes)
        got = torch.func.jvp(_call(f, names), tuple(planes.values()), tuple(tangents.values()))
        want = torch.func.jvp(
            _call(k.REFERENCES[kernel], names), tuple(planes.values()), tuple(tangents.values())
        )
        torch.testing.assert_close(got, want)
        batch = {name: torch.stack([t, 2 * t]) for name, t in planes.items()}
        torch.testing.assert_close(
            torch.func.vmap(_call(f, names))(*batch.values()),
            torch.func.vmap(_call(k.REFERENCES[kernel], names))(*batch.values()),
        )
        # an empty batch (torch's index_add refuses one under vmap): one element's shapes
        empty = torch.func.vmap(_call(f, names))(*(t[None][:0] for t in planes.values()))
        one = k.REFERENCES[kernel](**planes)
        empty, one = (v if isinstance(v, tuple) else (v,) for v in (empty, one))
        for got, want in zip(empty, one, strict=True):
            assert got.shape == (0, *want.shape) and got.dtype == want.dtype


def test_forward_mode_ad_gives_the_tangent_not_zeros():
    import torch.autograd.forward_ad as fwad

    f, reference, x = _closed(k.cubic)
    tangent = torch.randn_like(x)
    results = []
    for call in (f, reference):
        with fwad.dual_level():
            results.append(fwad.unpack_dual(call(fwad.make_dual(x, tangent))).tangent)
    assert results[0] is not None
    torch.testing.assert_close(results[0], results[1])


def test_forward_mode_through_a_second_order_backward_is_refused_by_name():
    f, _, x = _closed(k.cubic)
    third = torch.func.jacfwd(torch.func.hessian(lambda x: f(x).sum()))
    with pytest.raises(RuntimeError, match="second-order backward .* no forward-mode derivative"):
        third(x)


@pytest.mark.parametrize("outer", [torch.func.jacrev, torch.func.jacfwd], ids=["rev", "fwd"])
def test_a_second_derivative_through_forward_mode_says_what_to_use(outer):
    """Forward mode already runs the second-order kernel: its derivative is refused with
    the transforms that do give a Hessian, not as a third derivative the user never took."""
    f, _, x = _closed(k.cubic)
    with pytest.raises(RuntimeError, match=r"for a Hessian use torch.func.hessian or jacrev"):
        outer(torch.func.jacfwd(lambda x: f(x).sum()))(x)
    hessian = torch.func.jacrev(torch.func.jacrev(lambda x: f(x).sum()))(x)
    torch.testing.assert_close(hessian, torch.func.hessian(lambda x: f(x).sum())(x))
