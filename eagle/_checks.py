"""The one check of a buffer that the host and every device path share: :func:`check_buffer`.

It imports nothing of eagle but its error kinds, and sits at eagle's root, below
``eagle.cuda`` and ``eagle.arrays``, so that every layer that takes buffers (plan
planes, products, graph rebinds) can ask it without importing another's package.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from eagle.errors import EagleTypeError, EagleValueError

__all__ = ["check_buffer"]


def check_buffer(
    array: Any,
    label: str,
    *,
    written: bool,
    grad: bool = False,
    error: type[Exception] | None = None,
) -> None:
    """Refuse a buffer neither the host nor a device takes, naming it ``label``.

    Refused: a dtype in non-native byte order; elements at address 0 (a null
    pointer); an address or a byte stride that is not a multiple of the dtype's
    alignment; and, when ``written``, read-only memory or a torch tensor that
    requires grad (``grad``). An array without elements is only checked for the
    first and the last.

    Args:
        array: a numpy array, or what has ``shape``, ``strides`` (bytes),
            ``dtype`` and, when present, ``ptr`` and ``readonly`` (an eagle
            Array; without ``ptr``, only the dtype is checked).
        label: how errors name it (``"plane 'y'"``, ``"operand 'a'"``).
        written: the work writes it.
        grad: it is a torch tensor that requires grad.
        error: the error class to raise; None for EagleTypeError (byte order) and
            EagleValueError (everything else).
    """
    dtype = array.dtype
    if not dtype.isnative:
        raise (error or EagleTypeError)(
            f"{label} is {dtype.str}, in non-native byte order, which eagle does not "
            f"compute in; pass x.astype(x.dtype.newbyteorder('='))"
        )
    if written and grad:
        raise (error or EagleValueError)(
            f"{label} is written, and it is a torch tensor that requires grad: eagle never "
            "writes one behind autograd's back; use eagle.torch.function(kernel) to make "
            "the write part of the graph, or pass .detach() of it to write it outside autograd"
        )
    numpy = isinstance(array, np.ndarray)
    readonly = not array.flags.writeable if numpy else getattr(array, "readonly", False)
    if written and readonly:
        raise (error or EagleValueError)(
            f"{label} is read-only (its producer marked its memory so), and it is written; "
            "pass a writable array (a copy of it)"
        )
    if numpy and array.flags.aligned:  # (numpy's own check: address and strides)
        return
    ptr = array.__array_interface__["data"][0] if numpy else getattr(array, "ptr", None)
    shape = tuple(array.shape)
    if ptr is None or not math.prod(shape):
        return
    if not ptr:
        raise (error or EagleValueError)(
            f"{label} is at address 0 (a null pointer) with {math.prod(shape)} elements; "
            "pass an allocated array"
        )
    alignment = dtype.alignment
    strides = tuple(array.strides)
    if ptr % alignment or any(
        stride % alignment for stride, extent in zip(strides, shape, strict=True) if extent > 1
    ):
        raise (error or EagleValueError)(
            f"{label} is misaligned: its address {ptr:#x} or byte strides {strides} are not "
            f"multiples of {alignment}, the alignment of {dtype.name}; pass an aligned copy"
        )
