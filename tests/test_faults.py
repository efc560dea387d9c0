# ruff: noqa: F841
# Kernels assign to their output planes (F841).
"""Injected faults: after each, nothing is corrupted or leaked and the next run is right.

The faults: a failed device allocation during a bind, an NVRTC failure, a driver error in
the middle of a multi-step launch, ``KeyboardInterrupt`` inside a capture and inside a
host run, and out of memory during a capture and during the cuBLAS warm-up of a routed
bind. The host tests fake the CUDA calls each path makes (as tests/test_launch_path.py
and tests/test_rebind.py do) or interrupt a host program at each of its lines; the tests
marked ``gpu`` inject the same faults on a device through the checked CUDA door
(``eagle/cuda/_runtime.py``) and check the results against a float64 host reference.
"""

from __future__ import annotations

import ctypes
import sys
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import cuda.core
import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
from eagle import arrays
from eagle._cache import KeyedCache
from eagle.cuda import (
    Stream,
    _capture_state,
    _records,
    _runtime,
    _stream_capture,
    graph,
    is_capturing,
    module,
)
from eagle.cuda._runtime import CudaError, runtime
from eagle.cuda.graph import StreamCapturer, any_capture_active, record_use
from eagle.gemm import handles as gemm_handles
from eagle.gemm.capture import CublasCaptureHandle
from eagle.gemm.params import gemm_params_for_arrays
from eagle.plan import _route
from eagle.plan._backends import backend_named
from eagle.plan._bound import Bound, Step
from hawk.emit import policy
from tests import _route_kernels as k
from tests._hawk_kernels import saxpy
from tests._util import FakeCalls, fake_calls, rel_error
from tests.test_gemm_capture import FakeDevice
from tests.test_route import _FakeDeviceArray, fake_cublas  # noqa: F401 - the fixture

OOM = ("cudaMallocFromPoolAsync", "cudaErrorMemoryAllocation")


def _oom(call: str = "cudaMallocFromPoolAsync") -> CudaError:
    return CudaError(call, "cudaErrorMemoryAllocation", "injected: out of memory")


# -- KeyboardInterrupt inside a host run -----------------------------------------------------


@hawk.kernel
def two_outputs(x: hawk.Scalar, s: hawk.Mutable[hawk.Scalar], y: hawk.Mutable[hawk.Scalar]):
    s = x * 2.0
    y = s + x * x


def _program(plan: eagle.plan.AutoPlan, dtype: str = "float64") -> Any:
    return backend_named("numpy").emit(plan.kernel, tuple(dtype for _ in plan.kernel.planes))


def _kernels_of(bound: Any) -> list[module.Kernel]:
    """The loaded kernels the steps of ``bound`` launch (read off their enqueue functions)."""
    found: dict[int, module.Kernel] = {}
    for step in bound._steps:
        for cell in step.enqueue.__closure__ or ():
            if isinstance(cell.cell_contents, module.Kernel):
                found.setdefault(id(cell.cell_contents), cell.cell_contents)
    return list(found.values())


def _interrupted(run: Callable[[], None], function: Callable[..., Any], line: int | None) -> bool:
    """Call ``run`` and raise KeyboardInterrupt when ``function`` is about to run its
    ``line`` (None: as it returns, its work done), as a Ctrl-C delivered there would;
    say whether it did (a line on a path not taken is never reached)."""
    code = function.__code__

    def local(frame: Any, event: str, arg: Any) -> Any:
        if (event == "line" and frame.f_lineno == line) or (event == "return" and line is None):
            raise KeyboardInterrupt
        return local

    sys.settrace(lambda frame, event, arg: local if frame.f_code is code else None)
    try:
        run()
    except KeyboardInterrupt:
        return True
    finally:
        sys.settrace(None)
    return False


def _lines(function: Callable[..., Any]) -> list[int | None]:
    """Every line of ``function``'s body, and None (as it returns)."""
    code = function.__code__
    body = sorted({line for _, _, line in code.co_lines() if line and line > code.co_firstlineno})
    return [*body, None]


