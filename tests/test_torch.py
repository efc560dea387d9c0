"""eagle.torch on CPU tensors (the host path): values, gradients, the op's
registration, torch.compile, and torch staying optional."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import eagle.plan  # noqa: E402
import eagle.torch  # noqa: E402
import hawk  # noqa: E402
from hawk.emit import policy  # noqa: E402
from tests import _torch_kernels as k  # noqa: E402
from tests._generated import horner  # noqa: E402

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


def _call(f, planes):
    return f(**planes)


@pytest.mark.parametrize("kernel", GRADCHECKED, ids=lambda kernel: kernel.name)
def test_values_match_torch(kernel):
    planes = k.inputs(kernel, torch.float64, "cpu")
    got = _call(eagle.torch.function(kernel), planes)
    want = k.REFERENCES[kernel](**planes)
    for g, w in zip(
        got if isinstance(got, tuple) else (got,),
        want if isinstance(want, tuple) else (want,),
        strict=True,
    ):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("kernel", GRADCHECKED, ids=lambda kernel: kernel.name)
def test_gradcheck(kernel):
    f = eagle.torch.function(kernel)
    planes = k.inputs(kernel, torch.float64, "cpu")
    names = list(planes)
    assert torch.autograd.gradcheck(
        lambda *values: f(**dict(zip(names, values, strict=True))), tuple(planes.values())
    )


@pytest.mark.parametrize("contraction", ["loop", "gemm"])
def test_contraction_gradcheck_on_both_routes(contraction):
    f = eagle.torch.function(k.contract, contraction=contraction)
    assert f.plan.policy.contraction == contraction
    planes = k.inputs(k.contract, torch.float64, "cpu")
    torch.testing.assert_close(f(**planes), k.REFERENCES[k.contract](**planes))
    assert torch.autograd.gradcheck(lambda w, f_: f(w=w, f=f_), (planes["w"], planes["f"]))


@pytest.mark.parametrize("kernel", GRADCHECKED, ids=lambda kernel: kernel.name)
def test_the_gradient_of_a_sum_matches_torch(kernel):
    """``out.sum()`` hands the backward a broadcast (stride-0) cotangent, which the loop
    adjoint reads as one element, writing its lane gradients into uninitialised tensors."""
    planes = k.inputs(kernel, torch.float64, "cpu")
    got = eagle.torch.function(kernel)(**planes)
    got = got if isinstance(got, tuple) else (got,)
    sum(3.0 * out.sum() for out in got).backward()
    grads = {name: value.grad for name, value in planes.items()}
    for value in planes.values():
        value.grad = None
    want = k.REFERENCES[kernel](**planes)
    want = want if isinstance(want, tuple) else (want,)
    sum(3.0 * out.sum() for out in want).backward()
    for name, value in planes.items():
        torch.testing.assert_close(grads[name], value.grad, msg=name)


def _reference(kernel, planes):
    """The kernel's torch reference over ``planes``; an initial value not given is zeros."""
    wanted = inspect.signature(k.REFERENCES[kernel]).parameters
    f = eagle.torch.function(kernel)
    for plane in f._outputs:
        if plane.name in wanted and plane.name not in planes:
            shape = planes["x"].shape if plane.kind == "output" else plane.shape
            planes = {**planes, plane.name: torch.zeros(shape, dtype=planes["x"].dtype)}
    return k.REFERENCES[kernel](**{name: planes[name] for name in wanted})


