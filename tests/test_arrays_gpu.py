"""Device tests of foreign arrays in eagle.arrays: torch and CuPy, zero-copy, their
streams, half precision, and exports nothing leaks from (run with ``nox -s gpu``)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from eagle import arrays, cuda
from eagle.cuda.module import load_kernel
from hawk.dtypes import numpy_dtype

pytestmark = pytest.mark.gpu

ADD_SOURCE = r"""
extern "C" __global__ void add_one(float* x, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
"""


def test_refused_dlpack_exports_do_not_pin_device_memory():
    pool = cuda.default_pool()
    dev = arrays.full((1 << 20,), 1.0, "float32", "cuda:0")
    used = pool.used_bytes()
    for _ in range(50):
        mine = arrays.full((1 << 20,), 1.0, "float32", "cuda:0")
        with pytest.raises((BufferError, RuntimeError)):
            np.from_dlpack(mine)
        with pytest.raises(BufferError, match="cannot go to the CPU"):
            np.from_dlpack(mine, device="cpu")
        del mine
    gc.collect()
    cuda.current_stream().synchronize()
    assert pool.used_bytes() == used and dev.size


def test_a_pool_reserves_what_it_hands_out_and_trim_gives_back_the_rest():
    pool = cuda.default_pool()
    held = arrays.empty((64 << 20,), "uint8", "cuda:0")
    assert pool.reserved_bytes() >= pool.used_bytes() >= held.nbytes
    del held
    gc.collect()
    pool.trim()
    assert 0 <= pool.reserved_bytes() - pool.used_bytes() < 64 << 20


def test_torch_tensors_that_require_grad_or_are_half_precision_are_read_through(rng):
    torch = pytest.importorskip("torch")
    weights = torch.randn(6, 5, device="cuda", requires_grad=True)
    wrapped = arrays.asarray(weights)
    assert wrapped.ptr == weights.data_ptr() and wrapped.readonly  # never written behind autograd
    np.testing.assert_array_equal(wrapped.numpy(), weights.detach().cpu().numpy())
    with pytest.raises(ValueError, match="read-only"):
        wrapped.fill(0.0)
    for name in ("float16", "bfloat16"):
        tensor = torch.randn(7, 3, device="cuda").to(getattr(torch, name))
        half = arrays.asarray(tensor)
        assert half.dtype.name == name and half.ptr == tensor.data_ptr()
        expected = tensor.float().cpu().numpy()
        np.testing.assert_array_equal(half.numpy().astype(np.float32), expected)
        half[1:3].fill(0.5)
        torch.cuda.synchronize()
        assert torch.all(tensor[1:3] == 0.5) and not torch.any(tensor[0] == 0.5)
        back = torch.from_dlpack(half)
        assert back.dtype == getattr(torch, name) and back.data_ptr() == tensor.data_ptr()


def test_eagle_waits_for_torch_work_queued_before_the_import():
    torch = pytest.importorskip("torch")
    for via_interface in (False, True):
        x = torch.zeros(1 << 22, device="cuda")
        torch.cuda._sleep(200_000_000)  # keep torch's stream busy well past the import
        x.fill_(1.0)
        source = _InterfaceOnly(x) if via_interface else x
        values = arrays.asarray(source).numpy()
        assert np.all(values == 1.0), f"eagle read before torch's write ({via_interface=})"


class _InterfaceOnly:
    """Shows only the CUDA array interface of a tensor (with torch's stream field)."""

    def __init__(self, tensor):
        self.tensor = tensor
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


def test_writes_through_a_wrapped_tensor_reach_it_and_torch_streams_are_streams():
    torch = pytest.importorskip("torch")
    x = torch.zeros(1000, device="cuda")
    kernel = load_kernel(ADD_SOURCE, "add_one")
    stream = torch.cuda.current_stream()
    kernel.launch(4, 256, [arrays.asarray(x), np.int64(1000)], stream)
    torch.cuda.synchronize()
    assert torch.all(x == 1.0)


def test_cupy_arrays_and_streams(rng):
    cp = pytest.importorskip("cupy")
    values = rng.standard_normal(1000).astype(np.float32)
    theirs = cp.asarray(values)
    kernel = load_kernel(ADD_SOURCE, "add_one")
    with cp.cuda.Stream(non_blocking=True) as stream:
        kernel.launch(4, 256, [arrays.asarray(theirs), np.int64(1000)], stream)
        stream.synchronize()
    np.testing.assert_allclose(cp.asnumpy(theirs), values + 1.0, rtol=1e-6)
    half = cp.asarray(values.astype(np.float16))
    wrapped = arrays.asarray(half)
    assert wrapped.dtype == np.float16 and wrapped.ptr == half.data.ptr
    back = cp.from_dlpack(arrays.asarray(values, device="cuda:0"))
    np.testing.assert_array_equal(cp.asnumpy(back), values)


def test_device_fills_round_float64_into_bfloat16_as_kernels_store_it():
    from tests.test_arrays import _BF16_SENSITIVE

    expected = np.asarray(np.float32(_BF16_SENSITIVE)).astype(numpy_dtype("bfloat16"))
    device = arrays.full((5,), -7.0, "bfloat16", "cuda:0")
    device.numpy()  # (poisoned first)
    device.fill(_BF16_SENSITIVE)
    assert np.all(device.numpy() == expected)
    assert np.all(arrays.full((4,), _BF16_SENSITIVE, "bfloat16", "cuda:0").numpy() == expected)
    moved = arrays.asarray(np.array([_BF16_SENSITIVE]), dtype="bfloat16", device="cuda:0")
    assert np.all(moved.numpy() == expected)
