"""fp8 on a device (sm_89 or newer): cuBLASLt products eager and captured, with scales,
through ``handle.gemm``, ``matmul_step`` and ``captured_calls``; hawk kernels over fp8
planes; fp8 arrays through DLPack.

Every product is compared with a float64 host reference of the dequantised inputs times
their scales, by ||out - ref|| / ||ref||, on fresh random data, with ``out`` poisoned
(NaN) first (a failure prints the error it measured). The products of fp8 values are
exact; with fast accumulation off they are summed in float32, which cuBLASLt promotes
to from the tensor cores' narrower accumulator every few instructions: a float32 ``out``
measured 1.0e-4 to 1.3e-4 on the H200 (``torch._scaled_mm`` errs alike on the same
inputs), held to 5e-4, which any wrong operand, layout or scale exceeds by orders of
magnitude; a bfloat16 ``out`` within its rounding (2**-9);
fast accumulation, which never promotes, within 1e-2.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import hawk
from eagle import arrays, cuda
from eagle.cuda._runtime import cudart, runtime
from eagle.gemm import (
    CublasCaptureHandle,
    GemmMappingUnavailable,
    LoweredPlan,
    WorkspaceSpec,
    captured_calls,
    gemm_params_for_arrays,
    matmul_step,
)
from eagle.gemm._scaled import FP8_ARCH
from tests._hawk_kernels import contract, saxpy
from tests._util import rel_error

pytestmark = pytest.mark.gpu

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
PAIRS = [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3)]
#: ||out - ref|| / ||ref|| allowed, by (out dtype, math)
TOLERANCE = {
    (F32, "fp32"): 5e-4,
    (BF16, "fp32"): 4e-3,
    (F32, "fast_accum"): 1e-2,
    (BF16, "fast_accum"): 1e-2,
}


@pytest.fixture(autouse=True)
def _fp8_device():
    attr = runtime().cudaDeviceAttr
    major = cudart.cudaDeviceGetAttribute(attr.cudaDevAttrComputeCapabilityMajor, 0)
    minor = cudart.cudaDeviceGetAttribute(attr.cudaDevAttrComputeCapabilityMinor, 0)
    if (major, minor) < FP8_ARCH:
        pytest.skip(f"fp8 products need sm_89 or newer; cuda:0 is sm_{major}{minor}")


@pytest.fixture
def stream():
    stream = cuda.Stream(non_blocking=True)
    yield stream
    stream.synchronize()


def _device(values: np.ndarray) -> arrays.Array:
    return arrays.asarray(np.ascontiguousarray(values), device="cuda:0")


def _write(array: arrays.Array, values: np.ndarray, stream: cuda.Stream) -> None:
    """Write ``values`` over a contiguous device Array in place, on ``stream``."""
    values = np.ascontiguousarray(values, array.dtype)
    kind = runtime().cudaMemcpyKind.cudaMemcpyHostToDevice
    cudart.cudaMemcpyAsync(array.ptr, values.ctypes.data, values.nbytes, kind, stream.ptr())
    stream.synchronize()


def _factors(rng, pair, m=256, n=192, k=512):
    """Fresh fp8 factors a (m, k) and b (n, k), spread over the formats' ranges."""
    return (rng.standard_normal((m, k)) * 4).astype(pair[0]), (
        rng.standard_normal((n, k)) * 4
    ).astype(pair[1])


def _reference(a, b, scale=1.0):
    return scale * (a.astype(np.float64) @ b.astype(np.float64).T)


def _scale(value: float) -> arrays.Array:
    return _device(np.array([value], np.float32))


@pytest.mark.parametrize("pair", PAIRS, ids=str)
@pytest.mark.parametrize("out_dtype", [BF16, F32], ids=str)
@pytest.mark.parametrize("math", ["fp32", "fast_accum"])
def test_eager_fp8_products_against_float64(rng, stream, pair, out_dtype, math):
    a, b = _factors(rng, pair)
    operands = {
        "a": _device(a), "b": _device(b),
        "out": arrays.full((256, 192), np.nan, out_dtype.name, "cuda:0"),
        "a_scale": _scale(0.125), "b_scale": _scale(3.0),
    }  # fmt: skip
    params = gemm_params_for_arrays(
        operands["a"], operands["b"], operands["out"], transpose_b=True, math=math
    )
    handle = CublasCaptureHandle(stream)
    try:
        handle.gemm(params, operands)
        stream.synchronize()
        error = rel_error(operands["out"].numpy(), _reference(a, b, 0.375))
        assert error < TOLERANCE[(out_dtype, math)], error
    finally:
        handle.destroy()


