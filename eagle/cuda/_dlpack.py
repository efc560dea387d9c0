"""Export a device Array as a DLPack capsule (``__dlpack__``) without copying.

The capsule holds a ``DLManagedTensor`` whose deleter releases the exported
array; until a consumer takes the capsule (renaming it ``used_dltensor``) the
capsule's own destructor calls that deleter.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

CPU = 1
CUDA = 2

_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_NAME = b"dltensor"


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


class _Managed(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [
    ("dl_tensor", _Tensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _Deleter),
]

_exports: dict[int, tuple[Any, ...]] = {}
_exports_lock = threading.Lock()


def _release(managed: Any) -> None:
    with _exports_lock:
        _exports.pop(ctypes.addressof(managed.contents), None)


_DELETER = _Deleter(_release)

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule: int) -> None:
    if _capsule_valid(capsule, _NAME):
        address = _capsule_pointer(capsule, _NAME)
        _release(ctypes.pointer(_Managed.from_address(address)))


def export(array: Any) -> Any:
    """A ``dltensor`` capsule viewing ``array``'s device memory.

    Raises:
        BufferError: a byte stride is not a whole number of elements.
    """
    itemsize = array.itemsize
    if any(stride % itemsize for stride in array.strides):
        raise BufferError(
            f"strides {array.strides} are not whole elements of {itemsize} bytes; "
            "DLPack cannot describe this view (copy() it first)"
        )
    ndim = array.ndim
    shape = (ctypes.c_int64 * max(ndim, 1))(*array.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*(s // itemsize for s in array.strides))
    managed = _Managed()
    tensor = managed.dl_tensor
    tensor.data = array.ptr
    tensor.device = _Device(CUDA, array.device_index)
    tensor.ndim = ndim
    tensor.dtype = _DataType(_CODES[array.dtype.kind], 8 * itemsize, 1)
    tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    tensor.byte_offset = 0
    managed.deleter = _DELETER
    address = ctypes.addressof(managed)
    with _exports_lock:
        _exports[address] = (managed, shape, strides, array)
    return _capsule_new(address, _NAME, ctypes.cast(_capsule_destructor, ctypes.c_void_p))
