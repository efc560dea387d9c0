"""Compile CUDA C with NVRTC, load it, and launch its kernels on a stream.

:func:`compile_cuda` compiles through ``cuda.core``'s :class:`~cuda.core.Program`
and needs only NVRTC (no GPU), so CI can compile every kernel for ``sm_90``.
The sources are what eagle is given in the process: the CUDA C hawk emits for
your kernels, or the C you pass to :func:`compile_cuda` or :func:`load_kernel`.
Compiled images are kept in the process (the most recent
:data:`MEMORY_BYTES`) and on disk, keyed by source, architecture, options and
NVRTC version. The disk cache (``$EAGLE_CACHE_DIR``, else
``$XDG_CACHE_HOME/eagle``, else ``~/.cache/eagle``; :func:`cache_dir`) is
created with mode 0700, read only while nobody but you can write it, checked
against a digest stored with each image, repaired when an image is corrupt or
fails to load, and bounded (``$EAGLE_CACHE_MAX_BYTES``, :func:`clear_cache`);
read-only caches of prebuilt images are read only when named in
``$EAGLE_CACHE_READONLY`` (``eagle/cuda/_cache.py`` says how, and the
quickstart's "Compile cache"). Loading anything you did not make is never implicit.

Compiles are logged under the ``eagle`` logger (``eagle.cuda.module``): INFO
for a compile with NVRTC (with the time it took), DEBUG for a hit in the disk
cache; a cache eagle does not trust, or an image it repairs, is a WARNING.

Kernels are loaded as context-independent library kernels, so a launch runs on
the device of its stream, whatever device is current; only the null and
default-stream handles (0, 1, 2) make the kernel's own device current first.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import logging
import re
import struct
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from eagle._cache import KeyedCache
from eagle.cuda import _cache
from eagle.cuda._cache import cache_dir, clear_cache
from eagle.cuda._capture_state import any_capture_active, record_use
from eagle.cuda._runtime import (
    CudaError,
    CudaUnavailable,
    cudadrv,
    cudart,
    driver,
    ensure_device,
    nvrtc,
    raise_status,
    runtime,
)
from eagle.cuda.stream import Stream, as_stream_ptr
from eagle.errors import EagleIndexError, EagleTypeError, EagleValueError, shown

__all__ = [
    "MEMORY_BYTES",
    "CompileError",
    "Kernel",
    "PackedArgs",
    "cache_dir",
    "clear_cache",
    "compile_cuda",
    "device_arch",
    "load_kernel",
    "multiprocessors",
]


class CompileError(CudaError):
    """NVRTC rejected the source; the message holds its log."""


MEMORY_BYTES = 64 * 1024 * 1024
"""Bytes of compiled images a process keeps in memory, the most recently used (64 MiB);
older ones are read again from the disk cache (or compiled) when next needed."""

#: load statuses of an image that is not a valid image for the device: a cached one is
#: compiled again (a fresh one failing the same way raises)
_BAD_IMAGE = frozenset(
    {"CUDA_ERROR_INVALID_IMAGE", "CUDA_ERROR_INVALID_PTX", "CUDA_ERROR_NO_BINARY_FOR_GPU"}
)

_images: OrderedDict[str, bytes] = OrderedDict()
_images_lock = threading.Lock()
#: loaded kernels, by source, name and device (a kernel a plan or graph holds stays
#: loaded when dropped from here: see Kernel)
_kernels: KeyedCache[tuple[str, str, int], Kernel] = KeyedCache("loaded kernels", 256)
_lock = threading.Lock()
#: the libraries of kernels nothing holds any more (unloaded by eagle.clear_caches)
_unused_libraries: list[Any] = []


_log = logging.getLogger(__name__)


def device_arch(device: int = 0) -> str:
    """The ``sm_XY`` architecture of ``device``."""
    ensure_device(device)
    attr = runtime().cudaDeviceAttr
    major = cudart.cudaDeviceGetAttribute(attr.cudaDevAttrComputeCapabilityMajor, device)
    minor = cudart.cudaDeviceGetAttribute(attr.cudaDevAttrComputeCapabilityMinor, device)
    return f"sm_{major}{minor}"


@functools.cache
def multiprocessors(device: int = 0) -> int:
    """The streaming multiprocessors of ``device``."""
    ensure_device(device)
    attr = runtime().cudaDeviceAttr.cudaDevAttrMultiProcessorCount
    return int(cudart.cudaDeviceGetAttribute(attr, device))


def _nvrtc_version() -> str:
    major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def compile_cuda(
    source: str, *, name: str, arch: str = "sm_90", options: Mapping[str, Any] | None = None
) -> bytes:
    """Compile ``source`` to a cubin for ``arch`` with NVRTC and return it.

    The image comes from the process's cache or the disk cache when it holds one
    for this source, ``arch``, ``options`` and NVRTC version (see the module's
    notes on what the disk cache trusts). A source compiled with header files
    (``include_path`` or ``pre_include``) is compiled every time and never cached.

    Args:
        source: CUDA C source holding ``extern "C" __global__`` function(s).
        name: a name for the program, used in NVRTC's messages only (every
            function of ``source`` is compiled; it selects none).
        arch: target architecture, ``"sm_90"`` for instance.
        options: extra :class:`cuda.core.ProgramOptions` fields, e.g.
            ``{"use_fast_math": True}`` (the language standard is C++17 unless
            given).

    Raises:
        CompileError: NVRTC rejected the source (the message holds its log).
        CudaUnavailable: NVRTC or cuda-core is not installed.
        ValueError: ``arch`` is not an architecture this NVRTC compiles for;
            ``$EAGLE_CACHE_MAX_BYTES`` is not a non-negative integer.
        TypeError: ``source`` is not a str, or ``options`` not a mapping.
    """
    if not isinstance(source, str):
        raise EagleTypeError(f"source must be CUDA C text (a str), not {type(source).__name__}")
    if options is not None and not isinstance(options, Mapping):
        raise EagleTypeError(
            f"options must be a mapping of cuda.core ProgramOptions fields, such as "
            f'{{"use_fast_math": True}}, not {type(options).__name__}'
        )
    taken = sorted({"name", "arch"} & set(options or {}))
    if taken:
        raise EagleValueError(
            f"options holds {', '.join(map(repr, taken))}: pass {' and '.join(taken)} as "
            "compile_cuda's own arguments (name=..., arch=...), not in options"
        )
    _check_arch(arch)
    return _image(source, name, arch, options)[0]


def _check_arch(arch: str) -> None:
    """Refuse an ``arch`` that NVRTC would refuse without naming it: not ``sm_<digits>``
    (an ``a`` or ``f`` suffix allowed), or not among the architectures it compiles for."""
    form = re.fullmatch(r"sm_(\d+)[af]?", arch) if isinstance(arch, str) else None
    if form is not None and int(form.group(1)) in _supported_archs():
        return
    listed = ", ".join(f"sm_{number}" for number in _supported_archs())
    raise EagleValueError(
        f"arch {shown(arch)} is not an architecture this NVRTC compiles for; pass one of "
        f"{listed} (sm_90 for an H100 or H200)"
    )


@functools.cache
def _supported_archs() -> tuple[int, ...]:
    """The compute capabilities this NVRTC compiles for, as numbers (90 for sm_90)."""
    return tuple(int(number) for number in nvrtc.nvrtcGetSupportedArchs())


#: compile options that bring in header files, whose contents no cache key sees
_FILE_OPTIONS = ("include_path", "pre_include")


def _image(
    source: str,
    name: str,
    arch: str,
    options: Mapping[str, Any] | None,
    *,
    fresh: bool = False,
) -> tuple[bytes, bool]:
    """The image of ``source`` and whether NVRTC compiled it just now: from the caches,
    or, when ``fresh`` or they hold none, compiled and stored in both (replacing the
    one they held). A source compiled with headers from files (``include_path``,
    ``pre_include``) is compiled every time and never cached: the key cannot see the
    headers' contents."""
    fields = {"std": "c++17", **(options or {}), "arch": arch}
    if any(fields.get(option) for option in _FILE_OPTIONS):
        return _compiled(source, name, arch, fields), True
    described = "\0".join(f"{key}={fields[key]!r}" for key in sorted(fields))
    key = hashlib.sha256("\0".join([source, described, _nvrtc_version()]).encode()).hexdigest()
    if not fresh:
        with _images_lock:
            image = _images.get(key)
            if image is not None:
                _images.move_to_end(key)
                return image, False
        found = _cache.read(key)
        if found is not None:
            image, path = found
            _log.debug("%s for %s: disk cache hit %s", name, arch, path)
            _remember(key, image)
            return image, False
    budget = _cache.max_bytes()  # a bad setting is refused before the compile, not after
    image = _compiled(source, name, arch, fields)
    _cache.write(key, image, budget)
    _remember(key, image)
    return image, True


