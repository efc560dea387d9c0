# ruff: noqa: F841, UP037
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["bin":4], which pyflakes reads as forward references (F821, UP037).
"""eagle.plan.auto on the host: checking planes by name, routing and policy, binding, and
all-or-nothing runs."""

from __future__ import annotations

import asyncio
import contextvars
import copy
import pickle
import re

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
from eagle import arrays
from hawk.emit import host, policy
from tests._hawk_kernels import contract, histogram, saxpy
from tests._util import rel_error


def _contract_planes(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "w": rng.standard_normal((16, 8)),
        "f": rng.standard_normal((16, 12)),
        "y": np.full(96, np.nan),
    }


def _DeviceArrayStandIn() -> arrays.Array:
    """A device eagle Array over an address never touched (the residency check runs first)."""
    return arrays.Array(
        ptr=1 << 40, shape=(96,), dtype=np.dtype(np.float64), strides=(8,), device_index=0
    )


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
            r"plane 'w' is not row-major and contiguous .*; pass a row-major copy, e\.g\.",
        ),
        (  # a copy of a written plane would take the results: write, then copy back
            lambda p: p.update(y=np.zeros(192)[::2]),
            ValueError,
            r"plane .y. is not row-major .*; write into a row-major array, .*\(view\[\.\.\.\]",
        ),
        (
            lambda p: p.update(y=np.broadcast_to(np.zeros(1), (96,))),
            ValueError,
            r"plane 'y' is not row-major|plane 'y' is read-only .* and it is written",
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


def test_arrays_passed_by_position_are_refused_with_the_keywords_to_use() -> None:
    x, y = np.ones(4), np.zeros(4)
    plan = eagle.plan.auto(saxpy)
    adjoint = eagle.diff.reverse(plan)
    for call, name in ((plan.run, "plan.run"), (plan.bind, "plan.bind")):
        with pytest.raises(TypeError, match=re.escape(
            f"{name} takes its planes by name, one keyword each: {name}(a=..., x=..., y=...); "
            "3 argument(s) were passed by position"
        )):  # fmt: skip
            call(2.0, x, y)
    for call, name in ((adjoint.run, "adjoint.run"), (adjoint.bind, "adjoint.bind")):
        with pytest.raises(
            TypeError, match=rf"^{name} takes .*\(a=\.\.\., x=\.\.\., y_bar=\.\.\., a_bar"
        ):
            call(2.0, x, y)
    assert (y == 0.0).all()


def test_lane_planes_must_agree(rng: np.random.Generator) -> None:
    with pytest.raises(ValueError, match=r"plane 'y' has 9 values but plane 'x' has 10"):
        eagle.plan.auto(saxpy).run(a=1.0, x=np.ones(10), y=np.ones(9))


def test_read_only_output_is_refused(rng: np.random.Generator) -> None:
    y = np.ones(10)
    y.flags.writeable = False
    with pytest.raises(ValueError, match=r"plane 'y' is read-only .*, and it is written; pass a"):
        eagle.plan.auto(saxpy).run(a=1.0, x=np.ones(10), y=y)


def test_an_output_sharing_memory_is_refused(rng: np.random.Generator) -> None:
    x = rng.standard_normal(10)
    with pytest.raises(ValueError, match=r"planes 'x' and 'y' share memory"):
        eagle.plan.auto(saxpy).run(a=1.0, x=x, y=x)
    planes = _contract_planes(rng)
    eagle.plan.auto(contract).run(w=planes["w"], f=np.tile(planes["w"][:, :1], 12), y=planes["y"])
    shared = rng.standard_normal((16, 12))
    eagle.plan.auto(contract).run(w=shared[:, :8].copy(), f=shared, y=planes["y"])  # reads only


def test_a_param_too_large_for_the_kernels_dtype_is_refused_by_name() -> None:
    x, y = np.ones(3), np.ones(3)
    with pytest.raises(OverflowError, match=r"Param 'a' is an int of 1329 bits, too large for"):
        eagle.plan.auto(saxpy).run(a=10**400, x=x, y=y)
    with pytest.raises(OverflowError, match=r"Param 'a' is 1e\+300, too large for float32 .* or "):
        eagle.plan.auto(saxpy).run(a=1e300, x=x.astype(np.float32), y=y.astype(np.float32))
    # a finite long double beyond float64 is an overflow, not the infinity float() makes it
    with pytest.raises(OverflowError, match=r"Param 'a' is .*1e\+400.*, too large for float64"):
        eagle.plan.auto(saxpy).run(a=np.longdouble("1e400"), x=x, y=y)
    np.testing.assert_array_equal(y, 1.0)
    eagle.plan.auto(saxpy).run(a=2**70, x=x, y=y)  # beyond int64, but a float64 holds it
    np.testing.assert_array_equal(y, 1.0 + 2.0**70)
    eagle.plan.auto(saxpy).run(a=np.inf, x=x, y=y)  # infinity is a value, not an overflow
    assert np.isinf(y).all()
    x32, y32 = np.ones(3, np.float32), np.zeros(3, np.float32)
    # float32's largest as numpy prints it (3.4028235e+38, a little above it) rounds to it
    eagle.plan.auto(saxpy).run(a=float(str(np.finfo(np.float32).max)), x=x32, y=y32)
    np.testing.assert_array_equal(y32, np.finfo(np.float32).max)
    with pytest.raises(OverflowError, match=r"within ±3\.4028235e\+38 or float64"):
        eagle.plan.auto(saxpy).run(a=2.0**128 - 2.0**103, x=x32, y=y32)  # rounds to inf


def test_params_take_one_value() -> None:
    with pytest.raises(ValueError, match=r"plane 'a' is a Param: pass a number or a one-element"):
        eagle.plan.auto(saxpy).run(a=np.ones(2), x=np.ones(3), y=np.ones(3))
    with pytest.raises(TypeError, match=r"plane 'a' is a Param, and '2' is not a number it tak"):
        eagle.plan.auto(saxpy).run(a="2", x=np.ones(3), y=np.ones(3))
    with pytest.raises(TypeError, match=r"plane 'x' is a float; pass a numpy array"):
        eagle.plan.auto(saxpy).run(a=1.0, x=2.0, y=np.ones(3))


def test_a_params_gradient_takes_any_one_element_array_as_the_param_does() -> None:
    for shape in ((), (1,), (1, 1)):
        a_bar = np.zeros(shape)
        eagle.diff.reverse(eagle.plan.auto(saxpy)).run(
            a=np.full(shape, 2.0), x=np.arange(3.0), y_bar=np.ones(3), a_bar=a_bar
        )
        assert a_bar.reshape(-1).tolist() == [3.0], shape
    with pytest.raises(ValueError, match=r"plane 'a_bar' is .*, one value: pass a one-element"):
        eagle.diff.reverse(eagle.plan.auto(saxpy)).run(
            a=2.0, x=np.arange(3.0), y_bar=np.ones(3), a_bar=np.zeros(2)
        )


def test_a_param_takes_a_scalar_of_any_plane_dtype() -> None:
    import ml_dtypes

    for number in (np.float16(1.5), ml_dtypes.bfloat16(1.5), ml_dtypes.float8_e4m3fn(1.5)):
        y = np.zeros(3)
        eagle.plan.auto(saxpy).run(a=number, x=np.ones(3), y=y)
        assert y.tolist() == [1.5] * 3, type(number)


def test_a_named_table_takes_its_shape_or_one_row_major_axis(rng: np.random.Generator) -> None:
    planes = _contract_planes(rng)
    plan = eagle.plan.auto(contract)
    for wrong in (planes["w"].T.copy(), planes["w"].reshape(4, 32), planes["w"].reshape(1, 128)):
        with pytest.raises(
            ValueError,
            match=r"plane 'w' is Table\[\"row\":16, \"unit\":8\]: pass an array of shape "
            r"\(16, 8\) \(or a 1-D array of its 128 values, row-major\), not shape "
            + re.escape(str(wrong.shape)),
        ):
            plan.run(w=wrong, f=planes["f"], y=planes["y"])
        assert np.isnan(planes["y"]).all()
    # the same values flat are read row-major, as the declared shape
    plan.run(w=planes["w"].reshape(-1), f=planes["f"], y=planes["y"])
    assert rel_error(planes["y"], (planes["f"].T @ planes["w"]).reshape(-1)) < 1e-13


def test_tables_take_any_contiguous_array_of_their_size(rng: np.random.Generator) -> None:
    planes = _contract_planes(rng)
    expected = (planes["f"].T @ planes["w"]).reshape(-1)
    eagle.plan.auto(contract).run(w=planes["w"].reshape(-1), f=planes["f"], y=planes["y"])
    assert rel_error(planes["y"], expected) < 1e-13
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
        with pytest.raises(ValueError, match=rf"contraction must be 'loop' or 'gemm', not {bad!r}"):
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
    # every choice of a plan's policy may be made for a block (one vocabulary)
    choices = {"math": "tf32", "host_route": "gemm", "int_overflow": "check", "adds": "global"}
    with policy.using(contraction="gemm", **choices):
        plan = eagle.plan.auto(contract)
    assert plan.policy == policy.Policy("gemm", **choices)  # type: ignore[arg-type]
    assert plan.route("host") == "gemm"


def test_bad_policy_and_side_are_refused() -> None:
    with (
        pytest.raises(ValueError, match=r"contraction must be 'loop' or 'gemm', not 'fast'"),
        policy.using(contraction="fast"),
    ):
        pass
    with pytest.raises(ValueError, match=r"adds must be 'auto', 'shared'"), policy.using(adds="x"):
        pass
    with pytest.raises(ValueError, match=r"side must be 'host' or 'device', not 'gpu'"):
        eagle.plan.auto(contract).route("gpu")
    with pytest.raises(TypeError, match=r"takes a @hawk.kernel function, not function"):
        eagle.plan.auto(contract.fn)


def test_a_kept_policy_choice_serves_every_with_block_it_opens() -> None:
    """It was a generator context manager: a second block raised a raw AttributeError."""
    routed = policy.using(contraction="gemm")
    for _ in range(2):
        with routed as chosen:
            assert chosen.contraction == policy.current().contraction == "gemm"
            with policy.using(math="tf32"), routed:  # nested, on top of another choice
                assert (policy.current().contraction, policy.current().math) == ("gemm", "tf32")
            assert policy.current().math == "fp32"
        assert policy.current().contraction == "loop"
    again = pickle.loads(pickle.dumps(routed))
    assert repr(again) == repr(routed) == "hawk.emit.policy.using(contraction='gemm')"
    with copy.deepcopy(routed):
        assert policy.current().contraction == "gemm"


def test_a_kept_policy_choice_serves_asyncio_tasks_whose_blocks_overlap() -> None:
    """Each task has its own open blocks (the tokens were kept per thread: a task leaving
    first undid the other's block, and ContextVar.reset raised)."""
    routed = policy.using(contraction="gemm")

    async def inside(start: float, hold: float) -> tuple[str, str]:
        await asyncio.sleep(start)
        with routed:
            seen = policy.current().contraction
            await asyncio.sleep(hold)
            return seen, policy.current().contraction

    async def both() -> list[tuple[str, str]]:
        return await asyncio.gather(inside(0.0, 0.02), inside(0.01, 0.02))

    assert asyncio.run(both()) == [("gemm", "gemm")] * 2
    assert policy.current().contraction == "loop"


def test_a_policy_block_left_elsewhere_or_out_of_order() -> None:
    routed = policy.using(contraction="gemm")
    routed.__enter__()
    with pytest.raises(hawk.HawkError, match=r"using\(contraction=.gemm.\): the block is not open"):
        contextvars.Context().run(routed.__exit__, None, None, None)  # (where it is not open)
    routed.__exit__(None, None, None)
    assert policy.current().contraction == "loop"
    tf32 = policy.using(math="tf32")
    routed.__enter__()
    tf32.__enter__()
    routed.__exit__(None, None, None)  # out of order: its own block ends, tf32's stays
    assert (policy.current().contraction, policy.current().math) == ("gemm", "tf32")
    tf32.__exit__(None, None, None)
    assert policy.current() == policy.Policy()


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
        y = 2.0 * x

    calls = []
    emit = host.emit
    monkeypatch.setattr(host, "emit", lambda *a, **kw: calls.append(a[1]) or emit(*a, **kw))
    for dtype in (np.float32, np.float64, np.float32):
        for _ in range(2):
            y = np.zeros(5, dtype)
            eagle.plan.auto(double).run(x=np.arange(5, dtype=dtype), y=y)
            np.testing.assert_array_equal(y, 2.0 * np.arange(5))
    assert calls == [{"x": "float32", "y": "float32"}, {"x": "float64", "y": "float64"}]


# -- all-or-nothing host runs ------------------------------------------------------------


@hawk.kernel
def _two_adds(
    i: hawk.Scalar,
    y: hawk.Mutable[hawk.Scalar],
    seen: hawk.Mutable[hawk.Table["bin":4]],
    counts: hawk.Mutable[hawk.Table["bin":4]],
):
    y = 2.0 * i
    seen.add(bin=0, value=1.0)
    counts.add(bin=int(i), value=1.0)


def test_a_host_run_that_raises_part_way_leaves_every_plane_as_it_was() -> None:
    y, seen, counts = np.full(3, 5.0), np.full(4, 0.5), np.zeros(4)
    with pytest.raises(IndexError):  # lane 2 adds into bin 7 of 4, after y and seen were written
        eagle.plan.auto(_two_adds).run(i=np.array([1.0, 2.0, 7.0]), y=y, seen=seen, counts=counts)
    np.testing.assert_array_equal(y, 5.0)
    np.testing.assert_array_equal(seen, 0.5)
    np.testing.assert_array_equal(counts, 0.0)
    eagle.plan.auto(_two_adds).run(i=np.array([1.0, 2.0, 2.0]), y=y, seen=seen, counts=counts)
    np.testing.assert_array_equal(y, [2.0, 4.0, 4.0])
    np.testing.assert_array_equal(seen, [3.5, 0.5, 0.5, 0.5])
    np.testing.assert_array_equal(counts, [0.0, 1.0, 2.0, 0.0])


def test_any_exception_from_the_program_restores_the_planes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @hawk.kernel
    def fill(
        x: hawk.Scalar,
        y: hawk.Mutable[hawk.Scalar],
        z: hawk.Mutable[hawk.Scalar],
        h: hawk.Mutable[hawk.Table],
    ):
        h.add(0, value=x)
        y = x
        z = 2.0 * x

    def program(x, y, z, h, n):  # the statements in order, raising before the last
        h += 100.0
        y[...] = -1.0
        raise KeyboardInterrupt  # even an interrupt leaves the planes as they were

    emitted = host.emit(fill.ir, dict.fromkeys("xyzh", "float64"))
    monkeypatch.setattr(
        host, "emit", lambda *a, **kw: host.HostProgram("fill", "", program, emitted.arguments)
    )
    y, z, h = np.arange(4.0), np.arange(4.0), np.arange(2.0)
    with pytest.raises(KeyboardInterrupt):
        eagle.plan.auto(fill).run(x=np.ones(4), y=y, z=z, h=h)
    np.testing.assert_array_equal(y, np.arange(4.0))
    np.testing.assert_array_equal(z, np.arange(4.0))
    np.testing.assert_array_equal(h, np.arange(2.0))
