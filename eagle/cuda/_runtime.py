"""The one checked path into ``cuda.bindings``.

Every CUDA runtime, driver or NVRTC call eagle makes goes through :func:`call`,
:func:`dcall` or :func:`ncall`: a non-zero status raises :class:`CudaError`
naming the call and the status; a missing driver, library or device raises
:class:`CudaUnavailable`. The bindings themselves are imported on first use,
so importing eagle never loads a driver.
"""

from __future__ import annotations

import importlib
import threading
import weakref
from types import ModuleType
from typing import Any

from eagle.errors import EagleRuntimeError

__all__ = [
    "CudaDriverTooOld",
    "CudaError",
    "CudaUnavailable",
    "call",
    "dcall",
    "ensure_device",
    "finalizer",
    "is_available",
    "ncall",
    "raise_status",
]


class CudaError(EagleRuntimeError):
    """A CUDA call returned a non-zero status.

    Args:
        call: the name of the CUDA function that failed.
        status: the status name, e.g. ``"cudaErrorStreamCaptureInvalidated"``.
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


def _invoke(kind: str, name: str, args: tuple) -> Any:
    function = getattr(_bindings(kind), name)
    try:
        result = function(*args)
    except (OSError, RuntimeError) as exc:
        # cuda.pathfinder raises when libcuda / libnvrtc cannot be found at all.
        raise CudaUnavailable(name, type(exc).__name__, str(exc)) from exc
    if not isinstance(result, tuple):
        result = (result,)
    status, values = result[0], result[1:]
    if int(status) != 0:
        raise_status(kind, name, status)
    if not values:
        return None
    return values[0] if len(values) == 1 else values


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
    error = CudaUnavailable if status_name in _UNAVAILABLE_STATUSES else CudaError
    raise error(name, status_name, _describe(kind, status))


def _describe(kind: str, status: Any) -> str:
    try:
        if kind == "runtime":
            _, text = _bindings("runtime").cudaGetErrorString(status)
        elif kind == "driver":
            _, text = _bindings("driver").cuGetErrorString(status)
        else:
            _, text = _bindings("nvrtc").nvrtcGetErrorString(status)
    except Exception:
        return ""
    return text.decode() if isinstance(text, bytes) else str(text or "")


def call(name: str, *args: Any) -> Any:
    """Call ``cuda.bindings.runtime.<name>(*args)`` and return its values.

    The status is checked; one value is returned bare, several as a tuple,
    none as ``None``.
    """
    return _invoke("runtime", name, args)


def dcall(name: str, *args: Any) -> Any:
    """Like :func:`call`, for ``cuda.bindings.driver``."""
    return _invoke("driver", name, args)


def ncall(name: str, *args: Any) -> Any:
    """Like :func:`call`, for ``cuda.bindings.nvrtc``."""
    return _invoke("nvrtc", name, args)


def runtime() -> ModuleType:
    """The ``cuda.bindings.runtime`` module (for its enums and structs)."""
    return _bindings("runtime")


def driver() -> ModuleType:
    """The ``cuda.bindings.driver`` module (for its enums and structs)."""
    return _bindings("driver")


def nvrtc() -> ModuleType:
    """The ``cuda.bindings.nvrtc`` module."""
    return _bindings("nvrtc")


def ensure_device(device: int = 0) -> None:
    """Make ``device`` current on this thread, initialising CUDA on first use.

    Raises:
        CudaUnavailable: no driver, or no such device.
    """
    if device in _ready_devices:
        call("cudaSetDevice", device)
        return
    with _lock:
        _check_driver()
        count = call("cudaGetDeviceCount")
        if not 0 <= device < count:
            raise CudaUnavailable(
                "cudaSetDevice", "cudaErrorInvalidDevice", f"device {device} of {count} present"
            )
        call("cudaSetDevice", device)
        call("cudaFree", 0)  # create the primary context so driver calls see it
        dcall("cuInit", 0)
        _ready_devices.add(device)


def _check_driver() -> None:
    found = int(call("cudaDriverGetVersion"))
    if found == 0:
        raise CudaUnavailable(
            "cudaDriverGetVersion", "cudaErrorNoDevice", "no NVIDIA driver is installed"
        )
    if found < REQUIRED_DRIVER:
        raise CudaDriverTooOld(found)


def is_available() -> bool:
    """True when a CUDA driver and at least one device are usable; never raises."""
    try:
        return call("cudaGetDeviceCount") > 0
    except Exception:
        return False


def finalizer(owner: object, destroy: str, handle: Any) -> weakref.finalize:
    """Call the runtime's ``destroy`` on ``handle`` once ``owner`` is garbage-collected or
    the returned finalizer is called, whichever comes first, and never at interpreter exit.

    The finalizer holds only the raw handle, so an object whose ``__init__`` failed
    before registering one has nothing to undo.
    """
    done = weakref.finalize(owner, call, destroy, handle)
    done.atexit = False
    return done
