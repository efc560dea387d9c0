"""Rebinding: pointing an instantiated graph at other arrays without capturing again.

While eagle captures a stream, each step of a bound launch records itself as a
:class:`Site` (:func:`record`): the planes it works on, by name, and the capture's
dependencies around it, from which the graph nodes it produced are found when the
graph is first rebound. :func:`rebind` (behind :meth:`eagle.cuda.Launcher.rebind`)
checks every new array before it changes anything, then updates the instantiated
graph node by node, the cheapest way each node allows:

* a :class:`KernelSite` (a hawk kernel): its kernel node's arguments, one
  ``cuGraphExecKernelNodeSetParams``;
* a :class:`ProductSite` (cuBLAS products, whose node parameters are cuBLAS's own):
  the products are captured again over the new planes, alone, on the same stream with
  the same warmed handle (nothing allocates; every changed product of a stream in one
  small capture), and each of their nodes' parameters is copied onto the matching
  node of the instantiated graph (``cuGraphExecKernelNodeSetParams``,
  ``cudaGraphExecMemsetNodeSetParams``); nothing is instantiated. Once such a capture
  has recorded exactly the arguments that moving the plane pointers found in the old
  ones predicts (:class:`~eagle.cuda._node_arguments.Patch`), later rebinds of those
  planes to memory aligned alike write the pointers into eagle's own copy of the
  arguments and set each node, as for a kernel site, without capturing;
* a memset node (an ``Array.fill``) whose destination lies in a rebound array: its
  destination, ``cudaGraphExecMemsetNodeSetParams``.
"""

from __future__ import annotations

import bisect
import ctypes
import itertools
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from eagle._checks import check_buffer
from eagle.cuda import _graph_nodes as graph_nodes
from eagle.cuda._capture_state import _active, _release, record_use
from eagle.cuda._node_arguments import ALIGNED, ArgumentCopy, Patch
from eagle.cuda._rebind_checks import (
    check_disjoint,
    check_key,
    check_written,
    conflicts,
    describe,
    fits,
    graph_device,
    mismatch,
    span_of,
)
from eagle.cuda._runtime import CudaError, cudart
from eagle.cuda._stream_capture import StreamCapturer
from eagle.errors import EagleTypeError, EagleValueError

__all__ = ["KernelSite", "ProductSite", "Rebindable", "Site", "rebind", "record"]


class Rebindable(Protocol):
    """What a rebind reads of a graph (an :class:`eagle.cuda.Graph`)."""

    _exec: Any  # the instantiated graph
    _graph: Any  # the raw graph it was instantiated from

    @property
    def _kept(self) -> list[Any]: ...  # what its capture recorded work against

    def _check(self) -> None: ...  # raises LifetimeError once the graph was destroyed


class Site(ABC):
    """One step of a bound launch, recorded by a capture, that a rebind can point elsewhere.

    Args:
        label: what it is, for messages (``"plan 'seed'"``).
        planes: plane name -> the device array the step works on.
        written: the names of the planes it writes.
    """

    def __init__(self, label: str, planes: Mapping[str, Any], written: Iterable[str]) -> None:
        self.label = label
        self.planes = dict(planes)
        self.spans = {name: span_of(array) for name, array in self.planes.items()}
        self.written = frozenset(written)
        self.conflicts = conflicts(self.planes, self.written)
        self.stream_ptr = 0
        self.before: list[Any] = []  # the capture's dependencies before the step
        self.after: list[Any] = []  # and after it
        self.exec_handle: Any = None  # the instantiated graph, once it is rebound

    def take(self, planes: Mapping[str, Any], spans: Mapping[str, tuple[int, int]]) -> None:
        """Work on ``planes`` (name -> array, each as many bytes as the plane it replaces,
        covering its span in ``spans``) from now on."""
        self.spans.update(spans)
        self.planes.update(planes)

    @abstractmethod
    def resolve(self) -> list[Any]:
        """Find the step's nodes in the graph (once); return the nodes it claims.

        Raises:
            ValueError: they cannot be found or paired later.
        """

    @abstractmethod
    def change(
        self, planes: Mapping[str, Any], spans: Mapping[str, tuple[int, int]]
    ) -> _Part | None:
        """The change that points the step's nodes at ``planes`` (name -> new array, as
        checked by the rebind, covering its span in ``spans``), or None when its work must
        be captured again over them (:func:`recapture`)."""


