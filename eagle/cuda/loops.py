"""Device-side loops and branches: CUDA conditional graph nodes recorded by a capture.

:meth:`StreamCapturer.while_loop <eagle.cuda.StreamCapturer.while_loop>` and
:meth:`StreamCapturer.if_ <eagle.cuda.StreamCapturer.if_>` record the work of a
``with`` block into the body of one conditional node (CUDA 12.4+), on the
captured stream itself, so cuBLAS handles and bound plans made for that stream
stay valid. How:

1. ``cudaStreamGetCaptureInfo`` gives the graph being captured and the
   stream's current dependencies; ``cudaGraphConditionalHandleCreate`` makes
   the condition on that graph and ``cudaGraphAddNode`` adds the conditional
   node after those dependencies (for ``if``, and for a ``while`` inside
   another body, after a kernel of eagle's that sets the condition first).
2. The outer capture ends (the graph stays as it is) and
   ``cudaStreamBeginCaptureToGraph`` captures the same stream into the node's
   body graph; the block runs; for ``while`` eagle appends its kernel, which
   reads the flag and calls ``cudaGraphSetConditional``; the body capture ends.
3. ``cudaStreamBeginCaptureToGraph`` resumes the outer capture with the
   conditional node as its only dependency, so what follows runs after the loop.

eagle's bookkeeping for the capture (what the graph keeps alive) stays open
throughout, so everything the body records is kept by the outer graph.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, Protocol

import numpy as np

from eagle.cuda._capture_state import MODES, CaptureMode, LifetimeError, record_use
from eagle.cuda._runtime import cudart, runtime
from eagle.cuda.module import Kernel, load_kernel
from eagle.errors import EagleRuntimeError, EagleTypeError, EagleValueError

__all__ = ["FLAG_DTYPES", "MAX_GUARDED_LOOPS", "in_loop_body"]

FLAG_DTYPES = ("int32", "float32", "float64")
"""The dtypes a loop or branch flag may have; any non-zero value (NaN too) is true."""

MAX_GUARDED_LOOPS = 4096
"""How many loops with ``max_iterations`` may be alive (in live graphs) per device."""


class _Capturer(Protocol):
    """The capture a loop or branch records into (an :class:`eagle.cuda.StreamCapturer`)."""

    _open: bool  # between begin() and end()
    _stream_ptr: int  # the stream being captured
    device: int | None  # its device, once the capture began
    mode: CaptureMode


_KERNEL = "eagle_set_condition"
_ALWAYS = 3  # the kernel's dtype code for "set the condition, whatever the flag"
_SOURCE = rf"""
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);

__device__ unsigned int eagle_loop_passes[{MAX_GUARDED_LOOPS}];

extern "C" __global__ void {_KERNEL}(
    cudaGraphConditionalHandle handle, const void* flag, int dtype,
    unsigned int max_passes, unsigned int slot)
{{
    bool go;
    if (dtype == {_ALWAYS}) {{
        go = true;
    }} else if (dtype == 0) {{
        go = *(const int*)flag != 0;
    }} else if (dtype == 1) {{
        go = *(const float*)flag != 0.0f;
    }} else {{
        go = *(const double*)flag != 0.0;
    }}
    if (max_passes != 0u) {{
        unsigned int done = eagle_loop_passes[slot] + 1u;
        if (!go || done >= max_passes) {{
            go = false;
            done = 0u;  // the next launch of the graph starts counting afresh
        }}
        eagle_loop_passes[slot] = done;
    }}
    cudaGraphSetConditional(handle, go ? 1u : 0u);
}}
"""


def _source() -> str:
    """The CUDA C of eagle's condition kernel (one thread reads the flag)."""
    return _SOURCE


def _check_flag(flag: Any) -> int:
    """The dtype code of ``flag`` for the condition kernel, after checking it."""
    if not all(hasattr(flag, name) for name in ("ptr", "is_host", "device_index", "dtype")):
        raise EagleTypeError(
            f"flag must be a one-element device eagle Array ({', '.join(FLAG_DTYPES)}), not "
            f"{type(flag).__name__}; wrap a torch tensor or CuPy array with eagle.arrays.asarray"
        )
    if flag.is_host:
        raise EagleValueError(
            "flag is a host array; the device reads it between passes, so make it with "
            "eagle.arrays.zeros((1,), 'int32', device='cuda:0') or move it with .to('cuda:0')"
        )
    if flag.size != 1:
        raise EagleValueError(f"flag must hold exactly one element, not shape {tuple(flag.shape)}")
    name = np.dtype(flag.dtype).name
    if name not in FLAG_DTYPES:
        raise EagleTypeError(f"flag must be {', '.join(FLAG_DTYPES)}, not {name}")
    return FLAG_DTYPES.index(name)


