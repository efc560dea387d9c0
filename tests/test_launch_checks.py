"""Indices that depend on the lane alone, never decreasing, are checked once per launch,
at bind, on the host (hawk.emit.checks.LaneCheck); the kernels make no check of their
own for them, and every other index keeps its check in the kernel."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eagle.diff
import eagle.plan
import hawk
from eagle.cuda.module import compile_cuda
from eagle.plan._backends import backend_named
from eagle.plan._planes import Planes
from hawk import ir
from hawk.emit import checks, cuda, host
from tests import _bounds_kernels as k


def _dtypes(kernel: hawk.Kernel) -> dict[str, str]:
    return {p.name: "float32" for p in kernel.planes}


def _emitted(kernel: hawk.Kernel) -> tuple[host.HostProgram, cuda.CudaSource]:
    return host.emit(kernel.ir, _dtypes(kernel)), cuda.emit(kernel.ir, _dtypes(kernel))


def _where(lane_checks: tuple[checks.LaneCheck, ...]) -> list[tuple[str | None, str]]:
    return [(c.site.plane, c.site.axis) for c in lane_checks]


def _index_error(kernel: hawk.Kernel, **planes: object) -> hawk.PlaneIndexError:
    with pytest.raises(IndexError) as caught:
        eagle.plan.auto(kernel).bind(**planes)
    assert isinstance(caught.value, hawk.PlaneIndexError)
    return caught.value


# -- what the emitters leave to the launch -----------------------------------------------


def test_the_contraction_loop_makes_no_check_in_the_kernel() -> None:
    program, source = _emitted(k.contract)  # the contraction of tests._hawk_kernels
    assert "hawk_in" not in source.source
    assert program.checks == () and source.checks == ()
    assert _where(program.launch_checks) == _where(source.launch_checks) == [("f", "sample")]
    assert source.launch_checks[0].site.access == "f.at(row=r, sample=sample)"
    compile_cuda(source.source, name=source.name, arch="sm_90")


@hawk.kernel
def constant_reads(x: hawk.Scalar, w: hawk.Table, y: hawk.Mutable[hawk.Scalar]):
    y = w.at(0) * x + w.at(3) * x  # noqa: F841 (a kernel assigns to its output plane)


def test_a_constant_index_into_a_flat_table_is_checked_once_at_bind() -> None:
    """Every lane reads ``w.at(3)`` alike: the launch checks it against the table's length,
    and the kernel reads ``w`` with no check (a 2,000-term sum of such reads compiled in
    minutes, each read clamped and recorded per lane)."""
    program, source = _emitted(constant_reads)
    assert _where(program.launch_checks) == _where(source.launch_checks) == [("w", "index")] * 2
    assert program.checks == () and source.checks == ()
    assert "p_w[3LL]" in source.source and "hawk_clamp" not in source.source
    compile_cuda(source.source, name=source.name, arch="sm_90")
    x, y = np.arange(4.0), np.full(4, np.nan)
    error = _index_error(constant_reads, x=x, w=np.ones(3), y=y)
    assert (error.lane, error.index, error.extent) == (0, 3, 3)
    assert "w.at(3)" in str(error) and np.isnan(y).all()  # raised at bind: nothing ran
    eagle.plan.auto(constant_reads).run(x=x, w=np.array([2.0, 0.0, 0.0, 5.0]), y=y)
    np.testing.assert_array_equal(y, 7.0 * x)
    assert checks.LaneCheck(source.launch_checks[1].site, ir.Const(3)).first_failure(0, 3) is None


def test_a_data_dependent_index_keeps_its_check_in_the_kernel() -> None:
    program, source = _emitted(k.lookup)
    assert program.launch_checks == source.launch_checks == ()
    assert [(s.plane, s.axis) for s in source.checks] == [(None, "int"), ("t", "row")]
    assert "hawk_in(" in source.source


@pytest.mark.parametrize("kernel", [k.wrapped, k.backwards])
def test_an_index_that_is_not_monotone_in_the_lane_keeps_its_check(kernel: hawk.Kernel) -> None:
    program, source = _emitted(kernel)
    assert program.launch_checks == source.launch_checks == ()
    assert [(s.plane, s.axis) for s in source.checks] == [("t", "row")]


def test_lane_mod_a_constant_is_proved_when_it_fits_and_checked_in_the_kernel_if_not() -> None:
    program, source = _emitted(k.cycle)  # lane % 3 on an axis of 3: proved, no check
    assert program.launch_checks == source.launch_checks == () and source.checks == ()
    y = np.zeros(5)
    eagle.plan.auto(k.cycle).run(t=np.array([1.0, 2.0, 3.0]), y=y)
    assert np.array_equal(y, [1.0, 2.0, 3.0, 1.0, 2.0])
    bound = eagle.plan.auto(k.wrapped).bind(t=np.ones(2), y=np.zeros(5))  # lane % 3 on 2
    with pytest.raises(hawk.PlaneIndexError) as caught:
        bound.launch()  # not monotone: checked as the kernel runs
    assert (caught.value.index, caught.value.lane) == (2, 2)


@pytest.mark.parametrize("kernel", [k.chosen, k.branch])
def test_an_access_some_lanes_skip_keeps_its_check_and_does_not_raise(
    kernel: hawk.Kernel,
) -> None:
    program, source = _emitted(kernel)
    assert program.launch_checks == source.launch_checks == ()
    assert [(s.plane, s.axis) for s in source.checks] == [("t", "row")]
    y = np.zeros(6)
    eagle.plan.auto(kernel).run(t=np.array([1.0, 2.0, 3.0]), y=y)
    assert np.array_equal(y, [1.0, 2.0, 3.0, -1.0, -1.0, -1.0])


def test_an_index_checked_at_launch_is_not_checked_again_where_some_lanes_skip_it() -> None:
    program, source = _emitted(k.both)
    assert _where(source.launch_checks) == [("t", "row")] and source.checks == ()
    assert program.checks == ()
    y = np.zeros(3)
    eagle.plan.auto(k.both).run(t=np.array([1.0, 2.0, 3.0]), y=y)
    assert np.array_equal(y, [1.0, 4.0, 6.0])
    error = _index_error(k.both, t=np.ones(3), y=np.zeros(4))
    assert (error.index, error.lane) == (3, 3)


def test_checks_false_makes_no_launch_checks() -> None:
    dtypes = _dtypes(k.contract)
    assert host.emit(k.contract.ir, dtypes, checks=False).launch_checks == ()
    assert cuda.emit(k.contract.ir, dtypes, checks=False).launch_checks == ()


# -- where they raise ----------------------------------------------------------------------


def test_a_contraction_over_more_lanes_than_its_product_raises_at_bind() -> None:
    rng = np.random.default_rng()
    w, f = rng.standard_normal((k.R, k.U)), rng.standard_normal((k.R, k.B))
    y = np.full((k.B + 1) * k.U, np.nan)
    error = _index_error(k.contract, w=w, f=f, y=y)
    assert (error.plane, error.axis, error.index, error.extent) == ("f", "sample", k.B, k.B)
    assert error.lane == k.B * k.U
    assert str(error) == (
        f"table 'f', axis 'sample' (extent {k.B}): index {k.B} is out of range at lane "
        f"{k.B * k.U}, in f.at(row=r, sample=sample)"
    )
    assert np.isnan(y).all()
    eagle.plan.auto(k.contract).bind(w=w, f=f, y=np.zeros(k.B * k.U))  # in range: binds


def test_the_adjoints_binding_checks_its_lane_indices() -> None:
    rng = np.random.default_rng()
    w, f = rng.standard_normal((k.R, k.U)), rng.standard_normal((k.R, k.B))
    f_bar = np.zeros((k.R, k.B))
    adjoint = eagle.diff.reverse(eagle.plan.auto(k.contract))
    with pytest.raises(hawk.PlaneIndexError) as caught:
        adjoint.bind(w=w, f=f, y_bar=np.ones((k.B + 1) * k.U), f_bar=f_bar)
    error = caught.value  # f_bar's gradient reads w alone: its add is the first lane index
    assert (error.plane, error.axis, error.index, error.lane) == ("f_bar", "sample", k.B, k.B * k.U)
    assert np.array_equal(f_bar, np.zeros((k.R, k.B)))


def test_an_index_negative_at_lane_0_fails_at_lane_0() -> None:
    error = _index_error(k.previous, f=np.ones(k.B), y=np.zeros(5))
    assert (error.plane, error.axis, error.index, error.extent, error.lane) == (
        "f", "sample", -1, k.B, 0,
    )  # fmt: skip
    assert "hawk_in" not in cuda.emit(k.previous.ir, _dtypes(k.previous)).source


def test_flat_tables_are_checked_against_their_length_at_bind() -> None:
    t = np.arange(10.0)
    y = np.zeros(5)
    eagle.plan.auto(k.odd).run(t=t, y=y)  # lane 4 reads index 9
    assert np.array_equal(y, [1.0, 3.0, 5.0, 7.0, 9.0])
    error = _index_error(k.odd, t=t, y=np.zeros(6))
    assert (error.axis, error.index, error.extent, error.lane) == ("index", 11, 10, 5)
    assert "(length 10)" in str(error)


def test_an_add_at_a_lane_index_is_checked_before_anything_is_added() -> None:
    acc = np.zeros(3)
    eagle.plan.auto(k.pairs).run(x=np.ones(6), acc=acc)
    assert np.array_equal(acc, [2.0, 2.0, 2.0])
    _, source = _emitted(k.pairs)
    assert _where(source.launch_checks) == [("acc", "bin")] and "hawk_in" not in source.source
    error = _index_error(k.pairs, x=np.ones(7), acc=acc)
    assert (error.plane, error.axis, error.index, error.extent, error.lane) == (
        "acc", "bin", 3, 3, 6,
    )  # fmt: skip
    assert "acc.add(bin=" in str(error)
    assert np.array_equal(acc, [2.0, 2.0, 2.0])


def test_the_device_binding_raises_before_it_compiles_or_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import eagle.cuda.module

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the kernel was loaded")

    monkeypatch.setattr(eagle.cuda.module, "load_kernel", refuse)

    class _DeviceArray:  # what the binding reads of a device array before loading
        def __init__(self, *shape: int) -> None:
            self.shape = shape

    plan = eagle.plan.auto(k.odd)
    lanes = 6
    checked = Planes(
        side="device",
        device=0,
        lanes=lanes,
        signature=("float32", "float32"),
        real=np.dtype("float32"),
        values={"t": _DeviceArray(10), "y": _DeviceArray(lanes)},
        numbers={},
    )
    with pytest.raises(hawk.PlaneIndexError) as caught:
        backend_named("cuda").bind(plan, checked)
    assert (caught.value.index, caught.value.extent, caught.value.lane) == (11, 10, 5)


# -- the search for the first lane out of range ---------------------------------------


def test_check_launch_raises_for_the_first_failing_check_in_order() -> None:
    first = checks.LaneCheck(checks.CheckSite("index", "a", "i", 4, "a.at(i=lane)"), ir.Lane())
    second = checks.LaneCheck(
        checks.CheckSite("index", "b", "index", None, "b.at(lane)"), ir.Lane()
    )
    checks.check_launch([first, second], 4, {"b": 4})
    with pytest.raises(hawk.PlaneIndexError, match="table 'b' \\(length 3\\): index 3"):
        checks.check_launch([first, second], 4, {"b": 3})
    with pytest.raises(hawk.PlaneIndexError, match="table 'a'"):
        checks.check_launch([first, second], 5, {"b": 3})
    with pytest.raises(ValueError, match="needs the length of flat table 'b'"):
        second.first_failure(4)
    assert first.first_failure(0) is None


def test_an_index_whose_arithmetic_overflows_fails_where_it_overflows() -> None:
    # (lane * 2**62) // 2**62 is lane in exact arithmetic, but the kernel's int64
    # product wraps at lane 2 (to -2**63), so its index there is -2
    big = ir.Const(2**62)
    index = ir.Binary("//", ir.Binary("*", ir.Lane(), big), big)
    check = checks.LaneCheck(checks.CheckSite("index", "t", "row", 10, "t.at(row=...)"), index)
    assert check.first_failure(2) is None
    assert check.first_failure(5) == (2, -2)


_LEAF = st.one_of(st.just(ir.Lane()), st.integers(-40, 40).map(ir.Const))


def _grow(inner: st.SearchStrategy[ir.Expr]) -> st.SearchStrategy[ir.Expr]:
    constant = st.integers(-40, 40).map(ir.Const)
    return st.one_of(
        st.builds(lambda a, b: ir.Binary("+", a, b), inner, inner),
        st.builds(lambda a, c: ir.Binary("-", a, c), inner, constant),
        st.builds(lambda a, c: ir.Binary("*", a, ir.Const(c)), inner, st.integers(0, 5)),
        st.builds(lambda a, c: ir.Binary("*", ir.Const(c), a), inner, st.integers(0, 5)),
        st.builds(lambda a, c: ir.Binary("//", a, ir.Const(c)), inner, st.integers(1, 7)),
    )


_MONOTONE = st.recursive(_LEAF, _grow, max_leaves=8)


def _every_lane(node: ir.Expr, lanes: np.ndarray) -> np.ndarray:
    """``node`` at every lane, in numpy's int64 (floor division, as the kernel)."""
    if isinstance(node, ir.Lane):
        return lanes
    if isinstance(node, ir.Const):
        return np.full(lanes.shape, node.value, np.int64)
    assert isinstance(node, ir.Binary)
    left, right = _every_lane(node.left, lanes), _every_lane(node.right, lanes)
    ops = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide}
    return ops[node.op](left, right)


@settings(max_examples=300, deadline=None)
@given(index=_MONOTONE, lanes=st.integers(0, 400), extent=st.integers(0, 300))
def test_the_first_failing_lane_is_the_brute_force_ones(
    index: ir.Expr, lanes: int, extent: int
) -> None:
    values = _every_lane(index, np.arange(lanes, dtype=np.int64))
    assert np.all(np.diff(values) >= 0)  # the generator's expressions never decrease
    bad = (values < 0) | (values >= extent)
    expected = (int(bad.argmax()), int(values[bad.argmax()])) if bad.any() else None
    site = checks.CheckSite("index", "t", "index", None, "t.at(...)")
    assert checks.LaneCheck(site, index).first_failure(lanes, extent) == expected
