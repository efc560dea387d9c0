"""Stream capture: :class:`StreamCapturer` records the work enqueued on one stream into
a :class:`CapturedGraph`, which :class:`eagle.cuda.Graph` instantiates.

A capture's bookkeeping (what it keeps alive) is :mod:`eagle.cuda._capture_state`;
its device-side loops and branches are :mod:`eagle.cuda.loops`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from eagle.cuda import loops
from eagle.cuda._capture_state import (
    MODES,
    CaptureMode,
    LifetimeError,
    _active,
    _active_lock,
    _finalizer,
    _Held,
    is_capturing,
    note_begun,
    note_ended,
)
from eagle.cuda._runtime import CudaError, cudart, runtime
from eagle.cuda.stream import Stream, as_stream_ptr
from eagle.errors import check_option

__all__ = ["CapturedGraph", "StreamCapturer", "capture", "node_types"]


class CapturedGraph:
    """The work recorded by one capture, not yet instantiated.

    Consumed by :meth:`Graph.from_captured`; using it again raises
    :class:`LifetimeError`. Freed by :meth:`discard` or when garbage-collected.
    """

    def __init__(self, handle: Any, kept: list[Any]) -> None:
        self._handle = handle
        self._held = _Held([(cudart.cudaGraphDestroy, handle)], kept)
        self._finalizer = _finalizer(self, self._held)

    @property
    def _kept(self) -> list[Any]:
        return self._held.kept

    @property
    def consumed(self) -> bool:
        """True once a :class:`Graph` was made from it (or it was discarded)."""
        return not self._finalizer.alive

    def _take(self) -> tuple[Any, _Held]:
        """The raw graph and its record, which the caller now releases."""
        if not self._finalizer.alive:
            raise LifetimeError(
                "this CapturedGraph was already consumed by Graph.from_captured; "
                "capture again to make another graph"
            )
        self._finalizer.detach()
        return self._handle, self._held

    def node_types(self) -> list[str]:
        """The type of every node in the graph, e.g. ``["kernel", "memset"]``."""
        if not self._finalizer.alive:
            raise LifetimeError("this CapturedGraph was already consumed")
        return node_types(self._handle)

    def discard(self) -> None:
        """Free the recorded graph without instantiating it (idempotent)."""
        self._finalizer()


def node_types(handle: Any) -> list[str]:
    """The type of every node of the raw graph ``handle``, e.g. ``["kernel", "memset"]``."""
    _, count = cudart.cudaGraphGetNodes(handle, 0)
    if count == 0:
        return []
    nodes, _ = cudart.cudaGraphGetNodes(handle, count)
    names = []
    for node in nodes:
        kind = cudart.cudaGraphNodeGetType(node)
        names.append(kind.name.removeprefix("cudaGraphNodeType").lower())
    return names


class StreamCapturer:
    """Capture the work enqueued on one stream into a :class:`CapturedGraph`.

    Args:
        stream_ptr: the stream to capture (a raw pointer or a :class:`Stream`).
        mode: ``"thread_local"`` (default), ``"global"`` or ``"relaxed"``.

    Use :meth:`begin` and :meth:`end`, or ``with StreamCapturer(ptr) as cap:``,
    which always ends the capture, even when the body raises (the partial
    graph is then discarded); afterwards ``cap.captured`` holds the result.
    """

    def __init__(self, stream_ptr: Stream | int, mode: CaptureMode = "thread_local") -> None:
        check_option(mode, CaptureMode, "mode")
        self._stream_ptr = as_stream_ptr(stream_ptr)
        self.mode = mode
        self.captured: CapturedGraph | None = None
        self.device: int | None = None
        self._open = False

    def begin(self) -> None:
        """Start capturing the stream.

        If it raises (an interrupt included), no capture is left open.
        """
        if self._open:
            raise LifetimeError("StreamCapturer.begin: this capture is already open")
        claimed = False
        try:
            with _active_lock:
                if self._stream_ptr in _active:
                    raise LifetimeError(
                        f"stream {self._stream_ptr:#x} is already being captured by eagle"
                    )
                mode = getattr(runtime().cudaStreamCaptureMode, MODES[self.mode])
                # asked now: a capturing stream refuses to name its device
                self.device = int(cudart.cudaStreamGetDevice(self._stream_ptr))
                _active[self._stream_ptr] = []  # claimed before CUDA begins
                note_begun(self._stream_ptr, self.mode)
                claimed = True
            self._open = True
            cudart.cudaStreamBeginCapture(self._stream_ptr, mode)
        except BaseException as exc:
            if claimed:  # given back
                self._open = False
                with _active_lock:
                    _active.pop(self._stream_ptr, None)
                    note_ended(self._stream_ptr)
                if not isinstance(exc, CudaError):  # an interrupt: CUDA may have begun
                    _abandon(self._stream_ptr)
            raise

    def end(self) -> CapturedGraph:
        """Stop capturing and return what was recorded.

        Raises:
            CudaError: the capture was invalidated (an illegal call inside it);
                the capture is closed all the same.
        """
        if not self._open:
            raise LifetimeError("StreamCapturer.end: no capture is open (call begin() first)")
        try:
            handle = cudart.cudaStreamEndCapture(self._stream_ptr)
        except BaseException as exc:
            if not isinstance(exc, CudaError):  # an interrupt: CUDA may not have ended it
                _abandon(self._stream_ptr)
            raise
        finally:
            self._open = False
            with _active_lock:
                kept = _active.pop(self._stream_ptr, [])
                note_ended(self._stream_ptr)
        self.captured = CapturedGraph(handle, kept)
        return self.captured

    def while_loop(
        self, flag: Any, *, max_iterations: int | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """``with cap.while_loop(flag):`` — the block becomes a loop the device repeats.

        The work the block enqueues on the captured stream is recorded once, as
        the body of a CUDA while node (CUDA 12.4+), which every launch of the
        graph runs at least once and then again while ``flag`` is non-zero
        (eagle reads it after each pass). The block must write ``flag``, e.g.
        with a hawk kernel whose ``Mutable`` one-element plane it is. See the
        capture rules page for what the block may enqueue.

        Args:
            flag: a one-element device array, int32, float32 or float64.
            max_iterations: stop after this many passes even if ``flag`` is
                still non-zero (the flag then tells you the loop did not
                converge); None for no limit.

        Raises:
            TypeError, ValueError: a bad ``flag`` or ``max_iterations``, named.
            LifetimeError: no capture is open on this capturer.
            CudaError: CUDA refused (a driver older than CUDA 12.4, an illegal
                call inside the block).
        """
        return loops._record_conditional(self, "while", flag, max_iterations)

    def if_(self, flag: Any) -> contextlib.AbstractContextManager[None]:
        """``with cap.if_(flag):`` — the block runs only when ``flag`` is non-zero.

        ``flag`` is read on the device when the graph reaches the block, after
        the work captured before it. Rules as for :meth:`while_loop`.
        """
        return loops._record_conditional(self, "if", flag)

    def __enter__(self) -> StreamCapturer:
        self.begin()  # leaves no capture open if it raises
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.end()
            return
        # The body's exception is the one worth reporting; a failed end() is not.
        with contextlib.suppress(Exception):
            self.end().discard()


def _abandon(stream_ptr: int) -> None:
    """End and discard the capture of ``stream_ptr`` that a :meth:`StreamCapturer.begin`
    or :meth:`~StreamCapturer.end` cut short (by an interrupt) may have left open in
    CUDA (nothing when none is open)."""
    with contextlib.suppress(Exception):
        if is_capturing(stream_ptr):
            cudart.cudaGraphDestroy(cudart.cudaStreamEndCapture(stream_ptr))


@contextmanager
def capture(
    stream: Stream | int | None = None, mode: CaptureMode = "thread_local"
) -> Iterator[StreamCapturer]:
    """``with capture(stream) as cap:`` — capture, then ``cap.captured``.

    Args:
        stream: the stream to capture (eagle's current stream by default).
        mode: ``"thread_local"``, ``"global"`` or ``"relaxed"``, as for
            :class:`StreamCapturer`.
    """
    with StreamCapturer(as_stream_ptr(stream), mode) as capturer:
        yield capturer
