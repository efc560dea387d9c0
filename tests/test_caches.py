"""eagle's in-process caches: the one keyed cache type, and eagle.clear_caches, which drops
what nothing live uses (a bound plan, a graph) and gives back the device resources of
loaded kernels and error records nothing holds any more (the driver faked here)."""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from typing import Any

import numpy as np
import pytest

import eagle
import eagle.diff
import eagle.plan
import eagle.plan._bound
from eagle import _cache, arrays
from eagle.cuda import _records, _release, module
from eagle.plan._backends import backend_named
from tests._hawk_kernels import saxpy
from tests._route_kernels import B, R, U, contract
from tests._util import fake_calls, forget_fake_leftovers


@pytest.fixture(autouse=True)
def _no_leftovers() -> None:
    """Each test starts with nothing other tests' fakes left for clear_caches."""
    forget_fake_leftovers()


# -- the keyed cache ------------------------------------------------------------------------


def test_a_keyed_cache_drops_the_least_recently_used_first_and_counts() -> None:
    cache: _cache.KeyedCache[str, int] = _cache.KeyedCache("test", 2)
    cache["a"], cache["b"] = 1, 2
    assert cache.get("a") == 1  # a is now the most recent
    cache["c"] = 3  # drops b, the least recent
    assert "b" not in cache and cache.get("b") is None and cache.get("b", -1) == -1
    assert cache.values() == [1, 3] and len(cache) == 2
    assert cache.last == ("c", 3)
    assert cache.get("a") == 1 and cache.last == ("a", 1)
    stats = cache.stats()
    assert (stats.name, stats.entries, stats.size) == ("test", 2, 2)
    assert (stats.hits, stats.misses, stats.evictions) == (2, 2, 1)
    cache.clear()
    assert len(cache) == 0 and cache.last is None and cache.stats().hits == 2  # counts stay


def test_a_keyed_cache_refuses_a_size_below_one() -> None:
    with pytest.raises(ValueError, match="cache 'x': size must be at least 1, not 0"):
        _cache.KeyedCache("x", 0)


def test_every_live_cache_reports_its_stats_and_goes_with_its_owner() -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = np.ones(5, np.float32), np.ones(5, np.float32)
    for _ in range(3):
        plan.run(a=2.0, x=x, y=y)
    assert plan._bindings.stats()[2:] == (4, 2, 1, 0)  # size 4: two hits, one miss
    names = {stats.name for stats in _cache.stats()}
    assert {"plan bindings", "numpy programs", "loaded kernels", "error records"} <= names
    own = weakref.ref(plan._bindings)
    assert own() in _cache._caches
    del plan
    gc.collect()
    assert own() is None  # the plan's own cache went with it


def test_the_planes_a_run_kept_are_freed_with_the_plan_without_the_cycle_collector() -> None:
    # a run's kept binding names no plan that keeps it, so dropping the plan frees its
    # planes at once, as numpy and torch users expect (no reference cycle to collect)
    x, y = np.ones(5), np.zeros(5)
    alive = weakref.ref(x)
    gc.disable()
    try:
        plan = eagle.plan.auto(saxpy)
        plan.run(a=2.0, x=x, y=y)
        adjoint = eagle.diff.reverse(plan)
        adjoint.run(a=2.0, x=x, y_bar=np.ones(5), x_bar=np.zeros(5), a_bar=np.zeros(1))
        del plan, adjoint, x, y
        assert alive() is None
    finally:
        gc.enable()


