"""eagle.gemm on a device: eager and captured products, lowered plans, lifetimes, memory.

Every check compares with a float64 host reference by ||out - ref|| / ||ref||, on fresh
random data, with outputs poisoned (NaN) first.
"""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

from eagle import arrays, cuda
from eagle.cuda._runtime import CudaError, cudart
from eagle.errors import EagleTypeError
from eagle.gemm import (
    CublasCaptureHandle,
    GemmCaptureUnavailable,
    GemmMappingUnavailable,
    MatmulUnavailable,
    _library,
    captured_gemm_calls,
    lower_dense_gemm,
    matmul_step,
    sgemm_params_for_arrays,
)
from tests._util import rel_error
from tests.test_gemm_capture import FLAGS, _kwargs
from tests.test_gemm_lowering import _gemm_record, _operand, _record
from tests.test_route_gpu import _device
from tests.test_seed import CAPTURE_EXAMPLE

pytestmark = pytest.mark.gpu

EPS32 = float(np.finfo(np.float32).eps)
MiB = 1 << 20


@pytest.fixture
def stream():
    stream = cuda.Stream(non_blocking=True)
    yield stream
    stream.synchronize()


@pytest.fixture
def handle(stream):
    handle = CublasCaptureHandle(stream.ptr())
    yield handle
    handle.destroy()


def _embedded(x, pad=(2, 3)):
    """``x`` on the device as a view into a larger NaN-padded buffer, and that buffer."""
    rows, cols = x.shape
    base = np.full((rows + pad[0], cols + pad[1]), np.nan, x.dtype)
    base[1 : 1 + rows, 2 : 2 + cols] = x
    big = _device(base)
    return big, big[1 : 1 + rows, 2 : 2 + cols]


def _case(rng, flags, dtype, m=37, n=29, k=53):
    transpose_a, transpose_b, transpose_out = flags
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(dtype)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    product = (a64.T if transpose_a else a64) @ (b64.T if transpose_b else b64)
    return a, b, product.T if transpose_out else product


def _check_embedded(big, shape, reference, bound):
    values = big.numpy()
    inside = np.zeros(values.shape, dtype=bool)
    inside[1 : 1 + shape[0], 2 : 2 + shape[1]] = True
    assert rel_error(values[inside].reshape(shape), reference) < bound
    assert np.isnan(values[~inside]).all(), "a product wrote outside its destination view"


def _capture(stream, record):
    """Capture what ``record()`` enqueues on ``stream``; the instantiated graph and node types."""
    with cuda.capture(stream) as cap:
        record()
    node_types = cap.captured.node_types()
    return cuda.Graph.from_captured(cap.captured), node_types


# --- the seed's example ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [(3, 4, 5), (64, 64, 64), (257, 129, 65), (1000, 1100, 900), (4096, 4096, 4096)],
)
def test_seed_capture_example_at_sizes(rng, m, k, n):
    source = CAPTURE_EXAMPLE.replace("(3, 5)", f"({m}, {n})")
    assert source.count(f"({m}, {n})") == 1
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    namespace = {"arrays": arrays, "a": a, "b": b}
    exec(source, namespace)  # the page's code, verbatim but for the shape of `out`
    first = namespace["out"].numpy()
    reference = a.astype(np.float32).astype(np.float64) @ b.astype(np.float32).astype(np.float64)
    assert rel_error(first, reference) < max(k, 16) * EPS32

    namespace["out"].fill(np.nan, namespace["stream"])
    namespace["launcher"].launch()  # the graph outlives the handle's destroy() and replays
    namespace["launcher"].synchronize()
    assert np.array_equal(namespace["out"].numpy(), first), "two replays differ"


# --- products on the device ----------------------------------------------------------------------


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_step_on_the_device_all_triples(rng, flags, dtype):
    a, b, reference = _case(rng, flags, dtype)
    _, a_view = _embedded(a)
    _, b_view = _embedded(b)
    out_big, out_view = _embedded(np.full(reference.shape, np.nan, dtype))
    step = matmul_step("out", a="a", b="b", out="out", **_kwargs(flags))
    step.run({"a": a_view, "b": b_view, "out": out_view}, "device")
    _check_embedded(out_big, reference.shape, reference, 53 * np.finfo(dtype).eps)


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_k_0_product_on_the_device_is_zeros_then_beta_times_out(rng, stream, flags, dtype):
    a, b, reference = _case(rng, flags, dtype, k=0)
    out = arrays.full(reference.shape, np.nan, np.dtype(dtype).name, "cuda:0")
    step = matmul_step("out", a="a", b="b", out="out", **_kwargs(flags))
    step.run({"a": _device(a), "b": _device(b), "out": out}, "device")
    np.testing.assert_array_equal(out.numpy(), np.zeros(reference.shape))
    if dtype != np.float32:
        return
    operands = {"a": _device(a), "b": _device(b), "out": out}
    params = sgemm_params_for_arrays(*operands.values(), **_kwargs(flags))
    assert params.k == 0
    handle = CublasCaptureHandle(stream)
    try:
        handle.warm(params, operands)
        out.fill(2.0, stream)
        graph, _ = _capture(stream, lambda: handle.sgemm(params, operands, alpha=3.0, beta=0.5))
        launcher = graph.launcher().stream(stream)
        launcher.launch()
        launcher.synchronize()
        np.testing.assert_array_equal(out.numpy(), np.ones(reference.shape))
        graph.destroy()
    finally:
        handle.destroy()