@pytest.mark.parametrize("kernel", [k.scale_add, k.axpb, k.square_in_place, k.tally])
@pytest.mark.parametrize("start", ["absent", "given", "requires_grad"])
@pytest.mark.parametrize("x_requires_grad", [True, False])
def test_every_kind_of_initial_value_differentiates_like_torch(kernel, start, x_requires_grad):
    """An output's initial value the kernel overwrites (scale_add), reads without its
    adjoint needing it (axpb: y = a * x + y), reads with its adjoint needing it
    (square_in_place), or adds into (tally, a Mutable[Table]); absent, given, or
    requiring grad; with x requiring grad or not."""
    f = eagle.torch.function(kernel)
    (output,) = f._output_names
    planes = k.inputs(kernel, torch.float64, "cpu")
    planes["x"].requires_grad_(x_requires_grad)
    if start == "absent":
        planes.pop(output, None)
    else:
        if output not in planes:  # scale_add's inputs have no y: make one
            planes[output] = torch.randn_like(planes["x"]) + 0.1
        planes[output].requires_grad_(start == "requires_grad")
    tracked = [name for name, t in planes.items() if t.requires_grad]
    got = f(**planes)
    want = _reference(kernel, planes)
    torch.testing.assert_close(got, want)
    assert got.requires_grad == bool(tracked)
    if not tracked:
        return
    bar = torch.randn_like(want)
    for cotangent in (bar, None):  # a cotangent of its own, and the broadcast one of a sum
        inputs = [planes[name] for name in tracked]
        got_grads = torch.autograd.grad(
            got if cotangent is None else got * bar,
            inputs,
            torch.ones_like(got),
            retain_graph=True,
            allow_unused=True,
        )
        want_grads = torch.autograd.grad(want if cotangent is None else want * bar, inputs,
                                         torch.ones_like(want), retain_graph=True,
                                         allow_unused=True)  # fmt: skip
        for name, g, w in zip(tracked, got_grads, want_grads, strict=True):
            if w is None:  # nothing depends on it (an overwritten initial value)
                assert g is None or torch.equal(g, torch.zeros_like(g)), name
            else:
                torch.testing.assert_close(g, w, msg=name)


@pytest.mark.parametrize("route", ["eager", "registered op"])
@pytest.mark.parametrize(
    "kernel", [k.scale_add, k.axpb, k.square_in_place, k.tally], ids=lambda kernel: kernel.name
)
def test_only_an_initial_value_the_backward_reads_is_kept_from_changes(kernel, route):
    """As torch's own ops, the backward keeps only what it reads: an initial value it does
    not read (overwritten, y = a * x + y, or added into) may be changed in place before
    the backward, with the same gradients; one it reads (y * y) raises torch's error."""
    f = eagle.torch.function(kernel)
    (output,) = f._output_names
    planes = k.inputs(kernel, torch.float64, "cpu")
    planes["x"].requires_grad_(True)
    planes.setdefault(output, torch.randn_like(planes["x"]) + 0.1).requires_grad_(True)
    names = list(planes)

    def gradients(change: bool) -> tuple[torch.Tensor, ...]:
        tensors = [t.detach().clone().requires_grad_(t.requires_grad) for t in planes.values()]
        start = tensors[names.index(output)]
        given = start.clone() if change else start  # (a leaf may not be changed in place)
        values = [given if t is start else t for t in tensors]
        if route == "eager":
            got = f(**dict(zip(names, values, strict=True)))
        else:
            got = f.op(*values, -1, torch.float64, f.key)
        bar = torch.randn_like(got, generator=torch.Generator().manual_seed(7))
        if change:
            given.mul_(3.0)
        return torch.autograd.grad(got, tensors, bar, allow_unused=True)

    if kernel is k.square_in_place:
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            gradients(change=True)
        return
    for got, want in zip(gradients(change=True), gradients(change=False), strict=True):
        if want is None:
            assert got is None
        else:
            torch.testing.assert_close(got, want)


def test_making_a_function_derives_no_adjoint_and_warns_of_no_cost(tmp_path):
    """What its backward keeps is worked out at the first call autograd records: making
    the function (or a call nothing records) neither derives the adjoint nor warns."""
    kernel = horner(tmp_path, 400, into=True)  # reads y first; its adjoint warns of reruns
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = eagle.torch.function(kernel)
        x, c = torch.rand(3, dtype=torch.float64), torch.rand(400, dtype=torch.float64)
        f(x=x, c=c)
    assert "_read_initials" not in vars(f._derivatives)
    with pytest.warns(hawk.AdjointCostWarning):
        f(x=x.requires_grad_(), c=c).sum().backward()
    assert x.grad is not None


