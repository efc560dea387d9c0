"""Products in bfloat16, float16, float32 (exact or TF32) and float64, on the host and over
the stand-in cuBLAS of test_gemm_capture: the dtype rules and their refusals, GemmParams,
handle.gemm and handle.bind, the host and device matmul step, plans and captured calls,
the route's dtype gate; and that checks done once are never reused for other operands."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from eagle.gemm import (
    BoundGemm,
    CapturedCall,
    CublasCaptureHandle,
    GemmCaptureUnavailable,
    GemmMappingUnavailable,
    GemmParams,
    MatmulUnavailable,
    captured_calls,
    captured_gemm_calls,
    gemm_params_for_arrays,
    lower_dense_gemm,
    matmul_step,
    sgemm_params_for_arrays,
)
from eagle.gemm.dtypes import product_dtypes
from eagle.plan import _route
from tests import _route_kernels as k
from tests._util import rel_error
from tests.test_gemm_capture import FLAGS, FakeDevice, HostBackedDeviceArray, _kwargs
from tests.test_gemm_lowering import _gemm_record, _operand, _record
from tests.test_route import _host_backed, _plan, _routed_fake_device

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
# (factors, out) pairs every product takes
PAIRS = [(BF16, BF16), (BF16, F32), (F16, F16), (F16, F32), (F32, F32), (F64, F64)]


@pytest.fixture
def device(monkeypatch):
    return FakeDevice(monkeypatch)


def _factors(rng, flags, dtype, m=7, n=5, k=6):
    transpose_a, transpose_b, _ = flags
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(dtype)
    return a, b


def _rounded_once(a, b, flags, out_dtype):
    """op(a) @ op(b) summed in float32 (float64 for float64 factors), rounded once to out."""
    transpose_a, transpose_b, transpose_out = flags
    wide = np.float64 if a.dtype == F64 else np.float32
    product = (a.T if transpose_a else a).astype(wide) @ (b.T if transpose_b else b).astype(wide)
    return (product.T if transpose_out else product).astype(out_dtype)


# --- the rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "out_dtype"), PAIRS)
def test_every_product_dtype_pair_resolves_with_its_exact_math(dtype, out_dtype):
    exact = "fp64" if dtype == F64 else "fp32"
    assert product_dtypes(dtype, dtype, out_dtype) == (dtype.name, out_dtype.name, exact)
    assert product_dtypes(dtype.name, dtype.name, out_dtype.name, exact)[2] == exact


@pytest.mark.parametrize(
    ("dtypes", "math", "message"),
    [
        ((BF16, F16, BF16), None, r"operand 'b' is float16 but operand 'a' is bfloat16; both "
         r"factors have one dtype \(convert b with .astype\('bfloat16'\)\)"),
        ((BF16, BF16, F16), None, r"operand 'out' is float16; a bfloat16 x bfloat16 product "
         r"writes bfloat16 or float32"),
        ((F32, F32, BF16), None, "operand 'out' is bfloat16; a float32 x float32 product writes "
         "float32"),
        ((F64, F64, F32), None, "operand 'out' is float32; a float64 x float64 product writes "
         "float64"),
        ((np.int32, np.int32, np.int32), None, "operand 'a' is int32; a product takes bfloat16, "
         "float16, float32 or float64 factors"),
        ((F32, np.int8, F32), None, "operand 'b' is int8; a product takes"),
        ((np.int64, F64, F64), None, r"operand 'a' is int64; .*\(convert it with "
         r"\.astype\('float64'\)\)"),  # a dtype the other factor pairs with
        ((np.int32, np.dtype(ml_dtypes.float8_e5m2), F32), None,
         r"\(convert it with \.astype\('float8_e4m3fn'\)\)"),  # e5m2 pairs with e4m3fn
        ((BF16, BF16, F32), "tf32", "math='tf32' does not apply to bfloat16 factors: they sum "
         "in fp32"),
        ((F64, F64, F64), "tf32", "does not apply to float64 factors: they sum in fp64"),
        ((F32, F32, F32), "fp16", "math='fp16' does not apply to float32"),
    ],
)  # fmt: skip
def test_products_outside_the_rules_are_refused_by_name(dtypes, math, message):
    with pytest.raises(GemmMappingUnavailable, match=message):
        product_dtypes(*dtypes, math)


def test_gemm_params_carry_the_dtypes_and_check_what_they_are_given():
    a, b = np.ones((3, 4), BF16), np.ones((4, 5), BF16)
    params = gemm_params_for_arrays(a, b, np.zeros((3, 5), np.float32))
    assert params[9:] == ("bfloat16", "float32", "fp32", "bfloat16") and hash(params)
    assert params.layout == sgemm_params_for_arrays(
        *(x.astype(np.float32) for x in (a, b)), np.zeros((3, 5), np.float32)
    )
    assert params.transposes == (False, False, False)
    tf32 = gemm_params_for_arrays(*(np.ones(s, np.float32) for s in ((3, 4), (4, 5), (3, 5))),
                                  math="tf32")  # fmt: skip
    assert tf32.math == "tf32" and tf32.layout == params.layout
    with pytest.raises(ValueError, match=r"GemmParams: ldc = 2; it must be an int from"):
        GemmParams(*params[:7], 2, params.operands, "bfloat16", "float32", "fp32")
    with pytest.raises(ValueError, match="GemmParams: operand 'out' is float16"):
        GemmParams(*params[:9], "bfloat16", "float16", "fp32")
    with pytest.raises(ValueError, match="GemmParams: math is None; name it: 'fp32'"):
        GemmParams(*params[:9], "bfloat16", "float32", None)


def test_a_16_bit_out_is_mapped_with_its_own_itemsize():
    base = np.zeros((3, 8), np.float32)
    a, b = np.ones((3, 4), np.float16), np.ones((4, 5), np.float16)
    params = gemm_params_for_arrays(a, b, base[:, :5])
    assert (params.ldc, params.lda, params.ldb) == (8, 5, 4)  # cuBLAS's first operand is b
    with pytest.raises(GemmMappingUnavailable, match="'out' shares memory with operand 'a'"):
        whole = np.zeros((3, 8), np.float16)
        gemm_params_for_arrays(whole[:, :4], np.ones((4, 4), np.float16), whole[:, 3:7])


def test_sgemm_keeps_refusing_every_dtype_but_float32_by_name():
    for dtype in (BF16, F16, F64):
        a, b, out = np.ones((3, 4), dtype), np.ones((4, 5), dtype), np.ones((3, 5), dtype)
        with pytest.raises(GemmMappingUnavailable, match=f"operand 'a' is {dtype.name}; sgemm "
                           "params .* are float32 only: .* handle.gemm, which takes every "
                           "product dtype"):  # fmt: skip
            sgemm_params_for_arrays(a, b, out)


# --- handle.gemm over the stand-in cuBLAS ------------------------------------------------------


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize(("dtype", "out_dtype"), PAIRS)
def test_gemm_computes_every_dtype_and_triple_on_views(device, rng, flags, dtype, out_dtype):
    a, b = _factors(rng, flags, dtype)
    expected = _rounded_once(a, b, flags, out_dtype)
    _, a_view = device.embedded(a)
    _, b_view = device.embedded(b)
    out_base, out_view = device.embedded(np.zeros(expected.shape, out_dtype))
    operands = {"a": a_view, "b": b_view, "out": out_view}
    params = gemm_params_for_arrays(a_view, b_view, out_view, **_kwargs(flags))
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    handle.warm(params, operands)
    handle.gemm(params, operands, beta=1.0)  # adds the product once more
    rows, cols = expected.shape
    inside = np.zeros(out_base.shape, bool)
    inside[1 : 1 + rows, 2 : 2 + cols] = True
    twice = (2 * expected.astype(np.float64)).astype(out_dtype)
    error = rel_error(out_base[inside].reshape(rows, cols), twice)
    assert error < (1e-2 if out_dtype in (BF16, F16) else 1e-6)
    assert np.isnan(out_base[~inside].astype(np.float64)).all()
    binding = {F32: "gemm", F64: "gemm"}.get(dtype)
    entry = device.cublas.log[-1]
    assert entry[:2] == ("gemm", dtype.name)
    if binding is None:  # 16-bit factors: GemmEx, summed in float32
        assert entry[-2:] == (out_dtype.name, 68)
    else:
        assert len(entry) == 7  # Sgemm or Dgemm


def test_tf32_params_run_gemm_ex_with_fast_tf32_and_exact_params_refuse_a_tf32_handle(device, rng):
    a, b = _factors(rng, (False, False, False), np.float32)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.zeros((7, 5), np.float32))}  # fmt: skip
    tf32 = gemm_params_for_arrays(*operands.values(), math="tf32")
    exact = gemm_params_for_arrays(*operands.values())
    fp32_handle = CublasCaptureHandle(FakeDevice.STREAM)
    fp32_handle.gemm(tf32, operands)
    assert device.cublas.log[-1][-2:] == ("float32", 77)
    fp32_handle.gemm(exact, operands)
    assert len(device.cublas.log[-1]) == 7  # plain Sgemm
    tf32_handle = CublasCaptureHandle(FakeDevice.STREAM, math="tf32")
    tf32_handle.gemm(tf32, operands)
    with pytest.raises(GemmMappingUnavailable, match=r"params ask for exact float32 \(math='fp32'"
                       r"\), but this handle was made with math='tf32'"):  # fmt: skip
        tf32_handle.gemm(exact, operands)


def test_sgemm_and_gemm_take_only_their_own_params(device, rng):
    a, b = _factors(rng, (False, False, False), np.float32)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.zeros((7, 5), np.float32))}  # fmt: skip
    sgemm, gemm = (
        sgemm_params_for_arrays(*operands.values()),
        gemm_params_for_arrays(*operands.values()),
    )
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    handle.sgemm(sgemm, operands)
    handle.gemm(gemm, operands)
    with pytest.raises(TypeError, match="params must be SgemmParams"):
        handle.sgemm(gemm, operands)
    with pytest.raises(TypeError, match=r"params must be GemmParams \(from gemm_params_for_"):
        handle.gemm(sgemm, operands)
    with pytest.raises(TypeError, match="params must be SgemmParams"):
        handle.sgemm(tuple(sgemm), operands)  # equal as a tuple, and still refused
    with pytest.raises(GemmMappingUnavailable, match="do not describe these operands"):
        handle.gemm(gemm._replace(dtype="float64", math="fp64"), operands)


def _float32_product(device, rng, entry):
    """Float32 operands of a 7x6 @ 6x5 product, their params and the handle's ``entry``."""
    make = sgemm_params_for_arrays if entry == "sgemm" else gemm_params_for_arrays
    a, b = _factors(rng, (False, False, False), np.float32)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.zeros((7, 5), np.float32))}  # fmt: skip
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    return operands, make(*operands.values()), getattr(handle, entry)


