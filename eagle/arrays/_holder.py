"""One door for every buffer eagle takes, whatever made it: :func:`hold`.

eagle takes numpy arrays, its own Arrays, torch tensors, CuPy arrays, and any
other array that speaks the CUDA array interface (v3) or DLPack. Each of these
has one implementation here (a kind), found by the object's type; for one
object, a kind says

* where its elements are: an eagle :class:`~eagle.arrays.Array` over the same
  memory (pointer, shape, byte strides, dtype, device; no copy) that keeps the
  object alive;
* whether eagle may write them: not read-only memory, nor a torch tensor that
  requires grad (read through, never written behind autograd's back);
* the stream its producer queues work over them on (:attr:`Held.producer`),
  which eagle's work is ordered after (:func:`order_after`);
* a cheap layout key (:func:`layout_key`): objects with equal keys are the same
  memory in the same layout, so work prepared for one serves the other.

:func:`asarray` (``eagle.arrays.asarray``) is the public way in.
:func:`~eagle._checks.check_buffer` is the one check of what neither the host
nor a device takes; :func:`bump_versions` marks torch tensors eagle wrote, as torch's
own in-place operations do.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from eagle._checks import check_buffer
from eagle.arrays import _array, _dlpack, _foreign
from eagle.arrays._args import check_dtype, parse_device
from eagle.cuda._runtime import cudart
from eagle.cuda.stream import FRAMEWORK_STREAMS, launch_stream
from eagle.errors import (
    EagleBufferError,
    EagleOverflowError,
    EagleTypeError,
    EagleValueError,
    shown,
)
from hawk.dtypes import find, storable, through_float32

__all__ = [
    "ALIKE",
    "OWN",
    "TYPES_KEPT",
    "Held",
    "Layout",
    "address_view",
    "aligned_alike",
    "asarray",
    "bump_versions",
    "check_buffer",
    "describe",
    "hold",
    "hold_alike",
    "kept_type",
    "layout_key",
    "order_after",
    "producer_of",
    "typed_key",
]


class Held(NamedTuple):
    """One buffer as eagle takes it (a named tuple: one is built per plane of every bind
    over foreign arrays).

    Attributes:
        array: its elements, an eagle Array over the same memory (no copy); on the
            host, wrapping a numpy array.
        framework: who made it: ``"numpy"``, ``"eagle"``, ``"torch"``, ``"cupy"``,
            or None (another producer, through DLPack or the CUDA array interface).
        producer: the raw stream the producer queued work over the memory on, which
            eagle's work must follow (:func:`order_after`); None on the host, for
            eagle's own arrays, or when nothing is to be waited for.
        grad: a torch tensor that requires grad (read, never written).
        tensor: the torch tensor given, whose version a write bumps; else None.
    """

    array: _array.Array
    framework: str | None
    producer: int | None = None
    grad: bool = False
    tensor: Any = None


@dataclass(frozen=True, slots=True)
class Layout:
    """Where an array's elements are, read without taking them (for calls that only
    describe work: no stream, no driver).

    Attributes:
        ptr: the address of the first element.
        shape: extents.
        strides: byte strides.
        dtype: the numpy dtype.
        readonly: the producer marked the memory read-only.
        grad: a torch tensor that requires grad.
    """

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype
    readonly: bool = False
    grad: bool = False


def describe(value: Any) -> Layout | None:
    """Where ``value``'s elements are, or None when it is no array eagle knows; nothing is
    taken and no stream is asked for (a DLPack-only producer's capsule is taken with
    stream -1: no wait).

    Raises:
        TypeError, BufferError, ValueError: as :func:`hold`.
    """
    return kind_of(value).layout(value)


def hold(value: Any, *, sync: bool = True) -> Held | None:
    """``value`` as eagle takes it, or None when it is no array eagle knows.

    Args:
        value: a numpy array, an eagle Array, a torch tensor, a CuPy array, or
            any object with ``__cuda_array_interface__`` or ``__dlpack__``.
        sync: the caller will run work over it: ask a DLPack producer to order
            its queued work (with the stream eagle's work goes to) and report
            the producer's stream. False for calls that only read the layout.

    Raises:
        TypeError: a torch tensor eagle cannot read as it is (sparse,
            conjugated or negated views; a dtype without a numpy dtype), or a
            masked CUDA array interface.
        BufferError: the memory is on a device eagle cannot use.
        ValueError: a CUDA array interface stream of 0.
    """
    return kind_of(value).hold(value, sync)


def hold_alike(value: Any, key: tuple[Any, ...], like: _array.Array) -> Held:
    """``value`` as :func:`hold` takes it (to run work over it), given its
    :func:`layout_key` ``key`` and ``like``, an Array (or an address view of one) that an
    object of the same :func:`aligned_alike` key was held as: a torch tensor's Array
    takes ``like``'s layout at the key's address, nothing read from torch again."""
    return kind_of(value).hold_alike(value, key, like)


def layout_key(value: Any) -> tuple[Any, ...] | None:
    """What work prepared over ``value`` depends on: a tuple that is equal for two
    objects over the same memory in the same layout, dtype, device and writability;
    None when ``value`` cannot say cheaply (a DLPack-only producer, whose capsule must
    be taken each time, or no array)."""
    return kind_of(value).key(value)


def aligned_alike(key: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """A :func:`layout_key` of device memory with its address replaced by the address
    modulo :data:`ALIKE` bytes: equal for arrays laid out alike, at addresses that
    align alike for every dtype a plane takes. None for host memory, a null address, or a
    producer whose key may not name its address (the CUDA array interface, DLPack)."""
    if key[0] in _ADDRESSED and key[1] >= 0 and key[2]:
        return (key[0], key[1], key[2] % ALIKE, *key[3:])
    return None


#: addresses that agree modulo this many bytes are aligned alike for every plane dtype
ALIKE = 16
#: the keys whose second entry is a device index (-1 for a CPU tensor) and third an address:
#: eagle's device Arrays' and those of each framework eagle takes streams from
_ADDRESSED = frozenset(("device", *FRAMEWORK_STREAMS))
#: the producers whose arrays are numpy's or eagle's own: no other framework's stream,
#: versions or objects to keep
OWN = frozenset(("numpy", "eagle"))


def typed_key(cls: type) -> Callable[[Any], tuple[Any, ...] | None] | None:
    """The :func:`layout_key` of the objects of type ``cls`` when their type alone says how
    they are taken (numpy, eagle, torch, CuPy), else None."""
    kind = _kind_of_type(cls)
    return None if kind is _PROTOCOLS else kind.key


def producer_of(value: Any, device: int) -> int | None:
    """The stream ``value``'s producer queues work on now (see :attr:`Held.producer`),
    for work prepared earlier over an object of the same :func:`layout_key`."""
    return kind_of(value).producer(value, device)


def address_view(tensor: Any, *, one: bool = False) -> _array.Array:
    """A flat Array over a contiguous torch tensor's elements (its first element alone
    with ``one``, for a broadcast tensor) that does not keep the tensor alive: for work
    cached by the tensors' addresses, which the caller keeps alive. A CUDA tensor gives
    a device Array, a CPU tensor a host Array over a numpy view that holds no reference
    to it.

    Raises:
        TypeError: as :func:`hold`.
    """
    dtype = _TORCH._checked(tensor)
    shape = (1 if one else tensor.numel(),)
    if tensor.device.type == "cpu":
        layout = Layout(tensor.data_ptr(), shape, (dtype.itemsize,), dtype, False, False)
        return _array.Array(host=_foreign.host_view(layout, None))
    return _array.Array(
        ptr=tensor.data_ptr(),
        shape=shape,
        dtype=dtype,
        strides=(dtype.itemsize,),
        device_index=tensor.get_device(),
    )


def order_after(held: Iterable[Held], consumer: int) -> None:
    """Make ``consumer`` wait for each producer stream of ``held`` (no host wait)."""
    done: set[int] = set()
    for item in held:
        producer = item.producer
        if producer is not None and producer != consumer and producer not in done:
            done.add(producer)
            _foreign.order(producer, consumer)


def bump_versions(tensors: Iterable[Any]) -> None:
    """Mark torch ``tensors`` as written in place (their version counters go up, as
    torch's in-place operations do), so autograd refuses a backward that saved them;
    None stands for no tensor."""
    written = [tensor for tensor in tensors if tensor is not None]
    if written:
        _increment()(written)


@functools.cache
def _increment() -> Callable[[list[Any]], None]:
    """torch's C call behind ``torch.autograd.graph.increment_version``, which takes a list
    of tensors since torch 2.5 (the public wrapper's ``isinstance`` check costs more than
    the bump itself), or the public call where the C one takes no list."""
    torch = sys.modules["torch"]
    found = getattr(torch._C, "_increment_version", None)
    try:
        if found is not None:
            found([])
    except TypeError:
        found = None
    return found or torch.autograd.graph.increment_version


# -- asarray: an Array over any buffer ---------------------------------------------------------


def asarray(obj: Any, dtype: Any = None, device: str | None = None) -> _array.Array:
    """An :class:`Array` holding ``obj``, without a copy where possible.

    Args:
        obj: an Array; a numpy array or anything numpy converts (host); or any
            array with ``__dlpack__`` (DLPack up to 1.1, host or device) or
            ``__cuda_array_interface__`` (v3): PyTorch, CuPy, JAX, numba... —
            wrapped without a copy, read-only if its producer says so, after
            the producer's queued work (ordered on eagle's current stream,
            without a host wait). A torch tensor that requires grad is read
            through ``detach()`` (same memory), and its Array is read-only.
        dtype: convert to this dtype (a copy when it differs).
        device: ``"cpu"``, ``"cuda:N"``, or None to keep ``obj`` where it is.

    Raises:
        ValueError: a bad ``device``.
        TypeError: a non-numeric ``dtype``, or Python numbers it cannot hold (complex).
        OverflowError: Python ints ``dtype`` cannot hold (300 as int8), or, with no
            ``dtype``, that no array dtype holds (2**70).
        BufferError: the producer's memory is on a device eagle cannot use.
    """
    kind = None if dtype is None else check_dtype(dtype)
    index = parse_device(device) if device is not None else None
    source = _wrap(obj, kind)
    target = source._device_index if device is None else index
    if kind is not None and kind != source.dtype:
        # (a 0-d array stays 0-d; float64 values round as a kernel's store rounds them)
        host = np.array(storable(source.numpy(), kind), dtype=kind, order="C")
        source = _array.Array(host=host)
    elif source.is_host:
        if source.dtype.kind in "OSU" and not isinstance(obj, np.ndarray):  # None, text...
            values = source.numpy().ravel()
            if values.size and all(type(v) is int for v in values):  # beyond (u)int64
                raise EagleOverflowError(
                    f"asarray: {shown(obj)} holds ints beyond int64 (and uint64), which no "
                    "array dtype holds; pass values int64 holds"
                )
            raise EagleTypeError(
                f"asarray takes numbers or bools, not {shown(obj)}: pass a numpy array, an "
                "array-like object or a (nested) list of numbers"
            )
        check_dtype(source.dtype, "obj's dtype")
    if target == source._device_index:
        return source
    if target is None:
        return _array.Array(host=source.numpy())
    return _array._upload(np.asarray(source.numpy(), order="C"), target)


def _wrap(obj: Any, dtype: np.dtype | None = None) -> _array.Array:
    """``obj`` as an Array, with no copy for arrays from numpy, torch, CuPy, DLPack or the
    CUDA array interface (:func:`hold`); Python numbers and sequences made in ``dtype``
    (when given) at once, so that one it cannot hold is refused, as numpy refuses it."""
    if isinstance(obj, _array.Array):
        return obj
    if isinstance(obj, np.generic):
        return _array.Array(host=np.asarray(obj))
    held = hold(obj)
    if held is None:
        try:
            if dtype is not None and through_float32(dtype):  # (bfloat16)
                values = np.asarray(obj)
                if values.dtype.kind == "f":  # rounded as a kernel's store rounds them
                    return _array.Array(host=np.asarray(storable(values, dtype), dtype=dtype))
            return _array.Array(host=np.asarray(obj, dtype=dtype))
        except OverflowError as exc:  # 300 as int8, -1 as uint8
            raise EagleOverflowError(f"asarray: {exc}; pass values {dtype} holds") from None
        except TypeError as exc:  # a complex number as a real dtype, say
            raise EagleTypeError(f"asarray cannot make {dtype} of this object: {exc}") from None
        except ValueError as exc:  # a ragged nesting of sequences, say
            raise EagleValueError(
                f"asarray cannot make an array of this object: {exc} (nested lists need rows "
                "of one length)"
            ) from None
    if held.producer is not None:
        # eagle's work over it goes to launch_stream: that waits for the producer's
        order_after((held,), launch_stream((held.array,), held.array._device))
    return held.array


# -- Arrays over DLPack and CUDA-array-interface memory ----------------------------------------


def from_dlpack(obj: Any, framework: str | None, sync: bool) -> tuple[_array.Array, int | None]:
    """``obj``'s elements through its DLPack capsule, and the stream the producer ordered
    its work before (None: none, on the host or without ``sync``).

    With ``sync`` (device memory), the capsule is asked for with the stream eagle's work
    over ``obj`` goes to (:func:`~eagle.cuda.stream.launch_stream`) as the consumer
    stream, so the producer orders its queued work before it; without, with -1 (no
    wait: for calls that only read the layout).

    Raises:
        BufferError: the memory is on a device eagle cannot use.
    """
    kind, device_id = (int(v) for v in obj.__dlpack_device__())
    on_host = kind in (_dlpack.CPU, _dlpack.CUDA_HOST)
    if not on_host and kind not in (_dlpack.CUDA, _dlpack.CUDA_MANAGED):
        raise EagleBufferError(
            f"obj lives on DLPack device type {kind}, which eagle cannot use; "
            "copy it to the CPU or a CUDA device first"
        )
    consumer = launch_stream((obj,), device_id) if sync and not on_host else None
    # DLPack's stream 0 is ambiguous (the legacy default stream is 1); -1 asks for no wait
    wanted = None if on_host else (-1 if consumer is None else (consumer or 1))
    imported = _dlpack.take(obj, wanted)
    if on_host:
        return _array.Array(host=_foreign.host_view(imported, imported)), None
    array = _array.Array(
        ptr=imported.ptr,
        shape=imported.shape,
        dtype=imported.dtype,
        strides=imported.strides,
        device_index=device_id,
        owner=_foreign.Source(imported, framework),
        readonly=imported.readonly,
    )
    return array, consumer


def from_interface(obj: Any, framework: str | None) -> tuple[_array.Array, int | None]:
    """``obj``'s elements through its CUDA array interface, and the stream its producer
    queued work over them on (None: nothing to wait for).

    Raises:
        TypeError: a masked interface.
        ValueError: an interface stream of 0 (which v3 forbids).
    """
    info = obj.__cuda_array_interface__
    _foreign.check_unmasked(info)
    dtype = np.dtype(info["typestr"])
    shape = tuple(int(d) for d in info["shape"])
    strides = info.get("strides")
    strides = _dlpack.compact(shape, dtype.itemsize) if strides is None else tuple(strides)
    ptr, readonly = int(info["data"][0]), bool(info["data"][1])
    device_index = int(cudart.cudaPointerGetAttributes(ptr).device) if ptr else 0
    array = _array.Array(
        ptr=ptr,
        shape=shape,
        dtype=dtype,
        strides=strides,
        device_index=device_index,
        owner=_foreign.Source(obj, framework),
        readonly=readonly,
    )
    return array, _foreign.interface_producer(info)


# -- the kinds ---------------------------------------------------------------------------------


class _Kind:
    """How eagle takes the objects of one kind of producer. ``key`` is a plain function
    (a staticmethod), so that a plan's run calls it without binding a method."""

    key: Callable[[Any], tuple[Any, ...] | None]

    def hold(self, value: Any, sync: bool) -> Held | None:
        raise NotImplementedError

    def producer(self, value: Any, device: int) -> int | None:
        return None

    def hold_alike(self, value: Any, key: tuple[Any, ...], like: _array.Array) -> Held:
        held = self.hold(value, True)
        assert held is not None  # (an array like one held before)
        return held

    def layout(self, value: Any) -> Layout | None:
        held = self.hold(value, False)
        return None if held is None else _array_layout(held.array, held.grad)


