"""eagle's one host matrix product, ``out = op(a) @ op(b) + beta * out``: what a matmul
step and the GEMM route run on the host."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from eagle.gemm._host import host_product, product_views
from eagle.gemm.dtypes import dtype_of

M, K, N = 5, 7, 3


def _operands(
    rng: np.random.Generator, dtype: str, flags: tuple[bool, bool, bool]
) -> tuple[np.ndarray, np.ndarray]:
    transpose_a, transpose_b, _ = flags
    a = rng.standard_normal((K, M) if transpose_a else (M, K)).astype(dtype_of(dtype))
    b = rng.standard_normal((N, K) if transpose_b else (K, N)).astype(dtype_of(dtype))
    return a, b


def _reference(a: np.ndarray, b: np.ndarray, flags: tuple[bool, bool, bool]) -> np.ndarray:
    transpose_a, transpose_b, transpose_out = flags
    left = a.astype(np.float64).T if transpose_a else a.astype(np.float64)
    right = b.astype(np.float64).T if transpose_b else b.astype(np.float64)
    product = left @ right
    return product.T if transpose_out else product


@pytest.mark.parametrize("flags", list(itertools.product((False, True), repeat=3)))
@pytest.mark.parametrize("beta", [0.0, 1.0, -0.5])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_host_product_scales_what_out_held_by_beta(
    flags: tuple[bool, bool, bool], beta: float, dtype: str, rng: np.random.Generator
) -> None:
    a, b = _operands(rng, dtype, flags)
    shape = (N, M) if flags[2] else (M, N)
    out = rng.standard_normal(shape).astype(dtype)
    before = out.astype(np.float64)
    if beta == 0.0:
        out[...] = np.nan  # never read
    transpose_a, transpose_b, transpose_out = flags
    left, right = product_views(
        a, b, transpose_a=transpose_a, transpose_b=transpose_b, transpose_out=transpose_out
    )
    host_product(left, right, out, beta=beta)
    expected = _reference(a, b, flags) + (beta * before if beta else 0.0)
    tolerance = 1e-6 if dtype == "float32" else 1e-14
    assert np.linalg.norm(out - expected) <= tolerance * np.linalg.norm(expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("out_dtype", ["same", "float32"])
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_16_bit_factors_are_summed_in_float32_and_rounded_once(
    dtype: str, out_dtype: str, beta: float, rng: np.random.Generator
) -> None:
    flags = (True, False, True)
    a, b = _operands(rng, dtype, flags)
    out = rng.standard_normal((N, M)).astype(dtype_of(dtype if out_dtype == "same" else out_dtype))
    held = out.astype(np.float32)
    host_product(*product_views(a, b, transpose_a=True, transpose_out=True), out, beta=beta)
    product = (a.astype(np.float32).T @ b.astype(np.float32)).T
    expected = (product + held if beta else product).astype(out.dtype)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_alpha_scales_the_product_before_it_is_rounded_once(
    beta: float, rng: np.random.Generator
) -> None:
    a, b = _operands(rng, "float16", (False, False, False))
    out = rng.standard_normal((M, N)).astype(np.float16)
    held = out.astype(np.float32)
    alpha = np.float32(0.375)
    host_product(a, b, out, alpha, beta)
    product = (a.astype(np.float32) @ b.astype(np.float32)) * alpha
    np.testing.assert_array_equal(out, (product + held if beta else product).astype(np.float16))
