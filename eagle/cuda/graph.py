"""Instantiated graphs and their replays: :class:`Graph` and :class:`Launcher`.

A graph is made from a capture (:class:`StreamCapturer`, :class:`CapturedGraph`,
:func:`capture`, from :mod:`eagle.cuda._stream_capture`, re-exported here) and
keeps alive everything the capture recorded work against
(:mod:`eagle.cuda._capture_state`). A launcher replays it, and can point it at
other arrays without capturing again (:mod:`eagle.cuda._rebind`).
"""

from __future__ import annotations

from typing import Any

from eagle.cuda import _rebind
from eagle.cuda._capture_state import (
    LifetimeError,
    _finalizer,
    _Held,
    _release,
    is_capturing,
    record_use,
)
from eagle.cuda._capture_state import any_capture_active as any_capture_active  # re-exported
from eagle.cuda._records import raise_recorded
from eagle.cuda._runtime import cudart
from eagle.cuda._stream_capture import CapturedGraph, StreamCapturer, capture, node_types
from eagle.cuda.stream import Stream, as_stream_ptr
from eagle.errors import EagleTypeError

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


class Graph:
    """An instantiated, replayable graph.

    Keeps alive everything its capture recorded work against, until
    :meth:`destroy`.
    """

    def __init__(self, exec_handle: Any, graph_handle: Any, kept: list[Any]) -> None:
        self._exec = exec_handle
        self._graph = graph_handle
        destroy = [
            (cudart.cudaGraphExecDestroy, exec_handle),
            (cudart.cudaGraphDestroy, graph_handle),
        ]
        held = _Held(destroy, kept)
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
            raise EagleTypeError(
                f"captured must be a CapturedGraph (from StreamCapturer.end), "
                f"not {type(captured).__name__}"
            )
        handle, held = captured._take()
        try:
            exec_handle = cudart.cudaGraphInstantiate(handle, 0)
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
        return node_types(self._graph)

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
        cudart.cudaGraphLaunch(self._graph._exec, self._ptr())

    def synchronize(self) -> None:
        """Wait until the launcher's stream has finished its work.

        Raises:
            IndexError, ZeroDivisionError, ValueError, OverflowError: a kernel
                failed a check (a table index, an int division, ``int()`` of NaN or
                inf, a negative int exponent, an int overflow: hawk's kinds of
                those, see :mod:`hawk.emit.checks`).
        """
        cudart.cudaStreamSynchronize(self._ptr())
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
        products, at the first move of a plane captured again alone on their
        stream with their warmed handle and their nodes updated (tens of
        microseconds per product), and at later moves of it to memory at the
        same offset from a 256-byte boundary patched, one kernel-node update
        per node; a fill, one memset-node update. Nothing is instantiated;
        nodes that use none of the rebound arrays are left alone.

        Raises:
            TypeError: a key or value that is not a device eagle Array, an
                unknown or ambiguous plane name, or another dtype.
            ValueError: another shape, strides or device, an array the graph
                does not work on, arrays that would share memory with a plane
                the kernel writes, or a graph that cannot be rebound (a kernel
                not launched by a bound plan, a device-side loop, a copy).
                Nothing is changed when it raises.
        """
        _rebind.rebind(self._graph, planes, named)
        return self
