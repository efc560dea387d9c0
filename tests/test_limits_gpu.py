"""Limits users meet, on the device: kernels named like hawk's own C identifiers, and
long expressions (run with ``nox -s gpu``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import eagle.plan
import hawk
from eagle import arrays
from tests._generated import long_sum, scale_kernel
from tests._util import rel_error

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", ["pack", "f16", "bf16"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_kernel_named_like_a_helper_runs(
    tmp_path: Path, name: str, dtype: str, rng: np.random.Generator
) -> None:
    kernel = scale_kernel(tmp_path, name)
    x = rng.standard_normal(1000).astype(dtype)
    y = arrays.full((1000,), np.nan, dtype=dtype, device="cuda:0")
    eagle.plan.auto(kernel).run(x=arrays.asarray(x, device="cuda:0"), y=y)
    np.testing.assert_array_equal(y.numpy(), 2 * x)


def test_a_long_sum_runs(tmp_path: Path, rng: np.random.Generator) -> None:
    kernel = long_sum(tmp_path, 2000)
    x = rng.standard_normal(10_000)
    y = arrays.full((10_000,), np.nan, device="cuda:0")
    w = arrays.asarray(np.zeros(1), device="cuda:0")  # not read
    eagle.plan.auto(kernel).run(x=arrays.asarray(x, device="cuda:0"), w=w, y=y)
    expected = np.zeros_like(x)
    for i in range(2000):
        expected += i * x  # the kernel's own order
    assert rel_error(y.numpy(), expected) < 1e-13


def test_a_long_sum_of_table_reads_runs(tmp_path: Path, rng: np.random.Generator) -> None:
    kernel = long_sum(tmp_path, 2000, reads=True)
    x, w = rng.standard_normal(10_000), rng.standard_normal(2000)
    y = arrays.full((10_000,), np.nan, device="cuda:0")
    plan = eagle.plan.auto(kernel)
    x_d, w_d = arrays.asarray(x, device="cuda:0"), arrays.asarray(w, device="cuda:0")
    plan.run(x=x_d, w=w_d, y=y)
    expected = np.zeros_like(x)
    for i in range(2000):
        expected += w[i] * x  # the kernel's own order
    assert rel_error(y.numpy(), expected) < 1e-13
    with pytest.raises(hawk.PlaneIndexError, match=r"w\.at\(1500\)"):  # checked at bind
        plan.bind(x=x_d, w=w_d[:1500], y=y)
