"""Host tests of eagle.cuda: the checked wrapper, NVRTC, and lifetime refusals.

The lifetime rules are pure bookkeeping; they are checked here with the CUDA
calls replaced by a recorder, so they run without a GPU.
"""

from __future__ import annotations

import ctypes
import gc
import re
import subprocess
import sys
import weakref
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from eagle import arrays, cuda
from eagle.arrays import _strided
from eagle.cuda import _capture_state, _runtime, _stream_capture, graph, memory, module
from eagle.cuda import stream as stream_module
from eagle.cuda.module import PackedArgs
from tests._util import FakeCalls, fake_calls


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
    assert len(list(tmp_path.glob("*.img"))) == 1


def test_a_new_process_takes_the_image_from_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path))
    source = 'extern "C" __global__ void cached(float* x) { x[threadIdx.x] += 1.0f; }'
    first = cuda.compile_cuda(source, name="cached", arch="sm_90")
    monkeypatch.setattr(module, "_images", OrderedDict())  # what a new process starts with

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


@pytest.mark.parametrize("arch", ["sm90", "sm_50", "compute_90", "90", 90])
def test_an_architecture_nvrtc_cannot_compile_for_is_named_with_those_it_can(arch):
    """NVRTC's own message ("invalid value for --gpu-architecture") names neither."""
    with pytest.raises(ValueError, match=r"arch .* is not an architecture .*; pass one of .*sm_90"):
        cuda.compile_cuda('extern "C" __global__ void k() {}', name="k", arch=arch)
    assert cuda.compile_cuda('extern "C" __global__ void k() {}', name="k", arch="sm_90a")


@pytest.mark.parametrize(
    ("source", "options", "error", "match"),
    [
        (b"k", None, TypeError, r"^source must be CUDA C text \(a str\), not bytes"),
        ("k", ["-use_fast_math"], TypeError, r"^options must be a mapping .*, not list"),
        ("k", {"arch": "sm_80"}, ValueError, r"options holds 'arch': pass arch as compile_cuda"),
        ("k", {"name": "x"}, ValueError, r"options holds 'name': pass name as compile_cuda"),
        ("k", {"fast_math": True}, TypeError, r"^options: .*'fast_math'; its keys are cuda.core"),
    ],
)
def test_compile_options_are_refused_by_name(source, options, error, match):
    """They reached cuda.core raw (a TypeError of ProgramOptions), or, ``arch`` in
    ``options``, compiled for the ``arch=`` argument without a word."""
    with pytest.raises(error, match=match):
        cuda.compile_cuda(source, name="k", arch="sm_90", options=options)


def test_capturer_refuses_bad_mode_naming_it():
    with pytest.raises(
        ValueError, match="mode must be 'thread_local', 'global' or 'relaxed', not 'sometimes'"
    ):
        cuda.StreamCapturer(1234, mode="sometimes")


def test_stream_argument_of_the_wrong_type_is_named():
    with pytest.raises(TypeError, match="stream must be an eagle.cuda.Stream"):
        cuda.as_stream_ptr("stream")


@pytest.fixture
def fake_cuda(monkeypatch):
    """Replace the CUDA calls of capture and graphs with a recorder."""
    calls: list[str] = []

    def fake_call(name, *args):
        calls.append(name)
        return {
            "cudaStreamEndCapture": "graph-handle",
            "cudaGraphInstantiate": "exec-handle",
            "cudaStreamGetDevice": 0,
        }.get(name)

    fake_calls(monkeypatch, fake_call, graph, _stream_capture, _capture_state)
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
    assert set(owner._live_graphs) == {built._held}
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


@pytest.mark.parametrize(
    ("calls", "kind"),
    [(_runtime.RuntimeCalls, "runtime"), (_runtime.DriverCalls, "driver"),
     (_runtime.NvrtcCalls, "nvrtc")],
)  # fmt: skip
def test_every_declared_binding_call_is_a_function_of_its_module(calls, kind):
    module = _runtime._bindings(kind)
    declared = [name for name in vars(calls) if not name.startswith("_")]
    assert declared, kind
    odd = [n for n in declared if isinstance(getattr(module, n, None), type | None)]
    assert odd == [], f"not functions of cuda.bindings.{kind}"


