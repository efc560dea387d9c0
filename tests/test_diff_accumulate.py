"""``eagle.diff.reverse(..., accumulate=False)``: adjoints that write their gradients
instead of adding into them, on every route; the default still adds."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk.diff
from hawk.emit import policy
from tests import _route_kernels as k
from tests._diff_kernels import ALL, adjoint_planes, random_cotangents, read_eight, read_four
from tests._route_kernels import B, R, U
from tests.test_diff_route import _adjoint, _planes
from tests.test_route import fake_cublas  # noqa: F401 - the fixture


def _forward(case, rng):
    planes = case.make(rng, np.dtype("float64"))
    primal = {name: value.copy() for name, value in planes.items()}
    eagle.plan.auto(case.kernel).run(**primal)
    return planes


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_written_gradients_are_the_added_ones_less_what_the_planes_held(case, rng):
    planes = _forward(case, rng)
    cotangents = random_cotangents(case.kernel, planes, rng)
    wrt = tuple(hawk.diff.gradient_planes(case.kernel))
    added, start = adjoint_planes(case.kernel, planes, cotangents, wrt, rng)
    written = {name: value.copy() for name, value in added.items()}
    for gradient in start:
        written[gradient].fill(np.nan)  # whatever the planes held is not read
    eagle.diff.reverse(eagle.plan.auto(case.kernel)).run(**added)
    eagle.diff.reverse(eagle.plan.auto(case.kernel), accumulate=False).run(**written)
    for gradient, before in start.items():
        assert not np.isnan(written[gradient]).any(), gradient
        np.testing.assert_allclose(
            written[gradient], added[gradient] - before, rtol=1e-9, atol=1e-9, err_msg=gradient
        )


def test_a_written_loop_adjoint_stores_lane_gradients_and_zeroes_shared_ones(rng):
    case = next(c for c in ALL if c.name == "uniform")  # a param, a table and a scalar
    planes = _forward(case, rng)
    adjoint = eagle.diff.reverse(eagle.plan.auto(case.kernel), accumulate=False)
    cotangents = {"y_bar": rng.standard_normal(planes["x"].size)}
    gradients = {
        "a_bar": np.full(1, np.nan),
        "t_bar": np.full(planes["t"].size, np.nan),
        "x_bar": np.full(planes["x"].size, np.nan),
    }
    bound = adjoint.bind(a=planes["a"], t=planes["t"], x=planes["x"], **cotangents, **gradients)
    ((step,),) = [bound.steps]
    assert step.route == "loop"
    assert step.plan.kernel == hawk.diff.vjp(case.kernel, lane_gradients="store")
    for _ in range(2):  # a second launch writes the same values again
        bound.launch()
        once = {name: value.copy() for name, value in gradients.items()}
        assert not any(np.isnan(value).any() for value in once.values())
    assert all(np.array_equal(once[name], gradients[name]) for name in gradients)


def test_a_failing_written_adjoint_leaves_its_planes_as_they_were(rng):
    case = next(c for c in ALL if c.name == "uniform")
    planes = _forward(case, rng)
    adjoint = eagle.diff.reverse(eagle.plan.auto(case.kernel), accumulate=False)
    t_bar = rng.standard_normal(planes["t"].size)
    before = t_bar.copy()
    with pytest.raises(ValueError, match="y_bar"):
        adjoint.run(a=planes["a"], t=planes["t"], x=planes["x"], y_bar=np.ones(3), t_bar=t_bar)
    assert np.array_equal(t_bar, before)


@pytest.mark.parametrize("accumulate", [True, False])
def test_the_host_product_route_adds_or_writes(rng, accumulate):
    plan = eagle.plan.auto(k.contract, contraction="gemm", host_route="gemm")
    adjoint = eagle.diff.reverse(plan, accumulate=accumulate)
    assert adjoint.route("host") == "gemm"
    w, f = rng.standard_normal((R, U)), rng.standard_normal((R, B))
    y_bar = rng.standard_normal(B * U)
    start = {"w_bar": rng.standard_normal((R, U)), "f_bar": rng.standard_normal((R, B))}
    given = {name: value.copy() if accumulate else np.full_like(value, np.nan)
             for name, value in start.items()}  # fmt: skip
    adjoint.run(w=w, f=f, y_bar=y_bar, **given)
    base = start if accumulate else {name: 0.0 for name in start}
    g = y_bar.reshape(B, U)
    np.testing.assert_allclose(given["w_bar"], base["w_bar"] + f @ g, rtol=1e-12)
    np.testing.assert_allclose(given["f_bar"], base["f_bar"] + w @ g.T, rtol=1e-12)


def test_the_device_products_run_with_beta_zero(fake_cublas):  # noqa: F811
    handles, _ = fake_cublas
    with policy.using(contraction="gemm"):
        written = eagle.diff.reverse(eagle.plan.auto(k.contract), accumulate=False)
    written.bind(**_planes(w_bar=True, f_bar=True)).launch()
    assert handles[0x11].betas == [0.0, 0.0]
    _adjoint().bind(**_planes(w_bar=True)).launch()  # the default still adds
    assert handles[0x11].betas == [0.0, 0.0, 1.0]


def test_a_written_sequence_holds_the_sum_of_every_launchs_gradient(rng):
    """The same gradient plane given to two launches: the first adjoint to run writes it,
    the other adds; a chained cotangent is written before the launch that reads it."""
    case = next(c for c in ALL if c.name == "uniform")
    planes = _forward(case, rng)
    plan = eagle.plan.auto(case.kernel)
    y_bars = [rng.standard_normal(planes["x"].size) for _ in range(2)]
    common = {"a": planes["a"], "t": planes["t"], "x": planes["x"]}
    expected = {"t_bar": np.zeros(planes["t"].size), "a_bar": np.zeros(1)}
    for y_bar in y_bars:
        eagle.diff.reverse(plan).run(**common, y_bar=y_bar, **expected)
    t_bar, a_bar = np.full(planes["t"].size, np.nan), np.full(1, np.nan)
    x_bars = [np.full(planes["x"].size, np.nan) for _ in range(2)]
    sequence = eagle.diff.reverse([plan, plan], accumulate=False)
    sequence.run(
        {**common, "y_bar": y_bars[0], "t_bar": t_bar, "x_bar": x_bars[0]},
        {**common, "y_bar": y_bars[1], "t_bar": t_bar, "a_bar": a_bar, "x_bar": x_bars[1]},
    )
    np.testing.assert_allclose(t_bar, expected["t_bar"], rtol=1e-12)
    # a_bar is reached by the second launch alone (the first to run): written, not added
    a_alone = np.zeros(1)
    eagle.diff.reverse(plan).run(**common, y_bar=y_bars[1], a_bar=a_alone)
    np.testing.assert_allclose(a_bar, a_alone, rtol=1e-12)
    for x_bar, y_bar in zip(x_bars, y_bars, strict=True):
        alone = np.zeros_like(x_bar)
        eagle.diff.reverse(plan).run(**common, y_bar=y_bar, x_bar=alone)
        np.testing.assert_allclose(x_bar, alone, rtol=1e-12)


@pytest.mark.parametrize("part", [slice(0, 4), slice(4, None)])
def test_a_written_sequence_refuses_a_gradient_plane_that_shares_part_of_anothers(rng, part):
    """A later launch (whose adjoint runs first) gets a view of part of the earlier
    launch's gradient plane: writing the earlier one whole would drop its adds, so the
    bind refuses it by name before anything runs; accumulate=True adds both."""

    table, y_bars = rng.standard_normal(8), [rng.standard_normal(8) for _ in range(2)]
    plans = [eagle.plan.auto(read_eight), eagle.plan.auto(read_four)]
    expected = 3.0 * y_bars[0]
    np.add.at(expected[part], np.arange(8) % 4, 2.0 * y_bars[1])
    for accumulate in (False, True):
        grad = np.zeros(8) if accumulate else np.full(8, np.nan)
        launches = (
            {"t": table, "y_bar": y_bars[0], "t_bar": grad},
            {"t": table[part], "y_bar": y_bars[1], "t_bar": grad[part]},
        )
        adjoint = eagle.diff.reverse(plans, accumulate=accumulate)
        if accumulate:
            adjoint.run(*launches)
            np.testing.assert_allclose(grad, expected, rtol=1e-12)
        else:
            with pytest.raises(ValueError, match="launch 0: gradient plane 't_bar' shares part"):
                adjoint.run(*launches)
            assert np.isnan(grad).all()


@pytest.mark.parametrize("accumulate", [True, False])
def test_a_sequence_refuses_a_gradient_plane_over_a_plane_the_adjoints_read(rng, accumulate):
    """A gradient plane of one launch over memory an earlier launch takes as the forward's
    values (its table here): the first adjoint to run would change what a later one reads,
    so the bind refuses it by name before anything runs."""
    buffer, y_bars = rng.standard_normal(8), [rng.standard_normal(8) for _ in range(2)]
    kept = buffer.copy()
    t_bar = np.zeros(8)
    plans = [eagle.plan.auto(read_eight), eagle.plan.auto(read_four)]
    launches = (
        {"t": buffer, "y_bar": y_bars[0], "t_bar": t_bar},
        {"t": rng.standard_normal(4), "y_bar": y_bars[1], "t_bar": buffer[2:6]},
    )
    with pytest.raises(
        ValueError,
        match="launch 1: gradient plane 't_bar' shares memory with plane 't' of launch 0",
    ):
        eagle.diff.reverse(plans, accumulate=accumulate).run(*launches)
    np.testing.assert_array_equal(buffer, kept)
    np.testing.assert_array_equal(t_bar, 0.0)
    # the other way round, a later launch's table under an earlier launch's gradient: the
    # later launch's adjoint runs first and has read it, so the memory may be reused
    later = rng.standard_normal(4)
    apart, reused = np.zeros(8), np.zeros(8)
    reused[2:6] = later
    for gradient, table in ((apart, later), (reused, reused[2:6])):
        eagle.diff.reverse(plans, accumulate=False).run(
            {"t": buffer, "y_bar": y_bars[0], "t_bar": gradient},
            {"t": table, "y_bar": y_bars[1], "t_bar": np.zeros(4)},
        )
    np.testing.assert_array_equal(reused, apart)


def test_accumulate_is_kept_by_copies_and_named_in_the_repr():
    plan = eagle.plan.auto(k.contract)
    written = eagle.diff.reverse(plan, accumulate=False)
    assert repr(written) == "AdjointPlan(contract, accumulate=False)"
    assert repr(eagle.diff.reverse(plan)) == "AdjointPlan(contract)"
    for clone in (copy.deepcopy(written), pickle.loads(pickle.dumps(written))):
        assert clone.accumulate is False
    sequence = eagle.diff.reverse([plan, plan], accumulate=False)
    assert pickle.loads(pickle.dumps(sequence)).accumulate is False
    assert all(step.accumulate is False for step in sequence.steps)
    with pytest.raises(TypeError, match="accumulate is True .* or False"):
        eagle.diff.reverse(plan, accumulate=0)


def test_a_written_sequence_of_products_zeroes_a_plane_an_adding_step_reaches_first(rng):
    """The launch that runs second adds into ``w_bar`` (the other wrote it) and reaches
    ``f_bar`` first: that plane is zeroed before its product adds."""
    plan = eagle.plan.auto(k.contract, contraction="gemm", host_route="gemm")
    w, f = rng.standard_normal((R, U)), rng.standard_normal((R, B))
    y_bars = [rng.standard_normal(B * U) for _ in range(2)]
    w_bar, f_bar = np.full((R, U), np.nan), np.full((R, B), np.nan)
    sequence = eagle.diff.reverse([plan, plan], accumulate=False)
    sequence.run(
        {"w": w, "f": f, "y_bar": y_bars[0], "w_bar": w_bar, "f_bar": f_bar},
        {"w": w, "f": f, "y_bar": y_bars[1], "w_bar": w_bar},
    )
    g0, g1 = (y.reshape(B, U) for y in y_bars)
    np.testing.assert_allclose(w_bar, f @ g0 + f @ g1, rtol=1e-12)
    np.testing.assert_allclose(f_bar, w @ g0.T, rtol=1e-12)