def _array_layout(array: _array.Array, grad: bool = False) -> Layout:
    return Layout(array.ptr, array.shape, array.strides, array.dtype, array.readonly, grad)


def _host_key(array: np.ndarray) -> tuple[Any, ...]:
    address = array.__array_interface__["data"][0]
    return ("host", address, array.shape, array.strides, array.dtype, array.flags.writeable)


def _array_key(array: _array.Array) -> tuple[Any, ...]:
    host = array._host
    if host is not None:
        return _host_key(host)
    # the slots behind the properties (a run's hot path)
    return ("device", array._device_index, array._ptr, array.shape, array.strides,
            array.dtype, array._readonly)  # fmt: skip


def _tensor_key(tensor: Any) -> tuple[Any, ...] | None:
    # its shape (a torch.Size, a tuple) and strides in elements as torch gives them: with
    # the dtype they say what byte strides would, at a third of the cost; a negated view
    # of the same memory reads other values (and holding it refuses it)
    try:
        return ("torch", tensor.get_device(), tensor.data_ptr(), tensor.shape,
                tensor.stride(), tensor.dtype, tensor.requires_grad,
                tensor.is_neg())  # fmt: skip
    except RuntimeError:  # a sparse or nested tensor: no key, and holding it refuses it
        return None


def _cupy_key(array: Any) -> tuple[Any, ...]:
    return ("cupy", array.device.id, array.data.ptr, array.shape, array.strides, array.dtype)