@pytest.mark.parametrize("out_dtype", [BF16, F32], ids=str)
def test_a_captured_fp8_product_reads_its_inputs_and_scales_when_replayed(rng, stream, out_dtype):
    """Warmed before the capture, recorded once, replayed after the factors and the scales
    were written in place: each replay computes the product of what they hold then."""
    a, b = _factors(rng, (E4M3, E5M2))
    operands = {
        "a": _device(a), "b": _device(b),
        "out": arrays.full((256, 192), np.nan, out_dtype.name, "cuda:0"),
        "a_scale": _scale(1.0), "b_scale": _scale(1.0),
    }  # fmt: skip
    params = gemm_params_for_arrays(operands["a"], operands["b"], operands["out"], transpose_b=True)
    handle = CublasCaptureHandle(stream)
    try:
        handle.warm(params, operands, keep_out=True)
        assert np.isnan(operands["out"].numpy().astype(np.float32)).all()
        with cuda.capture(stream) as cap:
            handle.gemm(params, operands)
        graph = cuda.Graph.from_captured(cap.captured)
        for scale_a, scale_b in ((0.5, 2.0), (0.25, 0.125)):
            a, b = _factors(rng, (E4M3, E5M2))
            _write(operands["a"], a, stream)
            _write(operands["b"], b, stream)
            _write(operands["a_scale"], np.float32([scale_a]), stream)
            _write(operands["b_scale"], np.float32([scale_b]), stream)
            operands["out"].fill(np.nan, stream)
            graph.launcher().stream(stream).launch()
            stream.synchronize()
            want = _reference(a, b, scale_a * scale_b)
            error = rel_error(operands["out"].numpy(), want)
            assert error < TOLERANCE[(out_dtype, "fp32")], error
        graph.destroy()
    finally:
        handle.destroy()


def test_an_fp8_matmul_step_on_the_device_with_scales(rng):
    x, w = _factors(rng, (E5M2, E4M3), m=64, n=128, k=256)
    bufs = {
        "x": _device(x), "w": _device(w), "sx": _scale(2.0), "sw": _scale(0.5),
        "y": arrays.full((64, 128), np.nan, "bfloat16", "cuda:0"),
    }  # fmt: skip
    step = matmul_step("y", a="x", b="w", out="y", transpose_b=True, a_scale="sx", b_scale="sw")
    step.run(bufs, "device")
    cuda.current_stream().synchronize()
    error = rel_error(bufs["y"].numpy(), _reference(x, w))
    assert error < TOLERANCE[(BF16, "fp32")], error
    host = {name: value.numpy() for name, value in bufs.items()}
    step.run(host, "host")  # the host path computes the same product
    assert rel_error(host["y"], _reference(x, w)) < TOLERANCE[(BF16, "fp32")]


def test_captured_calls_record_an_fp8_plan(rng, stream):
    x, w = _factors(rng, (E4M3, E4M3), m=128, n=64, k=256)
    step = matmul_step("y", a="x", b="w", out="y", transpose_b=True, a_scale="sx")
    plan = LoweredPlan(
        (step,), "gemm", "run_to_run",
        (WorkspaceSpec("x", x.shape, "float8_e4m3fn"), WorkspaceSpec("w", w.shape, "float8_e4m3fn"),
         WorkspaceSpec("sx", (1,), "float32")),
        (WorkspaceSpec("y", (128, 64), "float32"),),
    )  # fmt: skip
    buffers = {
        "x": _device(x), "w": _device(w), "sx": _scale(4.0),
        "y": arrays.full((128, 64), np.nan, "float32", "cuda:0"),
    }  # fmt: skip
    (call,) = captured_calls(plan, buffers)
    handle = CublasCaptureHandle(stream)
    try:
        handle.warm(call.params, call.operands, keep_out=True)
        with cuda.capture(stream) as cap:
            handle.gemm(call.params, call.operands)
        graph = cuda.Graph.from_captured(cap.captured)
        graph.launcher().stream(stream).launch()
        stream.synchronize()
        error = rel_error(buffers["y"].numpy(), _reference(x, w, 4.0))
        assert error < TOLERANCE[(F32, "fp32")], error
        graph.destroy()
    finally:
        handle.destroy()


def test_what_cublaslt_refuses_is_refused_before_it_runs(rng, stream):
    a, b = _factors(rng, (E5M2, E5M2), m=32, n=32, k=32)
    out = arrays.zeros((32, 32), "float32", "cuda:0")
    with pytest.raises(GemmMappingUnavailable, match="both float8_e5m2: cuBLASLt has no"):
        gemm_params_for_arrays(_device(a), _device(b), out, transpose_b=True)
    a, b = _factors(rng, (E4M3, E4M3), m=32, n=32, k=32)
    big = _device(np.concatenate([a.reshape(-1), a.reshape(-1)[:8]]))
    skewed = big[8:].reshape(32, 32)
    params = gemm_params_for_arrays(skewed, _device(b), out, transpose_b=True)
    handle = CublasCaptureHandle(stream)
    try:
        with pytest.raises(GemmMappingUnavailable, match="operand 'a' starts 8 bytes past"):
            handle.gemm(params, {"a": skewed, "b": _device(b), "out": out})
    finally:
        handle.destroy()


# -- fp8 planes and arrays --------------------------------------------------------------------


