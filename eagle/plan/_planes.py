"""Checking the planes a plan (or an adjoint) runs over, by name, before anything runs.

:func:`check_planes` refuses unknown or missing planes, mixed residency,
dtypes hawk planes do not take, wrong shapes, lane planes of different
lengths, non-contiguous arrays, what neither the host nor a device takes
(:func:`eagle._checks.check_buffer`: non-native byte order, a null or
misaligned address, read-only outputs, outputs that are torch tensors that
require grad), an output overlapping another plane, and a Param that does not
fit the kernel's compute dtype. Planes of any producer (numpy, eagle, torch,
CuPy, the CUDA array interface, DLPack) are taken through
:func:`eagle.arrays._holder.hold`.

Shapes: a lane plane takes a 1-D array with one value per lane, a flat table
any 1-D array, a named table an array of its declared shape or a 1-D array
of as many values (read row-major; a table of one value any one-element
array), and a Param a number or a one-element array. :func:`layout_key` is
what a binding over a plane depends on, so a binding can be reused for a
later run over planes with the same keys (:func:`layout_keys`).
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

import hawk
from eagle._cache import KeyedCache
from eagle.arrays import Array, _foreign, _holder
from eagle.cuda.stream import FRAMEWORK_STREAMS, framework_of, launch_stream, scoped_stream
from eagle.errors import EagleOverflowError, EagleTypeError, EagleValueError, shown
from hawk import ir
from hawk.dtypes import PLANE_DTYPES, plane_row
from hawk.emit import compute_dtype
from hawk.emit.checks import MAX_LANES
from hawk.kinds import PlaneKind

__all__ = [
    "ROUNDS_TO_INF",
    "ForeignPlanes",
    "Planes",
    "alike_keys",
    "check_planes",
    "detached",
    "extents",
    "layout_key",
    "layout_keys",
    "moved",
    "param_number",
    "param_value",
]

_NUMBER_TYPES = (int, float, np.integer, np.floating)


def _is_number(value: Any) -> bool:
    """True for a number a Param takes: a Python or numpy int or float, or a scalar of a
    plane dtype numpy does not have (an ml_dtypes bfloat16 or fp8 scalar); not a bool."""
    if isinstance(value, _NUMBER_TYPES):
        return not isinstance(value, bool)
    return isinstance(value, np.generic) and plane_row(value.dtype) is not None


_LARGEST = {np.dtype(t): float(np.finfo(t).max) for t in (np.float32, np.float64)}  # compute
#: a compute dtype's first real that rounds to an infinity there, by name: the largest finite
#: value plus half its spacing (float32's largest is printed 3.4028235e+38, a little above it)
ROUNDS_TO_INF = {"float32": 2**128 - 2**103, "float64": 2**1024 - 2**970}  # (exact ints)


@dataclass
class Planes:
    """Checked planes, ready to bind.

    Attributes:
        side: ``"host"`` or ``"device"``.
        device: the device index, or None on the host.
        lanes: the lane count.
        signature: each plane's dtype name, in declaration order (a Param
            given as a number has the kernel's compute dtype).
        real: the kernel's compute dtype.
        values: plane name -> what the kernel takes: on the host a flat numpy
            array (a number Param: a one-element array holding it); on the
            device the Array (a number Param: the number, in ``numbers``).
        numbers: the Params given as numbers, as scalars of ``real``.
        held: the planes another producer made (torch, CuPy, the CUDA array
            interface, DLPack), as :func:`eagle.arrays._holder.hold` took them (who
            made each, its producer's stream, the torch tensor).
        foreign: what launches over them owe other frameworks, or None.
        detached: the values are address views that keep no memory (:func:`detached`).
    """

    side: str
    device: int | None
    lanes: int
    signature: tuple[str, ...]
    real: np.dtype
    values: dict[str, Any]
    numbers: dict[str, np.generic]
    held: dict[str, _holder.Held] = field(default_factory=dict)
    foreign: ForeignPlanes | None = None
    detached: bool = False


@dataclass(frozen=True)
class ForeignPlanes:
    """What each launch over planes from torch, CuPy or another producer owes them, and a
    run over a reused binding owes the planes it is given (other objects, maybe, over
    the same memory).

    Attributes:
        device: the device index, or None on the host.
        written: each written plane given as a torch tensor, and that tensor (None in a
            binding over address views, :func:`detached`): a launch bumps its version, as
            torch's in-place operations do.
        watched: the device planes whose producer queues work on a stream of its own:
            a reused binding's run orders its launch after them.
        apart: those of ``watched`` whose stream is not the one the launch goes to
            even outside ``with stream:`` (another framework's, or a CUDA array
            interface's).
    """

    device: int | None
    written: tuple[tuple[str, Any], ...]
    watched: tuple[str, ...]
    apart: tuple[str, ...]

    @property
    def tensors(self) -> tuple[Any, ...]:
        """The torch tensors bound to the written planes (none for :func:`detached` ones)."""
        return tuple(tensor for _, tensor in self.written if tensor is not None)

    def order(self, planes: Mapping[str, Any], launch_stream: Callable[[], int]) -> None:
        """Make the stream a launch goes to (``launch_stream()``) wait for what the
        producers of ``planes`` queued, as binding them would."""
        device = self.device
        if device is None:
            return
        names = self.watched if scoped_stream(device) is not None else self.apart
        if not names:
            return
        consumer = launch_stream()
        for name in names:
            producer = _holder.producer_of(planes[name], device)
            if producer is not None and producer != consumer:
                _foreign.order(producer, consumer)

    def bump(self, planes: Mapping[str, Any]) -> None:
        """Bump the versions of the torch tensors ``planes`` give for the written planes
        (the launch bumped those of the binding)."""
        others = [planes[name] for name, bound in self.written if planes[name] is not bound]
        if others:
            _holder.bump_versions(others)


def _foreign_planes(
    kernel: ir.KernelIR, held: Mapping[str, _holder.Held], device: int | None
) -> ForeignPlanes | None:
    """What launches over ``held`` owe the planes from other frameworks, or None when none
    is (numpy arrays and eagle Arrays only)."""
    if all(h.framework in _holder.OWN for h in held.values()):
        return None
    written = tuple(
        (plane.name, item.tensor)
        for plane in kernel.planes
        if plane.is_written
        and (item := held.get(plane.name)) is not None
        and item.tensor is not None
    )
    watched = tuple(
        name
        for name, item in held.items()
        if item.framework not in _holder.OWN and not item.array.is_host
    )
    # the framework whose stream a launch goes to outside ``with stream:``: only its own
    # planes' producers queue work there (an interface's stream may be any)
    launching = next((f for h in held.values() if (f := framework_of(h.array))), None)
    apart = tuple(
        name
        for name in watched
        if held[name].framework not in FRAMEWORK_STREAMS
        or framework_of(held[name].array) != launching
    )
    return ForeignPlanes(device, written, watched, apart)


@dataclass
class _Given:
    name: str
    plane: ir.Plane
    value: Any
    side: str  # "host", "device" or "number"
    device: int | None = None
    held: _holder.Held | None = None


class _Names(dict[np.dtype, str]):
    """Each plane dtype's name, kept on first use (``dtype.name`` is computed on each access)."""

    def __missing__(self, dtype: np.dtype) -> str:
        name = self[dtype] = dtype.name
        return name


_DTYPE_NAMES = _Names()


def by_position(call: str, names: Sequence[str], count: int) -> EagleTypeError:
    """The refusal of ``count`` arrays passed to ``call`` by position: planes go by name."""
    keywords = ", ".join(f"{name}=..." for name in names)
    return EagleTypeError(
        f"{call} takes its planes by name, one keyword each: {call}({keywords}); "
        f"{count} argument(s) were passed by position"
    )


def not_a_kernel(call: str, value: Any) -> EagleTypeError:
    """The refusal of ``value`` where ``call`` takes a ``@hawk.kernel`` function, saying
    how to get one from what was passed."""
    if isinstance(getattr(value, "kernel", None), hawk.Kernel):
        advice = f"it is a plan; pass its kernel, {call}(plan.kernel)"
    elif isinstance(value, types.FunctionType):
        advice = (
            f"{value.__name__!r} is a plain function; put @hawk.kernel on the line above its def"
        )
    else:
        advice = "pass a function decorated with @hawk.kernel"
    return EagleTypeError(
        f"{call} takes a @hawk.kernel function, not {type(value).__name__}: {advice}"
    )


def check_planes(kernel: ir.KernelIR, planes: Mapping[str, Any]) -> Planes:
    """Check ``planes`` (plane name -> array or number) against ``kernel``'s planes.

    Raises:
        TypeError: an unknown or missing plane, a value that is not an array
            (or, for a Param, a number), a dtype hawk planes do not take, or
            one in non-native byte order.
        ValueError: mixed residency, a wrong shape or lane count, a
            non-contiguous, null or misaligned array, a written plane that is
            read-only or a torch tensor that requires grad, or overlapping
            outputs.
        OverflowError: a Param number too large for the compute dtype.
    """
    names = [p.name for p in kernel.planes]
    for name in planes:
        if name not in names:
            raise EagleTypeError(
                f"kernel {kernel.name!r} has no plane {name!r}; its planes are {', '.join(names)}"
            )
    missing = [name for name in names if name not in planes]
    if missing:
        raise EagleTypeError(
            f"missing plane(s) {', '.join(map(repr, missing))} of kernel {kernel.name!r}; "
            f"pass every plane by name: {', '.join(f'{name}=...' for name in names)}"
        )
    given = [_classify(p, planes[p.name]) for p in kernel.planes]
    side, device = _residency(given)
    arrays_given = [g for g in given if g.side != "number"]
    for item in arrays_given:
        _check_array(item)
    held = {g.name: g.held for g in arrays_given if g.held is not None}
    if device is not None:  # the launch waits for what the planes' producers queued
        stream = launch_stream([g.value for g in arrays_given], device)
        _holder.order_after(held.values(), stream)
    foreign = _foreign_planes(kernel, held, device)
    lanes = _lane_count(given)
    _check_overlaps(arrays_given)
    array_dtypes = {g.name: np.dtype(g.value.dtype) for g in arrays_given}
    real = compute_dtype(array_dtypes)
    signature = tuple(_DTYPE_NAMES[array_dtypes.get(g.name, real)] for g in given)
    numbers = {g.name: param_value(g.name, g.value, real) for g in given if g.side == "number"}
    values = {g.name: _prepare(g, side, numbers) for g in given}
    return Planes(side, device, lanes, signature, real, values, numbers, held, foreign)


def alike_keys(keys: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """Planes' :func:`layout_keys` with each address replaced by how it aligns
    (:func:`~eagle.arrays._holder.aligned_alike`): equal for device planes laid out alike at
    addresses that align alike, which :func:`moved` checks as the first were checked. None
    when ``keys`` is, or a plane is no device array of eagle, torch or CuPy with an
    address."""
    if keys is None:
        return None
    alike = []
    for key in keys:
        class_ = _holder.aligned_alike(key)
        if class_ is None:
            return None
        alike.append(class_)
    return tuple(alike)


def extents(kernel: ir.KernelIR, checked: Planes) -> tuple[tuple[bool, int], ...]:
    """For each plane of ``checked``, in order: whether ``kernel`` writes it, and its bytes
    (what :func:`moved` checks of planes at other addresses)."""
    written = {p.name for p in kernel.planes if p.is_written}
    return tuple((name in written, value.nbytes) for name, value in checked.values.items())


def moved(
    checked: Planes,
    sizes: tuple[tuple[bool, int], ...],
    planes: Mapping[str, Any],
    keys: tuple[Any, ...],
    stream: int,
) -> Planes | None:
    """``planes`` checked as :func:`check_planes` checked those of ``checked``, whose
    :func:`alike_keys` they share (``sizes``: their :func:`extents`; ``keys``: the
    planes' :func:`layout_keys`, in the kernel's plane order): only what depends on
    the addresses is checked again (each written plane apart from the others; a non-null,
    aligned address is in the keys). ``stream``, the one a launch over them goes to
    (:func:`~eagle.cuda.stream.launch_stream`), waits for what their producers queued, as
    after :func:`check_planes`. None when a written plane overlaps another:
    :func:`check_planes` then says which.
    """
    values: dict[str, Any] = {}
    held: dict[str, _holder.Held] = {}
    spans = []
    # (the kernel's plane order; an alike key's third entry is the plane's address)
    for (name, like), key, (writes, nbytes) in zip(
        checked.values.items(), keys, sizes, strict=True
    ):
        value = planes[name]
        if type(value) is not Array:
            item = held[name] = _holder.hold_alike(value, key, like)
            value = item.array
        values[name] = value
        spans.append((writes, key[2], key[2] + nbytes))
    if _written_overlap(spans) is not None:
        return None
    device = checked.device
    assert device is not None  # (device planes alone have alike keys)
    foreign = checked.foreign
    if held:
        _holder.order_after(held.values(), stream)
        if foreign is not None and foreign.written:
            tensors = tuple((name, held[name].tensor) for name, _ in foreign.written)
            foreign = ForeignPlanes(device, tensors, foreign.watched, foreign.apart)
    return Planes(
        checked.side, device, checked.lanes, checked.signature, checked.real, values, {}, held,
        foreign,
    )  # fmt: skip


def detached(checked: Planes) -> Planes:
    """``checked`` planes seen through address views that keep no memory alive: on the
    device, Arrays at the same addresses, in the same layout and of the same framework;
    on the host, numpy views of the same memory (a number Param's own one-element array
    kept). The torch tensors written are left out (a run bumps the versions of those it
    is given).

    A binding over them depends only on the planes' layout keys (address included), so
    plans may share it by those keys without keeping anyone's arrays alive: a run reuses
    it only for arrays alive at those addresses, in that layout.
    """
    if checked.side == "host":
        values = {
            name: value if name in checked.numbers else _host_address_view(value)
            for name, value in checked.values.items()
        }
    else:
        values = {
            name: _address_view(value) if isinstance(value, Array) else value
            for name, value in checked.values.items()
        }
    foreign = checked.foreign
    if foreign is not None:
        foreign = replace(foreign, written=tuple((name, None) for name, _ in foreign.written))
    return replace(checked, values=values, held={}, foreign=foreign, detached=True)


def _host_address_view(array: np.ndarray) -> np.ndarray:
    address = array.__array_interface__["data"][0]
    layout = _holder.Layout(
        address, array.shape, array.strides, array.dtype, not array.flags.writeable
    )
    return _foreign.host_view(layout, None)


def _address_view(array: Array) -> Array:
    framework = framework_of(array)
    return Array(
        ptr=array.ptr,
        shape=array.shape,
        dtype=array.dtype,
        strides=array.strides,
        device_index=array.device_index,
        owner=None if framework is None else _foreign.Source(None, framework),
        readonly=array.readonly,
    )


def param_value(name: str, value: Any, real: np.dtype) -> np.generic:
    """Param ``name``'s number as a scalar of the compute dtype ``real``.

    Infinities and NaN are values like any other.

    Raises:
        OverflowError: ``value`` is finite but too large for ``real``.
    """
    return real.type(param_number(name, value, real))


def param_number(name: str, value: Any, real: np.dtype) -> float:
    """Param ``name``'s number as a float that fits the compute dtype ``real`` (rounded to
    ``real`` where it is stored): :func:`param_value`'s checks, without making a scalar.

    Raises:
        OverflowError: ``value`` is finite but too large for ``real``.
    """
    number = fitted_number(value, real.name)
    if number is not None:
        return number
    raise EagleOverflowError(
        f"Param {name!r} is {_short(value)}, too large for {real.name} (the dtype the "
        f"kernel computes in); pass a number within ±{_LARGEST[real]:.8g}"
        + (" or float64 planes" if real != np.float64 else "")
    )


def fitted_number(value: Any, real: str) -> float | None:
    """A Param's number as the float a kernel computing in ``real`` (``"float32"`` or
    ``"float64"``) takes: ``float(value)`` (an int is rounded to float64 first, as every
    caller rounds it), None where that is finite and rounds to an infinity in ``real``, or
    ``value`` is an int beyond any float. Infinities and NaN are numbers like any other.
    ``plan.run`` and ``eagle.torch`` both check their Params by it."""
    limit = ROUNDS_TO_INF[real]
    try:
        number = float(value)
    except OverflowError:
        return None  # an int beyond any float
    if -limit < number < limit or not (math.isfinite(number) or _finite(value)):
        return number
    return None


def _finite(value: Any) -> bool:
    """Whether ``value``, whose float is not finite, was finite itself: a numpy long double
    beyond float64 (an overflow), not an infinity or NaN given as one."""
    return isinstance(value, np.generic) and bool(np.isfinite(value))


def _short(value: Any) -> str:
    if isinstance(value, int | np.integer) and abs(int(value)) >= 10**24:
        return f"an int of {int(value).bit_length()} bits"
    return repr(value)


def layout_key(value: Any) -> tuple[Any, ...] | None:
    """What a binding depends on in one plane's ``value``, or None if it cannot say.

    An array gives :func:`eagle.arrays._holder.layout_key`: its address, shape,
    strides, dtype, device and writability (a torch tensor: also whether it
    requires grad); a number gives ``("number",)``, as its value goes into the
    binding at each run. Anything else (a DLPack-only producer, whose capsule
    is taken at each bind; a bool; a wrong type) gives None: such planes are
    bound afresh each time.
    """
    keyed = _KEYS.get(type(value))  # the common types, found by their exact type
    if keyed is not None:
        return keyed(value)
    if _is_number(value):
        return _NUMBER_KEY
    if isinstance(value, bool | np.bool_):
        return None
    key = _holder.layout_key(value)
    typed = _holder.typed_key(type(value))
    if typed is not None and _holder.kept_type(type(value), len(_KEYS)):  # a tensor's, say
        _KEYS[type(value)] = typed  # found by type from now on
    return key


def layout_keys(planes: Mapping[str, Any], names: tuple[str, ...]) -> tuple[Any, ...] | None:
    """The :func:`layout_key` of each of ``planes`` named ``names``, in that order, or None
    when one cannot say, a name is missing or ``planes`` hold other names too."""
    if len(planes) != len(names):
        return None
    get = planes.get
    keys = []
    for name in names:
        value = get(name)
        key = _KEYS.get(type(value), layout_key)(value)
        if key is None:
            return None
        keys.append(key)
    return tuple(keys)


_NUMBER_KEY = ("number",)


def _number_key(_value: Any) -> tuple[str]:
    return _NUMBER_KEY


#: how :func:`layout_key` keys a value of exactly one of these types (bool is no number);
#: the types of torch tensors and CuPy arrays join when first seen
_KEYS: dict[type, Callable[[Any], tuple[Any, ...] | None]] = {
    float: _number_key,
    int: _number_key,
    np.float32: _number_key,
    np.float64: _number_key,
}
for _type in (Array, np.ndarray):
    _KEYS[_type] = _holder.typed_key(_type) or layout_key
del _type


def _classify(plane: ir.Plane, value: Any) -> _Given:
    if type(value) is np.ndarray:  # the common cases first, as they are
        return _Given(plane.name, plane, value, "host")
    if type(value) is Array:
        if value.is_host:
            return _Given(plane.name, plane, value.numpy(), "host")
        return _Given(plane.name, plane, value, "device", value.device_index)
    number = _is_number(value)
    if plane.kind == PlaneKind.PARAM and number:
        return _Given(plane.name, plane, value, "number")
    try:
        held = None if number else _holder.hold(value)  # torch, CuPy...: the same memory
    except (EagleTypeError, EagleValueError) as exc:  # an array eagle cannot take
        raise type(exc)(f"plane {plane.name!r}: {exc}") from None
    if held is None:
        if plane.kind == PlaneKind.PARAM:
            raise EagleTypeError(
                f"plane {plane.name!r} is a Param, and {shown(value)} is not a number it takes; "
                "pass an int or a float (not a bool), or a one-element array"
            )
        raise EagleTypeError(
            f"plane {plane.name!r} is a {type(value).__name__}; pass a numpy array, an "
            "eagle Array, or an array with __dlpack__ or __cuda_array_interface__ (torch, CuPy)"
        )
    array = held.array
    if array.is_host:
        return _Given(plane.name, plane, array.numpy(), "host", held=held)
    return _Given(plane.name, plane, array, "device", array.device_index, held)


def _residency(given: list[_Given]) -> tuple[str, int | None]:
    host_planes = [g for g in given if g.side == "host"]
    device_planes = [g for g in given if g.side == "device"]
    if host_planes and device_planes:
        raise EagleValueError(
            f"plane {device_planes[0].name!r} is on cuda:{device_planes[0].device} but plane "
            f"{host_planes[0].name!r} is on the host; pass every plane on one side"
        )
    devices = {g.device for g in device_planes}
    if len(devices) > 1:
        first = device_planes[0]
        other = next(g for g in device_planes if g.device != first.device)
        raise EagleValueError(
            f"plane {first.name!r} is on cuda:{first.device} but plane {other.name!r} is on "
            f"cuda:{other.device}; pass every plane on one device"
        )
    if device_planes:
        return "device", device_planes[0].device
    return "host", None


def _check_array(item: _Given) -> None:
    plane, array, held = item.plane, item.value, item.held
    written = plane.is_written
    grad = held is not None and held.grad
    layout = (plane, item.side, array.shape, array.strides, array.dtype)
    known = layout in _LAYOUTS  # checked before: native byte order, aligned strides
    if known and item.side == "device":
        ptr = array.ptr  # what check_buffer would still look at, accepted at once
        if ptr and not ptr % array.dtype.alignment and not (written and (grad or array.readonly)):
            return
    # what neither side takes: byte order, a null or misaligned address, a write into
    # read-only memory or into a tensor that requires grad
    _holder.check_buffer(array, f"plane {item.name!r}", written=written, grad=grad)
    if known:  # what follows depends on nothing else
        return
    dtype = np.dtype(array.dtype)
    if plane_row(dtype) is None:
        raise EagleTypeError(
            f"plane {item.name!r} is {dtype}; hawk planes are {', '.join(PLANE_DTYPES)}"
        )
    shape = tuple(array.shape)
    if plane.is_lane and len(shape) != 1:
        raise EagleValueError(
            f"plane {item.name!r} ({plane.declaration()}) takes a 1-D array with one value per "
            f"lane, not shape {shape}"
        )
    if plane.is_table and plane.axes is None and len(shape) != 1:
        raise EagleValueError(
            f"plane {item.name!r} is a flat {plane.declaration()}: pass a 1-D array, not "
            f"shape {shape}"
        )
    declared = plane.shape
    count = math.prod(shape)
    if (
        declared is not None
        and shape != declared
        and shape != (math.prod(declared),)
        and not (count == 1 and math.prod(declared) == 1)  # one value: any one-element array
    ):
        if math.prod(declared) == 1:  # (a Param's gradient, summed over lanes, is one)
            raise EagleValueError(
                f"plane {item.name!r} is {plane.declaration()}, one value: pass a one-element "
                f"array, such as numpy.zeros(1), not shape {shape}"
            )
        raise EagleValueError(
            f"plane {item.name!r} is {plane.declaration()}: pass an array of shape {declared} "
            f"(or a 1-D array of its {math.prod(declared)} values, row-major), not shape {shape}"
        )
    if plane.kind == PlaneKind.PARAM and count != 1:
        raise EagleValueError(
            f"plane {item.name!r} is a Param: pass a number or a one-element array, not shape "
            f"{shape}"
        )
    contiguous = array.flags.c_contiguous if item.side == "host" else array.is_contiguous
    if not contiguous:
        advice = (
            # (a copy of a written plane would take the results, and be dropped)
            "write into a row-major array, e.g. numpy.empty(shape), then copy it into "
            "your view (view[...] = out)"
            if plane.is_written
            else "pass a row-major copy, e.g. numpy.ascontiguousarray(x) or x.contiguous()"
        )
        raise EagleValueError(
            f"plane {item.name!r} is not row-major and contiguous (a strided view, or column-"
            f"major order); {advice}"
        )
    _LAYOUTS[layout] = True


#: (plane, side, shape, strides, dtype) of arrays whose layout a plane was found to take
_LAYOUTS: KeyedCache[tuple[Any, ...], bool] = KeyedCache("checked plane layouts", 1024)


def _lane_count(given: list[_Given]) -> int:
    lanes = [(g.name, int(g.value.shape[0])) for g in given if g.plane.is_lane]
    first_name, count = lanes[0]
    if count > MAX_LANES:  # the emitters take every lane below it (int64 proofs)
        raise EagleValueError(
            f"plane {first_name!r} has {count} values: a kernel runs at most {MAX_LANES} "
            "lanes; split the work into several launches"
        )
    for name, other in lanes[1:]:
        if other != count:
            raise EagleValueError(
                f"plane {name!r} has {other} values but plane {first_name!r} has {count}; every "
                "lane plane (Scalar, Mutable[Scalar]) holds one value per lane"
            )
    return count


def _byte_range(item: _Given) -> tuple[int, int]:
    array = item.value
    start = array.__array_interface__["data"][0] if item.side == "host" else array.ptr
    return start, start + array.nbytes


def _check_overlaps(given: list[_Given]) -> None:
    spans = [(g.plane.is_written, *_byte_range(g)) for g in given]
    found = _written_overlap(spans)
    if found is not None:
        item, other = given[found[0]], given[found[1]]
        raise EagleValueError(
            f"planes {item.name!r} and {other.name!r} share memory and the kernel writes "
            "one of them; pass separate arrays (a Mutable plane is read and written in place)"
        )


def _written_overlap(spans: list[tuple[bool, int, int]]) -> tuple[int, int] | None:
    """The positions of the first two of ``spans`` (whether the kernel writes it, its first
    and past-last byte) that share memory, one of them written; None when none do."""
    for position, (writes, start, end) in enumerate(spans):
        for other in range(position + 1, len(spans)):
            other_writes, other_start, other_end = spans[other]
            if (writes or other_writes) and start < other_end and other_start < end:
                return position, other
    return None


def _prepare(item: _Given, side: str, numbers: Mapping[str, np.generic]) -> Any:
    if item.side == "number":
        number = numbers[item.name]
        return np.array([number]) if side == "host" else number
    if side == "host":
        return item.value.reshape(-1)
    return item.value
