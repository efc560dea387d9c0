"""fp8 arrays: eagle Arrays hold float8_e4m3fn and float8_e5m2 (``ml_dtypes`` on the
host); they come in from torch and through DLPack, whose codes name them, and go out
through DLPack; the CUDA array interface, which has no typestr for them, is refused by
name (so its consumers ask for DLPack instead)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from eagle import arrays

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
FP8 = [E4M3, E5M2]


class _DLPackOnly:
    """A producer that speaks DLPack only (as JAX or a foreign library would)."""

    def __init__(self, tensor):
        self._tensor = tensor

    def __dlpack__(self, **kwargs):
        return self._tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._tensor.__dlpack_device__()


def _device_array(values: np.ndarray) -> arrays.Array:
    """A device eagle Array over host memory (nothing reads it: only its interfaces)."""
    return arrays.Array(
        ptr=values.ctypes.data, shape=values.shape, dtype=values.dtype,
        strides=values.strides, device_index=0, owner=values,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_arrays_are_made_filled_and_copied(dtype):
    made = arrays.full((2, 3), 1.5, dtype=dtype.name)
    assert made.dtype == dtype and made.numpy().astype(np.float32).tolist() == [[1.5] * 3] * 2
    with pytest.raises(ValueError, match=f"value 1000000.0 overflows {dtype.name}"):
        made.fill(1e6)
    assert np.array_equal(made.copy().numpy().view(np.uint8), made.numpy().view(np.uint8))


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_arrays_come_in_from_torch_and_through_dlpack_by_their_codes(rng, dtype):
    torch = pytest.importorskip("torch")
    values = rng.standard_normal(16).astype(np.float32)
    tensor = torch.from_numpy(values).to(getattr(torch, dtype.name))
    want = values.astype(dtype).view(np.uint8)
    for given in (tensor, _DLPackOnly(tensor)):
        taken = arrays.asarray(given)
        assert taken.dtype == dtype and np.array_equal(taken.numpy().view(np.uint8), want)
    back = torch.from_dlpack(arrays.asarray(values.astype(dtype)))
    assert back.dtype == getattr(torch, dtype.name)
    assert np.array_equal(back.view(torch.uint8).numpy(), want)


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_the_cuda_array_interface_is_refused_by_name_for_fp8(dtype):
    device = _device_array(np.zeros((4, 16), dtype))
    with pytest.raises(AttributeError, match=f"a {dtype.name} Array has no __cuda_array_int"):
        device.__cuda_array_interface__  # noqa: B018
    assert not hasattr(device, "__cuda_array_interface__")  # its consumers ask for DLPack
    assert _device_array(np.zeros(4, np.float32)).__cuda_array_interface__["typestr"] == "<f4"


def test_eagle_torch_takes_no_fp8_tensors_as_planes():
    torch = pytest.importorskip("torch")
    import eagle.torch
    from tests._torch_kernels import affine

    x = torch.ones(8, dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="is a torch.float8_e4m3fn tensor; hawk planes are"):
        eagle.torch.function(affine)(x=x, a=1.0, b=0.0)


def test_an_infinity_is_refused_where_the_fp8_dtype_has_none():
    """float8_e4m3fn has no infinity: stored, inf would become NaN, its sign lost."""
    for value in (np.inf, -np.inf):
        with pytest.raises(ValueError, match="float8_e4m3fn has no infinity"):
            arrays.full((2,), value, "float8_e4m3fn")
    assert np.isposinf(arrays.full((1,), np.inf, "float8_e5m2").numpy().astype(np.float32)).all()
    assert np.isnan(arrays.full((1,), np.nan, "float8_e4m3fn").numpy().astype(np.float32)).all()
