"""Streams, events, and which stream eagle's work goes to.

Inside ``with stream:`` eagle's work goes to ``stream``. Otherwise it goes to
the CUDA default stream (the legacy stream, which torch and CuPy use by
default too), except work over another framework's arrays, which goes to
that framework's current stream (:func:`~eagle.cuda.stream.launch_stream`): torch's for torch
tensors, CuPy's for CuPy arrays, found without importing either unless the
array comes from it.
"""

from __future__ import annotations

import contextvars
import sys
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from eagle.cuda._records import raise_recorded
from eagle.cuda._runtime import CudaError, cudart, ensure_device, finalizer, runtime
from eagle.errors import EagleRuntimeError, EagleTypeError, EagleValueError

__all__ = ["DEFAULT_STREAM", "Event", "Stream", "as_stream_ptr", "current_stream", "launch_stream"]

#: the raw pointer of the CUDA default (legacy) stream, as torch and CuPy give it
DEFAULT_STREAM = 0


class Stream:
    """A CUDA stream owned by eagle.

    Args:
        non_blocking: create it with ``cudaStreamNonBlocking`` (no implicit
            synchronisation with the legacy default stream).
        device: the device index.

    ``with stream:`` makes it eagle's current stream in this thread or asyncio task (a
    task started inside the block has it open too, and ending it there ends it for that
    task alone). It
    implements ``__cuda_stream__``, so cuda.core and other libraries take it
    as a stream. The stream is destroyed by :meth:`destroy` or when it is
    garbage-collected (never at interpreter exit, when the driver may be gone);
    what eagle made for it (a cuBLAS handle) goes just before.

    Raises:
        CudaUnavailable: no driver, or no such device.
    """

    def __init__(self, non_blocking: bool = False, device: int = 0) -> None:
        self.device = device
        self.non_blocking = non_blocking
        ensure_device(device)
        flags = runtime().cudaStreamNonBlocking if non_blocking else runtime().cudaStreamDefault
        handle = cudart.cudaStreamCreateWithFlags(flags)
        self._ptr = int(handle)
        self._hooks: list[Callable[[], None]] = []
        self._finalizer: weakref.finalize[..., Any] = weakref.finalize(
            self, _destroy_stream, handle, self._hooks
        )
        self._finalizer.atexit = False
        _by_ptr[self._ptr] = self

    @classmethod
    def external(cls, stream: Any, device: int = 0) -> Stream:
        """A Stream over a stream eagle does not own (torch's, CuPy's, a raw pointer:
        anything :func:`as_stream_ptr` takes but None), for ``with``; never destroyed
        by eagle, so keep the owner's stream alive while you use it.

        Raises:
            TypeError: ``stream`` is not a stream (as :func:`as_stream_ptr`).
        """
        if stream is None:
            raise EagleTypeError("Stream.external takes a stream or a raw pointer, not None")
        made = cls.__new__(cls)
        made.device, made.non_blocking = device, False
        made._ptr, made._hooks = as_stream_ptr(stream, device), []
        made._finalizer = weakref.finalize(made, _leave_to_owner, made._ptr)
        made._finalizer.atexit = False
        return made

    def ptr(self) -> int:
        """The raw ``cudaStream_t`` as an int."""
        if not self._finalizer.alive:
            raise CudaError("Stream.ptr", "destroyed", "this stream was destroyed")
        return self._ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol: ``(0, raw pointer)``."""
        return (0, self.ptr())

    @property
    def alive(self) -> bool:
        """False once :meth:`destroy` ran."""
        return self._finalizer.alive

    def synchronize(self) -> None:
        """Block the host until all work queued on this stream has finished.

        Raises:
            IndexError, ZeroDivisionError, ValueError, OverflowError: a kernel
                failed a check (a table index, an int division, ``int()`` of NaN or
                inf, a negative int exponent, an int overflow: hawk's kinds of
                those, see :mod:`hawk.emit.checks`).
        """
        cudart.cudaStreamSynchronize(self.ptr())
        raise_recorded()

    def destroy(self) -> None:
        """Destroy the stream (idempotent); pending work still completes. An external
        stream (:meth:`external`) is only closed to eagle: its owner destroys it.

        Raises:
            ValueError: this is the CUDA default stream, which is not eagle's to destroy.
        """
        if self._ptr == DEFAULT_STREAM:
            raise EagleValueError("the CUDA default stream cannot be destroyed")
        self._finalizer()

    def __enter__(self) -> Stream:
        _set_blocks((*_blocks.get(), self))
        return self

    def __exit__(self, *exc: object) -> None:
        blocks = _blocks.get()
        if self not in blocks:
            raise EagleRuntimeError(
                f"with {self!r}: the block is not open in this thread or task (it began in "
                "another); enter and leave a stream's with block in one thread or task"
            )
        last = len(blocks) - 1 - blocks[::-1].index(self)  # (one left out of order: its own)
        _set_blocks(blocks[:last] + blocks[last + 1 :])

    def __repr__(self) -> str:
        return f"Stream(ptr={self._ptr:#x}, device={self.device}, non_blocking={self.non_blocking})"


def _leave_to_owner(stream_ptr: int) -> None:
    """An external stream's finalizer: its owner destroys it, not eagle."""


