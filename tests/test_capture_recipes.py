"""Captures of a stream eagle never prepared (torch's capture stream, a CUDA-graph tree's,
CuPy's), with the driver and cuBLAS replaced: a routed plan records its products through a
handle of the device that warmed them, lent to the capture with a workspace the capture
allocates and frees, under the handle's lock; and a capture nothing warmed is refused
before anything is enqueued."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest

import eagle.plan
from eagle.cuda import memory
from eagle.gemm import (
    CublasCaptureHandle,
    GemmCaptureUnavailable,
    handles,
    lending,
    sgemm_params_for_arrays,
)
from eagle.gemm import capture as gemm_capture
from eagle.gemm.capture import WORKSPACE_BYTES
from eagle.gemm.lending import record_lent
from hawk.emit import policy
from tests import _route_kernels as k
from tests._route_kernels import B, R, U
from tests._util import FakeCalls, rel_error
from tests.test_gemm_capture import FakeDevice
from tests.test_route import _host_backed, _routed_fake_device

CAPTURED = 0xCA97  # a stream being captured that no handle was made for


class _Pool:
    """eagle's pool for the fake device: a handle's workspace (as FakeDevice's), and scoped
    memory whose allocation and free go into the fake cuBLAS's log, so the order of the
    pool's and cuBLAS's calls shows."""

    def __init__(self, device: FakeDevice) -> None:
        self.device = device
        self.scratch: list[np.ndarray] = []

    def allocate(self, nbytes, stream):
        return self.device._workspace(nbytes)

    @contextlib.contextmanager
    def scoped(self, nbytes, stream):
        values = np.empty(64, np.uint8)
        self.scratch.append(values)
        log = self.device.cublas.log
        log.append(("allocate", nbytes, stream))
        try:
            yield values.ctypes.data
        finally:
            log.append(("free", values.ctypes.data, stream))


@pytest.fixture
def device(monkeypatch):
    device = FakeDevice(monkeypatch)
    pool = _Pool(device)
    monkeypatch.setattr(gemm_capture, "default_pool", lambda index: pool)
    monkeypatch.setattr(lending, "default_pool", lambda index: pool)
    monkeypatch.setattr(lending, "record_use", lambda *objs: device.used.append(objs))
    device.pool = pool
    return device


def _product(device, rng, handle):
    a = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.full((6, 5), np.nan, np.float32))}  # fmt: skip
    params = sgemm_params_for_arrays(*operands.values())
    return params, operands, a.astype(np.float64) @ b


def test_a_lent_handle_records_on_the_captured_stream_with_a_scoped_workspace(device, rng):
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    own = device.allocations[0]().ptr
    params, operands, expected = _product(device, rng, handle)
    handle.warm(params, operands, keep_out=True)
    bound = handle.bind(params, operands)
    device.cublas.log.clear()
    device.used.clear()
    device.capturing = True

    record_lent(handle, CAPTURED, [bound])

    (scratch,) = device.pool.scratch
    assert device.cublas.log == [
        ("allocate", WORKSPACE_BYTES, CAPTURED),
        ("set_stream", CAPTURED),
        ("set_workspace", scratch.ctypes.data, WORKSPACE_BYTES),
        ("gemm", "float32", 0, 0, 5, 6, 4),
        ("set_stream", FakeDevice.STREAM),  # the handle is its own stream's again
        ("set_workspace", own, WORKSPACE_BYTES),
        ("free", scratch.ctypes.data, CAPTURED),  # after the products, on the same stream
    ]
    assert rel_error(operands["out"].values, expected) < 1e-6
    first, second = (operands[name] for name in params.operands)
    assert device.used == [(CAPTURED, first, second, operands["out"])]  # the graph keeps them


def test_a_lent_handle_is_restored_and_its_workspace_freed_when_a_product_fails(device, rng):
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params, operands, _ = _product(device, rng, handle)
    handle.warm(params, operands, keep_out=True)

    def refuse(*args):
        raise RuntimeError("cuBLAS refused")

    device.cublas.sgemm = refuse
    bound = handle.bind(params, operands)  # (a bound product keeps the function it was bound to)
    device.cublas.log.clear()
    with pytest.raises(RuntimeError, match="cuBLAS refused"):
        record_lent(handle, CAPTURED, [bound])
    assert [entry[0] for entry in device.cublas.log[-3:]] == ["set_stream", "set_workspace", "free"]
    assert device.cublas.log[-3] == ("set_stream", FakeDevice.STREAM)


def test_lending_refuses_before_enqueuing_anything(device, rng, monkeypatch):
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    other = CublasCaptureHandle(FakeDevice.STREAM)
    params, operands, _ = _product(device, rng, handle)
    cold = handle.bind(params, operands)
    device.cublas.log.clear()
    with pytest.raises(GemmCaptureUnavailable, match="this product was never warmed"):
        record_lent(handle, CAPTURED, [cold])
    handle.warm(params, operands, keep_out=True)
    device.cublas.log.clear()
    with pytest.raises(GemmCaptureUnavailable, match="was bound on another handle"):
        record_lent(other, CAPTURED, [handle.bind(params, operands)])
    monkeypatch.setattr(lending, "in_loop_body", lambda stream_ptr: True)
    with pytest.raises(GemmCaptureUnavailable, match="into the body of a device-side loop"):
        record_lent(handle, CAPTURED, [handle.bind(params, operands)])
    bound = handle.bind(params, operands)
    handle.destroy()
    device.cublas.log.clear()
    with pytest.raises(GemmCaptureUnavailable, match="was destroyed"):
        record_lent(handle, CAPTURED, [bound])
    assert device.cublas.log == [] and device.pool.scratch == []


def test_the_lent_handle_runs_no_other_threads_product_meanwhile(device, rng):
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params, operands, _ = _product(device, rng, handle)
    handle.warm(params, operands, keep_out=True)
    taken = []
    sgemm = device.cublas.sgemm

    def product(*args):
        # another thread cannot take the handle while this product records
        probe = threading.Thread(target=lambda: taken.append(handle._lock.acquire(False)))
        probe.start()
        probe.join()
        sgemm(*args)

    device.cublas.sgemm = product
    record_lent(handle, CAPTURED, [handle.bind(params, operands)])  # bound with the probe
    assert taken == [False]


def test_a_bound_product_waits_while_its_handle_is_lent(device, rng):
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params, operands, _ = _product(device, rng, handle)
    handle.warm(params, operands, keep_out=True)
    bound = handle.bind(params, operands)
    device.cublas.log.clear()
    with handle._lock:  # as record_lent holds it
        worker = threading.Thread(target=bound)
        worker.start()
        worker.join(timeout=0.2)
        assert worker.is_alive() and device.cublas.log == []
    worker.join(timeout=5)
    assert not worker.is_alive() and [e[0] for e in device.cublas.log] == ["gemm"]


def test_warmed_handle_finds_a_live_handle_of_the_device_that_warmed_every_product(device, rng):
    first = handles.stream_handle(0x100)
    second = handles.stream_handle(0x200)
    params, operands, _ = _product(device, rng, first)
    wider = device.array(np.full((6, 6), np.nan, np.float32))
    skewed = {**operands, "out": wider[:, 1:]}  # another ldc, and 4 bytes along
    skewed_params = sgemm_params_for_arrays(*skewed.values())
    assert handles.warmed_handle(0, [(params, operands)]) is None
    second.warm(params, operands, keep_out=True)
    assert handles.warmed_handle(0, [(params, operands)]) is second
    assert handles.warmed_handle(1, [(params, operands)]) is None  # another device
    assert handles.warmed_handle(0, [(params, operands), (skewed_params, skewed)]) is None
    first.warm(params, operands, keep_out=True)
    first.warm(skewed_params, skewed, keep_out=True)
    assert handles.warmed_handle(0, [(params, operands), (skewed_params, skewed)]) is first
    first.destroy()
    assert handles.warmed_handle(0, [(params, operands)]) is second


def _planes(device, rng, *, y_offset=0):
    w = rng.standard_normal((R, U)).astype(np.float32)
    f = rng.standard_normal((R, B)).astype(np.float32)
    y = np.full(B * U + 4, np.nan, np.float32)
    for values in (w, f, y):
        device.cublas.register(values)
    planes = {
        "w": _host_backed(w),
        "f": _host_backed(f),
        "y": _host_backed(y)[y_offset : y_offset + B * U],
    }
    expected = k.reference({"w": w.astype(np.float64), "f": f.astype(np.float64)})
    return planes, y[y_offset : y_offset + B * U], expected


def _routed():
    with policy.using(contraction="gemm"):
        return eagle.plan.auto(k.contract)


def test_a_capture_of_an_unprepared_stream_borrows_the_warmed_handle(monkeypatch, rng):
    device = _routed_fake_device(monkeypatch)
    pool = _Pool(device)
    monkeypatch.setattr(gemm_capture, "default_pool", lambda index: pool)
    monkeypatch.setattr(lending, "default_pool", lambda index: pool)
    planes, y, expected = _planes(device, rng)
    bound = _routed().bind(**planes)  # prepared (made, warmed) on FakeDevice.STREAM
    y[:] = np.nan
    device.cublas.log.clear()
    device.capturing = True  # every stream is being captured now

    bound.launch(CAPTURED)
    assert handles._stream_handles.keys() == {(0, FakeDevice.STREAM)}  # none made for it
    assert [entry[0] for entry in device.cublas.log] == [
        "allocate", "set_stream", "set_workspace", "gemm", "set_stream", "set_workspace", "free",
    ]  # fmt: skip
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)

    planes["y"] = _planes(device, rng)[0]["y"]  # fresh planes bound inside the capture
    device.cublas.log.clear()
    _routed().bind(**planes).launch(CAPTURED)
    assert ("set_stream", CAPTURED) in device.cublas.log


def test_a_capture_nothing_warmed_is_refused_at_bind_before_anything_is_enqueued(monkeypatch, rng):
    device = _routed_fake_device(monkeypatch)
    pool = _Pool(device)
    monkeypatch.setattr(gemm_capture, "default_pool", lambda index: pool)
    monkeypatch.setattr(lending, "default_pool", lambda index: pool)
    planes, _, _ = _planes(device, rng)
    _routed().bind(**planes)  # warms the product aligned as these planes are
    skewed, _, _ = _planes(device, rng, y_offset=1)  # y 4 bytes along: another product
    device.cublas.log.clear()
    device.capturing = True
    with pytest.raises(GemmCaptureUnavailable, match="no cuBLAS handle on cuda:0 has warmed"):
        _routed().bind(**skewed)
    assert device.cublas.log == [] and pool.scratch == []


def test_scoped_memory_is_allocated_and_freed_on_its_stream_even_when_the_block_raises(
    monkeypatch,
):
    made = []

    def fake_call(name, *args):
        made.append((name, *args))
        return 0xA110C if name == "cudaMallocFromPoolAsync" else None

    monkeypatch.setattr(memory, "cudart", FakeCalls(fake_call))
    monkeypatch.setattr(memory, "ensure_device", lambda device: None)
    pool = memory.MemoryPool.__new__(memory.MemoryPool)
    pool.device, pool._handle = 0, "pool"
    with pool.scoped(1024, CAPTURED) as ptr:
        assert ptr == 0xA110C and made == [("cudaMallocFromPoolAsync", 1024, "pool", CAPTURED)]
    assert made[-1] == ("cudaFreeAsync", 0xA110C, CAPTURED)
    made.clear()
    with pytest.raises(KeyError), pool.scoped(8, CAPTURED):
        raise KeyError("the block failed")
    assert [entry[0] for entry in made] == ["cudaMallocFromPoolAsync", "cudaFreeAsync"]
