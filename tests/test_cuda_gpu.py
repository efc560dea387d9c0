"""Device tests of eagle.arrays and eagle.cuda (run with ``nox -s gpu``)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from eagle import arrays, cuda
from eagle.cuda._runtime import cudart

pytestmark = pytest.mark.gpu

DTYPES = ["float32", "float64", "int32", "int64", "uint8", "int16", "complex64", "complex128"]

SCALE_SOURCE = r"""
extern "C" __global__ void scale_add(float* out, const float* x, float a, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + out[i];
}
"""


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    kind = np.dtype(dtype)
    if kind.kind == "f":
        return rng.standard_normal(shape).astype(kind)
    if kind.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(kind)
    info = np.iinfo(kind)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(kind)


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_dtype_and_sliced_views(rng, dtype):
    host = _random(rng, (37, 53), dtype)
    dev = arrays.asarray(host, device="cuda:0")
    assert dev.device == "cuda:0" and dev.dtype == host.dtype and dev.strides == host.strides
    np.testing.assert_array_equal(dev.numpy(), host)
    for key in [np.s_[3:20], np.s_[:, 5:17], np.s_[2:30:3, 1::4], np.s_[::-1, 7], np.s_[5]]:
        np.testing.assert_array_equal(dev[key].numpy(), host[key])
        np.testing.assert_array_equal(dev[key].copy().numpy(), host[key])
    np.testing.assert_array_equal(dev.T.numpy(), host.T)
    np.testing.assert_array_equal(np.asarray(dev.to("cpu")), host)
    np.testing.assert_array_equal(dev.copy().numpy(), host)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "complex128"])
def test_fill_contiguous_and_strided(rng, dtype):
    host = _random(rng, (40, 30), dtype)
    dev = arrays.asarray(host, device="cuda:0")
    value = np.asarray(-7 if np.dtype(dtype).kind in "iu" else 3.25, dtype=dtype)[()]
    dev[4:20, 3:11].fill(value)
    host[4:20, 3:11] = value
    np.testing.assert_array_equal(dev.numpy(), host)
    dev.fill(value)
    np.testing.assert_array_equal(dev.numpy(), np.full_like(host, value))


def test_constructors_on_device():
    np.testing.assert_array_equal(arrays.zeros((3, 4), "float32", "cuda:0").numpy(), 0)
    np.testing.assert_array_equal(arrays.ones((5,), "int64", "cuda:0").numpy(), 1)
    np.testing.assert_array_equal(arrays.full((2, 2), 2.5, "float64", "cuda:0").numpy(), 2.5)
    assert arrays.empty((0, 3), "float32", "cuda:0").numpy().shape == (0, 3)


def test_fill_inside_a_captured_graph(rng):
    stream = cuda.Stream(non_blocking=True)
    out = arrays.asarray(rng.standard_normal((64, 48)), device="cuda:0")
    view = out[:, 8:40]
    with cuda.StreamCapturer(stream.ptr()) as cap:
        out.fill(1.5, stream.ptr())
        view.fill(-2.0, stream.ptr())
    captured = cap.captured
    assert "memalloc" not in captured.node_types()
    graph = cuda.Graph.from_captured(captured)
    out.fill(np.nan, stream)
    stream.synchronize()
    launcher = graph.launcher()
    launcher.stream(stream.ptr())
    launcher.launch()
    launcher.synchronize()
    expect = np.full((64, 48), 1.5)
    expect[:, 8:40] = -2.0
    np.testing.assert_array_equal(out.numpy(), expect)
    graph.destroy()


@pytest.mark.parametrize("mode", ["thread_local", "global"])
def test_memory_freed_during_a_capture_leaves_it_valid(rng, mode):
    """The garbage collector may free an eagle array while a capture is open: the free of
    memory ordered on another stream runs at once without invalidating the capture, the
    free of memory ordered on the captured stream waits for the capture to end, and the
    graph replays correctly."""
    stream = cuda.Stream(non_blocking=True)
    pool = cuda.memory.default_pool(0)
    out = arrays.asarray(rng.standard_normal(4096), device="cuda:0")
    elsewhere = arrays.full((1 << 20,), 1.0, "float32", device="cuda:0")  # default stream
    captured_stream = pool.allocate(1 << 20, stream)
    captured_ptr = captured_stream.ptr
    gc.collect()  # earlier garbage goes now: inside the capture only these two are freed
    live = pool.live_buffers
    with cuda.StreamCapturer(stream.ptr(), mode) as cap:
        out.fill(1.5, stream.ptr())
        del elsewhere, captured_stream
        gc.collect()
        out[1024:].fill(-2.0, stream.ptr())
    assert pool.live_buffers == live - 2
    assert pool._deferred == [(captured_ptr, stream)]  # freed when the capture has ended
    captured = cap.captured
    assert not [kind for kind in captured.node_types() if "free" in kind]
    graph = cuda.Graph.from_captured(captured)
    out.fill(np.nan, stream)
    launcher = graph.launcher()
    launcher.stream(stream.ptr())
    launcher.launch()
    launcher.synchronize()
    expect = np.full(4096, 1.5)
    expect[1024:] = -2.0
    np.testing.assert_array_equal(out.numpy(), expect)
    graph.destroy()
    arrays.empty((16,), "float32", "cuda:0")  # an allocation flushes the deferred free
    assert not pool._deferred


@pytest.mark.usefixtures("collector_paused")
def test_memory_freed_during_a_torch_capture_leaves_it_valid(rng):
    """The same under ``torch.cuda.graph`` (global capture mode): an eagle array dropped
    inside the capture is freed without invalidating torch's graph."""
    torch = pytest.importorskip("torch")
    x = torch.tensor(rng.standard_normal(4096), device="cuda")
    dropped = arrays.full((1 << 20,), 1.0, "float32", device="cuda:0")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2.0
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        y = x * 2.0
        del dropped
        gc.collect()
        y += 1.0
    x.copy_(torch.tensor(rng.standard_normal(4096), device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x * 2.0 + 1.0)


def test_nvrtc_kernel_eager_and_replayed_100_times(rng):
    kernel = cuda.load_kernel(SCALE_SOURCE, "scale_add")
    n = 100_003
    x = rng.standard_normal(n).astype(np.float32)
    start = rng.standard_normal(n).astype(np.float32)
    dx = arrays.asarray(x, device="cuda:0")
    dout = arrays.asarray(start, device="cuda:0")
    stream = cuda.Stream(non_blocking=True)
    args = [dout, dx, np.float32(0.5), np.int64(n)]
    kernel.launch(-(-n // 256), 256, args, stream)
    stream.synchronize()
    np.testing.assert_allclose(dout.numpy(), start + 0.5 * x, rtol=1e-6)

    with cuda.StreamCapturer(stream.ptr()) as cap:
        kernel.launch(-(-n // 256), 256, args, stream)
    assert cap.captured.node_types() == ["kernel"]
    launcher = cuda.Graph.from_captured(cap.captured).launcher().stream(stream)
    for _ in range(100):
        launcher.launch()
    launcher.synchronize()
    ref = start.astype(np.float64) + 101 * 0.5 * x.astype(np.float64)
    err = np.linalg.norm(dout.numpy() - ref) / np.linalg.norm(ref)
    assert err < 1e-5


def test_capture_whose_body_raises_leaves_the_stream_usable(rng):
    stream = cuda.Stream(non_blocking=True)
    out = arrays.zeros((16,), "float32", "cuda:0")
    with pytest.raises(ZeroDivisionError), cuda.StreamCapturer(stream.ptr()):
        out.fill(1.0, stream)
        _ = 1 / 0
    assert not cuda.is_capturing(stream)
    out.fill(4.0, stream)
    stream.synchronize()
    np.testing.assert_array_equal(out.numpy(), 4.0)


def test_invalidated_capture_raises_cuda_error_naming_the_status():
    stream = cuda.Stream(non_blocking=False)
    capturer = cuda.StreamCapturer(stream.ptr(), mode="global")
    capturer.begin()
    with pytest.raises(cuda.CudaError):
        cudart.cudaStreamSynchronize(stream.ptr())  # illegal while capturing
    with pytest.raises(cuda.CudaError) as info:
        capturer.end()
    assert "cudaErrorStreamCapture" in info.value.status
    stream.synchronize()


def test_consumed_captured_graph_and_destroyed_graph_refuse():
    stream = cuda.Stream(non_blocking=True)
    out = arrays.zeros((4,), "float32", "cuda:0")
    with cuda.StreamCapturer(stream) as cap:
        out.fill(1.0, stream)
    graph = cuda.Graph.from_captured(cap.captured)
    with pytest.raises(cuda.LifetimeError, match="already consumed"):
        cuda.Graph.from_captured(cap.captured)
    launcher = graph.launcher()
    graph.destroy()
    graph.destroy()
    with pytest.raises(cuda.LifetimeError, match="destroyed"):
        launcher.launch()


def test_pool_refuses_destroy_while_a_graph_keeps_its_array():
    pool = cuda.MemoryPool()
    stream = cuda.Stream(non_blocking=True)
    buffer = pool.allocate(1024, stream.ptr())
    out = arrays.Array(
        ptr=buffer.ptr,
        shape=(256,),
        dtype=np.dtype("float32"),
        strides=(4,),
        device_index=0,
        owner=buffer,
    )
    with cuda.StreamCapturer(stream) as cap:
        out.fill(2.0, stream)
    graph = cuda.Graph.from_captured(cap.captured)
    del out, buffer
    with pytest.raises(cuda.LifetimeError, match="live array"):
        pool.destroy()
    graph.destroy()
    stream.synchronize()
    pool.destroy()
    pool.destroy()


def test_event_timing_and_stream_context(rng):
    stream = cuda.Stream(non_blocking=True)
    with stream:
        assert cuda.current_stream() is stream
        start, end = cuda.Event().record(), cuda.Event()
        big = arrays.asarray(rng.standard_normal(1 << 20), device="cuda:0")
        big.fill(1.0)
        end.record()
        end.synchronize()
        assert start.elapsed_ms(end) >= 0.0
    assert cuda.current_stream() is not stream


def test_cupy_interop_both_ways_without_copies(rng):
    cp = pytest.importorskip("cupy")
    theirs = cp.asarray(rng.standard_normal((8, 6)))
    ours = arrays.asarray(theirs)
    assert ours.ptr == theirs.data.ptr and ours.device == "cuda:0"
    np.testing.assert_array_equal(ours.numpy(), cp.asnumpy(theirs))
    mine = arrays.asarray(rng.standard_normal((5, 7)), device="cuda:0")
    back = cp.asarray(mine)
    assert back.data.ptr == mine.ptr
    via_dlpack = cp.from_dlpack(mine)
    assert via_dlpack.data.ptr == mine.ptr
    np.testing.assert_array_equal(cp.asnumpy(via_dlpack), mine.numpy())
    view = mine[:, 2:5]
    assert cp.asarray(view).data.ptr == view.ptr
    np.testing.assert_array_equal(cp.asnumpy(cp.asarray(view)), view.numpy())


def test_torch_interop_both_ways_without_copies(rng):
    torch = pytest.importorskip("torch")
    theirs = torch.randn(9, 4, device="cuda", dtype=torch.float32)
    ours = arrays.asarray(theirs)
    assert ours.ptr == theirs.data_ptr()
    np.testing.assert_array_equal(ours.numpy(), theirs.cpu().numpy())
    mine = arrays.asarray(rng.standard_normal((3, 5)).astype(np.float32), device="cuda:0")
    back = torch.from_dlpack(mine)
    assert back.data_ptr() == mine.ptr
    np.testing.assert_array_equal(back.cpu().numpy(), mine.numpy())
    back.mul_(2.0)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(mine.numpy(), back.cpu().numpy())
    t_view = torch.as_tensor(mine[1:, 1:4], device="cuda")
    assert t_view.data_ptr() == mine[1:, 1:4].ptr


def test_argument_list_launches_in_one_capture_keep_their_own_values(rng):
    kernel = cuda.load_kernel(SCALE_SOURCE, "scale_add")
    n = 4099
    x = rng.standard_normal(n).astype(np.float32)
    start = rng.standard_normal(n).astype(np.float32)
    dx, dout = arrays.asarray(x, device="cuda:0"), arrays.asarray(start, device="cuda:0")
    stream = cuda.Stream(non_blocking=True)
    with cuda.StreamCapturer(stream) as cap:
        for a in (0.5, 2.0, -0.25):  # one signature: one reused parameter buffer
            kernel.launch(-(-n // 256), 256, [dout, dx, np.float32(a), np.int64(n)], stream)
    graph = cuda.Graph.from_captured(cap.captured)
    graph.launcher().stream(stream).launch()
    stream.synchronize()
    ref = start.astype(np.float64) + 2.25 * x.astype(np.float64)
    assert np.linalg.norm(dout.numpy() - ref) / np.linalg.norm(ref) < 1e-6
    graph.destroy()


@pytest.mark.device_memory
def test_freed_memory_returns_to_the_device_after_trim():
    pool = cuda.default_pool()
    cudart.cudaDeviceSynchronize()
    pool.trim()
    free_before, _ = cudart.cudaMemGetInfo()
    big = arrays.empty((8 << 30,), "uint8", "cuda:0")
    free_during, _ = cudart.cudaMemGetInfo()
    assert free_during <= free_before - (8 << 30)
    del big
    cudart.cudaDeviceSynchronize()  # beyond the release threshold goes back at a sync
    free_synced, _ = cudart.cudaMemGetInfo()
    assert free_synced >= free_before - cuda.memory.DEFAULT_RELEASE_THRESHOLD - (64 << 20)
    pool.trim()
    free_after, _ = cudart.cudaMemGetInfo()
    assert free_after >= free_before - (64 << 20)


def test_each_call_makes_its_own_device_current(rng):
    if cudart.cudaGetDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    kernel = cuda.load_kernel(SCALE_SOURCE, "scale_add", device=0)
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    start = rng.standard_normal(n).astype(np.float32)
    dx, dout = arrays.asarray(x, device="cuda:0"), arrays.asarray(start, device="cuda:0")
    stream0 = cuda.Stream(non_blocking=True, device=0)
    other = arrays.full((n,), 3.0, "float32", "cuda:1")  # device 1 is now current
    stream1 = cuda.Stream(non_blocking=True, device=1)
    cuda.Event(device=1).record(stream1).synchronize()
    kernel.launch(-(-n // 256), 256, [dout, dx, np.float32(0.5), np.int64(n)], stream0)
    cudart.cudaSetDevice(1)
    late = arrays.zeros((n,), "float32", "cuda:0")  # allocates on device 0 all the same
    cudart.cudaSetDevice(1)
    kernel.launch(-(-n // 256), 256, [late, dx, np.float32(2.0), np.int64(n)], stream0)
    stream0.synchronize()
    np.testing.assert_allclose(dout.numpy(), start + 0.5 * x, rtol=1e-6)
    np.testing.assert_allclose(late.numpy(), 2.0 * x, rtol=1e-6)
    np.testing.assert_array_equal(other.numpy(), 3.0)


@pytest.mark.parametrize("mode", ["thread_local", "global"])
def test_an_allocation_off_the_captured_stream_is_refused_and_the_capture_survives(mode):
    """CUDA fails an allocation on another stream while this thread captures (and
    invalidates the capture); eagle refuses it first, so the capture goes on."""
    import eagle.errors

    stream = cuda.Stream(non_blocking=True)
    y = arrays.full((256,), np.nan, "float32", "cuda:0")
    with cuda.StreamCapturer(stream, mode=mode) as cap:
        y.fill(1.0, stream)
        with pytest.raises(eagle.errors.EagleRuntimeError, match="cannot allocate device memory"):
            arrays.zeros((1000,), "float32", "cuda:0")  # on eagle's current stream
        y.fill(2.0, stream)
    launcher = cuda.Graph.from_captured(cap.captured).launcher().stream(stream)
    launcher.launch()
    launcher.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(256, 2.0, np.float32))
    assert arrays.zeros((4,), "float32", "cuda:0").numpy().tolist() == [0.0] * 4  # after it


def test_a_relaxed_capture_lets_other_streams_allocate():
    stream = cuda.Stream(non_blocking=True)
    y = arrays.full((64,), np.nan, "float32", "cuda:0")
    with cuda.StreamCapturer(stream, mode="relaxed") as cap:
        y.fill(3.0, stream)
        other = arrays.full((8,), 5.0, "float32", "cuda:0")
    launcher = cuda.Graph.from_captured(cap.captured).launcher().stream(stream)
    launcher.launch()
    launcher.synchronize()
    assert y.numpy()[0] == 3.0 and other.numpy().tolist() == [5.0] * 8