def _check_max_iterations(max_iterations: Any) -> int:
    """``max_iterations`` as the kernel's ``max_passes`` (0: no guard)."""
    if max_iterations is None:
        return 0
    if not isinstance(max_iterations, int | np.integer) or isinstance(max_iterations, bool):
        raise EagleTypeError(
            f"max_iterations must be a positive int or None, not {type(max_iterations).__name__}"
        )
    if not 1 <= max_iterations < 2**32:
        raise EagleValueError(
            f"max_iterations must be between 1 and 2**32 - 1, not {max_iterations}"
        )
    return int(max_iterations)


class _PassCounter:
    """One slot of the pass counters in the condition kernel's module, held by a graph."""

    def __init__(self, device: int) -> None:
        with _slots_lock:
            free = _free_slots.setdefault(device, list(range(MAX_GUARDED_LOOPS - 1, -1, -1)))
            if not free:
                raise EagleRuntimeError(
                    f"{MAX_GUARDED_LOOPS} loops with max_iterations are alive on cuda:{device}; "
                    f"destroy the graphs you no longer need"
                )
            self.slot = free.pop()
        weakref.finalize(self, _release_slot, device, self.slot)


_free_slots: dict[int, list[int]] = {}
_slots_lock = threading.Lock()


def _release_slot(device: int, slot: int) -> None:
    with _slots_lock:
        _free_slots[device].append(slot)


@contextmanager
def _record_conditional(
    capturer: _Capturer, kind: str, flag: Any, max_iterations: int | None = None
) -> Iterator[None]:
    """Record the block into a ``"while"`` or ``"if"`` node of ``capturer``'s capture.

    The implementation of :meth:`StreamCapturer.while_loop` and
    :meth:`StreamCapturer.if_`; see those for the rules. If the block raises,
    the node (and, for ``if``, the kernel that sets its condition) is removed
    again and the outer capture resumes where it was before the block.
    """
    code = _check_flag(flag)
    max_passes = _check_max_iterations(max_iterations)
    if not capturer._open:
        raise LifetimeError(
            f"{kind} needs an open capture: use it inside `with StreamCapturer(stream) as cap:` "
            f"(or between cap.begin() and cap.end())"
        )
    stream = capturer._stream_ptr
    device = capturer.device
    assert device is not None  # set by begin()
    if flag.device_index != device:
        raise EagleValueError(
            f"flag is on cuda:{flag.device_index}, but the captured stream is on cuda:{device}"
        )
    mode = getattr(runtime().cudaStreamCaptureMode, MODES[capturer.mode])
    kernel = _condition_kernel(stream, mode, device)
    graph, before, before_edges = _capture_point(stream)
    while_ = kind == "while"
    handle = cudart.cudaGraphConditionalHandleCreate(
        graph,
        1 if while_ else 0,  # a while loop's first pass runs unconditionally
        int(runtime().cudaGraphConditionalHandleFlags.cudaGraphCondAssignDefault),
    )
    counter = _PassCounter(device) if max_passes else None
    args = [np.uint64(int(handle)), flag, np.int32(code), np.uint32(max_passes)]
    args.append(np.uint32(counter.slot if counter is not None else 0))
    # An if reads the flag before its node. A while nested in another body sets its
    # condition there too: whether the default is applied again on every pass of the
    # enclosing loop is not promised, and the first pass must run.
    prelude = not while_ or bool(_depth.get(stream))
    if prelude:
        always = [args[0], flag, np.int32(_ALWAYS), np.uint32(0), np.uint32(0)]
        setting = always if while_ else args
        kernel.launch(1, 1, setting, stream)
    graph, deps, edges = _capture_point(stream)
    node, body = _add_node(graph, deps, edges, handle, while_)
    added = [node, *deps] if prelude else [node]  # deps: the kernel just launched
    cudart.cudaStreamEndCapture(stream)
    resume: tuple[list[Any], list[Any] | None] = ([node], None)
    try:
        cudart.cudaStreamBeginCaptureToGraph(stream, body, None, None, 0, mode)
        _depth[stream] = _depth.get(stream, 0) + 1
        try:
            yield
            if while_:
                kernel.launch(1, 1, args, stream)  # the last node of every pass
            if counter is not None:
                record_use(stream, counter)  # the graph holds the slot until it is destroyed
        except BaseException:
            with suppress(Exception):  # the block's error is the one worth reporting
                cudart.cudaStreamEndCapture(stream)
            raise
        finally:
            _depth[stream] -= 1
            if not _depth[stream]:
                del _depth[stream]
        cudart.cudaStreamEndCapture(stream)
    except BaseException:
        resume = (before, before_edges)
        with suppress(Exception):
            for added_node in added:
                cudart.cudaGraphDestroyNode(added_node)
        raise
    finally:
        _resume(stream, graph, *resume, mode)


