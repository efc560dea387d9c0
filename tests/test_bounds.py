"""Table indices and integer divisors are checked on the host; the device's checks are
emitted (and compiled) here and run in tests/test_bounds_gpu.py."""

from __future__ import annotations

import re

import numpy as np
import pytest

import eagle.plan
import hawk
from eagle.cuda.module import compile_cuda
from hawk.emit import checks, cuda, host
from tests import _bounds_kernels as k


def _run(kernel: hawk.Kernel, **planes: object) -> None:
    eagle.plan.auto(kernel).run(**planes)


def _index_error(kernel: hawk.Kernel, **planes: object) -> hawk.PlaneIndexError:
    with pytest.raises(IndexError) as caught:
        _run(kernel, **planes)
    assert isinstance(caught.value, hawk.PlaneIndexError)
    return caught.value


def test_the_issue_lookup_raises_naming_plane_axis_index_extent_and_lane() -> None:
    t = np.arange(12.0).reshape(3, 4)
    error = _index_error(k.lookup, t=t, i=np.array([5.0, -2.0, 7.0]), y=np.zeros(3))
    message = str(error)
    assert "'t'" in message and "'row'" in message and "index 5 " in message
    assert "extent 3" in message and "lane 0" in message
    assert (error.plane, error.axis, error.index, error.extent, error.lane) == ("t", "row", 5, 3, 0)


def test_in_range_lookups_run() -> None:
    t = np.arange(12.0).reshape(3, 4)
    y = np.zeros(3)
    _run(k.lookup, t=t, i=np.array([2.0, 0.0, 1.9]), y=y)
    assert np.array_equal(y, [9.0, 1.0, 5.0])


@pytest.mark.parametrize(("i", "lane", "index"), [([0, -1, 0], 1, -1), ([0, 0, -7.5], 2, -7)])
def test_negative_indices_raise_not_wrap(i: list[float], lane: int, index: int) -> None:
    error = _index_error(k.lookup, t=np.ones((3, 4)), i=np.array(i, float), y=np.zeros(3))
    assert (error.lane, error.index) == (lane, index)


def test_each_axis_is_checked_on_its_own_extent() -> None:
    # col = 5 keeps the flat offset (0 * 4 + 5) inside the 12-element table
    error = _index_error(
        k.lookup2, t=np.ones((3, 4)), i=np.zeros(2), j=np.array([1.0, 5.0]), y=np.zeros(2)
    )
    assert (error.axis, error.index, error.extent, error.lane) == ("col", 5, 4, 1)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (np.nan, hawk.errors.HawkValueError),
        (np.inf, hawk.errors.HawkOverflowError),
        (-np.inf, hawk.errors.HawkOverflowError),
        (1e30, hawk.errors.HawkOverflowError),
    ],
)
def test_int_of_nan_inf_or_beyond_int64_raises_as_python_does(value: float, kind: type) -> None:
    with pytest.raises(kind, match=re.escape(f"int() of {value!r} at lane 1, in int(i):")):
        _run(k.lookup, t=np.ones((3, 4)), i=np.array([0.0, value]), y=np.zeros(2))


def test_int_truncates_toward_zero_so_small_negatives_are_row_zero() -> None:
    y = np.zeros(1)
    _run(k.lookup, t=np.arange(12.0).reshape(3, 4), i=np.array([-0.7]), y=y)
    assert y[0] == 1.0


def test_flat_tables_are_checked_against_their_length() -> None:
    t = np.arange(6.0)
    y = np.zeros(3)
    _run(k.flat, t=t, i=np.array([0.0, 5.0, 3.0]), y=y)
    assert np.array_equal(y, [0.0, 5.0, 3.0])
    error = _index_error(k.flat, t=t, i=np.array([0.0, 6.0, 3.0]), y=y)
    assert (error.axis, error.index, error.extent, error.lane) == ("index", 6, 6, 1)
    assert "length 6" in str(error)


def test_named_adds_are_checked_and_not_made() -> None:
    acc = np.zeros((5, 2))
    _run(k.add_named, i=np.array([0.0, 4.0, 4.0]), x=np.ones(3), acc=acc)
    assert acc[4, 1] == 2.0 and acc.sum() == 3.0
    before = acc.copy()
    error = _index_error(k.add_named, i=np.array([1.0, -1.0]), x=np.ones(2), acc=acc)
    assert (error.plane, error.axis, error.index, error.lane) == ("acc", "bin", -1, 1)
    assert "acc.add(bin=int(i), slot=1, value=x)" in str(error)
    assert np.array_equal(acc, before)