def test_an_adjoint_reading_an_initial_value_not_kept_raises_never_reads_zeros(monkeypatch):
    f = eagle.torch.function(k.square_in_place)
    monkeypatch.setattr(f._derivatives, "_read_initials", (False,))  # (a fault of eagle's)
    planes = k.inputs(k.square_in_place, torch.float64, "cpu")
    planes["y"].requires_grad_(True)
    with pytest.raises(RuntimeError, match="internal error.*initial value of 'y'"):
        f(**planes).sum().backward()


@pytest.mark.parametrize("kernel", [k.axpb, k.tally, k.square_in_place, k.affine])
def test_torch_compile_fullgraph_forward_and_backward_equal_eager(kernel):
    torch._dynamo.reset()
    f = eagle.torch.function(kernel)
    planes = k.inputs(kernel, torch.float64, "cpu")
    names = list(planes)

    def loss(*values):
        out = f(**dict(zip(names, values, strict=True)))
        return (out * out).sum()

    eager = loss(*planes.values())
    eager_grads = torch.autograd.grad(eager, list(planes.values()))
    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)  # raises on a break
    got = compiled(*planes.values())
    grads = torch.autograd.grad(got, list(planes.values()))
    torch.testing.assert_close(got, eager)
    torch.testing.assert_close(grads, eager_grads)


def test_a_broadcast_cotangent_is_read_in_place_and_unused_inputs_get_zeros():
    f = eagle.torch.function(k.scale_add)
    f._derivatives._backward_runners.clear()  # (the function is shared with the other tests)
    x, z = (torch.randn(1000, dtype=torch.float64, requires_grad=True) for _ in range(2))
    f(x=x, z=z).sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 0.5))
    torch.testing.assert_close(z.grad, torch.ones_like(z))
    (key,) = f._derivatives._backward_runners
    assert key == ((True, True, False), True, ("y",), (False,))  # fresh, y broadcast
    g = eagle.torch.function(k.first_only)
    x.grad = z.grad = None
    (2.0 * g(x=x, z=z)).sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
    assert torch.equal(z.grad, torch.zeros_like(z))  # written by every lane, not left as is


def test_zero_lanes_run_forward_and_backward():
    f = eagle.torch.function(k.scale_add)
    x = torch.randn(0, dtype=torch.float64, requires_grad=True)
    y = f(x=x, z=torch.randn(0, dtype=torch.float64))
    y.sum().backward()  # a stride-0 cotangent with no element to read
    assert y.shape == (0,) and x.grad is not None and x.grad.shape == (0,)


def test_gradients_only_for_inputs_that_require_them():
    f = eagle.torch.function(k.contract)
    w = torch.randn(k.R, k.U, dtype=torch.float64, requires_grad=True)
    features = torch.randn(k.R, k.B, dtype=torch.float64)
    f(w=w, f=features).sum().backward()
    assert features.grad is None
    torch.testing.assert_close(w.grad, features.sum(1, keepdim=True).expand(k.R, k.U))


def test_outputs_are_new_tensors_and_inputs_are_left_alone():
    f = eagle.torch.function(k.square_in_place)
    x, y0 = torch.randn(9, dtype=torch.float64), torch.randn(9, dtype=torch.float64)
    kept = y0.clone()
    y = f(x=x, y=y0)
    assert y.data_ptr() != y0.data_ptr()
    torch.testing.assert_close(y0, kept)
    torch.testing.assert_close(y, kept * kept * x)


