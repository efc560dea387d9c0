"""Every plane dtype on a device: routed products against the loop and a float64
reference (to each dtype's tolerance), capture and bitwise replay, the routed adjoints,
and 16-bit elementwise kernels on the device against the host."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import eagle.diff
import eagle.plan
from eagle import arrays, cuda
from tests import _route_kernels as k
from tests._hawk_kernels import CASES, saxpy, written
from tests._util import rel_error
from tests.test_route_gpu import _device

pytestmark = pytest.mark.gpu

BF16 = np.dtype(ml_dtypes.bfloat16)
#: (plane dtype, math) -> relative error bound against a float64 reference
PRECISIONS = {
    ("bfloat16", "fp32"): 1.6e-2,
    ("float16", "fp32"): 2e-3,
    ("float32", "tf32"): 1e-3,
    ("float32", "fp32"): 1e-6,
    ("float64", "fp32"): 1e-13,
}
IDS = [f"{dtype}-{math}" for dtype, math in PRECISIONS]
R, U, B = 256, 96, 200


def _host(array: arrays.Array) -> np.ndarray:
    return array.numpy()


def _inputs(rng, dtype):
    dt = np.dtype(dtype)
    w = rng.standard_normal((R, U)).astype(dt)
    f = rng.standard_normal((R, B)).astype(dt)
    return w, f


@pytest.mark.parametrize(("dtype", "math"), PRECISIONS, ids=IDS)
def test_routed_product_matches_the_loop_and_the_reference(rng, dtype, math):
    kernel = k.make_contract(R, U, B)
    routed = eagle.plan.auto(kernel, contraction="gemm", math=math)
    loop = eagle.plan.auto(kernel)
    w, f = _inputs(rng, dtype)
    want = k.reference({"w": w, "f": f})
    outs = {}
    for name, plan in (("routed", routed), ("loop", loop)):
        y = _device(np.full(B * U, np.nan, np.dtype(dtype)))
        bound = plan.bind(w=_device(w), f=_device(f), y=y)
        assert bound.route == ("gemm" if plan is routed else "loop")
        bound.launch()
        outs[name] = _host(y)
    bound_tol = PRECISIONS[(dtype, math)]
    assert rel_error(outs["routed"], want) < bound_tol
    assert rel_error(outs["loop"], want) < bound_tol
    assert rel_error(outs["routed"], outs["loop"]) < 2 * bound_tol


@pytest.mark.parametrize(("dtype", "math"), PRECISIONS, ids=IDS)
def test_routed_product_captures_and_replays_the_same_bits(rng, dtype, math):
    kernel = k.make_contract(R, U, B)
    plan = eagle.plan.auto(kernel, contraction="gemm", math=math)
    w, f = _inputs(rng, dtype)
    y = _device(np.full(B * U, np.nan, np.dtype(dtype)))
    stream = cuda.Stream(non_blocking=True)
    with stream:
        bound = plan.bind(w=_device(w), f=_device(f), y=y)
    launcher = bound.capture(stream)
    launcher.launch()
    launcher.synchronize()
    first = _host(y).copy()
    y.fill(0.0, stream)
    launcher.launch()
    launcher.synchronize()
    np.testing.assert_array_equal(_host(y).view(np.uint8), first.view(np.uint8))
    assert rel_error(first, k.reference({"w": w, "f": f})) < PRECISIONS[(dtype, math)]


@pytest.mark.parametrize(("dtype", "math"), PRECISIONS, ids=IDS)
def test_routed_adjoint_adds_into_gradients_of_the_planes_dtype(rng, dtype, math):
    kernel = k.make_contract(R, U, B)
    plan = eagle.plan.auto(kernel, contraction="gemm", math=math)
    adjoint = eagle.diff.reverse(plan)
    dt = np.dtype(dtype)
    w, f = _inputs(rng, dtype)
    y_bar = rng.standard_normal(B * U).astype(dt)
    start_w = rng.standard_normal((R, U)).astype(dt)
    start_f = rng.standard_normal((R, B)).astype(dt)
    cot = y_bar.astype(np.float64).reshape(B, U)
    want_w = start_w.astype(np.float64) + f.astype(np.float64) @ cot
    want_f = start_f.astype(np.float64) + w.astype(np.float64) @ cot.T
    w_bar, f_bar = _device(start_w), _device(start_f)
    bound = adjoint.bind(w=_device(w), f=_device(f), y_bar=_device(y_bar), w_bar=w_bar, f_bar=f_bar)
    assert [step.route for step in bound.steps] == ["gemm"]
    bound.launch()
    got_w, got_f = _host(w_bar), _host(f_bar)
    assert got_w.dtype == dt and got_f.dtype == dt
    tolerance = PRECISIONS[(dtype, math)]
    assert rel_error(got_w, want_w) < tolerance
    assert rel_error(got_f, want_f) < tolerance
    loop_w = _device(start_w)
    eagle.diff.reverse(eagle.plan.auto(kernel)).run(
        w=_device(w), f=_device(f), y_bar=_device(y_bar), w_bar=loop_w
    )
    assert rel_error(got_w, _host(loop_w)) < 4 * tolerance


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_half_kernels_agree_on_host_and_device(rng, case, dtype):
    planes = case.make(rng, np.dtype(dtype))
    if case.name in ("histogram", "moments"):  # hundreds of adds into one element, each
        for plane in case.kernel.planes:  # rounded to the table's dtype: float32 tables
            if plane.kind == "accumulator":
                planes[plane.name] = planes[plane.name].astype(np.float32)
    on_host = {name: value.copy() for name, value in planes.items()}
    on_device = {name: _device(value) for name, value in planes.items()}  # outputs: NaN
    eagle.plan.auto(case.kernel).run(**on_host)
    eagle.plan.auto(case.kernel).run(**on_device)
    expected = case.reference({name: value.copy() for name, value in planes.items()})
    tolerance = 2e-3 if np.dtype(dtype) == np.float16 else 1.6e-2
    for name in written(case):
        device = _host(on_device[name])
        assert device.dtype == planes[name].dtype
        assert rel_error(device, expected[name]) < tolerance, name
        assert rel_error(device, on_host[name]) < tolerance, name


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_a_half_store_rounds_as_the_host_does_within_one_unit(rng, dtype):
    x = rng.standard_normal(1 << 16).astype(dtype)
    y0 = rng.standard_normal(1 << 16).astype(dtype)
    host_y, device_y = y0.copy(), _device(y0)
    eagle.plan.auto(saxpy).run(a=np.float32(1.2345678), x=x, y=host_y)
    eagle.plan.auto(saxpy).run(a=np.float32(1.2345678), x=_device(x), y=device_y)
    # The device may fuse a*x + y into one FMA: its float32 sum differs from the host's by
    # at most a float32 rounding of the terms, and the store then rounds once more, so
    # the two agree to one unit of the storage type plus that (which only shows where
    # a*x and y cancel). Most elements are equal.
    got, want = _host(device_y).astype(np.float64), host_y.astype(np.float64)
    terms = np.abs(1.2345678 * x.astype(np.float64)) + np.abs(y0.astype(np.float64))
    unit = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    assert (np.abs(got - want) <= unit + 2.0**-23 * terms).all()
    assert np.count_nonzero(got != want) < 1e-2 * got.size
