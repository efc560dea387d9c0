"""Arrays on the host or a CUDA device.

An :class:`Array` is one strided view of a buffer: a numpy array on the host
(``device="cpu"``, wrapped without a copy) or device memory from eagle's pool
(``device="cuda:0"``) or from another library (CuPy, PyTorch, numba), wrapped
without a copy through DLPack or ``__cuda_array_interface__``.

Dtypes are numpy's numeric and bool dtypes plus bfloat16 (``ml_dtypes.bfloat16``
on the host, loaded when first needed).
"""

from __future__ import annotations

from eagle.arrays._array import Array, empty, full, ones, zeros
from eagle.arrays._holder import asarray

__all__ = ["Array", "asarray", "empty", "full", "ones", "zeros"]

for _public in (Array, asarray, empty, full, ones, zeros):
    _public.__module__ = __name__
del _public
