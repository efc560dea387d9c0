"""Branches of a capture: work forked onto side streams and joined back.

Inside a capture, a stream that waits for an event recorded on the captured
stream joins that capture: what it enqueues next becomes a branch of the graph,
parallel to what the captured stream enqueues after the event. The captured
stream takes the branch back by waiting for an event recorded on the side
stream after that work (CUDA refuses to end a capture with a branch not joined
back). A replay of the graph then runs the branches at once. eagle's bound
launches fork independent work this way (an adjoint's gradient products, see
:mod:`eagle.plan._bound`); outside a capture nothing forks.

The side streams are eagle's own, a few per thread and device, made outside any
capture (:func:`side_stream`): two threads' captures never share one. While
eagle captures the stream a branch forks from, the branch's work is recorded
with that capture (:func:`~eagle.cuda._capture_state.share_capture`), so the
graph keeps what it used and can be rebound.
"""

from __future__ import annotations

import threading

from eagle.cuda._capture_state import share_capture, unshare_capture
from eagle.cuda._runtime import CudaError, cudart
from eagle.cuda.stream import Event, Stream

__all__ = ["Branches", "side_stream"]


class _Side:
    """A side stream and the event that marks the end of the work forked onto it."""

    __slots__ = ("ended", "ptr", "stream")

    def __init__(self, device: int) -> None:
        self.stream = Stream(non_blocking=True, device=device)
        self.ptr = self.stream.ptr()
        self.ended = Event(timing=False, device=device)


class _Local(threading.local):
    def __init__(self) -> None:
        self.sides: dict[int, list[_Side]] = {}  # device -> its side streams, by index
        self.forks: dict[int, Event] = {}  # device -> the event branches fork after


_local = _Local()


def side_stream(device: int, index: int, *, make: bool) -> int | None:
    """The raw pointer of this thread's side stream ``index`` on ``device``; made (with
    the ones before it) when ``make``, else None when it was never made. Make side
    streams outside any capture."""
    sides = _local.sides.setdefault(device, [])
    if index >= len(sides):
        if not make:
            return None
        while len(sides) <= index:
            sides.append(_Side(device))
        if device not in _local.forks:
            _local.forks[device] = Event(timing=False, device=device)
    return sides[index].ptr


class Branches:
    """``with Branches(stream_ptr, device) as branches:`` forks and joins branches of the
    capture of ``stream_ptr``; every branch still open is joined back on leaving, even
    when the block raises.

    Args:
        stream_ptr: a stream being captured (by eagle or anyone else).
        device: its device, whose side streams (already made) the branches run on.
    """

    def __init__(self, stream_ptr: int, device: int) -> None:
        self.stream_ptr = stream_ptr
        self.device = device
        self._sides = _local.sides.get(device, [])
        self._open: set[int] = set()  # indices of the sides forked and not joined back
        self._shared: set[int] = set()  # their pointers recorded with eagle's capture

    def __enter__(self) -> Branches:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            for index in sorted(self._open):
                try:
                    self.join(index)
                except CudaError:
                    if exc_type is None:
                        raise  # else the block's own error says what went wrong
        finally:
            for ptr in self._shared:
                unshare_capture(ptr)
            self._shared.clear()

    def fork(self, index: int) -> int:
        """Side stream ``index`` (made before) waits for the work enqueued on the captured
        stream so far; returns its pointer, on which work now runs as a branch.

        Raises:
            LifetimeError: work on that side stream is already recorded with a capture
                (nothing was forked).
        """
        side = self._sides[index]
        if side.ptr not in self._shared and share_capture(side.ptr, self.stream_ptr):
            self._shared.add(side.ptr)
        fork = _local.forks[self.device]
        cudart.cudaEventRecord(fork._handle, self.stream_ptr)
        cudart.cudaStreamWaitEvent(side.ptr, fork._handle, 0)
        self._open.add(index)
        return side.ptr

    def join(self, index: int) -> None:
        """The captured stream waits for everything enqueued on side stream ``index`` since
        it forked (nothing, when it is not open)."""
        if index not in self._open:
            return
        self._open.discard(index)
        side = self._sides[index]
        cudart.cudaEventRecord(side.ended._handle, side.ptr)
        cudart.cudaStreamWaitEvent(self.stream_ptr, side.ended._handle, 0)
