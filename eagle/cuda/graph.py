"""Stream capture, graphs and their launchers, and what a graph keeps alive.

While eagle captures a stream, every eagle operation enqueued on it reports
the objects it recorded work against (:func:`record_use`). The captured graph
holds them, so nothing it replays against can be freed under it, and owners
that must outlive their graphs (a cuBLAS handle, say) refuse to be destroyed
while such a graph is alive.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from eagle.cuda._records import raise_recorded
from eagle.cuda._runtime import CudaError, call, runtime
from eagle.cuda.stream import Stream, as_stream_ptr
from eagle.errors import LifetimeError

__all__ = [
    "CapturedGraph",
    "Graph",
    "Launcher",
    "LifetimeError",
    "StreamCapturer",
    "capture",
    "is_capturing",
    "record_use",
]

_MODES = {
    "thread_local": "cudaStreamCaptureModeThreadLocal",
    "global": "cudaStreamCaptureModeGlobal",
    "relaxed": "cudaStreamCaptureModeRelaxed",
}


_active: dict[int, list[Any]] = {}
_active_lock = threading.Lock()


def record_use(stream_ptr: int, *objs: Any) -> None:
    """Note that work just enqueued on ``stream_ptr`` uses ``objs``.

    If eagle is capturing that stream, the captured graph keeps ``objs`` alive,
    and each object with a ``_live_graphs`` weak set learns of the graph.
    Outside a capture this does nothing.
    """
    kept = _active.get(stream_ptr)
    if kept is not None:
        kept.extend(objs)


def is_capturing(stream: Stream | int | None = None) -> bool:
    """True while ``stream`` is being captured (by eagle or anyone else); for the CUDA
    default stream, also while a blocking stream is (work there would join the capture)."""
    try:
        status = call("cudaStreamIsCapturing", as_stream_ptr(stream))
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

    def __init__(self, handles: list[tuple[str, Any]], kept: list[Any]) -> None:
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
            call(destroy, handle)
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


class CapturedGraph:
    """The work recorded by one capture, not yet instantiated.

    Consumed by :meth:`Graph.from_captured`; using it again raises
    :class:`LifetimeError`. Freed by :meth:`discard` or when garbage-collected.
    """

    def __init__(self, handle: Any, kept: list[Any]) -> None:
        self._handle = handle
        self._held = _Held([("cudaGraphDestroy", handle)], kept)
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
        return _node_types(self._handle)

    def discard(self) -> None:
        """Free the recorded graph without instantiating it (idempotent)."""
        self._finalizer()


def _node_types(handle: Any) -> list[str]:
    _, count = call("cudaGraphGetNodes", handle, 0)
    if count == 0:
        return []
    nodes, _ = call("cudaGraphGetNodes", handle, count)
    names = []
    for node in nodes:
        kind = call("cudaGraphNodeGetType", node)
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

    def __init__(self, stream_ptr: Stream | int, mode: str = "thread_local") -> None:
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {sorted(_MODES)}, not {mode!r}")
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
                mode = getattr(runtime().cudaStreamCaptureMode, _MODES[self.mode])
                # asked now: a capturing stream refuses to name its device
                self.device = int(call("cudaStreamGetDevice", self._stream_ptr))
                _active[self._stream_ptr] = []  # claimed before CUDA begins
                claimed = True
            self._open = True
            call("cudaStreamBeginCapture", self._stream_ptr, mode)
        except BaseException as exc:
            if claimed:  # given back
                self._open = False
                with _active_lock:
                    _active.pop(self._stream_ptr, None)
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
            handle = call("cudaStreamEndCapture", self._stream_ptr)
        except BaseException as exc:
            if not isinstance(exc, CudaError):  # an interrupt: CUDA may not have ended it
                _abandon(self._stream_ptr)
            raise
        finally:
            self._open = False
            with _active_lock:
                kept = _active.pop(self._stream_ptr, [])
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
        from eagle.cuda.loops import _record_conditional

        return _record_conditional(self, "while", flag, max_iterations)

    def if_(self, flag: Any) -> contextlib.AbstractContextManager[None]:
        """``with cap.if_(flag):`` — the block runs only when ``flag`` is non-zero.

        ``flag`` is read on the device when the graph reaches the block, after
        the work captured before it. Rules as for :meth:`while_loop`.
        """
        from eagle.cuda.loops import _record_conditional

        return _record_conditional(self, "if", flag)

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
            call("cudaGraphDestroy", call("cudaStreamEndCapture", stream_ptr))


@contextmanager
def capture(
    stream: Stream | int | None = None, mode: str = "thread_local"
) -> Iterator[StreamCapturer]:
    """``with capture(stream) as cap:`` — capture, then ``cap.captured``.

    Args:
        stream: the stream to capture (eagle's current stream by default).
        mode: ``"thread_local"``, ``"global"`` or ``"relaxed"``, as for
            :class:`StreamCapturer`.
    """
    with StreamCapturer(as_stream_ptr(stream), mode) as capturer:
        yield capturer


class Graph:
    """An instantiated, replayable graph.

    Keeps alive everything its capture recorded work against, until
    :meth:`destroy`.
    """

    def __init__(self, exec_handle: Any, graph_handle: Any, kept: list[Any]) -> None:
        self._exec = exec_handle
        self._graph = graph_handle
        held = _Held(
            [("cudaGraphExecDestroy", exec_handle), ("cudaGraphDestroy", graph_handle)], kept
        )
        self._held = held
        self._finalizer = _finalizer(self, held)

    @property
    def _kept(self) -> list[Any]:
        return self._held.kept

    @classmethod
    def from_captured(cls, captured: CapturedGraph) -> Graph:
        """Instantiate ``captured``, consuming it.

        Raises:
            LifetimeError: ``captured`` was already consumed.
        """
        if not isinstance(captured, CapturedGraph):
            raise TypeError(
                f"captured must be a CapturedGraph (from StreamCapturer.end), "
                f"not {type(captured).__name__}"
            )
        handle, held = captured._take()
        try:
            exec_handle = call("cudaGraphInstantiate", handle, 0)
        except BaseException:  # out of memory, say, or an interrupt: free the graph
            _release(held)
            raise
        graph = cls(exec_handle, handle, held.kept)
        held.handles = []  # the raw graph now belongs to ``graph``
        _release(held)
        return graph

    @property
    def alive(self) -> bool:
        """False once :meth:`destroy` ran."""
        return self._finalizer.alive

    def node_types(self) -> list[str]:
        """The type of every node in the graph."""
        self._check()
        return _node_types(self._graph)

    def launcher(self) -> Launcher:
        """A :class:`Launcher` that replays this graph."""
        self._check()
        return Launcher(self)

    def _check(self) -> None:
        if not self._finalizer.alive:
            raise LifetimeError("this Graph was destroyed; capture and instantiate a new one")

    def destroy(self) -> None:
        """Free the graph and release what it kept alive (idempotent)."""
        self._finalizer()


class Launcher:
    """Replays one :class:`Graph` on a stream."""

    def __init__(self, graph: Graph) -> None:
        self._graph = graph
        self._stream_ptr: int | None = None

    def stream(self, stream_ptr: Stream | int | None) -> Launcher:
        """Choose the stream replays go to and return the launcher.

        Args:
            stream_ptr: a raw stream pointer, a :class:`Stream`, or None for
                eagle's current stream (also the default when never set).
        """
        self._stream_ptr = as_stream_ptr(stream_ptr)
        return self

    def _ptr(self) -> int:
        if self._stream_ptr is None:
            self._stream_ptr = as_stream_ptr(None)
        return self._stream_ptr

    def launch(self) -> None:
        """Enqueue one replay of the graph; returns without waiting."""
        self._graph._check()
        call("cudaGraphLaunch", self._graph._exec, self._ptr())

    def synchronize(self) -> None:
        """Wait until the launcher's stream has finished its work.

        Raises:
            IndexError, ZeroDivisionError: a kernel failed a check.
        """
        call("cudaStreamSynchronize", self._ptr())
        raise_recorded()

    def rebind(self, planes: Any = None, /, **named: Any) -> Launcher:
        """Point the graph at other arrays, without capturing again; return the launcher.

        Name each array the graph works on now and the array to use instead:
        ``launcher.rebind({old: new, ...})`` works for any graph; keywords
        ``launcher.rebind(x=new_x)`` name a plane of the bound launches, when
        every launch in the graph that has a plane of that name has it on the
        same array. Each new array has the old one's shape, dtype, strides and
        device. Later replays (from every launcher of the graph) read and write
        the new arrays; replays already enqueued are not affected. The bound
        plans keep their own planes: the rebind belongs to the graph.

        A graph can be rebound when it holds bound launches (a plan's or an
        adjoint's ``launch``, ``capture``) and fills. What it costs, per node:
        a hawk kernel, one kernel-node update (a few microseconds); cuBLAS
        products, captured again alone on their stream with their warmed
        handle, and their nodes updated (tens of microseconds per product); a
        fill, one memset-node update. Nothing is instantiated; nodes that use
        none of the rebound arrays are left alone.

        Raises:
            TypeError: a key or value that is not a device eagle Array, an
                unknown or ambiguous plane name, or another dtype.
            ValueError: another shape, strides or device, an array the graph
                does not work on, arrays that would share memory with a plane
                the kernel writes, or a graph that cannot be rebound (a kernel
                not launched by a bound plan, a device-side loop, a copy).
                Nothing is changed when it raises.
        """
        (_rebind or _import_rebind()).rebind(self._graph, planes, named)
        return self


#: :mod:`eagle.cuda._rebind`, imported by the first rebind (it imports this module)
_rebind: ModuleType | None = None


def _import_rebind() -> ModuleType:
    global _rebind
    from eagle.cuda import _rebind as module

    _rebind = module
    return module
