"""Arrays from other libraries, seen without a copy: DLPack (1.x and legacy
capsules, host or device) and the CUDA array interface (v3).

:func:`describe` says where an object's elements are, in what layout and
dtype, whether they are read-only, and what keeps them alive; it orders the
stream eagle's work over the object goes to (:func:`~eagle.cuda.stream.launch_stream`:
eagle's ``with stream:``, else the producer framework's current stream, else
the default stream) after the producer's queued work, through DLPack's
``stream=`` argument or the interface's ``stream`` field (the legacy default
stream for a version 2 interface, which has none), without a host wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from eagle.arrays import _dlpack
from eagle.cuda._runtime import call, runtime
from eagle.cuda.stream import launch_stream

__all__ = ["Foreign", "Source", "describe", "order"]


@dataclass(frozen=True, slots=True)
class Source:
    """What keeps foreign device memory alive (``keep``), and the framework it came
    from (``"torch"``, ``"cupy"``, or None), whose current stream eagle's work over it
    uses (:func:`~eagle.cuda.stream.framework_stream` reads ``framework``)."""

    keep: Any
    framework: str | None


@dataclass(frozen=True, slots=True)
class Foreign:
    """A foreign array's elements: a numpy view of them on the host (``host``), or
    device memory (``ptr`` on ``device_index``) kept alive by ``owner``."""

    host: np.ndarray | None
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype
    device_index: int | None
    readonly: bool
    owner: Any


def describe(obj: Any) -> Foreign | None:
    """``obj``'s elements, or None when it speaks neither DLPack nor the CUDA array
    interface. A torch tensor that requires grad is read through ``detach()``
    (same memory).

    Raises:
        BufferError: the memory is on a device eagle cannot use.
        TypeError: a masked CUDA array interface.
        ValueError: an interface stream of 0 (which v3 forbids).
    """
    framework = type(obj).__module__.partition(".")[0]
    if getattr(obj, "requires_grad", False) is True and callable(getattr(obj, "detach", None)):
        obj = obj.detach()  # a torch tensor: the same memory, without the autograd graph
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(obj, framework)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cuda_interface(obj, framework)
    return None


def order(producer: int, consumer: int) -> None:
    """Make ``consumer`` wait for the work queued on ``producer`` so far (no host wait)."""
    if consumer == producer:
        return
    event = call("cudaEventCreateWithFlags", runtime().cudaEventDisableTiming)
    try:
        call("cudaEventRecord", event, producer)
        call("cudaStreamWaitEvent", consumer, event, 0)
    finally:
        call("cudaEventDestroy", event)


def _from_dlpack(obj: Any, framework: str) -> Foreign:
    kind, device_id = (int(v) for v in obj.__dlpack_device__())
    on_host = kind in (_dlpack.CPU, _dlpack.CUDA_HOST)
    if not on_host and kind not in (_dlpack.CUDA, _dlpack.CUDA_MANAGED):
        raise BufferError(
            f"obj lives on DLPack device type {kind}, which eagle cannot use; "
            "copy it to the CPU or a CUDA device first"
        )
    # DLPack's stream 0 is ambiguous: the legacy default stream is 1
    stream = None if on_host else (launch_stream((obj,), device_id) or 1)
    imported = _dlpack.take(obj, stream)
    return Foreign(
        host=_host_view(imported) if on_host else None,
        ptr=imported.ptr,
        shape=imported.shape,
        strides=imported.strides,
        dtype=imported.dtype,
        device_index=None if on_host else device_id,
        readonly=imported.readonly,
        owner=imported if on_host else Source(imported, _known(framework)),
    )


class _HostMemory:
    """Host memory some producer owns, seen by numpy; keeps ``owner`` alive."""

    def __init__(self, owner: Any, interface: dict[str, Any]) -> None:
        self.owner = owner
        self.__array_interface__ = interface


def _host_view(imported: _dlpack.Imported) -> np.ndarray:
    interface = {
        "shape": imported.shape,
        "typestr": f"|V{imported.dtype.itemsize}",
        "data": (imported.ptr, imported.readonly),
        "strides": imported.strides,
        "version": 3,
    }
    return np.asarray(_HostMemory(imported, interface)).view(imported.dtype)


def _known(framework: str) -> str | None:
    return framework if framework in ("torch", "cupy") else None


def _from_cuda_interface(obj: Any, framework: str) -> Foreign:
    info = obj.__cuda_array_interface__
    if info.get("mask") is not None:
        raise TypeError("obj's __cuda_array_interface__ has a mask; eagle takes unmasked arrays")
    dtype = np.dtype(info["typestr"])
    shape = tuple(int(d) for d in info["shape"])
    strides = info.get("strides")
    strides = _dlpack.compact(shape, dtype.itemsize) if strides is None else tuple(strides)
    ptr, readonly = int(info["data"][0]), bool(info["data"][1])
    device_index = int(call("cudaPointerGetAttributes", ptr).device) if ptr else 0
    # Before v3 the interface had no stream: assume the legacy default stream, where
    # torch and CuPy queue their work unless told otherwise.
    producer = info.get("stream", 1 if int(info.get("version", 0)) < 3 else None)
    if producer is not None:
        if producer == 0:
            raise ValueError("obj's __cuda_array_interface__ stream is 0, which v3 forbids")
        order(int(producer), launch_stream((obj,), device_index))
    return Foreign(
        host=None,
        ptr=ptr,
        shape=shape,
        strides=strides,
        dtype=dtype,
        device_index=device_index,
        readonly=readonly,
        owner=Source(obj, _known(framework)),
    )