def test_a_kept_plan_and_adjoint_keep_no_run_s_arrays_alive() -> None:
    """A plan made once, outside a loop, and run over fresh arrays each pass keeps its
    bindings over the planes' addresses: every pass's arrays go when the pass drops them
    (the plan, its adjoint and the kernel's shared bindings still alive)."""
    plan = eagle.plan.auto(saxpy)
    adjoint = eagle.diff.reverse(plan)
    alive = []
    for step in range(6):
        x, y = np.full(5, float(step)), np.ones(5)
        y_bar, x_bar, a_bar = np.ones(5), np.zeros(5), np.zeros(1)
        plan.run(a=2.0, x=x, y=y)
        adjoint.run(a=2.0, x=x, y_bar=y_bar, x_bar=x_bar, a_bar=a_bar)
        np.testing.assert_array_equal(y, 1.0 + 2.0 * step)
        np.testing.assert_array_equal(a_bar, [5.0 * step])
        alive += [weakref.ref(array) for array in (x, y, y_bar, x_bar, a_bar)]
        del x, y, y_bar, x_bar, a_bar
    gc.collect()
    assert [ref for ref in alive if ref() is not None] == []
    assert len(plan._bindings) > 0  # (they were kept: over addresses)


def test_host_runs_while_a_capture_is_open_elsewhere_reuse_their_bindings(monkeypatch) -> None:
    """A capture open on a device (another thread's, say) changes nothing for host runs:
    they are never recorded, so they keep binding over addresses and keep no arrays."""
    monkeypatch.setattr(eagle.plan._autoplan, "any_capture_active", lambda: True)
    plan = eagle.plan.auto(saxpy)
    x, y = np.ones(5), np.zeros(5)
    plan.run(a=2.0, x=x, y=y)
    bound = plan._bindings.last[1]
    plan.run(a=2.0, x=x, y=y)
    assert plan._bindings.last[1] is bound and bound._detached
    alive = weakref.ref(x)
    del x, y
    gc.collect()
    assert alive() is None


def test_array_classes_made_on_the_fly_are_not_all_kept() -> None:
    """eagle remembers how to take an array type, for the first TYPES_KEPT types it sees:
    a library making an ndarray subclass per call neither grows the tables without end
    nor keeps every class alive."""
    from eagle.arrays import _holder
    from eagle.plan import _planes

    plan = eagle.plan.auto(saxpy)
    alive = []
    for step in range(3 * _holder.TYPES_KEPT):
        made = type(f"Made{step}", (np.ndarray,), {})
        x, y = np.ones(3).view(made), np.zeros(3).view(made)
        plan.run(a=2.0, x=x, y=y)
        assert y.tolist() == [2.0, 2.0, 2.0]
        alive.append(weakref.ref(made))
        del made, x, y
    gc.collect()
    assert len(_holder._kinds) <= _holder.TYPES_KEPT and len(_planes._KEYS) <= _holder.TYPES_KEPT
    assert sum(ref() is not None for ref in alive) <= _holder.TYPES_KEPT


def test_clear_caches_and_stats_while_other_threads_make_caches() -> None:
    stop = threading.Event()

    def make() -> None:
        while not stop.is_set():
            _cache.KeyedCache("made in a thread", 1)

    threads = [threading.Thread(target=make) for _ in range(2)]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the race showed within 300 calls at this interval
    try:
        for thread in threads:
            thread.start()
        for _ in range(300):
            eagle.clear_caches()
            _cache.stats()
    finally:
        stop.set()
        sys.setswitchinterval(switch)
        for thread in threads:
            thread.join()


# -- what clear_caches drops, and what it keeps ---------------------------------------------


def test_clear_caches_drops_kept_bindings_and_programs_but_a_held_binding_still_runs() -> None:
    plan = eagle.plan.auto(saxpy)
    x, y = np.ones(6, np.float32), np.zeros(6, np.float32)
    plan.run(a=1.0, x=x, y=y)
    bound = plan.bind(a=2.0, x=x, y=y)
    programs = backend_named("numpy")._programs[saxpy]
    # (saxpy is shared: earlier tests may have left programs of other dtypes)
    assert len(plan._bindings) == 1 and len(programs) >= 1
    eagle.clear_caches()
    assert len(plan._bindings) == 0 and len(programs) == 0
    bound.launch()  # a binding you hold keeps its program
    np.testing.assert_array_equal(y, np.full(6, 3.0, np.float32))
    plan.run(a=1.0, x=x, y=y)  # binds again
    np.testing.assert_array_equal(y, np.full(6, 4.0, np.float32))
    assert len(plan._bindings) == 1 and len(programs) == 1


