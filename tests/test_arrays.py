"""Host tests of eagle.arrays: construction, views, fill, interop, refusals."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import eagle
import eagle.errors
from eagle import arrays
from hawk.dtypes import numpy_dtype


def test_host_array_wraps_numpy_without_copy(rng):
    values = rng.standard_normal((4, 6))
    arr = arrays.asarray(values)
    assert arr.device == "cpu" and arr.is_host and arr.device_index is None
    assert arr.ptr == values.ctypes.data
    assert np.asarray(arr) is values and arr.numpy() is values
    assert (arr.shape, arr.dtype, arr.strides) == ((4, 6), np.dtype("float64"), (48, 8))
    assert (arr.itemsize, arr.size, arr.ndim, arr.nbytes) == (8, 24, 2, 192)
    assert eagle.Array is arrays.Array


def test_views_share_memory_with_true_strides(rng):
    values = rng.standard_normal((5, 7))
    arr = arrays.asarray(values)
    rows, cols = arr[1:3], arr[:, 2:5]
    assert rows.strides == (56, 8) and rows.ptr == values.ctypes.data + 56
    assert cols.strides == (56, 8) and cols.ptr == values.ctypes.data + 16
    assert not cols.is_contiguous and rows.is_contiguous
    assert arr.T.shape == (7, 5) and arr.T.strides == (8, 56)
    cols.fill(9.0)
    assert np.all(values[:, 2:5] == 9.0)


def test_an_int_for_every_axis_gives_a_0d_view_and_a_bad_index_is_eagles_error(rng):
    values = rng.standard_normal((5, 7))
    arr = arrays.asarray(values)
    element = arr[1, 2]
    assert element.shape == () and element.ptr == values.ctypes.data + (7 + 2) * 8
    element.fill(99.0)
    assert values[1, 2] == 99.0
    assert arrays.asarray(values[0])[3].ptr == values.ctypes.data + 3 * 8
    for key in (5, (1, 2, 3), (0, -8)):
        with pytest.raises(eagle.errors.EagleIndexError, match=r"an Array of shape \(5, 7\)"):
            arr[key]
    with pytest.raises(eagle.errors.EagleValueError, match="slice step cannot be zero"):
        arr[::0]
    with pytest.raises(eagle.errors.EagleTypeError, match="slice indices must be integers"):
        arr[1.5:]


def test_constructors_and_conversions():
    assert np.all(arrays.zeros((2, 3)).numpy() == 0) and arrays.zeros(4).dtype == np.float64
    assert np.all(arrays.ones((2,), "int32").numpy() == 1)
    assert np.all(arrays.full((2, 2), -3, "int64").numpy() == -3)
    assert arrays.empty((3, 0), "float32").shape == (3, 0)
    converted = arrays.asarray([1, 2, 3], dtype="float32")
    assert converted.dtype == np.float32 and list(converted.numpy()) == [1, 2, 3]
    copy = converted.copy()
    assert copy.ptr != converted.ptr and np.array_equal(copy.numpy(), converted.numpy())
    assert converted.to("cpu") is converted


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_fill_any_value_of_the_dtype(dtype):
    arr = arrays.empty((3, 4), dtype)
    arr.fill(-5)
    assert np.all(arr.numpy() == -5)


#: a float64 value whose bfloat16 depends on the rounding: through float32 (as every hawk
#: store and torch round it) 1 + 2**-8 is a tie that goes to 1.0; rounded directly, 1.0078125
_BF16_SENSITIVE = 1 + 2**-8 + 2**-30


def test_float64_values_round_into_bfloat16_through_float32_as_kernels_store_them():
    expected = np.asarray(np.float32(_BF16_SENSITIVE)).astype(numpy_dtype("bfloat16"))
    assert float(expected) == 1.0
    filled = arrays.empty((3,), "bfloat16")
    filled.fill(_BF16_SENSITIVE)
    values = np.array([_BF16_SENSITIVE, -_BF16_SENSITIVE, 2.5])
    for got in (
        arrays.full((3,), _BF16_SENSITIVE, "bfloat16").numpy(),
        filled.numpy(),
        arrays.asarray(values, dtype="bfloat16").numpy()[:1],
        np.asarray(arrays.asarray(values), dtype=expected.dtype)[:1],
        arrays.asarray([_BF16_SENSITIVE], dtype="bfloat16").numpy(),
        arrays.asarray(_BF16_SENSITIVE, dtype="bfloat16").numpy().reshape(1),
        arrays.full((2,), np.longdouble(_BF16_SENSITIVE), "bfloat16").numpy(),
    ):
        assert got.dtype == expected.dtype and np.all(got == expected)
    assert arrays.asarray(values, dtype="bfloat16").numpy().tolist() == [1.0, -1.0, 2.5]
    assert float(np.asarray(arrays.asarray(values), dtype=np.float16)[0]) == float(
        np.float16(_BF16_SENSITIVE)
    )  # (float16 rounds once, as its row says)


def test_host_dlpack_round_trip(rng):
    values = rng.standard_normal((3, 2))
    arr = arrays.asarray(values)
    assert arr.__dlpack_device__() == (1, 0)
    back = np.from_dlpack(arr)
    assert back.ctypes.data == values.ctypes.data


def test_refuses_bad_dtype_naming_it():
    with pytest.raises(TypeError, match="dtype must be a numeric or bool dtype, not object"):
        arrays.zeros((2,), "object")
    with pytest.raises(TypeError, match="'not-a-dtype' is not a numpy dtype"):
        arrays.empty((2,), "not-a-dtype")
    with pytest.raises(TypeError, match="obj's dtype"):
        arrays.asarray(np.array(["a", "b"]))


def test_refuses_bad_device_string_naming_it():
    with pytest.raises(ValueError, match="device must be 'cpu', 'cuda' or 'cuda:N', not 'gpu'"):
        arrays.zeros((2,), "float32", "gpu")
    with pytest.raises(ValueError, match="not 'cuda:x'"):
        arrays.asarray(np.ones(2), device="cuda:x")
    with pytest.raises(ValueError, match="device must be"):
        arrays.asarray(np.ones(2)).to("tpu")


def test_a_host_arrays_readonly_follows_numpys_flag():
    host = np.zeros(3)
    array = arrays.asarray(host)
    host.setflags(write=False)
    assert array.readonly
    with pytest.raises(ValueError, match="this Array is read-only"):
        array.fill(1.0)  # (it was numpy's own "assignment destination is read-only")
    host.setflags(write=True)
    array.fill(2.0)
    assert host.tolist() == [2.0, 2.0, 2.0]


def test_a_host_fill_refuses_a_stream_and_an_array_is_weakly_referenced():
    array = arrays.zeros((3,))
    with pytest.raises(ValueError, match="on the host: fill runs now and takes no stream"):
        array.fill(1.0, "not a stream")
    assert array.numpy().tolist() == [0.0, 0.0, 0.0]
    ref = weakref.ref(array)
    assert ref() is array
    del array
    gc.collect()
    assert ref() is None


def test_refuses_inexact_fill_value_and_bad_shape():
    with pytest.raises(ValueError, match="value 1.5 does not fit int32 exactly"):
        arrays.zeros((2,), "int32").fill(1.5)
    with pytest.raises(ValueError, match="value 300 does not fit uint8 exactly"):
        arrays.zeros((2,), "uint8").fill(300)
    with pytest.raises(ValueError, match="shape must be non-negative ints"):
        arrays.zeros((2, -1))


@pytest.mark.parametrize("shape", [True, (2, True), np.bool_(True), 2.0, (2, "3")])
def test_a_shape_that_is_not_ints_is_refused_not_coerced(shape):
    with pytest.raises(ValueError, match=r"shape must be non-negative ints \(an int or a seq"):
        arrays.zeros(shape)
    with pytest.raises(ValueError, match="shape must be non-negative ints"):
        arrays.full(shape, 1.0)


@pytest.mark.parametrize("shape", [("2", 3), (2.0, 3), (True, 6), (["2", 3],), ("6",)])
def test_reshape_refuses_what_is_not_ints(shape):
    arr = arrays.zeros(6)
    with pytest.raises(TypeError, match="reshape takes ints .*, not"):
        arr.reshape(*shape)
    assert arr.reshape(np.int64(2), 3).shape == (2, 3)


def test_host_array_has_no_cuda_array_interface():
    assert not hasattr(arrays.zeros(3), "__cuda_array_interface__")


@pytest.mark.parametrize(
    "given", [{"device_index": 0}, {"dtype": np.dtype("float32")}], ids=["no dtype", "no index"]
)
def test_a_device_array_needs_its_dtype_and_device_index(given):
    with pytest.raises(TypeError, match="a device Array needs its dtype and device_index"):
        arrays.Array(ptr=0x1000, shape=(2,), strides=(4,), **given)


def test_an_array_moved_to_another_address_keeps_its_layout_and_takes_the_owner():
    owner = object()
    array = arrays.Array(
        ptr=0x1000, shape=(3, 4), dtype=np.dtype(np.float32), strides=(32, 4),
        device_index=1, readonly=True,
    )  # fmt: skip
    moved = array._at(0x9000, owner, readonly=True)
    assert (moved.ptr, moved._owner, moved.is_host) == (0x9000, owner, False)
    laid = [(a.shape, a.strides, a.dtype, a.device, a.readonly) for a in (array, moved)]
    assert laid[0] == laid[1] and array.ptr == 0x1000
    assert not array._at(0x9000, owner, readonly=False).readonly  # as its new memory is


def test_device_array_without_a_driver_is_cuda_unavailable():
    if eagle.cuda.is_available():
        pytest.skip("this check is for machines without a CUDA device")
    with pytest.raises(eagle.cuda.CudaUnavailable) as info:
        arrays.zeros((2,), "float32", "cuda:0")
    assert info.value.call and info.value.status
    assert "host work takes numpy arrays" in str(info.value)  # what to do instead
    assert info.value.__notes__ == [
        "an Array on 'cuda:0' was asked for (device=...); a host Array takes device='cpu', "
        "the default, and a plan over numpy arrays runs on the host"
    ]


class _FakeDeviceArray:
    """A stand-in for a CuPy/PyTorch array, as seen through its interface."""

    def __init__(self) -> None:
        self.__cuda_array_interface__ = {
            "shape": (2, 3),
            "typestr": "<f4",
            "data": (0, False),
            "version": 3,
            "strides": None,
        }


def test_wraps_cuda_array_interface_without_copy():
    wrapped = arrays.asarray(_FakeDeviceArray())
    assert wrapped.device == "cuda:0" and wrapped.shape == (2, 3)
    assert wrapped.strides == (12, 4) and wrapped.dtype == np.float32
    view = wrapped[:, 1:]
    assert view.shape == (2, 2) and view.strides == (12, 4) and view.ptr == 4
    with pytest.raises(TypeError, match="Arrays take basic indices.*do it in numpy"):
        wrapped[[0, 1]]


def test_reshape_views_contiguous_arrays_and_refuses_strided_ones(rng):
    values = rng.standard_normal((4, 6))
    arr = arrays.asarray(values)
    flat = arr.reshape(-1)
    assert flat.shape == (24,) and flat.ptr == arr.ptr
    assert arr.reshape((3, 8)).strides == (64, 8) and arr.reshape(2, 3, 4).shape == (2, 3, 4)
    with pytest.raises(ValueError, match="cannot view 24 elements as shape"):
        arr.reshape(5, 5)
    with pytest.raises(ValueError, match="at most one -1"):
        arr.reshape(-1, -1)
    with pytest.raises(ValueError, match="copy\\(\\) it first"):
        arr[:, 1:3].reshape(-1)
    device = arrays.asarray(_FakeDeviceArray())
    view = device.reshape(6)
    assert (view.shape, view.strides, view.ptr, view.device) == ((6,), (4,), 0, "cuda:0")


def test_refusals_of_shapes_and_objects_are_eagles_errors():
    with pytest.raises(eagle.errors.EagleTypeError, match="reshape takes ints"):
        arrays.zeros(6).reshape(None)
    with pytest.raises(eagle.errors.EagleValueError, match="more than any array can hold"):
        arrays.zeros((2**40, 2**40))
    with pytest.raises(eagle.errors.EagleValueError, match="asarray cannot make an array"):
        arrays.asarray([[1.0], [2.0, 3.0]])
    assert arrays.zeros(6).reshape(np.array([2, 3])).shape == (2, 3)


def test_a_0d_array_stays_0d_when_converted_copied_or_pickled():
    import copy
    import pickle

    zero_d = arrays.full((), 7, "int16")
    for made in (
        arrays.asarray(np.array(5.0), dtype="float32"),
        arrays.asarray(5.0, dtype="float32"),
        pickle.loads(pickle.dumps(zero_d)),
        copy.deepcopy(zero_d),
    ):
        assert made.shape == () and made.numpy().shape == ()


@pytest.mark.parametrize(("values", "dtype"), [(300, "int8"), ([-1], "uint8"), ([2**40], "int32")])
def test_python_numbers_a_dtype_cannot_hold_are_refused(values, dtype):
    """As numpy refuses them (an array given is cast as numpy casts it)."""
    with pytest.raises(eagle.errors.EagleOverflowError, match=f"out of bounds for {dtype}"):
        arrays.asarray(values, dtype=dtype)
    with pytest.raises(eagle.errors.EagleTypeError, match="cannot make float32 of this object"):
        arrays.asarray(1 + 2j, dtype="float32")


@pytest.mark.parametrize("values", [[2**70], 2**64, [[1, -(2**80)]]])
def test_python_ints_no_dtype_holds_are_an_overflow_not_a_non_number(values):
    with pytest.raises(eagle.errors.EagleOverflowError, match="ints beyond int64 .* no array"):
        arrays.asarray(values)
    with pytest.raises(eagle.errors.EagleTypeError, match="takes numbers or bools"):
        arrays.asarray([2**70, "a"])


def test_copy_false_is_refused_where_reading_the_array_copies():
    host = arrays.asarray(np.arange(4.0))
    same = np.asarray(host, copy=False)
    same[0] = 99.0
    assert host.numpy()[0] == 99.0  # no copy: the memory itself
    with pytest.raises(ValueError, match="copy=False, but reading float64 as float32"):
        np.asarray(host, dtype=np.float32, copy=False)
    assert np.asarray(host, dtype=np.float32).dtype == np.float32
