"""The matmul step: ``out = op(a) @ op(b)`` over named buffers, on the host or the device.

On the host it is numpy's matmul through transposed views (16-bit and fp8 factors
are multiplied in float32 and rounded once into ``out``; fp8 products are scaled);
on the device one cuBLAS (or, fp8, cuBLASLt) call on eagle's current stream, through
the stream's cached :class:`~eagle.gemm.CublasCaptureHandle` (no allocation, no
synchronisation).
The device step checks a product the first time it sees its buffers' pointers,
shapes, strides, dtypes and device, and keeps the prepared call under exactly
those values.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from eagle._cache import KeyedCache
from eagle.arrays import Array
from eagle.cuda.graph import record_use
from eagle.cuda.stream import launch_stream
from eagle.errors import EagleTypeError, shown
from eagle.gemm._host import host_product, product_views
from eagle.gemm._operands import Operand, bump_written, check_flags, operand, ordered
from eagle.gemm._prepared import Call
from eagle.gemm.capture import CublasCaptureHandle
from eagle.gemm.dtypes import SCALED_DTYPES, dtype_of, product_dtypes
from eagle.gemm.errors import GemmMappingUnavailable, MatmulUnavailable, PlanUnavailable
from eagle.gemm.handles import stream_handle
from eagle.gemm.params import (
    GemmParams,
    _check_out_apart,
    _layout_for_arrays,
    check_scaled_layout,
    check_scaled_pointer,
)
from eagle.gemm.steps import MatmulSpec, PlanStep, _out_shape, _roles, _where

__all__ = ["matmul_step"]

_CACHED_PRODUCTS = 256  # checked products a device step keeps (the least recent go first)


def matmul_step(
    name: str,
    *,
    a: str,
    b: str,
    out: str,
    transpose_a: bool = False,
    transpose_b: bool = False,
    transpose_out: bool = False,
    a_scale: str | None = None,
    b_scale: str | None = None,
) -> PlanStep:
    """A step computing ``out = op(a) @ op(b)`` over the buffers named ``a``, ``b``, ``out``.

    The buffers' dtypes follow :mod:`eagle.gemm.dtypes` (bfloat16, float16,
    float32, float64 or fp8 factors; a 16-bit product may write float32, an fp8
    one writes bfloat16 or float32). On the host it is numpy's matmul through
    transposed views, written into ``out`` in place; 16-bit and fp8 factors are
    multiplied in float32 and rounded once into ``out``. On the device it is one
    cuBLAS call (Sgemm, Dgemm, or GemmEx summing in float32; cublasLtMatmul for
    fp8) on eagle's current stream, through a handle cached per device and
    stream: no allocation and no synchronisation per call. A contracted extent
    of 0 is a product: ``out`` is set to zeros (not of fp8 factors, whose products
    need every extent). Running the step refuses
    (:class:`~eagle.gemm.MatmulUnavailable`, naming the buffer) a read-only
    ``out`` on the host, and on the device an ``out`` that shares memory with
    ``a`` or ``b``, which cuBLAS does not allow.

    An fp8 product computes ``out = (a_scale * b_scale) * op(a) @ op(b)`` in the
    one layout its products take (``transpose_a=False``, ``transpose_b=True``: see
    :func:`~eagle.gemm.params.check_scaled_layout`), on both sides; each scale is
    a one-element float32 buffer, read when the step runs (on the device, when the
    product runs: a replayed capture reads its current value).

    Args:
        name: the step's name.
        a, b: the operands' buffer names.
        out: the destination's buffer name.
        transpose_a, transpose_b: ``op(x)`` is ``x.T`` when set.
        transpose_out: ``out`` receives the product transposed.
        a_scale, b_scale: the names of ``a``'s and ``b``'s scales (fp8 factors
            only), or None for a scale of 1.

    Raises:
        PlanUnavailable: ``out`` is also an operand or a scale.
        TypeError: a buffer name that is not a string, or a transpose flag that is not
            True or False.
    """
    named = {"a": a, "b": b, "out": out, "a_scale": a_scale, "b_scale": b_scale}
    for argument, value in named.items():
        if not isinstance(value, str) and not (argument.endswith("_scale") and value is None):
            raise EagleTypeError(
                f"matmul step {name!r}: {argument} must be the name of a buffer (a str), not "
                f"{shown(value)}; the buffers themselves are passed to run(bufs, ...)"
            )
    if out in (a, b, a_scale, b_scale):
        raise PlanUnavailable(
            f"matmul step {name!r}: out {out!r} is also an operand; a product cannot write "
            f"over its own input"
        )
    flags = check_flags(transpose_a, transpose_b, transpose_out)
    spec = MatmulSpec(a, b, out, *flags, a_scale, b_scale)
    return PlanStep(
        name,
        "matmul",
        tuple(dict.fromkeys((a, b, *spec.scales.values()))),
        (out,),
        _DeviceMatmul(name, spec),
        functools.partial(_host_matmul, name, spec),
        matmul=spec,
    )


def _lookup(step: str, spec: MatmulSpec, bufs: Mapping[str, Any]) -> tuple[Any, ...]:
    """The step's buffers: a, b, out, then its scales (those it names)."""
    try:
        return (bufs[spec.a], bufs[spec.b], bufs[spec.out],
                *(bufs[name] for name in spec.scales.values()))  # fmt: skip
    except KeyError as exc:
        raise MatmulUnavailable(
            f"matmul step {step!r}: buffer {exc.args[0]!r} is not bound (bound: {sorted(bufs)}); "
            f"add {exc.args[0]!r}: <array> to the buffers"
        ) from None


