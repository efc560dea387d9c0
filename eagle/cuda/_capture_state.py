"""What eagle's captures keep alive: which streams eagle is capturing, what the work on
them used, and the record a graph holds of it.

While eagle captures a stream, every eagle operation enqueued on it reports the
objects it recorded work against (:func:`record_use`). The captured graph holds
them, so nothing it replays against can be freed under it, and owners that must
outlive their graphs (a cuBLAS handle, say) refuse to be destroyed while such a
graph is alive. The capture itself is :mod:`eagle.cuda._stream_capture`; the
graphs are :mod:`eagle.cuda.graph`.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Literal

from eagle.cuda._runtime import CudaError, cudart, runtime
from eagle.cuda.stream import Stream, as_stream_ptr
from eagle.errors import LifetimeError

__all__ = [
    "MODES",
    "CaptureMode",
    "LifetimeError",
    "any_capture_active",
    "is_capturing",
    "record_use",
]

CaptureMode = Literal["thread_local", "global", "relaxed"]
"""How a capture treats unsafe calls from other threads (CUDA's stream capture modes)."""

MODES: dict[CaptureMode, str] = {
    "thread_local": "cudaStreamCaptureModeThreadLocal",
    "global": "cudaStreamCaptureModeGlobal",
    "relaxed": "cudaStreamCaptureModeRelaxed",
}
"""Each capture mode's name in ``cuda.bindings.runtime.cudaStreamCaptureMode``."""

_active: dict[int, list[Any]] = {}  # stream -> what its open capture keeps alive
_active_lock = threading.Lock()
#: stream -> the mode of the capture eagle began on it and the thread that began it
_begun: dict[int, tuple[CaptureMode, int]] = {}


def note_begun(stream_ptr: int, mode: CaptureMode) -> None:
    """Note that this thread begins a capture of ``stream_ptr`` in ``mode``."""
    _begun[stream_ptr] = (mode, threading.get_ident())


def note_ended(stream_ptr: int) -> None:
    """Note that the capture of ``stream_ptr`` :func:`note_begun` noted is over."""
    _begun.pop(stream_ptr, None)


def refusing_capture() -> int | None:
    """A stream whose open eagle capture makes CUDA refuse this thread's unsafe calls (an
    allocation on another stream among them): one begun in ``"global"`` mode by any
    thread, or in ``"thread_local"`` mode by this one; None when there is none."""
    me = threading.get_ident()
    for stream_ptr, (mode, thread) in list(_begun.items()):
        if mode == "global" or (mode == "thread_local" and thread == me):
            return stream_ptr
    return None


def record_use(stream_ptr: int, *objs: Any) -> None:
    """Note that work just enqueued on ``stream_ptr`` uses ``objs``.

    If eagle is capturing that stream, the captured graph keeps ``objs`` alive,
    and each object with a ``_live_graphs`` weak set learns of the graph.
    Outside a capture this does nothing.
    """
    kept = _active.get(stream_ptr)
    if kept is not None:
        kept.extend(objs)


def share_capture(side_ptr: int, stream_ptr: int) -> bool:
    """Record work on ``side_ptr``, a stream forked from the capture of ``stream_ptr``,
    with eagle's capture of ``stream_ptr`` (until :func:`unshare_capture`); False, and
    nothing shared, when eagle is not capturing ``stream_ptr``.

    Raises:
        LifetimeError: work on ``side_ptr`` is already recorded with a capture.
    """
    with _active_lock:
        kept = _active.get(stream_ptr)
        if kept is None:
            return False
        if side_ptr in _active:
            raise LifetimeError(f"stream {side_ptr:#x} is already recorded with a capture")
        _active[side_ptr] = kept
    return True


def unshare_capture(side_ptr: int) -> None:
    """Stop recording work on ``side_ptr`` with the capture :func:`share_capture` named."""
    with _active_lock:
        _active.pop(side_ptr, None)


def is_capturing(stream: Stream | int | None = None) -> bool:
    """True while ``stream`` is being captured (by eagle or anyone else); for the CUDA
    default stream, also while a blocking stream is (work there would join the capture)."""
    try:
        status = cudart.cudaStreamIsCapturing(as_stream_ptr(stream))
    except CudaError as exc:
        if exc.status == "cudaErrorStreamCaptureImplicit":
            return True
        raise
    return status != runtime().cudaStreamCaptureStatus.cudaStreamCaptureStatusNone


def any_capture_active() -> bool:
    """True while any eagle capture is open in this process."""
    return bool(_active)


class _Held:
    """What a graph's finalizer holds: its raw handles (destroyed in order by the
    runtime calls named beside them) and the objects its work was recorded against.

    The owners among ``kept`` (those with a ``_live_graphs`` weak set) hold this
    record, not the graph, so the finalizer can take it out of their sets itself.
    """

    __slots__ = ("__weakref__", "handles", "kept")

    def __init__(self, handles: list[tuple[Callable[[Any], Any], Any]], kept: list[Any]) -> None:
        self.handles = handles
        self.kept = kept
        for obj in kept:
            live = getattr(obj, "_live_graphs", None)
            if isinstance(live, weakref.WeakSet):
                live.add(self)


def _release(held: _Held) -> None:
    """Destroy ``held``'s handles, then tell each owner it no longer backs this graph.

    When an owner's set of live graphs empties, its ``_graphs_released()``
    method, if it has one, is called (a closed cuBLAS handle frees itself then).
    """
    handles, held.handles = held.handles, []
    kept, held.kept = held.kept, []
    try:
        for destroy, handle in handles:
            destroy(handle)
    finally:
        for obj in kept:
            live = getattr(obj, "_live_graphs", None)
            if not isinstance(live, weakref.WeakSet):
                continue
            live.discard(held)
            released = getattr(obj, "_graphs_released", None)
            if not live and released is not None:
                released()


def _finalizer(owner: object, held: _Held) -> weakref.finalize:
    done = weakref.finalize(owner, _release, held)
    done.atexit = False  # at exit the driver may already be gone; the process frees all
    return done
