"""eagle.plan.auto on the host: checking planes by name, routing and policy, binding."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
from hawk.emit import host, policy
from tests._hawk_kernels import contract, histogram, saxpy


def _contract_planes(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "w": rng.standard_normal((16, 8)),
        "f": rng.standard_normal((16, 12)),
        "y": np.full(96, np.nan),
    }


class _DeviceArrayStandIn:
    """Looks like a device eagle Array to the residency check (which runs first)."""

    is_host = False
    device_index = 0
    ptr = 1 << 40
    shape = (96,)
    dtype = np.dtype(np.float64)
    is_contiguous = True


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda p: p.pop("y"), TypeError, r"missing plane\(s\) 'y' of kernel 'contract'"),
        (
            lambda p: p.update(z=p["y"]),
            TypeError,
            r"kernel 'contract' has no plane 'z'; its planes are w, f, y",
        ),
        (lambda p: p.update(y=list(p["y"])), TypeError, r"plane 'y' is a list; pass a numpy"),
        (lambda p: p.update(y=np.zeros(96, np.int64)), TypeError, r"plane 'y' is int64"),
        (
            lambda p: p.update(w=p["w"][:, :4]),
            ValueError,
            r"plane 'w' is Table\[\"row\":16, \"unit\":8\]: pass an array of shape \(16, 8\)",
        ),
        (
            lambda p: p.update(y=p["y"].reshape(8, 12)),
            ValueError,
            r"plane 'y' \(Mutable\[Scalar\]\) takes a 1-D array with one value per lane",
        ),
        (
            lambda p: p.update(w=np.asfortranarray(p["w"])),
            ValueError,
            r"plane 'w' is not contiguous",
        ),
        (
            lambda p: p.update(y=np.broadcast_to(np.zeros(1), (96,))),
            ValueError,
            r"plane 'y' is not contiguous|plane 'y' is written by the kernel but .* read-only",
        ),
        (
            lambda p: p.update(y=_DeviceArrayStandIn()),
            ValueError,
            r"plane 'y' is on cuda:0 but plane 'w' is on the host; pass every plane on one side",
        ),
    ],
)
def test_planes_are_refused_by_name_before_anything_runs(
    rng: np.random.Generator, change, error: type, message: str
) -> None:
    planes = _contract_planes(rng)
    change(planes)
    before = {k: v.copy() for k, v in planes.items() if isinstance(v, np.ndarray)}
    with pytest.raises(error, match=message):
        eagle.plan.auto(contract).run(**planes)
    for name, values in before.items():
        np.testing.assert_array_equal(planes[name], values)  # nothing ran


def test_lane_planes_must_agree(rng: np.random.Generator) -> None:
    with pytest.raises(ValueError, match=r"plane 'y' has 9 values but plane 'x' has 10"):
        eagle.plan.auto(saxpy).run(a=1.0, x=np.ones(10), y=np.ones(9))


def test_read_only_output_is_refused(rng: np.random.Generator) -> None:
    y = np.ones(10)
    y.flags.writeable = False
    with pytest.raises(ValueError, match=r"plane 'y' is written by the kernel but its array"):
        eagle.plan.auto(saxpy).run(a=1.0, x=np.ones(10), y=y)


def test_an_output_sharing_memory_is_refused(rng: np.random.Generator) -> None:
    x = rng.standard_normal(10)
    with pytest.raises(ValueError, match=r"planes 'x' and 'y' share memory"):
        eagle.plan.auto(saxpy).run(a=1.0, x=x, y=x)
    planes = _contract_planes(rng)
    eagle.plan.auto(contract).run(w=planes["w"], f=np.tile(planes["w"][:, :1], 12), y=planes["y"])
    shared = rng.standard_normal((16, 12))
    eagle.plan.auto(contract).run(w=shared[:, :8].copy(), f=shared, y=planes["y"])  # reads only


def test_params_take_one_value() -> None:
    with pytest.raises(ValueError, match=r"plane 'a' is a Param: pass a number or a one-element"):
        eagle.plan.auto(saxpy).run(a=np.ones(2), x=np.ones(3), y=np.ones(3))
    with pytest.raises(TypeError, match=r"plane 'a' is a str; pass a number, a numpy array"):
        eagle.plan.auto(saxpy).run(a="2", x=np.ones(3), y=np.ones(3))
    with pytest.raises(TypeError, match=r"plane 'x' is a float; pass a numpy array"):
        eagle.plan.auto(saxpy).run(a=1.0, x=2.0, y=np.ones(3))


def test_tables_take_any_contiguous_array_of_their_size(rng: np.random.Generator) -> None:
    planes = _contract_planes(rng)
    expected = (planes["f"].T @ planes["w"]).reshape(-1)
    eagle.plan.auto(contract).run(w=planes["w"].reshape(-1), f=planes["f"], y=planes["y"])
    np.testing.assert_allclose(planes["y"], expected, rtol=1e-12)
    with pytest.raises(
        ValueError, match=r"plane 'counts' is a flat Mutable\[Table\]: pass a 1-D array"
    ):
        eagle.plan.auto(histogram).run(
            x=np.ones(3), lo=0.0, counts=np.ones((2, 4)), stats=np.ones(3)
        )


# -- routing and policy ------------------------------------------------------------------


def test_default_policy_runs_the_loop_everywhere() -> None:
    plan = eagle.plan.auto(contract)
    assert plan.policy == policy.Policy("loop")
    assert plan.route("host") == "loop" and plan.route("device") == "loop"
    assert "contraction='loop'" in plan.reasons[0]
    assert "eagle.plan.auto(kernel, contraction='gemm')" in plan.reasons[0]


def test_the_contraction_keyword_overrides_the_policy() -> None:
    routed = eagle.plan.auto(contract, contraction="gemm")
    assert routed.policy.contraction == "gemm" and routed.route("device") == "gemm"
    assert routed.route("host") == "loop"
    with policy.using(contraction="gemm"):
        looped = eagle.plan.auto(contract, contraction="loop")
        assert eagle.plan.auto(contract, contraction=None).route("device") == "gemm"
    assert looped.route("device") == "loop" and "contraction='loop'" in looped.reasons[0]
    assert eagle.diff.reverse(routed).route("device") == "gemm"  # the adjoint follows its primal
    assert eagle.diff.reverse(looped).route("device") == "loop"
    for bad in ("fast", "GEMM", 1):
        with pytest.raises(
            ValueError, match=rf"contraction must be one of \('loop', 'gemm'\), not {bad!r}"
        ):
            eagle.plan.auto(contract, contraction=bad)


def test_a_plan_keeps_the_policy_it_was_built_under() -> None:
    with policy.using(contraction="gemm") as current:
        assert current.contraction == "gemm" == policy.current().contraction
        plan = eagle.plan.auto(contract)
        with policy.using(contraction="loop"):
            assert policy.current().contraction == "loop"
        assert policy.current().contraction == "gemm"
    assert policy.current().contraction == "loop"
    assert plan.policy.contraction == "gemm"
    assert plan.route("host") == "loop"
    assert plan.route("device") == "gemm"
    assert plan.reasons == ()


def test_bad_policy_and_side_are_refused() -> None:
    with (
        pytest.raises(ValueError, match=r"contraction must be one of \('loop', 'gemm'\)"),
        policy.using(contraction="fast"),
    ):
        pass
    with pytest.raises(ValueError, match=r"side must be 'host' or 'device', not 'gpu'"):
        eagle.plan.auto(contract).route("gpu")
    with pytest.raises(TypeError, match=r"takes a @hawk.kernel function, not function"):
        eagle.plan.auto(contract.fn)


# -- binding -----------------------------------------------------------------------------


def test_host_bound_plans_take_no_stream_and_cannot_be_captured(rng: np.random.Generator) -> None:
    bound = eagle.plan.auto(saxpy).bind(a=1.0, x=np.ones(4), y=np.zeros(4))
    with pytest.raises(ValueError, match="bound to host arrays; it runs now and takes no stream"):
        bound.launch(stream=5)
    with pytest.raises(ValueError, match="cannot be captured; bind device Arrays"):
        bound.capture()


def test_programs_are_emitted_once_per_kernel_and_dtypes(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    @hawk.kernel
    def double(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
        y = 2.0 * x  # noqa: F841 - an output plane

    calls = []
    emit = host.emit
    monkeypatch.setattr(host, "emit", lambda *a: calls.append(a[1]) or emit(*a))
    for dtype in (np.float32, np.float64, np.float32):
        for _ in range(2):
            y = np.zeros(5, dtype)
            eagle.plan.auto(double).run(x=np.arange(5, dtype=dtype), y=y)
            np.testing.assert_array_equal(y, 2.0 * np.arange(5))
    assert calls == [{"x": "float32", "y": "float32"}, {"x": "float64", "y": "float64"}]