def test_eagle_calls_no_binding_it_has_not_declared():
    declared = set(vars(_runtime.RuntimeCalls)) | set(vars(_runtime.DriverCalls))
    declared |= set(vars(_runtime.NvrtcCalls))
    root = Path(_runtime.__file__).parents[2]
    used = set()
    for path in [*root.joinpath("eagle").rglob("*.py")]:
        used.update(re.findall(r"\b(?:cudart|cudadrv|nvrtc)\.(\w+)\(", path.read_text()))
    assert used and used <= declared, sorted(used - declared)


def _fake_binding(monkeypatch, **functions):
    """A checked view of a stand-in for cuda.bindings.runtime with these functions."""
    module = SimpleNamespace(cudaGetErrorString=lambda status: (0, b"what it means"), **functions)
    monkeypatch.setitem(_runtime._modules, "runtime", module)
    return _runtime._Checked("runtime")


def test_a_checked_call_returns_its_values_and_raises_on_a_status(monkeypatch):
    status = type("Status", (), {"name": "cudaErrorInvalidValue", "__int__": lambda s: 1})()
    checked = _fake_binding(
        monkeypatch,
        cudaNone=lambda: (0,),
        cudaOne=lambda x: (0, x + 1),
        cudaTwo=lambda: (0, "a", "b"),
        cudaBad=lambda: (status,),
    )
    assert checked.cudaNone() is None and checked.cudaOne(1) == 2
    assert checked.cudaTwo() == ("a", "b")
    with pytest.raises(cuda.CudaError, match="cudaBad failed with cudaErrorInvalidValue: what"):
        checked.cudaBad()
    assert checked.cudaOne.__name__ == "cudaOne" and "cudaOne" in vars(checked)  # kept


def test_a_library_that_cannot_load_says_what_to_install(monkeypatch):
    def missing() -> None:
        raise OSError('Failure finding "libnvrtc.so.13"')

    monkeypatch.setitem(_runtime._modules, "nvrtc", SimpleNamespace(nvrtcVersion=missing))
    with pytest.raises(cuda.CudaUnavailable, match=r"libnvrtc.so.13.*\.\[cuda\]"):
        _runtime._Checked("nvrtc").nvrtcVersion()
    checked = _fake_binding(monkeypatch, cudaGetDeviceCount=missing)
    with pytest.raises(cuda.CudaUnavailable, match="CUDA 13 driver .* pass numpy arrays"):
        checked.cudaGetDeviceCount()


@pytest.mark.parametrize(
    ("count", "advice"), [(1, "pass 'cuda:0'$"), (4, "pass 'cuda:0' to 'cuda:3'$")]
)
def test_a_device_index_beyond_the_devices_present_says_which_there_are(monkeypatch, count, advice):
    checked = _fake_binding(
        monkeypatch, cudaDriverGetVersion=lambda: (0, 13000), cudaGetDeviceCount=lambda: (0, count)
    )
    monkeypatch.setattr(_runtime, "cudart", checked)
    monkeypatch.setattr(_runtime, "_ready_devices", set())
    with pytest.raises(cuda.CudaUnavailable, match=rf"device 5 of {count} present; {advice}"):
        _runtime.ensure_device(5)


def test_a_misspelt_or_non_function_binding_is_refused_by_name(monkeypatch):
    checked = _fake_binding(monkeypatch, cudaStreamCaptureMode=type("Enum", (), {}))
    with pytest.raises(AttributeError, match="has no function 'cudaStreamSyncronize'"):
        checked.cudaStreamSyncronize(0)
    with pytest.raises(AttributeError, match="'cudaStreamCaptureMode'.*enums and structs"):
        checked.cudaStreamCaptureMode(0)


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


def _slots(packed: PackedArgs, sizes: list[int]) -> list[bytes]:
    """The bytes each argument slot of ``packed`` holds, where a launch reads them."""
    pointers = packed._pointers
    return [ctypes.string_at(p, size) for p, size in zip(pointers, sizes, strict=True)]