@pytest.mark.parametrize("entry", ["sgemm", "gemm"])
def test_prepared_calls_are_never_reused_for_other_operands(device, rng, entry):
    """A call's checks are kept under its operands' pointers, shapes, strides, dtypes and
    device: operands that differ in any of them are checked again, never run on the old
    pointers."""
    first, params, run = _float32_product(device, rng, entry)
    a = first["a"].values
    run(params, first)
    second = {**first, "out": device.array(np.full((7, 5), np.nan, np.float32))}
    run(params, second)  # same layout, another out: it writes there
    np.testing.assert_allclose(second["out"].values, first["out"].values)
    assert device.cublas.destinations[-2:] == [first["out"].ptr, second["out"].ptr]
    base = np.zeros((7, 9), np.float32)
    device.cublas.register(base)
    wider = HostBackedDeviceArray(base)[:, :5]  # same pointer as base, another row stride
    with pytest.raises(GemmMappingUnavailable, match="do not describe these operands"):
        run(params, {**first, "out": wider})
    same_address = HostBackedDeviceArray(first["out"].values[:6])  # one row fewer
    with pytest.raises(GemmMappingUnavailable, match=r"operand 'out' has shape \(6, 5\)"):
        run(params, {**first, "out": same_address})
    on_host = {**first, "a": a}
    with pytest.raises(GemmCaptureUnavailable, match="operand 'a' is not a device array"):
        run(params, on_host)
    elsewhere = HostBackedDeviceArray(first["b"].values)
    elsewhere.device_index, elsewhere.device = 1, "cuda:1"
    with pytest.raises(GemmCaptureUnavailable, match="operand 'b' is on cuda:1"):
        run(params, {**first, "b": elsewhere})
    assert [entry[0] for entry in device.cublas.log].count("gemm") == 2