@hawk.kernel
def convert(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = x  # noqa: F841


def _run_convert(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y = x`` over device copies of ``x`` and ``y``; the device's ``y``."""
    import eagle.plan

    out = _device(y)
    eagle.plan.auto(convert).run(x=_device(x), y=out)
    return out.numpy()


def _nearest_even(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The codes of ``dtype`` nearest ``values`` (ties to the even code), rounded from each
    value itself. ml_dtypes' float64 conversion does this in some versions and rounds
    through float32 first in others (the H200 image's does: it moves a float64 value just
    off a tie onto the tie), so ml_dtypes converts only float32 values here, which is exact
    either way, and the rest are rounded by magnitude against the positive codes (whose
    values rise with the code up to the largest finite one)."""
    with np.errstate(over="ignore", invalid="ignore"):
        codes = values.astype(np.float32).astype(dtype).view(np.uint8).copy()
    upper = np.arange(128, dtype=np.uint8).view(dtype).astype(np.float64)
    largest = int(np.argmax(np.where(np.isfinite(upper), upper, -1.0)))
    positive = np.arange(largest + 1, dtype=np.uint8).view(dtype).astype(np.float64)
    wide = values.astype(np.float32).astype(np.float64) != values
    inside = np.isfinite(values) & (np.abs(values) <= positive[-1])
    for index in np.nonzero(wide & inside)[0]:
        magnitude = Fraction(abs(float(values[index])))
        above = int(np.searchsorted(positive, float(magnitude)))
        below = max(above - 1, 0)
        gap_below = magnitude - Fraction(float(positive[below]))
        gap_above = Fraction(float(positive[above])) - magnitude
        if gap_below != gap_above:
            code = below if gap_below < gap_above else above
        else:
            code = below if below % 2 == 0 else above
        codes[index] = code | (0x80 if values[index] < 0 else 0)
    return codes


@pytest.mark.parametrize("dtype", [E4M3, E5M2], ids=str)
def test_the_device_converts_fp8_planes_as_ml_dtypes_does_bit_for_bit(rng, dtype):
    codes = np.arange(256, dtype=np.uint8).view(dtype)
    widened = _run_convert(codes, np.full(256, np.nan, np.float32))
    want = codes.astype(np.float32)
    same = (widened.view(np.uint32) == want.view(np.uint32)) | (np.isnan(widened) & np.isnan(want))
    assert same.all(), codes[~same]
    finite = np.unique(codes.astype(np.float64))
    finite = finite[np.isfinite(finite)]
    middle = (finite[1:] + finite[:-1]) / 2  # every tie, and its neighbours
    specials = [np.inf, -np.inf, np.nan, -0.0, 1e30, -1e30, 1e-30]
    for wide in (np.float32, np.float64):
        values = np.concatenate([
            rng.standard_normal(100_000) * 10.0 ** rng.integers(-8, 6, 100_000), middle,
            np.nextafter(middle, np.inf), np.nextafter(middle, -np.inf), specials,
        ]).astype(wide)  # fmt: skip
        want = _nearest_even(values, dtype)
        got = _run_convert(values, np.zeros(values.size, dtype)).view(np.uint8)
        wrong = np.nonzero(got != want)[0]
        assert wrong.size == 0, (wide, values[wrong[:5]], got[wrong[:5]], want[wrong[:5]])


@pytest.mark.parametrize("dtype", [E4M3, E5M2], ids=str)
def test_fp8_planes_on_the_device_agree_with_the_host(rng, dtype):
    """Within one rounding of the plane's dtype: the device may fuse ``a * x + y``."""
    import eagle.plan

    a = np.array([1.375], np.float32)
    x = (rng.standard_normal(100_003) * 8).astype(dtype)
    y = (rng.standard_normal(100_003) * 8).astype(dtype)
    host = y.copy()
    eagle.plan.auto(saxpy).run(a=a, x=x, y=host)
    device = _device(y)
    eagle.plan.auto(saxpy).run(a=_device(a), x=_device(x), y=device)
    got, want = device.numpy().astype(np.float64), host.astype(np.float64)
    step = 2.0 ** -(3 if dtype == E4M3 else 2)  # one rounding: a mantissa step
    assert np.all(np.abs(got - want) <= step * np.abs(want) + 1e-6)
    assert np.mean(got != want) < 1e-3
    w = (rng.standard_normal((16, 8)) * 2).astype(dtype)
    f = (rng.standard_normal((16, 12)) * 2).astype(dtype)
    out = arrays.full((96,), np.nan, "float32", "cuda:0")
    eagle.plan.auto(contract).run(w=_device(w), f=_device(f), y=out)
    exact = (f.astype(np.float64).T @ w.astype(np.float64)).reshape(-1)
    assert rel_error(out.numpy(), exact) < 1e-6


def test_a_device_fp8_array_goes_out_through_dlpack_not_the_interface(rng):
    values = rng.standard_normal(64).astype(E4M3)
    array = _device(values)
    assert not hasattr(array, "__cuda_array_interface__")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    tensor = torch.from_dlpack(array)
    assert tensor.dtype == torch.float8_e4m3fn and tensor.is_cuda
    assert np.array_equal(tensor.view(torch.uint8).cpu().numpy(), values.view(np.uint8))
    back = arrays.asarray(tensor)
    assert back.dtype == E4M3 and back.ptr == array.ptr
