"""Host tests of eagle.cuda: the checked wrapper, NVRTC, and lifetime refusals.

The lifetime rules are pure bookkeeping; they are checked here with the CUDA
calls replaced by a recorder, so they run without a GPU.
"""

from __future__ import annotations

import weakref

import numpy as np
import pytest

from eagle import arrays, cuda
from eagle.cuda import _runtime, _strided, graph, module
from eagle.cuda.module import PackedArgs


def test_is_available_never_raises():
    assert cuda.is_available() in (True, False)


def test_failed_call_names_the_call_and_status():
    error = cuda.CudaError("cudaStreamEndCapture", "cudaErrorStreamCaptureInvalidated", "detail")
    assert (
        str(error) == "cudaStreamEndCapture failed with cudaErrorStreamCaptureInvalidated: detail"
    )
    assert issubclass(cuda.CudaUnavailable, cuda.CudaError)


def test_nvrtc_compiles_for_sm_90_without_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path))
    source = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }'
    image = cuda.compile_cuda(source, name="k", arch="sm_90")
    assert image[:4] == b"\x7fELF"
    assert len(list(tmp_path.glob("*.cubin"))) == 1


def test_a_new_process_takes_the_image_from_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path))
    source = 'extern "C" __global__ void cached(float* x) { x[threadIdx.x] += 1.0f; }'
    first = cuda.compile_cuda(source, name="cached", arch="sm_90")
    monkeypatch.setattr(module, "_images", {})  # what a new process starts with

    def recompile(*args):
        raise AssertionError("NVRTC ran again although the image is on disk")

    monkeypatch.setattr(module, "_nvrtc_compile", recompile)
    assert cuda.compile_cuda(source, name="cached", arch="sm_90") == first


def test_strided_kernels_compile_for_sm_90():
    assert cuda.compile_cuda(_strided.source(), name="strided", arch="sm_90")[:4] == b"\x7fELF"


def test_nvrtc_error_carries_the_log():
    with pytest.raises(cuda.CompileError, match="undefined_name"):
        cuda.compile_cuda(
            'extern "C" __global__ void k() { undefined_name(); }', name="bad", arch="sm_90"
        )


def test_capturer_refuses_bad_mode_naming_it():
    with pytest.raises(ValueError, match="mode must be one of"):
        cuda.StreamCapturer(1234, mode="sometimes")


def test_stream_argument_of_the_wrong_type_is_named():
    with pytest.raises(TypeError, match="stream must be an eagle.cuda.Stream"):
        cuda.as_stream_ptr("stream")


@pytest.fixture
def fake_cuda(monkeypatch):
    """Replace graph.py's CUDA calls with a recorder."""
    calls: list[str] = []

    def fake_call(name, *args):
        calls.append(name)
        return {
            "cudaStreamEndCapture": "graph-handle",
            "cudaGraphInstantiate": "exec-handle",
        }.get(name)

    monkeypatch.setattr(graph, "call", fake_call)
    return calls


class _Owner:
    """Stands for a cuBLAS handle: something a graph must not outlive."""

    def __init__(self) -> None:
        self._live_graphs: weakref.WeakSet = weakref.WeakSet()


def test_capture_keeps_recorded_objects_and_tells_their_owners(fake_cuda):
    owner = _Owner()
    capturer = cuda.StreamCapturer(77)
    capturer.begin()
    cuda.record_use(77, owner)
    cuda.record_use(78, "not captured")
    captured = capturer.end()
    assert captured._kept == [owner] and len(owner._live_graphs) == 1
    built = cuda.Graph.from_captured(captured)
    assert set(owner._live_graphs) == {built}
    built.destroy()
    assert built._kept == [] and len(owner._live_graphs) == 0


def test_consumed_captured_graph_refuses(fake_cuda):
    capturer = cuda.StreamCapturer(5)
    capturer.begin()
    captured = capturer.end()
    cuda.Graph.from_captured(captured)
    assert captured.consumed
    with pytest.raises(cuda.LifetimeError, match="already consumed by Graph.from_captured"):
        cuda.Graph.from_captured(captured)
    with pytest.raises(TypeError, match="captured must be a CapturedGraph"):
        cuda.Graph.from_captured("graph")


def test_use_after_destroy_refuses(fake_cuda):
    capturer = cuda.StreamCapturer(5)
    capturer.begin()
    built = cuda.Graph.from_captured(capturer.end())
    launcher = built.launcher().stream(5)
    built.destroy()
    built.destroy()
    assert fake_cuda.count("cudaGraphExecDestroy") == 1
    with pytest.raises(cuda.LifetimeError, match="Graph was destroyed"):
        launcher.launch()
    with pytest.raises(cuda.LifetimeError, match="Graph was destroyed"):
        built.launcher()


def test_capture_context_always_ends_and_discards_on_error(fake_cuda):
    with pytest.raises(KeyError), cuda.StreamCapturer(9):
        raise KeyError("body failed")
    assert fake_cuda[-2:] == ["cudaStreamEndCapture", "cudaGraphDestroy"]
    assert not graph.any_capture_active()


def test_begin_and_end_out_of_order_refuse(fake_cuda):
    capturer = cuda.StreamCapturer(3)
    with pytest.raises(cuda.LifetimeError, match="no capture is open"):
        capturer.end()
    capturer.begin()
    with pytest.raises(cuda.LifetimeError, match="already open"):
        capturer.begin()
    with pytest.raises(cuda.LifetimeError, match="already being captured"):
        cuda.StreamCapturer(3).begin()
    capturer.end()


def test_runtime_bindings_load_lazily():
    assert _runtime._bindings("runtime").__name__ == "cuda.bindings.runtime"


def test_kernel_arguments_on_the_wrong_device_are_refused_by_position():
    host = arrays.zeros((4,), "float32")
    with pytest.raises(ValueError, match="kernel argument 1 is an array on the host"):
        PackedArgs([np.int64(1), host], device=0)
    elsewhere = arrays.Array(
        ptr=4096, shape=(4,), dtype=np.dtype("float32"), strides=(4,), device_index=1
    )
    with pytest.raises(ValueError, match="kernel argument 0 is an array on cuda:1"):
        PackedArgs([elsewhere], device=0)
    with pytest.raises(TypeError, match="kernel argument 0: expected a numpy scalar"):
        PackedArgs([1.5])