@pytest.mark.parametrize("entry", ["sgemm", "gemm"])
def test_a_repeated_call_is_checked_once(device, rng, entry, monkeypatch):
    """The same params and operands again take the prepared call without the checks."""
    operands, params, run = _float32_product(device, rng, entry)
    checked = []
    original = CublasCaptureHandle._checked
    monkeypatch.setattr(
        CublasCaptureHandle, "_checked", lambda *args: checked.append(1) or original(*args)
    )
    for _ in range(3):
        run(params, operands)
    assert len(checked) == 1
    assert [call[0] for call in device.cublas.log].count("gemm") == 3  # each one enqueued


def test_a_prepared_call_rereads_alpha_and_beta_and_the_warm_record(device, rng):
    a, b = _factors(rng, (False, False, False), BF16)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.zeros((7, 5), np.float32))}  # fmt: skip
    params = gemm_params_for_arrays(*operands.values())
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    handle.gemm(params, operands)  # prepared before it was warmed
    device.capturing = True
    with pytest.raises(GemmCaptureUnavailable, match="never warmed"):
        handle.gemm(params, operands)
    device.capturing = False
    handle.warm(params, operands)
    device.capturing = True
    handle.gemm(params, operands, alpha=2.0, beta=0.0)
    expected = _rounded_once(a, b, (False, False, False), np.float32)
    assert rel_error(operands["out"].values, 2 * expected) < 1e-6
    handle.gemm(params, operands, alpha=1.0, beta=-2.0)
    assert rel_error(operands["out"].values, -3 * expected) < 1e-6


