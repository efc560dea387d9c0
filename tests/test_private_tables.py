"""Privatised table adds (hawk.emit.private) on the host: which tables the analysis picks
under each ``adds`` choice, the size bound, the refusals, and NVRTC compiles of the
kernels that sum in shared memory."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
import hawk.diff
from eagle.cuda.module import compile_cuda
from hawk.emit import cuda, policy, private
from hawk.emit.private import SharedTable
from tests import _private_kernels as k

F32 = {"x": "float32", "w": "float32", "counts": "float32"}
MANY = 10**8  # lanes
SMS = 132  # an H200's multiprocessors
WARPS = 8


def _choose(kernel, dtypes, lengths=None, *, adds="auto", lanes=MANY):
    return private.choose(
        kernel.ir, dtypes, lengths or {}, adds=adds, lanes=lanes, blocks=lambda: SMS, warps=WARPS
    )


def test_auto_privatises_a_small_table_over_many_lanes_only():
    counts = SharedTable("counts", k.BINS, 4)
    assert _choose(k.histogram, F32) == (counts,)
    assert _choose(k.histogram, F32, adds="shared", lanes=10) == (counts,)
    # each block zeroes and flushes its copy once: a block per multiprocessor must run as
    # many lanes as the copy has cells
    assert _choose(k.histogram, F32, lanes=k.BINS * SMS) == (counts,)
    assert _choose(k.histogram, F32, lanes=k.BINS * SMS - 1) == ()
    assert private.blocks_for((counts,), {}, 10**8) == 10**8 // k.BINS
    assert private.blocks_for((counts,), {}, 10) == 1
    assert _choose(k.histogram, F32, adds="global") == ()


@pytest.mark.parametrize("adds", ["shared", "deterministic"])
def test_the_choice_reads_the_bound_and_the_copies(adds):
    copies = WARPS if adds == "deterministic" else 1
    cells = private.SHARED_BYTES // 4 // copies  # float32 copies exactly at the bound
    at, above = k.make_histogram(cells), k.make_histogram(cells + 1)
    assert _choose(at, F32, adds=adds) == (SharedTable("counts", cells, 4),)
    assert private.shared_bytes(_choose(at, F32, adds=adds), {}, copies) == private.SHARED_BYTES
    if adds == "shared":
        assert _choose(above, F32) == ()  # auto: not privatised, the adds stay global
    size = -(-(cells + 1) * 4 * copies // 16) * 16
    with pytest.raises(hawk.HawkError, match=rf"table 'counts'.*{size} bytes, over the 32768"):
        _choose(above, F32, adds=adds)


def test_float64_tables_count_eight_bytes_a_cell():
    f64 = dict(F32, counts="float64")
    assert _choose(k.make_histogram(4096), f64) == (SharedTable("counts", 4096, 8),)
    assert _choose(k.make_histogram(4097), f64) == ()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_tables_keep_their_global_adds(dtype):
    assert _choose(k.histogram, dict(F32, counts=dtype)) == ()
    with pytest.raises(hawk.HawkError, match=f"it is {dtype} \\(privatised: float32"):
        _choose(k.histogram, dict(F32, counts=dtype), adds="shared")


def test_a_flat_table_is_sized_by_its_length_when_bound():
    dtypes = {"i": "float32", "w": "float32", "t": "float32"}
    assert _choose(k.at_index, dtypes, {"t": 100}) == (SharedTable("t", None, 4),)
    assert _choose(k.at_index, dtypes, {"t": 8193}) == ()
    assert private.reasons(k.at_index.ir, dtypes, {}) == {"t": "its length is not known"}


def test_tables_are_taken_in_order_while_their_copies_fit_together():
    dtypes = {"i": "float32", "w": "float32", "a": "float32", "b": "float64"}
    both = _choose(k.two_tables, dtypes, {"a": 100})
    assert both == (SharedTable("a", None, 4), SharedTable("b", 15, 8))
    assert private.shared_bytes(both, {"a": 100}) == 400 + 128  # each copy 16-byte aligned
    full = {"a": private.SHARED_BYTES // 4}  # a fills the shared memory: b stays global
    assert _choose(k.two_tables, dtypes, full) == (SharedTable("a", None, 4),)
    with pytest.raises(hawk.HawkError, match="table 'b'.*privatised with it would exceed"):
        _choose(k.two_tables, dtypes, full, adds="shared")


def test_only_lane_dependent_adds_are_privatised_unless_deterministic():
    dtypes = {"w": "float32", "t": "float32"}
    assert private.reasons(k.uniform.ir, dtypes, {}) == {}  # one warp sum per warp already
    assert _choose(k.uniform, dtypes, adds="shared") == ()
    assert _choose(k.uniform, dtypes, adds="deterministic") == (SharedTable("t", 4, 4),)


def test_deterministic_adds_refuse_a_lane_dependent_if():
    dtypes = {"i": "float32", "w": "float32", "t": "float32"}
    assert _choose(k.branched, dtypes, adds="shared") == (SharedTable("t", 16, 4),)
    with pytest.raises(hawk.HawkError, match=r"under an if .* `value if cond else 0.0`"):
        _choose(k.branched, dtypes, adds="deterministic")


def test_the_scratch_holds_a_row_per_block_after_the_count():
    tables = (SharedTable("a", None, 4), SharedTable("b", 15, 8))
    assert private.scratch_bytes(tables, {"a": 3}, 2) == 16 + 32 + 240


@pytest.mark.parametrize("checks", [True, False])
@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("narrow", [True, False])
def test_privatised_kernels_compile_with_nvrtc(checks, deterministic, narrow):
    adds = "deterministic" if deterministic else "shared"
    cases = [
        (k.histogram, F32, {}),
        (k.make_histogram(256), dict(F32, x="float64", counts="float64"), {}),
        (k.two_tables, {"i": "float64", "w": "float32", "a": "float32", "b": "float64"}, {"a": 9}),
    ]
    for kernel, dtypes, lengths in cases:
        shared = _choose(kernel, dtypes, lengths, adds=adds)
        source = cuda.emit(
            kernel.ir, dtypes, checks=checks, narrow=narrow, shared=shared,
            deterministic=deterministic,
        )  # fmt: skip
        assert source.shared == shared and source.deterministic == deterministic
        text = source.source
        assert "extern __shared__" in text and ("hawk_scratch" in text) == deterministic
        assert ("hawk_add_ordered(" in text) == deterministic
        assert ("hawk_in(" in text) == checks  # bin checks still apply
        assert compile_cuda(text, name=source.name)


def test_adds_of_one_constant_are_counted_in_32_bit_cells():
    x = {"x": "float32"}
    assert _choose(k.counter, dict(x, counts="float32")) == (SharedTable("counts", k.BINS, 4, 1.0),)
    # a float64 table's counted copy takes 4 bytes a cell: 8,192 cells fit
    f64 = dict(x, counts="float64")
    assert _choose(k.make_counter(8192, 0.25), f64) == (SharedTable("counts", 8192, 4, 0.25),)
    assert _choose(k.counted_twice, dict(x, counts="float32")) == (
        SharedTable("counts", k.BINS, 4, 0.5),
    )
    # counts could reach 2**32: the adds are summed as floats
    assert _choose(k.counter, dict(x, counts="float32"), lanes=2**32) == (
        SharedTable("counts", k.BINS, 4),
    )
    assert _choose(k.counted_twice, dict(x, counts="float32"), lanes=2**31) == (
        SharedTable("counts", k.BINS, 4),
    )
    # deterministic copies keep their floats
    assert _choose(k.counter, dict(x, counts="float32"), adds="deterministic") == (
        SharedTable("counts", k.BINS, 4),
    )


@pytest.mark.parametrize(
    ("kernel", "dtypes"),
    [
        (k.histogram, F32),  # value=w
        (k.two_constants, {"x": "float32", "counts": "float32"}),
        (k.counted_in_a_loop, {"x": "float32", "counts": "float32"}),
        (k.make_counter(8, 0.0), {"x": "float32", "counts": "float32"}),
    ],
)
def test_other_adds_are_not_counted(kernel, dtypes):
    (table,) = _choose(kernel, dtypes, adds="shared")
    assert table.count is None
    assert private.counted(kernel.ir, "counts", dtypes) is None


@pytest.mark.parametrize("checks", [True, False])
@pytest.mark.parametrize("narrow", [True, False])
def test_counted_kernels_count_and_flush_count_times_the_constant(checks, narrow):
    for kernel, table in [(k.counter, "float32"), (k.counted_twice, "float64")]:
        dtypes = {"x": "float32", "counts": table}
        shared = _choose(kernel, dtypes)
        source = cuda.emit(kernel.ir, dtypes, checks=checks, narrow=narrow, shared=shared)
        text = source.source
        assert "unsigned int* const s_counts" in text
        assert "atomicAdd(&s_counts[" in text and "1u);" in text
        ctype = "float" if table == "float32" else "double"
        assert f"({ctype})((double)count * {shared[0].count!r})" in text
        assert compile_cuda(text, name=source.name)


def test_a_counted_flush_multiplies_by_the_constant_as_the_kernel_computes_it():
    """In float32 the constant 0.1 is 0.1f, as each add would have added it."""
    kernel = k.make_counter(16, 0.1)
    for dtype, ctype, value in [
        ("float32", "float", "0.10000000149011612"),
        ("float64", "double", "0.1"),
    ]:
        dtypes = {"x": dtype, "counts": dtype}
        (table,) = _choose(kernel, dtypes)
        assert table.count == 0.1
        source = cuda.emit(kernel.ir, dtypes, shared=(table,)).source
        assert f"({ctype})((double)count * {value})" in source


@pytest.mark.parametrize("adds", ["auto", "global", "deterministic"])
def test_a_privatised_histogram_loads_several_lanes_at_once(adds):
    """Adds into the block's copy keep no lane order: each thread runs groups of 4 lanes
    and loads their x as one vector (not with global or deterministic adds)."""
    dtypes = {"x": "float32", "counts": "float32"}
    shared = _choose(k.counter, dtypes, adds=adds)
    source = cuda.emit(k.counter.ir, dtypes, shared=shared, deterministic=adds == "deterministic")
    assert (source.width == 4) == (adds == "auto")
    assert ("hawk_pack<float, 4> i_x" in source.source) == (adds == "auto")
    assert compile_cuda(source.source, name=source.name)


def test_a_kernel_that_does_not_privatise_is_emitted_as_before():
    plain = cuda.emit(k.histogram.ir, F32)
    assert plain.shared == () and "__shared__" not in plain.source
    assert cuda.emit(k.histogram.ir, F32, deterministic=True).source == plain.source


def test_emit_refuses_a_table_that_cannot_be_privatised():
    with pytest.raises(hawk.HawkError, match="cannot privatise table 'counts'.*float16"):
        cuda.emit(
            k.histogram.ir, dict(F32, counts="float16"), shared=(SharedTable("counts", 1024, 2),)
        )
    with pytest.raises(hawk.HawkError, match="cannot privatise table 't'.*no add at a lane"):
        cuda.emit(k.uniform.ir, {"w": "float32", "t": "float32"}, shared=(SharedTable("t", 4, 4),))


def test_the_plan_option_is_a_checked_vocabulary_kept_by_copies():
    assert policy.TABLE_ADDS == ("auto", "shared", "global", "deterministic")
    assert eagle.plan.auto(k.at_index).policy.adds == "auto"
    plan = eagle.plan.auto(k.at_index, adds="deterministic")
    assert "adds='deterministic'" in repr(plan)
    assert pickle.loads(pickle.dumps(plan)).policy.adds == "deterministic"
    adjoint = hawk.diff.vjp(k.at_index, wrt=("w",))
    assert eagle.diff.reverse(plan)._loop_plan(adjoint).policy.adds == "deterministic"
    with pytest.raises(ValueError, match="adds must be 'auto', 'shared', 'global' or 'determ"):
        eagle.plan.auto(k.at_index, adds="private")


def test_the_host_runs_every_choice_alike(rng):
    x = rng.random(10_000).astype(np.float32)
    w = rng.standard_normal(10_000).astype(np.float32)
    results = []
    for adds in policy.TABLE_ADDS:
        counts = np.zeros(k.BINS, np.float32)
        eagle.plan.auto(k.histogram, adds=adds).run(x=x, w=w, counts=counts)
        results.append(counts)
    for counts in results[1:]:
        np.testing.assert_array_equal(counts, results[0])