def _compiled(source: str, name: str, arch: str, fields: dict[str, Any]) -> bytes:
    """``source`` compiled by NVRTC now, the time it took logged."""
    began = time.perf_counter()
    image = _nvrtc_compile(source, name, fields)
    milliseconds = (time.perf_counter() - began) * 1e3
    _log.info("compiled %s for %s with NVRTC in %.1f ms", name, arch, milliseconds)
    return image


def _remember(key: str, image: bytes) -> None:
    """Keep ``image`` in the process, dropping the least recently used beyond
    :data:`MEMORY_BYTES`."""
    with _images_lock:
        _images[key] = image
        _images.move_to_end(key)
        total = sum(map(len, _images.values()))
        while total > MEMORY_BYTES and len(_images) > 1:
            total -= len(_images.popitem(last=False)[1])


def _nvrtc_compile(source: str, name: str, fields: dict[str, Any]) -> bytes:
    try:
        from cuda.core import Program, ProgramOptions
    except ImportError as exc:
        raise CudaUnavailable(
            "import cuda.core", "ImportError", f"{exc}; install cuda-core"
        ) from exc
    try:
        chosen = ProgramOptions(name=name, **fields)
    except TypeError as exc:  # a key that is not a field
        raise EagleTypeError(
            f"options: {exc}; its keys are cuda.core ProgramOptions fields, such as "
            "use_fast_math, max_register_count or define_macro"
        ) from None
    program = Program(source, "c++", chosen)
    try:
        return bytes(program.compile("cubin").code)
    except Exception as exc:  # cuda.core's NVRTCError, which it does not export
        text = str(exc)
        status = re.search(r"NVRTC_ERROR_\w+", text)
        if status is None:
            raise
        log = text.partition("compilation log:")[2].strip("\n\0 ")
        raise CompileError(
            "nvrtcCompileProgram",
            status.group(0),
            f"{name}:\n{log or text}",
        ) from None
    finally:
        program.close()


