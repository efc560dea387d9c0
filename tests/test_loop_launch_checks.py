"""Indices that add a part depending on the lane alone (never decreasing) to a part
depending on loop indices alone are checked once per launch, at bind, like indices of the
lane alone (hawk.emit.checks.LaneCheck): the first lane out of range, and its index at the
first iteration out of range in loop order, are the ones a run over every lane and
iteration in order meets first. Divisions or products mixing the two, falling indices and
accesses some lanes skip keep their check in the kernel."""

# ruff: noqa: F841
# (the kernels of the iteration cap assign to their output planes)

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eagle.plan
import hawk
import hawk.diff
from eagle.cuda.module import compile_cuda
from hawk import ir
from hawk import math as hm
from hawk.emit import checks, cuda
from hawk.ir.expr import INT_MAX
from hawk.kinds import Type
from tests import _loop_check_kernels as k
from tests.test_kan import kan
from tests.test_launch_checks import _dtypes, _emitted, _where


def _brute_force(name: str, lanes: int, extent: int) -> tuple[int, int] | None:
    """The first lane out of range and its first index out of range, over every lane and
    every iteration in loop order."""
    index, loops = k.BRUTE[name]
    for lane in range(lanes):
        for indices in itertools.product(*loops):
            value = index(lane, *indices)
            if not 0 <= value < extent:
                return lane, value
    return None


# -- what the emitters leave to the launch -----------------------------------------------


@pytest.mark.parametrize("shape", [(37, 3, 4, 8), (20, 2, 5, 5)], ids=str)
def test_the_kan_basis_adjoint_reads_phi_bar_with_no_check_in_the_kernel(
    shape: tuple[int, ...],
) -> None:
    layer = kan.kan_kernels(*shape)
    program, source = _emitted(layer.basis_adjoint)
    assert "hawk_in" not in source.source and "hawk_clamp" not in source.source
    assert program.checks == source.checks == ()
    assert _where(program.launch_checks) == _where(source.launch_checks)
    assert ("phi_bar", "row") in _where(source.launch_checks)
    compile_cuda(source.source, name=source.name, arch="sm_90")
    adjoint = hawk.diff.vjp(layer.basis_adjoint)  # its adjoint reads and adds the same rows
    program, source = _emitted(adjoint)
    assert program.checks == source.checks == ()
    assert {("phi_bar", "row"), ("phi_bar_bar", "row")} <= set(_where(source.launch_checks))


@pytest.mark.parametrize("name", sorted(k.BRUTE))
def test_a_lane_part_plus_a_loop_part_is_checked_at_launch_only(name: str) -> None:
    kernel = getattr(k, name)
    program, source = _emitted(kernel)
    assert program.checks == source.checks == ()
    assert "hawk_in" not in source.source
    assert len(source.launch_checks) == 1
    assert program.launch_checks == source.launch_checks
    compile_cuda(source.source, name=source.name, arch="sm_90")


@pytest.mark.parametrize("kernel", [k.halves, k.falling, k.guarded], ids=str)
def test_a_mixed_or_falling_index_or_one_some_lanes_skip_keeps_its_check(
    kernel: hawk.Kernel,
) -> None:
    program, source = _emitted(kernel)
    assert program.launch_checks == source.launch_checks == ()
    assert [(s.plane, s.axis) for s in source.checks] == [("t", "row")]
    assert [(s.plane, s.axis) for s in program.checks] == [("t", "row")]


