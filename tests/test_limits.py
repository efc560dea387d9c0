"""Limits users meet: kernel names that hawk's own C identifiers use, and long
expressions (host runs and NVRTC compiles; the device runs are in test_limits_gpu.py)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import eagle.plan
from eagle.cuda import compile_cuda
from hawk.emit import cuda
from hawk.emit._cuda_helpers import RESERVED
from tests._generated import scale_kernel
from tests._hawk_kernels import CASES, signature


@pytest.mark.parametrize("name", ["pack", "f16", "bf16", "widen", "rec", "fail"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_kernel_named_like_a_helper_compiles(tmp_path: Path, name: str, dtype: str) -> None:
    kernel = scale_kernel(tmp_path, name)
    emitted = cuda.emit(kernel.ir, {"x": dtype, "y": dtype})
    assert emitted.name == f"hawk_kernel_{name}"
    assert f"__global__ void hawk_kernel_{name}(" in emitted.source
    compile_cuda(emitted.source, name=emitted.name, arch="sm_90")
    x = np.arange(4.0)
    y = np.zeros(4)
    eagle.plan.auto(kernel).run(x=x, y=y)
    np.testing.assert_array_equal(y, 2 * x)


def test_other_names_keep_their_symbol(tmp_path: Path) -> None:
    kernel = scale_kernel(tmp_path, "packed")
    assert cuda.emit(kernel.ir, {"x": "float32", "y": "float32"}).name == "hawk_packed"


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_every_hawk_identifier_emitted_is_reserved(dtype: str) -> None:
    for case in CASES:
        emitted = cuda.emit(case.kernel.ir, signature(case, dtype))
        used = set(re.findall(r"\bhawk_\w+", emitted.source)) - {emitted.name}
        assert used <= RESERVED, (case.name, used - RESERVED)
