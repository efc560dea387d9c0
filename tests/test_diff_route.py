"""The routed adjoint on the host: with cuBLAS replaced by a recorder, the adjoint of a
routed plan is the gradient products of lower_dense_gemm(record, "adjoint") over the
caller's own planes, one per gradient plane passed, each added in with beta = 1."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.diff
import eagle.plan
from eagle.gemm import lower_dense_gemm, sgemm_params_for_arrays
from hawk.emit import policy
from tests import _route_kernels as k
from tests._route_kernels import B, R, U
from tests._util import rel_error
from tests.test_route import _FakeDeviceArray, fake_cublas, forget_bindings  # noqa: F401

W, F, Y_BAR, W_BAR, F_BAR = 0x10000, 0x20000, 0x30000, 0x40000, 0x50000


def _adjoint():
    with policy.using(contraction="gemm"):
        return eagle.diff.reverse(eagle.plan.auto(k.contract))


def _planes(**gradients):
    planes = {
        "w": _FakeDeviceArray((R, U), W),
        "f": _FakeDeviceArray((R, B), F),
        "y_bar": _FakeDeviceArray((B * U,), Y_BAR),
    }
    shapes = {"w_bar": ((R, U), W_BAR), "f_bar": ((R, B), F_BAR)}
    planes.update({name: _FakeDeviceArray(*shapes[name]) for name in gradients})
    return planes


def test_a_routed_adjoint_bind_to_new_addresses_is_moved(fake_cublas, monkeypatch):  # noqa: F811
    """Planes laid out as an earlier bind's, at addresses that align alike: nothing of the
    layout is checked again, both products move (and fork in a capture), and a written
    plane over another is refused by the full checks."""
    from eagle.plan import _bound, _reverse

    handles, capturing = fake_cublas
    forget_bindings(k.contract)
    _adjoint().bind(**_planes(w_bar=True, f_bar=True))
    checks = []
    full = _reverse.check_planes
    monkeypatch.setattr(
        _reverse, "check_planes", lambda kernel, planes: checks.append(1) or full(kernel, planes)
    )
    moved = {
        name: _FakeDeviceArray(array.shape, array.ptr + 0x100000)
        for name, array in _planes(w_bar=True, f_bar=True).items()
    }
    bound = _adjoint().bind(**moved)
    assert checks == []
    handle = handles[0x11]
    bound.launch()
    outs = sorted(operands["out"] for _, operands in handle.calls)
    assert outs == [W_BAR + 0x100000, F_BAR + 0x100000] and handle.betas == [1.0, 1.0]
    capturing.add(0x11)
    bound.launch()
    assert _bound.Branches.log == [("fork", 0), ("join", 0)]
    capturing.discard(0x11)
    planned = []  # a move keeps the branch plan of the bind it moves
    monkeypatch.setattr(_bound, "branch_plan", lambda steps: planned.append(steps))
    again = {name: _FakeDeviceArray(a.shape, a.ptr + 0x100000) for name, a in moved.items()}
    assert _adjoint().bind(**again)._branches == bound._branches and planned == []

    with pytest.raises(ValueError, match="planes 'w' and 'w_bar' share memory"):
        _adjoint().bind(**{**moved, "w_bar": moved["w"]})
    assert checks == [1]


def test_both_gradients_are_two_products_added_in(fake_cublas):  # noqa: F811
    handles, _ = fake_cublas
    bound = _adjoint().bind(**_planes(w_bar=True, f_bar=True))
    ((step,),) = [bound.steps]
    assert (bound.side, step.route, step.reasons) == ("device", "gemm", ())
    handle = handles[0x11]
    assert len(handle.warmed) == 2 and handle.calls == []  # warmed into scratch, not the grads
    assert all(scratch == 0x9000 for _, scratch in handle.warmed)

    bound.launch()
    outs = sorted(operands["out"] for _, operands in handle.calls)
    assert outs == [W_BAR, F_BAR] and handle.betas == [1.0, 1.0]
    lowered = lower_dense_gemm(eagle.plan.auto(k.contract).record, direction="adjoint")
    assert {s.matmul.out for s in lowered.steps} == {"w_bar", "f_bar"}


def test_the_products_bind_the_callers_planes_with_the_lowered_flags(fake_cublas):  # noqa: F811
    handles, _ = fake_cublas
    _adjoint().bind(**_planes(w_bar=True, f_bar=True)).launch()
    by_out = {operands["out"]: (params, operands) for params, operands in handles[0x11].calls}
    f, w = _FakeDeviceArray((R, B), F), _FakeDeviceArray((R, U), W)
    y_bar = _FakeDeviceArray((B, U), Y_BAR)
    w_bar, f_bar = _FakeDeviceArray((R, U), W_BAR), _FakeDeviceArray((R, B), F_BAR)
    record = eagle.plan.auto(k.contract).record
    lowered = lower_dense_gemm(record, direction="adjoint", dtype="float32")
    views = {"f": f, "w": w, "y_bar": y_bar, "w_bar": w_bar, "f_bar": f_bar}
    for step in lowered.steps:
        spec = step.matmul
        expected = sgemm_params_for_arrays(
            views[spec.a], views[spec.b], views[spec.out],
            transpose_a=spec.transpose_a, transpose_b=spec.transpose_b,
            transpose_out=spec.transpose_out,
        )  # fmt: skip
        params, operands = by_out[views[spec.out].ptr]
        assert params.layout == expected and (params.dtype, params.math) == ("float32", "fp32")
        assert (operands["a"], operands["b"]) == (views[spec.a].ptr, views[spec.b].ptr)


def test_a_gradient_not_passed_is_not_computed(fake_cublas):  # noqa: F811
    handles, _ = fake_cublas
    _adjoint().bind(**_planes(w_bar=True)).launch()
    ((_, operands),) = handles[0x11].calls
    assert operands["out"] == W_BAR and len(handles[0x11].warmed) == 1


def test_the_host_keeps_the_adjoint_loop_and_float64_routes_as_its_primal():
    adjoint = _adjoint()
    assert adjoint.route("device", "float64") == adjoint.primal.route("device", "float64")
    rng = np.random.default_rng()
    w, f = rng.standard_normal((R, U)), rng.standard_normal((R, B))
    y_bar, w_bar = rng.standard_normal(B * U), np.zeros((R, U))
    bound = adjoint.bind(w=w, f=f, y_bar=y_bar, w_bar=w_bar)
    assert [step.route for step in bound.steps] == ["loop"]  # the host runs the loop
    bound.launch()
    assert rel_error(w_bar, f @ y_bar.reshape(B, U)) < 1e-13


@pytest.mark.parametrize("accumulate", [True, False])
def test_gradients_of_planes_no_product_reads(rng, accumulate: bool) -> None:
    """Written (accumulate=False) on the host GEMM route as on the loop route: zero. They
    were left as they were, since no product writes them."""
    w, f, y_bar = (
        rng.standard_normal((R, U)),
        rng.standard_normal((R, B)),
        rng.standard_normal(B * U),
    )
    for options in ({}, {"contraction": "gemm", "host_route": "gemm"}):
        plan = eagle.plan.auto(k.contract_beside, **options)
        grads = {"x_bar": np.full(B * U, 7.0), "a_bar": np.full(1, 7.0), "w_bar": np.zeros((R, U))}
        eagle.diff.reverse(plan, accumulate=accumulate).run(
            x=np.zeros(B * U), a=2.0, w=w, f=f, y_bar=y_bar, **grads
        )
        kept = 7.0 if accumulate else 0.0
        assert (grads["x_bar"] == kept).all() and (grads["a_bar"] == kept).all(), options
        np.testing.assert_allclose(grads["w_bar"], f @ y_bar.reshape(B, U), rtol=1e-12)
    assert plan.route("host") == "gemm"


@pytest.mark.parametrize("accumulate", [True, False])
def test_an_adjoint_whose_planes_are_numbered_keeps_the_loop(rng, accumulate: bool) -> None:
    """The products name a gradient <plane>_bar; w's is w_bar2 (the kernel has a w_bar):
    the adjoint runs its own loop, saying why, while the forward routes."""
    plan = eagle.plan.auto(k.named_like_a_gradient, contraction="gemm", host_route="gemm")
    adjoint = eagle.diff.reverse(plan, accumulate=accumulate)
    assert plan.route("host", "float64") == "gemm"
    assert adjoint.route("host", "float64") == "loop"
    assert "numbered planes of the adjoint" in adjoint.reasons[0]
    w, f, y_bar = (
        rng.standard_normal((R, U)),
        rng.standard_normal((R, B)),
        rng.standard_normal(B * U),
    )
    grads = {"w_bar2": np.zeros((R, U)), "w_bar_bar": np.zeros((R, B))}
    adjoint.run(w=w, w_bar=f, y_bar=y_bar, **grads)
    assert rel_error(grads["w_bar2"], f @ y_bar.reshape(B, U)) < 1e-13
    assert rel_error(grads["w_bar_bar"], w @ y_bar.reshape(B, U).T) < 1e-13


def test_a_fold_from_an_int_zero_routes(rng) -> None:
    plan = eagle.plan.auto(k.contract_int_zero, contraction="gemm", host_route="gemm")
    assert plan.route("host") == "gemm" and plan.route("device") == "gemm", plan.reasons
    w, f, y = rng.standard_normal((R, U)), rng.standard_normal((R, B)), np.full(B * U, np.nan)
    plan.run(w=w, f=f, y=y)
    np.testing.assert_allclose(y, (f.T @ w).reshape(-1), rtol=1e-12)