_depth: dict[int, int] = {}  # stream -> how many bodies its capture is inside


def in_loop_body(stream_ptr: int) -> bool:
    """True while eagle captures ``stream_ptr`` into the body of a loop or branch, where
    CUDA refuses graph memory allocation and free nodes."""
    return bool(_depth.get(stream_ptr))


def _capture_point(stream: int) -> tuple[Any, list[Any], list[Any] | None]:
    """The graph ``stream`` is capturing into, its dependencies and their edge data."""
    rt = runtime()
    status, _, graph, deps, edges, count = cudart.cudaStreamGetCaptureInfo(stream)
    if status != rt.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive:
        raise LifetimeError(
            f"stream {stream:#x} is not capturing (status {getattr(status, 'name', status)}); "
            f"an illegal call inside the capture may have invalidated it"
        )
    nodes = [rt.cudaGraphNode_t(int(node)) for node in list(deps or [])[:count]]
    kept_edges = None
    if any(e.from_port or e.to_port or int(e.type) for e in list(edges or [])[:count]):
        kept_edges = []
        for e in list(edges)[:count]:
            copy = rt.cudaGraphEdgeData()
            copy.from_port, copy.to_port, copy.type = e.from_port, e.to_port, e.type
            kept_edges.append(copy)
    return graph, nodes, kept_edges


def _add_node(
    graph: Any, deps: list[Any], edges: list[Any] | None, handle: Any, while_: bool
) -> tuple[Any, Any]:
    """Add the conditional node after ``deps``; return it and its body graph."""
    rt = runtime()
    params = rt.cudaGraphNodeParams()
    params.type = rt.cudaGraphNodeType.cudaGraphNodeTypeConditional
    params.conditional.handle = handle
    kinds = rt.cudaGraphConditionalNodeType
    params.conditional.type = kinds.cudaGraphCondTypeWhile if while_ else kinds.cudaGraphCondTypeIf
    params.conditional.size = 1
    node = cudart.cudaGraphAddNode(graph, deps, edges, len(deps), params)
    return node, params.conditional.phGraph_out[0]


def _resume(stream: int, graph: Any, deps: list[Any], edges: list[Any] | None, mode: Any) -> None:
    """Capture ``stream`` into ``graph`` again, after ``deps``.

    If that fails, nothing owns the graph any more: it is destroyed and the
    error raised (eagle's capture then ends with an error).
    """
    try:
        cudart.cudaStreamBeginCaptureToGraph(stream, graph, deps, edges, len(deps), mode)
    except Exception:
        with suppress(Exception):
            cudart.cudaGraphDestroy(graph)
        raise


def _condition_kernel(stream: int, mode: Any, device: int) -> Kernel:
    """eagle's condition kernel on ``device``, loaded on first use.

    Loading a module is refused while this thread captures, so the first use on
    a device loads it with the stream's capture briefly ended and this thread's
    capture mode relaxed (another capture open elsewhere does not refuse it).
    """
    kernel = _kernels.get(device)
    if kernel is not None:
        return kernel
    graph, deps, edges = _capture_point(stream)
    cudart.cudaStreamEndCapture(stream)
    try:
        with _relaxed():
            kernel = _kernels[device] = load_kernel(_source(), _KERNEL, device=device)
    finally:
        _resume(stream, graph, deps, edges, mode)
    return kernel


_kernels: dict[int, Kernel] = {}


@contextmanager
def _relaxed() -> Iterator[None]:
    modes = runtime().cudaStreamCaptureMode
    previous = cudart.cudaThreadExchangeStreamCaptureMode(modes.cudaStreamCaptureModeRelaxed)
    try:
        yield
    finally:
        cudart.cudaThreadExchangeStreamCaptureMode(previous)
