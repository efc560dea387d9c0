"""Host tests of where eagle's work goes (the default stream, another framework's
current stream, ``with stream:``), the per-stream cuBLAS handles' lifetimes,
``plan.source`` and the compile log."""

import asyncio
import contextvars
import logging
import sys
from collections import OrderedDict

import numpy as np
import pytest

import eagle.plan
import hawk
from eagle import arrays, cuda
from eagle.arrays import _foreign, _holder
from eagle.cuda import module
from eagle.cuda import stream as streams
from eagle.gemm import handles, matmul_step, release_handles
from tests._hawk_kernels import contract
from tests._util import FakeCalls, rel_error
from tests.test_gemm_capture import FakeDevice


@hawk.kernel
def axpb(x: hawk.Scalar, a: hawk.Param, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + 1.0  # noqa: F841


class _TheirStream:
    def __init__(self, ptr):
        self.cuda_stream = ptr


def _foreign_array(framework: str) -> arrays.Array:
    """A device eagle Array over memory from ``framework``, as asarray makes it."""
    return arrays.Array(
        ptr=0x1000, shape=(4,), dtype=np.dtype("float32"), strides=(4,), device_index=0,
        owner=_foreign.Source(object(), framework),
    )  # fmt: skip


def test_the_default_stream_is_cudas_legacy_stream_and_with_stream_overrides(monkeypatch):
    assert cuda.current_stream().ptr() == streams.DEFAULT_STREAM == 0
    assert cuda.current_stream() is cuda.current_stream()
    with pytest.raises(ValueError, match="default stream cannot be destroyed"):
        cuda.current_stream().destroy()
    assert streams.launch_stream([np.ones(3), 2.0]) == 0
    monkeypatch.setitem(streams.FRAMEWORK_STREAMS, "torch", lambda device: 0x70 + device)
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch", object()))
    assert streams.launch_stream([2.0, _foreign_array("torch")]) == 0x70
    assert streams.launch_stream([_foreign_array("torch")], device=1) == 0x71
    assert streams.launch_stream([_foreign_array(None)]) == 0
    with streams.Stream.external(0x99):
        assert streams.launch_stream([_foreign_array("torch")]) == 0x99
        assert cuda.current_stream().ptr() == 0x99
    with pytest.raises(TypeError, match="not None"):
        streams.Stream.external(None)


def test_each_asyncio_task_has_its_own_with_stream_blocks():
    """The blocks were kept per thread: a task saw another's stream, and leaving one
    popped another's."""
    first, second = streams.Stream.external(0x1111), streams.Stream.external(0x2222)

    async def inside(stream, start: float) -> tuple[int, int]:
        await asyncio.sleep(start)
        if stream is None:
            await asyncio.sleep(0.01)
            return cuda.current_stream().ptr(), cuda.current_stream().ptr()
        with stream:
            seen = cuda.current_stream().ptr()
            await asyncio.sleep(0.02)
            return seen, cuda.current_stream().ptr()

    async def three():
        return await asyncio.gather(inside(first, 0.0), inside(None, 0.005), inside(second, 0.01))

    assert asyncio.run(three()) == [(0x1111, 0x1111), (0, 0), (0x2222, 0x2222)]
    assert cuda.current_stream().ptr() == 0
    first.__enter__()
    with pytest.raises(RuntimeError, match=r"the block is not open in this thread or task"):
        contextvars.Context().run(first.__exit__, None, None, None)  # (where it is not open)
    child = contextvars.copy_context()  # a task's, started inside the block: open there too
    child.run(first.__exit__, None, None, None)  # ends it for that task alone
    assert child.run(lambda: cuda.current_stream().ptr()) == 0
    assert cuda.current_stream().ptr() == 0x1111
    first.__exit__(None, None, None)
    assert cuda.current_stream().ptr() == 0


def test_a_stream_block_left_out_of_order_ends_its_own_block():
    """A generator suspended inside ``with first:`` and finished inside ``with second:``
    leaves ``first`` out of order: its block ends, and ``second`` stays current (the
    token-based version left ``first`` current for good)."""
    first, second = streams.Stream.external(0x1111), streams.Stream.external(0x2222)

    def inside():
        with first:
            yield cuda.current_stream().ptr()

    steps = inside()
    assert next(steps) == 0x1111
    with second:
        assert cuda.current_stream().ptr() == 0x2222
        assert next(steps, None) is None  # first's block ends here
        assert cuda.current_stream().ptr() == 0x2222
    assert cuda.current_stream().ptr() == 0 and streams.scoped_stream() is None


def test_a_framework_stream_is_found_without_importing_the_framework(monkeypatch):
    class Array:
        pass

    Array.__module__ = "cupy._core.core"
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    assert streams.framework_stream(Array()) is None  # cupy not imported: never imported
    monkeypatch.setitem(sys.modules, "cupy", object())
    monkeypatch.setitem(streams.FRAMEWORK_STREAMS, "cupy", lambda device: 0x44)
    assert streams.framework_stream(Array()) == 0x44


def test_a_foreign_import_remembers_its_framework_and_orders_the_launch_stream(monkeypatch):
    torch = pytest.importorskip("torch")
    tensor = torch.zeros(4)
    wrapped = arrays.asarray(tensor)  # on the host: a numpy view, no stream
    assert wrapped.is_host and wrapped.ptr == tensor.data_ptr()
    waits = []
    monkeypatch.setattr(_foreign, "order", lambda producer, consumer: waits.append(consumer))
    monkeypatch.setitem(streams.FRAMEWORK_STREAMS, "torch", lambda device: 0x70)
    monkeypatch.setattr(
        _holder, "cudart", FakeCalls(lambda name, ptr: type("A", (), {"device": 0}))
    )

    class Interface:  # a torch tensor as the CUDA array interface shows it
        __module__ = "torch"

        def __init__(self):
            self.__cuda_array_interface__ = {
                "shape": (4,), "typestr": "<f4", "data": (0, False), "version": 3, "stream": 0x55,
            }  # fmt: skip

    found = arrays.asarray(Interface())
    assert waits == [0x70] and found._owner.framework == "torch"


def test_plan_run_takes_torch_tensors_and_writes_through_them():
    torch = pytest.importorskip("torch")
    plan = eagle.plan.auto(axpb)
    x, y = torch.arange(4.0, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    plan.run(x=x, a=2.0, y=y)
    plan.run(x=x, a=3.0, y=y)  # reused: the tensors' keys did not change
    assert len(plan._bindings) == 1
    np.testing.assert_array_equal(y.numpy(), 3.0 * np.arange(4.0) + 1.0)
    grad = torch.ones(4, dtype=torch.float64, requires_grad=True)
    plan.run(x=grad, a=1.0, y=y)  # read through, as detach() would
    np.testing.assert_array_equal(y.numpy(), np.full(4, 2.0))


def test_plan_source_gives_the_numpy_program_and_the_cuda_c():
    plan = eagle.plan.auto(axpb)
    host, device = plan.source("host"), plan.source("device")
    assert host.startswith("def hawk_axpb(") and "p_y[...] =" in host
    assert 'extern "C"' in device and "float" in device and "double*" not in device
    assert "double" in plan.source("device", "float64")
    assert plan.source("host", np.float64).startswith("def hawk_axpb(")
    with pytest.raises(ValueError, match="side must be 'host' or 'device'"):
        plan.source("gpu")
    with pytest.raises(ValueError, match="dtype must be one of float16, bfloat16"):
        plan.source("host", "int32")


def test_plan_source_of_a_routed_plan_gives_its_products():
    plan = eagle.plan.auto(contract, contraction="gemm", host_route="gemm")
    for side in ("host", "device"):
        source = plan.source(side)
        assert "def hawk_" not in source and "__global__" not in source
        assert "y = f.T @ w  # f: (16, 12), w: (16, 8), y: (12, 8)" in source
    assert "numpy.matmul" in plan.source("host")
    assert "(device, float64)" in plan.source("device", "float64")
    calls = {"float64": "Dgemm", "float32": "Sgemm", "bfloat16": "GemmEx", "float16": "GemmEx"}
    for dtype, call in calls.items():  # the function the routed bind calls, by dtype
        assert f"cuBLAS (cublas{call})" in plan.source("device", dtype)
    tf32 = eagle.plan.auto(contract, contraction="gemm", math="tf32")
    assert "cuBLAS (cublasGemmEx)" in tf32.source("device")
    loop = eagle.plan.auto(contract, contraction="gemm")  # the host keeps its loop
    assert loop.source("host").startswith("def hawk_contract(")


def test_compiles_are_logged_under_the_eagle_logger(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(module, "_images", OrderedDict())
    source = 'extern "C" __global__ void logged(float* x) { x[threadIdx.x] += 1.0f; }'
    with caplog.at_level(logging.DEBUG, logger="eagle"):
        module.compile_cuda(source, name="logged")
        module.compile_cuda(source, name="logged")  # the process cache: nothing to say
        monkeypatch.setattr(module, "_images", OrderedDict())
        module.compile_cuda(source, name="logged")  # the disk cache
    records = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert len(records) == 2, records
    (name, level, message), (_, hit_level, hit) = records
    assert name == "eagle.cuda.module" and level == logging.INFO
    assert message.startswith("compiled logged for sm_90 with NVRTC in ") and "ms" in message
    assert hit_level == logging.DEBUG and "disk cache hit" in hit


def test_release_handles_destroys_the_stream_handles_and_new_ones_follow(monkeypatch, rng):
    device = FakeDevice(monkeypatch)
    a = rng.standard_normal((8, 4)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    out = np.zeros((8, 3), np.float32)
    bufs = {"a": device.array(a), "b": device.array(b), "out": device.array(out)}
    step = matmul_step("out", a="a", b="b", out="out")
    step.run(bufs, "device")
    (handle,) = handles._stream_handles.values()
    release_handles()
    assert not handle.alive and not handles._stream_handles
    assert [entry[0] for entry in device.cublas.log].count("destroy") == 1
    step.run(bufs, "device")  # a new handle for the stream, made on use
    (again,) = handles._stream_handles.values()
    assert again is not handle and again.alive
    assert rel_error(out, a @ b) < 1e-5


def test_a_stream_handle_goes_just_before_its_eagle_stream(monkeypatch):
    hooks = []
    fake = streams.Stream.external(0x5EA)
    fake._hooks = hooks
    monkeypatch.setattr(handles, "stream_object", lambda ptr: fake if ptr == 0x5EA else None)
    monkeypatch.setattr(streams, "stream_object", lambda ptr: fake if ptr == 0x5EA else None)
    FakeDevice(monkeypatch)
    waited = []
    monkeypatch.setattr(
        handles, "cudart", FakeCalls(lambda name, *args: waited.append((name, *args)))
    )
    made = handles.stream_handle(FakeDevice.STREAM)
    assert len(hooks) == 1 and made._stream is not fake  # the handle does not pin the stream
    hooks.pop()()  # what the stream's finalizer runs before cudaStreamDestroy
    assert not made.alive and not handles._stream_handles
    assert waited == [("cudaStreamSynchronize", 0x5EA)]  # its work ended before the handle


def test_the_default_stream_counts_as_captured_while_a_blocking_stream_is(monkeypatch):
    from eagle.cuda import _capture_state, graph

    def refuse(name, stream):
        raise cuda.CudaError(name, "cudaErrorStreamCaptureImplicit")

    monkeypatch.setattr(_capture_state, "cudart", FakeCalls(refuse))
    assert graph.is_capturing(0)

    def other(name, stream):
        raise cuda.CudaError(name, "cudaErrorInvalidValue")

    monkeypatch.setattr(_capture_state, "cudart", FakeCalls(other))
    with pytest.raises(cuda.CudaError, match="cudaErrorInvalidValue"):
        graph.is_capturing(0)