def test_a_numpy_scalar_argument_takes_a_new_value_in_place():
    plane = arrays.Array(
        ptr=0x4000, shape=(4,), dtype=np.dtype("float32"), strides=(4,), device_index=0
    )
    args = [np.float32(1.5), plane, np.float64(0.25), np.int64(7), ctypes.c_int32(3)]
    packed = PackedArgs(args)
    sizes = [4, 8, 8, 8, 4]
    address = packed.address
    packed.setter(0)(-2.0)
    packed.setter(2)(0.1)
    packed.setter(3)(-9)
    assert packed.address == address  # the same buffer, written in place
    assert _slots(packed, sizes) == [
        np.float32(-2.0).tobytes(),
        (0x4000).to_bytes(8, "little"),
        np.float64(0.1).tobytes(),
        np.int64(-9).tobytes(),
        bytes(ctypes.c_int32(3)),
    ]
    set_first = packed.setter(0)
    set_first(0.1)  # rounded to the slot's float32, as a packed np.float32(0.1) is
    set_first(float("inf"))
    assert _slots(packed, sizes)[0] == np.float32(np.inf).tobytes()
    for index in (1, 4):
        with pytest.raises(TypeError, match=f"kernel argument {index} was not packed from a nu"):
            packed.setter(index)
    for index in (5, -1):
        with pytest.raises(IndexError, match=f"kernel argument {index} does not exist"):
            packed.setter(index)


def test_arguments_of_a_known_signature_are_packed_without_generating_a_packer(monkeypatch):
    def plane(ptr: int) -> arrays.Array:
        return arrays.Array(
            ptr=ptr, shape=(4,), dtype=np.dtype("float32"), strides=(4,), device_index=0
        )

    first = PackedArgs([plane(0x1000), np.float32(1.5), np.int64(3)])
    generated: list[str] = []

    def counted(source: str, namespace: dict) -> None:
        generated.append(source)
        exec(source, namespace)

    monkeypatch.setattr(module, "exec", counted, raising=False)
    second = PackedArgs([plane(0x2000), np.float32(-2.0), np.int64(9)], device=0)
    assert generated == [] and second._layout is first._layout  # as each bind to new memory
    assert _slots(second, [8, 4, 8]) == [
        (0x2000).to_bytes(8, "little"),
        np.float32(-2.0).tobytes(),
        np.int64(9).tobytes(),
    ]
    assert _slots(first, [8, 4, 8])[0] == (0x1000).to_bytes(8, "little")  # its own buffer
    other = PackedArgs([plane(0x3000), np.float64(0.5), np.int64(3)])  # another signature
    assert len(generated) == 1 and other._layout is not first._layout
    assert _slots(other, [8, 8, 8])[1] == np.float64(0.5).tobytes()


# -- lifetimes through weakref.finalize ----------------------------------------------------


@pytest.fixture
def unraisable(monkeypatch):
    """Exceptions Python could not raise (from finalizers and ``__del__``), collected."""
    seen: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: seen.append(info.exc_value))
    return seen


_NOT_CAPTURING = _runtime.runtime().cudaStreamCaptureStatus.cudaStreamCaptureStatusNone


@pytest.fixture
def fake_runtime(monkeypatch):
    """Replace the CUDA calls of stream.py, memory.py and the finalizers with a recorder."""
    calls: list[tuple[str, tuple]] = []
    results = {
        "cudaStreamCreateWithFlags": 0x5000,
        "cudaEventCreateWithFlags": 0xE000,
        "cudaMemPoolCreate": 0x9000,
        "cudaMallocFromPoolAsync": 0xA000,
        "cudaStreamGetDevice": 0,
        "cudaStreamIsCapturing": _NOT_CAPTURING,
        "cudaThreadExchangeStreamCaptureMode": "the thread's mode before",
    }

    def fake_call(name, *args):
        calls.append((name, args))
        return results.get(name)

    for target in (_runtime, stream_module, memory, graph, _stream_capture, _capture_state):
        monkeypatch.setattr(target, "cudart", FakeCalls(fake_call))
    for target in (stream_module, memory):
        monkeypatch.setattr(target, "ensure_device", lambda device=0: None)
    return calls


