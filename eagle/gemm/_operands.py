"""What a product takes: its operands from any producer, and its transpose flags.

A product's operands may be anything :func:`eagle.arrays._holder.hold` takes:
numpy arrays, eagle Arrays, torch tensors, CuPy arrays, and any object with
the CUDA array interface (v3) or DLPack. :func:`described` reads their layouts
for calls that only describe a product (nothing taken, no stream); every
operand is checked by the one check host and device share
(:func:`~eagle.arrays._holder.check_buffer`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from eagle.arrays import _holder
from eagle.gemm.errors import GemmMappingUnavailable

__all__ = ["check_flags", "described"]


def check_flags(transpose_a: Any, transpose_b: Any, transpose_out: Any) -> tuple[bool, bool, bool]:
    """The transpose flags, each checked to be a bool (numpy's too).

    Raises:
        TypeError: naming the flag that is not (``"False"`` would transpose).
    """
    flags = {"transpose_a": transpose_a, "transpose_b": transpose_b, "transpose_out": transpose_out}
    for name, value in flags.items():
        if not isinstance(value, bool | np.bool_):
            raise TypeError(f"{name} must be True or False, not {value!r}")
    return bool(transpose_a), bool(transpose_b), bool(transpose_out)


def described(given: Mapping[str, Any]) -> dict[str, Any]:
    """The operands ``a``, ``b``, ``out`` as layouts to read: an array eagle takes (numpy,
    an eagle Array, torch, CuPy, the CUDA array interface, DLPack) through
    :func:`~eagle.arrays._holder.describe` (nothing taken, no stream: nothing runs);
    anything else as it is (``_dtype_of`` asks it for a shape, strides and dtype).

    Raises:
        GemmMappingUnavailable: what neither the host nor a device takes
            (:func:`~eagle.arrays._holder.check_buffer`): non-native byte order,
            a null or misaligned address, an ``out`` that is read-only or a
            torch tensor that requires grad.
    """
    described = {}
    for name, value in given.items():
        layout = _holder.describe(value)
        if layout is not None:
            _holder.check_buffer(
                layout,
                f"operand {name!r}",
                written=name == "out",
                grad=layout.grad,
                error=GemmMappingUnavailable,
            )
        described[name] = value if layout is None else layout
    return described