@pytest.mark.parametrize("kernel", [k.square_in_place, k.tally], ids=lambda kernel: kernel.name)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("given", [False, True])
def test_outputs_are_tensors_of_their_own_that_may_be_changed_in_place(kernel, dtype, given):
    """Never a view (of a copy of the initial value, say): autograd refuses an in-place
    change of a custom Function's view output, and torch's own ops allow it."""
    f = eagle.torch.function(kernel)
    planes = k.inputs(kernel, dtype, "cpu")
    (output,) = f._output_names
    if not given:
        planes.pop(output)
    planes["x"].requires_grad_(True)
    out = f(**planes)
    assert not out._is_view()
    want = out.detach() * 2.0
    out.mul_(2.0)
    out.sum().backward()
    torch.testing.assert_close(out.detach(), want)
    assert planes["x"].grad is not None


def test_outputs_not_given_start_at_zero():
    assert torch.equal(eagle.torch.function(k.square_in_place)(x=torch.ones(4)), torch.zeros(4))
    counts = eagle.torch.function(k.binned)(x=torch.ones(12), w=2.0)
    assert counts.shape == (k.N,) and torch.equal(counts, torch.full((k.N,), 4.0))


def test_params_take_numbers_and_outputs_take_the_compute_dtype():
    f = eagle.torch.function(k.affine)
    x = torch.randn(5)
    y = f(x=x, a=2.0, b=1)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, 2.0 * x + 1)
    assert f(x=x.double(), a=2.0, b=1.0).dtype == torch.float64


def test_lanes_when_no_lane_plane_is_given():
    ramp = eagle.torch.function(k.ramp)
    a = torch.tensor(2.0, dtype=torch.float64)
    torch.testing.assert_close(ramp(a=a, lanes=4), torch.arange(4.0, dtype=torch.float64) * 2)
    with pytest.raises(TypeError, match="pass lanes=N"):
        ramp(a=a)
    planes = k.inputs(k.contract, torch.float32, "cpu")  # its lanes are its product: B * U
    assert eagle.torch.function(k.contract)(**planes).shape == (k.B * k.U,)


def test_a_strided_input_is_read_as_its_values():
    f = eagle.torch.function(k.scale_add)
    x = torch.randn(6, 2)[:, 0]
    z = torch.randn(6)
    torch.testing.assert_close(f(x=x, z=z), 0.5 * x + z)


def test_negated_views_are_read_as_the_values_they_stand_for():
    """A lazily negated view (``z.conj().imag``) reads as its negated values, as in torch's
    own ops: as an input, a Param and a cotangent, in calls whose outputs land where an
    earlier call's did (a kept binding)."""
    f = eagle.torch.function(k.scale_add)
    x = torch.linspace(1.0, 2.0, 1000, requires_grad=True)
    z = torch.rand(1000)
    plain = torch.complex(torch.zeros(1000), z)
    for _ in range(3):  # the CPU allocator hands the outputs' addresses back
        f(x=x, z=plain.imag)
        torch.testing.assert_close(f(x=x, z=plain.conj().imag), 0.5 * x - z)
        g = torch.rand(1000)
        (grad,) = torch.autograd.grad(f(x=x, z=z), x, grad_outputs=torch._neg_view(g))
        torch.testing.assert_close(grad, -0.5 * g)
    affine = eagle.torch.function(k.affine)
    a = torch.complex(torch.zeros(1), torch.full((1,), 3.0)).conj().imag  # a Param: -3
    for _ in range(3):
        torch.testing.assert_close(affine(x=x, a=a, b=1.0), -3.0 * x + 1.0)


def test_refusals_name_the_plane():
    f = eagle.torch.function(k.affine)
    x = torch.randn(4)
    with pytest.raises(TypeError, match="missing plane 'b'"):
        f(x=x, a=1.0)
    with pytest.raises(TypeError, match="no plane 'q'"):
        f(x=x, a=1.0, b=1.0, q=x)
    with pytest.raises(TypeError, match=r"plane 'x' is a torch.int64 tensor"):
        f(x=torch.ones(4, dtype=torch.int64), a=1.0, b=1.0)
    with pytest.raises(TypeError, match=r"plane 'x' \(Scalar\) is a float"):
        f(x=1.0, a=1.0, b=1.0)
    with pytest.raises(ValueError, match="contraction must be"):
        eagle.torch.function(k.affine, contraction="fast")
    with pytest.raises(TypeError, match="@hawk.kernel"):
        eagle.torch.function(lambda x: x)


