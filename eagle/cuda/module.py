"""Compile CUDA C with NVRTC, load it, and launch its kernels on a stream.

:func:`compile_cuda` needs only NVRTC (no GPU), so CI can compile every
kernel for ``sm_90``. Compiled images are cached in the process and on disk
(``$EAGLE_CACHE_DIR``, else ``$XDG_CACHE_HOME/eagle``, else ``~/.cache/eagle``),
keyed by source, kernel name, architecture, options and NVRTC version.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eagle.cuda._runtime import CudaError, call, dcall, ensure_device, ncall, nvrtc, runtime
from eagle.cuda.graph import record_use
from eagle.cuda.stream import Stream, as_stream_ptr

__all__ = ["CompileError", "Kernel", "PackedArgs", "compile_cuda", "device_arch", "load_kernel"]


class CompileError(CudaError):
    """NVRTC rejected the source; the message holds its log."""


_CTYPES = {
    np.dtype(np.float32): ctypes.c_float,
    np.dtype(np.float64): ctypes.c_double,
    np.dtype(np.int32): ctypes.c_int32,
    np.dtype(np.int64): ctypes.c_int64,
    np.dtype(np.uint32): ctypes.c_uint32,
    np.dtype(np.uint64): ctypes.c_uint64,
}

_images: dict[str, bytes] = {}
_kernels: dict[tuple[str, str, int], Kernel] = {}
_lock = threading.Lock()


def device_arch(device: int = 0) -> str:
    """The ``sm_XY`` architecture of ``device``."""
    ensure_device(device)
    attr = runtime().cudaDeviceAttr
    major = call("cudaDeviceGetAttribute", attr.cudaDevAttrComputeCapabilityMajor, device)
    minor = call("cudaDeviceGetAttribute", attr.cudaDevAttrComputeCapabilityMinor, device)
    return f"sm_{major}{minor}"


def _nvrtc_version() -> str:
    major, minor = ncall("nvrtcVersion")
    return f"{major}.{minor}"


def _cache_dir() -> Path:
    root = os.environ.get("EAGLE_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "eagle"


def compile_cuda(
    source: str, *, name: str, arch: str = "sm_90", options: Sequence[str] = ()
) -> bytes:
    """Compile ``source`` to a cubin for ``arch`` with NVRTC and return it.

    Args:
        source: CUDA C source holding ``extern "C" __global__`` function(s).
        name: a name for the program (used in NVRTC's messages).
        arch: target architecture, ``"sm_90"`` for instance.
        options: extra NVRTC options.

    Raises:
        CompileError: NVRTC rejected the source (the message holds its log).
        CudaUnavailable: NVRTC is not installed.
    """
    opts = [f"--gpu-architecture={arch}", "--std=c++17", *options]
    key = hashlib.sha256("\0".join([source, *opts, _nvrtc_version()]).encode()).hexdigest()
    image = _images.get(key)
    if image is not None:
        return image
    path = _cache_dir() / f"{key}.cubin"
    if path.is_file():
        image = path.read_bytes()
    else:
        image = _nvrtc_compile(source, name, opts)
        _store(path, image)
    _images[key] = image
    return image


def _nvrtc_compile(source: str, name: str, opts: list[str]) -> bytes:
    program = ncall("nvrtcCreateProgram", source.encode(), f"{name}.cu".encode(), 0, [], [])
    try:
        status = nvrtc().nvrtcCompileProgram(program, len(opts), [o.encode() for o in opts])[0]
        if int(status) != 0:
            size = ncall("nvrtcGetProgramLogSize", program)
            log = b" " * size
            ncall("nvrtcGetProgramLog", program, log)
            raise CompileError(
                "nvrtcCompileProgram", status.name, f"{name}:\n{log.decode(errors='replace')}"
            )
        size = ncall("nvrtcGetCUBINSize", program)
        image = b" " * size
        ncall("nvrtcGetCUBIN", program, image)
        return image
    finally:
        ncall("nvrtcDestroyProgram", program)


def _store(path: Path, image: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(image)
        os.replace(tmp, path)
    except OSError:
        pass  # the disk cache is an optimisation; an unwritable one is not an error


def load_kernel(source: str, name: str, *, device: int = 0) -> Kernel:
    """Compile ``source`` for ``device`` (cached), load it, and return kernel ``name``.

    Raises:
        CompileError: NVRTC rejected the source.
        CudaError: the image has no kernel called ``name``.
    """
    key = (source, name, device)
    kernel = _kernels.get(key)
    if kernel is None:
        with _lock:
            kernel = _kernels.get(key)
            if kernel is None:
                image = compile_cuda(source, name=name, arch=device_arch(device))
                ensure_device(device)
                module = dcall("cuModuleLoadData", image)
                function = dcall("cuModuleGetFunction", module, name.encode())
                kernel = _kernels[key] = Kernel(name, module, function, device)
    return kernel


class PackedArgs:
    """Kernel arguments packed once into the ``void**`` array a launch reads.

    Each argument is a numpy scalar (its dtype picks the C type), a ctypes
    value or structure (passed by value), or an object with an int ``ptr``
    attribute (an eagle Array: its address).

    Args:
        args: the kernel's arguments, in order.
        device: when given, every array argument must live on this device.

    Raises:
        TypeError: an argument has no C type.
        ValueError: an array argument is on the host or another device.
    """

    def __init__(self, args: Sequence[Any], device: int | None = None) -> None:
        self.values: list[Any] = []
        self.keep: list[Any] = []
        for index, arg in enumerate(args):
            if device is not None and hasattr(arg, "device_index"):
                _check_device(arg, index, device)
            self.values.append(_to_ctype(arg, index))
            if hasattr(arg, "ptr"):
                self.keep.append(arg)
        self.array = (ctypes.c_void_p * max(1, len(self.values)))(
            *[ctypes.addressof(v) for v in self.values]
        )
        self.address = ctypes.addressof(self.array)


def _check_device(arg: Any, index: int, device: int) -> None:
    if arg.device_index != device:
        where = "the host" if arg.device_index is None else f"cuda:{arg.device_index}"
        raise ValueError(
            f"kernel argument {index} is an array on {where}, but the kernel runs on "
            f"cuda:{device}; move it with arrays.asarray(x, device='cuda:{device}')"
        )


def _to_ctype(arg: Any, index: int) -> Any:
    if isinstance(arg, ctypes._SimpleCData | ctypes.Structure):
        return arg
    if isinstance(arg, np.generic):
        ctype = _CTYPES.get(arg.dtype)
        if ctype is None:
            raise TypeError(f"kernel argument {index}: unsupported dtype {arg.dtype}")
        return ctype(arg.item())
    ptr = getattr(arg, "ptr", None)
    if isinstance(ptr, int):
        return ctypes.c_void_p(ptr)
    raise TypeError(
        f"kernel argument {index}: expected a numpy scalar, a ctypes value or an array "
        f"with .ptr, not {type(arg).__name__} (a bare Python number has no C type)"
    )


class Kernel:
    """One loaded ``__global__`` function."""

    def __init__(self, name: str, module: Any, function: Any, device: int) -> None:
        self.name = name
        self.device = device
        self._module = module
        self._function = function

    def launch(
        self,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...],
        args: Sequence[Any] | PackedArgs,
        stream: Stream | int | None = None,
        shared_mem: int = 0,
    ) -> None:
        """Enqueue one launch on ``stream`` (eagle's current stream by default).

        Only enqueues, so it is legal inside a capture; arrays among ``args``
        are kept alive by a graph that captures the launch.

        Args:
            grid: blocks per grid, an int or up to three ints.
            block: threads per block, an int or up to three ints.
            args: the kernel's arguments (see :class:`~eagle.cuda.module.PackedArgs`), or a
                :class:`~eagle.cuda.module.PackedArgs` packed once for many launches.
            stream: a :class:`Stream`, a raw pointer, or None.
            shared_mem: bytes of dynamic shared memory per block.

        Raises:
            TypeError: an argument has no C type.
            ValueError: bad launch dimensions, or an array argument on the host
                or another device.
            CudaError: the launch was refused.
        """
        packed = args if isinstance(args, PackedArgs) else PackedArgs(args, self.device)
        stream_ptr = as_stream_ptr(stream, self.device)
        gx, gy, gz = _dim3(grid)
        bx, by, bz = _dim3(block)
        dcall(
            "cuLaunchKernel",
            self._function,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            shared_mem,
            stream_ptr,
            packed.address,
            0,
        )
        if packed.keep:
            record_use(stream_ptr, self, packed, *packed.keep)


def _dim3(value: int | tuple[int, ...]) -> tuple[int, int, int]:
    if type(value) is int and value >= 1:  # the common case, on every launch
        return (value, 1, 1)
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(int(d) < 1 for d in dims):
        raise ValueError(f"launch dimensions must be 1 to 3 positive ints, not {value!r}")
    return (*(int(d) for d in dims), *(1,) * (3 - len(dims)))  # type: ignore[return-value]
