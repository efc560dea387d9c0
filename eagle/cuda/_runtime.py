"""The one checked path into ``cuda.bindings``.

Every CUDA runtime, driver or NVRTC call eagle makes goes by attribute through
:data:`cudart`, :data:`cudadrv` or :data:`nvrtc` (``cudart.cudaStreamSynchronize(ptr)``):
a non-zero status raises :class:`CudaError` naming the call and the status; a
missing driver, library or device raises :class:`CudaUnavailable`. The names
eagle calls are declared once (:class:`RuntimeCalls`, :class:`DriverCalls`,
:class:`NvrtcCalls`), so a type checker catches a misspelt call and a test
checks each name against the bindings. The bindings themselves are imported on
first use, so importing eagle never loads a driver. Their enums and structs are
read from :func:`runtime` and :func:`driver`.
"""

from __future__ import annotations

import importlib
import threading
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol, cast

from eagle.errors import EagleRuntimeError

__all__ = [
    "CudaDriverTooOld",
    "CudaError",
    "CudaUnavailable",
    "DriverCalls",
    "NvrtcCalls",
    "RuntimeCalls",
    "cudadrv",
    "cudart",
    "driver",
    "ensure_device",
    "finalizer",
    "is_available",
    "nvrtc",
    "raise_status",
    "runtime",
]


class CudaError(EagleRuntimeError):
    """A CUDA call (a cuBLAS or cuBLASLt one too) returned a non-zero status.

    Args:
        call: the name of the CUDA function that failed.
        status: the status name, e.g. ``"cudaErrorStreamCaptureInvalidated"`` or
            ``"CUBLAS_STATUS_INVALID_VALUE"``.
        detail: CUDA's description of the status, or other context.
    """

    def __init__(self, call: str, status: str, detail: str = "") -> None:
        self.call = call
        self.status = status
        message = f"{call} failed with {status}"
        if detail:
            message += f": {detail}"
        super().__init__(message)


class CudaUnavailable(CudaError):
    """No CUDA driver, library or device is usable on this machine."""


REQUIRED_DRIVER = 13000
"""The lowest ``cudaDriverGetVersion`` eagle runs on: a CUDA 13 driver (580 or newer)."""


class CudaDriverTooOld(CudaUnavailable):
    """The installed NVIDIA driver is older than the CUDA 13 driver eagle needs.

    Attributes:
        found: the driver's CUDA version as ``cudaDriverGetVersion`` reports it
            (``12040`` for CUDA 12.4).
    """

    def __init__(self, found: int) -> None:
        self.found = found
        super().__init__(
            "cudaDriverGetVersion",
            "cudaErrorInsufficientDriver",
            f"the NVIDIA driver supports CUDA {found // 1000}.{found % 1000 // 10}, but eagle "
            f"needs CUDA {REQUIRED_DRIVER // 1000}.0 (driver 580 or newer); update the driver",
        )


_UNAVAILABLE_STATUSES = frozenset(
    {
        "cudaErrorInsufficientDriver",
        "cudaErrorNoDevice",
        "cudaErrorInvalidDevice",
        "cudaErrorDevicesUnavailable",
        "cudaErrorInitializationError",
        "cudaErrorCallRequiresNewerDriver",
        "cudaErrorSystemDriverMismatch",
        "CUDA_ERROR_NO_DEVICE",
        "CUDA_ERROR_INVALID_DEVICE",
        "CUDA_ERROR_NOT_INITIALIZED",
        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    }
)

_modules: dict[str, ModuleType] = {}
_lock = threading.Lock()
_ready_devices: set[int] = set()


def _bindings(name: str) -> ModuleType:
    module = _modules.get(name)
    if module is None:
        try:
            module = importlib.import_module(f"cuda.bindings.{name}")
        except ImportError as exc:
            raise CudaUnavailable(
                f"import cuda.bindings.{name}", "ImportError", f"{exc}; install cuda-python"
            ) from exc
        _modules[name] = module
    return module


def _status_name(status: Any) -> str:
    return getattr(status, "name", str(status))


