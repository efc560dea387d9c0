"""The host matrix product: ``out = op(a) @ op(b) + beta * out``, with numpy, in place.

It is eagle's one host product: a plan's matmul step on the host
(:func:`eagle.gemm.matmul_step`) and the GEMM route's host products
(:class:`eagle.plan._route.HostGemm`) both run it. Factors narrower than
float32 (bfloat16, float16) are multiplied in float32 and the result is
rounded once into ``out``, as cuBLAS sums them on the device.

The host loop program's batched contractions (``hawk.emit._host_runtime``)
are a different operation (a batched product over up to three lane axes,
summed over some of them, with no destination to write into) and stay with
hawk, which imports nothing of eagle.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["host_product"]


def host_product(
    a: np.ndarray,
    b: np.ndarray,
    out: np.ndarray,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    transpose_out: bool = False,
    beta: float = 0.0,
) -> None:
    """Set ``out`` to ``op(a) @ op(b) + beta * out`` (``out.T`` for ``transpose_out``).

    ``op(x)`` is ``x.T`` when its flag is set. Shapes and dtypes are the
    caller's to check (a product dtype of :mod:`eagle.gemm.dtypes` for ``a``
    and ``b``, one ``out`` may take); ``beta`` 0 writes ``out`` without
    reading it, 1 adds into it.

    Args:
        a, b: the factors, 2-D numpy arrays.
        out: the destination, a writable 2-D numpy array.
        transpose_a, transpose_b: multiply by the factor transposed.
        transpose_out: ``out`` holds the product transposed (written in its own order).
        beta: how much of what ``out`` held the result keeps.
    """
    left = a.T if transpose_a else a
    right = b.T if transpose_b else b
    if transpose_out:  # out = (left @ right).T = right.T @ left.T, in out's own order
        left, right = right.T, left.T
    if left.dtype.itemsize < 4:  # summed in float32, rounded once into out
        left, right = left.astype(np.float32), right.astype(np.float32)
    if beta == 0.0:
        if left.dtype == out.dtype:
            np.matmul(left, right, out=out)
        else:
            out[...] = np.matmul(left, right)
        return
    product: Any = np.matmul(left, right)
    if beta == 1.0:
        out[...] += product
    else:
        out[...] = product + beta * out.astype(product.dtype)