@hawk.kernel
def _within_the_cap(t: hawk.Table, y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for a in range(1024):
        for b in range(1024):
            acc = acc + t.at(hm.sample_index() + a + b)
    y = acc


@hawk.kernel
def _beyond_the_cap(t: hawk.Table, y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for a in range(1024):
        for b in range(1025):
            acc = acc + t.at(hm.sample_index() + a + b)
    y = acc


def test_loops_of_more_than_max_iterations_leave_the_check_in_the_kernel() -> None:
    assert checks.MAX_ITERATIONS == 1024 * 1024
    within = cuda.emit(_within_the_cap.ir, _dtypes(_within_the_cap))
    assert within.checks == () and _where(within.launch_checks) == [("t", "index")]
    beyond = cuda.emit(_beyond_the_cap.ir, _dtypes(_beyond_the_cap))
    assert beyond.launch_checks == () and [s.plane for s in beyond.checks] == ["t"]
    error = within.launch_checks[0].error(3, 2047)  # lane 0 reads up to 1023 + 1023
    assert error is not None and "index 2047 is out of range at lane 1" in str(error)


# -- where they raise ----------------------------------------------------------------------

LENGTH = 8  # the flat tables' length


def _planes(name: str, lanes: int) -> dict[str, np.ndarray]:
    table = np.arange(1.0, k.ROWS + 1) if name in ("sliding", "nested", "spread") else None
    if name == "spread":
        return {"x": np.ones(lanes), "acc": np.zeros(k.ROWS)}
    if name == "coefficients":
        return {"c": np.arange(1.0, LENGTH + 1), "x": np.full(lanes, 0.5), "y": np.zeros(lanes)}
    t = table if table is not None else np.arange(1.0, LENGTH + 1)
    return {"t": t, "y": np.zeros(lanes)}


@pytest.mark.parametrize("name", sorted(k.BRUTE))
def test_binding_raises_for_the_first_lane_and_iteration_a_run_would_meet(name: str) -> None:
    kernel = getattr(k, name)
    extent = k.ROWS if name in ("sliding", "nested", "spread") else LENGTH
    for lanes in range(1, 14):
        expected = _brute_force(name, lanes, extent)
        planes = _planes(name, lanes)
        if expected is None:
            eagle.plan.auto(kernel).bind(**planes)
            continue
        with pytest.raises(hawk.PlaneIndexError) as caught:
            eagle.plan.auto(kernel).bind(**planes)
        error = caught.value
        assert (error.lane, error.index, error.extent) == (*expected, extent), lanes
        assert f"index {expected[1]} is out of range at lane {expected[0]}" in str(error)


def test_a_sliding_window_reads_its_rows_when_the_lanes_fit_and_raises_when_not() -> None:
    t = np.arange(1.0, k.ROWS + 1)
    y = np.zeros(8)  # lane 7 reads rows 3, 4, 5
    eagle.plan.auto(k.sliding).run(t=t, y=y)
    assert np.array_equal(y, [sum(t[lane // 2 + j] for j in range(3)) for lane in range(8)])
    y = np.full(9, -1.0)
    with pytest.raises(hawk.PlaneIndexError) as caught:
        eagle.plan.auto(k.sliding).run(t=t, y=y)  # lane 8 reads rows 4, 5, then 6
    assert (caught.value.plane, caught.value.axis) == ("t", "row")
    assert (caught.value.lane, caught.value.index, caught.value.extent) == (8, 6, k.ROWS)
    assert np.array_equal(y, np.full(9, -1.0))  # raised at bind: nothing written


def test_the_first_iteration_out_of_range_follows_the_loop_order() -> None:
    with pytest.raises(hawk.PlaneIndexError) as caught:
        eagle.plan.auto(k.backwards).bind(t=np.ones(LENGTH), y=np.zeros(3))
    assert (caught.value.lane, caught.value.index) == (0, -1)  # not -2, the last iteration


def test_an_add_over_a_loop_is_checked_before_anything_is_added() -> None:
    acc = np.zeros(k.ROWS)
    eagle.plan.auto(k.spread).run(x=np.ones(4), acc=acc)  # lanes 0..3 add at l and l + 2
    assert np.array_equal(acc, [1.0, 1.0, 2.0, 2.0, 1.0, 1.0])
    with pytest.raises(hawk.PlaneIndexError) as caught:
        eagle.plan.auto(k.spread).run(x=np.ones(5), acc=acc)
    assert (caught.value.lane, caught.value.index) == (4, 6)
    assert np.array_equal(acc, [1.0, 1.0, 2.0, 2.0, 1.0, 1.0])


def test_a_loop_index_into_a_flat_table_is_checked_against_its_length_at_bind() -> None:
    y = np.zeros(2)
    eagle.plan.auto(k.coefficients).run(c=np.array([1.0, 2.0, 3.0, 4.0]), x=np.full(2, 2.0), y=y)
    assert np.array_equal(y, [26.0, 26.0])  # ((1 * 2 + 2) * 2 + 3) * 2 + 4
    with pytest.raises(hawk.PlaneIndexError) as caught:
        eagle.plan.auto(k.coefficients).bind(c=np.ones(3), x=np.ones(2), y=y)
    error = caught.value
    assert (error.axis, error.index, error.extent, error.lane) == ("index", 3, 3, 0)
    eagle.plan.auto(k.coefficients).bind(c=np.ones(3), x=np.ones(0), y=np.ones(0))  # no lanes


def test_the_kernels_that_keep_their_check_raise_as_they_run() -> None:
    t = np.arange(1.0, k.ROWS + 1)
    bound = eagle.plan.auto(k.halves).bind(t=t, y=np.zeros(11))
    with pytest.raises(hawk.PlaneIndexError) as caught:
        bound.launch()  # lane 10 at k = 2 reads (10 + 2) // 2
    assert (caught.value.lane, caught.value.index) == (10, 6)
    x = np.array([1.0] * 8 + [-1.0] * 2)  # lanes 8 and 9 would read row 6: they skip it
    y = np.zeros(10)
    eagle.plan.auto(k.guarded).run(t=t, x=x, y=y)
    assert np.array_equal(
        y, [sum(t[lane // 2 + j] for j in range(3)) for lane in range(8)] + [0, 0]
    )


def test_the_adjoint_checks_its_loop_indices_at_bind() -> None:
    adjoint = hawk.diff.vjp(k.sliding)
    program, source = _emitted(adjoint)
    assert program.checks == source.checks == ()
    assert _where(source.launch_checks) == [("t_bar", "row")]
    t_bar = np.zeros(k.ROWS)
    plan = eagle.plan.auto(adjoint)
    plan.run(t=np.ones(k.ROWS), y_bar=np.ones(8), t_bar=t_bar)
    assert np.array_equal(t_bar, [2.0, 4.0, 6.0, 6.0, 4.0, 2.0])
    with pytest.raises(hawk.PlaneIndexError) as caught:
        plan.bind(t=np.ones(k.ROWS), y_bar=np.ones(9), t_bar=t_bar)
    assert (caught.value.plane, caught.value.lane, caught.value.index) == ("t_bar", 8, 6)


# -- the search for the first lane and iteration out of range ------------------------------


def _loop(name: str, steps: range) -> tuple[ir.Var, range]:
    return ir.Var(name, Type.INT, False), steps


def test_an_intermediate_sum_that_overflows_fails_though_the_index_fits() -> None:
    # (lane * 2**62 + k * 2**62) - k * 2**62 is lane * 2**62, but at lane 1 and k = 1 the
    # kernel's first sum is 2**63, past int64: that lane fails, naming the wrapped index
    loop = _loop("k", range(2))
    big, k_ = ir.Const(2**62), ir.Ref(loop[0])
    index = ir.Binary(
        "-",
        ir.Binary("+", ir.Binary("*", ir.Lane(), big), ir.Binary("*", k_, big)),
        ir.Binary("*", k_, big),
    )
    site = checks.CheckSite("index", "t", "row", INT_MAX, "t.at(row=...)")
    check = checks.LaneCheck(site, index, (loop,))
    assert check.first_failure(1) is None
    assert check.first_failure(2) == (1, 2**62)


_CONSTANT = st.integers(-9, 9).map(ir.Const)


def _lane_parts() -> st.SearchStrategy[ir.Expr]:
    constant = st.integers(-20, 20).map(ir.Const)

    def grow(inner: st.SearchStrategy[ir.Expr]) -> st.SearchStrategy[ir.Expr]:
        return st.one_of(
            st.builds(lambda a, b: ir.Binary("+", a, b), inner, inner),
            st.builds(lambda a, c: ir.Binary("-", a, c), inner, constant),
            st.builds(lambda a, c: ir.Binary("*", a, ir.Const(c)), inner, st.integers(0, 4)),
            st.builds(lambda a, c: ir.Binary("//", a, ir.Const(c)), inner, st.integers(1, 5)),
        )

    return st.recursive(st.one_of(st.just(ir.Lane()), constant), grow, max_leaves=4)


def _loop_parts(refs: list[ir.Expr]) -> st.SearchStrategy[ir.Expr]:
    def grow(inner: st.SearchStrategy[ir.Expr]) -> st.SearchStrategy[ir.Expr]:
        return st.one_of(
            st.builds(lambda a, b: ir.Binary("+", a, b), inner, inner),
            st.builds(lambda a, b: ir.Binary("-", a, b), inner, inner),
            st.builds(lambda a, c: ir.Binary("*", a, ir.Const(c)), inner, st.integers(-3, 3)),
            st.builds(lambda a, c: ir.Binary("%", a, ir.Const(c)), inner, st.integers(1, 5)),
        )

    return st.recursive(st.one_of(st.sampled_from(refs), _CONSTANT), grow, max_leaves=4)


_RANGES = st.builds(
    lambda start, step, count: range(start, start + step * count, step),
    st.integers(-6, 6),
    st.sampled_from([-3, -1, 1, 2]),
    st.integers(1, 4),
)


@st.composite
def _indices(draw: st.DrawFn) -> tuple[ir.Expr, tuple[tuple[ir.Var, range], ...]]:
    """An index of lane parts and loop parts, through ``+`` and ``-`` of loop parts, and
    its one or two loops."""
    loops = tuple(_loop(f"k{n}", draw(_RANGES)) for n in range(draw(st.integers(1, 2))))
    loop_parts = _loop_parts([ir.Ref(var) for var, _ in loops])
    lane_parts = _lane_parts()

    def grow(inner: st.SearchStrategy[ir.Expr]) -> st.SearchStrategy[ir.Expr]:
        return st.one_of(
            st.builds(lambda a, b: ir.Binary("+", a, b), inner, inner),
            st.builds(lambda a, b: ir.Binary("-", a, b), inner, loop_parts),
        )

    index = draw(st.recursive(st.one_of(lane_parts, loop_parts), grow, max_leaves=4))
    return index, loops


def _every_lane_and_iteration(
    node: ir.Expr, lanes: np.ndarray, at: dict[ir.Var, int]
) -> np.ndarray:
    """``node`` at every lane, at the loop indices ``at``, in numpy's int64."""
    if isinstance(node, ir.Lane):
        return lanes
    if isinstance(node, ir.Const):
        return np.full(lanes.shape, node.value, np.int64)
    if isinstance(node, ir.Ref):
        return np.full(lanes.shape, at[node.var], np.int64)
    assert isinstance(node, ir.Binary)
    left = _every_lane_and_iteration(node.left, lanes, at)
    right = _every_lane_and_iteration(node.right, lanes, at)
    ops = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide, "%": np.mod}
    return ops[node.op](left, right)


@settings(max_examples=300, deadline=None)
@given(case=_indices(), lanes=st.integers(0, 300), extent=st.integers(0, 200))
def test_the_first_failing_lane_and_index_are_the_brute_force_ones(
    case: tuple[ir.Expr, tuple[tuple[ir.Var, range], ...]], lanes: int, extent: int
) -> None:
    index, loops = case
    every = np.arange(lanes, dtype=np.int64)
    iterations = [
        dict(zip([v for v, _ in loops], at, strict=True))
        for at in itertools.product(*(steps for _, steps in loops))
    ]
    values = np.stack([_every_lane_and_iteration(index, every, at) for at in iterations], axis=1)
    bad = (values < 0) | (values >= extent)  # (lane, iteration in loop order)
    expected = None
    if bad.any():
        lane = int(bad.any(axis=1).argmax())
        expected = (lane, int(values[lane, bad[lane].argmax()]))
    site = checks.CheckSite("index", "t", "index", None, "t.at(...)")
    assert checks.LaneCheck(site, index, loops).first_failure(lanes, extent) == expected
