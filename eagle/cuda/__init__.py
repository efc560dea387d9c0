"""eagle.cuda — thin, checked access to CUDA streams, graphs, memory and NVRTC.

Nothing here loads a driver on import; the first call that needs one does.
"""

from eagle.cuda import _release  # noqa: F401 (eagle.clear_caches gives back device resources)
from eagle.cuda._runtime import CudaDriverTooOld, CudaError, CudaUnavailable, is_available
from eagle.cuda.graph import (
    CapturedGraph,
    Graph,
    Launcher,
    LifetimeError,
    StreamCapturer,
    capture,
    is_capturing,
    record_use,
)
from eagle.cuda.memory import MemoryPool, default_pool
from eagle.cuda.module import (
    CompileError,
    Kernel,
    cache_dir,
    clear_cache,
    compile_cuda,
    load_kernel,
)
from eagle.cuda.stream import Event, Stream, as_stream_ptr, current_stream

__all__ = [
    "CapturedGraph",
    "CompileError",
    "CudaDriverTooOld",
    "CudaError",
    "CudaUnavailable",
    "Event",
    "Graph",
    "Kernel",
    "Launcher",
    "LifetimeError",
    "MemoryPool",
    "Stream",
    "StreamCapturer",
    "as_stream_ptr",
    "cache_dir",
    "capture",
    "clear_cache",
    "compile_cuda",
    "current_stream",
    "default_pool",
    "is_available",
    "is_capturing",
    "load_kernel",
    "record_use",
]
