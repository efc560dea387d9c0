"""Streams, events, and eagle's current stream."""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any

from eagle.cuda._records import raise_recorded
from eagle.cuda._runtime import CudaError, call, ensure_device, runtime

__all__ = ["Event", "Stream", "as_stream_ptr", "current_stream"]


class Stream:
    """A CUDA stream owned by eagle.

    Args:
        non_blocking: create it with ``cudaStreamNonBlocking`` (no implicit
            synchronisation with the legacy default stream).
        device: the device index.

    ``with stream:`` makes it eagle's current stream on this thread.

    Raises:
        CudaUnavailable: no driver, or no such device.
    """

    def __init__(self, non_blocking: bool = False, device: int = 0) -> None:
        ensure_device(device)
        flags = runtime().cudaStreamNonBlocking if non_blocking else runtime().cudaStreamDefault
        self._handle = call("cudaStreamCreateWithFlags", flags)
        self._ptr = int(self._handle)
        self.device = device
        self.non_blocking = non_blocking
        _by_ptr[self._ptr] = self

    def ptr(self) -> int:
        """The raw ``cudaStream_t`` as an int."""
        if self._handle is None:
            raise CudaError("Stream.ptr", "destroyed", "this stream was destroyed")
        return self._ptr

    @property
    def alive(self) -> bool:
        """False once :meth:`destroy` ran."""
        return self._handle is not None

    def synchronize(self) -> None:
        """Block the host until all work queued on this stream has finished.

        Raises:
            IndexError, ZeroDivisionError: a kernel failed a check (see
                :mod:`hawk.emit.checks`).
        """
        call("cudaStreamSynchronize", self.ptr())
        raise_recorded()

    def destroy(self) -> None:
        """Destroy the stream (idempotent); pending work still completes."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            call("cudaStreamDestroy", handle)

    def __enter__(self) -> Stream:
        _stack(self.device).append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _stack(self.device).pop()

    def __repr__(self) -> str:
        return f"Stream(ptr={self._ptr:#x}, device={self.device}, non_blocking={self.non_blocking})"

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.destroy()


class Event:
    """A CUDA event, for ordering streams and for timing.

    Args:
        timing: record timestamps (needed by :meth:`elapsed_ms`).
        device: the device index.

    Raises:
        CudaUnavailable: no driver, or no such device.
    """

    def __init__(self, timing: bool = True, device: int = 0) -> None:
        ensure_device(device)
        flags = runtime().cudaEventDefault if timing else runtime().cudaEventDisableTiming
        self._handle = call("cudaEventCreateWithFlags", flags)

    def ptr(self) -> int:
        """The raw ``cudaEvent_t`` as an int."""
        return int(self._handle)

    def record(self, stream: Stream | int | None = None) -> Event:
        """Record the event on ``stream`` (eagle's current stream by default)."""
        call("cudaEventRecord", self._handle, as_stream_ptr(stream))
        return self

    def wait(self, stream: Stream | int | None = None) -> None:
        """Make ``stream`` wait for this event without blocking the host."""
        call("cudaStreamWaitEvent", as_stream_ptr(stream), self._handle, 0)

    def synchronize(self) -> None:
        """Block the host until the event has completed.

        Raises:
            IndexError, ZeroDivisionError: a kernel failed a check.
        """
        call("cudaEventSynchronize", self._handle)
        raise_recorded()

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to ``end`` (both recorded and complete)."""
        return float(call("cudaEventElapsedTime", self._handle, end._handle))

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None:
            with contextlib.suppress(Exception):
                call("cudaEventDestroy", handle)


_by_ptr: weakref.WeakValueDictionary[int, Stream] = weakref.WeakValueDictionary()


def stream_object(ptr: int) -> Stream | None:
    """The live eagle :class:`Stream` whose raw pointer is ``ptr``, if there is one."""
    stream = _by_ptr.get(ptr)
    return stream if stream is not None and stream.alive else None


_local = threading.local()
_defaults: dict[int, Stream] = {}
_defaults_lock = threading.Lock()


def _stack(device: int) -> list[Stream]:
    stacks = getattr(_local, "stacks", None)
    if stacks is None:
        stacks = _local.stacks = {}
    return stacks.setdefault(device, [])


def current_stream(device: int = 0) -> Stream:
    """eagle's current stream on this thread for ``device``.

    Inside ``with stream:`` it is that stream; otherwise a non-blocking stream
    eagle creates once per device on first use.
    """
    stack = _stack(device)
    if stack:
        return stack[-1]
    stream = _defaults.get(device)
    if stream is None:
        with _defaults_lock:
            stream = _defaults.get(device)
            if stream is None:
                stream = _defaults[device] = Stream(non_blocking=True, device=device)
    return stream


def as_stream_ptr(stream: Any, device: int = 0) -> int:
    """A raw stream pointer from a :class:`Stream`, an int, or None (current stream).

    Args:
        stream: a :class:`Stream`, a raw pointer, an object with
            ``__cuda_stream__``, or None for eagle's current stream.
        device: the device whose current stream None stands for.

    Raises:
        TypeError: ``stream`` is none of those.
    """
    if stream is None:
        return current_stream(device).ptr()
    if isinstance(stream, Stream):
        return stream.ptr()
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    raise TypeError(
        f"stream must be an eagle.cuda.Stream, a raw stream pointer (int) or None, "
        f"not {type(stream).__name__}"
    )
