"""Arrays eagle has no implementation for, seen through the protocols they speak:
DLPack (1.x and legacy capsules, host or device) and the CUDA array interface (v3).

What an Array over such memory keeps (:class:`Source`), a numpy view of host memory
(:func:`host_view`), what the CUDA array interface says (:func:`check_unmasked`,
:func:`interface_producer`, :func:`interface_key`), and :func:`order`, which makes a
stream wait for another's queued work without a host wait.
:mod:`eagle.arrays._holder` builds the Arrays over these objects (it builds every
Array over memory eagle did not allocate) and picks between them and the
implementations of the frameworks eagle knows.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from eagle.cuda._runtime import cudart, runtime
from eagle.cuda.graph import is_capturing
from eagle.cuda.stream import DEFAULT_STREAM, FRAMEWORK_STREAMS
from eagle.errors import EagleTypeError, EagleValueError

__all__ = [
    "Source",
    "check_unmasked",
    "host_view",
    "interface_key",
    "interface_producer",
    "known",
    "order",
]


class Source(NamedTuple):
    """What keeps foreign device memory alive (``keep``), and the framework it came
    from (``"torch"``, ``"cupy"``, or None), whose current stream eagle's work over it
    uses (:func:`~eagle.cuda.stream.framework_stream` reads ``framework``). A named tuple:
    one is built per foreign plane of every bind."""

    keep: Any
    framework: str | None


def order(producer: int, consumer: int) -> None:
    """Make ``consumer`` wait for the work queued on ``producer`` so far (no host wait).

    Nothing is done when they are one stream, or when ``consumer`` is being captured
    and ``producer`` is not: work queued outside a capture cannot order the graph's
    replays (whoever replays it orders them), and a capture may not wait for it.
    """
    if consumer == producer:
        return
    if is_capturing(consumer) and not is_capturing(producer):
        return
    event = cudart.cudaEventCreateWithFlags(runtime().cudaEventDisableTiming)
    try:
        cudart.cudaEventRecord(event, producer)
        cudart.cudaStreamWaitEvent(consumer, event, 0)
    finally:
        cudart.cudaEventDestroy(event)


def known(framework: str) -> str | None:
    """``framework`` when eagle finds its current stream (torch, CuPy), else None."""
    return framework if framework in FRAMEWORK_STREAMS else None


# -- DLPack ----------------------------------------------------------------------------------


class _HostMemory:
    """Host memory some producer owns, seen by numpy; keeps ``owner`` alive."""

    def __init__(self, owner: Any, interface: dict[str, Any]) -> None:
        self.owner = owner
        self.__array_interface__ = interface


def host_view(layout: Any, owner: Any) -> np.ndarray:
    """A numpy view of host memory laid out as ``layout`` says (``ptr``, ``shape``, byte
    ``strides``, ``dtype``, ``readonly``), keeping ``owner`` alive: any dtype numpy has,
    bfloat16 included."""
    interface = {
        "shape": tuple(layout.shape),
        "typestr": f"|V{layout.dtype.itemsize}",
        "data": (layout.ptr, layout.readonly),
        "strides": tuple(layout.strides),
        "version": 3,
    }
    return np.asarray(_HostMemory(owner, interface)).view(layout.dtype)


# -- the CUDA array interface ----------------------------------------------------------------


def check_unmasked(info: dict[str, Any]) -> None:
    """Refuse a masked CUDA array interface (TypeError)."""
    if info.get("mask") is not None:
        raise EagleTypeError(
            "obj's __cuda_array_interface__ has a mask; eagle takes unmasked arrays"
        )


def interface_producer(info: dict[str, Any]) -> int | None:
    """The stream a CUDA array interface says its producer queued work on (the legacy
    default stream for one before version 3, which has no stream field), or None.

    Raises:
        ValueError: a stream of 0, which v3 forbids.
    """
    producer = info.get("stream", 1 if int(info.get("version", 0)) < 3 else None)
    if producer is None:
        return None
    if producer == 0:
        raise EagleValueError("obj's __cuda_array_interface__ stream is 0, which v3 forbids")
    return DEFAULT_STREAM if producer == 1 else int(producer)


def interface_key(info: dict[str, Any]) -> tuple[Any, ...]:
    """What a binding over a CUDA array interface depends on: its address, layout, dtype
    and read-only flag (with unified addressing, an address names one device; a binding
    keeps the memory alive, so it names the same memory while the binding lives)."""
    data = info["data"]
    strides = info.get("strides")
    return (
        "interface",
        data[0],
        tuple(info["shape"]),
        None if strides is None else tuple(strides),
        info["typestr"],
        data[1],
        info.get("mask") is None,
    )
