"""16-bit hawk planes on the host and in emitted CUDA C (compiled for sm_90 without a GPU),
the routes' dtypes and math policy, and the host GEMM route."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import eagle.diff
import eagle.plan
from eagle import arrays
from eagle.cuda import compile_cuda
from eagle.plan import _route
from hawk import HawkError
from hawk.emit import DTYPES, compute_dtype, cuda, host, policy
from tests import _route_kernels as k
from tests._hawk_kernels import CASES, histogram, saxpy, signature, written
from tests._util import rel_error

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
HALF_DTYPES = [F16, BF16]
#: relative error of a stored 16-bit result against float64 (a few units of rounding)
TOLERANCE = {F16: 2e-3, BF16: 1.6e-2}
IDS = [case.name for case in CASES]


# -- dtypes and promotion ----------------------------------------------------------------


def test_planes_may_be_16_bit_and_compute_in_float32_unless_a_plane_is_float64():
    assert [d.name for d in DTYPES] == [
        "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2",
    ]  # fmt: skip
    assert compute_dtype({"x": F16, "y": BF16}) == np.float32
    assert compute_dtype({"x": BF16, "y": np.dtype(np.float32)}) == np.float32
    assert compute_dtype({"x": BF16, "y": np.dtype(np.float64)}) == np.float64


def test_other_dtypes_are_refused_by_plane_name():
    with pytest.raises(HawkError, match=r"plane 'x' is int16; hawk planes are float16, bfloat16"):
        host.emit(saxpy.ir, {"a": "float32", "x": "int16", "y": "float32"})
    with pytest.raises(TypeError, match=r"plane 'x' is int16; hawk planes are float16, bfloat16"):
        eagle.plan.auto(saxpy).run(a=1.0, x=np.zeros(3, np.int16), y=np.zeros(3, np.float32))


# -- the host ----------------------------------------------------------------------------


HALF_CASES = [c for c in CASES if c.name != "histogram"]


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize("case", HALF_CASES, ids=[c.name for c in HALF_CASES])
def test_half_kernels_match_the_float64_reference_on_the_host(case, dtype, rng):
    planes = case.make(rng, dtype)
    # the kernel computes in float32 (its loads are exact): so does the reference wherever
    # a discrete choice (a branch, a comparison) depends on rounding
    expected = case.reference({name: value.astype(np.float32) for name, value in planes.items()})
    eagle.plan.auto(case.kernel).run(**planes)
    for name in written(case):
        assert planes[name].dtype == dtype
        assert rel_error(planes[name], expected[name]) < TOLERANCE[dtype], name


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_the_host_computes_in_float32_and_rounds_once_at_the_store(dtype, rng):
    x = rng.standard_normal(1000).astype(dtype)
    y0 = rng.standard_normal(1000).astype(dtype)
    y = y0.copy()
    a = np.float32(1.2345678)
    eagle.plan.auto(saxpy).run(a=a, x=x, y=y)
    want = (a * x.astype(np.float32) + y0.astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))


def test_a_float64_plane_makes_a_half_plane_compute_in_float64(rng):
    x = rng.standard_normal(1000)  # float64
    y0 = rng.standard_normal(1000).astype(BF16)
    y = y0.copy()
    eagle.plan.auto(saxpy).run(a=np.float64(1 / 3), x=x, y=y)
    # a bfloat16 store of a float64 value rounds through float32, as the device's does
    want = ((1 / 3) * x + y0.astype(np.float64)).astype(np.float32).astype(BF16)
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))


def test_table_adds_round_at_each_add_so_a_float32_table_keeps_large_sums(rng):
    planes = next(c for c in CASES if c.name == "histogram").make(rng, BF16)
    planes["counts"] = planes["counts"].astype(np.float32)  # many adds per bin: float32
    expected = CASES[IDS.index("histogram")].reference(
        {name: value.copy() for name, value in planes.items()}
    )
    eagle.plan.auto(histogram).run(**planes)
    assert rel_error(planes["counts"], expected["counts"]) < 1e-6
    assert rel_error(planes["stats"], expected["stats"]) < TOLERANCE[BF16]


def test_a_failing_host_run_leaves_half_planes_as_they_were(rng):
    planes = next(c for c in CASES if c.name == "histogram").make(rng, F16)
    planes["counts"] = planes["counts"][:4].copy()  # bins 4..7 are out of range
    before = {name: value.copy() for name, value in planes.items()}
    with pytest.raises(IndexError):
        eagle.plan.auto(histogram).run(**planes)
    for name, value in planes.items():
        np.testing.assert_array_equal(value.view(np.uint16), before[name].view(np.uint16))


# -- the emitted CUDA C ------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["sm_90", "sm_75"])
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_half_kernels_compile(case, dtype, arch):
    emitted = cuda.emit(case.kernel.ir, signature(case, dtype))
    assert "#include" not in emitted.source  # no header: NVRTC needs none
    compile_cuda(emitted.source, name=emitted.name, arch=arch)


def test_half_planes_convert_at_loads_stores_and_adds():
    dtypes = {"x": "float64", "lo": "bfloat16", "counts": "float16", "stats": "bfloat16"}
    source = cuda.emit(histogram.ir, dtypes).source
    assert "const hawk_bf16* __restrict__ p_lo" in source
    assert "hawk_f16* __restrict__ p_counts" in source
    assert "(double)hawk_widen(p_lo[0])" in source  # widened to the compute type
    # adds sum in the compute type, into scratch sums, rounded once by the last block
    assert "atomicAdd(&hawk_s_counts[" in source
    assert "hawk_add_uniform(&hawk_s_stats[" in source  # a warp sums first
    assert "p_counts[i] = hawk_round_f16(hawk_widen(p_counts[i]) + s);" in source
    compile_cuda(source, name="hawk_histogram", arch="sm_90")
    stored = cuda.emit(saxpy.ir, {"a": "float32", "x": "float16", "y": "bfloat16"}).source
    assert "p_y[lane] = hawk_round_bf16(" in stored
    assert "const float l_x = hawk_widen(p_x[lane]);" in stored


# -- routes ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_every_plane_dtype_routes_on_the_device(dtype):
    plan = eagle.plan.auto(k.contract, contraction="gemm")
    assert plan.route("device", dtype) == "gemm"
    assert plan.route("host", dtype) == "loop"
    assert eagle.diff.reverse(plan).route("device", dtype) == "gemm"
    assert _route.dtype_reasons({"w": dtype, "f": dtype, "y": dtype}) == ()


def test_mixed_plane_dtypes_keep_the_loop_and_say_why():
    (reason,) = _route.dtype_reasons({"w": "bfloat16", "f": "bfloat16", "y": "float32"})
    assert "'y' is float32" in reason and "planes of one dtype" in reason


def test_math_is_validated_and_recorded():
    for bad in ("fp16", "TF32", ""):
        with pytest.raises(ValueError, match=rf"math must be 'fp32' or 'tf32', not {bad!r}"):
            eagle.plan.auto(k.contract, contraction="gemm", math=bad)
        with (
            pytest.raises(ValueError, match="math must be 'fp32' or 'tf32'"),
            policy.using(math=bad),
        ):
            pass
        with pytest.raises(ValueError, match="math must be"):
            _route.dtype_reasons({"w": "float32"}, math=bad)
    plan = eagle.plan.auto(k.contract, contraction="gemm", math="tf32")
    assert plan.policy.math == "tf32" and "math='tf32'" in repr(plan)
    assert eagle.plan.auto(k.contract, contraction="gemm").policy.math == "fp32"


def test_tf32_comes_from_the_policy_and_a_keyword_wins():
    with policy.using(contraction="gemm", math="tf32"):
        assert policy.current().math == "tf32"
        assert eagle.plan.auto(k.contract).policy.math == "tf32"
        assert eagle.plan.auto(k.contract, math="fp32").policy.math == "fp32"
        with policy.using(contraction="loop"):
            assert policy.current().math == "tf32"  # a choice left out is kept
    assert policy.current().math == "fp32"


def test_host_route_is_validated():
    with pytest.raises(ValueError, match=r"host_route must be 'loop' or 'gemm', not 'numpy'"):
        eagle.plan.auto(k.contract, contraction="gemm", host_route="numpy")


# -- the host GEMM route -----------------------------------------------------------------


def test_the_host_keeps_the_kernel_by_default_and_says_how_to_route():
    plan = eagle.plan.auto(k.contract, contraction="gemm")
    assert plan.route("host") == "loop"
    assert eagle.diff.reverse(plan).route("host") == "loop"
    planes = k.planes(k.contract, np.random.default_rng(0), np.float32)
    bound = plan.bind(**planes)
    assert bound.route == "loop" and "host_route='gemm'" in bound.reasons[0]


def test_host_route_needs_the_gemm_contraction_policy():
    plan = eagle.plan.auto(k.contract, host_route="gemm")  # contraction is "loop"
    assert plan.route("host") == "loop"
    bound = plan.bind(**k.planes(k.contract, np.random.default_rng(0)))
    assert "contraction='loop'" in bound.reasons[0]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_host_route_runs_one_numpy_product_into_the_lane_plane(dtype, rng):
    plan = eagle.plan.auto(k.contract, contraction="gemm", host_route="gemm")
    assert plan.route("host", dtype) == "gemm"
    planes = k.planes(k.contract, rng, np.dtype(dtype))
    want = k.reference(planes)
    y = planes["y"]
    bound = plan.bind(**planes)
    assert (bound.route, bound.reasons) == ("gemm", ())
    bound.launch()
    assert planes["y"] is y  # written in place
    tolerance = {"bfloat16": 1.6e-2, "float16": 2e-3, "float32": 1e-6, "float64": 1e-13}[dtype]
    assert rel_error(y, want) < tolerance
    if dtype in ("bfloat16", "float16"):  # summed in float32, rounded once
        w, f = planes["w"].astype(np.float32), planes["f"].astype(np.float32)
        once = (f.T @ w).reshape(-1).astype(dtype)
        np.testing.assert_array_equal(y.view(np.uint16), once.view(np.uint16))


def test_host_route_takes_host_eagle_arrays(rng):
    plan = eagle.plan.auto(k.contract, contraction="gemm", host_route="gemm")
    planes = k.planes(k.contract, rng)
    want = k.reference(planes)
    plan.run(**{name: arrays.asarray(value) for name, value in planes.items()})
    assert rel_error(planes["y"], want) < 1e-13


def test_host_route_keeps_the_loop_for_mixed_dtypes_and_other_lane_counts(rng):
    plan = eagle.plan.auto(k.contract, contraction="gemm", host_route="gemm")
    planes = k.planes(k.contract, rng)
    planes["y"] = planes["y"].astype(np.float32)
    bound = plan.bind(**planes)
    assert bound.route == "loop" and "planes of one dtype" in bound.reasons[0]
    bound.launch()
    assert rel_error(planes["y"], k.reference(planes)) < 1e-6


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_host_routed_adjoint_adds_the_two_products(dtype, rng):
    plan = eagle.plan.auto(k.contract, contraction="gemm", host_route="gemm")
    adjoint = eagle.diff.reverse(plan)
    assert adjoint.route("host", dtype) == "gemm"
    dt = np.dtype(dtype)
    w = rng.standard_normal((k.R, k.U)).astype(dt)
    f = rng.standard_normal((k.R, k.B)).astype(dt)
    y_bar = rng.standard_normal(k.B * k.U).astype(dt)
    w_bar = rng.standard_normal((k.R, k.U)).astype(dt)
    f_bar = rng.standard_normal((k.R, k.B)).astype(dt)
    cot = y_bar.astype(np.float64).reshape(k.B, k.U)
    want_w = w_bar.astype(np.float64) + f.astype(np.float64) @ cot
    want_f = f_bar.astype(np.float64) + w.astype(np.float64) @ cot.T
    bound = adjoint.bind(w=w, f=f, y_bar=y_bar, w_bar=w_bar, f_bar=f_bar)
    assert [step.route for step in bound.steps] == ["gemm"]
    bound.launch()
    tolerance = {"bfloat16": 1.6e-2, "float16": 2e-3, "float32": 1e-6, "float64": 1e-13}[dtype]
    assert rel_error(w_bar, want_w) < tolerance
    assert rel_error(f_bar, want_f) < tolerance
    looped = {"w_bar": w_bar.copy()}
    eagle.diff.reverse(eagle.plan.auto(k.contract)).run(w=w, f=f, y_bar=y_bar, **looped)
    adjoint.run(w=w, f=f, y_bar=y_bar, w_bar=w_bar)  # only the gradient passed
    assert rel_error(w_bar, looped["w_bar"]) < 4 * tolerance