def test_bind_checks_once_and_enqueues_with_its_scalars(device, rng):
    a, b = _factors(rng, (True, False, False), F16)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.zeros((7, 5), np.float16))}  # fmt: skip
    params = gemm_params_for_arrays(*operands.values(), transpose_a=True)
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    with pytest.raises(GemmMappingUnavailable, match=r"operand 'out' has shape \(5, 7\)"):
        handle.bind(params, {**operands, "out": device.array(np.zeros((5, 7), np.float16))})
    bound = handle.bind(params, operands, alpha=0.5)
    assert isinstance(bound, BoundGemm) and bound.params == params
    device.capturing = True
    with pytest.raises(GemmCaptureUnavailable, match="never warmed"):
        bound()
    device.capturing = False
    handle.warm(params, operands, keep_out=True)  # warmed into scratch: out keeps its zeros
    assert not operands["out"].values.any()
    device.capturing = True
    bound()
    expected = _rounded_once(a, b, (True, False, False), np.float32) / 2
    assert rel_error(operands["out"].values, expected.astype(F16)) < 1e-3
    first, second = (operands[name] for name in params.operands)
    assert device.used[-1] == (FakeDevice.STREAM, handle, first, second, operands["out"])
    device.capturing = False
    handle.destroy()
    with pytest.raises(GemmCaptureUnavailable, match="was destroyed"):
        bound()


def test_rebound_moves_a_bound_product_to_operands_laid_out_alike(device, rng, monkeypatch):
    a, b = _factors(rng, (False, True, False), BF16)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.zeros((7, 5), np.float32))}  # fmt: skip
    params = gemm_params_for_arrays(*operands.values(), transpose_b=True)
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    bound = handle.bind(params, operands, alpha=2.0)
    a2, b2 = _factors(rng, (False, True, False), BF16)
    moved = {"a": device.array(a2), "b": device.array(b2),
             "out": device.array(np.full((7, 5), np.nan, np.float32))}  # fmt: skip
    checked = []
    original = CublasCaptureHandle._checked
    monkeypatch.setattr(
        CublasCaptureHandle, "_checked", lambda *args: checked.append(1) or original(*args)
    )
    rebound = bound.rebound(moved)
    assert checked == [] and rebound.params == params  # the layout checks carried over
    rebound()
    expected = 2 * _rounded_once(a2, b2, (False, True, False), np.float32)
    assert rel_error(moved["out"].values, expected) < 1e-6
    assert not operands["out"].values.any()  # the bound product's own out is untouched
    wider = device.array(np.zeros((7, 6), np.float32))
    with pytest.raises(ValueError, match=r"operand 'out' is laid out otherwise .* \(7, 5\)"):
        bound.rebound({**moved, "out": wider})
    with pytest.raises(ValueError, match="operand 'a' is laid out otherwise"):
        bound.rebound({**moved, "a": device.array(a2.astype(F16))})
    shared = np.zeros((7, 5), np.float32)  # an out whose first bytes are also a's
    over_a = HostBackedDeviceArray(shared.reshape(-1).view(BF16)[:42].reshape(7, 6))
    with pytest.raises(GemmMappingUnavailable, match="'out' shares memory with operand 'a'"):
        bound.rebound({**moved, "a": over_a, "out": HostBackedDeviceArray(shared)})
    handle.destroy()
    with pytest.raises(GemmCaptureUnavailable, match="was destroyed"):
        bound.rebound(moved)


