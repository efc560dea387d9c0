"""Adds into bfloat16 and float16 tables on the host: every address form follows one
rule, a launch's sum in the compute type rounded into each element once (the device's
run in tests/test_half_adds_gpu.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import eagle.plan
import hawk
from eagle.cuda.module import compile_cuda
from hawk.emit import cuda
from tests import _half_add_kernels as k

HALF = [np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)]
#: element 0's lanes in each kernel: all of them, or a quarter (``lane % 4``)
FORMS = [k.constant, k.computed, k.flat, k.by_block, k.looped, k.guarded, k.by_lane]


def _planes(kernel: hawk.Kernel, x: np.ndarray, table: np.ndarray) -> dict[str, np.ndarray]:
    planes = {"x": x, "c": table}
    if any(p.name == "z" for p in kernel.planes):
        planes["z"] = np.zeros_like(x)
    return planes


def _expected(start: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """Each element plus its sum (exact in float32 here), rounded once; an element whose
    sum is 0 as it was."""
    return np.where(sums != 0, (start.astype(np.float32) + sums).astype(start.dtype), start)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("kernel", FORMS, ids=lambda kernel: kernel.name)
def test_every_address_form_sums_then_rounds_once(kernel: hawk.Kernel, dtype) -> None:
    lanes = 100_000 if dtype == HALF[0] else 40_000  # float16 ends at 65504
    table = np.array([3.0, -0.0, 0.0, 0.0], dtype)
    eagle.plan.auto(kernel).run(**_planes(kernel, np.ones(lanes, np.float32), table))
    sums = np.zeros(4, np.float32)
    if kernel is k.by_lane:
        sums[:] = lanes // 4
    else:
        sums[0] = lanes
    expected = _expected(np.array([3.0, -0.0, 0.0, 0.0], dtype), sums)
    np.testing.assert_array_equal(table.view(np.uint16), expected.view(np.uint16))
    if kernel is not k.by_lane:
        assert np.signbit(table[1])  # an element no lane adds to keeps its bits
    if dtype == HALF[0] and kernel is not k.by_lane:
        assert float(table[0]) == 99840.0  # bfloat16's nearest to 100003


def test_a_failing_run_leaves_the_table_as_it_was() -> None:
    table = np.array([1.0, 2.0, 3.0, 4.0], ml_dtypes.bfloat16)
    z = np.zeros(10)
    z[7] = 4.0  # out of range: the run raises before anything is rounded in
    with pytest.raises(IndexError):
        eagle.plan.auto(k.computed).run(x=np.ones(10), z=z, c=table)
    np.testing.assert_array_equal(table, np.array([1.0, 2.0, 3.0, 4.0], ml_dtypes.bfloat16))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("kernel", FORMS, ids=lambda kernel: kernel.name)
def test_the_device_adds_into_scratch_sums_and_rounds_at_the_end(kernel, dtype) -> None:
    dtypes = {p.name: ("float32" if p.name != "c" else dtype) for p in kernel.planes}
    source = cuda.emit(kernel.ir, dtypes)
    assert source.sums == ("c",)
    assert "float* __restrict__ hawk_s_c, unsigned int* __restrict__ hawk_done)" in source.source
    assert "red.add" not in source.source  # no add rounds to 16 bits on its own
    short = "bf16" if dtype == "bfloat16" else "f16"
    assert f"p_c[i] = hawk_round_{short}(hawk_widen(p_c[i]) + s);" in source.source
    compile_cuda(source.source, name=source.name, arch="sm_90")


@pytest.mark.parametrize("backend", [None, "reference"])
def test_a_bfloat16_store_or_add_from_float64_rounds_through_float32_as_on_the_device(backend):
    """1 + 2**-8 + 2**-40 is just above a bfloat16 tie: rounded directly it goes up, through
    float32 (which drops the 2**-40) it is the tie and goes to even, 1.0."""
    bf16 = np.dtype(ml_dtypes.bfloat16)
    a = np.array([1.0 + 2.0**-8 + 2.0**-40])  # a float64 Param: float64 compute
    y = np.zeros(4, bf16)
    eagle.plan.auto(k.wide_store, backend=backend).run(a=a, x=np.ones(4, bf16), y=y)
    assert y.astype(np.float32).tolist() == [1.0] * 4
    c = np.zeros(2, bf16)
    eagle.plan.auto(k.wide_add, backend=backend).run(a=a, x=np.ones(1, bf16), c=c)
    assert c.astype(np.float32).tolist() == [1.0, 0.0]