def test_clear_caches_drops_lowered_contractions_and_checked_host_products() -> None:
    from eagle.gemm import matmul
    from eagle.plan import _route

    rng = np.random.default_rng(3)
    plan = eagle.plan.auto(contract, contraction="gemm", host_route="gemm")
    w, f, y = rng.standard_normal((R, U)), rng.standard_normal((R, B)), np.zeros(B * U)
    plan.run(w=w, f=f, y=y)
    eagle.gemm.matmul_step("c", a="a", b="b", out="c").run(
        {"a": np.ones((2, 3)), "b": np.ones((3, 4)), "c": np.zeros((2, 4))}, "host"
    )
    assert len(_route._lowerings) and len(matmul._checked_host)
    eagle.clear_caches()
    assert not len(_route._lowerings) and not len(matmul._checked_host)
    plan.run(w=w, f=f, y=y)
    np.testing.assert_allclose(y, (f.T @ w).reshape(-1))


# -- loaded kernels and error records nothing holds -----------------------------------------


class _FakeSlab:
    """A slab of records in host memory (no device)."""

    def __init__(self, device: int) -> None:
        self.device, self.device_ptr = device, 0x9000_0000
        self.words = np.zeros((_records._PER_SLAB, _records.WORDS), np.uint64)
        self.words[:, _records._EPOCH] = 1
        self.translates: list[Any] = []
        self.free: list[int] = []


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The driver calls the release makes, in order (none reach a device)."""
    calls: list[tuple] = []
    monkeypatch.setattr(_records, "_Slab", _FakeSlab)
    monkeypatch.setattr(_records, "_slabs", {})
    monkeypatch.setattr(_records, "_unused", [])
    monkeypatch.setattr(module, "_unused_libraries", [])
    monkeypatch.setattr(_release, "ready_devices", lambda: (0, 1))
    fake_calls(monkeypatch, lambda *args: calls.append(args) or 0, _release)
    fake_calls(monkeypatch, lambda *args: calls.append(args), module, binding="cudadrv")
    return calls


def _failed(words: Any) -> Exception | None:
    return IndexError(f"lane {words[2]}")


def _fail(record: _records.ErrorRecord, lane: int) -> None:
    """Write a failure into ``record`` as a kernel would."""
    record._words[2] = lane
    record._words[0] = 1


def test_release_makes_no_driver_call_when_nothing_is_unused(driver: list[tuple]) -> None:
    _release.release_unused()
    assert driver == []


def test_a_kernel_nothing_holds_is_unloaded_after_the_devices_are_idle(
    driver: list[tuple],
) -> None:
    library = object()
    kept = module.Kernel("k", library, 0, 0)
    dropped = module.Kernel("k", library, 0, 0)
    del dropped
    _release.release_unused()
    assert driver == [
        ("cudaGetDevice",),
        ("cudaSetDevice", 0),
        ("cudaDeviceSynchronize",),
        ("cudaSetDevice", 1),
        ("cudaDeviceSynchronize",),
        ("cudaSetDevice", 0),
        ("cuLibraryUnload", library),
    ]
    assert not module._has_unused() and kept.name == "k"  # the held kernel stays loaded


def test_clear_caches_keeps_a_kernel_a_bound_plan_holds(
    driver: list[tuple], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loaded kernel and the record live in the cache and in the plan's binding: only
    once both are gone are they given back."""
    monkeypatch.setattr(module, "device_arch", lambda device: "sm_90")
    monkeypatch.setattr(module, "compile_cuda", lambda source, name, arch: b"cubin")
    monkeypatch.setattr(module, "ensure_device", lambda device: None)
    monkeypatch.setattr(module, "driver", lambda: _FakeDriver())
    monkeypatch.setattr(module, "runtime", lambda: _FakeDriver())

    def load(name: str, *args: Any) -> int:  # the driver's library calls: a handle, 7
        driver.append((name,))
        return 7

    fake_calls(monkeypatch, load, module, binding="cudadrv")
    monkeypatch.setattr(eagle.plan._bound, "launch_stream", lambda planes, device: 0x11)
    plan = eagle.plan.auto(saxpy)
    x, y = _device(10, 0x10000), _device(10, 0x20000)
    bound = plan.bind(a=2.0, x=x, y=y)
    loads = [call for call in driver if call == ("cuLibraryLoadData",)]
    eagle.clear_caches()  # the plan's binding still holds the kernel and its record
    assert not module._has_unused() and not _records.has_unused()
    assert ("cuLibraryUnload",) not in driver
    del bound
    gc.collect()
    eagle.clear_caches()
    assert driver.count(("cuLibraryUnload",)) == 1 and len(loads) == 1
    assert not module._has_unused() and not _records.has_unused()
    plan.bind(a=2.0, x=x, y=y)  # loads again, its record in the freed slot
    assert driver.count(("cuLibraryLoadData",)) == 2
    (slab,) = _records._slabs[0]
    assert slab.free == [] and len(slab.translates) == 1