def test_an_out_sharing_memory_with_an_operand_is_refused_on_the_device(rng):
    values = rng.standard_normal((40, 96)).astype(np.float32)
    big = _device(values)
    b = rng.standard_normal((32, 32)).astype(np.float32)
    step = matmul_step("c", a="a", b="b", out="c")
    with pytest.raises(MatmulUnavailable, match="operand 'out' shares memory with operand 'a'"):
        step.run({"a": big[:, :32], "b": _device(b), "c": big[:, 31:63]}, "device")
    with pytest.raises(GemmMappingUnavailable, match="shares memory with operand 'b'"):
        sgemm_params_for_arrays(_device(b), big[:32, :32], big[:32, :32])
    np.testing.assert_array_equal(big.numpy(), values)  # nothing was enqueued
    big[:, 32:64].fill(np.nan)
    step.run({"a": big[:, :32], "b": _device(b), "c": big[:, 32:64]}, "device")
    after = big.numpy()
    reference = values[:, :32].astype(np.float64) @ b.astype(np.float64)
    assert rel_error(after[:, 32:64], reference) < 32 * EPS32
    np.testing.assert_array_equal(after[:, :32], values[:, :32])
    np.testing.assert_array_equal(after[:, 64:], values[:, 64:])


@pytest.mark.parametrize("flags", FLAGS)
def test_captured_sgemm_all_triples_replays_bitwise(rng, stream, handle, flags):
    a, b, reference = _case(rng, flags, np.float32)
    _, a_view = _embedded(a)
    _, b_view = _embedded(b)
    out_big, out_view = _embedded(np.zeros(reference.shape, np.float32))
    operands = {"a": a_view, "b": b_view, "out": out_view}
    params = sgemm_params_for_arrays(a_view, b_view, out_view, **_kwargs(flags))
    handle.warm(params, operands)
    out_view.fill(np.nan, stream)
    graph, node_types = _capture(stream, lambda: handle.sgemm(params, operands))
    assert "kernel" in node_types and "memalloc" not in node_types
    launcher = graph.launcher().stream(stream)
    launcher.launch()
    launcher.synchronize()
    _check_embedded(out_big, reference.shape, reference, 53 * EPS32)
    first = out_big.numpy()
    out_view.fill(np.nan, stream)
    launcher.launch()
    launcher.synchronize()
    assert np.array_equal(out_big.numpy(), first, equal_nan=True)
    graph.destroy()


def test_alpha_and_beta_are_baked_into_the_recorded_node(rng, stream, handle):
    a, b, reference = _case(rng, (False, False, False), np.float32, 128, 96, 64)
    da, db = _device(a), _device(b)
    out, other = (arrays.full(reference.shape, np.nan, "float32", "cuda:0") for _ in range(2))
    params = sgemm_params_for_arrays(da, db, out)
    handle.warm(params, {"a": da, "b": db, "out": out})

    def record():
        out.fill(1.0, stream)
        handle.sgemm(params, {"a": da, "b": db, "out": out}, alpha=2.0, beta=0.5)

    graph, _ = _capture(stream, record)
    launcher = graph.launcher().stream(stream)
    launcher.launch()
    launcher.synchronize()
    first = out.numpy()
    assert rel_error(first, 2.0 * reference + 0.5) < 64 * EPS32

    handle.sgemm(params, {"a": da, "b": db, "out": other}, alpha=-3.0, beta=0.0)  # new scalars
    stream.synchronize()
    assert rel_error(other.numpy(), -3.0 * reference) < 64 * EPS32
    launcher.launch()
    launcher.synchronize()
    assert np.array_equal(out.numpy(), first), "the recorded node took the new alpha/beta"
    graph.destroy()