def test_flat_adds_are_checked() -> None:
    acc = np.zeros(4)
    error = _index_error(k.add_flat, i=np.array([3.0, 4.0]), x=np.ones(2), acc=acc)
    assert (error.axis, error.index, error.extent) == ("index", 4, 4)
    assert not acc.any()


def test_uniform_add_index_is_checked_once_lanes_run() -> None:
    acc = np.zeros(5)
    _run(k.add_uniform, k=4.0, x=np.ones(3), acc=acc)
    assert acc[4] == 3.0
    error = _index_error(k.add_uniform, k=5.0, x=np.ones(3), acc=acc)
    assert (error.index, error.lane) == (5, 0)
    _run(k.add_uniform, k=5.0, x=np.ones(0), acc=acc)  # no lane, no add, no error
    assert acc.sum() == 3.0


@pytest.mark.parametrize("kernel", [k.guarded, k.guarded_select, k.guarded_logic])
def test_lanes_that_do_not_take_the_read_do_not_raise(kernel: hawk.Kernel) -> None:
    t = np.array([1.0, 2.0, 3.0, 4.0])
    y = np.zeros(4)
    _run(kernel, t=t, i=np.array([0.0, 9.0, -3.0, 3.0]), y=y)
    expected = [1.0, 0.0, 0.0, 1.0] if kernel is k.guarded_logic else [1.0, -1.0, -1.0, 4.0]
    assert np.array_equal(y, expected)


def test_an_empty_flat_table_that_no_lane_reads_is_no_error() -> None:
    y = np.zeros(3)
    _run(k.guarded, t=np.zeros(0), i=np.array([-1.0, 5.0, -3.0]), y=y)
    assert np.array_equal(y, [-1.0, -1.0, -1.0])
    error = _index_error(k.guarded, t=np.zeros(0), i=np.array([-1.0, 2.0, -3.0]), y=y)
    assert (error.index, error.lane, error.extent) == (2, 1, 0)


def test_lanes_that_do_not_take_the_add_do_not_raise() -> None:
    acc = np.zeros(4)
    _run(k.guarded_add, i=np.array([0.0, 9.0, -3.0, 3.0, 3.0]), acc=acc)
    assert np.array_equal(acc, [1.0, 0.0, 0.0, 2.0])


def test_integer_floordiv_and_mod_by_a_lane_zero_raise() -> None:
    a, b = np.array([7.0, -7.0, 3.0]), np.array([2.0, 2.0, 0.0])
    q, r = np.zeros(3), np.zeros(3)
    with pytest.raises(ZeroDivisionError, match=r"integer // by zero at lane 2, in int\(a\) // "):
        _run(k.divide, a=a, b=b, q=q, r=r)
    b[2] = -2.0
    _run(k.divide, a=a, b=b, q=q, r=r)
    assert np.array_equal(q, [3.0, -4.0, -2.0]) and np.array_equal(r, [1.0, 1.0, -1.0])


def test_mod_by_a_zero_param_raises_and_a_guarded_zero_does_not() -> None:
    with pytest.raises(ZeroDivisionError, match="integer % by zero at lane 0"):
        _run(k.divide_by_param, a=np.ones(2), k=0.0, q=np.zeros(2))
    q = np.full(3, np.nan)
    _run(k.guarded_divide, a=np.array([7.0, 7.0, 9.0]), b=np.array([2.0, 0.0, 3.0]), q=q)
    assert np.array_equal(q, [3.0, 0.0, 3.0])


def test_a_contraction_run_over_more_lanes_than_its_product_raises() -> None:
    rng = np.random.default_rng()
    w, f = rng.standard_normal((k.R, k.U)), rng.standard_normal((k.R, k.B))
    y = np.zeros(k.B * k.U)
    _run(k.contract, w=w, f=f, y=y)
    assert np.allclose(y.reshape(k.B, k.U), f.T @ w)
    error = _index_error(k.contract, w=w, f=f, y=np.zeros((k.B + 1) * k.U))
    assert (error.plane, error.axis, error.index, error.extent) == ("f", "sample", k.B, k.B)
    assert error.lane == k.B * k.U