class _Part(Protocol):
    """One site's part of a rebind: :meth:`apply` it, :meth:`undo` it if a later part
    fails, then :meth:`commit` it once every part applied."""

    def apply(self) -> None: ...

    def undo(self) -> None: ...

    def commit(self) -> None: ...


class _Change:
    """A :class:`_Part` made of three functions."""

    __slots__ = ("apply", "commit", "undo")

    def __init__(
        self, apply: Callable[[], None], undo: Callable[[], None], commit: Callable[[], None]
    ) -> None:
        self.apply, self.undo, self.commit = apply, undo, commit


def record(
    stream_ptr: int, make_site: Callable[[], Site] | None, enqueue: Callable[[int], None]
) -> None:
    """Run ``enqueue(stream_ptr)`` and, when eagle is capturing that stream, keep a
    site (from ``make_site()``) in the capture with the dependencies around the work
    it enqueued."""
    if make_site is None or stream_ptr not in _active:
        enqueue(stream_ptr)
        return
    site = make_site()
    site.stream_ptr = stream_ptr
    if isinstance(site, ProductSite):
        site.before = _capture_deps(stream_ptr)
    enqueue(stream_ptr)
    site.after = _capture_deps(stream_ptr)
    record_use(stream_ptr, site)


def _capture_deps(stream_ptr: int) -> list[Any]:
    _, _, _, deps, _, count = cudart.cudaStreamGetCaptureInfo(stream_ptr)
    return list(deps or [])[:count]


# -- sites ---------------------------------------------------------------------------------


class KernelSite(Site):
    """A kernel launch: rebinding rewrites the pointer arguments of its one kernel node.

    It is made while the launch is captured and keeps the launch's arguments as they are
    then (the kernel node holds that copy): the bound launch may pack other values into
    its arguments for later launches (a Param's number, see
    :meth:`~eagle.cuda.module.PackedArgs.setter`), which the graph does not take.

    Args:
        label, planes, written: as for :class:`Site`.
        packed: the launch's :class:`~eagle.cuda.module.PackedArgs`.
        arguments: plane name -> the position of its pointer among the arguments.
    """

    def __init__(
        self,
        label: str,
        planes: Mapping[str, Any],
        written: Iterable[str],
        packed: Any,
        arguments: Mapping[str, int],
    ) -> None:
        super().__init__(label, planes, written)
        base = ctypes.addressof(packed._data)
        self._captured = packed._data.raw  # the arguments' bytes, as this launch takes them
        self._offsets = [int(pointer or base) - base for pointer in packed._pointers]
        self._arguments = dict(arguments)
        self._handles: tuple[Any, Any] = (None, None)
        self._params: Any = None
        self._slots: dict[str, Any] = {}  # plane name -> its pointer in our copy

    def resolve(self) -> list[Any]:
        if len(self.after) != 1 or graph_nodes.kind(self.after[0]) != "kernel":
            raise EagleValueError(f"eagle could not find the kernel node of {self.label}")
        node = self.after[0]
        self._handles = graph_nodes.driver_handles(self.exec_handle, node)
        self._params = graph_nodes.kernel_params(node)
        # our own copy of the arguments as captured: the bound plan's stay as they are
        offsets = self._offsets
        self._copy = ArgumentCopy(self._captured, offsets)
        self._copy.give(self._params)
        self._slots = {name: self._copy.slot(offsets[i]) for name, i in self._arguments.items()}
        return [node]

    def change(self, planes: Mapping[str, Any], spans: Mapping[str, tuple[int, int]]) -> _Part:
        return _KernelChange(self, planes, spans)

    def update(self) -> None:
        """Give the kernel node the arguments in our copy, as they are now."""
        exec_handle, node = self._handles
        graph_nodes.set_kernel(exec_handle, node, self._params)