def test_a_param_int_near_the_largest_value_is_taken_as_plan_run_takes_it():
    """An int Param is rounded by float() on both paths: one just below the bound where
    float32 rounds to infinity, which float() rounds onto it, is refused alike; one
    float() keeps below the bound gives the compute dtype's largest value alike."""
    affine = eagle.torch.function(k.affine)
    plan = eagle.plan.auto(k.affine)
    bound = 2**128 - 2**103  # float32 rounds it (a tie) and all above to infinity
    x = torch.tensor([1.0, -1.0])
    for value in (bound - 1, bound - 2**60):  # (float() rounds both onto the bound)
        with pytest.raises(OverflowError, match=r"Param 'a' is an int of 128 bits, too large"):
            affine(x=x, a=value, b=0.0)
        with pytest.raises(OverflowError, match=r"Param 'a' is an int of 128 bits, too large"):
            plan.run(x=x.numpy(), a=value, b=0.0, y=np.empty(2, np.float32))
    float64_bound = 2**1024 - 2**970
    for dtype, below in (
        (torch.float32, int(np.nextafter(float(bound), 0.0))),  # float() keeps it below
        (torch.float64, float64_bound - 1),  # float() gives float64's largest value
    ):
        x = torch.tensor([1.0, -1.0], dtype=dtype)
        out = np.empty(2, x.numpy().dtype)
        plan.run(x=x.numpy(), a=below, b=0.0, y=out)
        torch.testing.assert_close(affine(x=x, a=below, b=0.0), torch.from_numpy(out))
        assert out[0] == torch.finfo(dtype).max and out[1] == -torch.finfo(dtype).max