def _names(calls):
    return [name for name, _ in calls]


def test_stream_and_event_are_destroyed_once_by_destroy_or_by_gc(fake_runtime, unraisable):
    stream = cuda.Stream()
    assert stream.__cuda_stream__() == (0, 0x5000) and stream.alive
    stream.destroy()
    stream.destroy()
    assert _names(fake_runtime).count("cudaStreamDestroy") == 1 and not stream.alive
    with pytest.raises(cuda.CudaError, match="this stream was destroyed"):
        stream.ptr()
    cuda.Stream()  # dropped at once
    event = cuda.Event()
    del event
    gc.collect()
    assert _names(fake_runtime).count("cudaStreamDestroy") == 2
    assert ("cudaEventDestroy", (0xE000,)) in fake_runtime and not unraisable


def test_an_object_whose_init_failed_half_way_is_collected_quietly(monkeypatch, unraisable):
    def refuse(name, *args):
        raise cuda.CudaError(name, "cudaErrorMemoryAllocation")

    monkeypatch.setattr(stream_module, "ensure_device", lambda device=0: None)
    monkeypatch.setattr(stream_module, "cudart", FakeCalls(refuse))
    monkeypatch.setattr(memory, "ensure_device", lambda device=0: None)
    monkeypatch.setattr(memory, "cudart", FakeCalls(refuse))
    for make in (cuda.Stream, cuda.Event, cuda.MemoryPool):
        with pytest.raises(cuda.CudaError, match="cudaErrorMemoryAllocation"):
            make()
    gc.collect()
    assert not unraisable


def test_a_graph_collected_without_destroy_frees_its_handles_and_tells_owners(fake_cuda):
    owner = _Owner()
    released: list[bool] = []
    owner._graphs_released = lambda: released.append(True)
    capturer = cuda.StreamCapturer(41)
    capturer.begin()
    cuda.record_use(41, owner)
    built = cuda.Graph.from_captured(capturer.end())
    assert len(owner._live_graphs) == 1 and not released
    del built, capturer
    gc.collect()
    assert fake_cuda[-2:] == ["cudaGraphExecDestroy", "cudaGraphDestroy"]
    assert not owner._live_graphs and released == [True]