def test_a_refused_alpha_or_beta_changes_nothing_and_a_0d_alpha_is_read_each_call(
    rng, stream, handle
):
    """A refused scalar (None, complex) names itself and leaves the prepared call as it
    was, so the next call uses its own alpha; a 0-d array changed in place is read again."""
    a, b, reference = _case(rng, (False, False, False), np.float32, 64, 48, 32)
    da, db = _device(a), _device(b)
    out = arrays.full(reference.shape, np.nan, "float32", "cuda:0")
    params = sgemm_params_for_arrays(da, db, out)
    operands = {"a": da, "b": db, "out": out}
    handle.sgemm(params, operands)
    for alpha, beta, name in ((0.5, None, "beta"), (1 + 2j, 0.0, "alpha"),
                              (np.complex64(0.5), 0.0, "alpha")):  # fmt: skip
        with pytest.raises(EagleTypeError, match=f"^{name} must be a real number"):
            handle.sgemm(params, operands, alpha=alpha, beta=beta)
        with pytest.raises(EagleTypeError, match=f"^{name} must be a real number"):
            handle.bind(params, operands, alpha=alpha, beta=beta)
    out.fill(np.nan, stream)
    handle.sgemm(params, operands)
    stream.synchronize()
    assert rel_error(out.numpy(), reference) < 64 * EPS32
    alpha = np.array(2.0)
    handle.sgemm(params, operands, alpha=alpha)
    alpha[...] = -3.0
    handle.sgemm(params, operands, alpha=alpha)
    stream.synchronize()
    assert rel_error(out.numpy(), -3.0 * reference) < 64 * EPS32


def test_tf32_is_an_opt_in_that_rounds(rng, stream):
    a, b, reference = _case(rng, (False, False, False), np.float32, 1024, 1024, 1024)
    da, db = _device(a), _device(b)
    out = arrays.full(reference.shape, np.nan, "float32", "cuda:0")
    params = sgemm_params_for_arrays(da, db, out)
    errors = {}
    for math in ("fp32", "tf32"):
        handle = CublasCaptureHandle(stream, math=math)
        handle.sgemm(params, {"a": da, "b": db, "out": out})
        stream.synchronize()
        errors[math] = rel_error(out.numpy(), reference)
        handle.destroy()
    assert errors["fp32"] < 1024 * EPS32
    assert 10 * errors["fp32"] < errors["tf32"] < 1e-2


# --- plans on the device ---------------------------------------------------------------------


def test_lowered_adjoint_plan_captured_accumulates(rng, stream, handle):
    plan = lower_dense_gemm(_gemm_record(0, 0), direction="adjoint", dtype="float32")
    w = rng.standard_normal(plan.required["w"].shape).astype(np.float32)
    f = rng.standard_normal(plan.required["f"].shape).astype(np.float32)
    y_bar = rng.standard_normal(plan.required["y_bar"].shape).astype(np.float32)
    buffers = {
        "w": _device(w),
        "f": _device(f),
        "y_bar": _device(y_bar.reshape(-1)),  # a lane plane, seen in its declared shape
        "w_bar": arrays.full(plan.required["w_bar"].shape, np.nan, "float32", "cuda:0"),
        "f_bar": arrays.full(plan.required["f_bar"].shape, np.nan, "float32", "cuda:0"),
    }
    calls = captured_gemm_calls(plan, buffers, operand_class="gemm")
    assert calls[0].operands["out"] is buffers["w_bar"]
    assert calls[1].operands["out"] is buffers["f_bar"]
    for gemm_call in calls:
        handle.warm(gemm_call.params, gemm_call.operands)

    def record():
        buffers["w_bar"].fill(0.25, stream)
        buffers["f_bar"].fill(0.25, stream)
        for _ in range(2):  # two launches' gradients add into the same planes
            for gemm_call in calls:
                handle.sgemm(gemm_call.params, gemm_call.operands, beta=1.0)

    graph, node_types = _capture(stream, record)
    assert "memalloc" not in node_types
    launcher = graph.launcher().stream(stream)
    for _ in range(2):
        launcher.launch()
    launcher.synchronize()
    w64, f64, y_bar64 = (x.astype(np.float64) for x in (w, f, y_bar))
    assert rel_error(buffers["w_bar"].numpy() - 0.25, 2 * f64 @ y_bar64.T) < 64 * EPS32
    assert rel_error(buffers["f_bar"].numpy() - 0.25, 2 * w64 @ y_bar64) < 64 * EPS32
    graph.destroy()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lowered_plans_run_on_the_device_without_allocating(rng, dtype):
    forward = lower_dense_gemm(_gemm_record(1, 0), dtype=dtype)
    gemv = lower_dense_gemm(_record(_operand("w", 0)), dtype=dtype)
    w = rng.standard_normal(forward.required["w"].shape).astype(dtype)
    f = rng.standard_normal(forward.required["f"].shape).astype(dtype)
    w_gemv = rng.standard_normal(gemv.required["w"].shape).astype(dtype)
    y = arrays.full((forward.required["y"].shape[0] * forward.required["y"].shape[1],), np.nan,
                    dtype, "cuda:0")  # fmt: skip
    y_gemv = arrays.full((gemv.required["y"].shape[0],), np.nan, dtype, "cuda:0")
    buffers = {"w": _device(w), "f": _device(f), "y": y}
    gemv_buffers = {"w": _device(w_gemv), "ones": arrays.ones((w_gemv.shape[0],), dtype, "cuda:0"),
                    "y": y_gemv}  # fmt: skip
    forward("device", buffers)  # makes the cached handle of eagle's current stream
    pool = cuda.default_pool()
    gc.collect()
    used = pool.used_bytes()
    for _ in range(10):
        forward("device", buffers)
        gemv("device", gemv_buffers)
    assert pool.used_bytes() <= used
    bound = 16 * np.finfo(dtype).eps
    assert rel_error(y.numpy(), (w.astype(np.float64) @ f).reshape(-1)) < bound
    assert rel_error(y_gemv.numpy(), w_gemv.astype(np.float64).sum(axis=0)) < bound