def test_a_symbolic_param_stays_symbolic_under_make_fx():
    """A Param from a shape under make_fx's symbolic tracing is an input of the graph,
    never fixed to its value at the trace (checking its size would fix it)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    affine = eagle.torch.function(k.affine)
    graph = make_fx(
        lambda x: affine(x=x, a=x.shape[0], b=x.shape[0] * 0.5), tracing_mode="symbolic"
    )(torch.ones(3))
    torch.testing.assert_close(graph(torch.ones(5)), torch.full((5,), 7.5))


def test_coercions_are_refused_by_name():
    affine, scale_add = eagle.torch.function(k.affine), eagle.torch.function(k.scale_add)
    x3, x4 = torch.randn(3), torch.randn(4)
    with pytest.raises(TypeError, match=r"plane 'a' \(Param\) is a bool; pass a tensor or a"):
        affine(x=x4, a=True, b=1.0)  # was taken as 1.0
    with pytest.raises(ValueError, match=r"lanes=7, but plane 'x' has 3 values, one per lane"):
        scale_add(x=x3, z=torch.randn(3), lanes=7)  # was ignored
    with pytest.raises(ValueError, match=r"plane 'x' \(Scalar\) takes a 1-D tensor .* \(2, 3\)"):
        scale_add(x=torch.randn(2, 3), z=torch.randn(6))  # was flattened
    with pytest.raises(ValueError, match=r"initial value of 'y' \(Mutable\[Scalar\]\) takes a 1-D"):
        scale_add(x=x4, z=x4, y=torch.randn(2, 2))
    ramp = eagle.torch.function(k.ramp)
    a = torch.tensor(2.0)
    with pytest.raises(ValueError, match="lanes must be a lane count, 0 or more, not -1"):
        ramp(a=a, lanes=-1)
    for wrong in (2.5, True, "3"):
        with pytest.raises(TypeError, match="lanes must be an int"):
            ramp(a=a, lanes=wrong)
    with pytest.raises(OverflowError, match=r"Param 'a' is an int of 1329 bits, too large for"):
        affine(x=x4, a=10**400, b=1.0)
    with pytest.raises(OverflowError, match=r"Param 'b' is 1e\+39, too large for torch.float32"):
        affine(x=x4, a=1.0, b=1e39)  # fits float64, so float64 tensors take it
    assert affine(x=x4.double(), a=1.0, b=1e39).dtype == torch.float64
    torch.testing.assert_close(
        affine(x=x4, a=float("inf"), b=0.0)[x4 > 0], torch.full_like(x4, float("inf"))[x4 > 0]
    )
    with pytest.raises(ValueError, match=r"plane 'a' is a Param: pass a number or a one-element"):
        affine(x=x4, a=torch.ones(2), b=1.0)
    with pytest.raises(ValueError, match=r"plane 't' is Table\[\"i\":6\]: pass a tensor of shape"):
        eagle.torch.function(k.gather)(t=torch.ones(5), x=x4)
    contract = eagle.torch.function(k.contract)
    planes = k.inputs(k.contract, torch.float64, "cpu")
    transposed = {name: t.T.contiguous() if t.dim() == 2 else t for name, t in planes.items()}
    with pytest.raises(ValueError, match=r"pass a tensor of shape \(\d+, \d+\), or a 1-D tensor"):
        contract(**transposed)  # a (U, R) tensor for Table["r":R, "u":U]: never read as one
    flat = {name: t.reshape(-1) for name, t in planes.items()}
    torch.testing.assert_close(contract(**flat), contract(**planes))
    with pytest.raises(ValueError, match=r"plane 'z' has 3 values but plane 'x' has 4"):
        scale_add(x=x4, z=x3)
    with pytest.raises(ValueError, match=r"plane 'z' is on meta but plane 'x' is on cpu"):
        scale_add(x=x4, z=x4.to("meta"))
    planes = k.inputs(k.contract, torch.float32, "cpu")
    with pytest.raises(ValueError, match=f"lanes=5, but kernel 'contract' has {k.B * k.U} lanes"):
        eagle.torch.function(k.contract)(**planes, lanes=5)
    with pytest.raises(TypeError, match="pass at least one plane of kernel 'ramp' as a tensor"):
        ramp(a=2.0, lanes=3)
    with pytest.raises(TypeError, match=r"initial value of 'y' \(Mutable\[Scalar\]\) is a list"):
        scale_add(x=x4, z=x4, y=[0.0] * 4)


def test_one_function_per_kernel_and_policy_while_it_lives():
    loop = eagle.torch.function(k.contract, contraction="loop")
    assert eagle.torch.function(k.contract, contraction="loop") is loop
    gemm = eagle.torch.function(k.contract, contraction="gemm")
    assert gemm is not loop and gemm.key != loop.key
    assert loop.op is gemm.op  # one registered op per signature (2 inputs, 1 output)
    assert loop.op.name() == "eagle::function_2_1_r2"


def test_the_ops_schemas_are_pinned_to_their_revision():
    """torch's on-disk caches of compiled graphs key a graph on the forward op it calls: a
    change to the ops' schemas (or autograd formulas) without a new ``_REVISION`` in their
    names has a cached graph call the new backward op the old way. Bump it, then this."""
    schemas = [str(op._schema) for op in eagle._torch_autograd.signature_ops(2, 1)]
    assert schemas == [
        "eagle::function_2_1_r2(Tensor v0, Tensor v1, Tensor? s0, SymInt lanes, "
        "ScalarType dtype, int key) -> Tensor",
        "eagle::function_2_1_r2_backward(Tensor v0, Tensor v1, Tensor? s0, Tensor c0, "
        "bool[] needs, bool[] zero, int key) -> (Tensor, Tensor, Tensor)",
        "eagle::function_2_1_r2_backward2(Tensor v0, Tensor v1, Tensor? s0, Tensor c0, "
        "Tensor? g0, Tensor? g1, Tensor? g2, bool[] needs, bool[] wants, bool[] zero, int key) "
        "-> (Tensor, Tensor, Tensor, Tensor)",
    ]


def test_a_function_keeps_the_whole_policy_it_was_made_under_forward_and_backward():
    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    wrapping = eagle.torch.function(k.wraps)
    with policy.using(int_overflow="check"):
        checked = eagle.torch.function(k.wraps)
        assert checked is not wrapping and checked is eagle.torch.function(k.wraps)
        y = wrapping(x=x)  # made to wrap: it wraps here too, and so does its backward
        y.sum().backward()
        assert y.tolist() == [0.0, 0.0] and x.grad.tolist() == [0.0, 0.0]
    assert checked.plan.policy.int_overflow == "check"
    with pytest.raises(OverflowError, match="int64 overflow at lane"):
        checked(x=x)  # made checked: it checks outside the block too
    y = wrapping(x=x.detach().requires_grad_())
    with policy.using(int_overflow="check"):
        y.sum().backward()  # its backward was built when the function was made


def test_threads_making_their_first_function_of_a_signature_get_one_op():
    # registering an op twice is an error in torch: threads asking at once take turns
    script = textwrap.dedent(
        """
        import threading
        import eagle.torch
        from tests import _torch_kernels as k

        made, failed = [], []

        def make():
            try:
                made.append(eagle.torch.function(k.tally))
            except Exception as exc:
                failed.append(exc)

        threads = [threading.Thread(target=make) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(len(failed), len({id(f) for f in made}))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "1"]


