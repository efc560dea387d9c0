"""DLPack in both directions, without copying.

:func:`export` has numpy build the capsule (``dltensor_versioned`` when the
consumer asks for DLPack 1.x, else ``dltensor``) over an ndarray that only
describes the Array's memory and keeps it alive, then sets the capsule's device
(and the type code numpy does not know). The capsule's deleter and destructor are thus
numpy's C functions, which run correctly with a consumer's exception pending
(no Python callback can), so a refused export leaks nothing. Type codes come from
hawk's dtype table (:data:`hawk.dtypes.TABLE`): a dtype numpy cannot export
(bfloat16, which ``ml_dtypes`` defines) is described to numpy as unsigned integers of
its size and given its own code afterwards.

:func:`take` consumes a producer's capsule: it reads the tensor's pointer, shape,
byte strides, dtype, device and read-only flag, renames the capsule as used,
and returns an :class:`Imported` whose collection calls the producer's deleter.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

import numpy as np

from eagle.errors import EagleBufferError
from hawk.dtypes import by_dlpack, find

CPU = 1
CUDA = 2
CUDA_HOST = 3
CUDA_MANAGED = 13

VERSION = (1, 1)
"""The DLPack version eagle produces and asks producers for."""

_READ_ONLY = 1
_LEGACY = b"dltensor"
_VERSIONED = b"dltensor_versioned"
_USED_LEGACY = b"used_dltensor"
_USED_VERSIONED = b"used_dltensor_versioned"


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _Version),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _Deleter),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _Tensor),
    ]


_api = ctypes.pythonapi
_capsule_valid = _api.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = _api.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_set_name = _api.PyCapsule_SetName
_capsule_set_name.restype = ctypes.c_int
_capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]


class _Described:
    """What numpy sees of an Array's memory: its layout, and the Array to keep alive."""

    def __init__(self, array: Any, interface: dict[str, Any]) -> None:
        self.array = array
        self.__array_interface__ = interface


def export(array: Any, *, device: tuple[int, int], versioned: bool, readonly: bool) -> Any:
    """A capsule viewing ``array``'s memory on ``device`` (``(type, id)``).

    Raises:
        BufferError: a byte stride is not a whole number of elements, or a
            read-only array is asked for as an unversioned capsule (which
            cannot say it is read-only).
    """
    itemsize = array.itemsize
    if any(stride % itemsize for stride in array.strides):
        raise EagleBufferError(
            f"strides {array.strides} are not whole elements of {itemsize} bytes; "
            "DLPack cannot describe this view (copy() it first)"
        )
    if readonly and not versioned:
        raise EagleBufferError(
            "this array is read-only and DLPack before 1.0 cannot say so; "
            "ask with max_version=(1, 0) or later"
        )
    row = find(array.dtype)
    foreign = row is not None and row.module != "numpy" and row.dlpack is not None
    described = np.asarray(
        _Described(
            array,
            {
                "shape": array.shape,
                "typestr": f"<u{itemsize}" if foreign else array.dtype.str,
                "data": (array.ptr, readonly),
                "strides": array.strides,
                "version": 3,
            },
        )
    )
    if versioned:
        capsule = described.__dlpack__(max_version=(1, 0))
        managed: Any = _ManagedVersioned.from_address(_capsule_pointer(capsule, _VERSIONED))
    else:
        capsule = described.__dlpack__()
        managed = _Managed.from_address(_capsule_pointer(capsule, _LEGACY))
    managed.dl_tensor.device = _Device(*device)
    if foreign:  # numpy described it as unsigned integers: give it its own code
        assert row is not None and row.dlpack is not None
        managed.dl_tensor.dtype = _DataType(*row.dlpack, 1)
    return capsule


# -- import -------------------------------------------------------------------------------


class Imported:
    """A producer's tensor, taken from its capsule; the producer's deleter runs when
    this goes.

    Attributes:
        ptr: address of the first element (byte offset applied).
        shape: extents.
        strides: byte strides.
        dtype: numpy dtype (``ml_dtypes.bfloat16`` for bfloat16).
        device: ``(device_type, device_id)``.
        readonly: the producer marked the memory read-only.
    """

    __slots__ = ("__weakref__", "device", "dtype", "ptr", "readonly", "shape", "strides")

    def __init__(self, capsule: Any) -> None:
        if _capsule_valid(capsule, _VERSIONED):
            address = _capsule_pointer(capsule, _VERSIONED)
            managed: Any = _ManagedVersioned.from_address(address)
            if managed.version.major > VERSION[0]:
                raise EagleBufferError(
                    f"the producer's DLPack {managed.version.major}.{managed.version.minor} "
                    f"is newer than eagle's {VERSION[0]}.{VERSION[1]}"
                )
            self.readonly = bool(managed.flags & _READ_ONLY)
            used = _USED_VERSIONED
        elif _capsule_valid(capsule, _LEGACY):
            address = _capsule_pointer(capsule, _LEGACY)
            managed = _Managed.from_address(address)
            self.readonly = False
            used = _USED_LEGACY
        else:
            raise EagleBufferError(
                "__dlpack__ returned something that is not an unused DLPack capsule"
            )
        tensor = managed.dl_tensor
        self.dtype = _dtype(tensor.dtype)
        self.device = (tensor.device.device_type, tensor.device.device_id)
        self.shape = tuple(tensor.shape[axis] for axis in range(tensor.ndim))
        itemsize = self.dtype.itemsize
        if tensor.strides:
            self.strides = tuple(tensor.strides[axis] * itemsize for axis in range(tensor.ndim))
        else:
            self.strides = compact(self.shape, itemsize)
        self.ptr = (tensor.data or 0) + tensor.byte_offset
        _capsule_set_name(capsule, used)
        deleter = managed.deleter
        function = ctypes.cast(deleter, ctypes.c_void_p).value
        if function:
            weakref.finalize(self, _call_deleter, function, address).atexit = False


_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)  # made once: each PYFUNCTYPE is a new class


def _call_deleter(function: int, managed: int) -> None:
    _DELETER(function)(managed)


def compact(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Row-major byte strides of ``shape``."""
    strides, step = [], itemsize
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(reversed(strides))


def _dtype(dl: _DataType) -> np.dtype:
    if dl.lanes != 1:
        raise EagleBufferError(f"DLPack vector dtypes ({dl.lanes} lanes) have no numpy dtype")
    row = by_dlpack(dl.code, dl.bits)
    if row is None:
        raise EagleBufferError(
            f"DLPack dtype code {dl.code} with {dl.bits} bits has no numpy dtype"
        )
    if not row.array:
        raise EagleBufferError(
            f"DLPack dtype {row.name} is not an eagle Array dtype yet: {row.note}"
        )
    return row.numpy


def take(producer: Any, stream: int | None) -> Imported:
    """Ask ``producer`` for a capsule (DLPack 1.x first, then the legacy form) with
    ``stream`` as the consumer stream, and take it."""
    try:
        capsule = producer.__dlpack__(stream=stream, max_version=VERSION)
    except TypeError:
        capsule = producer.__dlpack__(stream=stream)
    return Imported(capsule)