def test_finalizers_do_not_run_at_interpreter_exit():
    script = (
        "from eagle.cuda import _runtime, stream\n"
        "from tests._util import FakeCalls\n"
        "def fake(name, *args):\n"
        "    print('called', name)\n"
        "    return 0x5000\n"
        "_runtime.cudart = stream.cudart = FakeCalls(fake)\n"
        "stream.ensure_device = lambda device=0: None\n"
        "kept = stream.Stream()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == ["called cudaStreamCreateWithFlags"]
    assert not done.stderr


def test_pool_release_threshold_trim_and_buffer_free(fake_runtime, unraisable):
    pool = cuda.MemoryPool()
    threshold = next(args for name, args in fake_runtime if name == "cudaMemPoolSetAttribute")
    assert int(threshold[2]) == memory.DEFAULT_RELEASE_THRESHOLD == 1 << 30
    buffer = pool.allocate(256, 77)
    assert buffer.ptr == 0xA000 and pool.live_buffers == 1
    del buffer
    gc.collect()
    assert ("cudaFreeAsync", (0xA000, 77)) in fake_runtime and pool.live_buffers == 0
    # the free runs with this thread's capture mode relaxed, then restored, so that a
    # capture in progress elsewhere (in global mode) is not invalidated by it
    at = fake_runtime.index(("cudaFreeAsync", (0xA000, 77)))
    relaxed = _runtime.runtime().cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed
    assert fake_runtime[at - 1] == ("cudaThreadExchangeStreamCaptureMode", (relaxed,))
    assert fake_runtime[at + 1] == (
        "cudaThreadExchangeStreamCaptureMode",
        ("the thread's mode before",),
    )
    pool.trim(1024)
    assert _names(fake_runtime)[-2:] == ["cudaDeviceSynchronize", "cudaMemPoolTrimTo"]
    assert fake_runtime[-1][1] == (0x9000, 1024)
    with pytest.raises(ValueError, match="keep_bytes must be a non-negative int"):
        pool.trim(-1)
    with pytest.raises(ValueError, match="release_threshold must be a non-negative int"):
        cuda.MemoryPool(release_threshold=-5)
    pool.destroy()
    pool.destroy()
    assert _names(fake_runtime).count("cudaMemPoolDestroy") == 1 and not unraisable


# -- streams from any framework --------------------------------------------------------------


class _CoreStream:
    def __cuda_stream__(self):
        return (0, 0x1111)


class _TorchStream:
    cuda_stream = 0x2222


class _CupyStream:
    ptr = 0x3333


def test_stream_arguments_take_every_stream_like_object():
    assert cuda.as_stream_ptr(_CoreStream()) == 0x1111
    assert cuda.as_stream_ptr(_TorchStream()) == 0x2222
    assert cuda.as_stream_ptr(_CupyStream()) == 0x3333
    assert cuda.as_stream_ptr(0x5555) == 0x5555
    for wrong in (True, "stream", 1.5, object()):
        with pytest.raises(TypeError, match="stream must be an eagle.cuda.Stream.*torch and"):
            cuda.as_stream_ptr(wrong)
    with pytest.raises(TypeError, match="^launch_stream must be"):
        cuda.as_stream_ptr("x", argument="launch_stream")


def test_event_and_launcher_take_a_foreign_stream(fake_runtime):
    event = cuda.Event()
    event.record(_TorchStream())
    event.wait(_CupyStream())
    assert ("cudaEventRecord", (0xE000, 0x2222)) in fake_runtime
    assert ("cudaStreamWaitEvent", (0x3333, 0xE000, 0)) in fake_runtime


# -- the driver requirement ------------------------------------------------------------------


@pytest.mark.parametrize(("version", "shown"), [(12040, "CUDA 12.4"), (12090, "CUDA 12.9")])
def test_an_old_driver_is_refused_naming_both_versions(monkeypatch, version, shown):
    calls: list[str] = []

    def fake_call(name, *args):
        calls.append(name)
        return {"cudaDriverGetVersion": version, "cudaGetDeviceCount": 1}.get(name)

    monkeypatch.setattr(_runtime, "cudart", FakeCalls(fake_call))
    monkeypatch.setattr(_runtime, "_ready_devices", set())
    with pytest.raises(cuda.CudaDriverTooOld) as info:
        _runtime.ensure_device(0)
    message = str(info.value)
    assert shown in message and "CUDA 13.0" in message and "580 or newer" in message
    assert isinstance(info.value, cuda.CudaUnavailable) and info.value.found == version
    assert calls == ["cudaDriverGetVersion"]


@pytest.mark.parametrize(
    ("version", "error", "message"),
    [
        (
            0,
            cuda.CudaUnavailable,
            r"^cudaStreamGetDevice failed with cudaErrorInsufficientDriver: no NVIDIA driver is",
        ),
        (12040, cuda.CudaDriverTooOld, r"supports CUDA 12\.4, but eagle needs CUDA 13\.0"),
        (13000, cuda.CudaUnavailable, r"cudaErrorInsufficientDriver"),
    ],
)
def test_an_insufficient_driver_status_says_whether_there_is_a_driver(
    monkeypatch, version, error, message
):
    """CUDA's own text for it ("driver version is insufficient") reads as a driver to
    update where there is none at all."""
    monkeypatch.setattr(
        _runtime, "cudart", FakeCalls(lambda name, *args: version if "Version" in name else None)
    )
    status = SimpleNamespace(name="cudaErrorInsufficientDriver")
    with pytest.raises(error, match=message):
        _runtime.raise_status("runtime", "cudaStreamGetDevice", status)
    with pytest.raises(cuda.CudaUnavailable, match="cudaDriverGetVersion failed with cudaErrorIns"):
        _runtime.raise_status("runtime", "cudaDriverGetVersion", status)  # (asks nothing again)


def test_a_cuda_13_driver_is_accepted(monkeypatch):
    def fake_call(name, *args):
        return {"cudaDriverGetVersion": 13000, "cudaGetDeviceCount": 1}.get(name)

    monkeypatch.setattr(_runtime, "cudart", FakeCalls(fake_call))
    monkeypatch.setattr(_runtime, "cudadrv", FakeCalls(lambda name, *args: None))
    monkeypatch.setattr(_runtime, "_ready_devices", set())
    _runtime.ensure_device(0)
    assert _runtime._ready_devices == {0}


# -- compiling through cuda.core and launching -----------------------------------------------


def test_compile_error_names_the_status_and_the_program(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path))
    with pytest.raises(cuda.CompileError) as info:
        cuda.compile_cuda('extern "C" __global__ void k() { nope(); }', name="prog", arch="sm_90")
    message = str(info.value)
    assert message.startswith("nvrtcCompileProgram failed with NVRTC_ERROR_COMPILATION: prog:\n")
    assert 'identifier "nope" is undefined' in message and "\0" not in message