def _dtypes(step: str, spec: MatmulSpec, of: Sequence[Any]) -> tuple[str, str, str]:
    """The product's exact (dtype, out_dtype, math) for the dtypes ``of`` a, b and out, or
    MatmulUnavailable naming the buffers."""
    dtypes = [np.dtype(dtype) for dtype in of]
    try:
        return product_dtypes(*dtypes)
    except GemmMappingUnavailable as exc:
        raise MatmulUnavailable(
            f"matmul step {step!r}: a={spec.a!r} is {dtypes[0]}, b={spec.b!r} is {dtypes[1]}, "
            f"out={spec.out!r} is {dtypes[2]}; {exc}"
        ) from None


#: the host products checked already (by step, spec, shapes and dtypes) -> their factors'
#: dtype
_checked_host: KeyedCache[tuple[Any, ...], str] = KeyedCache("host product checks", 256)


def _check_host(step: str, spec: MatmulSpec, a: Any, b: Any, out: Any) -> str:
    """Check a host product's shapes and dtypes (each combination once: the answer is
    kept); its factors' dtype."""
    key = (step, spec, a.shape, b.shape, out.shape, a.dtype, b.dtype, out.dtype)
    last = _checked_host.last
    if last is not None and last[0] == key:
        _checked_host.hits += 1
        return last[1]
    dtype = _checked_host.get(key)
    if dtype is not None:
        return dtype
    dtype = _dtypes(step, spec, key[5:])[0]
    want = _out_shape(step, spec, a.shape, b.shape, MatmulUnavailable, cublas=False)
    if out.shape != want:
        raise MatmulUnavailable(
            f"matmul step {step!r}: out {spec.out!r} has shape {out.shape}; it must have "
            f"shape {want}"
        )
    _checked_host[key] = dtype
    return dtype


def _taken(step: str, spec: MatmulSpec, bufs: Mapping[str, Any], side: str) -> list[Operand]:
    """The step's buffers (a, b, out, then its scales) as ``side`` takes them (torch
    tensors, CuPy arrays...: the same memory), each checked by the check host and device
    share."""
    taken = []
    names = (spec.a, spec.b, spec.out, *spec.scales.values())
    roles = ("buffer", "buffer", "out", *spec.scales)
    for role, name, buffer in zip(roles, names, _lookup(step, spec, bufs), strict=True):
        label = f"matmul step {step!r}: {role} {name!r}"
        written, sync = role == "out", side == "device"
        item = operand(buffer, label, side=side, written=written, error=MatmulUnavailable,
                       sync=sync, where=_where)  # fmt: skip
        taken.append(item)
    return taken


def _host_matmul(step: str, spec: MatmulSpec, bufs: Mapping[str, Any]) -> None:
    taken = _taken(step, spec, bufs, "host")
    a, b, out, *scales = (item.array for item in taken)
    dtype = _check_host(step, spec, a, b, out)
    try:  # (numpy would compute it, but the device cannot: both refuse it)
        _check_out_apart({"a": a, "b": b, "out": out})
    except GemmMappingUnavailable as exc:
        raise MatmulUnavailable(f"matmul step {step!r} ({_roles(spec)}): {exc}") from exc
    _refuse_scales(step, spec, dtype)
    scale = None
    if dtype in SCALED_DTYPES:  # in the layout the device takes; scaled once summed
        scale = _host_scale(step, spec, a, b, out, scales)
    left, right = product_views(
        a, b,
        transpose_a=spec.transpose_a, transpose_b=spec.transpose_b,
        transpose_out=spec.transpose_out,
    )  # fmt: skip
    with np.errstate(all="ignore"):  # inf * 0 is NaN, as on the device, never a warning
        host_product(left, right, out, 1.0 if scale is None else float(scale))
    bump_written(taken[2])