def load_kernel(source: str, name: str, *, device: int = 0) -> Kernel:
    """Compile ``source`` for ``device`` (cached), load it, and return kernel ``name``.

    A cached image that the device refuses as invalid is compiled again and
    replaced in the cache (with a warning); a failed load leaves nothing loaded.

    Raises:
        CompileError: NVRTC rejected the source.
        CudaError: the image has no kernel called ``name``, or the device
            refused it.
    """
    key = (source, name, device)
    kernel = _kernels.get(key)
    if kernel is None:
        with _lock:
            kernel = _kernels.get(key) if key in _kernels else None
            if kernel is None:
                kernel = _kernels[key] = _load(source, name, device)
    return kernel


def _load(source: str, name: str, device: int) -> Kernel:
    arch = device_arch(device)
    image, compiled = _image(source, name, arch, None)
    ensure_device(device)
    try:
        library, handle = _library_kernel(image, name)
    except CudaError as exc:
        if compiled or exc.status not in _BAD_IMAGE:
            raise
        _log.warning(
            "the cached image of %s for %s failed to load (%s); compiling it again and "
            "replacing it",
            name,
            arch,
            exc.status,
        )
        image, _ = _image(source, name, arch, None, fresh=True)
        library, handle = _library_kernel(image, name)
    return Kernel(name, library, handle, device)


def _library_kernel(image: bytes, name: str) -> tuple[Any, Any]:
    """``image`` loaded as a library and its kernel ``name``, loaded on the current device
    now (not mid-capture); nothing stays loaded when any step fails (the driver may
    refuse an image at any of them: a cubin for another architecture loads, and only
    getting its kernel fails)."""
    library = cudadrv.cuLibraryLoadData(image, None, None, 0, None, None, 0)
    try:
        handle = cudadrv.cuLibraryGetKernel(library, name.encode())
        cudadrv.cuKernelGetFunction(handle)
    except BaseException:
        with contextlib.suppress(CudaError):
            cudadrv.cuLibraryUnload(library)
        raise
    return library, handle


def _has_unused() -> bool:
    """Whether libraries of kernels nothing holds any more wait for :func:`_unload_unused`."""
    return bool(_unused_libraries)


def _unload_unused() -> None:
    """Unload the libraries of the kernels nothing holds any more. Call it only once every
    device has finished the work launched before (a launch may still be running one).

    Raises:
        CudaError: the driver refused to unload one (the others are unloaded).
    """
    with _lock:
        libraries = list(_unused_libraries)
        _unused_libraries.clear()
    failures = []
    for library in libraries:
        try:
            cudadrv.cuLibraryUnload(library)
        except CudaError as exc:
            failures.append(exc)
    if failures:
        raise failures[0]


