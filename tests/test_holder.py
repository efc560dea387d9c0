"""Host tests of the one door every buffer goes through (eagle.arrays._holder) and the one
check host and device share (eagle._checks): each producer's implementation, the
layout keys a reused plan is found by, the refusals (byte order, null, misaligned,
read-only, requires grad) on every call that takes buffers, with fake device arrays
(objects with a crafted ``__cuda_array_interface__``), and the stream a foreign
operand's producer queued work on."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
from eagle import arrays
from eagle._checks import check_buffer
from eagle.arrays import _foreign, _holder
from eagle.cuda import stream as streams
from eagle.gemm import (
    CublasCaptureHandle,
    GemmMappingUnavailable,
    MatmulUnavailable,
    captured_calls,
    gemm_params_for_arrays,
    lower_dense_gemm,
    matmul_step,
    sgemm_params_for_arrays,
)
from eagle.plan._planes import layout_key
from tests import _route_kernels as k
from tests._route_kernels import B, R, U
from tests._util import FakeCalls, rel_error
from tests.test_gemm_capture import FakeDevice


@hawk.kernel
def _scale(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = 2.0 * x  # noqa: F841


class _Interface:
    """A fake device array: a CUDA array interface over an address (never read here)."""

    def __init__(self, ptr, shape=(4,), typestr="<f4", *, readonly=False, strides=None, **extra):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (ptr, readonly),
            "strides": strides,
            "version": 3,
            **extra,
        }


@pytest.fixture
def no_driver(monkeypatch):
    """The driver calls of taking a device array, replaced: every pointer is on device 0,
    and each event wait between two streams is recorded as (producer, consumer)."""
    waits: list[tuple[int, int]] = []
    monkeypatch.setattr(
        _holder, "cudart", FakeCalls(lambda name, ptr: types.SimpleNamespace(device=0))
    )
    monkeypatch.setattr(_foreign, "order", lambda *streams: waits.append(streams))
    return waits


# -- the one check ---------------------------------------------------------------------------


def _device(ptr, shape=(4,), dtype="float32", strides=None, readonly=False):
    kind = np.dtype(dtype)
    strides = strides or np.empty(shape, kind).strides
    return arrays.Array(
        ptr=ptr, shape=shape, dtype=kind, strides=strides, device_index=0, readonly=readonly
    )


@pytest.mark.parametrize(
    ("array", "written", "error", "message"),
    [
        (np.zeros(3, ">f4"), False, TypeError, r"is >f4, in non-native byte order"),
        (_device(0), False, ValueError, r"at address 0 \(a null pointer\) with 4 elements"),
        (_device(0x1002), False, ValueError, r"misaligned: its address 0x1002 .* of 4"),
        (_device(0x1000, (2, 3), strides=(14, 4)), False, ValueError, r"byte strides \(14, 4\)"),
        (_device(0x1000, readonly=True), True, ValueError, r"is read-only .*, and it is written"),
        (np.frombuffer(bytes(17), "<f8", 2, 1), False, ValueError, r"misaligned"),
    ],
)  # fmt: skip
def test_one_check_refuses_what_neither_side_takes(array, written, error, message):
    with pytest.raises(error, match=f"plane 'x' {message}" if "non-native" in message else message):
        check_buffer(array, "plane 'x'", written=written)


def test_the_check_passes_what_both_sides_take():
    check_buffer(_device(0x1000, readonly=True), "x", written=False)  # read, not written
    check_buffer(_device(0, (0,)), "x", written=True)  # no elements: no address to check
    check_buffer(_device(0x1002, (1, 1), "float16", strides=(6, 2)), "x", written=True)
    check_buffer(_device(0x1000, (3, 1), strides=(4, 2)), "x", written=True)  # extent 1
    with pytest.raises(ValueError, match="requires grad.*eagle.torch.function.*detach"):
        check_buffer(_device(0x1000), "x", written=True, grad=True)
    check_buffer(_device(0x1000), "x", written=False, grad=True)  # read through


# -- the kinds -------------------------------------------------------------------------------


def test_numpy_and_eagle_arrays_are_held_as_they_are():
    values = np.arange(6.0)
    held = _holder.hold(values)
    assert held.framework == "numpy" and held.array.numpy() is values and held.producer is None
    arr = arrays.asarray(values)
    assert _holder.hold(arr).array is arr and _holder.hold(arr).framework == "eagle"
    assert _holder.hold([1.0, 2.0]) is None and _holder.hold(2.0) is None
    assert layout_key(arr) == layout_key(values) == _holder.layout_key(values)


def test_device_keys_say_read_only():
    assert layout_key(_device(0x1000)) != layout_key(_device(0x1000, readonly=True))


def test_a_cuda_interface_is_held_with_its_stream_and_keyed_without_taking_it(no_driver):
    fake = _Interface(0x1000, (2, 3), stream=0x55)
    held = _holder.hold(fake)
    assert (held.array.ptr, held.array.shape, held.array.device) == (0x1000, (2, 3), "cuda:0")
    assert held.producer == 0x55 and held.framework is None and held.array._owner.keep is fake
    assert _holder.hold(fake, sync=False).producer is None
    key = layout_key(fake)
    assert key == layout_key(_Interface(0x1000, (2, 3), stream=0x77))  # the stream is no key
    others = [
        _Interface(0x2000, (2, 3)),
        _Interface(0x1000, (3, 2)),
        _Interface(0x1000, (2, 3), "<f8"),
        _Interface(0x1000, (2, 3), readonly=True),
    ]
    assert len({key, *map(layout_key, others)}) == 1 + len(others)
    assert _holder.producer_of(fake, 0) == 0x55
    assert _holder.producer_of(_Interface(0x1000, version=2), 0) == streams.DEFAULT_STREAM


def test_describing_reads_the_layout_without_a_driver(monkeypatch):
    def refuse(*args):
        raise AssertionError("the driver was asked")

    monkeypatch.setattr(_holder, "cudart", FakeCalls(refuse))
    monkeypatch.setattr(_foreign, "cudart", FakeCalls(refuse))
    layout = _holder.describe(_Interface(0x1000, (2, 3), readonly=True))
    assert (layout.ptr, layout.shape, layout.strides, layout.readonly) == (
        0x1000, (2, 3), (12, 4), True,
    )  # fmt: skip
    params = sgemm_params_for_arrays(
        _Interface(0x1000, (2, 3)), _Interface(0x2000, (3, 4)), _Interface(0x3000, (2, 4))
    )
    assert (params.m, params.n, params.k) == (4, 2, 3)


def test_a_dlpack_only_producer_has_no_key_but_is_held():
    class DLPackOnly:
        def __init__(self, values):
            self.values = values

        def __dlpack__(self, **kwargs):
            return self.values.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.values.__dlpack_device__()

    values = np.arange(4.0)
    assert layout_key(DLPackOnly(values)) is None
    assert _holder.hold(DLPackOnly(values)).array.ptr == values.ctypes.data


@pytest.fixture
def cupy(monkeypatch):
    """A stand-in CuPy: its ndarray (device memory by attributes) and current stream."""

    class ndarray:
        def __init__(self, ptr, shape, dtype="float32", index=0):
            kind = np.dtype(dtype)
            self.data = types.SimpleNamespace(ptr=ptr)
            self.device = types.SimpleNamespace(id=index)
            self.shape, self.dtype = tuple(shape), kind
            self.strides = tuple(int(np.prod(shape[i + 1 :])) * kind.itemsize
                                 for i in range(len(shape)))  # fmt: skip

    module = types.ModuleType("cupy")
    module.ndarray = ndarray
    monkeypatch.setitem(sys.modules, "cupy", module)
    monkeypatch.setitem(streams.FRAMEWORK_STREAMS, "cupy", lambda index: 0xC0 + index)
    return module


def test_cupy_arrays_are_read_by_their_attributes_on_cupys_stream(cupy):
    x = cupy.ndarray(0x4000, (2, 3), "float16", index=1)
    held = _holder.hold(x)
    assert held.framework == "cupy" and held.producer == 0xC1
    assert (held.array.ptr, held.array.shape, held.array.strides, held.array.device) == (
        0x4000, (2, 3), (6, 2), "cuda:1",
    )  # fmt: skip
    assert streams.framework_of(held.array) == "cupy"
    assert layout_key(x) == layout_key(cupy.ndarray(0x4000, (2, 3), "float16", index=1))
    assert layout_key(x) != layout_key(cupy.ndarray(0x4000, (2, 3), "float16", index=0))
    assert _holder.producer_of(x, 1) == 0xC1


# -- torch (CPU here; tests/test_holder_gpu.py for CUDA) -------------------------------------


def test_torch_tensors_are_read_by_their_attributes():
    torch = pytest.importorskip("torch")
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        tensor = torch.randn(3, 4, dtype=torch.float32).to(dtype)[:, 1:]
        held = _holder.hold(tensor)
        assert held.framework == "torch" and held.tensor is tensor and not held.grad
        assert held.array.ptr == tensor.data_ptr() and held.array.shape == (3, 3)
        assert held.array.strides == tuple(s * tensor.element_size() for s in tensor.stride())
        expected = tensor.float().numpy()
        assert np.array_equal(held.array.numpy().astype(np.float32), expected)
    grad = torch.ones(3, requires_grad=True)
    assert _holder.hold(grad).grad and layout_key(grad) != layout_key(grad.detach())
    with pytest.raises(TypeError, match="a torch tensor of torch.qint8 has no dtype eagle takes"):
        _holder._torch_dtype(torch.qint8)
    with pytest.raises(TypeError, match="sparse_coo torch tensor"):
        _holder.hold(torch.zeros(2).to_sparse())
    with pytest.raises(TypeError, match="lazily conjugated"):
        _holder.hold(torch.zeros(2, dtype=torch.complex64).conj())


def test_a_tensor_that_requires_grad_is_read_and_never_written():
    torch = pytest.importorskip("torch")
    plan = eagle.plan.auto(_scale)
    x = torch.arange(3.0, requires_grad=True)
    y = torch.zeros(3)
    plan.run(x=x, y=y)  # read through: no torch error
    assert y.tolist() == [0.0, 2.0, 4.0]
    a = torch.ones(3, requires_grad=True)
    b = a * 2
    c = b * b
    with pytest.raises(ValueError, match="plane 'y' is written, and it is a torch tensor that"):
        plan.run(x=torch.ones(3), y=b)  # the probe: refused before anything runs
    with pytest.raises(ValueError, match="eagle.torch.function"):
        plan.bind(x=torch.ones(3), y=a)
    assert b.tolist() == [2.0, 2.0, 2.0]
    c.sum().backward()
    assert a.grad.tolist() == [8.0, 8.0, 8.0]  # nothing was written behind autograd's back


def test_a_negated_view_of_bound_memory_is_refused_not_run_as_the_plain_tensor():
    """A lazily negated view has the address, shape and strides of the tensor it negates:
    the binding made for that tensor must not run it (its values are the negatives)."""
    torch = pytest.importorskip("torch")
    plan = eagle.plan.auto(_scale)
    x, y = torch.arange(1.0, 4.0), torch.zeros(3)
    plan.run(x=x, y=y)
    assert layout_key(x) != layout_key(torch._neg_view(x))
    for planes in ({"x": torch._neg_view(x), "y": y}, {"x": x, "y": torch._neg_view(y)}):
        name = next(name for name, t in planes.items() if t.is_neg())
        with pytest.raises(TypeError, match=f"plane '{name}': this torch tensor is a lazily"):
            plan.run(**planes)
    adjoint = eagle.diff.reverse(plan, accumulate=False)
    x_bar = torch.zeros(3)
    adjoint.run(x=x, y_bar=torch.ones(3), x_bar=x_bar)
    with pytest.raises(TypeError, match="plane 'y_bar': this torch tensor is a lazily"):
        adjoint.run(x=x, y_bar=torch._neg_view(torch.ones(3)), x_bar=x_bar)


def test_a_written_tensor_has_its_version_bumped_as_an_in_place_write_would():
    torch = pytest.importorskip("torch")
    plan = eagle.plan.auto(_scale)
    a = torch.ones(3, requires_grad=True)
    b = a * 2
    c = b * b  # saves b
    version = b._version
    plan.run(x=torch.ones(3), y=b.detach())  # the same memory and version counter as b
    assert b._version > version and b.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()
    # a reused binding bumps the tensors it is given, not only those it was made with
    x, w = torch.ones(3), torch.ones(3)
    plan.run(x=x, y=w)
    a = torch.ones(3, requires_grad=True)
    c = a * w  # saves w
    count = len(plan._bindings)
    plan.run(x=x, y=w.view(3))
    assert len(plan._bindings) == count  # reused
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()
    bound = plan.bind(x=x, y=w)
    before = w._version
    bound.launch()
    bound.launch()
    assert w._version >= before + 2


def test_host_products_take_torch_tensors_bump_out_and_refuse_grad(rng):
    torch = pytest.importorskip("torch")
    step = matmul_step("out", a="a", b="b", out="out", transpose_b=True)
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        a = torch.from_numpy(rng.standard_normal((5, 4))).to(dtype)
        b = torch.from_numpy(rng.standard_normal((3, 4))).to(dtype)
        out = torch.full((5, 3), float("nan"), dtype=dtype)
        version = out._version
        step.run({"a": a, "b": b, "out": out}, "host")
        reference = a.double().numpy() @ b.double().numpy().T
        tolerance = 1e-12 if dtype == torch.float64 else 1e-2
        assert rel_error(out.double().numpy(), reference) < tolerance
        assert out._version > version
    with pytest.raises(MatmulUnavailable, match="out 'out' is written, and it is a torch tensor"):
        step.run({"a": a, "b": b, "out": out.float().requires_grad_()}, "host")
    params = gemm_params_for_arrays(a, b, out, transpose_b=True)
    assert (params.dtype, params.m, params.n, params.k) == ("float16", 3, 5, 4)
    with pytest.raises(GemmMappingUnavailable, match="operand 'out' is written, and it is a"):
        gemm_params_for_arrays(a.float(), b.float(), out.float().requires_grad_(), transpose_b=True)


def test_a_lowered_plan_on_the_host_takes_torch_tensors_and_bumps_what_it_writes(rng):
    torch = pytest.importorskip("torch")
    plan = lower_dense_gemm(hawk.contraction.recognize(k.contract), dtype="float32")
    w = torch.from_numpy(rng.standard_normal((R, U)).astype(np.float32))
    f = torch.from_numpy(rng.standard_normal((R, B)).astype(np.float32))
    y = torch.full((B * U,), float("nan"))
    version = y._version
    plan("host", {"w": w, "f": f, "y": y})
    expected = f.double().numpy().T @ w.double().numpy()
    assert rel_error(y.double().numpy().reshape(B, U), expected) < 1e-6
    assert y._version > version


# -- byte order, read-only and misaligned buffers on every call that takes them --------------


def test_gemm_params_refuse_big_endian_read_only_and_misaligned_arrays():
    a, b, out = (
        np.ones((2, 3), np.float32),
        np.ones((3, 4), np.float32),
        np.zeros((2, 4), np.float32),
    )
    with pytest.raises(GemmMappingUnavailable, match="operand 'a' is >f4, in non-native byte"):
        gemm_params_for_arrays(a.astype(">f4"), b, out)
    with pytest.raises(GemmMappingUnavailable, match="operand 'b' is >f4"):
        sgemm_params_for_arrays(a, b.astype(">f4"), out)
    frozen = out.copy()
    frozen.flags.writeable = False
    with pytest.raises(GemmMappingUnavailable, match="operand 'out' is read-only"):
        gemm_params_for_arrays(a, b, frozen)
    frozen_b = b.copy()
    frozen_b.flags.writeable = False
    gemm_params_for_arrays(a, frozen_b, out)  # read only: taken
    shifted = np.frombuffer(bytearray(4 * 6 + 2), np.float32, 6, 2).reshape(2, 3)
    with pytest.raises(GemmMappingUnavailable, match="operand 'a' is misaligned"):
        gemm_params_for_arrays(shifted, b, out)


def test_plan_planes_refuse_big_endian_and_misaligned_arrays():
    plan = eagle.plan.auto(_scale)
    with pytest.raises(TypeError, match="plane 'x' is >f8, in non-native byte order"):
        plan.run(x=np.ones(3, ">f8"), y=np.zeros(3))
    shifted = np.frombuffer(bytearray(8 * 3 + 1), np.float64, 3, 1)
    with pytest.raises(ValueError, match="plane 'x' is misaligned"):
        plan.run(x=shifted, y=np.zeros(3))


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (dict(y=_Interface(0x3000, (B * U,), readonly=True)), ValueError,
         "plane 'y' is read-only .*, and it is written"),
        (dict(f=_Interface(0x2002, (R, B))), ValueError,
         "plane 'f' is misaligned: its address 0x2002"),
        (dict(w=_Interface(0, (R, U))), ValueError,
         r"plane 'w' is at address 0 \(a null pointer\)"),
        (dict(f=_Interface(0x2000, (R, B), strides=(4 * B + 2, 4))), ValueError,
         r"plane 'f' is misaligned: .* byte strides"),
        (dict(y=_Interface(0x3000, (B * U,), ">f4")), TypeError, "plane 'y' is >f4"),
    ],
)  # fmt: skip
def test_device_planes_are_refused_as_host_planes_are(no_driver, change, error, message):
    planes = {
        "w": _Interface(0x1000, (R, U)),
        "f": _Interface(0x2000, (R, B)),
        "y": _Interface(0x3000, (B * U,)),
        **change,
    }
    for contraction in ("loop", "gemm"):
        plan = eagle.plan.auto(k.contract, contraction=contraction)
        with pytest.raises(error, match=message):
            plan.bind(**planes)
        with pytest.raises(error, match=message):
            plan.run(**planes)


def test_device_steps_and_captured_calls_refuse_what_the_host_refuses(no_driver):
    step = matmul_step("out", a="a", b="b", out="out")
    good = {"a": _Interface(0x1000, (2, 3)), "b": _Interface(0x2000, (3, 4)),
            "out": _Interface(0x3000, (2, 4))}  # fmt: skip
    cases = [
        ({"out": _Interface(0x3000, (2, 4), readonly=True)}, "out 'out' is read-only"),
        ({"a": _Interface(0x1001, (2, 3))}, "buffer 'a' is misaligned"),
        ({"b": _Interface(0, (3, 4))}, r"buffer 'b' is at address 0"),
        ({"a": _Interface(0x1000, (2, 3), ">f4")}, "buffer 'a' is >f4"),
    ]
    for change, message in cases:
        with pytest.raises(MatmulUnavailable, match=f"matmul step 'out': {message}"):
            step.run({**good, **change}, "device")
    plan = lower_dense_gemm(hawk.contraction.recognize(k.contract), dtype="float32")
    planes = {"w": _Interface(0x1000, (R, U)), "f": _Interface(0x2000, (R, B)),
              "y": _Interface(0x3000, (B * U,))}  # fmt: skip
    (call,) = captured_calls(plan, planes)
    assert {role: array.ptr for role, array in call.operands.items()} == {
        "a": 0x2000, "b": 0x1000, "out": 0x3000,
    }  # fmt: skip
    assert no_driver == []  # captured calls only describe: no stream, no wait
    from eagle.gemm import GemmCaptureUnavailable

    with pytest.raises(GemmCaptureUnavailable, match="buffer 'y' is read-only"):
        captured_calls(plan, {**planes, "y": _Interface(0x3000, (B * U,), readonly=True)})
    with pytest.raises(GemmCaptureUnavailable, match="buffer 'f' is misaligned"):
        captured_calls(plan, {**planes, "f": _Interface(0x2006, (R, B))})


# -- foreign operands on the device, over the stand-in cuBLAS of test_gemm_capture ------------


@pytest.fixture
def fake_device(monkeypatch):
    """eagle.gemm's CUDA side replaced by a stand-in cuBLAS over host memory."""
    return FakeDevice(monkeypatch)