def _interface_key(value: Any) -> tuple[Any, ...] | None:
    info = getattr(value, "__cuda_array_interface__", None)
    return _foreign.interface_key(info) if isinstance(info, dict) else None


class _Numpy(_Kind):
    """numpy arrays: host memory, no stream."""

    key = staticmethod(_host_key)

    def hold(self, value: np.ndarray, sync: bool) -> Held:
        return Held(
            _array.Array(host=value if type(value) is np.ndarray else _plain(value)), "numpy"
        )

    def layout(self, value: np.ndarray) -> Layout:
        address = value.__array_interface__["data"][0]
        return Layout(address, value.shape, value.strides, value.dtype, not value.flags.writeable)


def _plain(value: np.ndarray) -> np.ndarray:
    """A numpy subclass as a plain ndarray over the same memory: its own indexing and
    arithmetic (``np.matrix``'s, say) do not follow it into eagle."""
    return value.view(np.ndarray)


class _Masked(_Kind):
    """numpy masked arrays, refused: their elements under the mask are no values. They
    have no key, so no binding made over other arrays in the same memory runs them."""

    key = staticmethod(lambda value: None)

    def hold(self, value: Any, sync: bool) -> Held:
        raise EagleTypeError(
            "a numpy masked array's elements under its mask are no values eagle can read; "
            "pass .filled(value) of it (or .data, to read what is under the mask)"
        )