# -- arguments ----------------------------------------------------------------------------

_SCALARS = {
    np.dtype(np.float32): "f",
    np.dtype(np.float64): "d",
    np.dtype(np.int32): "i",
    np.dtype(np.int64): "q",
    np.dtype(np.uint32): "I",
    np.dtype(np.uint64): "Q",
}


#: one argument of a signature: its exact type, struct code, size in bytes, and the
#: expression (a format with ``{}`` for the argument) that gives its packed value
_Arg = tuple[type, str, int, str]


class _Layout:
    """Where each argument of one signature (the arguments' exact types, and how each
    is packed) lives in a parameter buffer, and a ``pack(data, args, device)`` function
    written for it.

    ``pack`` is generated once per signature in the process (:func:`_layout_of` keeps
    the layouts), so binding new arguments of a known signature generates nothing, and
    a launch spends no time deciding how to convert each argument; ``fits(args)`` says
    whether ``args`` has this signature (each argument's exact type).
    """

    def __init__(self, signature: tuple[_Arg, ...]) -> None:
        fmt, offsets, values, checks, arrays, offset = ["="], [], [], [], [], 0
        types = {f"t{index}": kind for index, (kind, *_) in enumerate(signature)}
        for index, (_, code, size, value) in enumerate(signature):
            if value.endswith(".ptr"):
                arrays.append(index)
                checks.append(
                    f"    if device is not None and a{index}.device_index != device:\n"
                    f"        check(a{index}, {index}, device)"
                )
            pad = -offset % min(size, 8)
            if pad:
                fmt.append(f"{pad}x")
            offset += pad
            offsets.append(offset)
            fmt.append(code)
            values.append(value.format(f"a{index}"))
            offset += size
        self.codes = tuple(code for _, code, _, _ in signature)
        self.arrays = tuple(arrays)
        self.struct = struct.Struct("".join(fmt))
        self.offsets = tuple(offsets)
        count = len(signature)
        names = "".join(f"a{index}, " for index in range(count))
        same = "".join(f" and type(args[{index}]) is t{index}" for index in range(count))
        source = "\n".join(
            [
                "def fits(args):",
                f"    return len(args) == {count}{same}",
                "def pack(data, args, device):",
                f"    {names}= args" if names else "    pass",
                *checks,
                "    try:",
                f"        pack_into(data, 0, {', '.join(values)})",
                "    except struct_error as exc:",
                "        raise EagleTypeError(",
                "            f'kernel arguments do not match their C types: {exc}'",
                "        )",
            ]
        )
        namespace: dict[str, Any] = {
            "pack_into": self.struct.pack_into,
            "struct_error": struct.error,
            "EagleTypeError": EagleTypeError,
            "check": _check_device,
            **types,
        }
        exec(source, namespace)  # one specialised packer per signature
        self.fits: Callable[[Sequence[Any]], bool] = namespace["fits"]
        self.pack: Callable[[Any, Sequence[Any], int | None], None] = namespace["pack"]

    def allocate(self) -> tuple[Any, Any, int]:
        """A fresh parameter buffer, its ``void*`` array and that array's address."""
        data = ctypes.create_string_buffer(max(1, self.struct.size))
        base = ctypes.addressof(data)
        pointers = (ctypes.c_void_p * max(1, len(self.offsets)))(
            *[base + offset for offset in self.offsets]
        )
        return data, pointers, ctypes.addressof(pointers)


#: the layout of each argument signature seen (the least recently used go first)
_layouts: KeyedCache[tuple[_Arg, ...], _Layout] = KeyedCache("argument layouts", 1024)


def _layout_of(args: Sequence[Any]) -> _Layout:
    """The layout of ``args``'s signature, made on first use in the process.

    Raises:
        TypeError: an argument has no C type.
    """
    signature = tuple((type(arg), *_slot(arg, index)) for index, arg in enumerate(args))
    layout = _layouts.get(signature)
    if layout is None:
        layout = _layouts[signature] = _Layout(signature)
    return layout


