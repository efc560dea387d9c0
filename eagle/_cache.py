"""eagle's in-process caches: one keyed type with one eviction rule, and :func:`clear_caches`.

Every cache whose entries may be dropped (a plan's kept bindings, a product's
checked bind state, emitted programs, analyses, compiled images, loaded
kernels, error records) is a :class:`KeyedCache`: at most ``size`` entries,
the least recently used dropped first, with counts of hits, misses and
evictions (:meth:`KeyedCache.stats`). An entry a live object still holds (a
bound plan's loaded kernel, a graph's error record) lives on with its holder
after the cache drops it.

:func:`clear_caches` empties every such cache, collects what that leaves in
reference cycles, then runs the hooks registered with :func:`on_clear` (eagle's
CUDA layer registers one that gives back the loaded kernels and error records
nothing uses any more).
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, NamedTuple, TypeVar

from eagle.errors import EagleValueError

__all__ = ["CacheStats", "KeyedCache", "clear_caches", "on_clear", "stats"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MISSING = object()


class CacheStats(NamedTuple):
    """What one cache holds and how it was used.

    Attributes:
        name: the cache's name.
        entries: how many entries it holds now.
        size: the most it keeps.
        hits: lookups that found an entry.
        misses: lookups that found none.
        evictions: entries dropped to keep within ``size``.
    """

    name: str
    entries: int
    size: int
    hits: int
    misses: int
    evictions: int


class KeyedCache(Generic[K, V]):
    """A mapping of at most ``size`` entries that drops the least recently used first.

    A lookup (:meth:`get`) or a store (``cache[key] = value``) makes an entry
    the most recent. :attr:`last` is the entry of the last hit or store, as
    ``(key, value)``, for a hot path that compares its key before hashing one
    (and counts the hit itself: ``cache.hits += 1``). Safe to use from several
    threads (the counts are then approximate).

    Args:
        name: what it holds, for :meth:`stats`.
        size: the most entries it keeps, at least 1.

    Raises:
        ValueError: ``size`` is less than 1.
    """

    __slots__ = (
        "__weakref__",
        "_entries",
        "_lock",
        "evictions",
        "hits",
        "last",
        "misses",
        "name",
        "size",
    )

    def __init__(self, name: str, size: int) -> None:
        if size < 1:
            raise EagleValueError(f"cache {name!r}: size must be at least 1, not {size}")
        self.name = name
        self.size = size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self.last: tuple[K, V] | None = None
        self.hits = self.misses = self.evictions = 0
        with _registry:
            _caches.add(self)

    def __repr__(self) -> str:
        return f"KeyedCache({self.name!r}, {len(self._entries)}/{self.size})"

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value kept under ``key`` (now the most recent), or ``default``."""
        entries = self._entries
        value = entries.get(key, _MISSING)
        if value is _MISSING:
            self.misses += 1
            return default
        try:  # noqa: SIM105 (a with-statement costs more than this lookup)
            entries.move_to_end(key)
        except KeyError:  # another thread dropped it meanwhile: the value is still right
            pass
        self.hits += 1
        self.last = (key, value)  # type: ignore[assignment]
        return value  # type: ignore[return-value]

    def __setitem__(self, key: K, value: V) -> None:
        """Keep ``value`` under ``key`` (the most recent), dropping the least recent beyond
        ``size``."""
        with self._lock:
            entries = self._entries
            entries[key] = value
            entries.move_to_end(key)
            self.last = (key, value)
            while len(entries) > self.size:
                entries.popitem(last=False)
                self.evictions += 1

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def values(self) -> list[V]:
        """The values, least recent first."""
        with self._lock:
            return list(self._entries.values())

    def clear(self) -> None:
        """Drop every entry (the counts stay)."""
        with self._lock:
            self._entries.clear()
            self.last = None

    def stats(self) -> CacheStats:
        """Its :class:`CacheStats`."""
        return CacheStats(
            self.name, len(self._entries), self.size, self.hits, self.misses, self.evictions
        )


#: every KeyedCache made, while it lives (a plan's own caches go with the plan)
_caches: weakref.WeakSet[KeyedCache] = weakref.WeakSet()
_registry = threading.Lock()  # a thread making a cache must not change the set being read


def _live() -> list[KeyedCache]:
    """The caches alive now."""
    with _registry:
        return list(_caches)


_hooks: list[Callable[[], None]] = []


def on_clear(hook: Callable[[], None]) -> None:
    """Run ``hook`` at each :func:`clear_caches`, after the caches are emptied."""
    if hook not in _hooks:
        _hooks.append(hook)


def stats() -> list[CacheStats]:
    """The :class:`CacheStats` of every live cache, by name."""
    return sorted((cache.stats() for cache in _live()), key=lambda s: s.name)


def clear_caches() -> None:
    """Drop what eagle keeps in the process only to be faster next time.

    It empties every cache of emitted programs, analyses, compiled images,
    loaded kernels, error records, checked products and the bindings plans keep
    for reuse (a later run binds again). What a live object uses stays with it:
    a bound plan you hold still launches, a graph still replays, and their
    loaded kernels and error records stay loaded. Loaded kernels and error
    records that nothing uses any more, reference cycles included, are given back
    (after waiting for the devices that ran them), so call it outside any stream
    capture.

    Raises:
        RuntimeError: a stream capture is under way and there is device memory
            to give back (call it again once the capture ends).
        hawk.PlaneIndexError: a launch of a kernel given back recorded a failure
            (or another error a kernel records), as at any synchronizing call.
    """
    for cache in _live():
        cache.clear()
    gc.collect()  # (an entry may have been the last way into a reference cycle)
    for hook in list(_hooks):
        hook()