class _Eagle(_Kind):
    """eagle's own Arrays; the work over one that wraps another framework's memory goes
    to that framework's stream (:func:`~eagle.cuda.stream.launch_stream`)."""

    key = staticmethod(_array_key)

    def hold(self, value: _array.Array, sync: bool) -> Held:
        return Held(value, "eagle")

    def layout(self, value: _array.Array) -> Layout:
        return _array_layout(value)


class _Torch(_Kind):
    """torch tensors, read through their own attributes (no DLPack): CPU tensors as
    numpy views, CUDA tensors on torch's current stream."""

    key = staticmethod(_tensor_key)

    def layout(self, value: Any) -> Layout:
        return _tensor_layout(value, self._checked(value))

    def _checked(self, value: Any) -> np.dtype:
        """A tensor eagle can read as it is: its numpy dtype."""
        torch = sys.modules["torch"]
        if value.layout is not torch.strided:
            raise EagleTypeError(
                f"a {value.layout} torch tensor has no strided memory eagle can read; pass "
                ".to_dense() of it"
            )
        if value.is_nested:
            raise EagleTypeError(
                "a nested torch tensor has no one shape eagle can read; pass each of its "
                "tensors (.unbind()), or .to_padded_tensor(0.0) of it"
            )
        if value.is_conj() or value.is_neg():
            raise EagleTypeError(
                "this torch tensor is a lazily conjugated or negated view; pass "
                ".resolve_conj().resolve_neg() of it"
            )
        return _torch_dtype(value.dtype)

    def hold(self, value: Any, sync: bool) -> Held:
        dtype = self._checked(value)
        grad = bool(value.requires_grad)
        keep = value.detach() if grad else value  # the same memory, without the graph
        device = value.device
        if device.type == "cpu":
            row = find(dtype)
            if row is not None and row.module != "numpy":  # bfloat16, fp8: no numpy view
                host = _foreign.host_view(_tensor_layout(keep, dtype), keep)
            else:
                host = keep.numpy()
            if grad:  # read as it is, never written behind autograd's back: read-only
                host = host.view()
                host.flags.writeable = False
            return Held(_array.Array(host=host), "torch", None, grad, value)
        if device.type != "cuda":
            raise EagleBufferError(
                f"this torch tensor is on {device}, which eagle cannot use; move it to the "
                "CPU or a CUDA device first"
            )
        index = device.index if device.index is not None else value.get_device()
        layout = _tensor_layout(keep, dtype)
        array = _array.Array(
            ptr=layout.ptr,
            shape=layout.shape,
            dtype=dtype,
            strides=layout.strides,
            device_index=index,
            owner=_foreign.Source(keep, "torch"),
            readonly=grad,  # read as it is, never written behind autograd's back
        )
        return Held(
            array, "torch", FRAMEWORK_STREAMS["torch"](index) if sync else None, grad, value
        )

    def producer(self, value: Any, device: int) -> int | None:
        return FRAMEWORK_STREAMS["torch"](device) if value.get_device() >= 0 else None

    def hold_alike(self, value: Any, key: tuple[Any, ...], like: _array.Array) -> Held:
        _, index, ptr, _, _, _, grad, _ = key  # (:func:`_tensor_key`)
        keep = value.detach() if grad else value  # the same memory, without the graph
        array = like._at(ptr, _foreign.Source(keep, "torch"), readonly=grad)  # (as hold)
        return Held(array, "torch", FRAMEWORK_STREAMS["torch"](index), grad, value)