class _FakeDriver:
    """The few driver and runtime attributes a Kernel reads when made."""

    def CUfunction(self, handle: int) -> int:
        return handle

    cuLaunchKernel = cudaSetDevice = staticmethod(lambda *args: (0,))


def _device(n: int, ptr: int) -> arrays.Array:
    return arrays.Array(
        ptr=ptr, shape=(n,), dtype=np.dtype("float32"), strides=(4,), device_index=0
    )


def test_the_slot_of_a_record_nothing_holds_is_freed_and_taken_again(
    driver: list[tuple],
) -> None:
    first = _records.record_for("a", 0, _failed)
    second = _records.record_for("b", 0, _failed)
    assert _records.record_for("a", 0, _failed) is first  # one record per kernel and device
    slot = first._slot
    eagle.clear_caches()  # the cache lets go; the records live while held here
    assert not _records.has_unused()
    del first
    gc.collect()
    assert _records.has_unused()
    eagle.clear_caches()
    again = _records.record_for("c", 0, _failed)
    assert again._slot == slot and second._slot != slot
    assert again.ptr == 0x9000_0000 + slot * _records.WORDS * 8


def test_a_failure_left_in_a_record_nothing_holds_is_raised_when_it_is_freed(
    driver: list[tuple],
) -> None:
    record = _records.record_for("a", 0, _failed)
    _fail(record, 5)
    eagle.clear_caches()
    del record
    gc.collect()
    with pytest.raises(IndexError, match="lane 5"):
        eagle.clear_caches()
    assert not _records.has_unused()
    eagle.clear_caches()  # raised once, then cleared
    fresh = _records.record_for("b", 0, _failed)
    fresh.check()  # the freed slot holds no failure


def test_a_record_only_a_reference_cycle_holds_is_freed_by_clear_caches(
    driver: list[tuple],
) -> None:
    """What a cache entry was the last way into is collected, cycles included, so its
    failure is raised by this call, not by a later one."""
    record = _records.record_for("a", 0, _failed)
    _fail(record, 4)
    cycle: list[Any] = [record]
    cycle.append(cycle)
    del record, cycle
    with pytest.raises(IndexError, match="lane 4"):
        eagle.clear_caches()
    assert not _records.has_unused()


def test_raise_recorded_reads_the_records_in_use(driver: list[tuple]) -> None:
    record = _records.record_for("a", 0, _failed)
    _records.raise_recorded()
    _fail(record, 3)
    with pytest.raises(IndexError, match="lane 3"):
        _records.raise_recorded()
    record.check()  # cleared by the raise


def test_clear_caches_refuses_to_release_during_a_capture(
    driver: list[tuple], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_release, "any_capture_active", lambda: True)
    module.Kernel("k", object(), 0, 0)  # dropped at once: its library waits
    with pytest.raises(RuntimeError, match="not legal during a stream capture"):
        eagle.clear_caches()
    assert module._has_unused() and driver == []
    monkeypatch.setattr(_release, "any_capture_active", lambda: False)
    eagle.clear_caches()
    assert not module._has_unused()