def test_an_interrupt_anywhere_in_a_host_run_leaves_every_plane_as_it_was(rng):
    plan = eagle.plan.auto(two_outputs)
    program = _program(plan)
    x = rng.standard_normal(300)
    s, y = rng.standard_normal(300), rng.standard_normal(300)
    before = s.copy(), y.copy()
    lines = _lines(program.function)
    for line in lines:
        assert _interrupted(lambda: plan.run(x=x, s=s, y=y), program.function, line), line
        np.testing.assert_array_equal(s, before[0], err_msg=f"line {line}")
        np.testing.assert_array_equal(y, before[1], err_msg=f"line {line}")
    assert len(lines) > 3
    plan.run(x=x, s=s, y=y)  # the next run is right
    np.testing.assert_allclose(s, 2 * x, rtol=1e-15)
    np.testing.assert_allclose(y, 2 * x + x * x, rtol=1e-15)


def test_an_interrupt_in_a_host_run_of_one_plane_leaves_it_as_it_was_or_whole(rng):
    plan = eagle.plan.auto(k.contract)
    program = _program(plan)
    w, f = rng.standard_normal((k.R, k.U)), rng.standard_normal((k.R, k.B))
    y = rng.standard_normal(k.B * k.U)
    before, expected = y.copy(), (f.T @ w).reshape(-1)
    outcomes = []
    for line in _lines(program.function):
        if not _interrupted(lambda: plan.run(w=w, f=f, y=y), program.function, line):
            outcomes.append("not reached")
        elif np.array_equal(y, before):
            outcomes.append("as it was")
        else:  # the interrupt came after the one store that completes the run
            outcomes.append("whole")
        if outcomes[-1] != "as it was":
            np.testing.assert_allclose(y, expected, rtol=1e-12, err_msg=f"line {line}")
            y[...] = before
    assert outcomes[-1] == "whole" and outcomes.count("as it was") > 3, outcomes
    plan.run(w=w, f=f, y=y)
    np.testing.assert_allclose(y, expected, rtol=1e-12)


def test_an_interrupt_between_the_products_of_a_host_adjoint_leaves_both_gradients(rng):
    adjoint = eagle.diff.reverse(eagle.plan.auto(k.contract, contraction="gemm", host_route="gemm"))
    w, f = rng.standard_normal((k.R, k.U)), rng.standard_normal((k.R, k.B))
    y_bar = rng.standard_normal(k.B * k.U)
    w_bar, f_bar = rng.standard_normal((k.R, k.U)), rng.standard_normal((k.R, k.B))
    before = w_bar.copy(), f_bar.copy()
    bound = adjoint.bind(w=w, f=f, y_bar=y_bar, w_bar=w_bar, f_bar=f_bar)
    (product,) = bound._enqueues
    first, second = product._products

    def interrupted() -> None:
        raise KeyboardInterrupt

    product._products = [first, interrupted]
    with pytest.raises(KeyboardInterrupt):
        bound.launch()
    np.testing.assert_array_equal(w_bar, before[0])
    np.testing.assert_array_equal(f_bar, before[1])
    product._products = [first, second]
    bound.launch()
    g = y_bar.reshape(k.B, k.U)
    np.testing.assert_allclose(w_bar, before[0] + f @ g, rtol=1e-12)
    np.testing.assert_allclose(f_bar, before[1] + w @ g.T, rtol=1e-12)


def test_an_interrupt_after_a_host_product_leaves_its_output_whole(rng):
    plan = eagle.plan.auto(k.contract, contraction="gemm", host_route="gemm")
    w, f = rng.standard_normal((k.R, k.U)), rng.standard_normal((k.R, k.B))
    y = rng.standard_normal(k.B * k.U)
    bound = plan.bind(w=w, f=f, y=y)
    (product,) = bound._enqueues
    (multiply,) = product._products

    def then_interrupted() -> None:
        multiply()
        raise KeyboardInterrupt

    product._products = [then_interrupted]
    with pytest.raises(KeyboardInterrupt):
        bound.launch()
    np.testing.assert_allclose(y, (f.T @ w).reshape(-1), rtol=1e-12)  # all, not half


# -- capture: interrupts, out of memory, a driver error between steps ------------------------