def _tensor_layout(tensor: Any, dtype: np.dtype) -> Layout:
    """A torch tensor's layout, in bytes."""
    strides = tuple(stride * dtype.itemsize for stride in tensor.stride())
    grad = bool(tensor.requires_grad)
    return Layout(tensor.data_ptr(), tuple(tensor.shape), strides, dtype, False, grad)


_torch_dtypes: dict[Any, np.dtype] = {}


def _torch_dtype(dtype: Any) -> np.dtype:
    """The numpy dtype of a torch dtype (same name; bfloat16 is ml_dtypes')."""
    found = _torch_dtypes.get(dtype)
    if found is None:
        name = str(dtype).removeprefix("torch.")
        try:
            found = _torch_dtypes[dtype] = check_dtype(name)
        except TypeError:
            raise EagleTypeError(
                f"a torch tensor of {dtype} has no dtype eagle takes; convert it with .to(...)"
            ) from None
    return found


class _Cupy(_Kind):
    """CuPy arrays, read through their own attributes, on CuPy's current stream."""

    key = staticmethod(_cupy_key)

    def hold(self, value: Any, sync: bool) -> Held:
        dtype = check_dtype(value.dtype, "the CuPy array's dtype")
        index = int(value.device.id)
        array = _array.Array(
            ptr=int(value.data.ptr),
            shape=tuple(value.shape),
            dtype=dtype,
            strides=tuple(value.strides),
            device_index=index,
            owner=_foreign.Source(value, "cupy"),
        )
        return Held(array, "cupy", FRAMEWORK_STREAMS["cupy"](index) if sync else None)

    def producer(self, value: Any, device: int) -> int | None:
        return FRAMEWORK_STREAMS["cupy"](device)