def test_matmul_step_on_the_device_neither_waits_nor_allocates(rng):
    a, b = (rng.standard_normal((4096, 4096), np.float32) for _ in range(2))
    bufs = {
        "a": _device(a),
        "b": _device(b),
        "out": arrays.empty((4096, 4096), "float32", "cuda:0"),
    }
    step = matmul_step("out", a="a", b="b", out="out")
    step.run(bufs, "device")
    current = cuda.current_stream()
    current.synchronize()
    start, end = cuda.Event(), cuda.Event()
    gc.collect()
    used = cuda.default_pool().used_bytes()
    start.record(current)
    began = time.perf_counter()
    for _ in range(20):
        step.run(bufs, "device")
    host_seconds = time.perf_counter() - began
    end.record(current)
    end.synchronize()
    device_seconds = start.elapsed_ms(end) / 1e3
    assert cuda.default_pool().used_bytes() <= used
    assert host_seconds < device_seconds / 2, (host_seconds, device_seconds)
    assert rel_error(bufs["out"].numpy()[:64], a[:64].astype(np.float64) @ b) < 4096 * EPS32


def test_matmul_step_on_the_device_can_be_captured(rng, stream):
    a, b, reference = _case(rng, (True, False, True), np.float32)
    bufs = {"a": _device(a), "b": _device(b),
            "out": arrays.full(reference.shape, np.nan, "float32", "cuda:0")}  # fmt: skip
    step = matmul_step("out", a="a", b="b", out="out", transpose_a=True, transpose_out=True)
    with stream:  # eagle's current stream: the step's handle for it is made here, outside
        step.run(bufs, "device")
        bufs["out"].fill(np.nan, stream)
        graph, node_types = _capture(stream, lambda: step.run(bufs, "device"))
    assert "memalloc" not in node_types
    graph.launcher().stream(stream).launch()
    stream.synchronize()
    assert rel_error(bufs["out"].numpy(), reference) < 53 * EPS32
    graph.destroy()


# --- capture rules, lifetimes, memory -------------------------------------------------------------


def _product(rng, m=96, k=80, n=72):
    a, b, reference = _case(rng, (False, False, False), np.float32, m, n, k)
    operands = {"a": _device(a), "b": _device(b),
                "out": arrays.full(reference.shape, np.nan, "float32", "cuda:0")}  # fmt: skip
    params = sgemm_params_for_arrays(operands["a"], operands["b"], operands["out"])
    return operands, params, reference


@pytest.mark.parametrize(("m", "k", "n"), [(7, 5, 3), (333, 4096, 257), (4096, 4096, 4096)])
@pytest.mark.parametrize("math", ["fp32", "tf32"])
def test_a_capture_never_contains_an_allocation(rng, stream, m, k, n, math):
    handle = CublasCaptureHandle(stream, math=math)
    operands, params, _ = _product(rng, m, k, n)
    handle.warm(params, operands)
    graph, node_types = _capture(stream, lambda: handle.sgemm(params, operands, beta=1.0))
    assert "kernel" in node_types
    assert not {"memalloc", "memfree"} & set(node_types), node_types
    graph.destroy()
    handle.destroy()


