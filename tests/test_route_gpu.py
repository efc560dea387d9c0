"""The GEMM route on a device: routed values against the loop's and a float64 reference,
the same bits twice, a routed plan captured with other kernels in one graph, and the
plans that keep their loop on the device."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.diff
import eagle.plan
from eagle import arrays, cuda
from eagle.gemm import GemmCaptureUnavailable, release_handles
from hawk.emit import policy
from tests import _route_kernels as k
from tests._util import rel_error

pytestmark = pytest.mark.gpu

EPS32 = float(np.finfo(np.float32).eps)

SHAPES = [(64, 32, 128), (33, 17, 45), (100, 65, 31), (257, 96, 33), (1, 3, 5), (515, 40, 300)]

# w declared (row, unit)?, f declared (row, sample)?, lane = sample * U + unit?
LAYOUTS = [(True, True, True), (False, True, True), (True, False, False), (False, False, False)]


def _routed(kernel):
    with policy.using(contraction="gemm"):
        return eagle.plan.auto(kernel)


def _device(values: np.ndarray) -> arrays.Array:
    return arrays.asarray(np.ascontiguousarray(values), device="cuda:0")


def _poisoned(count: int, dtype: str = "float32") -> arrays.Array:
    return arrays.full((count,), np.nan, dtype, "cuda:0")


def _tables(rng, r, u, b, dtype=np.float32):
    return rng.standard_normal((r, u)).astype(dtype), rng.standard_normal((r, b)).astype(dtype)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda v: "".join("TF"[not x] for x in v))
@pytest.mark.parametrize(("r", "u", "b"), SHAPES, ids=lambda v: str(v))
def test_routed_and_loop_are_within_k_eps_of_the_reference(rng, r, u, b, layout):
    w_reduce_first, f_reduce_first, sample_major = layout
    kernel = k.make_contract(
        r, u, b,
        w_reduce_first=w_reduce_first, f_reduce_first=f_reduce_first, sample_major=sample_major,
    )  # fmt: skip
    w, f = _tables(rng, r, u, b)
    w_d = _device(w if w_reduce_first else w.T)
    f_d = _device(f if f_reduce_first else f.T)
    y_gemm, y_loop = _poisoned(b * u), _poisoned(b * u)

    bound = _routed(kernel).bind(w=w_d, f=f_d, y=y_gemm)
    assert (bound.route, bound.reasons) == ("gemm", ())
    assert np.isnan(y_gemm.numpy()).all()  # bind prepares cuBLAS without writing y
    bound.launch()
    eagle.plan.auto(kernel).run(w=w_d, f=f_d, y=y_loop)

    ref = k.reference({"w": w, "f": f}, sample_major=sample_major)
    gemm, loop = y_gemm.numpy().astype(np.float64), y_loop.numpy().astype(np.float64)
    bound_k = r * EPS32 * np.abs(ref).max()
    assert np.abs(gemm - ref).max() <= bound_k
    assert np.abs(loop - ref).max() <= bound_k
    assert np.abs(gemm - loop).max() <= 2 * bound_k
    assert rel_error(gemm, ref) < 1e-5


def test_two_routed_runs_give_the_same_bits(rng):
    r, u, b = 300, 70, 90
    kernel = k.make_contract(r, u, b)
    w, f = _tables(rng, r, u, b)
    planes = {"w": _device(w), "f": _device(f), "y": _poisoned(b * u)}
    plan = _routed(kernel)
    plan.run(**planes)
    first = planes["y"].numpy()
    planes["y"].fill(np.nan)
    plan.run(**planes)
    second = planes["y"].numpy()
    assert not np.isnan(first).any()
    np.testing.assert_array_equal(first.view(np.uint32), second.view(np.uint32))
    assert rel_error(first, k.reference({"w": w, "f": f})) < 1e-5


def test_binds_moved_to_new_planes_compute_over_them(rng):
    """Binds of fresh planes laid out as the first ones (a move: only the addresses are
    checked), forward and adjoint, each launched over its own planes, poisoned first."""
    r, u, b = 130, 70, 90
    kernel = k.make_contract(r, u, b)
    plan = _routed(kernel)
    adjoint = eagle.diff.reverse(plan)
    turns = []
    for _ in range(3):
        w, f = _tables(rng, r, u, b)
        y_bar = rng.standard_normal(b * u).astype(np.float32)
        planes = {"w": _device(w), "f": _device(f), "y": _poisoned(b * u)}
        gradients = {"w_bar": _poisoned(r * u), "f_bar": _poisoned(r * b)}
        bound = plan.bind(**planes)
        bound_adjoint = adjoint.bind(
            w=planes["w"], f=planes["f"], y_bar=_device(y_bar), **gradients
        )
        for gradient in gradients.values():
            gradient.fill(0.0)
        turns.append((w, f, y_bar, planes["y"], gradients, bound, bound_adjoint))
    assert len(plan._shared.moves) == 1  # one layout kept, which the later binds moved
    for w, f, y_bar, y, gradients, bound, bound_adjoint in reversed(turns):
        bound.launch()
        bound_adjoint.launch()
        w64, f64, y_bar64 = (a.astype(np.float64) for a in (w, f, y_bar))
        assert rel_error(y.numpy(), k.reference({"w": w64, "f": f64})) < 1e-5
        y_bar_m = y_bar64.reshape(b, u)  # lane = sample * U + unit
        assert rel_error(gradients["w_bar"].numpy().reshape(r, u), f64 @ y_bar_m) < 1e-5
        assert rel_error(gradients["f_bar"].numpy().reshape(r, b), w64 @ y_bar_m.T) < 1e-5


def test_a_routed_plan_in_one_graph_with_other_kernels(rng):
    r, u, b = 96, 48, 80
    kernel = k.make_contract(r, u, b)
    x = rng.standard_normal(r * b).astype(np.float32)
    w = rng.standard_normal((r, u)).astype(np.float32)
    x_d, w_d = _device(x), _device(w)
    f_d = _poisoned(r * b)  # written by the first kernel, read as the table f (r, b)
    y_d, z_d = _poisoned(b * u), _poisoned(b * u)

    stream = cuda.Stream(non_blocking=True)
    with stream:  # binds prepare cuBLAS for this stream
        first = eagle.plan.auto(k.double).bind(x=x_d, y=f_d)
        second = _routed(kernel).bind(w=w_d, f=f_d, y=y_d)
        third = eagle.plan.auto(k.square).bind(x=y_d, y=z_d)
    assert second.route == "gemm"
    with cuda.capture(stream) as cap:
        first.launch(stream)
        second.launch(stream)
        third.launch(stream)
    assert cap.captured.node_types().count("kernel") >= 3
    graph = cuda.Graph.from_captured(cap.captured)
    launcher = graph.launcher().stream(stream)

    def expected(x_values: np.ndarray) -> np.ndarray:
        f = 2.0 * x_values.astype(np.float64).reshape(r, b)
        y = (f.T @ w.astype(np.float64)).reshape(-1)
        return y * y + 1.0

    for _ in range(2):
        launcher.launch()
    launcher.synchronize()
    assert rel_error(z_d.numpy(), expected(x)) < 1e-5
    x_d.fill(0.25, stream)  # the graph reads the current inputs: change them and replay
    launcher.launch()
    launcher.synchronize()
    assert rel_error(z_d.numpy(), expected(np.full(r * b, 0.25))) < 1e-5
    graph.destroy()


def test_capture_prepares_a_stream_the_bind_did_not_see(rng):
    w, f = _tables(rng, k.R, k.U, k.B)
    planes = {"w": _device(w), "f": _device(f), "y": _poisoned(k.B * k.U)}
    bound = _routed(k.contract).bind(**planes)
    other = cuda.Stream(non_blocking=True)
    launcher = bound.capture(other)
    planes["y"].fill(np.nan, other)
    launcher.launch()
    launcher.synchronize()
    assert rel_error(planes["y"].numpy(), k.reference({"w": w, "f": f})) < 1e-5


def test_a_capture_of_an_unprepared_stream_records_through_the_warmed_handle(rng):
    """The stream's own handle cannot be made inside the capture: the default stream's,
    which warmed the product at bind, records it with a workspace the graph allocates."""
    w, f = _tables(rng, k.R, k.U, k.B)
    planes = {"w": _device(w), "f": _device(f), "y": _poisoned(k.B * k.U)}
    bound = _routed(k.contract).bind(**planes)
    fresh = cuda.Stream(non_blocking=True)
    with cuda.capture(fresh) as cap:
        bound.launch(fresh)
    kinds = cap.captured.node_types()
    assert kinds.count("memalloc") == kinds.count("memfree") == 1
    launcher = cuda.Graph.from_captured(cap.captured).launcher().stream(fresh)
    launcher.launch()
    launcher.synchronize()
    assert rel_error(planes["y"].numpy(), k.reference({"w": w, "f": f})) < 1e-5
    new_w = _tables(rng, k.R, k.U, k.B)[0]
    eagle.plan.auto(k.double).run(x=_device(new_w).reshape(-1), y=planes["w"].reshape(-1))
    planes["y"].fill(np.nan)
    cuda.current_stream().synchronize()
    for _ in range(2):  # the graph reads the inputs as they are now, on every replay
        launcher.launch()
    launcher.synchronize()
    assert rel_error(planes["y"].numpy(), k.reference({"w": 2.0 * new_w, "f": f})) < 1e-5
    with pytest.raises(ValueError, match="recorded a memalloc node"):  # capture it again
        launcher.rebind(y=_poisoned(k.B * k.U))


def test_a_capture_no_handle_warmed_for_is_refused_and_left_valid(rng):
    w, f = _tables(rng, k.R, k.U, k.B)
    planes = {"w": _device(w), "f": _device(f), "y": _poisoned(k.B * k.U)}
    bound = _routed(k.contract).bind(**planes)
    release_handles()  # no handle warmed the product any more
    fresh = cuda.Stream(non_blocking=True)
    capturer = cuda.StreamCapturer(fresh)
    capturer.begin()
    planes["y"].fill(0.5, fresh)
    with pytest.raises(GemmCaptureUnavailable, match="no cuBLAS handle on cuda:0 has warmed"):
        bound.launch(fresh)
    assert cuda.is_capturing(fresh)
    captured = capturer.end()  # not invalidated: it holds the fill and nothing else
    assert captured.node_types() == ["memset"]
    captured.discard()
    assert not cuda.is_capturing(fresh)
    bound.launch(fresh)  # outside a capture it prepares the stream and runs
    fresh.synchronize()
    assert rel_error(planes["y"].numpy(), k.reference({"w": w, "f": f})) < 1e-5


def test_float64_planes_route_to_dgemm_on_the_device(rng):
    w, f = _tables(rng, k.R, k.U, k.B, np.float64)
    y = _poisoned(k.B * k.U, "float64")
    bound = _routed(k.contract).bind(w=_device(w), f=_device(f), y=y)
    assert (bound.route, bound.reasons) == ("gemm", ())
    bound.launch()
    assert rel_error(y.numpy(), k.reference({"w": w, "f": f})) < 1e-14


def test_fewer_lanes_than_the_product_keep_the_loop(rng):
    w, f = _tables(rng, k.R, k.U, k.B)
    lanes = (k.B - 1) * k.U
    y = _poisoned(lanes)
    bound = _routed(k.contract).bind(w=_device(w), f=_device(f), y=y)
    assert bound.route == "loop"
    assert f"hold {lanes} lanes but the product has" in bound.reasons[0]
    bound.launch()
    assert rel_error(y.numpy(), k.reference({"w": w, "f": f})[:lanes]) < 1e-5


def test_a_kernel_the_route_does_not_fit_runs_its_loop_on_the_device(rng):
    w, f = _tables(rng, k.R, k.U, k.B)
    y = _poisoned(k.B * k.U)
    plan = _routed(k.transformed)
    bound = plan.bind(w=_device(w), f=_device(f), y=y)
    assert bound.route == "loop" and bound.reasons == plan.reasons
    bound.launch()
    expected = (f.T.astype(np.float64) @ np.exp(w.astype(np.float64))).reshape(-1)
    assert rel_error(y.numpy(), expected) < 1e-5


@pytest.mark.parametrize("offset_plane", ["y", "w", "f"])
def test_a_plane_4_bytes_into_its_buffer_binds_captures_and_replays(rng, offset_plane):
    """The handle's record of what it warmed is keyed by operand alignment, and the route
    warms the product of the planes it was given (issue 10: y = big[1:1 + B*U])."""
    r, u, b = 96, 40, 72
    kernel = k.make_contract(r, u, b)
    w, f = _tables(rng, r, u, b)
    planes = {"w": _device(w), "f": _device(f), "y": _poisoned(b * u)}
    values = {"w": w, "f": f, "y": np.full(b * u, np.nan, np.float32)}
    big = _device(np.concatenate([[np.nan], values[offset_plane].reshape(-1)]).astype(np.float32))
    planes[offset_plane] = big[1:].reshape(values[offset_plane].shape)
    assert planes[offset_plane].ptr % 16 == 4
    stream = cuda.Stream(non_blocking=True)
    with stream:
        bound = _routed(kernel).bind(**planes)
    assert bound.route == "gemm"
    launcher = bound.capture(stream)
    reference = k.reference({"w": w, "f": f})
    for _ in range(2):
        planes["y"].fill(np.nan, stream)
        launcher.launch()
        launcher.synchronize()
        assert rel_error(planes["y"].numpy(), reference) < 1e-5
    assert np.isnan(big.numpy()[0])  # the element before the plane is never written