class _Protocols(_Kind):
    """Any other producer: through its CUDA array interface (preferred: it is read without
    taking anything, so it gives a key), else DLPack."""

    key = staticmethod(_interface_key)

    def hold(self, value: Any, sync: bool) -> Held | None:
        framework = _foreign.known(type(value).__module__.partition(".")[0])
        if isinstance(getattr(value, "__cuda_array_interface__", None), dict):
            array, producer = from_interface(value, framework)
        elif hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
            array, producer = from_dlpack(value, framework, sync)
        else:
            return None
        check_dtype(array.dtype, "obj's dtype")
        return Held(array, framework, producer if sync else None)

    def producer(self, value: Any, device: int) -> int | None:
        return _foreign.interface_producer(value.__cuda_array_interface__)

    def layout(self, value: Any) -> Layout | None:
        info = getattr(value, "__cuda_array_interface__", None)
        if not isinstance(info, dict):
            return super().layout(value)
        _foreign.check_unmasked(info)
        dtype = check_dtype(np.dtype(info["typestr"]), "obj's dtype")
        shape = tuple(int(d) for d in info["shape"])
        strides = info.get("strides")
        strides = _dlpack.compact(shape, dtype.itemsize) if strides is None else tuple(strides)
        return Layout(int(info["data"][0]), shape, strides, dtype, bool(info["data"][1]))