@pytest.mark.device_memory
def test_one_handle_captured_100_times_does_not_grow_device_memory(rng, stream, handle):
    operands, params, _ = _product(rng, 512, 512, 512)
    handle.warm(params, operands)

    def cycle():
        graph, _ = _capture(stream, lambda: handle.sgemm(params, operands))
        graph.launcher().stream(stream).launch()
        stream.synchronize()
        graph.destroy()

    cycle()
    gc.collect()
    free_before, _ = cudart.cudaMemGetInfo()
    used_before = cuda.default_pool().used_bytes()
    for _ in range(100):
        cycle()
    free_after, _ = cudart.cudaMemGetInfo()
    assert free_before - free_after <= 4 * MiB, (free_before, free_after)
    assert cuda.default_pool().used_bytes() <= used_before


def test_destroy_with_a_live_graph_closes_the_handle_and_keeps_the_graph_valid(rng, stream):
    handle = CublasCaptureHandle(stream)
    operands, params, reference = _product(rng)
    handle.warm(params, operands)
    graph, _ = _capture(stream, lambda: handle.sgemm(params, operands))
    handle.destroy()
    handle.destroy()  # idempotent
    assert not handle.alive
    with pytest.raises(GemmCaptureUnavailable, match="was destroyed; make a new"):
        handle.sgemm(params, operands)
    with pytest.raises(GemmCaptureUnavailable, match="was destroyed"):
        handle.warm(params, operands)
    assert handle._handle is not None, "cuBLAS's handle was freed under a live graph"
    operands["out"].fill(np.nan, stream)
    graph.launcher().stream(stream).launch()
    stream.synchronize()
    assert rel_error(operands["out"].numpy(), reference) < 80 * EPS32
    graph.destroy()
    handle.destroy()
    assert not handle._release.alive, "cuBLAS's handle outlived its last graph's destroy()"


def test_capture_rules_are_refused_by_name(rng, stream, handle):
    operands, params, _ = _product(rng)
    refused = GemmCaptureUnavailable
    with pytest.raises(refused, match="make the CublasCaptureHandle"), cuda.capture(stream):
        CublasCaptureHandle(stream)
    with pytest.raises(refused, match=r"warm\(\) runs the product"), cuda.capture(stream):
        handle.warm(params, operands)
    with pytest.raises(refused, match="this product was never warmed"), cuda.capture(stream):
        handle.sgemm(params, operands)
    assert not cuda.is_capturing(stream)


def test_operands_are_checked_against_the_params(rng, handle):
    operands, params, _ = _product(rng)
    with pytest.raises(GemmCaptureUnavailable, match="operand 'b' is not a device array"):
        handle.sgemm(params, {**operands, "b": operands["b"].numpy()})
    with pytest.raises(GemmCaptureUnavailable, match=r"operands lack \['out'\]"):
        handle.sgemm(params, {"a": operands["a"], "b": operands["b"]})
    wider = arrays.zeros((operands["b"].shape[0], 80), "float32", "cuda:0")
    with pytest.raises(GemmMappingUnavailable, match="operand 'out' has shape"):
        handle.sgemm(params, {**operands, "b": wider})
    wide_out = arrays.zeros((operands["out"].shape[0], 100), "float32", "cuda:0")
    sliced = sgemm_params_for_arrays(operands["a"], operands["b"], wide_out[:, :72])
    with pytest.raises(GemmMappingUnavailable, match="do not describe these operands"):
        handle.sgemm(sliced, operands)  # params with ldc 100, an out with ldc 72


def test_a_failed_cublas_create_is_gemm_capture_unavailable(monkeypatch, stream):
    from nvmath.bindings import cublas

    def refuse():
        raise RuntimeError("simulated: cuBLAS could not initialise")

    monkeypatch.setattr(cublas, "create", refuse)
    with pytest.raises(GemmCaptureUnavailable, match="cuBLAS could not make a handle: simulated"):
        CublasCaptureHandle(stream)


def test_a_status_cublas_fails_with_is_a_cuda_error_naming_the_call(handle):
    cublas = _library.cublas()
    op = int(cublas.Operation.N)
    scalars = np.ones(2, np.float32)
    alpha, beta = scalars.ctypes.data, scalars.ctypes.data + 4
    with pytest.raises(CudaError, match=r"^cublas\.sgemm failed with CUBLAS_STATUS_INVALID_VALUE"):
        cublas.sgemm(handle._handle, op, op, -1, 1, 1, alpha, 0, 1, 0, 1, beta, 0, 1)
