"""Stream-ordered device memory from a CUDA memory pool.

A device :class:`~eagle.arrays.Array` owns a :class:`Buffer` allocated with
``cudaMallocFromPoolAsync`` on a stream and freed with ``cudaFreeAsync`` on
that same stream when the last array using it goes away. Frees that would
land inside an open capture are deferred until the capture ends, so a
captured graph never gains a free node by accident; a free on a stream that
no capture records (a buffer the garbage collector finds during someone's
capture) runs at once, and never invalidates that capture.

A pool keeps up to its release threshold (:data:`DEFAULT_RELEASE_THRESHOLD`
unless told otherwise) of freed memory cached for reuse; beyond that, freed
memory goes back to the device at the next synchronisation, where PyTorch,
CuPy or anyone else in the process can allocate it. :meth:`MemoryPool.trim`
hands back the cache as well.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from eagle.cuda._capture_state import (
    LifetimeError,
    any_capture_active,
    is_capturing,
    refusing_capture,
)
from eagle.cuda._runtime import cudart, driver, ensure_device, finalizer, runtime
from eagle.cuda.stream import Stream, as_stream_ptr, stream_object
from eagle.errors import EagleRuntimeError, EagleValueError

__all__ = ["DEFAULT_RELEASE_THRESHOLD", "Buffer", "MemoryPool", "default_pool"]

DEFAULT_RELEASE_THRESHOLD = 1 << 30
"""Bytes of freed memory a pool keeps cached across synchronisations (1 GiB)."""


class Buffer:
    """``nbytes`` of device memory from a :class:`MemoryPool`.

    Freed (stream-ordered, on the allocating stream, which it keeps alive) when
    garbage-collected. If you used it on another stream, keep it alive until
    that work is done.
    """

    __slots__ = ("__weakref__", "device", "nbytes", "pool", "ptr", "stream")

    #: eagle's own memory comes from no framework (``eagle.cuda.stream.framework_of``)
    framework = None

    def __init__(self, pool: MemoryPool, ptr: int, nbytes: int, stream: Stream | int) -> None:
        self.pool = pool
        self.ptr = ptr
        self.nbytes = nbytes
        self.stream = stream
        self.device = pool.device
        if ptr:
            # Holds the pool and the stream, which must outlive the allocation.
            weakref.finalize(self, pool._free, ptr, stream).atexit = False


class MemoryPool:
    """A CUDA memory pool that device arrays allocate from.

    Args:
        device: the device index.
        release_threshold: bytes of freed memory the pool keeps cached across
            synchronisations, so allocating them again is free (default
            :data:`~eagle.cuda.memory.DEFAULT_RELEASE_THRESHOLD`); freed memory beyond it goes
            back to the device at the next synchronisation.

    :meth:`destroy` refuses while arrays allocated from it are still alive,
    which includes arrays a live graph recorded work against.
    """

    def __init__(self, device: int = 0, release_threshold: int | None = None) -> None:
        self.device = device
        ensure_device(device)
        rt = runtime()
        props = rt.cudaMemPoolProps()
        props.allocType = rt.cudaMemAllocationType.cudaMemAllocationTypePinned
        props.handleTypes = rt.cudaMemAllocationHandleType.cudaMemHandleTypeNone
        props.location.type = rt.cudaMemLocationType.cudaMemLocationTypeDevice
        props.location.id = device
        threshold = DEFAULT_RELEASE_THRESHOLD if release_threshold is None else release_threshold
        if not isinstance(threshold, int) or threshold < 0:
            raise EagleValueError(
                f"release_threshold must be a non-negative int of bytes, not {threshold!r}"
            )
        self._handle = cudart.cudaMemPoolCreate(props)
        self._finalizer = finalizer(self, cudart.cudaMemPoolDestroy, self._handle)
        cudart.cudaMemPoolSetAttribute(
            self._handle,
            rt.cudaMemPoolAttr.cudaMemPoolAttrReleaseThreshold,
            driver().cuuint64_t(threshold),
        )
        self._buffers: weakref.WeakSet[Buffer] = weakref.WeakSet()
        self._deferred: list[tuple[int, Stream | int]] = []
        self._lock = threading.Lock()

    def _check(self) -> None:
        if self._handle is None:
            raise LifetimeError("this MemoryPool was destroyed; allocate from a live pool")

    def allocate(self, nbytes: int, stream: Stream | int) -> Buffer:
        """``nbytes`` of device memory, ordered on ``stream`` (a Stream or raw pointer).

        The stream (also an eagle Stream given by its raw pointer) is kept
        alive until the buffer is freed.
        """
        self._check()
        ensure_device(self.device)
        self._flush_deferred()
        if isinstance(stream, int):
            stream = stream_object(stream) or stream
        if nbytes == 0:
            return Buffer(self, 0, 0, stream)
        ptr_of = as_stream_ptr(stream)
        if any_capture_active():
            _refuse_outside_capture(ptr_of)
        ptr = int(cudart.cudaMallocFromPoolAsync(nbytes, self._handle, ptr_of))
        buffer = Buffer(self, ptr, nbytes, stream)
        self._buffers.add(buffer)
        return buffer

    @contextmanager
    def scoped(self, nbytes: int, stream: Stream | int) -> Iterator[int]:
        """``with pool.scoped(nbytes, stream) as ptr:`` — ``nbytes`` of device memory for
        the work the block enqueues on ``stream``: allocated on it on entry, freed on it
        (stream-ordered) on exit, even when the block raises.

        Inside a capture of ``stream`` this records an allocation node before the block's
        work and a free node after it: the graph owns the memory, each replay has it to
        itself, and nothing is left allocated after a replay. The block must enqueue its
        use of the memory on ``stream`` only.

        Args:
            nbytes: a positive number of bytes.
            stream: an eagle Stream or a raw pointer on the pool's device.
        """
        self._check()
        ensure_device(self.device)
        stream_ptr = as_stream_ptr(stream)
        ptr = int(cudart.cudaMallocFromPoolAsync(nbytes, self._handle, stream_ptr))
        try:
            yield ptr
        finally:
            cudart.cudaFreeAsync(ptr, stream_ptr)

    def _free(self, ptr: int, stream: Stream | int) -> None:
        if self._handle is None:
            return
        ensure_device(self.device)
        if isinstance(stream, Stream) and not stream.alive:
            cudart.cudaFree(ptr)  # its stream was destroyed by hand: free synchronously
            return
        stream_ptr = as_stream_ptr(stream)
        if is_capturing(stream_ptr):  # by eagle or anyone else (a torch.cuda.graph)
            with self._lock:
                self._deferred.append((ptr, stream))
            return
        _free_async(ptr, stream_ptr)

    def _flush_deferred(self) -> None:
        if not self._deferred or any_capture_active():
            return
        with self._lock:
            pending, self._deferred = self._deferred, []
        for ptr, stream in pending:
            self._free(ptr, stream)

    @property
    def live_buffers(self) -> int:
        """How many buffers from this pool are still alive."""
        return len(self._buffers)

    def used_bytes(self) -> int:
        """Bytes currently handed out to live buffers."""
        self._check()
        value = cudart.cudaMemPoolGetAttribute(
            self._handle,
            runtime().cudaMemPoolAttr.cudaMemPoolAttrUsedMemCurrent,
        )
        return int(value)

    def reserved_bytes(self) -> int:
        """Bytes the pool holds from the device, used or cached."""
        self._check()
        value = cudart.cudaMemPoolGetAttribute(
            self._handle,
            runtime().cudaMemPoolAttr.cudaMemPoolAttrReservedMemCurrent,
        )
        return int(value)

    def trim(self, keep_bytes: int = 0) -> None:
        """Give freed memory the pool still caches back to the device, keeping at most
        ``keep_bytes`` reserved; memory of live arrays stays.

        Waits for the device first, so frees already queued count as freed; not
        for use inside a capture.
        """
        self._check()
        if not isinstance(keep_bytes, int) or keep_bytes < 0:
            raise EagleValueError(f"keep_bytes must be a non-negative int, not {keep_bytes!r}")
        ensure_device(self.device)
        self._flush_deferred()
        cudart.cudaDeviceSynchronize()
        cudart.cudaMemPoolTrimTo(self._handle, keep_bytes)

    def destroy(self) -> None:
        """Give the pool's memory back to the device (idempotent).

        Raises:
            LifetimeError: arrays from this pool are still alive (destroy the
                graphs that hold them and drop them first).
        """
        if self._handle is None:
            return
        live = len(self._buffers)
        if live:
            raise LifetimeError(
                f"MemoryPool on device {self.device} still backs {live} live array buffer(s), "
                "held by your code or by a live graph; destroy the graphs first, then the "
                "cuBLAS handles, then the pool"
            )
        self._flush_deferred()
        ensure_device(self.device)
        cudart.cudaDeviceSynchronize()
        self._handle = None
        self._finalizer()

    def __repr__(self) -> str:
        state = "destroyed" if self._handle is None else f"{len(self._buffers)} live buffers"
        return f"MemoryPool(device={self.device}, {state})"


_default_pools: dict[int, MemoryPool] = {}
_default_lock = threading.Lock()


def default_pool(device: int = 0) -> MemoryPool:
    """The pool eagle's device arrays use on ``device`` (created on first use)."""
    pool = _default_pools.get(device)
    if pool is None or pool._handle is None:
        with _default_lock:
            pool = _default_pools.get(device)
            if pool is None or pool._handle is None:
                pool = _default_pools[device] = MemoryPool(device)
    return pool


