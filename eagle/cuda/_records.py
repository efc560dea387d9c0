"""Error records: where a launched kernel notes the first check it failed.

A record is :data:`WORDS` 64-bit words of pinned host memory mapped into the
device (so reading it costs no copy), laid out as :mod:`hawk.emit.checks`
says: ``[failed, site, lane, value, extent, epoch, claim, -]``. ``claim`` holds
the address of a word of device memory; the first failing thread of an epoch
raises it to ``epoch`` with ``atomicMax`` (an atomic on device memory, which
every link supports), fills the record and sets ``failed`` last. Clearing a
record is two host writes (``failed`` to 0, ``epoch`` up by one), so it is
legal anywhere, a capture included.

A record belongs to one loaded kernel on one device (:func:`record_for`), for
as long as the process keeps that kernel: every launch of that kernel, from
a plan or a graph, writes into it. Records come 64 to a page of pinned memory
and are never freed, as loaded kernels are never unloaded.
:func:`raise_recorded` (called by every synchronizing call) and
:meth:`ErrorRecord.check` (called before each launch) clear a record that
holds a failure and raise its error.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Hashable, Sequence
from contextlib import suppress

import numpy as np

from eagle.cuda._runtime import cudart, ensure_device, runtime

__all__ = ["WORDS", "ErrorRecord", "raise_recorded", "record_for"]

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
        self.records: list[ErrorRecord] = []


class ErrorRecord:
    """One kernel's error record on one device; made by :func:`record_for`.

    Attributes:
        ptr: its address on the device (the kernel's last argument).
        device_index: the device it serves.
    """

    def __init__(self, slab: _Slab, slot: int, translate: Translate) -> None:
        self.ptr = slab.device_ptr + slot * WORDS * 8
        self.device_index = slab.device
        self._words = slab.words[slot]
        self._translate = translate

    def check(self) -> None:
        """Raise the failure this record holds, after clearing it (nothing when none)."""
        if self._words[0]:
            self._raise()

    def _raise(self) -> None:
        with _lock:
            if not self._words[0]:
                return
            words = [int(w) for w in self._words.view(np.int64)]  # the kernel writes int64
            self._words[:5] = 0
            self._words[_EPOCH] += 1
        error = self._translate(words)
        if error is not None:
            raise error


_slabs: dict[int, list[_Slab]] = {}
_records: dict[Hashable, ErrorRecord] = {}
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
            record = _records.get((key, device))
            if record is None:
                slabs = _slabs.setdefault(device, [])
                if not slabs or len(slabs[-1].records) == _PER_SLAB:
                    slabs.append(_Slab(device))
                slab = slabs[-1]
                record = ErrorRecord(slab, len(slab.records), translate)
                slab.records.append(record)
                _records[(key, device)] = record
    return record


def raise_recorded() -> None:
    """Raise the failure of the first record that holds one, after clearing it.

    Every synchronizing call makes it once the work it waited for is done; it
    reads host memory only, so it costs no CUDA call while nothing failed.
    """
    for slabs in list(_slabs.values()):
        for slab in slabs:
            failed = np.flatnonzero(slab.words[: len(slab.records), 0])
            if failed.size:
                slab.records[int(failed[0])]._raise()