# --- the matmul step -------------------------------------------------------------------------


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize(("dtype", "out_dtype"), PAIRS[:4])
def test_host_16_bit_products_sum_in_float32_and_round_once(rng, flags, dtype, out_dtype):
    a, b = _factors(rng, flags, dtype, m=9, n=11, k=300)
    expected = _rounded_once(a, b, flags, out_dtype)
    out = np.full(expected.shape, np.nan, out_dtype)
    matmul_step("c", a="a", b="b", out="c", **_kwargs(flags)).run(
        {"a": a, "b": b, "c": out}, "host"
    )
    bits = np.uint16 if out.itemsize == 2 else np.uint32
    np.testing.assert_array_equal(out.view(bits), expected.view(bits))  # the same roundings


def test_host_refuses_mixed_factors_by_buffer(rng):
    bufs = {"a": np.ones((2, 3), BF16), "b": np.ones((3, 4), F16), "c": np.ones((2, 4), BF16)}
    with pytest.raises(MatmulUnavailable, match=r"matmul step 'c': a='a' is bfloat16, b='b' is "
                       r"float16, out='c' is bfloat16; operand 'b' is float16"):  # fmt: skip
        matmul_step("c", a="a", b="b", out="c").run(bufs, "host")


@pytest.mark.parametrize(("dtype", "out_dtype"), PAIRS)
def test_device_step_runs_every_dtype_and_rechecks_new_buffers(device, rng, dtype, out_dtype):
    flags = (False, True, True)
    a, b = _factors(rng, flags, dtype)
    expected = _rounded_once(a, b, flags, out_dtype)
    step = matmul_step("c", a="a", b="b", out="c", **_kwargs(flags))
    outs = [device.array(np.full(expected.shape, np.nan, out_dtype)) for _ in range(2)]
    for out in (*outs, outs[0]):
        step.run({"a": device.array(a), "b": device.array(b), "c": out}, "device")
    for out in outs:
        assert rel_error(out.values, expected) < 1e-2
    assert [entry[1] for entry in device.cublas.log if entry[0] == "gemm"] == 3 * [dtype.name]
    short = device.array(np.zeros((expected.shape[0] - 1, expected.shape[1]), out_dtype))
    with pytest.raises(MatmulUnavailable, match="operand 'out' has shape"):
        step.run({"a": device.array(a), "b": device.array(b), "c": short}, "device")


# --- plans and captured calls -------------------------------------------------------------


def test_plans_lower_and_run_in_16_bit_dtypes(rng):
    record = _gemm_record(0, 0)
    plan = lower_dense_gemm(record, dtype="bfloat16")
    assert {spec.dtype for spec in plan.required.values()} == {"bfloat16"}
    buffers = {
        name: rng.standard_normal(spec.shape).astype(BF16) for name, spec in plan.required.items()
    }
    plan("host", buffers)
    (step,) = plan.steps
    spec = step.matmul
    left, right = buffers[spec.a].astype(np.float32), buffers[spec.b].astype(np.float32)
    expected = (left.T if spec.transpose_a else left) @ (right.T if spec.transpose_b else right)
    np.testing.assert_array_equal(buffers[spec.out], expected.astype(BF16))
    with pytest.raises(ValueError, match="dtype must be one of 'bfloat16', 'float16', 'float32'"):
        lower_dense_gemm(record, dtype="int8")


