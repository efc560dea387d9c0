"""The cuBLAS handles eagle's own products use, one per stream, and their lifetimes.

:func:`stream_handle` makes a stream's handle on first use (outside any
capture) and keeps it: a handle goes just before its stream when that is an
eagle :class:`~eagle.cuda.Stream`, and :func:`release_handles` releases the
rest (the default stream's, torch's, CuPy's), so the teardown order — graphs,
handles, pool — can be completed. :func:`warmed_handle` finds, for a capture of
a stream that has no handle, one of the device's handles that warmed the
products it would record.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from eagle.cuda._runtime import cudart
from eagle.cuda.stream import DEFAULT_STREAM, on_destroy, stream_object
from eagle.gemm.capture import CublasCaptureHandle, Params, free_retired

__all__ = ["release_handles", "stream_handle", "warmed_handle"]

_stream_handles: dict[tuple[int, int], CublasCaptureHandle] = {}
_stream_handles_lock = threading.Lock()


def stream_handle(stream_ptr: int, device: int = 0) -> CublasCaptureHandle:
    """The FP32 handle eagle's own products use on ``stream_ptr`` (made once, then cached).

    The handle goes (:meth:`~eagle.gemm.CublasCaptureHandle.destroy`) just before its
    stream, when that is an eagle :class:`~eagle.cuda.Stream`; handles for
    other streams (the default stream, torch's, CuPy's) stay until
    :func:`release_handles`. Inside a capture of ``stream_ptr`` it returns the
    handle made before the capture, and refuses to make one.

    Args:
        stream_ptr: a raw stream pointer on ``device``.
        device: the stream's device.

    Raises:
        GemmCaptureUnavailable: as :class:`CublasCaptureHandle`.
    """
    key = (device, stream_ptr)
    handle = _stream_handles.get(key)
    if handle is None or handle._closed:
        with _stream_handles_lock:
            handle = _stream_handles.get(key)
            if handle is None or handle._closed:
                # the token lets the handle's workspace free without keeping the stream alive
                handle = CublasCaptureHandle(_StreamToken(stream_ptr))  # type: ignore[arg-type]
                _stream_handles[key] = handle
                on_destroy(stream_ptr, functools.partial(_forget, key, handle))
    return handle


def warmed_handle(
    device: int, products: Iterable[tuple[Params, Mapping[str, Any]]]
) -> CublasCaptureHandle | None:
    """A live handle eagle made for a stream of ``device`` that has warmed every product
    of ``products`` (params, operands), or None when none has.

    Such a handle can record those products into a capture of another stream of the
    device (:func:`~eagle.gemm.lending.record_lent`). Nothing is made or run.
    """
    wanted = list(products)
    with _stream_handles_lock:
        handles = [h for (d, _), h in _stream_handles.items() if d == device and h.alive]
    for handle in handles:
        if all(handle.has_warmed(params, operands) for params, operands in wanted):
            return handle
    return None


def release_handles() -> None:
    """Destroy every handle eagle made for its own products on a stream.

    Their workspaces go back to the pool once the last live graph that
    recorded work against them is destroyed. Handles the garbage collector found
    (yours included) are freed here too.

    Call it after destroying the graphs and before destroying the memory pool;
    eagle makes new handles when it next needs them.
    """
    with _stream_handles_lock:
        handles = list(_stream_handles.values())
        _stream_handles.clear()
    for handle in handles:
        handle.destroy()
    free_retired()


class _StreamToken:
    """A stream by its pointer, without keeping an eagle Stream alive: once that Stream
    is gone it stands for the default stream (where a late free still runs)."""

    def __init__(self, stream_ptr: int) -> None:
        stream = stream_object(stream_ptr)
        self._ptr = stream_ptr
        self._stream = None if stream is None else weakref.ref(stream)

    def __cuda_stream__(self) -> tuple[int, int]:
        gone = self._stream is not None and self._stream() is None
        return (0, DEFAULT_STREAM if gone else self._ptr)


def _forget(key: tuple[int, int], handle: CublasCaptureHandle) -> None:
    """The stream of ``handle`` is going: wait for its work, then destroy the handle."""
    with _stream_handles_lock:
        if _stream_handles.get(key) is handle:
            del _stream_handles[key]
    if not handle._closed:
        cudart.cudaStreamSynchronize(handle.stream_ptr)  # its products use the workspace
    handle.destroy()
