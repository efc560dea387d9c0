"""What a plan and an adjoint bound to their planes share: a route, launch, prepare, capture.

A bound plan (:class:`eagle.plan.BoundPlan`) and a bound adjoint
(:class:`eagle.diff.BoundAdjoint`) are each a sequence of :class:`Step`:
work that is enqueued on a stream (on the device) or run now (on the
host). :class:`Bound` launches them in order, prepares what a capture may
not make, and captures them into a graph.

Inside a capture, steps that may run on a branch of their own (:attr:`Step.fork`:
an adjoint's gradient products) fork onto side streams
(:class:`~eagle.cuda._forks.Branches`), so a replay runs them at once. Where
they go is decided once, from the memory each step touches
(:func:`branch_plan`): of consecutive such steps, all fork but the one the step
after them depends on (the last, when none is), and a branch joins back before the
first later step that writes what it touches or touches what it writes, else at the
end of the launch.
Outside a capture nothing forks.

A host launch is all or nothing: the planes the steps write are saved
before the first step runs and written back if any step raises, so a run
that fails part-way leaves every plane as it was. The steps run with numpy's
floating-point warnings off (``np.errstate(all="ignore")``): an ``inf * 0``
gives NaN, as on the device, and never a ``RuntimeWarning`` that warnings-as-
errors (``python -W error``) would turn into an exception half-way through.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from eagle.arrays._array import Array
from eagle.arrays._holder import bump_versions
from eagle.cuda._forks import Branches, side_stream
from eagle.cuda._rebind import Site, record
from eagle.cuda.graph import Graph, Launcher, StreamCapturer, any_capture_active, is_capturing
from eagle.cuda.loops import in_loop_body
from eagle.cuda.stream import as_stream_ptr, framework_of, launch_stream
from eagle.errors import EagleTypeError, EagleValueError

__all__ = ["Bound", "Placement", "Route", "Step", "branch_plan", "listed", "one_place"]


@dataclass(frozen=True)
class Route:
    """One routing decision.

    Attributes:
        name: ``"gemm"`` (cuBLAS products) or ``"loop"`` (the kernel's own loop).
        reasons: why it is not ``"gemm"`` (empty when it is).
    """

    name: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Step:
    """One unit of bound work.

    Attributes:
        enqueue: runs the work: on the device it enqueues on the stream it is
            given (a Stream, a raw pointer, or None for eagle's current
            stream); on the host it is given None and runs now.
        prepare: makes what a launch on a stream (a raw pointer) needs that a
            capture may not make, or None when there is nothing to make.
        written: the host arrays the work writes (saved for an all-or-nothing run).
        last: a host array the work writes whole in the one store that ends it, or
            None. A launch whose only written plane this is needs no saved copy: a
            failure leaves it as it was, and an interrupt after that store leaves the
            whole result. Otherwise it is saved as the ``written`` ones are.
        site: makes the record a capture keeps of this work, so that the graph
            can be pointed at other planes (:meth:`~eagle.cuda.Launcher.rebind`),
            or None when the work enqueues nothing.
        planes: the arrays the work reads and writes; they choose the stream a
            launch with no stream goes to (:func:`~eagle.cuda.stream.launch_stream`).
        tensors: the torch tensors the work writes: each launch bumps their
            versions, as torch's in-place operations do.
        fork: for work a capture may run on a branch of its own, given a side stream,
            whether the work is prepared to run there (else it runs on the launch
            stream); None for work that always runs on the launch stream.
        writes: the planes among ``planes`` the work writes, or None for all of them
            (which of its planes a step that forks may share with others, read-only).
        move: makes the steps this one was bound with (itself among them, in order) over
            other planes, given by name, laid out as theirs at addresses that align alike
            and that the caller has checked (each written plane apart from the others),
            and given the raw stream a launch over them goes to; it holds none of their
            planes. None for work that is bound afresh.
    """

    enqueue: Callable[[Any], None]
    prepare: Callable[[int], Any] | None = None
    written: tuple[np.ndarray, ...] = ()
    last: np.ndarray | None = None
    site: Callable[[], Site] | None = None
    planes: tuple[Any, ...] = ()
    tensors: tuple[Any, ...] = ()
    fork: Callable[[int], bool] | None = None
    writes: tuple[Any, ...] | None = None
    move: Callable[[Mapping[str, Any], int], tuple[Step, ...]] | None = None

    def bumping(self, tensors: tuple[Any, ...]) -> Step:
        """This step with ``tensors`` as its :attr:`tensors`: a copy made directly, as
        :func:`dataclasses.replace` would rebuild it field by field at every bind."""
        copied = object.__new__(Step)
        copied.__dict__.update(vars(self), tensors=tensors)
        return copied


@dataclass(frozen=True)
class Placement:
    """Where one step of a launch runs inside a capture.

    Attributes:
        joins: the side streams (by index) whose branches join back before the step.
        side: the side stream it forks onto, or None for the launch stream.
    """

    joins: tuple[int, ...] = ()
    side: int | None = None


def branch_plan(steps: Sequence[Step]) -> tuple[Placement, ...] | None:
    """Where each step runs inside a capture, or None when none forks (see the module
    docstring). Two steps depend on one another when one writes memory the other
    touches; reads alone never order them. A step whose planes are not all arrays with a
    ``ptr`` and ``nbytes`` counts as touching and writing every other step's memory."""
    if sum(step.fork is not None for step in steps) < 2:
        return None
    memory = [_Memory.of(step) for step in steps]
    forked: set[int] = set()
    start = 0
    while start < len(steps):
        end = start
        while end < len(steps) and steps[end].fork is not None:
            end += 1
        if end - start >= 2:
            run = range(start, end)
            kept = [i for i in run if end < len(steps) and memory[i].orders(memory[end])]
            forked.update(i for i in run if i != (kept[-1] if kept else end - 1))
        start = end + 1
    open_: dict[int, _Memory] = {}  # side -> the memory of the step on its branch
    placements = []
    for i in range(len(steps)):
        joins = tuple(side for side, mem in open_.items() if mem.orders(memory[i]))
        for joined in joins:
            del open_[joined]
        side = next(n for n in range(len(steps)) if n not in open_) if i in forked else None
        if side is not None:
            open_[side] = memory[i]
        placements.append(Placement(joins, side))
    return tuple(placements) if forked else None


@dataclass(frozen=True)
class _Memory:
    """The bytes a step touches and those it writes (None: all memory)."""

    touched: list[tuple[int, int]] | None
    written: list[tuple[int, int]] | None

    @classmethod
    def of(cls, step: Step) -> _Memory:
        touched = _spans(step.planes)
        written = touched if step.writes is None or touched is None else _spans(step.writes)
        return cls(touched, written)

    def orders(self, other: _Memory) -> bool:
        """Whether the two steps must run in order: one writes what the other touches."""
        return _overlap(self.written, other.touched) or _overlap(self.touched, other.written)


def _spans(planes: Sequence[Any]) -> list[tuple[int, int]] | None:
    """The bytes each of ``planes`` covers (numbers cover none), or None when one is not
    an array eagle can place."""
    spans = []
    for plane in planes:
        if type(plane) is Array:  # (most planes: no lookups)
            start = plane.ptr
            spans.append((start, start + plane.nbytes))
            continue
        if isinstance(plane, int | float | np.generic):
            continue
        ptr, nbytes = getattr(plane, "ptr", None), getattr(plane, "nbytes", None)
        if type(ptr) is not int or type(nbytes) is not int:
            return None
        spans.append((ptr, ptr + nbytes))
    return spans


def _overlap(a: list[tuple[int, int]] | None, b: list[tuple[int, int]] | None) -> bool:
    """Whether two steps' memory overlaps (None: all memory)."""
    if a is None or b is None:
        return True
    return any(x0 < y1 and y0 < x1 for x0, x1 in a for y0, y1 in b)


def _stream_plane(steps: tuple[Step, ...]) -> tuple[Any, ...]:
    """The one plane of ``steps`` that names the stream of a launch without one (the first
    framework array), or none: found once, as an array's framework does not change, only
    that framework's current stream."""
    for step in steps:
        for plane in step.planes:
            if framework_of(plane):
                return (plane,)
    return ()


def _written(steps: tuple[Step, ...]) -> tuple[np.ndarray, ...]:
    """The host arrays ``steps`` write, each once, that a run saves to be all or nothing:
    none when one plane is written whole in the one store that ends the run."""
    written: dict[tuple[int, int], np.ndarray] = {}
    for step in steps:
        last = () if step.last is None else (step.last,)
        for array in (*step.written, *last):
            written.setdefault((array.__array_interface__["data"][0], array.nbytes), array)
    if len(written) == 1 and len(steps) == 1 and steps[0].last is not None:
        return ()
    return tuple(written.values())


class Bound:
    """Bound work on one side: launch it, prepare a stream for it, or capture it.

    Args:
        side: ``"host"`` or ``"device"``.
        device: the device index, or None on the host.
        steps: the work, in order.
        sides: prepare now, outside a capture, the side streams a captured launch forks
            onto (else only :meth:`prepare` does): False for work launched at once and
            dropped, which no capture replays.
        branches: the steps' :func:`branch_plan`, when the caller knows one (steps moved
            from others whose plan it is: a move keeps every written plane apart from the
            others, so which steps order one another does not change); None: worked out
            from the steps when first needed.

    Attributes:
        side: ``"host"`` or ``"device"``.
        device: the device index, or None on the host.
    """

    _what: ClassVar[str] = "plan"

    def __init__(
        self,
        side: str,
        device: int | None,
        steps: Sequence[Step],
        *,
        sides: bool = True,
        branches: tuple[Placement, ...] | None = None,
    ) -> None:
        self.side = side
        self.device = device
        if branches is not None:
            self.__dict__["_branches"] = branches  # (what the cached property would find)
        steps = self._steps = tuple(steps)
        self._host = side == "host"
        self._enqueues = tuple([step.enqueue for step in steps])
        self._stream_plane = _stream_plane(steps)
        self._written = _written(steps) if self._host else ()
        self._tensors = (
            steps[0].tensors
            if len(steps) == 1
            else tuple([t for step in steps for t in step.tensors])
        )
        # whether a captured launch may fork (two steps that may, in a row or not)
        self._may_fork = (
            not self._host and len(steps) >= 2 and sum([s.fork is not None for s in steps]) >= 2
        )
        if self._may_fork and sides and not is_capturing(self.stream()):
            self._prepare_sides()  # (a capture may make nothing: a bind in one never forks)

    def __reduce__(self) -> tuple[Any, ...]:
        """Refused: a binding is its planes' memory and what was prepared for it."""
        raise EagleTypeError(
            f"a bound {self._what} holds its planes' memory and what was prepared for it, so "
            f"it cannot be pickled or copied; pickle or copy the {self._what} and bind it "
            "again over the planes you mean"
        )

    def stream(self) -> int:
        """The raw stream a launch with no stream goes to: eagle's inside ``with
        stream:``, else the current stream of the framework the planes come from
        (torch, CuPy), else the CUDA default stream."""
        return launch_stream(self._stream_plane, self.device or 0)

    def launch(self, stream: Any = None) -> None:
        """Run once: on the device, enqueue on ``stream`` (a Stream, a raw
        pointer, or None for :meth:`stream`) and return; legal inside a
        capture, where independent steps (an adjoint's gradient products) fork onto
        branches of their own and join back before the launch ends. On the host,
        run now (``stream`` must be None); if it raises, every plane it writes is
        as it was before. The torch tensors
        it writes have their versions bumped, as torch's in-place operations
        do, so autograd refuses a backward through a value it overwrote.

        Raises:
            ValueError: a stream given to work bound to host arrays; a torch tensor it
                writes that has come to require grad since the bind.
        """
        for tensor in self._tensors:  # (checked at the bind: refused again, never written)
            if tensor.requires_grad:
                raise EagleValueError(
                    f"this {self._what} writes a torch tensor that requires grad since it was "
                    "bound: eagle never writes one behind autograd's back; bind .detach() of "
                    "it, or use eagle.torch.function(kernel) to make the write part of the graph"
                )
        if self._host:
            if stream is not None:
                raise EagleValueError(
                    f"this {self._what} is bound to host arrays; it runs now and takes no stream"
                )
            _run_all_or_nothing(self._steps, self._written)
        else:
            if stream is None:
                stream = launch_stream(self._stream_plane, self.device or 0)
            if not self._may_fork or not self._branched(stream):
                self._enqueue(stream)
        if self._tensors:
            bump_versions(self._tensors)

    def _enqueue(self, stream: Any) -> None:
        """Enqueue the steps on ``stream``, one after another."""
        if any_capture_active():  # each step recorded, so that the graph can be rebound
            stream_ptr = as_stream_ptr(stream, self.device or 0)
            for step in self._steps:
                record(stream_ptr, step.site, step.enqueue)
        else:
            for enqueue in self._enqueues:
                enqueue(stream)

    def prepare(self, stream: Any = None) -> None:
        """Make what a launch on ``stream`` needs that a capture may not make
        (a GEMM route's cuBLAS handle for that stream, warmed); call it
        outside any capture. Nothing to do for a loop. :meth:`capture` calls it.

        Raises:
            GemmCaptureUnavailable: (GEMM route) ``stream`` is being captured,
                or no cuBLAS.
        """
        stream_ptr: int | None = None
        for step in self._steps:
            if step.prepare is not None:
                if stream_ptr is None:
                    stream_ptr = self._stream_ptr(stream)
                step.prepare(stream_ptr)
        self._prepare_sides()

    @functools.cached_property
    def _branches(self) -> tuple[Placement, ...] | None:
        """Where each step runs inside a capture (:func:`branch_plan`), worked out once."""
        return branch_plan(self._steps) if self._may_fork else None

    def _prepare_sides(self) -> None:
        """Make the side streams a captured launch forks onto, and prepare each forking
        step for its own (outside any capture)."""
        for step, placement in zip(self._steps, self._branches or (), strict=False):
            if placement.side is not None and step.prepare is not None:
                side_ptr = side_stream(self.device or 0, placement.side, make=True)
                assert side_ptr is not None  # made
                step.prepare(side_ptr)

    def _branched(self, stream: Any) -> bool:
        """Enqueue the steps on ``stream`` with their branches (:attr:`_branches`) when
        it is being captured, and not into the body of a device-side loop; False, and
        nothing enqueued, when it is not."""
        placements = self._branches
        if placements is None:  # its forking steps are not side by side
            return False
        device = self.device or 0
        stream_ptr = as_stream_ptr(stream, device)
        if not is_capturing(stream_ptr) or in_loop_body(stream_ptr):
            return False
        with Branches(stream_ptr, device) as branches:
            for step, placement in zip(self._steps, placements, strict=True):
                for side in placement.joins:
                    branches.join(side)
                on = stream_ptr
                if placement.side is not None:
                    side_ptr = side_stream(device, placement.side, make=False)
                    if side_ptr is not None and step.fork is not None and step.fork(side_ptr):
                        on = branches.fork(placement.side)
                record(on, step.site, step.enqueue)
        return True

    def capture(self, stream: Any = None) -> Launcher:
        """Record one launch into a CUDA graph and return its :class:`~eagle.cuda.Launcher`
        (replaying on ``stream``, :meth:`stream` by default, which must not be the
        CUDA default stream: CUDA captures no work there).

        Raises:
            ValueError: the work is bound to host arrays.
        """
        if self.side != "device":
            raise EagleValueError(
                f"this {self._what} is bound to host arrays and cannot be captured; bind device "
                "Arrays"
            )
        stream_ptr = self._stream_ptr(stream)
        self.prepare(stream_ptr)  # outside the capture: may make and warm a cuBLAS handle
        with StreamCapturer(stream_ptr) as capturer:
            self.launch(stream_ptr)
        assert capturer.captured is not None
        return Graph.from_captured(capturer.captured).launcher().stream(stream_ptr)

    def _stream_ptr(self, stream: Any) -> int:
        return self.stream() if stream is None else as_stream_ptr(stream, self.device or 0)


def one_place(launches: Sequence[Bound], names: Sequence[str], what: str) -> tuple[str, int | None]:
    """The one side and device of ``launches`` (named ``names`` in a refusal).

    Raises:
        ValueError: they are on two sides or two devices; the message says ``what`` must
            be on one.
    """
    where = {(launch.side, launch.device) for launch in launches}
    if len(where) != 1:
        described = ", ".join(
            f"{name} on {'the host' if launch.side == 'host' else f'cuda:{launch.device}'}"
            for name, launch in zip(names, launches, strict=True)
        )
        raise EagleValueError(f"{what} must be on one side and device: {described}")
    ((side, device),) = where
    return side, device


def listed(items: Sequence[str], most: int = 8) -> str:
    """``items`` joined for a repr: the first ``most`` of them, then how many in all."""
    if len(items) <= most:
        return ", ".join(items)
    return f"{', '.join(items[:most])}, ... ({len(items)} in all)"


def _run_all_or_nothing(steps: Sequence[Step], written: Sequence[np.ndarray]) -> None:
    """Run host steps in order, numpy's floating-point warnings off (a warning turned
    into an error would stop a step after it wrote); if one raises, write back what
    they had written to."""
    if not written:
        with np.errstate(all="ignore"):
            for step in steps:
                step.enqueue(None)
        return
    saved = [(array, array.copy()) for array in written]
    try:
        with np.errstate(all="ignore"):
            for step in steps:
                step.enqueue(None)
    except BaseException:
        for array, before in saved:
            np.copyto(array, before)
        raise
