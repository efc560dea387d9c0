"""What a product takes: its operands from any producer, and its transpose flags.

A product's operands may be anything :func:`eagle.arrays._holder.hold` takes:
numpy arrays, eagle Arrays, torch tensors, CuPy arrays, and any object with
the CUDA array interface (v3) or DLPack. :func:`described` reads their layouts
for calls that only describe a product (nothing taken, no stream); every
operand is checked by the one check host and device share
(:func:`~eagle.arrays._holder.check_buffer`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from eagle.arrays import Array, _holder
from eagle.errors import EagleError, EagleTypeError
from eagle.gemm.errors import GemmMappingUnavailable

__all__ = [
    "ROLES",
    "SCALES",
    "Operand",
    "bump_written",
    "check_flags",
    "described",
    "handle_operands",
    "operand",
    "ordered",
]


def check_flags(transpose_a: Any, transpose_b: Any, transpose_out: Any) -> tuple[bool, bool, bool]:
    """The transpose flags, each checked to be a bool (numpy's too).

    Raises:
        TypeError: naming the flag that is not (``"False"`` would transpose).
    """
    flags = {"transpose_a": transpose_a, "transpose_b": transpose_b, "transpose_out": transpose_out}
    for name, value in flags.items():
        if not isinstance(value, bool | np.bool_):
            raise EagleTypeError(f"{name} must be True or False, not {value!r}")
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


class Operand(NamedTuple):
    """One buffer of a product as a side takes it.

    Attributes:
        array: on the host a numpy array; on a device an eagle Array over the same
            memory (or, for a stand-in with the device attributes, the object given).
        held: how it was taken (its producer's stream, the torch tensor), or None for
            a numpy array, an eagle Array or a stand-in.
    """

    array: Any
    held: _holder.Held | None


def operand(
    value: Any,
    label: str,
    *,
    side: str,
    written: bool,
    error: type[Exception],
    sync: bool,
    where: Callable[[Any], str],
) -> Operand:
    """``value`` as ``side`` (``"host"`` or ``"device"``) takes it, checked by the one check
    host and device share (:func:`~eagle.arrays._holder.check_buffer`).

    Args:
        value: a numpy array, an eagle Array, a torch tensor, a CuPy array, or any
            array with the CUDA array interface or DLPack.
        label: how errors name it (``"buffer 'a'"``).
        side: where the work runs.
        written: the work writes it.
        error: the error class of every refusal.
        sync: the work runs on a stream (see :func:`~eagle.arrays._holder.hold`).
        where: says where a value on the wrong side is (``"on cuda:0"``).

    Raises:
        ``error``: a value on the other side or no array, or a refusal of
            ``check_buffer``.
    """
    if type(value) is np.ndarray:
        held = None
        array: Any = value
    elif type(value) is Array:
        held, array = None, value
    else:
        try:
            held = _holder.hold(value, sync=sync)
        except EagleError as exc:  # a tensor eagle cannot read: named as this buffer
            raise error(f"{label}: {exc}") from None
        array = value if held is None else held.array
    if side == "host":
        host = array if type(array) is np.ndarray else None
        if host is None and getattr(array, "is_host", False):
            host = array.numpy()
        if host is None:
            raise error(
                f"{label} is {where(array)}; the host backend takes host arrays (numpy, host "
                "eagle Arrays, CPU torch tensors)"
            )
        array = host
    elif getattr(array, "is_host", True) or not isinstance(getattr(array, "ptr", None), int):
        raise error(
            f"{label} is {where(array)}; the device backend takes device arrays (device eagle "
            "Arrays, torch tensors, CuPy arrays, CUDA array interface objects)"
        )
    grad = held is not None and held.grad
    _holder.check_buffer(array, label, written=written, grad=grad, error=error)
    if written and side == "host" and _overlapping(array):  # the device's layout refuses it
        raise error(
            f"{label} is written, and its elements share memory (a broadcast or overlapping "
            f"view: shape {array.shape}, byte strides {array.strides}); pass an array whose "
            "elements are distinct, such as a contiguous one"
        )
    return Operand(array, held)


def _overlapping(array: np.ndarray) -> bool:
    """True unless each axis, from the smallest byte stride up, steps past all the memory
    the smaller ones reach (a sufficient test that no two elements share memory; it also
    refuses the rare interleaved views whose elements are distinct)."""
    if array.flags.c_contiguous or array.flags.f_contiguous or not array.size:
        return False
    reach = array.itemsize
    axes = zip(array.strides, array.shape, strict=True)
    for stride, extent in sorted((abs(s), n) for s, n in axes if n > 1):
        if stride < reach:
            return True
        reach += stride * (extent - 1)
    return False


def ordered(taken: Iterable[Operand], consumer: int) -> None:
    """Make ``consumer`` wait for what the producers of the ``taken`` operands queued."""
    _holder.order_after((o.held for o in taken if o.held is not None), consumer)


def bump_written(written: Operand) -> None:
    """Bump the version of a torch tensor the work wrote."""
    held = written.held
    if held is not None and held.tensor is not None:
        _holder.bump_versions((held.tensor,))


ROLES = ("a", "b", "out")

SCALES = ("a_scale", "b_scale")
"""The optional operands of an fp8 product: the factors' per-tensor scales."""


def handle_operands(operands: Any) -> tuple[Any, dict[str, _holder.Held]]:
    """A handle's ``{"a": ..., "b": ..., "out": ...}`` (and the scales of :data:`SCALES`
    it gives) with each device array of another producer (torch, CuPy, the CUDA array
    interface, DLPack) taken as an eagle Array over the same memory, and how each of
    those was taken, by role. Anything else stays as given, for the handle's checks to
    name (``operands`` itself, when it is no mapping or lacks a role).

    Raises:
        GemmMappingUnavailable: ``out`` is a torch tensor that requires grad.
    """
    if not isinstance(operands, Mapping) or any(role not in operands for role in ROLES):
        return operands, {}
    taken = dict(operands)
    held = {}
    for role in (*ROLES, *(scale for scale in SCALES if scale in operands)):
        value = operands[role]
        if isinstance(value, Array) or type(value) is np.ndarray:
            continue  # (an Array of a subclass too: held, it would be taken again and again)
        item = _holder.hold(value)
        if item is None or item.array.is_host:
            continue  # (refused by name as no device array)
        if role == "out":
            _holder.check_buffer(
                item.array, "operand 'out'", written=True, grad=item.grad,
                error=GemmMappingUnavailable,
            )  # fmt: skip
        taken[role] = item.array
        held[role] = item
    return taken, held