class _KernelChange:
    """Pointing a :class:`KernelSite` at new planes (name -> array, and its span): their
    addresses written into the site's copy of the arguments, then one kernel-node update.
    Until it commits, the site still holds the old planes, which undo writes back."""

    __slots__ = ("_planes", "_site", "_spans")

    def __init__(
        self, site: KernelSite, planes: Mapping[str, Any], spans: Mapping[str, tuple[int, int]]
    ) -> None:
        self._site, self._planes, self._spans = site, planes, spans

    def apply(self) -> None:
        slots = self._site._slots
        for name, (start, _) in self._spans.items():
            slots[name].value = start
        self._site.update()

    def undo(self) -> None:
        site = self._site
        for name in self._spans:
            site._slots[name].value = site.spans[name][0]
        site.update()

    def commit(self) -> None:
        self._site.take(self._planes, self._spans)


class ProductSite(Site):
    """Work whose nodes are another library's (cuBLAS products): rebinding captures it
    again, alone, on the same stream, and copies its nodes' parameters over.

    Args:
        label, planes, written: as for :class:`Site`.
        reissue: ``reissue(stream_ptr, planes)`` prepares the work over ``planes`` (all
            of the step's planes, by name) outside any capture and returns a function
            that enqueues it on ``stream_ptr``, legal inside a capture.
    """

    def __init__(
        self,
        label: str,
        planes: Mapping[str, Any],
        written: Iterable[str],
        reissue: Callable[[int, Mapping[str, Any]], Callable[[], None]],
    ) -> None:
        super().__init__(label, planes, written)
        self.reissue = reissue
        self.nodes: list[Any] = []
        self.signature: list[tuple[str, int, int]] = []
        self._current: list[Any] = []  # the parameters the instantiated graph's nodes have
        self._owner: Any = None  # keeps the graph holding those parameters
        self._patch: Patch | None = None  # the nodes as arguments of our own, once learned
        self._learned: set[str] = set()  # the planes a capture showed the patch right for
        self._patchable = True  # False where the driver cannot lay out the arguments

    def resolve(self) -> list[Any]:
        found, deps = graph_nodes.span(self.after, self.before)
        order = graph_nodes.chain(found, deps)
        if order is None:
            raise EagleValueError(
                f"the nodes of {self.label} do not form one chain, so eagle cannot pair them "
                "with the nodes of a new capture"
            )
        self.nodes = order
        self.signature, self._current = graph_nodes.node_params(order, self.label)
        self._patch, self._learned, self._patchable = None, set(), True
        return order

    def changed(
        self,
        params: list[Any],
        owner: Any,
        planes: Mapping[str, Any],
        spans: Mapping[str, tuple[int, int]],
    ) -> _Change:
        """The change that gives the nodes ``params`` (from ``owner``'s graph): a capture
        over the new ``planes`` (covering ``spans``). Once it commits, the site learns from
        it how to patch them (:meth:`_learn`)."""
        exec_handle, previous = self.exec_handle, self._current

        def commit() -> None:
            old = dict(self.spans)
            before = self._owner  # holds the graph whose memory ``previous`` points into
            self._current, self._owner = params, owner
            self.take(planes, spans)
            if self._patchable and previous:
                self._learn(previous, params, old, spans)
            del before

        return _Change(
            lambda: graph_nodes.copy_params(exec_handle, self.nodes, params),
            lambda: graph_nodes.copy_params(exec_handle, self.nodes, previous),
            commit,
        )

    def change(
        self, planes: Mapping[str, Any], spans: Mapping[str, tuple[int, int]]
    ) -> _Part | None:
        """The change that points the nodes at ``planes`` by patching their arguments, or
        None when a capture must do it: no capture has yet shown the patch right for
        every one of ``planes``, or one of them is aligned otherwise than the plane it
        replaces (cuBLAS picks its kernels by the operands' alignment). A site that
        recorded no node only takes the planes."""
        if not self.nodes:
            return self.changed([], None, planes, spans)
        patch = self._patch
        if patch is None or not self._learned.issuperset(spans):
            return None
        current = self.spans
        for name, (start, _) in spans.items():
            if (start - current[name][0]) % ALIGNED:
                return None
        return _PatchChange(self, patch, planes, spans)

    def _learn(
        self,
        previous: list[Any],
        params: list[Any],
        spans: Mapping[str, tuple[int, int]],
        moved: Mapping[str, tuple[int, int]],
    ) -> None:
        """Learn from a capture over planes moved to ``moved`` (name -> new span; the
        nodes' ``previous`` parameters, over the planes of ``spans``, against the captured
        ``params``) how to patch the nodes.
        A capture no patch predicts drops the patch (the next capture learns afresh); a
        driver that cannot say how the arguments are laid out turns patching off."""
        shifts = {name: start - spans[name][0] for name, (start, _) in moved.items()}
        try:
            patch = Patch.learned(self.exec_handle, self.nodes, previous, params, spans, shifts)
        except CudaError:
            patch, self._patchable = None, False
        if patch is None:
            self._patch = None
            self._learned.clear()
            return
        self._patch = patch
        self._current = patch.params
        self._learned.update(moved)


