"""The host matrix product: ``out = alpha * op(a) @ op(b) + beta * out``, with numpy.

It is eagle's one host product: a plan's matmul step on the host
(:func:`eagle.gemm.matmul_step`) and the GEMM route's host products
(:class:`eagle.plan._route.HostGemm`) both run it. Factors narrower than
float32 (bfloat16, float16, fp8) are multiplied in float32 and the result is
rounded once into ``out``, as cuBLAS sums them on the device.

The host loop program's batched contractions (``hawk.emit._host_runtime``)
are a different operation (a batched product over up to three lane axes,
summed over some of them, with no destination to write into) and stay with
hawk, which imports nothing of eagle.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["host_product", "product_views"]


def product_views(
    a: np.ndarray,
    b: np.ndarray,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    transpose_out: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The views of ``a`` and ``b`` whose plain product is ``out`` in its own order:
    ``op(a), op(b)``, where ``op(x)`` is ``x.T`` when its flag is set, or
    ``op(b).T, op(a).T`` when ``out`` holds the product transposed (``transpose_out``)."""
    left = a.T if transpose_a else a
    right = b.T if transpose_b else b
    return (right.T, left.T) if transpose_out else (left, right)


def host_product(
    left: np.ndarray, right: np.ndarray, out: np.ndarray, alpha: float = 1.0, beta: float = 0.0
) -> None:
    """Set ``out`` to ``alpha * (left @ right) + beta * out``, in place.

    Shapes and dtypes are the caller's to check (factors of one product dtype of
    :mod:`eagle.gemm.dtypes`, an ``out`` that product may write); ``beta`` 0
    writes ``out`` without reading it, 1 adds into it. Take ``left`` and ``right``
    from :func:`product_views` for a product with transposes.

    Args:
        left, right: the factors, 2-D numpy arrays (views of any layout).
        out: the destination, a writable 2-D numpy array.
        alpha: scales the product (an fp8 product's per-tensor scales, multiplied).
        beta: how much of what ``out`` held the result keeps.
    """
    if left.dtype.itemsize < 4:  # summed in float32, rounded once into out
        left, right = left.astype(np.float32), right.astype(np.float32)
    if alpha == 1.0 and beta == 0.0:
        if left.dtype == out.dtype:
            np.matmul(left, right, out=out)
        else:
            out[...] = np.matmul(left, right)
        return
    product: Any = np.matmul(left, right)
    if alpha != 1.0:
        product = product * alpha
    if beta == 0.0:
        out[...] = product
    elif beta == 1.0:
        out[...] += product
    else:
        out[...] = product + beta * out.astype(product.dtype)