def test_program_options_are_part_of_the_cache_key(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path))
    source = 'extern "C" __global__ void f(float* x) { x[0] = __expf(x[0]) / x[1]; }'
    cuda.compile_cuda(source, name="f", arch="sm_90")
    cuda.compile_cuda(source, name="f", arch="sm_90", options={"use_fast_math": True})
    cuda.compile_cuda(source, name="f", arch="sm_80")
    assert len(list(tmp_path.glob("*.img"))) == 3


class _FakeLaunch:
    """Stands for cuLaunchKernel: records each call and the parameter bytes it read."""

    def __init__(self, sizes):
        self.sizes = sizes
        self.calls = []

    def __call__(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        pointers = (ctypes.c_void_p * len(self.sizes)).from_address(params)
        values = [ctypes.string_at(p, n) for p, n in zip(pointers, self.sizes, strict=True)]
        self.calls.append(((gx, gy, gz), (bx, by, bz), shared, int(stream), values))
        return (0,)


def _device_array(ptr, device=0):
    return arrays.Array(
        ptr=ptr, shape=(4,), dtype=np.dtype("float32"), strides=(4,), device_index=device
    )


def test_launch_packs_each_argument_by_value_and_reuses_one_buffer(monkeypatch):
    monkeypatch.setattr(module, "cudart", FakeCalls(lambda name, *args: None))
    kernel = module.Kernel("k", None, 0x1234, 0)
    kernel._launch = fake = _FakeLaunch([8, 4, 8, 12])
    triple = (ctypes.c_int32 * 3)(1, 2, 3)

    class Triple(ctypes.Structure):
        _fields_ = [("v", ctypes.c_int32 * 3)]

    first = [_device_array(0x1000), np.float32(1.5), np.int64(-7), Triple(triple)]
    kernel.launch(4, 128, first, 0x99)
    second = [_device_array(0x2000), np.float32(2.5), np.int64(9), Triple(triple)]
    kernel.launch((2, 3), (32, 2, 1), second, 0x99, shared_mem=64)
    assert len(kernel._packers) == 1
    (grid, block, _, stream, values), (grid2, block2, shared2, _, values2) = fake.calls
    assert (grid, block, stream, grid2, block2, shared2) == (
        (4, 1, 1), (128, 1, 1), 0x99, (2, 3, 1), (32, 2, 1), 64
    )  # fmt: skip
    assert values == [
        (0x1000).to_bytes(8, "little"),
        np.float32(1.5).tobytes(),
        np.int64(-7).tobytes(),
        bytes(triple),
    ]
    assert values2[:3] == [(0x2000).to_bytes(8, "little"), np.float32(2.5).tobytes(),
                           np.int64(9).tobytes()]  # fmt: skip
    packed = PackedArgs(first)
    kernel.launch(1, 1, packed, 0x99)
    assert fake.calls[-1][-1] == values and packed.keep == (first[0],)


def test_launch_checks_devices_dimensions_and_keeps_arrays_only_in_a_capture(
    monkeypatch, fake_cuda
):
    set_device: list[int] = []
    kernel = module.Kernel("k", None, 0x1234, 1)
    kernel._set_device = lambda device: (set_device.append(device), (0,))[1]
    kernel._launch = _FakeLaunch([8])
    with pytest.raises(ValueError, match="kernel argument 0 is an array on cuda:0"):
        kernel.launch(1, 1, [_device_array(0x1000, device=0)], 0x99)
    with pytest.raises(ValueError, match="launch dimensions must be 1 to 3 positive ints"):
        kernel.launch(0, 1, [_device_array(0x1000, device=1)], 0x99)
    array = _device_array(0x1000, device=1)
    kernel.launch(1, 1, [array], 0x99)
    assert not set_device
    kernel.launch(1, 1, [array], 0)  # the null stream runs on the current device
    assert set_device == [1]
    capturer = cuda.StreamCapturer(0x99)
    capturer.begin()
    kernel.launch(1, 1, [array], 0x99)
    assert capturer.end()._kept == [kernel, array]


def test_a_launch_never_reuses_the_last_signature_or_stream_for_others(monkeypatch):
    monkeypatch.setattr(module, "cudart", FakeCalls(lambda name, *args: None))
    kernel = module.Kernel("k", None, 0x1234, 0)
    kernel._launch = fake = _FakeLaunch([8, 4])
    array = _device_array(0x1000)
    kernel.launch(1, 32, [array, np.float32(1.5)], 0x99)
    kernel._launch.sizes = [8, 8]  # the same arity, another type: packed afresh
    kernel.launch(1, 32, [array, np.float64(2.5)], 0x98)
    kernel._launch.sizes = [4, 8]
    kernel.launch(1, 32, [np.int32(7), array], 0x99)
    kernel._launch.sizes = [8, 4]
    kernel.launch((3, 2), 32, [array, np.float32(0.5)], 0x97)  # back to the first signature
    assert [(call[0], call[3], call[4]) for call in fake.calls] == [
        ((1, 1, 1), 0x99, [(0x1000).to_bytes(8, "little"), np.float32(1.5).tobytes()]),
        ((1, 1, 1), 0x98, [(0x1000).to_bytes(8, "little"), np.float64(2.5).tobytes()]),
        ((1, 1, 1), 0x99, [np.int32(7).tobytes(), (0x1000).to_bytes(8, "little")]),
        ((3, 2, 1), 0x97, [(0x1000).to_bytes(8, "little"), np.float32(0.5).tobytes()]),
    ]
    assert len(kernel._packers) == 3
    with pytest.raises(TypeError, match="kernel argument 1: expected a numpy scalar"):
        kernel.launch(1, 32, [array, 1.5], 0x99)  # a bare float has no C type, even after a fit


def test_stream_handles_are_made_once_per_pointer_and_bounded(monkeypatch):
    monkeypatch.setattr(module, "_stream_handles", {})
    first = module._stream_handle(0x99)
    assert module._stream_handle(0x99) is first and int(first) == 0x99
    for ptr in range(module._STREAM_HANDLES + 1):
        assert int(module._stream_handle(0x1000 + ptr)) == 0x1000 + ptr
    assert len(module._stream_handles) <= module._STREAM_HANDLES


def test_a_refused_launch_raises_cuda_error_naming_it():
    kernel = module.Kernel("k", None, 0x1234, 0)
    status = _runtime.driver().CUresult.CUDA_ERROR_INVALID_VALUE
    kernel._launch = lambda *args: (status,)
    with pytest.raises(cuda.CudaError, match="cuLaunchKernel failed with CUDA_ERROR_INVALID_VALUE"):
        kernel.launch(1, 1, [np.int64(1)], 0x99)
    refused = _runtime.runtime().cudaError_t.cudaErrorInvalidDevice
    kernel._set_device = lambda device: (refused,)
    with pytest.raises(cuda.CudaError, match="cudaSetDevice failed with cudaErrorInvalidDevice"):
        kernel.launch(1, 1, [np.int64(1)], 0)  # the null stream: its device is set first