class _PatchChange:
    """Pointing a :class:`ProductSite` at new planes by its
    :class:`~eagle.cuda._node_arguments.Patch`. Until it
    commits, the site still holds the old planes, which undo points the nodes at again."""

    __slots__ = ("_patch", "_planes", "_site", "_spans")

    def __init__(
        self,
        site: ProductSite,
        patch: Patch,
        planes: Mapping[str, Any],
        spans: Mapping[str, tuple[int, int]],
    ) -> None:
        self._site, self._patch, self._planes, self._spans = site, patch, planes, spans

    def apply(self) -> None:
        self._patch.point(self._spans)

    def undo(self) -> None:
        current = self._site.spans
        self._patch.point({name: current[name] for name in self._spans})

    def commit(self) -> None:
        self._site.take(self._planes, self._spans)


class _Captured:
    """A graph eagle captured to take node parameters from; destroyed when unreferenced."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        weakref.finalize(self, cudart.cudaGraphDestroy, handle).atexit = False


#: a product site's share of a rebind: the site, its new planes and their spans, by name
_Work = tuple[ProductSite, Mapping[str, Any], Mapping[str, tuple[int, int]]]


def recapture(stream_ptr: int, work: Sequence[_Work]) -> list[_Change]:
    """Capture the products of ``work`` (site, new planes, their spans) again over their
    new planes, in one small graph on ``stream_ptr``, and pair its nodes with the sites'
    nodes.

    Raises:
        ValueError: the new capture records other nodes than the graph holds.
    """
    enqueues = [site.reissue(stream_ptr, {**site.planes, **planes}) for site, planes, _ in work]
    with StreamCapturer(stream_ptr) as capturer:
        for enqueue in enqueues:
            enqueue()
    assert capturer.captured is not None
    handle, held = capturer.captured._take()
    held.handles = []  # the raw graph is the owner's; the capture needs to keep nothing else
    _release(held)
    owner = _Captured(handle)
    order = graph_nodes.chain(*graph_nodes.edges(handle))
    if order is None or len(order) != sum(len(site.nodes) for site, _, _ in work):
        raise EagleValueError(_OTHER_NODES.format(label=work[0][0].label))
    changes = []
    at = 0
    for site, planes, spans in work:
        nodes = order[at : at + len(site.nodes)]
        at += len(site.nodes)
        signature, params = graph_nodes.node_params(nodes, site.label)
        if signature != site.signature:
            raise EagleValueError(_OTHER_NODES.format(label=site.label))
        changes.append(site.changed(params, owner, planes, spans))
    return changes


_OTHER_NODES = (
    "{label} captured again over the new planes records other nodes (cuBLAS chose other "
    "kernels: the new arrays may align differently in memory); capture the graph again instead"
)


class _Memset:
    """A memset node that no site claims (an ``Array.fill``): its destination moves with
    the array it lies in."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.params = graph_nodes.memset_params(node)
        self.start = int(self.params.dst)
        rows = self.params.height
        span = (rows - 1) * self.params.pitch + self.params.width * self.params.elementSize
        self.end = self.start + span
        self.owner: Any = None  # the array it now writes into, kept alive

    def change(self, exec_handle: Any, old: Any, new: Any) -> _Change:
        if self.params.height != 1:
            raise EagleValueError(
                f"the graph fills {describe(old)} with a 2-D memset (a fill of 8-byte "
                "elements), which CUDA cannot point elsewhere; capture the graph again"
            )
        start = self.start
        moved = start - old.ptr + new.ptr

        def put(address: int) -> None:
            self.params.dst = address
            graph_nodes.set_memset(exec_handle, self.node, self.params)

        def commit() -> None:
            self.start, self.end = moved, moved + (self.end - start)
            self.owner = new

        return _Change(lambda: put(moved), lambda: put(start), commit)


