"""Arrays eagle has no implementation for, seen through the protocols they speak:
DLPack (1.x and legacy capsules, host or device) and the CUDA array interface (v3).

:func:`from_dlpack` and :func:`from_interface` say where an object's elements
are (an :class:`~eagle.arrays.Array` over them, no copy), and the stream its
producer queues work over them on; :func:`order` makes a stream wait for
another's queued work, without a host wait. :mod:`eagle.arrays._holder` picks
between these and the implementations of the frameworks eagle knows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from eagle.arrays import _dlpack
from eagle.cuda._runtime import cudart, runtime
from eagle.cuda.graph import is_capturing
from eagle.cuda.stream import DEFAULT_STREAM, launch_stream
from eagle.errors import EagleBufferError, EagleTypeError, EagleValueError

if TYPE_CHECKING:
    from eagle.arrays._array import Array

__all__ = [
    "Source",
    "check_unmasked",
    "from_dlpack",
    "from_interface",
    "host_view",
    "interface_key",
    "interface_producer",
    "known",
    "order",
]


@dataclass(frozen=True, slots=True)
class Source:
    """What keeps foreign device memory alive (``keep``), and the framework it came
    from (``"torch"``, ``"cupy"``, or None), whose current stream eagle's work over it
    uses (:func:`~eagle.cuda.stream.framework_stream` reads ``framework``)."""

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
    return framework if framework in ("torch", "cupy") else None


# -- DLPack ----------------------------------------------------------------------------------


def from_dlpack(obj: Any, framework: str | None, sync: bool) -> tuple[Array, int | None]:
    """``obj``'s elements through its DLPack capsule, and the stream the producer ordered
    its work before (None: none, on the host or without ``sync``).

    With ``sync`` (device memory), the capsule is asked for with the stream eagle's work
    over ``obj`` goes to (:func:`~eagle.cuda.stream.launch_stream`) as the consumer
    stream, so the producer orders its queued work before it; without, with -1 (no
    wait: for calls that only read the layout).

    Raises:
        BufferError: the memory is on a device eagle cannot use.
    """
    from eagle.arrays._array import Array

    kind, device_id = (int(v) for v in obj.__dlpack_device__())
    on_host = kind in (_dlpack.CPU, _dlpack.CUDA_HOST)
    if not on_host and kind not in (_dlpack.CUDA, _dlpack.CUDA_MANAGED):
        raise EagleBufferError(
            f"obj lives on DLPack device type {kind}, which eagle cannot use; "
            "copy it to the CPU or a CUDA device first"
        )
    consumer = launch_stream((obj,), device_id) if sync and not on_host else None
    # DLPack's stream 0 is ambiguous (the legacy default stream is 1); -1 asks for no wait
    wanted = None if on_host else (-1 if consumer is None else (consumer or 1))
    imported = _dlpack.take(obj, wanted)
    if on_host:
        return Array(host=host_view(imported, imported)), None
    array = Array(
        ptr=imported.ptr,
        shape=imported.shape,
        dtype=imported.dtype,
        strides=imported.strides,
        device_index=device_id,
        owner=Source(imported, framework),
        readonly=imported.readonly,
    )
    return array, consumer


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


def from_interface(obj: Any, framework: str | None) -> tuple[Array, int | None]:
    """``obj``'s elements through its CUDA array interface, and the stream its producer
    queued work over them on (None: nothing to wait for).

    Raises:
        TypeError: a masked interface.
        ValueError: an interface stream of 0 (which v3 forbids).
    """
    from eagle.arrays._array import Array

    info = obj.__cuda_array_interface__
    check_unmasked(info)
    dtype = np.dtype(info["typestr"])
    shape = tuple(int(d) for d in info["shape"])
    strides = info.get("strides")
    strides = _dlpack.compact(shape, dtype.itemsize) if strides is None else tuple(strides)
    ptr, readonly = int(info["data"][0]), bool(info["data"][1])
    device_index = int(cudart.cudaPointerGetAttributes(ptr).device) if ptr else 0
    array = Array(
        ptr=ptr,
        shape=shape,
        dtype=dtype,
        strides=strides,
        device_index=device_index,
        owner=Source(obj, framework),
        readonly=readonly,
    )
    return array, interface_producer(info)


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