def _host_scale(
    step: str, spec: MatmulSpec, a: Any, b: Any, out: Any, scales: list[Any]
) -> np.float32:
    """An fp8 step's scale on the host, ``a_scale * b_scale`` in float32, after the checks
    the device makes of its layout and its scales."""
    try:
        layout = _layout_for_arrays(
            {"a": a, "b": b, "out": out}, 1,
            spec.transpose_a, spec.transpose_b, spec.transpose_out, out.dtype.itemsize,
        )  # fmt: skip
        check_scaled_layout(layout, out.dtype.itemsize)
    except GemmMappingUnavailable as exc:
        raise MatmulUnavailable(f"matmul step {step!r} ({_roles(spec)}): {exc}") from exc
    product = np.float32(1.0)
    for (role, name), value in zip(spec.scales.items(), scales, strict=True):
        _check_scale(step, role, name, value)
        with np.errstate(all="ignore"):  # scales whose product overflows give inf, quietly
            product = product * np.float32(value.reshape(-1)[0])
    return product


def _refuse_scales(step: str, spec: MatmulSpec, dtype: str) -> None:
    """Refuse scales named by a step whose factors are not fp8."""
    if spec.scales and dtype not in SCALED_DTYPES:
        named = ", ".join(f"{role}={name!r}" for role, name in spec.scales.items())
        raise MatmulUnavailable(
            f"matmul step {step!r}: {named} scale a {dtype} product; per-tensor scales are "
            f"for fp8 factors ({', '.join(SCALED_DTYPES)})"
        )


def _check_scale(step: str, role: str, name: str, value: Any) -> None:
    """Refuse a scale that is not one float32 element."""
    if np.dtype(value.dtype) != np.float32 or math.prod(value.shape) != 1:
        raise MatmulUnavailable(
            f"matmul step {step!r}: {role} {name!r} is {value.dtype} of shape "
            f"{tuple(value.shape)}; a scale is one float32 element"
        )


class _DeviceMatmul:
    """A matmul step's device function: its products checked once per buffer layout."""

    def __init__(self, step: str, spec: MatmulSpec) -> None:
        self.step, self.spec = step, spec
        self._names = (spec.a, spec.b, spec.out)
        self._scales = tuple(spec.scales.values())  # the scale buffers' names (fp8)
        # (each buffer's pointer, shape, strides, dtype, device, and each scale's pointer)
        # -> the checked product and its prepared call on each stream's handle
        self._products: KeyedCache[tuple[Any, ...], _Product] = KeyedCache(
            "matmul step products", _CACHED_PRODUCTS
        )

    def __reduce__(self) -> tuple[Any, ...]:
        """Copied or pickled as its step and spec: the copy checks its products afresh."""
        return (_DeviceMatmul, (self.step, self.spec))

    def __call__(self, bufs: Mapping[str, Any]) -> None:
        taken: list[Operand] = []
        name_a, name_b, name_out = self._names
        try:
            a, b, out = bufs[name_a], bufs[name_b], bufs[name_out]
            scales: tuple[Any, ...] = ()
            if self._scales:  # (fp8)
                scales = tuple(bufs[name] for name in self._scales)
        except KeyError:  # not bound: taking them names it
            a = b = out = None
            scales = ()
        product = None
        if isinstance(a, Array) and isinstance(b, Array) and isinstance(out, Array):
            # as _key reads them, inline (a call costs as much again on this path)
            plain = (a._ptr, a.shape, a.strides, a.dtype, a._device_index,
                     b._ptr, b.shape, b.strides, b.dtype, b._device_index,
                     out._ptr, out.shape, out.strides, out.dtype, out._device_index)  # fmt: skip
            # (fp8) the prepared call holds the scales' addresses; None: one is no eagle Array
            key = _scaled_key(plain, scales) if scales else plain
            if key is not None:
                products = self._products
                last = products.last
                if last is not None and last[0] == key:  # as the last call: no hashing
                    product = last[1]
                    products.hits += 1
                else:
                    product = products.get(key)
        if product is None:  # not seen, or not eagle Arrays: taken and checked
            taken = _taken(self.step, self.spec, bufs, "device")
            a, b, out, *listed = (item.array for item in taken)
            scales = tuple(listed)
            product = self._checked(a, b, out, scales)
        device = product.device
        stream_ptr = launch_stream((a, b, out), device)
        if taken:  # the producers' queued work comes first
            ordered(taken, stream_ptr)
        handle = stream_handle(stream_ptr, device)
        on = product.on
        prepared = on[1] if on is not None and on[0]() is handle else product.prepare(handle)
        prepared.function(*prepared.args)
        record_use(stream_ptr, handle, a, b, out, *scales)
        if taken:
            bump_written(taken[2])

    def _checked(self, a: Any, b: Any, out: Any, scales: tuple[Any, ...]) -> _Product:
        """The product over these device arrays (and the scales the step names): found
        when seen before, else checked in full and kept under the buffers' values as
        :meth:`__call__` reads them."""
        arrays = isinstance(a, Array) and isinstance(b, Array) and isinstance(out, Array)
        key = _scaled_key(_key(a, b, out), scales) if arrays else None  # (None: never found)
        if key is not None and key in self._products:
            found = self._products.get(key)
            if found is not None:
                return found
        step, spec = self.step, self.spec
        device = a.device_index
        if b.device_index != device or out.device_index != device:
            raise MatmulUnavailable(
                f"matmul step {step!r}: a={spec.a!r} is on {a.device}, b={spec.b!r} on "
                f"{b.device}, out={spec.out!r} on {out.device}; put them on one device"
            )
        dtypes = _dtypes(step, spec, (a.dtype, b.dtype, out.dtype))  # a's, out's and the math
        _refuse_scales(step, spec, dtypes[0])
        scaled = dtypes[0] in SCALED_DTYPES
        try:
            layout = _layout_for_arrays(
                {"a": a, "b": b, "out": out},
                _itemsize(a), spec.transpose_a, spec.transpose_b, spec.transpose_out,
                _itemsize(out),
            )  # fmt: skip
            if scaled:
                check_scaled_layout(layout, _itemsize(out))
                for name, array in (("a", a), ("b", b), ("out", out)):
                    check_scaled_pointer(name, array.ptr)
        except GemmMappingUnavailable as exc:
            raise MatmulUnavailable(f"matmul step {step!r} ({_roles(spec)}): {exc}") from exc
        by_role = {}
        for (role, name), scale in zip(spec.scales.items(), scales, strict=True):
            _check_scale(step, role, name, scale)
            if scale.device_index != device:
                raise MatmulUnavailable(
                    f"matmul step {step!r}: {role} {name!r} is on {scale.device}, the factors "
                    f"on cuda:{device}; put them on one device"
                )
            by_role[role] = scale.ptr
        params = GemmParams(*layout, *dtypes, dtype_of(b.dtype).name)
        first, second = (a, b) if params.operands == ("a", "b") else (b, a)
        at = tuple(by_role.get(f"{name}_scale", 0) for name in params.operands)
        product = _Product(params, device, (first.ptr, second.ptr, out.ptr), (at[0], at[1]))
        if key is not None:
            self._products[key] = product
        return product