# -- the graph's rebind state --------------------------------------------------------------

#: node kinds (besides the sites' own) that a rebind leaves as they are: they touch no plane
_UNTOUCHED = frozenset({"empty", "eventrecord", "waitevent"})

#: a rebind that moves more than one plane in this many sorts the span index again, once,
#: instead of taking each moved span out of the sorted list and putting it back
_RESORT = 8

_WHAT = {
    "memcpy": "a memory copy",
    "host": "a host callback",
    "graph": "a child graph",
    "conditional": "a device-side loop or branch",
    "memalloc": "a memory allocation",
    "memfree": "a memory free",
}


class _State:
    """What a graph needs to be rebound, worked out at its first rebind: its sites, its
    fills, and which (site, plane name) pairs work on each span of memory."""

    def __init__(self, graph: Rebindable) -> None:
        sites = [obj for obj in graph._kept if isinstance(obj, Site)]
        claimed: dict[int, Site] = {}
        for site in sites:
            site.exec_handle = graph._exec
            for node in site.resolve():
                if claimed.setdefault(int(node), site) is not site:
                    raise EagleValueError(
                        f"eagle found one node claimed by two launches ({site.label})"
                    )
        memsets = []
        for node in graph_nodes.nodes(graph._graph):
            if int(node) in claimed:
                continue
            kind = graph_nodes.kind(node)
            if kind == "memset":
                memsets.append(_Memset(node))
            elif kind == "kernel":
                raise EagleValueError(
                    "the graph holds a kernel that no bound plan or adjoint launched (a "
                    "kernel.launch, handle.sgemm, a strided fill or another library's work), so "
                    "eagle cannot tell which arrays it uses; capture only bound launches and "
                    "fills to rebind, or capture the graph again"
                )
            elif kind not in _UNTOUCHED:
                raise EagleValueError(
                    f"the graph holds {_WHAT.get(kind, 'a ' + kind + ' node')}, which eagle "
                    "cannot point at other arrays; capture the graph again instead"
                )
        self.sites = sites
        self.memsets = memsets
        self.exec = graph._exec
        self.device = graph_device(sites)
        self.lock = threading.Lock()
        self.at: dict[tuple[int, int], list[tuple[Site, str]]] = {}  # span -> its planes
        self.ranges: list[tuple[int, int]] = []  # the spans in order, while disjoint
        self.named_in: dict[str, list[Site]] = {}  # plane name -> the sites with such a plane
        self.nested = False  # two planes overlap without being the same memory
        # id -> (array, its span) for each array a site holds now: a key that is one of
        # them (or a plane's name) is known to be an Array, and its span is known
        self.held: dict[int, tuple[Any, tuple[int, int]]] = {}
        for site in sites:
            for name, span in site.spans.items():
                self._add(span, [(site, name)])
                self.held[id(site.planes[name])] = (site.planes[name], span)
                self.named_in.setdefault(name, []).append(site)

    def pair(self, old: Any, new: Any) -> tuple[Any, Any, tuple[int, int]]:
        """``(old, new, old's span)``; ``old`` is checked to be an Array unless the graph
        holds it."""
        known = self.held.get(id(old))
        if known is not None and known[0] is old:
            return old, new, known[1]
        check_key(old)
        return old, new, span_of(old)

    def _place(self, span: tuple[int, int], uses: list[tuple[Site, str]]) -> bool:
        """Note ``uses`` (a list the index may keep) at ``span``; True when the span is new
        to the index."""
        here = self.at.get(span)
        if here is not None:
            here.extend(uses)
            return False
        self.at[span] = uses
        return True

    def _add(self, span: tuple[int, int], uses: list[tuple[Site, str]]) -> None:
        if not self._place(span, uses) or self.nested:  # nested: lookups scan every span
            return
        at = bisect.bisect(self.ranges, span)
        self.ranges.insert(at, span)
        before = self.ranges[at - 1] if at else None
        after = self.ranges[at + 1] if at + 1 < len(self.ranges) else None
        if (before and before[1] > span[0]) or (after and after[0] < span[1]):
            self.nested = True

    def _remove(self, span: tuple[int, int]) -> list[tuple[Site, str]]:
        uses = self.at.pop(span)
        if not self.nested:
            self.ranges.pop(bisect.bisect_left(self.ranges, span))
        return uses

    def named(self, name: str) -> Any:
        """The array the graph's plane ``name`` is, when all its launches agree on one."""
        sites = self.named_in.get(name)
        if not sites:
            names = sorted(self.named_in)
            raise EagleTypeError(
                f"this graph has no plane {name!r}; its planes are {', '.join(names) or 'none'}"
            )
        first = sites[0].spans[name]
        if any(site.spans[name] != first for site in sites):
            raise EagleTypeError(
                f"plane {name!r} is a different array in different launches of this graph; name "
                "the arrays to replace instead: launcher.rebind({old_array: new_array})"
            )
        return sites[0].planes[name]

    def uses(self, old: Any, start: int, end: int) -> list[tuple[Site, str]]:
        """The (site, plane name) pairs whose plane is ``old``'s memory, ``start:end``.

        Raises:
            ValueError: a plane overlaps ``old`` without being the same memory.
        """
        if not self.nested:
            found = self.at.get((start, end))
            if found is not None:  # the spans are disjoint: nothing else overlaps
                return found
            # only neighbours in address order can overlap
            at = bisect.bisect_left(self.ranges, (start, start))
            stop = bisect.bisect_left(self.ranges, (end, end))
            spans: Iterable[tuple[int, int]] = self.ranges[max(at - 1, 0) : stop]
        else:
            spans = self.at
        for lo, hi in spans:
            if lo < end and start < hi and (lo, hi) != (start, end):
                site, name = self.at[lo, hi][0]
                raise EagleValueError(
                    f"plane {name!r} of {site.label} overlaps {describe(old)} without being "
                    "the same memory; rebind the plane's own array"
                )
        return self.at.get((start, end), [])

    def rebind(self, pairs: list[tuple[Any, Any, tuple[int, int]]]) -> None:
        """Check every pair (old array, new array, old's span), then update the graph, all
        or nothing."""
        # per site: its new planes and their spans, by name
        per_site: dict[Site, tuple[dict[str, Any], dict[str, tuple[int, int]]]] = {}
        moved: list[tuple[tuple[int, int], Any, tuple[int, int]]] = []  # (old span, new, span)
        fills: list[tuple[_Memset, Any, Any]] = []
        for old, new, (start, end) in pairs:
            uses = self.uses(old, start, end)
            filled = self._fills(old, new, start, end) if self.memsets else []
            if not uses and not filled:
                raise EagleValueError(
                    f"{describe(old)} is not a plane this graph works on; pass the arrays "
                    "the graph reads and writes now as the keys"
                )
            if not fits(old, new, self.device):
                self._check(old, new, uses, bool(filled))
            ptr = new.ptr
            span = (ptr, ptr + end - start)  # as many bytes as the plane it replaces
            for site, name in uses:
                found = per_site.get(site)
                if found is None:
                    found = per_site[site] = ({}, {})
                found[0][name] = new
                found[1][name] = span
            if uses:
                moved.append(((start, end), new, span))
            fills += filled
        changes: list[_Part] = []
        products: dict[int, list[_Work]] = {}
        for site, (planes, spans) in per_site.items():
            check_written(site, spans)
            change = site.change(planes, spans)
            if change is not None:
                changes.append(change)
            elif isinstance(site, ProductSite):
                products.setdefault(site.stream_ptr, []).append((site, planes, spans))
            else:
                raise EagleTypeError(f"{site.label} can be neither changed nor captured again")
        for stream_ptr, work in products.items():
            changes.extend(recapture(stream_ptr, work))
        for fill, old, new in fills:
            changes.append(fill.change(self.exec, old, new))
        held = self.held
        for old_span, _, _ in moved:  # the arrays replaced: no site holds them once this
            for site, name in self.at[old_span]:  # applies
                held.pop(id(site.planes[name]), None)
        _apply(changes)
        self._move(moved)

    def _move(self, moved: list[tuple[tuple[int, int], Any, tuple[int, int]]]) -> None:
        """Every plane moved (old span, new array, new span) takes its old span's place in
        the index: span by span for a few, or by sorting the spans again once for many."""
        held, at = self.held, self.at
        if len(moved) * _RESORT > len(at):
            moves = [(at.pop(old_span), new, span) for old_span, new, span in moved]
            for uses, new, span in moves:
                self._place(span, uses)
                held[id(new)] = (new, span)
            self.ranges = sorted(at)
            self.nested = any(a[1] > b[0] for a, b in itertools.pairwise(self.ranges))
            return
        moves = [(self._remove(old_span), new, span) for old_span, new, span in moved]
        for uses, new, span in moves:
            self._add(span, uses)
            held[id(new)] = (new, span)

    def _check(self, old: Any, new: Any, uses: list[tuple[Site, str]], filled: bool) -> None:
        """Refuse ``new`` in ``old``'s place (where ``uses`` and, when ``filled``, a fill
        work on it) as a bind would: another layout or device, a null or misaligned
        address, read-only memory written."""
        label = _plane(*uses[0]) if uses else describe(old)
        problem = mismatch(old, new, self.device)
        if problem is not None:
            error, text = problem
            raise error(f"{label}: {text}")
        written = filled or any(name in site.written for site, name in uses)
        check_buffer(new, f"{label}: the new array", written=written)

    def _fills(self, old: Any, new: Any, start: int, end: int) -> list[tuple[_Memset, Any, Any]]:
        """The fills inside ``old``'s memory, ``start:end``, each with ``old`` and ``new``.

        Raises:
            ValueError: a fill covers that memory only in part.
        """
        found = []
        for fill in self.memsets:
            if fill.start < end and start < fill.end:
                if not (start <= fill.start and fill.end <= end):
                    raise EagleValueError(
                        f"the graph fills memory that {describe(old)} covers only in part; "
                        "rebind the filled array"
                    )
                found.append((fill, old, new))
        return found