_NUMPY, _EAGLE, _TORCH, _CUPY, _PROTOCOLS = _Numpy(), _Eagle(), _Torch(), _Cupy(), _Protocols()
_MASKED = _Masked()

#: the kind of each type seen so far, as :func:`kept_type` allows (other producers are
#: looked at object by object, and so are types past the bound: classes made on the fly)
_kinds: dict[type, _Kind] = {np.ndarray: _NUMPY}
#: how many types besides the frameworks' own the type tables keep
TYPES_KEPT = 64


def kind_of(value: Any) -> _Kind:
    """The implementation that takes ``value``."""
    return _kind_of_type(type(value))


def _kind_of_type(cls: type) -> _Kind:
    kind = _kinds.get(cls)
    if kind is None:
        kind = _find(cls)
        if kind is not _PROTOCOLS and kept_type(cls, len(_kinds)):
            _kinds[cls] = kind
    return kind


def kept_type(cls: type, kept: int) -> bool:
    """Whether a table of how to take array types, holding ``kept`` of them, keeps
    ``cls``: a framework's own classes always, others up to :data:`TYPES_KEPT`."""
    return kept < TYPES_KEPT or cls.__module__.partition(".")[0] in _OWN_MODULES


#: the packages whose own array classes the type tables always keep (a fixed few)
_OWN_MODULES = frozenset((*OWN, *FRAMEWORK_STREAMS))


def _find(cls: type) -> _Kind:
    if issubclass(cls, _array.Array):
        return _EAGLE
    if issubclass(cls, np.ndarray):
        # (a masked array's class exists only once numpy.ma is imported)
        masked = getattr(sys.modules.get("numpy.ma"), "MaskedArray", None)
        return _MASKED if masked is not None and issubclass(cls, masked) else _NUMPY
    # a torch tensor or CuPy array exists only once its framework is imported
    tensor = getattr(sys.modules.get("torch"), "Tensor", None)
    if isinstance(tensor, type) and issubclass(cls, tensor):
        return _TORCH
    ndarray = getattr(sys.modules.get("cupy"), "ndarray", None)
    if isinstance(ndarray, type) and issubclass(cls, ndarray):
        return _CUPY
    return _PROTOCOLS
