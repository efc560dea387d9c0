"""Prepared cuBLAS calls: what a :class:`~eagle.gemm.capture.CublasCaptureHandle` keeps
of a checked product, so that a later call with the same params and operands only
enqueues, and the key under which a handle records what it warmed."""

from __future__ import annotations

import ctypes
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from eagle.errors import EagleOverflowError, EagleTypeError, shown
from eagle.gemm.params import GemmParams, SgemmParams

__all__ = [
    "ALIGNMENT",
    "CACHED_CALLS",
    "Call",
    "Prepared",
    "Scalars",
    "host_scalars",
    "product_key",
    "real_scalars",
    "write_span",
]

ALIGNMENT = 16  # bytes: cuBLAS picks kernels by how operands align to its widest loads
CACHED_CALLS = 1024  # prepared calls a handle keeps per entry point before starting afresh

Params = SgemmParams | GemmParams

#: ``(alpha, beta)`` in host memory, where cuBLAS reads them when a call runs
Scalars = ctypes.Array[Any]

_SCALARS: dict[str, type[Scalars]] = {
    "float32": ctypes.c_float * 2,
    "float64": ctypes.c_double * 2,
}


def real_scalars(alpha: Any, beta: Any) -> tuple[float, float]:
    """``alpha`` and ``beta`` as Python floats, each checked to be one real number (a
    Python or numpy number, a 0-d array or tensor, anything ``float()`` takes but a
    string) before either is used."""
    return _real("alpha", alpha), _real("beta", beta)


def _real(name: str, value: Any) -> float:
    if isinstance(value, numbers.Real):
        try:
            return float(value)
        except OverflowError:  # an int beyond any float
            size = f"an int of {value.bit_length()} bits" if isinstance(value, int) else "a number"
            raise EagleOverflowError(f"{name} is {size}, beyond any float") from None
    complex_ = isinstance(value, numbers.Complex | np.complexfloating) or (
        isinstance(value, np.ndarray) and value.dtype.kind == "c"
    )
    if not (complex_ or isinstance(value, str | bytes) or getattr(value, "ndim", 0)):
        try:
            return float(value)  # a 0-d numpy array or torch tensor, a Decimal
        except (TypeError, ValueError, RuntimeError, OverflowError):
            pass
    hint = " (pass its real part, .real, if that is what you mean)" if complex_ else ""
    raise EagleTypeError(
        f"{name} must be a real number (a Python or numpy int or float), not {shown(value)}{hint}"
    )


def host_scalars(alpha: float, beta: float, dtype: str) -> tuple[Scalars, int, int]:
    """``alpha`` and ``beta`` in host memory in ``dtype`` (``"float32"`` or
    ``"float64"``), and their addresses. A ctypes array, as its address costs a twentieth
    of a numpy array's (``.ctypes.data``), on every product bound or moved."""
    scalars = _SCALARS[dtype](alpha, beta)
    alpha_at = ctypes.addressof(scalars)
    return scalars, alpha_at, alpha_at + ctypes.sizeof(scalars) // 2


class Call:
    """One checked product on one handle: the binding, every argument it takes, and
    the host scalars its arguments point at, holding ``values`` (alpha, beta)."""

    __slots__ = ("args", "function", "key", "scalars", "swap", "values", "warm")

    def __init__(
        self,
        function: Callable[..., None],
        args: tuple[Any, ...],
        scalars: Scalars,
        values: tuple[float, float],
        key: tuple[Any, ...],
        *,
        swap: bool,
        warm: bool,
    ) -> None:
        self.function, self.args, self.scalars, self.key = function, args, scalars, key
        self.swap, self.warm = swap, warm
        self.values = values

    def run(self, alpha: Any, beta: Any) -> None:
        if type(alpha) is float and type(beta) is float:  # (the common case, unchecked)
            values = (alpha, beta)
        else:
            values = real_scalars(alpha, beta)  # both checked before either is written
        if values != self.values:  # cuBLAS reads them when the call is made
            self.scalars[0], self.scalars[1] = values
            self.values = values
        self.function(*self.args)


class Prepared(dict[tuple[Any, ...], Call]):
    """One entry point's prepared calls, by their params and each operand's pointer, shape,
    strides, dtype and device; and the last one used, with its key (found again by
    comparing keys, without hashing them)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        super().__init__()
        self.last: tuple[tuple[Any, ...], Call] | None = None

    def clear(self) -> None:
        super().clear()
        self.last = None


def write_span(params: Params, itemsize: int) -> int:
    """Bytes a product writes from its destination's address: ((n - 1) * ldc + m) elements."""
    return ((params.n - 1) * params.ldc + params.m) * itemsize if params.m and params.n else 0


def product_key(params: Params, first: Any, second: Any, out: Any) -> tuple[Params, int, int, int]:
    return (params, first.ptr % ALIGNMENT, second.ptr % ALIGNMENT, out.ptr % ALIGNMENT)