class _FakeCapture:
    """CUDA's capture and graph calls (those of ``eagle.cuda.graph`` and the capture it
    re-exports), over named graphs.

    ``fail[name]`` is raised by the next call of ``name`` instead of it;
    ``after[name]`` is raised just after the next call of ``name`` did its work (a
    Ctrl-C delivered as it returns). ``live`` holds the graphs and instantiated graphs
    not yet destroyed.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.capturing: set[int] = set()
        self.live: set[str] = set()
        self.made = 0
        self.fail: dict[str, BaseException] = {}
        self.after: dict[str, BaseException] = {}
        fake_calls(monkeypatch, self.call, graph, _stream_capture, _capture_state)

    def call(self, name: str, *args: Any) -> Any:
        if name in self.fail:
            raise self.fail.pop(name)
        result = getattr(self, name)(*args)
        if name in self.after:
            raise self.after.pop(name)
        return result

    def cudaStreamGetDevice(self, stream: int) -> int:
        return 0

    def cudaStreamBeginCapture(self, stream: int, mode: Any) -> None:
        if stream in self.capturing:
            raise CudaError("cudaStreamBeginCapture", "cudaErrorIllegalState", "capturing")
        self.capturing.add(stream)

    def cudaStreamEndCapture(self, stream: int) -> str:
        if stream not in self.capturing:
            raise CudaError("cudaStreamEndCapture", "cudaErrorIllegalState", "not capturing")
        self.capturing.discard(stream)
        self.made += 1
        self.live.add(f"graph{self.made}")
        return f"graph{self.made}"

    def cudaStreamIsCapturing(self, stream: int) -> Any:
        status = runtime().cudaStreamCaptureStatus
        active = stream in self.capturing
        return (
            status.cudaStreamCaptureStatusActive if active else status.cudaStreamCaptureStatusNone
        )

    def cudaGraphInstantiate(self, handle: str, flags: int) -> str:
        self.live.add(f"exec of {handle}")
        return f"exec of {handle}"

    def cudaGraphDestroy(self, handle: str) -> None:
        self.live.remove(handle)

    def cudaGraphExecDestroy(self, handle: str) -> None:
        self.live.remove(handle)


@pytest.fixture
def capture(monkeypatch: pytest.MonkeyPatch) -> _FakeCapture:
    assert not any_capture_active()
    return _FakeCapture(monkeypatch)


STREAM = 0x77


class _Owner:
    """Something a graph keeps alive and must tell when it lets go (a cuBLAS handle)."""

    def __init__(self) -> None:
        self._live_graphs: weakref.WeakSet[Any] = weakref.WeakSet()
        self.released = 0

    def _graphs_released(self) -> None:
        self.released += 1


def _bound(*steps: Callable[[Any], None]) -> Bound:
    return Bound("device", 0, [Step(step) for step in steps])


def _captures_cleanly(capture: _FakeCapture, bound: Bound) -> None:
    """A capture after the fault works, and nothing of the faulted one is left."""
    launcher = bound.capture(STREAM)
    assert capture.live == {f"exec of graph{capture.made}", f"graph{capture.made}"}
    launcher._graph.destroy()
    assert capture.live == set() and capture.capturing == set() and not any_capture_active()


@pytest.mark.parametrize("fault", [KeyboardInterrupt(), _oom("cuLaunchKernel")], ids=repr)
def test_a_fault_inside_a_capture_leaves_no_capture_open(capture, fault):
    owner, enqueued = _Owner(), []

    def step(stream: int) -> None:
        record_use(stream, owner)
        enqueued.append(stream)

    def failing(stream: int) -> None:
        raise fault

    with pytest.raises(type(fault)):
        _bound(step, failing, step).capture(STREAM)
    assert enqueued == [STREAM]  # stopped at the fault
    assert capture.capturing == set() and capture.live == set() and not any_capture_active()
    assert len(owner._live_graphs) == 0
    _captures_cleanly(capture, _bound(step, step))
    assert len(owner._live_graphs) == 0  # the clean capture's graph, destroyed, let go too


def test_an_interrupt_as_the_capture_begins_leaves_no_capture_open(capture):
    capture.after["cudaStreamBeginCapture"] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt), StreamCapturer(STREAM):
        pytest.fail("the body must not run")
    assert capture.capturing == set() and capture.live == set() and not any_capture_active()
    _captures_cleanly(capture, _bound(lambda stream: None))


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_interrupt_as_the_capture_ends_leaves_no_capture_open(capture, when):
    capturer = StreamCapturer(STREAM)
    capturer.begin()
    (capture.fail if when == "before" else capture.after)["cudaStreamEndCapture"] = (
        KeyboardInterrupt()
    )
    with pytest.raises(KeyboardInterrupt):
        capturer.end()
    assert capture.capturing == set() and not any_capture_active() and not capturer._open
    if when == "before":
        assert capture.live == set()  # the capture eagle ended for it, discarded
    else:
        assert capture.live == {"graph1"}  # its handle never came back: lost, not open
        capture.live.clear()
    _captures_cleanly(capture, _bound(lambda stream: None))


@pytest.mark.parametrize("fault", [_oom("cudaGraphInstantiate"), KeyboardInterrupt()], ids=repr)
def test_a_fault_as_the_graph_is_instantiated_frees_it_and_what_it_kept(capture, fault):
    owner = _Owner()
    bound = _bound(lambda stream: record_use(stream, owner))
    capture.fail["cudaGraphInstantiate"] = fault
    with pytest.raises(type(fault)):
        bound.capture(STREAM)
    assert capture.live == set() and len(owner._live_graphs) == 0 and owner.released == 1
    _captures_cleanly(capture, bound)


def test_a_driver_error_between_the_steps_of_a_launch_leaves_them_usable():
    enqueued: list[str] = []
    faults = [CudaError("cuLaunchKernel", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "injected")]

    def second(stream: Any) -> None:
        if faults:
            raise faults.pop()
        enqueued.append("second")

    bound = _bound(lambda s: enqueued.append("first"), second, lambda s: enqueued.append("third"))
    with pytest.raises(CudaError, match="CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"):
        bound.launch(STREAM)
    assert enqueued == ["first"]
    bound.launch(STREAM)
    assert enqueued == ["first", "first", "second", "third"]


def test_a_driver_error_between_the_products_of_a_routed_adjoint(fake_cublas):  # noqa: F811
    handles, _ = fake_cublas
    with policy.using(contraction="gemm"):
        adjoint = eagle.diff.reverse(eagle.plan.auto(k.contract))
    planes = {
        "w": _FakeDeviceArray((k.R, k.U), 0x10000),
        "f": _FakeDeviceArray((k.R, k.B), 0x20000),
        "y_bar": _FakeDeviceArray((k.B * k.U,), 0x30000),
        "w_bar": _FakeDeviceArray((k.R, k.U), 0x40000),
        "f_bar": _FakeDeviceArray((k.R, k.B), 0x50000),
    }
    bound = adjoint.bind(**planes)
    launch = bound._enqueues[0].launch  # a step per product, of one GemmLaunch
    handle, (first, second) = launch._launches[0x11]
    faults = [CudaError("cublasSgemm", "CUBLAS_STATUS_EXECUTION_FAILED", "injected")]

    def failing_once() -> None:
        if faults:
            raise faults.pop()
        second()

    launch._launches[0x11] = (handle, (first, failing_once))
    with pytest.raises(CudaError, match="CUBLAS_STATUS_EXECUTION_FAILED"):
        bound.launch()
    assert len(handles[0x11].calls) == 1
    bound.launch()
    outs = [operands["out"] for _, operands in handles[0x11].calls]
    assert outs[1:] == [outs[0], 0x50000 if outs[0] == 0x40000 else 0x40000]
    assert len(handles[0x11].warmed) == 2  # warmed once each, before the fault


# -- a failed device allocation during a bind ------------------------------------------------


class _FakeSlabCalls:
    """The calls an error-record slab makes, over host memory; ``fail`` names one to refuse."""

    def __init__(self, fail: str | None) -> None:
        self.fail = fail
        self.memory = ctypes.create_string_buffer(_records._PER_SLAB * _records.WORDS * 8)
        self.freed: list[tuple[str, int]] = []

    def __call__(self, name: str, *args: Any) -> Any:
        if name == self.fail:
            self.fail = None
            raise _oom(name)
        if name in ("cudaFree", "cudaFreeHost"):
            self.freed.append((name, args[0]))
        return {
            "cudaHostAlloc": ctypes.addressof(self.memory),
            "cudaHostGetDevicePointer": 0xD000,
            "cudaMalloc": 0xE000,
        }.get(name)


@pytest.mark.parametrize("fail", ["cudaHostGetDevicePointer", "cudaMalloc", "cudaMemset"])
def test_an_error_record_that_cannot_be_allocated_gives_back_what_it_took(monkeypatch, fail):
    fake = _FakeSlabCalls(fail)
    monkeypatch.setattr(_records, "cudart", FakeCalls(fake))
    monkeypatch.setattr(_records, "ensure_device", lambda device: None)
    monkeypatch.setattr(_records, "_slabs", {})
    monkeypatch.setattr(_records, "_records", KeyedCache("error records", 4))
    with pytest.raises(CudaError, match="cudaErrorMemoryAllocation"):
        _records.record_for("kernel", 0, lambda words: None)
    host = ("cudaFreeHost", ctypes.addressof(fake.memory))
    assert fake.freed == ([("cudaFree", 0xE000), host] if fail == "cudaMemset" else [host])
    assert _records._slabs == {0: []} and len(_records._records) == 0
    record = _records.record_for("kernel", 0, lambda words: None)  # the next one is made
    assert record.ptr == 0xD000 and record._slot == 0
    assert len(_records._slabs[0][0].translates) == 1


def test_a_routed_bind_whose_cublas_handle_cannot_be_made_keeps_nothing(
    fake_cublas,  # noqa: F811
    monkeypatch,
):
    handles, _ = fake_cublas
    made = _route.stream_handle
    faults = [_oom()]  # the handle's workspace

    def stream_handle(stream_ptr: int, device: int) -> Any:
        if faults:
            raise faults.pop()
        return made(stream_ptr, device)

    monkeypatch.setattr(_route, "stream_handle", stream_handle)
    plan = eagle.plan.auto(k.contract, contraction="gemm")
    planes = {
        "w": _FakeDeviceArray((k.R, k.U), 0x10000),
        "f": _FakeDeviceArray((k.R, k.B), 0x20000),
        "y": _FakeDeviceArray((k.B * k.U,), 0x30000),
    }
    with pytest.raises(CudaError, match="cudaErrorMemoryAllocation"):
        plan.run(**planes)
    assert handles == {} and not plan._bindings and plan._bindings.last is None
    plan.run(**planes)
    assert len(handles[0x11].warmed) == 1 and len(handles[0x11].calls) == 1


# -- out of memory during the cuBLAS warm-up of a routed bind --------------------------------


def test_out_of_memory_as_a_routed_bind_warms_up_keeps_nothing(fake_cublas):  # noqa: F811
    handles, _ = fake_cublas
    plan = eagle.plan.auto(k.contract, contraction="gemm")
    planes = {
        "w": _FakeDeviceArray((k.R, k.U), 0x10000),
        "f": _FakeDeviceArray((k.R, k.B), 0x20000),
        "y": _FakeDeviceArray((k.B * k.U,), 0x30000),
    }
    plan.bind(**{**planes, "y": _FakeDeviceArray((k.B * k.U,), 0x38000)})  # makes the handle
    handle = handles[0x11]
    warm = handle.warm
    faults = [_oom()]  # the scratch matrix of a product not warmed yet

    def failing_warm(params: Any, operands: Any, *, keep_out: bool = False) -> None:
        key = (params, *(operands[role].ptr % 16 for role in ("a", "b", "out")))
        if faults and key not in handle.keys:
            raise faults.pop()
        warm(params, operands, keep_out=keep_out)

    handle.warm = failing_warm
    planes["y"] = _FakeDeviceArray((k.B * k.U,), 0x30008)  # another alignment: warmed anew
    with pytest.raises(CudaError, match="cudaErrorMemoryAllocation"):
        plan.run(**planes)
    assert len(handle.warmed) == 1 and not plan._bindings and handle.calls == []
    plan.run(**planes)
    assert len(handle.warmed) == 2 and len(handle.calls) == 1


def test_out_of_memory_in_a_real_handles_warm_up_leaves_it_unwarmed(monkeypatch, rng):
    device = FakeDevice(monkeypatch)  # cuBLAS's calls done on host memory
    a = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    out = np.full((6, 5), 7.0, np.float32)
    operands = {"a": device.array(a), "b": device.array(b), "out": device.array(out)}
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params = gemm_params_for_arrays(operands["a"], operands["b"], operands["out"])
    allocate = device._workspace
    faults = [_oom()]

    def failing(nbytes: int) -> Any:
        if faults:
            raise faults.pop()
        return allocate(nbytes)

    monkeypatch.setattr(device, "_workspace", failing)
    with pytest.raises(CudaError, match="cudaErrorMemoryAllocation"):
        handle.warm(params, operands, keep_out=True)
    assert handle._warmed == set() and handle.alive
    handle.warm(params, operands, keep_out=True)
    assert len(handle._warmed) == 1
    np.testing.assert_array_equal(operands["out"].values, 7.0)  # warmed into scratch
    handle.gemm(params, operands)
    assert rel_error(operands["out"].values, a.astype(np.float64) @ b) < 1e-6
    handle.destroy()


# -- an NVRTC failure ------------------------------------------------------------------------


class _FailingProgram:
    """cuda.core's Program, whose compile fails as NVRTC does when it runs out of memory."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def compile(self, target: str) -> Any:
        raise RuntimeError("NVRTC_ERROR_OUT_OF_MEMORY: compilation log: injected")

    def close(self) -> None:
        pass


