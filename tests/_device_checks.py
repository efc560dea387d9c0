"""Helpers shared by the GPU tests of the run-time checks (hawk.emit.checks)."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.plan
import hawk
from eagle import arrays

DTYPES = [np.float32, np.float64]
GUARD = 64  # poisoned elements on each side of a guarded plane


def dev(values: np.ndarray, dtype: type) -> arrays.Array:
    """``values`` as a device array of ``dtype``."""
    return arrays.asarray(np.asarray(values, dtype), device="cuda:0")


def host_error(kernel: hawk.Kernel, **planes: np.ndarray) -> Exception:
    """The error a host run of ``kernel`` over copies of ``planes`` raises."""
    with pytest.raises((IndexError, ZeroDivisionError, ValueError, OverflowError)) as caught:
        eagle.plan.auto(kernel).run(**{name: value.copy() for name, value in planes.items()})
    return caught.value


def guarded(size: int, dtype: type, fill: float) -> tuple[arrays.Array, arrays.Array, np.ndarray]:
    """A plane of ``size`` elements equal to ``fill`` inside a device buffer with
    :data:`GUARD` poisoned values on each side: (buffer, plane view, the buffer's
    initial values)."""
    initial = np.full(size + 2 * GUARD, -777.0, dtype)
    initial[GUARD : GUARD + size] = fill
    buffer = dev(initial, dtype)
    return buffer, buffer[GUARD : GUARD + size], initial