def _registered(device, values, stream=None, readonly=False):
    """A fake device array over registered host memory (the stand-in cuBLAS computes on
    it), whose producer queued work on ``stream``."""
    device.cublas.register(values)
    extra = {} if stream is None else {"stream": stream}
    return _Interface(values.ctypes.data, values.shape, values.dtype.str, readonly=readonly,
                      strides=values.strides, **extra)  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_device_step_takes_interface_arrays_after_their_producers_work(
    fake_device, no_driver, rng, dtype
):
    device = fake_device
    a = rng.standard_normal((5, 4)).astype(dtype)
    b = rng.standard_normal((4, 3)).astype(dtype)
    out = np.full((5, 3), np.nan, dtype)
    bufs = {"a": _registered(device, a, stream=0x55), "b": _registered(device, b),
            "out": _registered(device, out, stream=0x66)}  # fmt: skip
    matmul_step("out", a="a", b="b", out="out").run(bufs, "device")
    reference = a.astype(np.float64) @ b.astype(np.float64)
    assert rel_error(out.astype(np.float64), reference) < (1e-6 if dtype == np.float32 else 1e-2)
    assert no_driver == [(0x55, FakeDevice.STREAM), (0x66, FakeDevice.STREAM)]


def test_a_handle_orders_foreign_operands_onto_its_own_stream(fake_device, no_driver, rng):
    device = fake_device
    a = rng.standard_normal((5, 4)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    out = np.full((5, 3), np.nan, np.float32)
    operands = {"a": _registered(device, a, stream=0x55), "b": _registered(device, b),
                "out": _registered(device, out)}  # fmt: skip
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params = gemm_params_for_arrays(*operands.values())
    assert no_driver == []  # describing asks for no stream
    handle.gemm(params, operands)
    handle.gemm(params, operands, beta=1.0)
    assert rel_error(out, 2 * (a.astype(np.float64) @ b)) < 1e-6
    assert no_driver == [(0x55, FakeDevice.STREAM)] * 2  # each call waits for the producer
    bound = handle.bind(sgemm_params_for_arrays(*operands.values()), operands)
    assert bound._used[2].ptr == out.ctypes.data and no_driver[-1] == (0x55, FakeDevice.STREAM)


# -- layout keys let a reused plan skip the bind for any producer -----------------------------


def test_foreign_planes_order_a_reused_run_after_their_producers(monkeypatch, no_driver, cupy):
    from eagle.plan._planes import ForeignPlanes

    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch", types.ModuleType("torch")))
    monkeypatch.setitem(streams.FRAMEWORK_STREAMS, "torch", lambda index: 0x70)
    planes = {"x": _Interface(0x1000, stream=0x55), "t": cupy.ndarray(0x2000, (4,))}
    foreign = ForeignPlanes(0, (), watched=("x", "t"), apart=("x",))
    foreign.order(planes, lambda: 0xC0)  # outside ``with stream:``: the cupy plane is the launch's
    assert no_driver == [(0x55, 0xC0)]
    with streams.Stream.external(0x99):  # eagle's stream: every producer is waited for
        foreign.order(planes, lambda: 0x99)
    assert no_driver[1:] == [(0x55, 0x99), (0xC0, 0x99)]


@pytest.mark.parametrize("grad", [False, True], ids=["plain", "requires_grad"])
def test_a_tensor_held_alike_reads_its_own_key(monkeypatch, grad):
    """hold_alike takes a tensor from its layout key (what a moved bind does with fresh
    tensors laid out as earlier ones), whatever the key holds after its address."""
    torch = pytest.importorskip("torch")
    monkeypatch.setitem(streams.FRAMEWORK_STREAMS, "torch", lambda index: 0x70 + index)
    like = _holder.hold(torch.arange(4.0)).array
    fresh = (torch.arange(4.0) * 2).requires_grad_(grad)
    held = _holder.hold_alike(fresh, layout_key(fresh), like)
    assert (held.framework, held.array.ptr, held.grad) == ("torch", fresh.data_ptr(), grad)
    assert held.producer == 0x70 - 1 and held.array.readonly == grad  # (a CPU tensor: -1)


def test_adjoint_bindings_take_torch_tensors_and_bump_the_gradients_they_add_into(rng):
    torch = pytest.importorskip("torch")
    from tests._hawk_kernels import saxpy

    adjoint = eagle.diff.reverse(eagle.plan.auto(saxpy))
    x = torch.from_numpy(rng.standard_normal(6))
    y_bar = torch.from_numpy(rng.standard_normal(6))
    x_bar = torch.zeros(6, dtype=torch.float64)
    version = x_bar._version
    adjoint.run(a=1.5, x=x.requires_grad_(), y_bar=y_bar, x_bar=x_bar)  # x is read through
    np.testing.assert_allclose(x_bar.numpy(), 1.5 * y_bar.numpy(), rtol=1e-12)
    assert x_bar._version > version
    with pytest.raises(ValueError, match="plane 'x_bar' is written, and it is a torch tensor"):
        adjoint.run(a=1.5, x=x, y_bar=y_bar, x_bar=torch.zeros(6, requires_grad=True))


def test_which_planes_a_reused_run_orders_after(no_driver, cupy, monkeypatch):
    from eagle.plan._planes import check_planes

    @hawk.kernel
    def three(x: hawk.Scalar, z: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
        y = x + z  # noqa: F841

    checked = check_planes(
        three.ir,
        {"x": cupy.ndarray(0x1000, (4,)), "z": _Interface(0x2000, stream=0x55),
         "y": cupy.ndarray(0x3000, (4,))},
    )  # fmt: skip
    assert no_driver == [(0x55, 0xC0)]  # the bind waits for the interface's producer
    foreign = checked.foreign
    assert foreign.watched == ("x", "z", "y") and foreign.apart == ("z",)
    assert foreign.written == ()  # no torch tensor is written
    assert (
        check_planes(three.ir, {"x": np.ones(4), "z": np.ones(4), "y": np.ones(4)}).foreign is None
    )


class _Loud(np.ndarray):
    """A numpy subclass with arithmetic of its own, which must not reach a kernel."""

    def __mul__(self, other):
        return np.zeros_like(np.asarray(self))

    __rmul__ = __mul__


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_numpy_subclasses_are_read_as_plain_arrays_and_masked_ones_refused():
    x = np.arange(1.0, 4.0)
    y = np.zeros(3)
    eagle.plan.auto(_scale).run(x=x.view(_Loud), y=y.view(_Loud))
    assert y.tolist() == [2.0, 4.0, 6.0]  # the kernel's arithmetic, into the same memory
    matrix = arrays.asarray(np.matrix(np.arange(6.0).reshape(2, 3)))
    assert type(matrix.numpy()) is np.ndarray
    assert matrix.reshape(6).shape == (6,) and matrix[0].shape == (3,)  # as a device Array
    masked = np.ma.masked_array([1.0, 2.0, 3.0], mask=[False, True, False])
    with pytest.raises(TypeError, match=r"plane 'x': a numpy masked array.*\.filled\(value\)"):
        eagle.plan.auto(_scale).run(x=masked, y=np.zeros(3))
    plan, y = eagle.plan.auto(_scale), np.zeros(3)
    plan.run(x=masked.data, y=y)  # a binding over the same memory: never run for the mask
    with pytest.raises(TypeError, match=r"plane 'x': a numpy masked array"):
        plan.run(x=masked, y=y)
    with pytest.raises(TypeError, match="masked array"):
        arrays.asarray(masked)
    step = matmul_step("p", a="a", b="b", out="c")
    with pytest.raises(MatmulUnavailable, match="buffer 'a': a numpy masked array"):
        step.run({"a": masked.reshape(1, 3), "b": np.ones((3, 1)), "c": np.zeros((1, 1))}, "host")