def _nvrtc_fails_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next NVRTC compile fails (as :class:`_FailingProgram`); later ones compile."""
    real, faults = cuda.core.Program, [_FailingProgram]

    def program(*args: Any, **kwargs: Any) -> Any:
        return (faults.pop() if faults else real)(*args, **kwargs)

    monkeypatch.setattr(cuda.core, "Program", program)


def _device_plane(n: int, ptr: int) -> arrays.Array:
    return arrays.Array(ptr=ptr, shape=(n,), dtype=np.dtype(np.float32), strides=(4,),
                        device_index=0)  # fmt: skip


class _Record:
    ptr, device_index = 0x7000, 0

    def check(self) -> None:
        pass


def test_an_nvrtc_failure_during_a_bind_keeps_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(module, "_images", OrderedDict())
    monkeypatch.setattr(module, "_kernels", {})
    monkeypatch.setattr(module, "device_arch", lambda device: "sm_90")
    monkeypatch.setattr(module, "ensure_device", lambda device: None)
    seven = FakeCalls(lambda name, *args: 7)  # load, get kernel, function
    monkeypatch.setattr(module, "cudadrv", seven)
    monkeypatch.setattr(_records, "record_for", lambda key, device, translate: _Record())
    _nvrtc_fails_once(monkeypatch)
    plan = eagle.plan.auto(saxpy)
    x, y = _device_plane(1000, 0x10000), _device_plane(1000, 0x20000)
    with pytest.raises(module.CompileError, match="NVRTC_ERROR_OUT_OF_MEMORY: hawk_saxpy"):
        plan.bind(a=2.0, x=x, y=y)
    assert module._kernels == {} and not module._images
    assert list(tmp_path.iterdir()) == []  # nothing on disk, no temporary file
    bound = plan.bind(a=2.0, x=x, y=y)  # the next bind compiles and loads
    assert bound.route == "loop" and len(module._kernels) == 1
    assert [p.suffix for p in tmp_path.iterdir()] == [".img"]


def test_the_injected_program_fails_as_nvrtc_does(monkeypatch, tmp_path):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(module, "_images", OrderedDict())
    _nvrtc_fails_once(monkeypatch)
    source = 'extern "C" __global__ void k() {}'
    with pytest.raises(module.CompileError) as info:
        module.compile_cuda(source, name="k")
    assert (info.value.call, info.value.status) == (
        "nvrtcCompileProgram",
        "NVRTC_ERROR_OUT_OF_MEMORY",
    )
    assert list(tmp_path.iterdir()) == [] and not module._images
    assert module.compile_cuda(source, name="k")[:4] == b"\x7fELF"


def test_a_load_that_fails_after_the_library_is_loaded_unloads_it(monkeypatch, tmp_path):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(module, "_kernels", {})
    monkeypatch.setattr(module, "device_arch", lambda device: "sm_90")
    monkeypatch.setattr(module, "ensure_device", lambda device: None)
    calls: list[str] = []

    def dcall(name: str, *args: Any) -> Any:
        calls.append(name)
        if name == "cuKernelGetFunction" and calls.count(name) == 1:
            raise CudaError(name, "CUDA_ERROR_OUT_OF_MEMORY", "injected")
        return 7

    monkeypatch.setattr(module, "cudadrv", FakeCalls(dcall))
    source = 'extern "C" __global__ void unloaded(float* x) { x[threadIdx.x] = 1.0f; }'
    with pytest.raises(CudaError, match="CUDA_ERROR_OUT_OF_MEMORY"):
        module.load_kernel(source, "unloaded")
    assert calls == [
        "cuLibraryLoadData", "cuLibraryGetKernel", "cuKernelGetFunction", "cuLibraryUnload"
    ]  # fmt: skip
    assert module._kernels == {}
    assert module.load_kernel(source, "unloaded").name == "unloaded"


# == on a device: the same faults through the checked CUDA door ==============================


class _Door:
    """Faults injected into the checked CUDA door (each function ``_runtime._checked``
    makes): ``fail(name, n)`` makes the ``n``-th next call of ``name`` raise ``error``
    instead of running; ``interrupt_after(name)`` raises KeyboardInterrupt once the next
    call of ``name`` ran."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = _runtime._checked
        self._rules: list[list[Any]] = []

        def checked(kind: str, name: str, function: Any) -> Any:
            inner = real(kind, name, function)
            return lambda *args: self._call(name, inner, args)

        monkeypatch.setattr(_runtime, "_checked", checked)
        _forget_checked()  # so that every function is looked up again, through the door

    def fail(self, name: str, status: str, nth: int = 1) -> None:
        self._rules.append([name, nth, CudaError(name, status, "injected"), False])

    def interrupt_after(self, name: str) -> None:
        self._rules.append([name, 1, KeyboardInterrupt(), True])

    @property
    def pending(self) -> int:
        return len(self._rules)

    def _call(self, name: str, inner: Any, args: tuple) -> Any:
        for rule in self._rules:
            if rule[0] == name:
                rule[1] -= 1
                if rule[1] == 0:
                    self._rules.remove(rule)
                    if rule[3]:
                        inner(*args)
                    raise rule[2]
                break
        return inner(*args)


