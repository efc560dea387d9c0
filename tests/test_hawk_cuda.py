"""The CUDA emitter: every test kernel's source compiles with NVRTC for sm_90 (no GPU)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from eagle.cuda import compile_cuda
from hawk.emit import Names, cuda
from tests._hawk_kernels import CASES, Case, contract, histogram, saxpy, signature

IDS = [case.name for case in CASES]


@pytest.mark.parametrize("narrow", [False, True], ids=["wide", "narrow"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_kernel_compiles_for_sm90(case: Case, dtype: str, narrow: bool) -> None:
    """Each kernel, for any lane count and below 2**31 lanes (its lane then fits 32 bits,
    and so may more of its ints)."""
    emitted = cuda.emit(case.kernel.ir, signature(case, dtype), narrow=narrow)
    assert emitted.source.count('extern "C" __global__') == 1
    image = compile_cuda(emitted.source, name=emitted.name, arch="sm_90")
    assert len(image) > 0


def test_mixed_dtypes_compile_and_convert_at_the_edges() -> None:
    emitted = cuda.emit(contract.ir, {"w": "float32", "f": "float64", "y": "float32"})
    assert "const float* __restrict__ p_w" in emitted.source
    assert "(double)p_w[" in emitted.source  # read, widened to the compute type
    assert "p_y[lane] = (float)(" in emitted.source  # stored, narrowed to the plane
    compile_cuda(emitted.source, name=emitted.name, arch="sm_90")


def test_argument_order_is_planes_then_lane_count_then_error_record() -> None:
    emitted = cuda.emit(saxpy.ir, {"a": "float32", "x": "float32", "y": "float32"})
    assert emitted.name == "hawk_saxpy"
    assert emitted.arguments == ("a", "x", "y")
    params = re.search(r"void hawk_saxpy\((.*)\)", emitted.source).group(1).split(", ")
    assert params == [
        "const float* __restrict__ p_a",
        "const float* __restrict__ p_x",
        "float* __restrict__ p_y",
        "long long n",
        "unsigned long long* __restrict__ hawk_rec",
    ]
    assert "const float l_a = p_a[0];" in emitted.source  # a param is read through a pointer
    assert "const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;" in (
        emitted.source
    )
    assert "for (long long at = start + first; at < n; at += stride)" in emitted.source
    assert f"#pragma unroll {cuda.UNROLL}" in emitted.source


def test_float64_uses_double_math_and_float32_single() -> None:
    case = next(c for c in CASES if c.name == "mathfns")
    single = cuda.emit(case.kernel.ir, signature(case, "float32")).source
    double = cuda.emit(case.kernel.ir, signature(case, "float64")).source
    assert "expf(" in single and "tanhf(" in single and "double" not in single
    assert "exp(" in double and "expf(" not in double and "float" not in double.split("{", 1)[1]


def test_table_adds_are_atomic() -> None:
    source = cuda.emit(histogram.ir, {p.name: "float64" for p in histogram.planes}).source
    assert source.count("atomicAdd(&p_") == 1  # the add at a lane-dependent address
    assert source.count("hawk_add_uniform(&p_") == 3  # adds every lane makes to one element


def test_loops_stay_loops() -> None:
    source = cuda.emit(contract.ir, {p.name: "float32" for p in contract.planes}).source
    assert source.count("for (long long") == 2  # the lane loop and the kernel's own loop
    narrow = cuda.emit(contract.ir, {p.name: "float32" for p in contract.planes}, narrow=True)
    assert narrow.source.count("for (int") == 1  # below 2**31 lanes its index is 32-bit
    assert source.count("p_w[") == 1


def test_unknown_dtype_is_refused_by_plane() -> None:
    from hawk import HawkError

    with pytest.raises(HawkError, match="plane 'x' is int32"):
        cuda.emit(saxpy.ir, {"a": "float32", "x": np.int32, "y": "float32"})
    with pytest.raises(HawkError, match="no dtype given for plane 'y'"):
        cuda.emit(saxpy.ir, {"a": "float32", "x": "float32"})


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_a_param_passed_by_value_is_a_compute_type_parameter(dtype: str) -> None:
    dtypes = {"a": dtype, "x": dtype, "y": dtype}
    emitted = cuda.emit(saxpy.ir, dtypes, values=frozenset({"a"}))
    real = "double" if dtype == "float64" else "float"
    ctype = {"float32": "float", "float64": "double", "bfloat16": "hawk_bf16"}[dtype]
    params = re.search(r"void hawk_saxpy\((.*)\)", emitted.source).group(1).split(", ")
    assert params[:3] == [
        f"const {real} v_a",  # the number itself, in the compute type, not a pointer
        f"const {ctype}* __restrict__ p_x",
        f"{ctype}* __restrict__ p_y",
    ]
    assert f"const {real} l_a = v_a;" in emitted.source and "p_a" not in emitted.source
    assert f"a by value, as {real}" in emitted.source.splitlines()[1]
    assert emitted.arguments == ("a", "x", "y")
    compile_cuda(emitted.source, name=emitted.name, arch="sm_90")


WITH_PARAMS = [case for case in CASES if any(p.kind == "param" for p in case.kernel.planes)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", WITH_PARAMS, ids=[case.name for case in WITH_PARAMS])
def test_every_kernel_with_its_params_by_value_compiles_for_sm90(case: Case, dtype: str) -> None:
    values = frozenset(p.name for p in case.kernel.planes if p.kind == "param")
    emitted = cuda.emit(case.kernel.ir, signature(case, dtype), values=values)
    body = emitted.source.split("__global__", 1)[1]
    assert not any(Names.plane(name) + "[" in body for name in values)  # none read by pointer
    compile_cuda(emitted.source, name=emitted.name, arch="sm_90")


def test_params_by_value_leave_the_other_params_pointers() -> None:
    from tests._torch_kernels import affine, branchy

    dtypes = {p.name: "float32" for p in affine.planes}
    emitted = cuda.emit(affine.ir, dtypes, values=frozenset({"b"}))
    assert "const float* __restrict__ p_a, const float v_b," in emitted.source
    assert "const float l_a = p_a[0];" in emitted.source
    assert "const float l_b = v_b;" in emitted.source
    compile_cuda(emitted.source, name=emitted.name, arch="sm_90")
    # a kernel with checks and a loop, its Param by value, compiles too
    emitted = cuda.emit(
        branchy.ir, {p.name: "float64" for p in branchy.planes}, values=frozenset({"s"})
    )
    assert "const double v_s" in emitted.source
    compile_cuda(emitted.source, name=emitted.name, arch="sm_90")


def test_no_params_by_value_is_the_pointer_form() -> None:
    dtypes = {"a": "float32", "x": "float32", "y": "float32"}
    assert cuda.emit(saxpy.ir, dtypes, values=frozenset()) == cuda.emit(saxpy.ir, dtypes)


def test_only_a_param_is_passed_by_value() -> None:
    from hawk import HawkError

    dtypes = {"a": "float32", "x": "float32", "y": "float32"}
    with pytest.raises(HawkError, match="cannot pass plane 'x' of kernel 'saxpy' by value"):
        cuda.emit(saxpy.ir, dtypes, values=frozenset({"x"}))
    with pytest.raises(HawkError, match="cannot pass plane 'b'.*its Params: a"):
        cuda.emit(saxpy.ir, dtypes, values=frozenset({"b"}))
