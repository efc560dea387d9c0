"""Privatised table adds on a device (hawk.emit.private): histograms with random bins
and with every lane in one bin, counts beyond 2**16, tables at the size bound and just
above, lane counts that are not a multiple of the block, bad bins refused with nothing
written outside the table, deterministic sums that repeat bit for bit, and captured
graphs replayed and rebound. Each compares the device with the host's numpy program or
a float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.plan
import hawk
from eagle import cuda
from eagle.cuda import _graph_nodes, module
from eagle.plan import _cuda_backend
from hawk.emit import private
from tests import _private_kernels as k
from tests._device_checks import GUARD, dev, guarded
from tests._util import rel_error

pytestmark = pytest.mark.gpu

N = 3_000_017  # lanes: not a multiple of the block, and enough for "auto" to privatise
PRIVATISED = ["auto", "shared", "deterministic"]


@pytest.fixture
def chosen(monkeypatch):
    """The tables each bind privatised, in order."""
    found: list[tuple[private.SharedTable, ...]] = []
    choose = private.choose

    def spy(*args, **kwargs):
        found.append(choose(*args, **kwargs))
        return found[-1]

    monkeypatch.setattr(_cuda_backend.private, "choose", spy)
    return found


def _histogram(kernel, x, w, dtype, adds):
    counts = dev(np.zeros(kernel.ir.planes[2].shape), dtype)  # added into: starts at 0
    eagle.plan.auto(kernel, adds=adds).run(x=dev(x, dtype), w=dev(w, dtype), counts=counts)
    return counts.numpy()


def _table(dtype: type, adds: str) -> tuple[hawk.Kernel, int]:
    """The histogram kernel and its bins: 512 for float64 deterministic adds, whose 8
    copies of 1,024 float64 bins would not fit a block's 32 KiB."""
    if adds == "deterministic" and dtype == np.float64:
        return k.make_histogram(512), 512
    return k.histogram, k.BINS


def _reference(x: np.ndarray, w: np.ndarray, bins: int, dtype: type) -> np.ndarray:
    b = np.clip(np.trunc(x.astype(dtype) * dtype(bins)), 0, bins - 1).astype(np.int64)
    return np.bincount(b, weights=w.astype(dtype).astype(np.float64), minlength=bins)