def _forget_checked() -> None:
    """Drop the functions the checked bindings keep (each is looked up again on use)."""
    for binding in (_runtime.cudart, _runtime.cudadrv, _runtime.nvrtc):
        vars(binding).clear()


@pytest.fixture
def door(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Door]:
    yield _Door(monkeypatch)
    _forget_checked()  # before monkeypatch puts _checked back: the next lookups are plain


def _routed(rng: np.random.Generator) -> tuple[eagle.plan.AutoPlan, dict[str, Any], np.ndarray]:
    """A routed plan, its device planes (y poisoned) and y's float64 reference."""
    w = rng.standard_normal((k.R, k.U)).astype(np.float32)
    f = rng.standard_normal((k.R, k.B)).astype(np.float32)
    planes = {
        "w": arrays.asarray(w, device="cuda:0"),
        "f": arrays.asarray(f, device="cuda:0"),
        "y": arrays.full(k.B * k.U, np.nan, "float32", "cuda:0"),
    }
    reference = (f.astype(np.float64).T @ w).reshape(-1)
    return eagle.plan.auto(k.contract, contraction="gemm"), planes, reference


@pytest.mark.gpu
def test_gpu_a_failed_allocation_during_a_routed_bind_keeps_nothing(door, rng):
    plan, planes, reference = _routed(rng)
    stream = Stream(non_blocking=True)
    with stream:
        door.fail(*OOM)  # the new stream's cuBLAS workspace
        with pytest.raises(CudaError, match="cudaErrorMemoryAllocation"):
            plan.bind(**planes)
        assert door.pending == 0 and (0, stream.ptr()) not in gemm_handles._stream_handles
        assert not plan._bindings
        plan.run(**planes)
    stream.synchronize()
    assert rel_error(planes["y"].numpy(), reference) < 1e-5


