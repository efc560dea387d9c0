"""Host tests of foreign arrays in and out of eagle.arrays: DLPack (versioned and
legacy capsules), the CUDA array interface, torch-like tensors, float16/bfloat16,
and the exact-fit and basic-index rules."""

from __future__ import annotations

import ctypes
import gc
import weakref

import ml_dtypes
import numpy as np
import pytest

from eagle import arrays
from eagle.arrays import _array, _foreign, _holder


class _DLPackProducer:
    """Exposes only DLPack, over host memory it owns (a numpy array or eagle Array)."""

    def __init__(self, values, *, legacy=False):
        self.values = values
        self.legacy = legacy
        self.asked: list[dict] = []

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        self.asked.append(kwargs)
        if self.legacy:
            if "max_version" in kwargs:
                raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
            return self.values.__dlpack__()
        return self.values.__dlpack__(**kwargs)


def test_a_dlpack_only_producer_is_wrapped_without_copy(rng):
    values = rng.standard_normal((4, 6))
    producer = _DLPackProducer(values[:, ::2])
    arr = arrays.asarray(producer)
    assert producer.asked == [{"stream": None, "max_version": (1, 1)}]
    assert arr.is_host and arr.ptr == values.ctypes.data
    assert (arr.shape, arr.strides, arr.dtype) == ((4, 3), (48, 16), np.dtype("float64"))
    arr.fill(7.0)
    assert np.all(values[:, ::2] == 7.0) and np.all(values[:, 1::2] != 7.0)


def test_a_legacy_producer_gets_asked_again_without_max_version(rng):
    values = rng.standard_normal(5).astype(np.float32)
    producer = _DLPackProducer(values, legacy=True)
    arr = arrays.asarray(producer)
    assert len(producer.asked) == 2 and producer.asked[-1] == {"stream": None}
    assert arr.ptr == values.ctypes.data and np.array_equal(arr.numpy(), values)


def test_the_producer_is_released_when_the_array_goes():
    values = np.arange(6.0)
    alive = weakref.ref(values)
    arr = arrays.asarray(_DLPackProducer(values))
    del values
    gc.collect()
    assert alive() is not None  # the capsule's owner keeps it
    del arr
    gc.collect()
    assert alive() is None


def test_read_only_memory_stays_read_only(rng):
    values = rng.standard_normal(4)
    values.flags.writeable = False
    arr = arrays.asarray(_DLPackProducer(values))
    assert arr.readonly and arr[1:].readonly
    with pytest.raises(ValueError, match="read-only"):
        arr.fill(1.0)
    back = np.from_dlpack(arrays.asarray(values))
    assert not back.flags.writeable and back.ctypes.data == values.ctypes.data
    later = rng.standard_normal(4)
    arr = arrays.asarray(later)
    later.flags.writeable = False  # made read-only after the Array was: exported as it is now
    assert arr.readonly and not np.from_dlpack(arr).flags.writeable


def test_a_tensor_that_requires_grad_is_read_through_its_own_memory():
    torch = pytest.importorskip("torch")
    tensor = torch.randn(3, dtype=torch.float64, requires_grad=True)
    arr = arrays.asarray(tensor)  # torch itself refuses to export it through DLPack
    assert arr.is_host and arr.ptr == tensor.data_ptr()
    np.testing.assert_array_equal(arr.numpy(), tensor.detach().numpy())
    # never written behind autograd's back: a fill, a product's out or a plane refuse it
    loss = (tensor * tensor).sum()
    assert arr.readonly and not arr.numpy().flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        arr.fill(10.0)
    loss.backward()
    np.testing.assert_array_equal(tensor.grad.numpy(), 2 * tensor.detach().numpy())


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_half_precision_round_trips_through_dlpack_and_fills(name):
    arr = arrays.full((2, 3), 1.5, name)
    assert arr.dtype.name == name and arr.itemsize == 2
    arr[0].fill(-2.25)
    wrapped = arrays.asarray(_DLPackProducer(arr))
    assert wrapped.dtype == arr.dtype and wrapped.ptr == arr.ptr
    expected = np.array([[-2.25] * 3, [1.5] * 3], dtype=arr.dtype)
    assert np.array_equal(wrapped.numpy().astype(np.float64), expected.astype(np.float64))
    assert arrays.zeros(2, ml_dtypes.bfloat16).dtype.name == "bfloat16"
    with pytest.raises(ValueError, match="overflows"):
        arr.fill(1e300)


class _Memory:
    """Stands for the device memory a fake device Array keeps alive."""


def _fake_device_array(owner=None):
    return arrays.Array(
        ptr=4096,
        shape=(2, 3),
        dtype=np.dtype("float32"),
        strides=(12, 4),
        device_index=0,
        owner=owner,
    )


class _Stream:
    def ptr(self):
        return 0x77


@pytest.fixture
def no_driver_ordering(monkeypatch):
    """Stand-ins for eagle's current stream and the event wait, recording the waits."""
    waits: list[tuple[int, int]] = []
    for module in (_array, _holder):
        monkeypatch.setattr(module, "launch_stream", lambda values, device=0: _Stream().ptr())
    monkeypatch.setattr(
        _foreign, "order", lambda producer, consumer: waits.append((producer, consumer))
    )
    return waits


