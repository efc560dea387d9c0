"""Every buffer-taking call over torch tensors, CuPy arrays and CUDA-array-interface
objects on the device (the holder, eagle.arrays._holder): values against a float64 host
reference, work ordered after the producers' streams, tensors that require grad read and
never written, versions bumped; the device refusals of issue 26 reproduced with real
memory (read-only, misaligned, null); copies of device Arrays (run with ``nox -s gpu``
or ``python -m pytest -m gpu``)."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk
from eagle import arrays, cuda
from eagle.gemm import (
    CublasCaptureHandle,
    GemmMappingUnavailable,
    MatmulUnavailable,
    captured_calls,
    gemm_params_for_arrays,
    lower_dense_gemm,
    matmul_step,
)
from tests import _route_kernels as rk
from tests._util import rel_error

pytestmark = pytest.mark.gpu


@hawk.kernel
def _axpb(x: hawk.Scalar, a: hawk.Param, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + 1.0  # noqa: F841


def _torch():
    return pytest.importorskip("torch")


def _busy(torch, stream=None) -> None:
    """Keep ``stream`` (torch's current by default) busy, so work that does not wait for
    it reads what was there before."""
    with torch.cuda.stream(stream or torch.cuda.current_stream()):
        torch.cuda._sleep(200_000_000)


class _Interface:
    """Another producer: a CUDA array interface over a torch tensor's memory, naming the
    stream its producer queued work on."""

    def __init__(self, tensor, stream: int | None) -> None:
        self.tensor, self.stream = tensor, stream

    @property
    def __cuda_array_interface__(self):
        info = dict(self.tensor.__cuda_array_interface__)
        info["version"] = 3
        if self.stream is None:
            info.pop("stream", None)
        else:
            info["stream"] = self.stream
        return info


# -- tensors that require grad, and versions -------------------------------------------------


def test_a_cuda_tensor_that_requires_grad_is_read_and_never_written(rng):
    torch = _torch()
    plan = eagle.plan.auto(_axpb)
    values = rng.standard_normal(4096)
    x = torch.tensor(values, device="cuda", requires_grad=True)
    y = torch.full_like(x, float("nan")).detach()
    plan.run(x=x, a=2.0, y=y)  # no "Can't get __cuda_array_interface__" from torch
    torch.cuda.synchronize()
    assert rel_error(y.cpu().numpy(), 2.0 * values + 1.0) < 1e-12
    for refuse in (plan.run, plan.bind):
        with pytest.raises(ValueError, match="plane 'y' is written, and it is a torch tensor"):
            refuse(x=x.detach(), a=2.0, y=x)


@pytest.mark.parametrize("grad", [False, True], ids=["plain", "requires_grad"])
def test_a_tensor_held_alike_is_held_as_hold_takes_it(grad):
    """A moved bind holds a CUDA tensor from its layout key and the Array a tensor laid
    out alike was held as (``hold_alike``): the same array, producer, flags and tensor as
    ``hold`` reads from the tensor itself."""
    from eagle.arrays import _holder

    torch = _torch()
    tensor = torch.randn(6, 8, device="cuda", requires_grad=grad)[:, 2:5]
    like = _holder.hold(torch.randn(6, 8, device="cuda")[:, 2:5]).array  # another address
    key = _holder.layout_key(tensor)
    held, alike = _holder.hold(tensor), _holder.hold_alike(tensor, key, like)
    assert held is not None and alike is not None
    laid = [(h.array.ptr, h.array.shape, h.array.strides, h.array.dtype, h.array.device_index,
             h.array.readonly) for h in (held, alike)]  # fmt: skip
    assert laid[0] == laid[1]
    assert (held.framework, held.producer, held.grad) == (alike.framework, alike.producer, grad)
    assert held.tensor is tensor and alike.tensor is tensor
    for item in (held, alike):  # what keeps the memory: a tensor needing grad, detached
        keep = item.array._owner.keep
        assert keep is tensor if not grad else not keep.requires_grad
        assert keep.data_ptr() == tensor.data_ptr()


def test_a_written_cuda_tensor_has_its_version_bumped():
    torch = _torch()
    plan = eagle.plan.auto(_axpb)
    a = torch.ones(3, device="cuda", requires_grad=True)
    b = a * 2
    c = b * b
    x = torch.ones(3, device="cuda")
    plan.run(x=x, a=1.0, y=b.detach())
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()
    w = torch.ones(3, device="cuda")
    plan.run(x=x, a=1.0, y=w)
    c = a * w
    plan.run(x=x, a=1.0, y=w.view(3))  # a reused binding
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()


# -- products over torch and CuPy buffers ----------------------------------------------------

DTYPES = ["float32", "float64", "bfloat16", "float16"]
TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "bfloat16": 2e-2, "float16": 2e-3}


def _torch_buffers(torch, rng, dtype, m=48, k=40, n=33):
    kind = getattr(torch, dtype)
    a = torch.tensor(rng.standard_normal((m, k)), device="cuda").to(kind)
    b = torch.tensor(rng.standard_normal((n, k)), device="cuda").to(kind)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=kind)
    reference = a.double().cpu().numpy() @ b.double().cpu().numpy().T
    torch.cuda.synchronize()  # (made on the default stream; tests use other streams)
    return {"a": a, "b": b, "out": out}, reference


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_device_step_takes_torch_tensors_on_torchs_stream(rng, dtype):
    torch = _torch()
    bufs, reference = _torch_buffers(torch, rng, dtype)
    step = matmul_step("out", a="a", b="b", out="out", transpose_b=True)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        _busy(torch)
        bufs["a"].mul_(1.0)  # queued behind the busy kernel, on torch's current stream
        version = bufs["out"]._version
        step.run(bufs, "device")  # on torch's current stream: after a's producer
        bufs["out"].mul_(2.0)  # and torch's later work after eagle's
    side.synchronize()
    got = bufs["out"].double().cpu().numpy()
    assert rel_error(got, 2.0 * reference) < TOLERANCE[dtype]
    assert bufs["out"]._version > version


def test_a_device_step_inside_with_stream_waits_for_torchs_work(rng):
    torch = _torch()
    bufs, reference = _torch_buffers(torch, rng, "float32")
    stream = cuda.Stream(non_blocking=True)
    _busy(torch)
    bufs["a"].mul_(-1.0)  # behind the busy kernel on torch's stream
    with stream:
        matmul_step("out", a="a", b="b", out="out", transpose_b=True).run(bufs, "device")
    stream.synchronize()
    assert rel_error(bufs["out"].double().cpu().numpy(), -reference) < 1e-5


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_device_step_takes_cupy_arrays(rng, dtype):
    cp = pytest.importorskip("cupy")
    import ml_dtypes

    kind = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    a_host = rng.standard_normal((48, 40)).astype(kind)
    b_host = rng.standard_normal((40, 33)).astype(kind)
    try:
        a, b = cp.asarray(a_host), cp.asarray(b_host)
    except (TypeError, ValueError):
        pytest.skip(f"this CuPy has no {dtype}")
    out = cp.full((48, 33), np.nan, dtype=a.dtype)
    matmul_step("out", a="a", b="b", out="out").run({"a": a, "b": b, "out": out}, "device")
    cp.cuda.get_current_stream().synchronize()
    reference = a_host.astype(np.float64) @ b_host.astype(np.float64)
    assert rel_error(cp.asnumpy(out).astype(np.float64), reference) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_handle_orders_torch_operands_onto_its_own_stream(rng, dtype):
    torch = _torch()
    bufs, reference = _torch_buffers(torch, rng, dtype)
    stream = cuda.Stream(non_blocking=True)
    handle = CublasCaptureHandle(stream)
    params = gemm_params_for_arrays(*bufs.values(), transpose_b=True)
    _busy(torch)
    bufs["a"].mul_(3.0)  # torch's stream, behind the busy kernel
    version = bufs["out"]._version
    handle.gemm(params, bufs)  # on the handle's stream, after torch's work
    stream.synchronize()
    assert rel_error(bufs["out"].double().cpu().numpy(), 3.0 * reference) < TOLERANCE[dtype]
    assert bufs["out"]._version > version
    with pytest.raises(GemmMappingUnavailable, match="operand 'out' is written, and it is a"):
        handle.gemm(params, {**bufs, "out": bufs["out"].clone().requires_grad_()})
    handle.destroy()


def test_captured_calls_and_a_lowered_plan_take_torch_tensors(rng):
    torch = _torch()
    record = hawk.contraction.recognize(rk.contract)
    plan = lower_dense_gemm(record, dtype="float32")
    w = torch.tensor(rng.standard_normal((rk.R, rk.U)), device="cuda", dtype=torch.float32)
    f = torch.tensor(rng.standard_normal((rk.R, rk.B)), device="cuda", dtype=torch.float32)
    y = torch.full((rk.B * rk.U,), float("nan"), device="cuda")
    reference = f.double().cpu().numpy().T @ w.double().cpu().numpy()
    plan("device", {"w": w, "f": f, "y": y})
    torch.cuda.synchronize()
    assert rel_error(y.double().cpu().numpy().reshape(rk.B, rk.U), reference) < 1e-5
    stream = cuda.Stream(non_blocking=True)
    handle = CublasCaptureHandle(stream)
    y.fill_(float("nan"))
    (call,) = captured_calls(plan, {"w": w, "f": f, "y": y})
    assert call.operands["out"].ptr == y.data_ptr()
    torch.cuda.synchronize()
    handle.warm(call.params, call.operands)
    y.fill_(float("nan"))
    torch.cuda.synchronize()
    launcher = handle_capture(handle, stream, call)
    launcher.launch()
    launcher.synchronize()
    assert rel_error(y.double().cpu().numpy().reshape(rk.B, rk.U), reference) < 1e-5
    handle.destroy()


def handle_capture(handle, stream, call):
    with cuda.StreamCapturer(stream.ptr()) as capturer:
        handle.gemm(call.params, call.operands)
    return cuda.Graph.from_captured(capturer.captured).launcher().stream(stream.ptr())


def test_adjoint_bindings_take_torch_cuda_tensors(rng):
    torch = _torch()
    for contraction in ("loop", "gemm"):
        adjoint = eagle.diff.reverse(eagle.plan.auto(rk.contract, contraction=contraction))
        w = torch.tensor(rng.standard_normal((rk.R, rk.U)), device="cuda", dtype=torch.float32)
        f = torch.tensor(rng.standard_normal((rk.R, rk.B)), device="cuda", dtype=torch.float32)
        y_bar = torch.tensor(rng.standard_normal(rk.B * rk.U), device="cuda", dtype=torch.float32)
        w_bar = torch.zeros_like(w)
        adjoint.run(w=w, f=f.requires_grad_(), y_bar=y_bar, w_bar=w_bar)
        torch.cuda.synchronize()
        reference = f.detach().double().cpu().numpy() @ y_bar.double().cpu().numpy().reshape(
            rk.B, rk.U
        )
        assert rel_error(w_bar.double().cpu().numpy(), reference) < 1e-5, contraction


# -- a reused plan over CuPy arrays and other CUDA-array-interface objects ---------------------


def test_a_reused_plan_over_cupy_arrays_binds_once(rng):
    cp = pytest.importorskip("cupy")
    plan = eagle.plan.auto(_axpb)
    values = rng.standard_normal(4096).astype(np.float32)
    x, y = cp.asarray(values), cp.full(4096, np.nan, np.float32)
    for a in (1.0, 2.0, 3.0):
        plan.run(x=x, a=a, y=y)
    cp.cuda.get_current_stream().synchronize()
    assert len(plan._bindings) == 1
    assert rel_error(cp.asnumpy(y), 3.0 * values.astype(np.float64) + 1.0) < 1e-6


def test_a_reused_plan_waits_for_an_interfaces_stream_each_run(rng):
    torch = _torch()
    plan = eagle.plan.auto(_axpb)
    side = torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    y = torch.full_like(x, float("nan"))
    for value in (1.0, 2.0):
        with torch.cuda.stream(side):
            _busy(torch, side)
            x.fill_(value)  # the producer's work, on its own stream
        plan.run(x=_Interface(x, side.cuda_stream), a=2.0, y=_Interface(y, None))
        torch.cuda.synchronize()
        assert torch.all(y == 2.0 * value + 1.0), "a run did not wait for the producer"
    assert len(plan._bindings) == 1  # the second run reused the binding


# -- the device refuses what the host refuses (issue 26 §6), with real memory ---------------------


def _misaligned(base: arrays.Array, count: int) -> arrays.Array:
    return arrays.Array(ptr=base.ptr + 2, shape=(count,), dtype=np.dtype("float32"),
                        strides=(4,), device_index=0, owner=base)  # fmt: skip


def test_misaligned_null_and_read_only_device_planes_are_refused(rng):
    base = arrays.zeros(4097, "float32", "cuda:0")
    x = arrays.asarray(rng.standard_normal(4096).astype(np.float32), device="cuda:0")
    y = arrays.full(4096, np.nan, "float32", "cuda:0")
    plan = eagle.plan.auto(_axpb)
    with pytest.raises(ValueError, match="plane 'x' is misaligned"):
        plan.bind(x=_misaligned(base, 4096), a=1.0, y=y)
    null = arrays.Array(ptr=0, shape=(4096,), dtype=np.dtype("float32"), strides=(4,),
                        device_index=0)  # fmt: skip
    with pytest.raises(ValueError, match=r"plane 'y' is at address 0 \(a null pointer\)"):
        plan.bind(x=x, a=1.0, y=null)
    read_only = arrays.Array(ptr=y.ptr, shape=y.shape, dtype=y.dtype, strides=y.strides,
                             device_index=0, owner=y, readonly=True)  # fmt: skip
    with pytest.raises(ValueError, match="plane 'y' is read-only"):
        plan.run(x=x, a=1.0, y=read_only)
    assert np.isnan(y.numpy()).all()  # nothing ran
    a = arrays.zeros((4, 4), "float32", "cuda:0")
    step = matmul_step("out", a="a", b="b", out="out")
    with pytest.raises(MatmulUnavailable, match="buffer 'b' is misaligned"):
        step.run({"a": a, "b": _misaligned(base, 16).reshape(4, 4), "out": y[:16].reshape(4, 4)},
                 "device")  # fmt: skip
    with pytest.raises(GemmMappingUnavailable, match="operand 'out' is read-only"):
        gemm_params_for_arrays(a, a, read_only[:16].reshape(4, 4))


class _BigEndian:
    """Real device memory described, through the CUDA array interface, as big-endian
    float32 (``>f4``): what no device kernel or cuBLAS call reads as such."""

    def __init__(self, array: arrays.Array) -> None:
        self.__cuda_array_interface__ = {
            "shape": tuple(array.shape), "typestr": ">f4", "data": (array.ptr, False),
            "strides": None, "version": 3,
        }  # fmt: skip


def test_big_endian_device_arrays_are_refused_by_every_call_that_takes_them(rng):
    x = arrays.asarray(rng.standard_normal(4096).astype(np.float32), device="cuda:0")
    y = arrays.full(4096, np.nan, "float32", "cuda:0")
    plan = eagle.plan.auto(_axpb)
    with pytest.raises(TypeError, match="plane 'x' is >f4, in non-native byte order"):
        plan.run(x=_BigEndian(x), a=1.0, y=y)
    with pytest.raises(TypeError, match="plane 'y' is >f4, in non-native byte order"):
        plan.bind(x=x, a=1.0, y=_BigEndian(y))
    a = arrays.asarray(rng.standard_normal((4, 4)).astype(np.float32), device="cuda:0")
    out = arrays.full((4, 4), np.nan, "float32", "cuda:0")
    with pytest.raises(GemmMappingUnavailable, match="operand 'b' is >f4"):
        gemm_params_for_arrays(a, _BigEndian(a), out)
    step = matmul_step("out", a="a", b="b", out="out")
    with pytest.raises(MatmulUnavailable, match="buffer 'a' is >f4"):
        step.run({"a": _BigEndian(a), "b": a, "out": out}, "device")
    assert np.isnan(y.numpy()).all() and np.isnan(out.numpy()).all()  # nothing ran


def test_a_rebind_refuses_misaligned_null_and_read_only_arrays(rng):
    plan = eagle.plan.auto(_axpb)
    x = arrays.asarray(rng.standard_normal(4096).astype(np.float32), device="cuda:0")
    y = arrays.full(4096, np.nan, "float32", "cuda:0")
    stream = cuda.Stream(non_blocking=True)
    launcher = plan.bind(x=x, a=2.0, y=y).capture(stream)
    base = arrays.zeros(4097, "float32", "cuda:0")
    with pytest.raises(ValueError, match="plane 'x' .*the new array is misaligned"):
        launcher.rebind(x=_misaligned(base, 4096))
    read_only = arrays.Array(ptr=base.ptr, shape=(4096,), dtype=np.dtype("float32"),
                             strides=(4,), device_index=0, owner=base, readonly=True)  # fmt: skip
    with pytest.raises(ValueError, match="plane 'y' .* is read-only"):
        launcher.rebind(y=read_only)
    launcher.launch()
    launcher.synchronize()
    assert rel_error(y.numpy(), 2.0 * x.numpy().astype(np.float64) + 1.0) < 1e-6  # unchanged


# -- copies of device Arrays -----------------------------------------------------------------------


@pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy, "pickle"])
def test_a_copy_of_a_device_array_is_a_device_copy(rng, duplicate):
    values = rng.standard_normal((64, 33)).astype(np.float32)
    stream = cuda.Stream(non_blocking=True)
    with stream:
        original = arrays.asarray(values, device="cuda:0")
        original.fill(1.5)  # queued on eagle's stream: the copy comes after it
        if duplicate == "pickle":
            twin = pickle.loads(pickle.dumps(original))
        else:
            twin = duplicate(original)
        assert twin.device == "cuda:0" and twin.ptr != original.ptr
        assert np.all(twin.numpy() == 1.5)
        twin.fill(-1.0)
        assert np.all(original.numpy() == 1.5)  # its own memory


def test_new_plans_share_a_run_binding_over_torch_tensors_and_bump_each_version(rng):
    torch = _torch()
    x = torch.tensor(rng.standard_normal(1000), device="cuda", dtype=torch.float32)
    y = torch.zeros(1000, device="cuda")
    for turn in range(1, 4):  # a new plan each time: the binding is shared by address
        version = y._version
        eagle.plan.auto(_axpb).run(x=x, a=float(turn), y=y)
        assert y._version > version
    torch.cuda.synchronize()
    expected = 3.0 * x.double().cpu().numpy() + 1.0  # the last run's: y = a x + 1, a = 3
    assert rel_error(y.double().cpu().numpy(), expected) < 1e-6
    from eagle import _cache

    shared = [c for c in _cache._caches if c.name == "shared plan bindings"]
    assert sum(len(cache) for cache in shared) >= 1


def test_a_routed_bind_to_fresh_tensors_moves_its_products_and_is_right(rng):
    torch = _torch()
    R, U, B = rk.R, rk.U, rk.B
    plan = eagle.plan.auto(rk.contract, contraction="gemm")
    for _ in range(4):  # fresh tensors each time (the layout's products are moved)
        w = torch.tensor(rng.standard_normal((R, U)), device="cuda", dtype=torch.float32)
        f = torch.tensor(rng.standard_normal((R, B)), device="cuda", dtype=torch.float32)
        y = torch.full((B * U,), float("nan"), device="cuda")
        plan.bind(w=w, f=f, y=y).launch()
        torch.cuda.synchronize()
        expected = (f.double().cpu().numpy().T @ w.double().cpu().numpy()).reshape(-1)
        assert rel_error(y.double().cpu().numpy(), expected) < 1e-5