@pytest.mark.gpu
def test_gpu_out_of_memory_in_the_warm_up_of_a_routed_bind(door, rng):
    plan, planes, reference = _routed(rng)
    stream = Stream(non_blocking=True)
    with stream:
        door.fail(*OOM, nth=2)  # the workspace is made; the warm-up's scratch is refused
        with pytest.raises(CudaError, match="cudaErrorMemoryAllocation"):
            plan.bind(**planes)
        handle = gemm_handles._stream_handles[(0, stream.ptr())]
        assert door.pending == 0 and handle.alive and handle._warmed == set()
        launcher = plan.bind(**planes).capture(stream)  # warmed now, then captured
    launcher.launch()
    launcher.synchronize()
    assert rel_error(planes["y"].numpy(), reference) < 1e-5
    launcher._graph.destroy()


@pytest.mark.gpu
def test_gpu_an_nvrtc_failure_during_a_bind_keeps_nothing(monkeypatch, tmp_path, rng):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(module, "_images", OrderedDict())
    monkeypatch.setattr(module, "_kernels", {})
    _nvrtc_fails_once(monkeypatch)
    plan = eagle.plan.auto(saxpy)
    x = rng.standard_normal(1000).astype(np.float32)
    y = rng.standard_normal(1000).astype(np.float32)
    x_d, y_d = arrays.asarray(x, device="cuda:0"), arrays.asarray(y, device="cuda:0")
    with pytest.raises(module.CompileError, match="NVRTC_ERROR_OUT_OF_MEMORY"):
        plan.bind(a=2.0, x=x_d, y=y_d)
    assert module._kernels == {} and not module._images
    plan.run(a=2.0, x=x_d, y=y_d)
    assert rel_error(y_d.numpy(), 2.0 * x.astype(np.float64) + y) < 1e-6


