"""The :class:`Array` type and its constructors (the public face is :mod:`eagle.arrays`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from eagle.arrays import _dlpack, _fill, _foreign, _strided
from eagle.arrays._args import (
    ShapeLike,
    check_basic,
    check_dtype,
    check_reshape,
    check_shape,
    check_size,
    device_name,
    parse_device,
)
from eagle.cuda._records import raise_recorded
from eagle.cuda._runtime import CudaUnavailable, cudart, ensure_device, runtime
from eagle.cuda.graph import any_capture_active, is_capturing, record_use
from eagle.cuda.memory import default_pool
from eagle.cuda.stream import Stream, as_stream_ptr, current_stream, launch_stream
from eagle.errors import (
    EagleBufferError,
    EagleIndexError,
    EagleRuntimeError,
    EagleTypeError,
    EagleValueError,
)
from hawk.dtypes import find, storable

__all__ = ["Array", "empty", "full", "ones", "zeros"]


class Array:
    """One strided buffer on the host or a CUDA device.

    Make them with :func:`asarray`, :func:`zeros`, :func:`empty`,
    :func:`full` or :func:`ones`, not with this constructor. ``copy.copy``,
    ``copy.deepcopy`` and ``pickle`` copy the elements (see :meth:`copy`),
    never the address.

    Attributes:
        shape: extents, a tuple of ints.
        dtype: the numpy dtype.
        strides: byte strides, one per axis.
        device: ``"cpu"`` or ``"cuda:N"``.
        ptr: the address of the first element.
    """

    __slots__ = (
        "__weakref__",  # (as numpy arrays and torch tensors, it may be weakly referenced)
        "_device_index",
        "_host",
        "_owner",
        "_ptr",
        "_readonly",
        "dtype",
        "shape",
        "strides",
    )

    def __init__(
        self,
        *,
        host: np.ndarray | None = None,
        ptr: int = 0,
        shape: tuple[int, ...] = (),
        dtype: np.dtype | None = None,
        strides: tuple[int, ...] = (),
        device_index: int | None = None,
        owner: Any = None,
        readonly: bool = False,
    ) -> None:
        self._host = host
        self._owner = owner
        self._device_index = device_index
        if host is not None:
            self.shape, self.dtype, self.strides = host.shape, host.dtype, host.strides
            self._ptr = host.__array_interface__["data"][0]
            self._readonly = not host.flags.writeable
        else:
            if dtype is None or device_index is None:
                raise EagleTypeError("a device Array needs its dtype and device_index")
            self.shape, self.dtype, self.strides = shape, dtype, strides
            self._ptr = ptr
            self._readonly = readonly

    def _at(self, ptr: int, owner: Any, readonly: bool) -> Array:
        """A device Array laid out as this one (shape, strides, dtype, device) at ``ptr``,
        kept alive by ``owner``, ``readonly`` or not: built without the constructor's work,
        for a bind that moves to memory its caller knows is laid out so."""
        moved = object.__new__(Array)
        moved._host, moved._owner, moved._ptr = None, owner, ptr
        moved._device_index, moved._readonly = self._device_index, readonly
        moved.shape, moved.dtype, moved.strides = self.shape, self.dtype, self.strides
        return moved

    # -- attributes -----------------------------------------------------------------------

    @property
    def device(self) -> str:
        """``"cpu"`` or ``"cuda:N"``."""
        return device_name(self._device_index)

    @property
    def device_index(self) -> int | None:
        """The CUDA device index, or None on the host."""
        return self._device_index

    @property
    def _device(self) -> int:
        """The device index of a device Array."""
        assert self._device_index is not None  # __init__ refuses a device Array without one
        return self._device_index

    @property
    def is_host(self) -> bool:
        """True for a host (numpy-backed) array."""
        return self._host is not None

    @property
    def ptr(self) -> int:
        """The address of the first element."""
        return self._ptr

    @property
    def readonly(self) -> bool:
        """True when the producer of this memory marked it read-only (:meth:`fill`
        refuses such arrays); for host memory, numpy's flag as it is now."""
        return self._readonly if self._host is None else not self._host.flags.writeable

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes the elements occupy (``size * itemsize``)."""
        return self.size * self.itemsize

    @property
    def is_contiguous(self) -> bool:
        """True when the elements are laid out row-major without gaps."""
        if self.size <= 1:
            return True
        expected = _dlpack.compact(self.shape, self.itemsize)
        return all(
            dim == 1 or stride == want
            for dim, stride, want in zip(self.shape, self.strides, expected, strict=True)
        )

    def __repr__(self) -> str:
        return f"Array(shape={self.shape}, dtype={self.dtype}, device={self.device!r})"

    def __len__(self) -> int:
        if not self.shape:
            raise EagleTypeError("len() of a 0-d Array")
        return self.shape[0]

    # -- views ----------------------------------------------------------------------------

    def __getitem__(self, key: Any) -> Array:
        """Basic slicing (ints, slices, ``...``, ``None``): a view sharing memory.

        Raises:
            TypeError: a list, array or bool index (a gather: do it in numpy).
            IndexError: an int out of its axis's range, or more indices than axes.
        """
        keys = check_basic(key)
        if Ellipsis not in keys:  # an int for every axis still gives a (0-d) view
            keys = (*keys, Ellipsis)
        if self._host is not None:
            return Array(host=self._view(self._host, keys))
        # Index a stand-in with the same layout: numpy does the view arithmetic and
        # never reads memory for basic indexing into a view.
        stand_in = np.lib.stride_tricks.as_strided(
            np.empty(1, dtype=self.dtype), shape=self.shape, strides=self.strides
        )
        view = self._view(stand_in, keys)
        offset = view.__array_interface__["data"][0] - stand_in.__array_interface__["data"][0]
        return Array(
            ptr=self._ptr + offset,
            shape=view.shape,
            dtype=self.dtype,
            strides=view.strides,
            device_index=self._device_index,
            owner=self._owner,
            readonly=self._readonly,
        )

    def _view(self, array: np.ndarray, keys: tuple[Any, ...]) -> np.ndarray:
        """``array[keys]``, a view, numpy's refusal raised as eagle's (a step of 0, a
        slice bound that is no int, an index out of range)."""
        try:
            return array[keys]
        except IndexError as exc:
            raise EagleIndexError(f"{exc} (an Array of shape {self.shape})") from None
        except ValueError as exc:
            raise EagleValueError(f"{exc} (an Array of shape {self.shape})") from None
        except TypeError as exc:
            raise EagleTypeError(f"{exc} (an Array of shape {self.shape})") from None

    def reshape(self, *shape: int | Sequence[int]) -> Array:
        """The same elements in another shape, sharing memory.

        Args:
            shape: the new extents, as ints or one sequence; one may be -1.

        Raises:
            ValueError: the element count differs, or the array is strided
                (a reshape would need a copy: ``copy()`` it first).
        """
        dims = check_reshape(shape, self.size)
        if not self.is_contiguous:
            raise EagleValueError(
                f"reshape views a contiguous array, and this one (strides {self.strides}) is "
                "not; copy() it first"
            )
        if self._host is not None:
            return Array(host=self._host.reshape(dims))
        return Array(
            ptr=self._ptr,
            shape=dims,
            dtype=self.dtype,
            strides=_dlpack.compact(dims, self.itemsize),
            device_index=self._device_index,
            owner=self._owner,
            readonly=self._readonly,
        )

    @property
    def T(self) -> Array:
        """The transposed view (axes reversed), sharing memory."""
        if self._host is not None:
            return Array(host=self._host.T)
        return Array(
            ptr=self._ptr,
            shape=self.shape[::-1],
            dtype=self.dtype,
            strides=self.strides[::-1],
            device_index=self._device_index,
            owner=self._owner,
            readonly=self._readonly,
        )

    # -- data movement --------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """The values as a numpy array.

        A host Array returns the array it wraps (no copy); a device Array is
        copied to the host after its stream's pending work.

        Raises:
            IndexError, ZeroDivisionError, ValueError, OverflowError: a kernel
                failed a check (a table index, an int division, ``int()`` of NaN or
                inf, a negative int exponent, an int overflow: hawk's kinds of
                those, see :mod:`hawk.emit.checks`).
        """
        if self._host is not None:
            return self._host
        source = self if self.is_contiguous else self.copy()
        out = np.empty(self.shape, dtype=self.dtype)
        if out.nbytes:
            stream_ptr = launch_stream((self,), self._device)
            cudart.cudaMemcpyAsync(
                out.ctypes.data,
                source.ptr,
                out.nbytes,
                runtime().cudaMemcpyKind.cudaMemcpyDeviceToHost,
                stream_ptr,
            )
            cudart.cudaStreamSynchronize(stream_ptr)
            raise_recorded()
        return out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False and (not self.is_host or (dtype is not None and dtype != self.dtype)):
            where = "a device array" if not self.is_host else f"{self.dtype} as {dtype}"
            raise EagleValueError(
                f"copy=False, but reading {where} makes a copy; pass copy=None (a copy where "
                "needed) or copy=True"
            )
        values = self.numpy()
        if copy:
            values = values.copy()
        if dtype is None:
            return values
        return np.asarray(storable(values, dtype)).astype(dtype, copy=False)

    def to(self, device: str) -> Array:
        """This array on ``device`` (itself when it is already there)."""
        index = parse_device(device)
        if index == self._device_index:
            return self
        if index is None:
            return Array(host=self.numpy())
        return _upload(np.asarray(self.numpy(), order="C"), index)

    def copy(self) -> Array:
        """A contiguous copy of the elements on the same device (on a device, a device copy
        ordered after the work queued over this array, and waited for)."""
        if self._host is not None:
            return Array(host=np.array(self._host, order="C"))
        out = empty(self.shape, self.dtype, self.device)
        if not self.size:
            return out
        stream_ptr = launch_stream((self,), self._device)
        if self.is_contiguous:
            cudart.cudaMemcpyAsync(
                out.ptr,
                self.ptr,
                self.nbytes,
                runtime().cudaMemcpyKind.cudaMemcpyDeviceToDevice,
                stream_ptr,
            )
        else:
            _strided.gather(self, out, stream_ptr)
        cudart.cudaStreamSynchronize(stream_ptr)
        return out

    def __copy__(self) -> Array:
        """``copy.copy``: a copy of the elements (:meth:`copy`), never an alias."""
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> Array:
        """``copy.deepcopy``: a copy of the elements (:meth:`copy`), never an alias."""
        return self.copy()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle the elements, not the address: a host Array comes back over a copy of
        them; a device Array is read to the host and comes back on the same device
        index (which must exist where it is loaded). Either way it is contiguous and
        writable."""
        return (_restore, (np.asarray(self.numpy(), order="C"), self.device))

    def fill(self, value: Any, stream: Stream | int | None = None) -> None:
        """Set every element to ``value``.

        On a device it is stream-ordered on ``stream`` (a :class:`~eagle.cuda.Stream`, a raw
        stream pointer, or None for the stream eagle's work over this array goes
        to: :func:`~eagle.cuda.stream.launch_stream`), does not wait, and is
        legal inside a capture.

        Raises:
            ValueError: ``value`` does not fit the dtype exactly (``1.5`` or NaN
                into an int32 array, a complex value into a real one, ``1e300``
                into float32), the array is read-only, or a stream is given for a
                host array.
        """
        if self.readonly:
            raise EagleValueError(
                "this Array is read-only (its producer marked it so); fill a copy()"
            )
        scalar = _fill.exact_scalar(value, self.dtype)
        if self._host is not None:
            if stream is not None:
                raise EagleValueError(
                    "this Array is on the host: fill runs now and takes no stream; leave stream out"
                )
            self._host.fill(scalar)
            return
        if not self.size:
            return
        if stream is None:
            stream_ptr = launch_stream((self,), self._device)
        else:
            stream_ptr = as_stream_ptr(stream, self._device)
        if self.is_contiguous:
            _fill.memset(self.ptr, scalar, self.size, stream_ptr)
        else:
            _strided.fill(self, scalar, stream_ptr)
        record_use(stream_ptr, self)

    # -- interop --------------------------------------------------------------------------

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """Version 3 of the CUDA array interface (device arrays only, of a dtype it can
        describe: it has no typestr for fp8, whose Arrays go out through DLPack)."""
        if self._host is not None:
            raise AttributeError("a host Array has no __cuda_array_interface__")
        row = find(self.dtype)
        if row is not None and not row.interface:
            raise AttributeError(  # (an AttributeError: consumers then ask for DLPack)
                f"a {row.name} Array has no __cuda_array_interface__: the interface has no "
                f"typestr for {row.name}; pass it through DLPack (torch.from_dlpack(x))"
            )
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self._ptr, self._readonly),
            "strides": None if self.is_contiguous else self.strides,
            "version": 3,
            "stream": None,
        }

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(kDLCPU, 0)`` on the host, ``(kDLCUDA, index)`` on a device."""
        if self._host is not None:
            return (_dlpack.CPU, 0)
        return (_dlpack.CUDA, self._device)

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """Export as a DLPack capsule without copying.

        Args:
            stream: the consumer's stream, made to wait for eagle's current
                stream: None or 1 the legacy default stream, 2 the per-thread
                default stream, a pointer, or -1 to skip the wait (device
                arrays only; 0 is ambiguous and refused).
            max_version: the newest DLPack the consumer reads; ``(1, 0)`` or
                later gets a versioned capsule (which carries the read-only flag).
            dl_device: the device the consumer wants; only this array's own.
            copy: True is refused (eagle exports without copying).

        Raises:
            BufferError: a copy or another device was asked for (a device array
                for a CPU consumer: use ``numpy()``), or the view cannot be described.
        """
        if copy:
            raise EagleBufferError("eagle exports DLPack without copying; pass copy=None or False")
        own = self.__dlpack_device__()
        if dl_device is not None and tuple(dl_device) != own:
            wanted, _ = dl_device
            where = "the CPU" if wanted == _dlpack.CPU else f"DLPack device {tuple(dl_device)}"
            raise EagleBufferError(
                f"this Array is on {self.device} and eagle exports without copying, so "
                f"it cannot go to {where}; copy it first (Array.numpy() or Array.to())"
            )
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        if self._host is None:
            if stream == 0:
                raise EagleBufferError(
                    "stream 0 is ambiguous in DLPack; pass 1 (legacy default stream), "
                    "2 (per-thread default stream), a stream pointer, or -1"
                )
            if stream != -1:
                producer = launch_stream((self,), self._device)
                _foreign.order(producer, 1 if stream is None else stream)
        return _dlpack.export(self, device=own, versioned=versioned, readonly=self.readonly)


# -- constructors -----------------------------------------------------------------------


def _allocate(shape: tuple[int, ...], dtype: np.dtype, device_index: int) -> Array:
    try:
        ensure_device(device_index)
    except CudaUnavailable as exc:  # (the call asked for a device by name)
        exc.add_note(
            f"an Array on 'cuda:{device_index}' was asked for (device=...); a host Array takes "
            "device='cpu', the default, and a plan over numpy arrays runs on the host"
        )
        raise
    stream = current_stream(device_index)
    if any_capture_active() and is_capturing(stream):
        raise EagleRuntimeError(
            "cannot allocate a device Array while eagle's current stream is being captured; "
            "allocate before the capture"
        )
    nbytes = math.prod(shape) * dtype.itemsize
    buffer = default_pool(device_index).allocate(nbytes, stream)
    return Array(
        ptr=buffer.ptr,
        shape=shape,
        dtype=dtype,
        strides=_dlpack.compact(shape, dtype.itemsize),
        device_index=device_index,
        owner=buffer,
    )


def empty(shape: ShapeLike, dtype: Any = "float64", device: str = "cpu") -> Array:
    """A new array with unspecified contents.

    Args:
        shape: an int or a sequence of ints.
        dtype: a numeric numpy dtype (default float64).
        device: ``"cpu"`` (default) or ``"cuda:N"``.

    Raises:
        ValueError: a bad ``shape`` or ``device``.
        TypeError: a non-numeric ``dtype``.
        CudaUnavailable: a device was asked for and none is usable.
    """
    dims, kind, index = check_shape(shape), check_dtype(dtype), parse_device(device)
    check_size(dims, kind)
    if index is None:
        return Array(host=np.empty(dims, dtype=kind))
    out = _allocate(dims, kind, index)
    cudart.cudaStreamSynchronize(current_stream(index).ptr())
    return out


def full(shape: ShapeLike, value: Any, dtype: Any = "float64", device: str = "cpu") -> Array:
    """A new array with every element set to ``value``.

    Args:
        shape: an int or a sequence of ints.
        value: the fill value, which must fit ``dtype`` exactly (``1.5`` does not
            fit an int dtype); a float given for a float dtype is rounded to it
            (and must not overflow).
        dtype: a numeric numpy dtype (default float64).
        device: ``"cpu"`` (default) or ``"cuda:N"``.

    Raises:
        ValueError: a bad ``shape`` or ``device``, or a ``value`` that does not fit.
        TypeError: a non-numeric ``dtype``.
        CudaUnavailable: a device was asked for and none is usable.
    """
    dims, kind, index = check_shape(shape), check_dtype(dtype), parse_device(device)
    check_size(dims, kind)
    if index is None:
        return Array(host=np.full(dims, _fill.exact_scalar(value, kind), dtype=kind))
    out = _allocate(dims, kind, index)
    out.fill(value)
    cudart.cudaStreamSynchronize(current_stream(index).ptr())
    return out


def zeros(shape: ShapeLike, dtype: Any = "float64", device: str = "cpu") -> Array:
    """A new array of zeros; arguments and errors as :func:`full`."""
    return full(shape, 0, dtype, device)


def ones(shape: ShapeLike, dtype: Any = "float64", device: str = "cpu") -> Array:
    """A new array of ones; arguments and errors as :func:`full`."""
    return full(shape, 1, dtype, device)


def _restore(values: np.ndarray, device: str) -> Array:
    """An unpickled Array: ``values`` (unpickled) on ``device``, in new writable memory.
    Pickle protocol 5 may give ``values`` over the pickled Array's own memory (its
    out-of-band buffers), or read-only (from a read-only Array): those are copied."""
    index = parse_device(device)
    if index is not None:
        return _upload(np.asarray(values, order="C"), index)
    if not (values.flags.owndata and values.flags.writeable and values.flags.c_contiguous):
        values = np.array(values, order="C")
    return Array(host=values)


def _upload(values: np.ndarray, device_index: int) -> Array:
    out = _allocate(values.shape, values.dtype, device_index)
    stream_ptr = current_stream(device_index).ptr()
    if values.nbytes:
        cudart.cudaMemcpyAsync(
            out.ptr,
            values.ctypes.data,
            values.nbytes,
            runtime().cudaMemcpyKind.cudaMemcpyHostToDevice,
            stream_ptr,
        )
    cudart.cudaStreamSynchronize(stream_ptr)
    return out