def test_the_backward_op_refuses_a_gradient_the_kernel_has_not():
    f = eagle.torch.function(k.scale_add)  # never reads y, so y's initial value has none
    x, z = torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    bar = torch.ones(4, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"needs\[2\] is True, but .* output 'y'"):
        f.backward_op(x, z, None, bar, [False, False, True], [False], f.key)


@pytest.mark.parametrize(
    "kernel", [k.affine, k.gather, k.square_in_place, k.binned, k.axpb, k.tally]
)
def test_the_op_passes_torch_opcheck(kernel):
    f = eagle.torch.function(kernel)
    planes = k.inputs(kernel, torch.float64, "cpu")
    inputs = [planes[name] for name in f._input_names]
    initials = [planes.get(name) for name in f._output_names]
    torch.library.opcheck(f.op, (*inputs, *initials, -1, torch.float64, f.key))


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(k.R, k.U, dtype=torch.float64))
        self.layer = eagle.torch.function(k.contract, contraction="gemm")
        self.act = eagle.torch.function(k.affine)

    def forward(self, features):
        y = self.layer(w=self.w, f=torch.sin(features))
        return self.act(x=y, a=0.5, b=1.0).square().sum()


def test_a_param_number_that_changes_is_an_input_of_the_compiled_graph():
    """A schedule's value passed as a float: torch.compile makes it an input of the graph
    (as it does for torch's own arithmetic) rather than compiling again for each value."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    f = eagle.torch.function(k.affine)
    compiled = torch.compile(lambda x, a: f(x=x, a=a, b=0.5), backend="aot_eager", fullgraph=True)
    x = torch.randn(8, dtype=torch.float64)
    try:
        for step in range(6):
            a = 1.0 + 0.1 * step
            torch.testing.assert_close(compiled(x, a), a * x + 0.5)
        assert counters["stats"]["unique_graphs"] <= 2  # (the first call's value, then any)
        # NaN has no order and a number too large for float32 is an infinity there, as
        # torch's scalars are (an eager call refuses it)
        for a in (float("nan"), 1e300):
            torch.testing.assert_close(compiled(x.float(), a), a * x.float() + 0.5, equal_nan=True)
        with pytest.raises(OverflowError, match="too large for torch.float32"):
            f(x=x.float(), a=1e300, b=0.5)
    finally:
        torch._dynamo.reset()


def test_param_ints_keep_their_rounding_and_symbolic_ones_stay_symbolic():
    """An int Param rounds through float() on every path (as plan.run does), ints beyond
    int64 included; an int from a traced shape stays symbolic in an exported graph."""
    f = eagle.torch.function(k.affine)
    x = torch.ones(5)
    big = 2**60 + 2**36 + 1  # float(big) is 2**60, float32(big) 2**60 + 2**37
    for a in (big, 2**64):
        want = f(x=x, a=a, b=0.0)
        assert want[0].item() == float(torch.tensor(float(a), dtype=torch.float32))
        with torch.inference_mode():
            torch.testing.assert_close(f(x=x, a=a, b=0.0), want)
        torch.testing.assert_close(
            torch.func.vmap(lambda t, a=a: f(x=t, a=a, b=0.0))(x[None]), want[None]
        )

    class Shaped(torch.nn.Module):
        def forward(self, x):
            return f(x=x, a=x.shape[0], b=0.0)

    n = torch.export.Dim("n", min=2, max=1 << 20)
    exported = torch.export.export(Shaped(), (x,), dynamic_shapes={"x": {0: n}}, strict=False)
    torch.testing.assert_close(exported.module()(torch.ones(7)), torch.full((7,), 7.0))


def test_torch_compile_fullgraph_has_no_graph_break():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    model = _Model()
    features = torch.randn(k.R, k.B, dtype=torch.float64)
    eager_loss = model(features)
    (eager_grad,) = torch.autograd.grad(eager_loss, model.w)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, backend=counter, fullgraph=True)
    loss = compiled(features)
    (grad,) = torch.autograd.grad(loss, model.w)
    assert counter.frame_count == 1
    torch.testing.assert_close(loss, eager_loss)
    torch.testing.assert_close(grad, eager_grad)


def test_import_without_torch_says_what_to_install():
    script = textwrap.dedent(
        """
        import sys

        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("No module named 'torch'")

        sys.meta_path.insert(0, Blocker())
        try:
            import eagle.torch
        except ImportError as exc:
            print(exc)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "eagle.torch needs PyTorch" in result.stdout and "pip install torch" in result.stdout