def test_captured_calls_bind_any_dtype_and_captured_gemm_calls_stay_float32(device, rng):
    record = _gemm_record(0, 1)
    plan = lower_dense_gemm(record, direction="adjoint", dtype="float16")
    buffers = {
        name: device.array(rng.standard_normal(spec.shape).astype(F16))
        for name, spec in plan.required.items()
    }
    calls = captured_calls(plan, buffers)
    assert [type(call) for call in calls] == [CapturedCall] * 2
    assert {call.params[9:] for call in calls} == {("float16", "float16", "fp32", "float16")}
    assert all(call.operands["out"] is buffers[call.name] for call in calls)
    with pytest.raises(GemmMappingUnavailable, match="buffer '.*' is float16; Sgemm calls "
                       r"\(captured_gemm_calls, handle.sgemm\) are float32 only: .* "
                       "captured_calls and handle.gemm"):  # fmt: skip
        captured_gemm_calls(plan, buffers, operand_class="gemm")
    with pytest.raises(GemmMappingUnavailable, match="math='tf32' does not apply to float16"):
        captured_calls(plan, buffers, math="tf32")
    plan32 = lower_dense_gemm(record, dtype="float32")
    buffers32 = {
        name: device.array(rng.standard_normal(spec.shape).astype(np.float32))
        for name, spec in plan32.required.items()
    }
    (call,) = captured_calls(plan32, buffers32, math="tf32")
    assert call.params.math == "tf32"
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    handle.gemm(call.params, call.operands)
    assert device.cublas.log[-1][-1] == 77
    gemv = _record(_operand("w", 0))
    with pytest.raises(GemmCaptureUnavailable, match="'gemv' plan"):
        captured_calls(lower_dense_gemm(gemv, dtype="bfloat16"), {})


# --- the route's dtype gate -----------------------------------------------------------------


def test_the_route_takes_planes_of_one_product_dtype():
    for dtype in ("bfloat16", "float16", "float32", "float64"):
        planes = dict.fromkeys("wfy", np.dtype(dtype) if dtype != "bfloat16" else BF16)
        assert _route.dtype_reasons(planes) == () == _route.dtype_reasons(planes, math="tf32")
    (reason,) = _route.dtype_reasons({"w": BF16, "f": BF16, "y": F32})
    assert "'w' is bfloat16, 'f' is bfloat16, 'y' is float32" in reason
    assert "planes of one dtype" in reason
    (reason,) = _route.dtype_reasons({"w": np.int32, "f": F32, "y": F32})
    assert "plane 'w' is int32; the GEMM route takes bfloat16, float16" in reason
    with pytest.raises(ValueError, match="math must be 'fp32' or 'tf32', not 'fp16'"):
        _route.dtype_reasons({"w": F32}, math="fp16")


@pytest.mark.parametrize(("dtype", "math", "compute"), [
    (np.float32, "tf32", 77), (np.float32, "fp32", None), (np.float16, "tf32", 68),
    (np.float64, "fp32", None),
])  # fmt: skip
def test_a_routed_launch_binds_its_dtype_and_math_once(monkeypatch, rng, dtype, math, compute):
    device = _routed_fake_device(monkeypatch)
    w = rng.standard_normal((k.R, k.U)).astype(dtype)
    f = rng.standard_normal((k.R, k.B)).astype(dtype)
    y = np.full(k.B * k.U, np.nan, dtype)
    for values in (w, f, y):
        device.cublas.register(values)
    planes = {"w": _host_backed(w), "f": _host_backed(f), "y": _host_backed(y)}
    plan = _plan(k.contract)
    launch = _route.GemmLaunch(plan, plan.record, planes, 0, math=math)
    assert (launch.dtype, launch.math) == (np.dtype(dtype).name, math if dtype == np.float32
                                           else None)  # fmt: skip
    device.capturing = True
    launch(None)
    launch(None)
    expected = k.reference({"w": w.astype(np.float64), "f": f.astype(np.float64)})
    assert rel_error(y, expected) < (2e-3 if dtype == np.float16 else 1e-5)
    gemms = [entry for entry in device.cublas.log if entry[0] == "gemm"]
    assert len(gemms) == 3  # warmed once (into scratch), launched twice
    assert (gemms[-1][-1] if compute else len(gemms[-1])) == (compute or 7)
    with pytest.raises(ValueError, match="math must be 'fp32' or 'tf32'"):
        _route.GemmLaunch(plan, plan.record, planes, 0, math="fp64")
