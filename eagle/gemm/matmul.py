"""The matmul step: ``out = op(a) @ op(b)`` over named buffers, on the host or the device.

On the host it is numpy's matmul through transposed views; on the device one
cuBLAS Sgemm or Dgemm on eagle's current stream, through the stream's cached
:class:`~eagle.gemm.CublasCaptureHandle` (no allocation, no synchronisation).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from eagle.cuda.graph import record_use
from eagle.cuda.stream import current_stream
from eagle.gemm.capture import stream_handle
from eagle.gemm.errors import GemmMappingUnavailable, MatmulUnavailable, PlanUnavailable
from eagle.gemm.params import SgemmParams, _check_out_apart, product_shape, sgemm_params
from eagle.gemm.steps import _FLOATS, MatmulSpec, PlanStep, _host_view, _roles, _where

__all__ = ["matmul_step"]


def matmul_step(
    name: str,
    *,
    a: str,
    b: str,
    out: str,
    transpose_a: bool = False,
    transpose_b: bool = False,
    transpose_out: bool = False,
) -> PlanStep:
    """A step computing ``out = op(a) @ op(b)`` over the buffers named ``a``, ``b``, ``out``.

    On the host it is numpy's matmul through transposed views (float32 or
    float64), written into ``out`` in place. On the device it is one cuBLAS
    Sgemm (float32) or Dgemm (float64) on eagle's current stream, through a
    handle cached per device and stream: no allocation and no synchronisation
    per call. A contracted extent of 0 is a product: ``out`` is set to zeros.
    Running the step refuses (:class:`~eagle.gemm.MatmulUnavailable`, naming
    the buffer) a read-only ``out`` on the host, and on the device an ``out``
    that shares memory with ``a`` or ``b``, which cuBLAS does not allow.

    Args:
        name: the step's name.
        a, b: the operands' buffer names.
        out: the destination's buffer name.
        transpose_a, transpose_b: ``op(x)`` is ``x.T`` when set.
        transpose_out: ``out`` receives the product transposed.

    Raises:
        PlanUnavailable: ``out`` is also an operand.
    """
    if out in (a, b):
        raise PlanUnavailable(
            f"matmul step {name!r}: out {out!r} is also an operand; a product cannot write "
            f"over its own input"
        )
    spec = MatmulSpec(a, b, out, bool(transpose_a), bool(transpose_b), bool(transpose_out))
    return PlanStep(
        name,
        "matmul",
        tuple(dict.fromkeys((a, b))),
        (out,),
        functools.partial(_device_matmul, name, spec),
        functools.partial(_host_matmul, name, spec),
        matmul=spec,
    )


def _lookup(step: str, spec: MatmulSpec, bufs: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    try:
        return bufs[spec.a], bufs[spec.b], bufs[spec.out]
    except KeyError as exc:
        raise MatmulUnavailable(
            f"matmul step {step!r}: buffer {exc.args[0]!r} is not bound (bound: {sorted(bufs)})"
        ) from None


def _common_dtype(step: str, spec: MatmulSpec, arrays: Sequence[Any]) -> np.dtype:
    dtypes = [np.dtype(array.dtype) for array in arrays]
    if len(set(dtypes)) != 1 or dtypes[0] not in _FLOATS:
        raise MatmulUnavailable(
            f"matmul step {step!r}: a={spec.a!r} is {dtypes[0]}, b={spec.b!r} is {dtypes[1]}, "
            f"out={spec.out!r} is {dtypes[2]}; a product takes float32 or float64, the same "
            f"for all three"
        )
    return dtypes[0]


def _host_matmul(step: str, spec: MatmulSpec, bufs: Mapping[str, Any]) -> None:
    arrays = []
    for name, buffer in zip((spec.a, spec.b, spec.out), _lookup(step, spec, bufs), strict=True):
        array = _host_view(buffer)
        if array is None:
            raise MatmulUnavailable(
                f"matmul step {step!r}: buffer {name!r} is {_where(buffer)}; the host backend "
                f"takes numpy arrays or host eagle Arrays"
            )
        arrays.append(array)
    a, b, out = arrays
    _common_dtype(step, spec, arrays)
    try:
        want = product_shape(
            a.shape, b.shape,
            transpose_a=spec.transpose_a, transpose_b=spec.transpose_b,
            transpose_out=spec.transpose_out,
        )  # fmt: skip
    except GemmMappingUnavailable as exc:
        raise MatmulUnavailable(f"matmul step {step!r} ({_roles(spec)}): {exc}") from exc
    if out.shape != want:
        raise MatmulUnavailable(
            f"matmul step {step!r}: out {spec.out!r} has shape {out.shape}; it must have "
            f"shape {want}"
        )
    if not out.flags.writeable:
        raise MatmulUnavailable(
            f"matmul step {step!r}: out {spec.out!r} is read-only; pass a writable array "
            f"(e.g. a copy: np.array(out))"
        )
    left = a.T if spec.transpose_a else a
    right = b.T if spec.transpose_b else b
    if spec.transpose_out:
        np.matmul(right.T, left.T, out=out)  # out = (left @ right).T, written C-ordered
    else:
        np.matmul(left, right, out=out)


@functools.lru_cache(maxsize=1024)
def _layout_params(
    shapes: tuple[tuple[int, ...], ...],
    strides: tuple[tuple[int, ...], ...],
    itemsize: int,
    spec: MatmulSpec,
) -> SgemmParams:
    return sgemm_params(
        shapes[0], strides[0], shapes[1], strides[1], shapes[2], strides[2], itemsize,
        transpose_a=spec.transpose_a, transpose_b=spec.transpose_b,
        transpose_out=spec.transpose_out,
    )  # fmt: skip


def _device_matmul(step: str, spec: MatmulSpec, bufs: Mapping[str, Any]) -> None:
    arrays = _lookup(step, spec, bufs)
    for name, array in zip((spec.a, spec.b, spec.out), arrays, strict=True):
        if getattr(array, "is_host", True):
            raise MatmulUnavailable(
                f"matmul step {step!r}: buffer {name!r} is {_where(array)}; the device backend "
                f"takes device eagle Arrays"
            )
    a, b, out = arrays
    device = a.device_index
    if b.device_index != device or out.device_index != device:
        raise MatmulUnavailable(
            f"matmul step {step!r}: a={spec.a!r} is on {a.device}, b={spec.b!r} on {b.device}, "
            f"out={spec.out!r} on {out.device}; put them on one device"
        )
    dtype = _common_dtype(step, spec, arrays)
    try:
        params = _layout_params(
            (a.shape, b.shape, out.shape), (a.strides, b.strides, out.strides), dtype.itemsize, spec
        )
        _check_out_apart({"a": a, "b": b, "out": out}, dtype.itemsize)
    except GemmMappingUnavailable as exc:
        raise MatmulUnavailable(f"matmul step {step!r} ({_roles(spec)}): {exc}") from exc
    stream_ptr = current_stream(device).ptr()
    handle = stream_handle(stream_ptr, device)
    first, second = (a, b) if params.operands == ("a", "b") else (b, a)
    handle._enqueue(params, first.ptr, second.ptr, out.ptr, 1.0, 0.0, double=dtype.itemsize == 8)
    record_use(stream_ptr, handle, a, b, out)