def _free_async(ptr: int, stream_ptr: int) -> None:
    """``cudaFreeAsync`` on a stream no capture records, with this thread's capture mode
    relaxed for the call: CUDA counts a free as potentially unsafe, so under a capture in
    global mode (any thread's, torch's default) or this thread's own it would invalidate
    that capture, though the free orders nothing the capture records."""
    modes = runtime().cudaStreamCaptureMode
    previous = cudart.cudaThreadExchangeStreamCaptureMode(modes.cudaStreamCaptureModeRelaxed)
    try:
        cudart.cudaFreeAsync(ptr, stream_ptr)
    finally:
        cudart.cudaThreadExchangeStreamCaptureMode(previous)


def _refuse_outside_capture(stream_ptr: int) -> None:
    """Refuse an allocation on ``stream_ptr``, which no capture records, while an eagle
    capture makes CUDA refuse this thread's unsafe calls: CUDA would fail the allocation
    and invalidate that capture. (An allocation on a captured stream is recorded.)"""
    capturing = refusing_capture()
    if capturing is not None and not is_capturing(stream_ptr):
        raise EagleRuntimeError(
            f"cannot allocate device memory on stream {stream_ptr:#x} while eagle captures "
            f"stream {capturing:#x} (this thread's 'thread_local' capture, or any thread's "
            "'global' one): CUDA refuses it and would invalidate the capture. Allocate and "
            "bind before the capture (a plan bound, or run once, on the captured stream is "
            "ready), enqueue the work on the captured stream (with stream: ...), or capture "
            "in 'relaxed' mode"
        )