@pytest.mark.parametrize("adds", [*PRIVATISED, "global"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_bins_count_exactly(adds, dtype, rng, chosen):
    x = rng.random(N)
    kernel, bins = _table(dtype, adds)
    counts = _histogram(kernel, x, np.ones(N), dtype, adds)
    assert (len(chosen[0]) == 1) == (adds != "global")
    np.testing.assert_array_equal(counts, _reference(x, np.ones(N), bins, dtype))


@pytest.mark.parametrize("adds", PRIVATISED)
@pytest.mark.parametrize("n", [300_001, 77])
def test_every_lane_in_one_bin(adds, n):
    x = np.full(n, 0.5)
    counts = _histogram(k.histogram, x, np.ones(n), np.float32, adds)
    expected = np.zeros(k.BINS)
    expected[k.BINS // 2] = n  # 300,001 > 2**16 and exact below 2**24
    np.testing.assert_array_equal(counts, expected)


def _counted(kernel, x, dtype, adds, bins=k.BINS):
    counts = dev(np.zeros(bins), dtype)
    eagle.plan.auto(kernel, adds=adds).run(x=dev(x, np.float32), counts=counts)
    return counts.numpy()


def _bins(x: np.ndarray, bins: int = k.BINS) -> np.ndarray:
    x32 = x.astype(np.float32)
    return np.clip(np.trunc(x32 * np.float32(bins)), 0, bins - 1).astype(np.int64)


@pytest.mark.parametrize("adds", ["auto", "shared", "deterministic", "global"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("value", [1.0, 0.25, 3.0])
def test_counted_adds_equal_numpy(adds, dtype, value, rng, chosen):
    x = rng.random(N)
    _, bins = _table(dtype, adds)  # deterministic float64 copies: 512 bins
    counts = _counted(k.make_counter(bins, value), x, dtype, adds, bins)
    (table,) = chosen[-1] or (None,)
    assert (table is not None and table.count == value) == (adds in ("auto", "shared"))
    expected = np.bincount(_bins(x, bins), minlength=bins) * value  # exact: whole quarters
    np.testing.assert_array_equal(counts, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_many_passes_a_thread_count_exactly(dtype, rng, chosen):
    """10**7 lanes: each thread of the bounded grid runs many passes of the vectorised
    loop, then the lanes left over; weighted (float sums of ones) and counted tables
    alike."""
    n = 10_000_019
    x = rng.random(n)
    summed = _histogram(k.histogram, x, np.ones(n), dtype, "auto")
    counted = _counted(k.counter, x, dtype, "auto")
    assert [table.count for (table,) in chosen] == [None, 1.0]
    np.testing.assert_array_equal(summed, _reference(x, np.ones(n), k.BINS, dtype))
    np.testing.assert_array_equal(counted, np.bincount(_bins(x), minlength=k.BINS))


@pytest.mark.parametrize("n", [300_001, 20_000_003])
def test_counted_adds_of_every_lane_in_one_bin(n, chosen):
    x = np.full(n, 0.5)
    counts = _counted(k.counter, x, np.float32, "shared")
    assert chosen[-1][0].count == 1.0
    expected = np.zeros(k.BINS)
    expected[k.BINS // 2] = n  # over 2**24 for the second: each block's count is exact
    assert rel_error(counts, expected) < 1e-7
    if n < 2**24:
        np.testing.assert_array_equal(counts, expected)


def test_two_counted_adds_a_lane_one_under_an_if(rng, chosen):
    x = rng.random(N)
    counts = _counted(k.counted_twice, x, np.float64, "auto")
    assert chosen[-1][0].count == 0.5
    b = _bins(x)
    expected = 0.5 * np.bincount(b, minlength=k.BINS)
    expected += 0.5 * np.bincount(1023 - b[x.astype(np.float32) > 0.5], minlength=k.BINS)
    np.testing.assert_array_equal(counts, expected)


@pytest.mark.parametrize("adds", [*PRIVATISED, "global"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weighted_sums_agree_with_a_float64_reference(adds, dtype, rng):
    x, w = rng.random(N), rng.standard_normal(N)
    kernel, bins = _table(dtype, adds)
    counts = _histogram(kernel, x, w, dtype, adds)
    ref = _reference(x, w, bins, dtype)
    # each bin sums ~N/BINS values: float32 rounding grows with their count
    tolerance = 1e-5 if dtype == np.float32 else 1e-13
    assert rel_error(counts, ref) < tolerance


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_deterministic_sums_repeat_bit_for_bit(dtype, rng):
    x, w = rng.random(N), rng.standard_normal(N)
    kernel, bins = _table(dtype, "deterministic")
    first = _histogram(kernel, x, w, dtype, "deterministic")
    for _ in range(3):
        again = _histogram(kernel, x, w, dtype, "deterministic")
        assert again.tobytes() == first.tobytes()
    assert rel_error(first, _reference(x, w, bins, dtype)) < 1e-5


@pytest.mark.parametrize("adds", ["shared", "deterministic"])
def test_tables_at_the_bound_and_just_above(adds, rng, chosen):
    copies = _cuda_backend.BLOCK_SIZE // 32 if adds == "deterministic" else 1
    cells = private.SHARED_BYTES // 4 // copies
    at, above = k.make_histogram(cells), k.make_histogram(cells + 1)
    x = rng.random(N)
    counts = _histogram(at, x, np.ones(N), np.float32, adds)
    assert chosen[-1] == (private.SharedTable("counts", cells, 4),)
    np.testing.assert_array_equal(counts, _reference(x, np.ones(N), cells, np.float32))
    with pytest.raises(hawk.HawkError, match="cannot add into table 'counts' in shared memory"):
        _histogram(above, x, np.ones(N), np.float32, adds)
    counts = _histogram(above, x, np.ones(N), np.float32, "auto")
    np.testing.assert_array_equal(counts, _reference(x, np.ones(N), cells + 1, np.float32))


@pytest.mark.parametrize("adds", PRIVATISED)
def test_a_flat_table_with_bad_indices_raises_and_writes_nothing_outside(adds, rng, chosen):
    size, n = 500, 2_000_003  # 8 float64 copies of 500 cells fit a deterministic block
    i = rng.integers(0, size, n).astype(np.float64)
    w = rng.standard_normal(n)
    buffer, t, initial = guarded(size, np.float64, 0.0)
    plan = eagle.plan.auto(k.at_index, adds=adds)
    plan.run(i=dev(i, np.float64), w=dev(w, np.float64), t=t)
    assert chosen[-1] == (private.SharedTable("t", None, 8),)
    expected = np.bincount(i.astype(np.int64), weights=w, minlength=size)
    whole = buffer.numpy()
    assert rel_error(whole[GUARD : GUARD + size], expected) < 1e-12
    np.testing.assert_array_equal(whole[:GUARD], initial[:GUARD])
    np.testing.assert_array_equal(whole[GUARD + size :], initial[GUARD + size :])
    bad = i.copy()
    bad[[5, n - 1]] = [size, -1.0]  # past the end, before the start
    buffer2, t2, initial2 = guarded(size, np.float64, 0.0)
    plan.run(i=dev(bad, np.float64), w=dev(w, np.float64), t=t2)
    with pytest.raises(IndexError, match="table 't'"):
        t2.numpy()
    whole = buffer2.numpy()
    np.testing.assert_array_equal(whole[:GUARD], initial2[:GUARD])
    np.testing.assert_array_equal(whole[GUARD + size :], initial2[GUARD + size :])
    good = np.ones(n, bool)
    good[[5, n - 1]] = False
    expected = np.bincount(i[good].astype(np.int64), weights=w[good], minlength=size)
    assert rel_error(whole[GUARD : GUARD + size], expected) < 1e-12  # bad adds dropped


@pytest.mark.parametrize("adds", PRIVATISED)
def test_two_tables_of_two_dtypes(adds, rng, chosen):
    n = 2_000_001
    i = rng.integers(0, 97, n).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    a = dev(np.zeros(97), np.float32)
    b = dev(np.zeros((3, 5)), np.float64)
    eagle.plan.auto(k.two_tables, adds=adds).run(
        i=dev(i, np.float32), w=dev(w, np.float32), a=a, b=b
    )
    assert [t.name for t in chosen[-1]] == ["a", "b"]
    cells, w64 = i.astype(np.int64), w.astype(np.float64)
    ref_a = np.bincount(cells, weights=w64, minlength=97)
    ref_b = np.zeros((3, 5))
    np.add.at(ref_b, (cells % 3, cells % 5), 2.0 * w64)
    assert rel_error(a.numpy(), ref_a) < 5e-5  # float32 sums of ~20,000 values a cell
    assert rel_error(b.numpy(), ref_b) < 1e-12


@pytest.mark.parametrize("adds", ["shared", "deterministic"])
def test_a_captured_graph_replays_and_rebinds(adds, rng):
    stream = cuda.Stream(non_blocking=True)
    plan = eagle.plan.auto(k.histogram, adds=adds)
    sets = []
    for _ in range(2):
        x, w = rng.random(N), rng.standard_normal(N)
        planes = {"x": dev(x, np.float32), "w": dev(w, np.float32)}
        planes["counts"] = dev(np.zeros(k.BINS), np.float32)
        sets.append((planes, _reference(x, w, k.BINS, np.float32)))
    with stream:
        bound = plan.bind(**sets[0][0])
    launcher = bound.capture(stream)
    launcher.launch()
    launcher.launch()
    launcher.synchronize()
    assert rel_error(sets[0][0]["counts"].numpy(), 2 * sets[0][1]) < 1e-5
    launcher.rebind(**sets[1][0])
    launcher.launch()
    launcher.synchronize()
    assert rel_error(sets[1][0]["counts"].numpy(), sets[1][1]) < 1e-5
    if adds == "deterministic":  # a replay sums in the launch's order
        once = sets[1][0]["counts"].numpy()
        sets[1][0]["counts"].fill(0.0, stream)
        launcher.launch()
        launcher.synchronize()
        assert sets[1][0]["counts"].numpy().tobytes() == once.tobytes()


@pytest.mark.parametrize("adds", ["auto", "deterministic", "global"])
def test_the_captured_launch_carries_the_bounded_grid_and_the_copies(adds, rng):
    stream = cuda.Stream(non_blocking=True)
    planes = {"x": dev(rng.random(N), np.float32), "w": dev(np.ones(N), np.float32)}
    planes["counts"] = dev(np.zeros(k.BINS), np.float32)
    with stream:
        bound = eagle.plan.auto(k.histogram, adds=adds).bind(**planes)
    with cuda.StreamCapturer(stream) as cap:
        bound.launch(stream)
    graph = cuda.Graph.from_captured(cap.captured)
    (node,) = _graph_nodes.nodes(graph._graph)
    params = _graph_nodes.kernel_params(node)
    sms = module.multiprocessors(0)
    if adds == "global":
        assert params.sharedMemBytes == 0
        assert params.gridDimX == _cuda_backend.grid(N)
    elif adds == "auto":
        assert params.sharedMemBytes == k.BINS * 4
        assert sms <= params.gridDimX <= sms * _cuda_backend.PRIVATE_BLOCKS_PER_SM
    else:
        assert params.sharedMemBytes == k.BINS * 4 * _cuda_backend.BLOCK_SIZE // 32
        assert params.gridDimX == private.DETERMINISTIC_BLOCKS
    graph.launcher().stream(stream).launch()
    stream.synchronize()
    np.testing.assert_array_equal(
        planes["counts"].numpy(), _reference(planes["x"].numpy(), np.ones(N), k.BINS, np.float32)
    )