def _slot(arg: Any, index: int) -> tuple[str, int, str]:
    """The struct code and size of one argument, and the expression (a format with
    ``{}`` for the argument) that gives its packed value."""
    if isinstance(arg, ctypes._SimpleCData | ctypes.Structure):
        size = ctypes.sizeof(arg)
        return f"{size}s", size, "bytes({})"
    if isinstance(arg, np.generic):
        code = _SCALARS.get(arg.dtype)
        if code is None:
            raise EagleTypeError(f"kernel argument {index}: unsupported dtype {arg.dtype}")
        return code, arg.dtype.itemsize, "{}"
    if isinstance(getattr(arg, "ptr", None), int):
        return "Q", 8, "{}.ptr"
    raise EagleTypeError(
        f"kernel argument {index}: expected a numpy scalar, a ctypes value or an array "
        f"with .ptr, not {type(arg).__name__} (a bare Python number has no C type)"
    )


def _check_device(arg: Any, index: int, device: int) -> None:
    where = "the host" if arg.device_index is None else f"cuda:{arg.device_index}"
    raise EagleValueError(
        f"kernel argument {index} is an array on {where}, but the kernel runs on "
        f"cuda:{device}; move it with arrays.asarray(x, device='cuda:{device}')"
    )


class PackedArgs:
    """Kernel arguments packed once into the ``void**`` array a launch reads.

    Each argument is a numpy scalar (its dtype picks the C type), a ctypes
    value or structure (passed by value), or an object with an int ``ptr``
    attribute (an eagle Array: its address). The arrays are kept alive with it.
    A numpy scalar's slot can take a new value (:meth:`setter`).

    Args:
        args: the kernel's arguments, in order.
        device: when given, every array argument must live on this device.

    Raises:
        TypeError: an argument has no C type.
        ValueError: an array argument is on the host or another device.
    """

    __slots__ = ("_data", "_layout", "_pointers", "address", "keep")

    def __init__(self, args: Sequence[Any], device: int | None = None) -> None:
        layout = self._layout = _layout_of(args)
        self._data, self._pointers, self.address = layout.allocate()
        layout.pack(self._data, args, device)
        self.keep = tuple(args[index] for index in layout.arrays)

    def setter(self, index: int) -> Callable[[Any], None]:
        """A function that packs a new value into argument ``index`` (a numpy scalar's
        slot), converted to that slot's C type as the first one was; launches made
        after it take the new value. ``cuLaunchKernel`` copies the arguments when it is
        called, so a launch already made (or captured) keeps the old one. Setting and
        launching from several threads needs a lock around both.

        Raises:
            IndexError: there is no argument ``index``.
            TypeError: argument ``index`` is not a numpy scalar (an array's address or
                a ctypes value cannot be set).
        """
        codes = self._layout.codes
        if not 0 <= index < len(codes):
            raise EagleIndexError(f"kernel argument {index} does not exist: there are {len(codes)}")
        if codes[index] not in _SCALARS.values() or index in self._layout.arrays:
            raise EagleTypeError(
                f"kernel argument {index} was not packed from a numpy scalar; only such an "
                "argument can take a new value (pack the arguments again for others)"
            )
        pack_into = struct.Struct("=" + codes[index]).pack_into
        return functools.partial(pack_into, self._data, self._layout.offsets[index])


class _Packer:
    """A reused parameter buffer for launches with one argument signature."""

    __slots__ = ("address", "data", "layout", "lock", "pointers")

    def __init__(self, args: Sequence[Any]) -> None:
        self.layout = _layout_of(args)
        self.data, self.pointers, self.address = self.layout.allocate()
        self.lock = threading.Lock()


# -- launching ----------------------------------------------------------------------------

#: the driver's stream handle per raw pointer, made once: a handle holds only the
#: pointer's value, so one made for a stream that is gone is right for the next
#: stream given that address
_stream_handles: dict[int, Any] = {}
_STREAM_HANDLES = 256


def _stream_handle(stream_ptr: int) -> Any:
    handle = _stream_handles.get(stream_ptr)
    if handle is None:
        if len(_stream_handles) >= _STREAM_HANDLES:
            _stream_handles.clear()
        handle = _stream_handles[stream_ptr] = driver().CUstream(stream_ptr)
    return handle