def test_provable_indices_are_not_checked() -> None:
    # r walks range(R) and unit = lane % U: only f's sample = lane // U is checked, once
    # per launch (it depends on the lane alone), not in the kernel
    dtypes = {p.name: "float32" for p in k.contract.planes}
    for emitted in (host.emit(k.contract.ir, dtypes), cuda.emit(k.contract.ir, dtypes)):
        assert emitted.checks == ()
        assert [(c.site.plane, c.site.axis) for c in emitted.launch_checks] == [("f", "sample")]


def test_device_records_become_the_host_errors() -> None:
    dtypes = {p.name: "float64" for p in k.lookup.planes}
    sites = cuda.emit(k.lookup.ir, dtypes).checks
    assert [site.kind for site in sites] == ["int", "index"]  # int(i), then the row
    error = checks.record_error(sites, [1, 1, 0, 5, 3, 0, 0, 0])
    with pytest.raises(IndexError) as caught:
        _run(k.lookup, t=np.ones((3, 4)), i=np.array([5.0]), y=np.zeros(1))
    assert isinstance(error, hawk.PlaneIndexError) and str(error) == str(caught.value)
    # int() records the bits of its real, as a double
    nan_bits = int(np.array(np.nan).view(np.int64))
    error = checks.record_error(sites, [1, 0, 0, nan_bits, 0, 0, 0, 0])
    with pytest.raises(ValueError) as caught_nan:
        _run(k.lookup, t=np.ones((3, 4)), i=np.array([np.nan]), y=np.zeros(1))
    assert isinstance(error, hawk.errors.HawkValueError) and str(error) == str(caught_nan.value)
    assert checks.record_error(sites, [0] * checks.RECORD_WORDS) is None
    flat_sites = cuda.emit(k.flat.ir, {p.name: "float32" for p in k.flat.planes}).checks
    assert "length 6" in str(checks.record_error(flat_sites, [1, 1, 2, 9, 6, 0, 0, 0]))


KERNELS = [getattr(k, name) for name in dir(k) if isinstance(getattr(k, name), hawk.Kernel)]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda kernel: kernel.name)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_checked_kernels_compile_with_a_record_and_flat_lengths(
    kernel: hawk.Kernel, dtype: str
) -> None:
    emitted = cuda.emit(kernel.ir, {p.name: dtype for p in kernel.planes})
    flat = tuple(p.name for p in kernel.planes if p.is_table and p.axes is None)
    assert emitted.lengths == flat
    assert "unsigned long long* __restrict__ hawk_rec)" in emitted.source
    copies = 2 if "hawk_pack" in emitted.source else 1  # a vectorised loop repeats the body
    calls = emitted.source.count("hawk_in(ix") + emitted.source.count("hawk_clamp(")
    assert calls == copies * sum(s.kind == "index" for s in emitted.checks) + (
        "__forceinline__ long long hawk_clamp(" in emitted.source
    )
    compile_cuda(emitted.source, name=emitted.name, arch="sm_90")


def test_checks_false_leaves_the_checks_out() -> None:
    dtypes = {p.name: "float64" for p in k.lookup.planes}
    unchecked = host.emit(k.lookup.ir, dtypes, checks=False)
    y = np.zeros(1)
    unchecked.function(np.arange(12.0), np.array([5.0]), y, 1)
    assert unchecked.checks == () and y[0] == 11.0  # the old clamp: a plausible wrong value
    source = cuda.emit(k.lookup.ir, dtypes, checks=False)
    assert source.checks == () and "hawk_in(" not in source.source
    compile_cuda(source.source, name=source.name, arch="sm_90")


def test_an_index_that_changes_in_a_loop_is_checked_on_every_iteration() -> None:
    t = np.arange(6.0)
    y = np.zeros(2)
    _run(k.window, t=t, i=np.array([0.0, 3.0]), y=y)
    assert np.array_equal(y, [3.0, 12.0])
    error = _index_error(k.window, t=t, i=np.array([0.0, 4.0]), y=y)
    assert (error.index, error.lane) == (6, 1)


def test_a_run_that_fails_a_check_leaves_every_plane_as_it_was() -> None:
    acc = np.arange(4.0)
    error = _index_error(k.add_twice, i=np.array([1.0, 4.0]), x=np.ones(2), acc=acc)
    assert (error.index, error.lane) == (4, 1)
    assert np.array_equal(acc, np.arange(4.0))  # the first add was made, then undone
