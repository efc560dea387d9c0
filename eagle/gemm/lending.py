"""Lending a warmed cuBLAS handle to a capture of a stream that has none.

eagle makes one :class:`~eagle.gemm.CublasCaptureHandle` per stream, and makes
and warms it outside any capture (:func:`~eagle.gemm.handles.stream_handle`).
A capture on a stream eagle never saw (the stream ``torch.cuda.graph`` captures
on, a CUDA-graph tree's under ``torch.compile(mode="reduce-overhead")``, a CuPy
stream between ``begin_capture`` and ``end_capture``) can make no handle, so
:func:`record_lent` records there the products of a handle of the same device
that warmed them (:func:`~eagle.gemm.handles.warmed_handle` finds one).

The lent handle is pointed at the captured stream with a workspace of its own,
allocated in the capture before the products and freed in it after them, and
then pointed back (its fp8 products, on cuBLASLt, take the stream and workspace
with each call, and follow the handle). Two facts make that legal and race-free:
setting a cuBLAS handle's stream and workspace are host calls, allowed during a
capture (setting the stream resets the workspace, so the workspace is set after
it); and an
allocation on the captured stream from eagle's pool, with its free on the same
stream in the same capture, records an allocation node and a free node, so the
graph owns that memory and each replay has it to itself, while work already
queued on the handle's own stream keeps the handle's own workspace. The
handle's lock keeps every other thread's product off the handle meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence

from eagle.cuda.graph import record_use
from eagle.cuda.loops import in_loop_body
from eagle.cuda.memory import default_pool
from eagle.gemm.capture import WORKSPACE_BYTES, BoundGemm, CublasCaptureHandle
from eagle.gemm.errors import CaptureInProgress, NotCapturable

__all__ = ["record_lent"]


def record_lent(
    handle: CublasCaptureHandle, stream_ptr: int, products: Sequence[BoundGemm]
) -> None:
    """Enqueue ``products``, bound on ``handle``, on another stream of its device, with a
    workspace of their own.

    Under the handle's lock, the handle is pointed at ``stream_ptr`` with
    :data:`~eagle.gemm.capture.WORKSPACE_BYTES` allocated on that stream before the
    products and freed on it after them (:meth:`~eagle.cuda.MemoryPool.scoped`), then
    pointed back at its own stream and workspace, whatever happens. Inside a capture of
    ``stream_ptr`` that records an allocation node, the products and a free node: each
    replay of the graph has the workspace to itself, and no other stream's work shares
    it. Nothing waits. A capture eagle runs keeps the products' operands alive.

    Args:
        handle: a live handle that warmed every product
            (:meth:`~eagle.gemm.CublasCaptureHandle.warm`).
        stream_ptr: a raw stream on the handle's device (not asked: a capturing stream
            does not name its device).
        products: from :meth:`~eagle.gemm.CublasCaptureHandle.bind` on ``handle``.

    Raises:
        GemmCaptureUnavailable: the handle was destroyed; a product was bound on another
            handle or never warmed; or eagle captures ``stream_ptr`` into the body of a
            device-side loop or branch, where CUDA refuses memory nodes. Nothing is
            enqueued then.
    """
    with handle._lock:
        handle._check_alive()
        for product in products:
            if product.handle is not handle:
                raise NotCapturable(
                    f"{product!r} was bound on another handle; record it through that one"
                )
            prepared = product._call
            if not (prepared.warm or prepared.key in handle._warmed):
                first, second, out = product._used
                a, b = (second, first) if prepared.swap else (first, second)
                handle._refuse_unwarmed(product.params, {"a": a, "b": b, "out": out})
        if in_loop_body(stream_ptr):
            raise CaptureInProgress(
                f"stream {stream_ptr:#x} is being captured into the body of a device-side "
                "loop or branch, where CUDA refuses the workspace a product on a stream "
                "without its own cuBLAS handle needs; run or bind the plan on that stream "
                "(inside `with stream:`) before the capture begins"
            )
        with default_pool(handle.device).scoped(WORKSPACE_BYTES, stream_ptr) as workspace:
            try:
                handle._point_at(stream_ptr, workspace, WORKSPACE_BYTES)
                for product in products:
                    product._call.function(*product._call.args)
            finally:
                handle._point_at(handle.stream_ptr, *handle._workspace)
    for product in products:
        record_use(stream_ptr, *product._kept)