class Kernel:
    """One loaded ``__global__`` function (a library kernel, valid on every device).

    Its library stays loaded while anything holds the kernel (the cache of
    loaded kernels, a bound plan, a graph that captured a launch of it); once
    nothing does, :func:`eagle.clear_caches` unloads it, after waiting for the
    devices, so no launch of it is running then.
    """

    def __init__(self, name: str, library: Any, handle: Any, device: int) -> None:
        self.name = name
        self.device = device
        self._library = library
        self._handle = handle
        unused = weakref.finalize(self, _unused_libraries.append, library)
        unused.atexit = False  # at exit the driver unloads everything
        self._function = driver().CUfunction(int(handle))
        self._launch = driver().cuLaunchKernel
        self._set_device = runtime().cudaSetDevice
        self._packers: dict[tuple[type, ...], _Packer] = {}
        self._last: _Packer | None = None  # the packer of the last argument list launched
        self._resident: dict[tuple[int, int], int] = {}

    def resident_blocks(self, block: int, shared_mem: int = 0) -> int:
        """How many blocks of ``block`` threads, each with ``shared_mem`` bytes of dynamic
        shared memory, the kernel's device runs at once: its multiprocessors times the
        blocks of this kernel each holds (by its registers, threads and shared memory).

        Raises:
            CudaError: the driver refused the query.
        """
        key = (block, shared_mem)
        found = self._resident.get(key)
        if found is None:
            ensure_device(self.device)
            function = cudadrv.cuKernelGetFunction(self._handle)  # in the device's context
            per_sm = cudadrv.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                function, block, shared_mem
            )
            found = self._resident[key] = int(per_sm) * multiprocessors(self.device)
        return found

    def launch(
        self,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...],
        args: Sequence[Any] | PackedArgs,
        stream: Stream | int | Any = None,
        shared_mem: int = 0,
    ) -> None:
        """Enqueue one launch on ``stream`` (eagle's current stream by default).

        Only enqueues, so it is legal inside a capture; arrays among ``args``
        are kept alive by a graph that captures the launch.

        Args:
            grid: blocks per grid, an int or up to three ints.
            block: threads per block, an int or up to three ints.
            args: the kernel's arguments (see :class:`~eagle.cuda.module.PackedArgs`),
                or a :class:`~eagle.cuda.module.PackedArgs` packed once for many launches (the
                cheapest way to launch the same arguments again).
            stream: anything :func:`~eagle.cuda.as_stream_ptr` takes.
            shared_mem: bytes of dynamic shared memory per block.

        Raises:
            TypeError: an argument has no C type.
            ValueError: bad launch dimensions, or an array argument on the host
                or another device.
            CudaError: the launch was refused.
        """
        stream_ptr = stream if type(stream) is int else as_stream_ptr(stream, self.device)
        gx, gy, gz = (grid, 1, 1) if type(grid) is int and grid > 0 else _dim3(grid)
        bx, by, bz = (block, 1, 1) if type(block) is int and block > 0 else _dim3(block)
        if stream_ptr <= 2:  # the null and default streams run in the current context
            status = self._set_device(self.device)[0]  # (called bare: it runs per launch)
            if status:
                raise_status("runtime", "cudaSetDevice", status)
        handle = _stream_handles.get(stream_ptr) or _stream_handle(stream_ptr)
        if type(args) is PackedArgs:
            status = self._launch(
                self._function, gx, gy, gz, bx, by, bz, shared_mem, handle, args.address, 0
            )[0]
            if status:
                raise_status("driver", "cuLaunchKernel", status)
            if args.keep and any_capture_active():
                record_use(stream_ptr, self, *args.keep)
            return
        args = cast(Sequence[Any], args)
        packer = self._last
        if packer is None or not packer.layout.fits(args):
            packer = self._packer(args)
        with packer.lock:  # the driver copies the parameters during the call
            packer.layout.pack(packer.data, args, self.device)
            status = self._launch(
                self._function, gx, gy, gz, bx, by, bz, shared_mem, handle, packer.address, 0
            )[0]
        if status:
            raise_status("driver", "cuLaunchKernel", status)
        if packer.layout.arrays and any_capture_active():
            record_use(stream_ptr, self, *[args[index] for index in packer.layout.arrays])

    def _packer(self, args: Sequence[Any]) -> _Packer:
        """The packer of ``args``'s signature (made on first use), now the last one."""
        signature = tuple(map(type, args))
        packer = self._packers.get(signature)
        if packer is None:
            packer = self._packers.setdefault(signature, _Packer(args))
        self._last = packer
        return packer


def _dim3(value: int | tuple[int, ...]) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(int(d) < 1 for d in dims):
        raise EagleValueError(f"launch dimensions must be 1 to 3 positive ints, not {value!r}")
    return (*(int(d) for d in dims), *(1,) * (3 - len(dims)))  # type: ignore[return-value]
