"""Fill and gather for non-contiguous device views, as small NVRTC kernels.

Contiguous arrays use memset and memcpy; these kernels serve strided views
(``a[:, 1:4]``, ``a.T``) of up to eight axes. Both only enqueue work, so they
are legal inside a capture.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from eagle.cuda.module import load_kernel
from eagle.errors import EagleValueError

_MAX_AXES = 8
_BLOCK = 256
_MAX_GRID = 8192

_SOURCE = r"""
struct Layout { long long shape[8]; long long strides[8]; int ndim; };
struct U128 { unsigned long long lo, hi; };

__device__ __forceinline__ long long element_offset(const Layout& layout, long long index) {
    long long offset = 0;
    for (int axis = layout.ndim - 1; axis >= 0; --axis) {
        long long extent = layout.shape[axis];
        offset += (index % extent) * layout.strides[axis];
        index /= extent;
    }
    return offset;
}

#define EAGLE_STRIDED(T, SUFFIX)                                                           \
extern "C" __global__ void eagle_fill_##SUFFIX(char* base, T value, Layout layout,        \
                                               long long count) {                         \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;       \
         i += (long long)gridDim.x * blockDim.x)                                          \
        *(T*)(base + element_offset(layout, i)) = value;                                  \
}                                                                                         \
extern "C" __global__ void eagle_gather_##SUFFIX(T* out, const char* base, Layout layout, \
                                                 long long count) {                       \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;       \
         i += (long long)gridDim.x * blockDim.x)                                          \
        out[i] = *(const T*)(base + element_offset(layout, i));                           \
}

EAGLE_STRIDED(unsigned char, 1)
EAGLE_STRIDED(unsigned short, 2)
EAGLE_STRIDED(unsigned int, 4)
EAGLE_STRIDED(unsigned long long, 8)
EAGLE_STRIDED(U128, 16)
"""


class _Layout(ctypes.Structure):
    _fields_ = [
        ("shape", ctypes.c_longlong * _MAX_AXES),
        ("strides", ctypes.c_longlong * _MAX_AXES),
        ("ndim", ctypes.c_int),
    ]


class _U128(ctypes.Structure):
    _fields_ = [("lo", ctypes.c_uint64), ("hi", ctypes.c_uint64)]


_WORDS = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32, 8: ctypes.c_uint64}


def source() -> str:
    """The CUDA C of the strided kernels (CI compiles it for sm_90)."""
    return _SOURCE


def _layout(array: Any) -> _Layout:
    if array.ndim > _MAX_AXES:
        raise EagleValueError(
            f"strided device operations take at most {_MAX_AXES} axes, not {array.ndim}; "
            "copy to a contiguous array first"
        )
    layout = _Layout()
    for axis, (extent, stride) in enumerate(zip(array.shape, array.strides, strict=True)):
        layout.shape[axis] = extent
        layout.strides[axis] = stride
    layout.ndim = array.ndim
    return layout


def _grid(count: int) -> int:
    return max(1, min(_MAX_GRID, -(-count // _BLOCK)))


def _value(scalar: np.generic) -> Any:
    raw = np.asarray(scalar).tobytes()
    if len(raw) == 16:
        return _U128(int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little"))
    return _WORDS[len(raw)](int.from_bytes(raw, "little"))


def fill(array: Any, scalar: np.generic, stream_ptr: int) -> None:
    """Set every element of the strided device view ``array`` to ``scalar``."""
    kernel = load_kernel(_SOURCE, f"eagle_fill_{array.itemsize}", device=array.device_index)
    args = [ctypes.c_void_p(array.ptr), _value(scalar), _layout(array), np.int64(array.size)]
    kernel.launch(_grid(array.size), _BLOCK, args, stream_ptr)


def gather(array: Any, out: Any, stream_ptr: int) -> None:
    """Copy the strided device view ``array`` into the contiguous ``out``."""
    kernel = load_kernel(_SOURCE, f"eagle_gather_{array.itemsize}", device=array.device_index)
    args = [
        ctypes.c_void_p(out.ptr),
        ctypes.c_void_p(array.ptr),
        _layout(array),
        np.int64(array.size),
    ]
    kernel.launch(_grid(array.size), _BLOCK, args, stream_ptr)
