"""Products in bfloat16, float16, float32 (exact and TF32) and float64 on a device.

Every check compares with a float64 host reference, computed from the same random
float64 data before it is rounded to the factors' dtype, by ||out - ref|| / ||ref||;
outputs are poisoned (NaN) first and embedded in NaN-padded buffers. The bounds
(:data:`TOLERANCE`), per (factors, out, math): bfloat16 1e-2, float16 2e-3, TF32 1e-3,
exact float32 1e-6, float64 1e-14 (the rounding of the factors dominates the 16-bit and
TF32 products; k = 53 terms).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from eagle import arrays, cuda
from eagle.gemm import (
    CublasCaptureHandle,
    GemmCaptureUnavailable,
    captured_calls,
    gemm_params_for_arrays,
    lower_dense_gemm,
    matmul_step,
)
from eagle.plan import _route
from tests import _route_kernels as k
from tests._util import rel_error
from tests.test_gemm_capture import FLAGS, _kwargs
from tests.test_gemm_lowering import _gemm_record
from tests.test_route import _plan

pytestmark = pytest.mark.gpu

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
# (factors, out, math) -> the bound on ||out - ref|| / ||ref||
TOLERANCE = {
    (BF16, BF16, None): 1e-2,
    (BF16, F32, None): 1e-2,
    (F16, F16, None): 2e-3,
    (F16, F32, None): 2e-3,
    (F32, F32, "tf32"): 1e-3,
    (F32, F32, None): 1e-6,
    (F64, F64, None): 1e-14,
}
CASES = list(TOLERANCE)


def _id(case):
    dtype, out_dtype, math = case
    return f"{dtype.name}-{out_dtype.name}" + (f"-{math}" if math else "")


@pytest.fixture
def stream():
    stream = cuda.Stream(non_blocking=True)
    yield stream
    stream.synchronize()


def _device(values: np.ndarray) -> arrays.Array:
    """``values`` on cuda:0; 16-bit values travel as their bits (uint16)."""
    values = np.ascontiguousarray(values)
    if values.itemsize != 2:
        return arrays.asarray(values, device="cuda:0")
    bits = arrays.asarray(values.view(np.uint16), device="cuda:0")
    return arrays.Array(
        ptr=bits.ptr, shape=bits.shape, dtype=values.dtype, strides=bits.strides,
        device_index=0, owner=bits,
    )  # fmt: skip


def _embedded(values: np.ndarray):
    """``values`` on the device as a view into a larger NaN-padded buffer, and that buffer."""
    rows, cols = values.shape
    base = np.full((rows + 2, cols + 3), np.nan, values.dtype)
    base[1 : 1 + rows, 2 : 2 + cols] = values
    big = _device(base)
    return big, big[1 : 1 + rows, 2 : 2 + cols]


def _case(rng, flags, dtype, m=37, n=29, k=53):
    """Factors of ``dtype`` and the float64 product of the data they were rounded from."""
    transpose_a, transpose_b, transpose_out = flags
    a = rng.standard_normal((k, m) if transpose_a else (m, k))
    b = rng.standard_normal((n, k) if transpose_b else (k, n))
    product = (a.T if transpose_a else a) @ (b.T if transpose_b else b)
    return a.astype(dtype), b.astype(dtype), product.T if transpose_out else product


def _inside(big, shape):
    values = big.numpy().astype(np.float64)
    inside = np.zeros(values.shape, dtype=bool)
    inside[1 : 1 + shape[0], 2 : 2 + shape[1]] = True
    assert np.isnan(values[~inside]).all(), "a product wrote outside its destination view"
    return values[inside].reshape(shape)


def _bits(array: arrays.Array) -> np.ndarray:
    values = array.numpy()
    return values.view(np.uint16 if values.itemsize == 2 else f"u{values.itemsize}")


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_gemm_every_dtype_and_transpose_triple(rng, stream, flags, case):
    dtype, out_dtype, math = case
    a, b, reference = _case(rng, flags, dtype)
    _, a_view = _embedded(a)
    _, b_view = _embedded(b)
    out_big, out = _embedded(np.full(reference.shape, np.nan, out_dtype))
    operands = {"a": a_view, "b": b_view, "out": out}
    params = gemm_params_for_arrays(a_view, b_view, out, math=math, **_kwargs(flags))
    handle = CublasCaptureHandle(stream)
    try:
        handle.warm(params, operands, keep_out=True)  # into scratch: out keeps its NaNs
        assert np.isnan(_inside(out_big, reference.shape)).all()
        handle.gemm(params, operands)
        stream.synchronize()
        assert rel_error(_inside(out_big, reference.shape), reference) < TOLERANCE[case]
    finally:
        handle.destroy()


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_captured_gemm_replays_bitwise_and_accumulates_with_beta_1(rng, stream, case):
    dtype, out_dtype, math = case
    a, b, reference = _case(rng, (False, True, False), dtype, m=256, n=192, k=320)
    start = rng.standard_normal(reference.shape)
    operands = {"a": _device(a), "b": _device(b), "out": _device(start.astype(out_dtype))}
    params = gemm_params_for_arrays(*operands.values(), transpose_b=True, math=math)
    handle = CublasCaptureHandle(stream)
    try:
        handle.warm(params, operands, keep_out=True)  # outside the capture, out untouched
        with cuda.capture(stream) as cap:
            handle.gemm(params, operands, beta=1.0)  # out += a @ b.T, recorded
        adds = cuda.Graph.from_captured(cap.captured)
        with cuda.capture(stream) as cap:
            handle.gemm(params, operands)  # out = a @ b.T
        sets = cuda.Graph.from_captured(cap.captured)
        adds.launcher().stream(stream).launch()
        stream.synchronize()
        expected = start.astype(out_dtype).astype(np.float64) + reference
        assert rel_error(operands["out"].numpy(), expected) < 2 * TOLERANCE[case]
        replays = []
        for _ in range(2):
            handle.gemm(params, operands, alpha=0.0)  # zeros, so each replay shows its work
            sets.launcher().stream(stream).launch()
            stream.synchronize()
            replays.append(_bits(operands["out"]))
        assert np.array_equal(replays[0], replays[1]), "two replays differ"
        assert rel_error(operands["out"].numpy(), reference) < TOLERANCE[case]
        adds.destroy()
        sets.destroy()
    finally:
        handle.destroy()


@pytest.mark.parametrize("case", CASES[:4] + CASES[5:], ids=_id)
def test_an_unwarmed_product_is_refused_inside_a_capture(rng, stream, case):
    dtype, out_dtype, _ = case
    a, b, reference = _case(rng, (False, False, False), dtype, m=48, n=40, k=24)
    operands = {"a": _device(a), "b": _device(b),
                "out": _device(np.zeros(reference.shape, out_dtype))}  # fmt: skip
    params = gemm_params_for_arrays(*operands.values())
    handle = CublasCaptureHandle(stream)
    try:
        with pytest.raises(GemmCaptureUnavailable, match="never warmed"), cuda.capture(stream):
            handle.gemm(params, operands)
        handle.warm(params, operands)  # outside the capture it runs, and then records
        with cuda.capture(stream) as cap:
            handle.gemm(params, operands)
        cuda.Graph.from_captured(cap.captured).destroy()
    finally:
        handle.destroy()


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("case", [c for c in CASES if c[2] is None], ids=_id)
def test_matmul_step_on_the_device_every_dtype(rng, flags, case):
    dtype, out_dtype, _ = case
    a, b, reference = _case(rng, flags, dtype)
    _, a_view = _embedded(a)
    _, b_view = _embedded(b)
    out_big, out = _embedded(np.full(reference.shape, np.nan, out_dtype))
    step = matmul_step("out", a="a", b="b", out="out", **_kwargs(flags))
    step.run({"a": a_view, "b": b_view, "out": out}, "device")
    cuda.current_stream().synchronize()
    assert rel_error(_inside(out_big, reference.shape), reference) < TOLERANCE[case]


@pytest.mark.parametrize("dtype", [BF16, F16, F64], ids=lambda d: d.name)
def test_a_lowered_adjoint_plan_captured_through_captured_calls(rng, stream, dtype):
    record = _gemm_record(0, 1)
    plan = lower_dense_gemm(record, direction="adjoint", dtype=dtype.name)
    data = {name: rng.standard_normal(spec.shape) for name, spec in plan.required.items()}
    buffers = {name: _device(values.astype(dtype)) for name, values in data.items()}
    calls = captured_calls(plan, buffers)
    handle = CublasCaptureHandle(stream)
    try:
        for call in calls:
            handle.warm(call.params, call.operands, keep_out=True)
        with cuda.capture(stream) as cap:
            for call in calls:
                handle.gemm(call.params, call.operands, beta=1.0)
        graph = cuda.Graph.from_captured(cap.captured)
        graph.launcher().stream(stream).launch()
        stream.synchronize()
        rounded = {name: values.astype(dtype).astype(np.float64) for name, values in data.items()}
        host = {name: values.copy() for name, values in rounded.items()}
        lower_dense_gemm(record, direction="adjoint", dtype="float64")("host", host)
        for spec in plan.outputs:
            added = buffers[spec.name].numpy().astype(np.float64) - rounded[spec.name]
            expected = host[spec.name]
            bound = 1e-14 if dtype == F64 else 3e-2
            assert rel_error(added, expected) < bound, spec.name
        graph.destroy()
    finally:
        handle.destroy()


@pytest.mark.parametrize(("dtype", "math", "bound"), [
    (F32, "tf32", 1e-3), (F32, "fp32", 1e-6), (F16, "fp32", 2e-3), (BF16, "fp32", 1e-2),
    (F64, "fp32", 1e-14),
], ids=str)  # fmt: skip
def test_a_routed_launch_in_each_dtype_and_math(rng, dtype, math, bound):
    w, f = rng.standard_normal((k.R, k.U)), rng.standard_normal((k.R, k.B))
    planes = {"w": _device(w.astype(dtype)), "f": _device(f.astype(dtype)),
              "y": _device(np.full(k.B * k.U, np.nan, dtype))}  # fmt: skip
    plan = _plan(k.contract)
    launch = _route.GemmLaunch(plan, plan.record, planes, 0, math=math)
    launch(None)
    cuda.current_stream().synchronize()
    assert rel_error(planes["y"].numpy(), k.reference({"w": w, "f": f})) < bound