#: what to install when a binding module's library cannot be loaded, by binding kind
_MISSING = {
    "nvrtc": "NVRTC compiles CUDA C with or without a GPU; install its wheel with "
    '`python -m pip install ".[cuda]"` (nvidia-cuda-nvrtc 13) or a CUDA 13 toolkit',
    "driver": "device work needs an NVIDIA GPU with a CUDA 13 driver (580 or newer); "
    "without one, pass numpy arrays to run on the host",
    "runtime": "device work needs an NVIDIA GPU with a CUDA 13 driver (580 or newer); "
    "without one, pass numpy arrays to run on the host",
}


def _checked(kind: str, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (``cuda.bindings.<kind>.<name>``) with its status checked: one value
    is returned bare, several as a tuple, none as ``None``."""

    def checked(*args: Any) -> Any:
        try:
            result = function(*args)
        except (OSError, RuntimeError) as exc:
            # cuda.pathfinder raises when libcuda / libnvrtc cannot be found at all.
            raise CudaUnavailable(name, type(exc).__name__, f"{exc}; {_MISSING[kind]}") from exc
        if not isinstance(result, tuple):
            result = (result,)
        status = result[0]
        if int(status) != 0:
            raise_status(kind, name, status)
        if len(result) == 2:
            return result[1]
        return result[1:] or None

    checked.__name__ = checked.__qualname__ = name
    checked.__doc__ = f"``cuda.bindings.{kind}.{name}``, its status checked."
    return checked


class _Checked:
    """The functions of one binding module, each called through :func:`_checked`.

    A function is looked up on first use (importing the bindings then) and kept,
    so later calls cost one attribute read; a name the module lacks, or one of
    its types, is an AttributeError naming it.
    """

    __slots__ = ("__dict__", "_kind")  # the functions are kept in __dict__, and only they

    def __init__(self, kind: str) -> None:
        self._kind = kind

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        function = getattr(_bindings(self._kind), name, None)
        if function is None or isinstance(function, type) or not callable(function):
            raise AttributeError(
                f"cuda.bindings.{self._kind} has no function {name!r}; its enums and structs "
                f"are read from eagle.cuda._runtime.{self._kind}()"
            )
        checked = self.__dict__[name] = _checked(self._kind, name, function)
        return checked

    def __repr__(self) -> str:
        return f"<checked cuda.bindings.{self._kind}>"


class RuntimeCalls(Protocol):
    """The ``cuda.bindings.runtime`` functions eagle (its tests and benchmarks too) calls,
    through :data:`cudart`."""

    def cudaDeviceGetAttribute(self, *args: Any) -> Any: ...
    def cudaDeviceSynchronize(self, *args: Any) -> Any: ...
    def cudaDriverGetVersion(self, *args: Any) -> Any: ...
    def cudaEventCreateWithFlags(self, *args: Any) -> Any: ...
    def cudaEventDestroy(self, *args: Any) -> Any: ...
    def cudaEventElapsedTime(self, *args: Any) -> Any: ...
    def cudaEventRecord(self, *args: Any) -> Any: ...
    def cudaEventSynchronize(self, *args: Any) -> Any: ...
    def cudaFree(self, *args: Any) -> Any: ...
    def cudaFreeAsync(self, *args: Any) -> Any: ...
    def cudaFreeHost(self, *args: Any) -> Any: ...
    def cudaGetDevice(self, *args: Any) -> Any: ...
    def cudaGetDeviceCount(self, *args: Any) -> Any: ...
    def cudaGetDeviceProperties(self, *args: Any) -> Any: ...
    def cudaGraphAddNode(self, *args: Any) -> Any: ...
    def cudaGraphConditionalHandleCreate(self, *args: Any) -> Any: ...
    def cudaGraphDestroy(self, *args: Any) -> Any: ...
    def cudaGraphDestroyNode(self, *args: Any) -> Any: ...
    def cudaGraphExecDestroy(self, *args: Any) -> Any: ...
    def cudaGraphExecMemsetNodeSetParams(self, *args: Any) -> Any: ...
    def cudaGraphGetEdges(self, *args: Any) -> Any: ...
    def cudaGraphGetNodes(self, *args: Any) -> Any: ...
    def cudaGraphInstantiate(self, *args: Any) -> Any: ...
    def cudaGraphLaunch(self, *args: Any) -> Any: ...
    def cudaGraphMemsetNodeGetParams(self, *args: Any) -> Any: ...
    def cudaGraphNodeGetDependencies(self, *args: Any) -> Any: ...
    def cudaGraphNodeGetType(self, *args: Any) -> Any: ...
    def cudaHostAlloc(self, *args: Any) -> Any: ...
    def cudaHostGetDevicePointer(self, *args: Any) -> Any: ...
    def cudaMalloc(self, *args: Any) -> Any: ...
    def cudaMallocFromPoolAsync(self, *args: Any) -> Any: ...
    def cudaMemGetInfo(self, *args: Any) -> Any: ...
    def cudaMemPoolCreate(self, *args: Any) -> Any: ...
    def cudaMemPoolDestroy(self, *args: Any) -> Any: ...
    def cudaMemPoolGetAttribute(self, *args: Any) -> Any: ...
    def cudaMemPoolSetAttribute(self, *args: Any) -> Any: ...
    def cudaMemPoolTrimTo(self, *args: Any) -> Any: ...
    def cudaMemcpy(self, *args: Any) -> Any: ...
    def cudaMemcpyAsync(self, *args: Any) -> Any: ...
    def cudaMemset(self, *args: Any) -> Any: ...
    def cudaPointerGetAttributes(self, *args: Any) -> Any: ...
    def cudaSetDevice(self, *args: Any) -> Any: ...
    def cudaStreamBeginCapture(self, *args: Any) -> Any: ...
    def cudaStreamBeginCaptureToGraph(self, *args: Any) -> Any: ...
    def cudaStreamCreateWithFlags(self, *args: Any) -> Any: ...
    def cudaStreamDestroy(self, *args: Any) -> Any: ...
    def cudaStreamEndCapture(self, *args: Any) -> Any: ...
    def cudaStreamGetCaptureInfo(self, *args: Any) -> Any: ...
    def cudaStreamGetDevice(self, *args: Any) -> Any: ...
    def cudaStreamIsCapturing(self, *args: Any) -> Any: ...
    def cudaStreamSynchronize(self, *args: Any) -> Any: ...
    def cudaStreamWaitEvent(self, *args: Any) -> Any: ...
    def cudaThreadExchangeStreamCaptureMode(self, *args: Any) -> Any: ...


class DriverCalls(Protocol):
    """The ``cuda.bindings.driver`` functions eagle calls, through :data:`cudadrv`."""

    def cuFuncGetParamInfo(self, *args: Any) -> Any: ...
    def cuGraphExecKernelNodeSetParams(self, *args: Any) -> Any: ...
    def cuGraphKernelNodeGetParams(self, *args: Any) -> Any: ...
    def cuInit(self, *args: Any) -> Any: ...
    def cuKernelGetFunction(self, *args: Any) -> Any: ...
    def cuLibraryGetKernel(self, *args: Any) -> Any: ...
    def cuLibraryLoadData(self, *args: Any) -> Any: ...
    def cuLibraryUnload(self, *args: Any) -> Any: ...
    def cuMemsetD16Async(self, *args: Any) -> Any: ...
    def cuMemsetD2D32Async(self, *args: Any) -> Any: ...
    def cuMemsetD32Async(self, *args: Any) -> Any: ...
    def cuMemsetD8Async(self, *args: Any) -> Any: ...
    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, *args: Any) -> Any: ...


class NvrtcCalls(Protocol):
    """The ``cuda.bindings.nvrtc`` functions eagle calls, through :data:`nvrtc`."""

    def nvrtcGetSupportedArchs(self, *args: Any) -> Any: ...
    def nvrtcVersion(self, *args: Any) -> Any: ...


cudart = cast(RuntimeCalls, _Checked("runtime"))
"""``cuda.bindings.runtime``'s functions, checked: ``cudart.cudaFree(ptr)``."""

cudadrv = cast(DriverCalls, _Checked("driver"))
"""``cuda.bindings.driver``'s functions, checked: ``cudadrv.cuInit(0)``."""

nvrtc = cast(NvrtcCalls, _Checked("nvrtc"))
"""``cuda.bindings.nvrtc``'s functions, checked: ``nvrtc.nvrtcVersion()``."""


def raise_status(kind: str, name: str, status: Any) -> None:
    """Raise the error for the non-zero ``status`` that ``name`` returned.

    Args:
        kind: ``"runtime"``, ``"driver"`` or ``"nvrtc"``: whose status it is.
        name: the call that returned it.
        status: the status enum.

    Raises:
        CudaUnavailable: the status means no usable driver or device.
        CudaError: any other status.
    """
    status_name = _status_name(status)
    if status_name in _DRIVER_STATUSES and name != "cudaDriverGetVersion":
        _check_driver(name, status_name)  # no driver, or one too old: said as eagle says it
    error = CudaUnavailable if status_name in _UNAVAILABLE_STATUSES else CudaError
    raise error(name, status_name, _describe(kind, status))


#: the statuses that may mean no driver at all: CUDA's own text then reads as if the
#: driver were too old
_DRIVER_STATUSES = frozenset({"cudaErrorInsufficientDriver", "CUDA_ERROR_NOT_INITIALIZED"})


_DESCRIBE = {
    "runtime": "cudaGetErrorString",
    "driver": "cuGetErrorString",
    "nvrtc": "nvrtcGetErrorString",
}


def _describe(kind: str, status: Any) -> str:
    try:
        _, text = getattr(_bindings(kind), _DESCRIBE[kind])(status)
    except Exception:
        return ""
    return text.decode() if isinstance(text, bytes) else str(text or "")


def runtime() -> ModuleType:
    """The ``cuda.bindings.runtime`` module (for its enums and structs)."""
    return _bindings("runtime")


def driver() -> ModuleType:
    """The ``cuda.bindings.driver`` module (for its enums and structs)."""
    return _bindings("driver")


def ensure_device(device: int = 0) -> None:
    """Make ``device`` current on this thread, initialising CUDA on first use.

    Raises:
        CudaUnavailable: no driver, or no such device.
    """
    if device in _ready_devices:
        cudart.cudaSetDevice(device)
        return
    with _lock:
        _check_driver()
        count = cudart.cudaGetDeviceCount()
        if not 0 <= device < count:
            hint = (
                f"; pass 'cuda:0' to 'cuda:{count - 1}'"
                if count > 1
                else "; pass 'cuda:0'"
                if count
                else ""
            )
            raise CudaUnavailable(
                "cudaSetDevice",
                "cudaErrorInvalidDevice",
                f"device {device} of {count} present{hint}",
            )
        cudart.cudaSetDevice(device)
        cudart.cudaFree(0)  # create the primary context so driver calls see it
        cudadrv.cuInit(0)
        _ready_devices.add(device)


def ready_devices() -> tuple[int, ...]:
    """The devices :func:`ensure_device` has initialised, in order."""
    return tuple(sorted(_ready_devices))


def _check_driver(name: str = "cudaDriverGetVersion", status: str = "cudaErrorNoDevice") -> None:
    """Raise when there is no driver or one too old, naming the call ``name`` that found
    it out and the ``status`` it returned."""
    found = int(cudart.cudaDriverGetVersion())
    if found == 0:
        raise CudaUnavailable(
            name,
            status,
            "no NVIDIA driver is installed; host work takes numpy arrays, and "
            "eagle.cuda.is_available() says whether device work can run",
        )
    if found < REQUIRED_DRIVER:
        raise CudaDriverTooOld(found)


def is_available() -> bool:
    """True when a CUDA driver and at least one device are usable; never raises."""
    try:
        return cudart.cudaGetDeviceCount() > 0
    except Exception:
        return False


def finalizer(owner: object, destroy: Callable[[Any], Any], handle: Any) -> weakref.finalize:
    """Call ``destroy`` (a checked runtime call, ``cudart.cudaEventDestroy``) on ``handle``
    once ``owner`` is garbage-collected or the returned finalizer is called, whichever
    comes first, and never at interpreter exit.

    The finalizer holds only the raw handle, so an object whose ``__init__`` failed
    before registering one has nothing to undo.
    """
    done = weakref.finalize(owner, destroy, handle)
    done.atexit = False
    return done