def _plane(site: Site, name: str) -> str:
    return f"plane {name!r} of {site.label}"


def _apply(changes: list[_Part]) -> None:
    """Apply every change, or none: undo the applied ones if one fails."""
    done: list[_Part] = []
    try:
        for change in changes:
            change.apply()
            done.append(change)
    except BaseException:
        for change in reversed(done):
            change.undo()
        raise
    for change in changes:
        change.commit()


def rebind(graph: Rebindable, planes: Mapping[Any, Any] | None, named: Mapping[str, Any]) -> None:
    """Point ``graph``'s replays at other arrays; see :meth:`eagle.cuda.Launcher.rebind`."""
    graph._check()
    if planes is not None and type(planes) is not dict and not isinstance(planes, Mapping):
        raise EagleTypeError(
            f"rebind takes a mapping {{old_array: new_array}} and/or plane=new_array keywords, "
            f"not {type(planes).__name__}"
        )
    state = getattr(graph, "_rebind_state", None)
    if state is None:
        state = _State(graph)
        graph._rebind_state = state  # type: ignore[attr-defined]
    with state.lock:
        pairs = [state.pair(old, new) for old, new in planes.items()] if planes else []
        for name, new in named.items():
            pairs.append(state.pair(state.named(name), new))
        check_disjoint(pairs)
        state.rebind(pairs)