def _key(a: Any, b: Any, out: Any) -> tuple[Any, ...]:
    """What a device step keeps a checked product under: each buffer's pointer, shape,
    strides, dtype and device, read from an Array's slots behind its read-only ptr and
    device_index (cheaper than the properties)."""
    return (a._ptr, a.shape, a.strides, a.dtype, a._device_index,
            b._ptr, b.shape, b.strides, b.dtype, b._device_index,
            out._ptr, out.shape, out.strides, out.dtype, out._device_index)  # fmt: skip


def _scaled_key(key: tuple[Any, ...], scales: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """``key`` with each scale's address (an fp8 product's call holds them), or None when
    a scale is no eagle Array."""
    if not all(isinstance(scale, Array) for scale in scales):
        return None
    return key + tuple(scale._ptr for scale in scales)


def _itemsize(array: Any) -> int:
    return dtype_of(array.dtype).itemsize


class _Product:
    """A checked product of a device step: its params, device and pointers, and its
    prepared call (alpha 1, beta 0) on each handle that ran it."""

    __slots__ = ("calls", "device", "on", "params", "pointers", "scales")

    def __init__(
        self,
        params: GemmParams,
        device: int,
        pointers: tuple[int, int, int],
        scales: tuple[int, int] = (0, 0),
    ) -> None:
        self.params, self.device, self.pointers = params, device, pointers
        self.scales = scales  # the addresses of cuBLAS's first and second operand's scales
        # weakly keyed: a stream's handle goes with its stream
        self.calls: weakref.WeakKeyDictionary[CublasCaptureHandle, Call] = (
            weakref.WeakKeyDictionary()
        )
        # the handle (weakly) and call of the last run, found without hashing the handle
        self.on: tuple[weakref.ref[CublasCaptureHandle], Call] | None = None

    def prepare(self, handle: CublasCaptureHandle) -> Call:
        """The product's call on ``handle`` (a stream's exact-FP32 handle), made on first
        use, now the last run's."""
        prepared = self.calls.get(handle)
        if prepared is None:
            handle._check_alive()
            first, second, out = self.pointers
            key = (self.params, *self.pointers)
            prepared = handle._call(self.params, first, second, out, key, 1.0, 0.0, self.scales)
            self.calls[handle] = prepared
        self.on = (weakref.ref(handle), prepared)
        return prepared
