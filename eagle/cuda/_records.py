"""Error records: where a launched kernel notes the first check it failed.

A record is :data:`WORDS` 64-bit words of pinned host memory mapped into the
device (so reading it costs no copy), laid out as :mod:`hawk.emit.checks`
says: ``[failed, site, lane, value, extent, epoch, claim, -]``. ``claim`` holds
the address of a word of device memory; the first failing thread of an epoch
raises it to ``epoch`` with ``atomicMax`` (an atomic on device memory, which
every link supports), fills the record and sets ``failed`` last. Clearing a
record is two host writes (``failed`` to 0, ``epoch`` up by one), so it is
legal anywhere, a capture included.

A record belongs to one loaded kernel on one device (:func:`record_for`): every
launch of that kernel, from a plan or a graph, writes into it. Records come 64
to a page of pinned memory. A record lives while anything holds it (the cache
of records, a bound plan, a graph that captured a launch: the record is a
kernel argument); once nothing does, its slot waits for :func:`free_unused`
(called by :func:`eagle.clear_caches` once the devices are idle), which
raises a failure it recorded meanwhile and makes the slot free for another
record. :func:`raise_recorded` (called by every synchronizing call) and
:meth:`ErrorRecord.check` (called before each launch) clear a record that
holds a failure and raise its error.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from contextlib import suppress

import numpy as np

from eagle._cache import KeyedCache
from eagle.cuda._runtime import cudart, ensure_device, runtime

__all__ = ["WORDS", "ErrorRecord", "free_unused", "has_unused", "raise_recorded", "record_for"]

#: 64-bit words per record
WORDS = 8

_PER_SLAB = 64
_EPOCH, _CLAIM = 5, 6

#: makes the error of a record's words (None: nothing to raise)
Translate = Callable[[Sequence[int]], Exception | None]


class _Slab:
    """One page of pinned, mapped host records and their device claim words."""

    def __init__(self, device: int) -> None:
        ensure_device(device)
        flags = runtime().cudaHostAllocMapped | runtime().cudaHostAllocPortable
        size = _PER_SLAB * WORDS * 8
        host = cudart.cudaHostAlloc(size, flags)
        claims = None
        try:  # a slab that fails half-way (out of memory, say) gives back what it took
            self.device_ptr = int(cudart.cudaHostGetDevicePointer(host, 0))
            claims = int(cudart.cudaMalloc(_PER_SLAB * 8))
            cudart.cudaMemset(claims, 0, _PER_SLAB * 8)
        except BaseException:
            with suppress(Exception):
                if claims is not None:
                    cudart.cudaFree(claims)
                cudart.cudaFreeHost(host)
            raise
        self.claims = claims
        self.words = np.ctypeslib.as_array(
            (ctypes.c_uint64 * (_PER_SLAB * WORDS)).from_address(host)
        )
        self.words = self.words.reshape(_PER_SLAB, WORDS)
        self.words[:] = 0
        self.words[:, _EPOCH] = 1
        self.words[:, _CLAIM] = self.claims + 8 * np.arange(_PER_SLAB, dtype=np.uint64)
        self.device = device
        # per slot handed out, what makes its error (None once the slot is free again)
        self.translates: list[Translate | None] = []
        self.free: list[int] = []  # slots handed out and freed since


class ErrorRecord:
    """One kernel's error record on one device; made by :func:`record_for`.

    Attributes:
        ptr: its address on the device (the kernel's last argument).
        device_index: the device it serves.
    """

    def __init__(self, slab: _Slab, slot: int) -> None:
        self.ptr = slab.device_ptr + slot * WORDS * 8
        self.device_index = slab.device
        self._slab, self._slot = slab, slot
        self._words = slab.words[slot]
        unused = weakref.finalize(self, _unused.append, (slab, slot))
        unused.atexit = False

    def check(self) -> None:
        """Raise the failure this record holds, after clearing it (nothing when none)."""
        if self._words[0]:
            _raise(self._slab, self._slot)


def _raise(slab: _Slab, slot: int) -> None:
    error = _take(slab, slot)
    if error is not None:
        raise error


def _take(slab: _Slab, slot: int) -> Exception | None:
    """The error of the failure slot ``slot`` holds, after clearing it (None when none)."""
    with _lock:
        words = slab.words[slot]
        if not words[0]:
            return None
        values = [int(w) for w in words.view(np.int64)]  # the kernel writes int64
        words[:5] = 0
        words[_EPOCH] += 1
        translate = slab.translates[slot]
    return None if translate is None else translate(values)


_slabs: dict[int, list[_Slab]] = {}
#: records by kernel and device (one a plan or a graph holds outlives its entry here)
_records: KeyedCache[tuple[Hashable, int], ErrorRecord] = KeyedCache("error records", 256)
#: the slots of records nothing holds any more, freed by free_unused
_unused: list[tuple[_Slab, int]] = []
_lock = threading.Lock()


def record_for(key: Hashable, device: int, translate: Translate) -> ErrorRecord:
    """The error record of the kernel ``key`` on ``device`` (made on first use).

    Args:
        key: identifies the loaded kernel (its source and name, say).
        device: the device it runs on.
        translate: turns a failed record's words into the error to raise.
    """
    record = _records.get((key, device))
    if record is None:
        with _lock:
            record = _records.get((key, device)) if (key, device) in _records else None
            if record is None:
                slab, slot = _slot(device)
                slab.translates[slot] = translate
                record = _records[(key, device)] = ErrorRecord(slab, slot)
    return record


def _slot(device: int) -> tuple[_Slab, int]:
    """A free slot on ``device``: one freed before, else the next of the last slab, else
    the first of a new one."""
    slabs = _slabs.setdefault(device, [])
    for slab in slabs:
        if slab.free:
            return slab, slab.free.pop()
    if not slabs or len(slabs[-1].translates) == _PER_SLAB:
        slabs.append(_Slab(device))
    slab = slabs[-1]
    slab.translates.append(None)
    return slab, len(slab.translates) - 1


def has_unused() -> bool:
    """Whether records nothing holds any more wait for :func:`free_unused`."""
    return bool(_unused)


def free_unused() -> None:
    """Free the slots of the records nothing holds any more, so that new records take
    them. Call it only once every device has finished the work launched before (a
    launch may still be writing into one).

    Raises:
        Exception: the error a freed record held, as :func:`raise_recorded` would
            (every slot is freed first).
    """
    with _lock:
        unused = list(_unused)
        _unused.clear()
    errors = []
    for slab, slot in unused:
        error = _take(slab, slot)
        if error is not None:
            errors.append(error)
        with _lock:
            slab.translates[slot] = None
            slab.free.append(slot)
    if errors:
        raise errors[0]


def raise_recorded() -> None:
    """Raise the failure of the first record that holds one, after clearing it.

    Every synchronizing call makes it once the work it waited for is done; it
    reads host memory only, so it costs no CUDA call while nothing failed.
    """
    for slabs in list(_slabs.values()):
        for slab in slabs:
            failed = np.flatnonzero(slab.words[: len(slab.translates), 0])
            if failed.size:
                _raise(slab, int(failed[0]))