def test_the_routed_backward_writes_whole_gradients_it_made_uninitialised(monkeypatch):
    """On the GEMM route the backward makes its gradients with torch.empty and writes them
    whole (eagle.diff.reverse(plan, accumulate=False)), so no zeroing launch precedes it.
    Run here on the host with that route's backward, over gradients made NaN."""
    f = eagle.torch.function(k.contract, contraction="gemm")
    derivatives = f._derivatives
    monkeypatch.setattr(derivatives, "_adjoint_loops", lambda device, dtypes: False)
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: empty(*a, **kw).fill_(float("nan")))
    planes = k.inputs(k.contract, torch.float64, "cpu")
    reference = {name: t.detach().clone().requires_grad_() for name, t in planes.items()}
    expected = k.REFERENCES[k.contract](**reference)
    bar = torch.randn(expected.shape, dtype=torch.float64)
    expected.backward(bar)
    f(**planes).backward(bar)
    for name in planes:
        torch.testing.assert_close(planes[name].grad, reference[name].grad)
    routed = [b for (_, fresh, *_), b in derivatives._backward_runners.items() if not fresh]
    assert [backward.made for backward in routed] == [((0, "empty"), (1, "empty"))]
    assert derivatives._written.accumulate is False and f.adjoint.accumulate is True


def test_a_function_pickles_as_its_kernel_and_policy(tmp_path):
    import pickle

    f = eagle.torch.function(k.scale_add)
    assert pickle.loads(pickle.dumps(f)) is f
    with policy.using(int_overflow="check"):
        checked = eagle.torch.function(k.scale_add, contraction="gemm")
    assert pickle.loads(pickle.dumps(checked)) is checked
    model = torch.nn.Module()
    model.op = f
    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    x, z = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    torch.testing.assert_close(loaded.op(x=x, z=z), 0.5 * x + z)