@pytest.mark.gpu
def test_gpu_a_driver_error_in_the_middle_of_a_multi_step_launch(monkeypatch, rng):
    primal = eagle.plan.auto(two_outputs)
    adjoint = eagle.diff.reverse([primal, primal])
    n = 4096
    x, s_bar, y_bar = (rng.standard_normal(n) for _ in range(3))
    planes = {name: arrays.asarray(v, device="cuda:0") for name, v in
              (("x", x), ("s_bar", s_bar), ("y_bar", y_bar))}  # fmt: skip
    planes["x_bar"] = arrays.full(n, np.nan, "float64", "cuda:0")
    bound = adjoint.bind(planes, planes)  # two launches of the adjoint's kernel
    (kernel,) = _kernels_of(bound)
    real, launched = kernel._launch, []

    def second_fails(*args: Any) -> Any:
        launched.append(args)
        if len(launched) == 2:
            return (driver_status("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),)
        return real(*args)

    monkeypatch.setattr(kernel, "_launch", second_fails)
    with pytest.raises(CudaError, match="CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"):
        bound.launch()
    assert len(launched) == 2
    _runtime.cudart.cudaStreamSynchronize(bound.stream())
    planes["x_bar"].fill(0.0)
    bound.launch()  # the next launch runs both steps
    _runtime.cudart.cudaStreamSynchronize(bound.stream())
    expected = 2 * (2 * s_bar + (2 + 2 * x) * y_bar)
    assert rel_error(planes["x_bar"].numpy(), expected) < 1e-12


def driver_status(name: str) -> Any:
    return getattr(_runtime.driver().CUresult, name)


@pytest.mark.gpu
@pytest.mark.parametrize("where", ["in the body", "as the capture begins"])
def test_gpu_an_interrupt_inside_a_capture_leaves_no_capture_open(door, rng, where):
    plan = eagle.plan.auto(saxpy)
    x = rng.standard_normal(10_000)
    y = rng.standard_normal(10_000)
    x_d, y_d = arrays.asarray(x, device="cuda:0"), arrays.asarray(y, device="cuda:0")
    bound = plan.bind(a=2.0, x=x_d, y=y_d)
    stream = Stream(non_blocking=True)
    if where == "as the capture begins":
        door.interrupt_after("cudaStreamBeginCapture")
    with pytest.raises(KeyboardInterrupt), StreamCapturer(stream):
        bound.launch(stream)
        raise KeyboardInterrupt
    assert not is_capturing(stream) and not any_capture_active()
    launcher = bound.capture(stream)
    launcher.launch()
    launcher.synchronize()
    assert rel_error(y_d.numpy(), 2.0 * x + y) < 1e-12
    launcher._graph.destroy()


@pytest.mark.gpu
@pytest.mark.parametrize("where", ["cudaGraphInstantiate", "cuLaunchKernel"])
def test_gpu_out_of_memory_during_a_capture(door, monkeypatch, rng, where):
    plan = eagle.plan.auto(saxpy)
    x = rng.standard_normal(10_000)
    y = rng.standard_normal(10_000)
    x_d, y_d = arrays.asarray(x, device="cuda:0"), arrays.asarray(y, device="cuda:0")
    bound = plan.bind(a=2.0, x=x_d, y=y_d)
    stream = Stream(non_blocking=True)
    if where == "cudaGraphInstantiate":
        door.fail(where, "cudaErrorMemoryAllocation")
        raised = "cudaErrorMemoryAllocation"
    else:
        (kernel,) = _kernels_of(bound)
        real, faults = kernel._launch, [driver_status("CUDA_ERROR_OUT_OF_MEMORY")]
        monkeypatch.setattr(kernel, "_launch", lambda *a: (faults.pop(),) if faults else real(*a))
        raised = "CUDA_ERROR_OUT_OF_MEMORY"
    with pytest.raises(CudaError, match=raised):
        bound.capture(stream)
    assert not is_capturing(stream) and not any_capture_active()
    launcher = bound.capture(stream)
    launcher.launch()
    launcher.synchronize()
    assert rel_error(y_d.numpy(), 2.0 * x + y) < 1e-12
    launcher._graph.destroy()