def test_numpy_refuses_a_device_array_with_buffer_error_and_nothing_leaks(no_driver_ordering):
    memory = _Memory()
    alive = weakref.ref(memory)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="Unsupported device"):  # numpy's own refusal
            np.from_dlpack(_fake_device_array(memory))
        with pytest.raises(BufferError, match="on cuda:0 .* cannot go to the CPU"):
            np.from_dlpack(_fake_device_array(memory), device="cpu")
    del memory
    gc.collect()
    assert alive() is None  # every refused export let go of its array
    with pytest.raises(BufferError, match="on cuda:0 .* cannot go to the CPU"):
        _fake_device_array().__dlpack__(dl_device=(1, 0))
    with pytest.raises(BufferError, match="stream 0 is ambiguous"):
        _fake_device_array().__dlpack__(stream=0)
    with pytest.raises(BufferError, match="without copying"):
        _fake_device_array().__dlpack__(copy=True)


def test_device_export_names_its_capsule_by_version_and_orders_the_consumer(
    no_driver_ordering,
):
    valid = ctypes.pythonapi.PyCapsule_IsValid
    valid.restype, valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    memory = _Memory()
    alive = weakref.ref(memory)
    versioned = _fake_device_array(memory).__dlpack__(stream=None, max_version=(1, 0))
    legacy = _fake_device_array().__dlpack__(stream=0x55)
    skipped = _fake_device_array().__dlpack__(stream=-1)
    assert valid(versioned, b"dltensor_versioned") and valid(legacy, b"dltensor")
    assert valid(skipped, b"dltensor")
    assert no_driver_ordering == [(0x77, 1), (0x77, 0x55)]
    wrapped = arrays.asarray(_DLPackProducerOnDevice(versioned))
    assert (wrapped.ptr, wrapped.shape, wrapped.strides, wrapped.device) == (
        4096, (2, 3), (12, 4), "cuda:0"
    )  # fmt: skip
    del versioned, legacy, skipped, wrapped, memory
    gc.collect()
    assert alive() is None


class _DLPackProducerOnDevice:
    """Hands over a capsule made elsewhere, claiming device memory on cuda:0."""

    def __init__(self, capsule):
        self.capsule = capsule
        self.asked: list[dict] = []

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kwargs):
        self.asked.append(kwargs)
        return self.capsule


class _CudaInterface:
    def __init__(self, **extra):
        self.__cuda_array_interface__ = {
            "shape": (3,),
            "typestr": "<f8",
            "data": (0, True),
            "version": 3,
            "strides": None,
            **extra,
        }


def test_cuda_array_interface_only_producers():
    arr = arrays.asarray(_CudaInterface())
    assert arr.readonly and arr.device == "cuda:0" and arr.strides == (8,)
    assert arr.__cuda_array_interface__["data"] == (0, True)
    with pytest.raises(ValueError, match="stream is 0, which v3 forbids"):
        arrays.asarray(_CudaInterface(stream=0))
    with pytest.raises(TypeError, match="has a mask"):
        arrays.asarray(_CudaInterface(mask=object()))


def test_cuda_array_interface_stream_orders_eagle_after_the_producer(no_driver_ordering):
    arrays.asarray(_CudaInterface(stream=0x1234))
    arrays.asarray(_CudaInterface())  # v3 without a stream: nothing to wait for
    arrays.asarray(_CudaInterface(version=2))  # torch's: its default stream, the legacy one
    assert no_driver_ordering == [(0x1234, 0x77), (0, 0x77)]


# -- exact fit and basic indices (issue 11) --------------------------------------------------


@pytest.mark.parametrize(
    ("value", "dtype", "message"),
    [
        (1.5, "int32", "does not fit int32 exactly"),
        (float("nan"), "int32", "does not fit int32 exactly"),
        (float("inf"), "int64", "does not fit int64 exactly"),
        (2**70, "int64", "does not fit int64 exactly"),
        (1 + 2j, "float64", "is complex; float64 is real"),
        (1 + 0j, "float32", "is complex"),
        (1e300, "float32", "overflows float32"),
        ("1", "float64", "is not a number"),
        # an int into a real dtype is held exactly or refused (they were rounded)
        (2**24 + 1, "float32", "value 16777217 does not fit float32 exactly"),
        (2049, "float16", "does not fit float16 exactly"),
        (257, "bfloat16", "does not fit bfloat16 exactly"),
        (np.int64(2**53 + 1), "float64", "does not fit float64 exactly"),
        (2**128, "float32", "an int of 129 bits does not fit float32 exactly"),
    ],
)
def test_full_and_fill_apply_the_exact_fit_rule(value, dtype, message):
    with pytest.raises(ValueError, match=message):
        arrays.full(3, value, dtype)
    with pytest.raises(ValueError, match=message):
        arrays.zeros(3, dtype).fill(value)


def test_full_takes_values_that_fit():
    assert arrays.full(2, 2**70, "float64").numpy()[0] == 2.0**70  # a float64 holds it
    assert arrays.full(2, 2048, "float16").numpy()[0] == 2048
    assert np.array_equal(arrays.full(2, 3.0, "int32").numpy(), [3, 3])
    assert arrays.full(2, 1 + 2j, "complex64").numpy()[0] == 1 + 2j
    assert np.isnan(arrays.full(1, float("nan"), "float32").numpy()[0])


@pytest.mark.parametrize("index", [[0, 2], np.array([0, 2]), np.array([True, False, True]), True])
def test_host_arrays_refuse_gathers_like_device_arrays(index):
    host = arrays.asarray(np.arange(3.0))
    with pytest.raises(TypeError, match="Arrays take basic indices.*do it in numpy"):
        host[index]
    with pytest.raises(TypeError, match="Arrays take basic indices"):
        arrays.asarray(_CudaInterface())[index]
    assert host[np.int64(1)].shape == () and host[None, 1:].shape == (1, 2)
