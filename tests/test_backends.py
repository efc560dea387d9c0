"""The backend seam of eagle.plan: backends registered by name, picked per side by a plan
(never by comparing side names), a plan built for one backend, and a third backend added
by one registration."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest

import eagle.diff
import eagle.plan
from eagle.plan import _backends
from eagle.plan._backends import Backend, Binding, backend_named, register
from eagle.plan._bound import Step
from eagle.plan._planes import Planes
from tests._hawk_kernels import saxpy
from tests._route_kernels import B, R, U, contract


def _device(n: int, ptr: int) -> eagle.Array:
    return eagle.arrays.Array(
        ptr=ptr, shape=(n,), dtype=np.dtype("float32"), strides=(4,), device_index=0
    )


def test_the_built_in_backends_are_registered_by_name_and_side() -> None:
    numpy_backend, cuda_backend = backend_named("numpy"), backend_named("cuda")
    assert (numpy_backend.name, numpy_backend.side) == ("numpy", "host")
    assert (cuda_backend.name, cuda_backend.side) == ("cuda", "device")
    assert {"numpy", "cuda"} <= set(_backends.registered())
    plan = eagle.plan.auto(saxpy)
    assert plan._backends == {"host": numpy_backend, "device": cuda_backend}


@pytest.mark.parametrize("name", ["interpreter", "host", "", None, 3])
def test_an_unknown_backend_is_refused_naming_the_known_ones(name: Any) -> None:
    if name is None:
        assert eagle.plan.auto(saxpy, backend=name).backend is None  # None: by the planes
        return
    with pytest.raises(
        ValueError, match=r"backend must be one of 'numpy', 'cuda', 'reference'.*not "
    ):
        eagle.plan.auto(saxpy, backend=name)


def test_a_plan_for_the_numpy_backend_runs_host_planes_and_refuses_device_planes() -> None:
    plan = eagle.plan.auto(saxpy, backend="numpy")
    assert repr(plan) == "AutoPlan(saxpy, contraction='loop', backend='numpy')"
    x, y = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    plan.run(a=2.0, x=x, y=y)
    np.testing.assert_array_equal(y, 2 * np.arange(4) + 1)
    assert plan.bind(a=2.0, x=x, y=y).side == "host"
    assert plan.route("host") == "loop" and "def " in plan.source("host")
    with pytest.raises(ValueError, match=r"backend='numpy', which takes host arrays; the planes"):
        plan.run(a=2.0, x=_device(4, 0x1000), y=_device(4, 0x2000))
    for call in (plan.route, plan.source):
        with pytest.raises(ValueError, match=r"backend='numpy'.*it has no 'device' side"):
            call("device")
    with pytest.raises(ValueError, match="side must be 'host' or 'device', not 'gpu'"):
        plan.route("gpu")


def test_a_plan_for_the_cuda_backend_refuses_host_planes() -> None:
    plan = eagle.plan.auto(saxpy, backend="cuda")
    x, y = np.ones(4, np.float32), np.ones(4, np.float32)
    with pytest.raises(ValueError, match=r"backend='cuda', which takes device arrays; the planes"):
        plan.run(a=2.0, x=x, y=y)
    assert plan.route("device") == "loop" and "__global__" in plan.source("device")
    with pytest.raises(ValueError, match=r"it has no 'host' side"):
        plan.route("host")


def test_reasons_speak_for_the_host_when_the_plan_runs_there_only() -> None:
    routed = eagle.plan.auto(contract, contraction="gemm", backend="numpy")
    assert routed.route("host") == "loop"
    assert "host_route='gemm'" in routed.reasons[0]
    assert eagle.plan.auto(contract, contraction="gemm").reasons == ()  # the device's
    both = eagle.plan.auto(contract, contraction="gemm", host_route="gemm", backend="numpy")
    assert both.reasons == () and both.route("host") == "gemm"


def test_the_adjoint_of_a_plan_for_one_backend_runs_on_it() -> None:
    rng = np.random.default_rng(2)
    plan = eagle.plan.auto(contract, contraction="gemm", host_route="gemm", backend="numpy")
    adjoint = eagle.diff.reverse(plan)
    assert adjoint.route("host") == "gemm" and adjoint.reasons == ()
    w, f, y_bar = (
        rng.standard_normal((R, U)),
        rng.standard_normal((R, B)),
        rng.standard_normal(B * U),
    )
    w_bar = np.zeros((R, U))
    adjoint.run(w=w, f=f, y_bar=y_bar, w_bar=w_bar)
    np.testing.assert_allclose(w_bar, f @ y_bar.reshape(B, U))
    loop = eagle.diff.reverse(eagle.plan.auto(saxpy, backend="numpy"))
    assert loop.route("host") == "loop"
    with pytest.raises(ValueError, match=r"backend='numpy'"):
        loop.route("device")
    x_bar = np.zeros(4)
    loop.run(a=2.0, x=np.ones(4), y_bar=np.ones(4), x_bar=x_bar)
    np.testing.assert_array_equal(x_bar, np.full(4, 2.0))
    assert [plan.backend for plan in loop._loop_plans.values()] == ["numpy"]


# -- a third backend: one registration -------------------------------------------------------


class _Traced(Backend):
    """A host backend that runs the numpy program and notes each stage it is asked for."""

    name = "traced"
    side = "host"

    def __init__(self) -> None:
        self.stages: list[str] = []

    def emit(
        self, kernel: Any, signature: Any, *, values: frozenset[str] = frozenset(), lanes: int = 0
    ) -> Any:
        self.stages.append("emit")
        return backend_named("numpy").emit(kernel, signature)

    def load(self, program: Any, device: int | None) -> Any:
        self.stages.append("load")
        return program.function

    def bind(self, plan: Any, checked: Planes) -> Binding:
        program = self.emit(plan.kernel, checked.signature)
        function = self.load(program, checked.device)
        args = [checked.values[name] for name in program.arguments]
        self.stages.append("bind")

        def run(_stream: None) -> None:
            self.stages.append("launch")
            function(*args, checked.lanes)

        return Binding(Step(run))


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> _Traced:
    monkeypatch.setattr(_backends, "_REGISTERED", dict(_backends._REGISTERED))
    backend = _Traced()
    register(backend)
    return backend


def test_a_registered_backend_runs_plans_through_its_stages(traced: _Traced) -> None:
    plan = eagle.plan.auto(saxpy, backend="traced")
    x, y = np.arange(3, dtype=np.float32), np.zeros(3, np.float32)
    plan.run(a=3.0, x=x, y=y)
    plan.run(a=3.0, x=x, y=y)  # the kept binding
    np.testing.assert_array_equal(y, 6 * np.arange(3))
    assert traced.stages == ["emit", "load", "bind", "launch", "launch"]
    assert "traced" in _backends.registered()


def test_a_backend_without_products_keeps_the_loop_and_says_why(traced: _Traced) -> None:
    plan = eagle.plan.auto(contract, contraction="gemm", host_route="gemm", backend="traced")
    assert plan.route("host") == "loop"
    assert plan.reasons == (
        "the 'traced' backend runs the kernel's own loop (it has no product route)",
    )
    rng = np.random.default_rng(1)
    w, f, y = rng.standard_normal((R, U)), rng.standard_normal((R, B)), np.zeros(B * U)
    bound = plan.bind(w=w, f=f, y=y)
    assert bound.route == "loop"
    bound.launch()
    np.testing.assert_allclose(y, (f.T @ w).reshape(-1))
    with pytest.raises(TypeError, match="the 'traced' backend has no product route"):
        traced.bind_products(plan, None)  # type: ignore[arg-type]


def test_register_refuses_a_taken_name_and_what_is_no_backend(traced: _Traced) -> None:
    register(traced)  # the same backend again: nothing changes
    other = _Traced()
    with pytest.raises(ValueError, match="already registered as 'traced'"):
        register(other)
    with pytest.raises(TypeError, match="register takes a Backend, not str"):
        register("traced")  # type: ignore[arg-type]


def test_a_plan_for_one_backend_pickles_and_copies_with_it() -> None:
    plan = eagle.plan.auto(saxpy, contraction="gemm", backend="numpy")
    for again in (pickle.loads(pickle.dumps(plan)), copy.copy(plan), copy.deepcopy(plan)):
        assert again.backend == "numpy" and again.kernel is saxpy
        assert again._backends == {"host": backend_named("numpy")}
        assert again.policy == plan.policy