def _destroy_stream(handle: Any, hooks: list[Callable[[], None]]) -> None:
    """Run what must go before the stream (:func:`on_destroy`), then destroy it."""
    while hooks:
        hooks.pop()()
    cudart.cudaStreamDestroy(handle)


def on_destroy(stream_ptr: int, hook: Callable[[], None]) -> bool:
    """Run ``hook`` just before the eagle :class:`Stream` ``stream_ptr`` is destroyed
    (by :meth:`Stream.destroy` or collection). False, and nothing registered, when
    ``stream_ptr`` is no live eagle Stream (another library's, or the default stream)."""
    stream = stream_object(stream_ptr)
    if stream is None:
        return False
    stream._hooks.append(hook)
    return True


class Event:
    """A CUDA event, for ordering streams and for timing.

    Args:
        timing: record timestamps (needed by :meth:`elapsed_ms`).
        device: the device index.

    Raises:
        CudaUnavailable: no driver, or no such device.
    """

    def __init__(self, timing: bool = True, device: int = 0) -> None:
        self.device = device
        ensure_device(device)
        flags = runtime().cudaEventDefault if timing else runtime().cudaEventDisableTiming
        self._handle = cudart.cudaEventCreateWithFlags(flags)
        self._finalizer = finalizer(self, cudart.cudaEventDestroy, self._handle)

    def ptr(self) -> int:
        """The raw ``cudaEvent_t`` as an int."""
        return int(self._handle)

    def record(self, stream: Any = None) -> Event:
        """Record the event on ``stream`` (anything :func:`as_stream_ptr` takes; eagle's
        current stream on the event's device by default)."""
        cudart.cudaEventRecord(self._handle, as_stream_ptr(stream, self.device))
        return self

    def wait(self, stream: Any = None) -> None:
        """Make ``stream`` (as for :meth:`record`) wait for this event without blocking
        the host."""
        cudart.cudaStreamWaitEvent(as_stream_ptr(stream, self.device), self._handle, 0)

    def synchronize(self) -> None:
        """Block the host until the event has completed.

        Raises:
            IndexError, ZeroDivisionError, ValueError, OverflowError: a kernel
                failed a check (a table index, an int division, ``int()`` of NaN or
                inf, a negative int exponent, an int overflow: hawk's kinds of
                those, see :mod:`hawk.emit.checks`).
        """
        cudart.cudaEventSynchronize(self._handle)
        raise_recorded()

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to ``end`` (both recorded and complete)."""
        return float(cudart.cudaEventElapsedTime(self._handle, end._handle))

    def destroy(self) -> None:
        """Destroy the event now rather than when it is garbage-collected (idempotent)."""
        self._finalizer()


_by_ptr: weakref.WeakValueDictionary[int, Stream] = weakref.WeakValueDictionary()


def stream_object(ptr: int) -> Stream | None:
    """The live eagle :class:`Stream` whose raw pointer is ``ptr``, if there is one."""
    stream = _by_ptr.get(ptr)
    return stream if stream is not None and stream.alive else None


#: the streams of the ``with stream:`` blocks open in this thread or asyncio task (each
#: has a context of its own), innermost last, by device; replaced, never changed in place
_open: contextvars.ContextVar[dict[int, tuple[Stream, ...]] | None] = contextvars.ContextVar(
    "eagle_streams", default=None
)
#: those blocks' streams in the order they began (``_open`` is made from it)
_blocks: contextvars.ContextVar[tuple[Stream, ...]] = contextvars.ContextVar(
    "eagle_stream_blocks", default=()
)


def _set_blocks(blocks: tuple[Stream, ...]) -> None:
    """Make ``blocks`` the open blocks of this thread or task, and ``_open`` from them."""
    _blocks.set(blocks)
    open_: dict[int, tuple[Stream, ...]] = {}
    for stream in blocks:
        open_[stream.device] = (*open_.get(stream.device, ()), stream)
    _open.set(open_ or None)


_defaults: dict[int, Stream] = {}


def current_stream(device: int = 0) -> Stream:
    """eagle's current stream on this thread or asyncio task for ``device``.

    Inside ``with stream:`` it is that stream; otherwise the CUDA default
    (legacy) stream, where torch and CuPy queue their work by default. Work
    over another framework's arrays goes to that framework's current stream
    instead (:func:`~eagle.cuda.stream.launch_stream`).
    """
    open_ = _open.get()
    stack = open_.get(device) if open_ else None
    if stack:
        return stack[-1]
    stream = _defaults.get(device)
    if stream is None:
        stream = _defaults.setdefault(device, Stream.external(DEFAULT_STREAM, device))
    return stream


def launch_stream(values: Iterable[Any], device: int = 0) -> int:
    """The raw stream that work over ``values`` (arrays, numbers) on ``device`` goes to.

    eagle's stream inside ``with stream:``; otherwise the current stream of the
    framework the first foreign array among ``values`` comes from (torch or
    CuPy, also through an eagle Array wrapping theirs); otherwise the CUDA
    default stream.
    """
    scoped = scoped_stream(device)
    if scoped is not None:
        return scoped
    if "torch" in sys.modules or "cupy" in sys.modules:  # else no array comes from either
        for value in values:
            framework = framework_of(value)
            if framework is not None:
                return FRAMEWORK_STREAMS[framework](device)
    return DEFAULT_STREAM


def scoped_stream(device: int = 0) -> int | None:
    """eagle's stream on ``device`` inside ``with stream:`` in this thread or task, else
    None."""
    open_ = _open.get()
    stack = open_.get(device) if open_ else None
    return stack[-1].ptr() if stack else None


def framework_stream(value: Any, device: int = 0) -> int | None:
    """The current stream on ``device`` of the framework ``value`` comes from (torch or
    CuPy), or None for anything else; never imports either."""
    framework = framework_of(value)
    return None if framework is None else FRAMEWORK_STREAMS[framework](device)


_UNNAMED = object()  # an owner that names no framework, or no owner


def framework_of(value: Any) -> str | None:
    """``"torch"`` or ``"cupy"`` when ``value`` comes from that framework (which is then
    imported), else None; fixed for a given array, and never imports either."""
    # an eagle Array's owner names the framework of its memory (eagle.arrays._foreign), or
    # None for eagle's own memory (eagle.cuda.memory.Buffer)
    framework = getattr(getattr(value, "_owner", None), "framework", _UNNAMED)
    if framework is None:
        return None
    if framework is _UNNAMED:
        framework = type(value).__module__.partition(".")[0]
    return framework if framework in FRAMEWORK_STREAMS and framework in sys.modules else None


def _torch_stream(device: int) -> int:
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what torch's own code uses
    if raw is not None:
        return int(raw(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


def _cupy_stream(device: int) -> int:
    cupy = sys.modules["cupy"]
    with cupy.cuda.Device(device):
        return int(cupy.cuda.get_current_stream().ptr)


FRAMEWORK_STREAMS: dict[str, Callable[[int], int]] = {"torch": _torch_stream, "cupy": _cupy_stream}
"""Each framework eagle takes streams from, and how to read its current stream on a device
(a raw pointer); the framework must be imported already."""


def as_stream_ptr(stream: Any, device: int = 0, *, argument: str = "stream") -> int:
    """The raw ``cudaStream_t`` that ``stream`` stands for.

    Args:
        stream: an eagle :class:`Stream`; a raw pointer (int); None for eagle's
            current stream on ``device``; any object with ``__cuda_stream__``
            (cuda.core streams); an object with an int ``cuda_stream``
            attribute (``torch.cuda.Stream``) or ``ptr`` attribute
            (``cupy.cuda.Stream``).
        device: the device whose current stream None stands for.
        argument: the caller's name for ``stream``, used in the error.

    Raises:
        TypeError: ``stream`` is none of those.
    """
    if type(stream) is int:
        return stream
    if stream is None:
        return current_stream(device).ptr()
    if isinstance(stream, Stream):
        return stream.ptr()
    if isinstance(stream, int) and not isinstance(stream, bool):
        return int(stream)
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        return int(protocol()[1])
    for attribute in ("cuda_stream", "ptr"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return int(value)
    raise EagleTypeError(
        f"{argument} must be an eagle.cuda.Stream, a raw stream pointer (int), None for "
        "eagle's current stream, or a stream object with __cuda_stream__ or an int "
        f"cuda_stream/ptr attribute (torch and CuPy streams), not {type(stream).__name__}"
    )
