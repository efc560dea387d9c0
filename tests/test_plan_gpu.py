# ruff: noqa: F821, F841, UP037
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["i":M], which pyflakes reads as forward references (F821, UP037).
"""hawk kernels on the device through eagle.plan (run with ``nox -s gpu``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import eagle.cuda.module
import eagle.plan
import hawk
from eagle import arrays, cuda
from eagle.gemm import CublasCaptureHandle, sgemm_params_for_arrays
from hawk import math as hm
from tests._hawk_kernels import CASES, TOLERANCE, Case, saxpy, written
from tests._util import rel_error

pytestmark = pytest.mark.gpu

IDS = [case.name for case in CASES]


def _to_device(planes: dict[str, np.ndarray]) -> dict[str, arrays.Array]:
    return {name: arrays.asarray(value, device="cuda:0") for name, value in planes.items()}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_device_agrees_with_host_and_reference(
    case: Case, dtype: type, rng: np.random.Generator
) -> None:
    planes = case.make(rng, np.dtype(dtype))
    expected = case.reference({k: v.copy() for k, v in planes.items()})
    on_host = {k: v.copy() for k, v in planes.items()}
    on_device = _to_device(planes)
    plan = eagle.plan.auto(case.kernel)
    plan.run(**on_host)
    plan.run(**on_device)
    tolerance = TOLERANCE[np.dtype(dtype)]
    for name in written(case):
        device_values = on_device[name].numpy()
        assert device_values.dtype == np.dtype(dtype)
        assert rel_error(device_values, expected[name]) < tolerance, name
        assert rel_error(device_values, on_host[name]) < tolerance, name


def test_bound_plan_captured_and_replayed_100_times(rng: np.random.Generator) -> None:
    n = 100_003
    x = rng.standard_normal(n)
    y0 = rng.standard_normal(n)
    a = rng.uniform(0.5, 1.5)
    x_d, y_d = arrays.asarray(x, device="cuda:0"), arrays.asarray(y0, device="cuda:0")
    a_d = arrays.full((1,), a, "float64", device="cuda:0")
    stream = cuda.Stream(non_blocking=True)
    bound = eagle.plan.auto(saxpy).bind(a=a_d, x=x_d, y=y_d)
    launcher = bound.capture(stream)
    for _ in range(100):
        launcher.launch()
    launcher.synchronize()
    assert rel_error(y_d.numpy(), y0 + 100 * a * x) < 1e-12
    # the graph reads the param's current value: change it and replay
    a_d.fill(-2.0, stream)
    for _ in range(10):
        launcher.launch()
    launcher.synchronize()
    assert rel_error(y_d.numpy(), y0 + 100 * a * x - 20.0 * x) < 1e-12


def test_bound_launch_enqueues_on_the_given_stream(rng: np.random.Generator) -> None:
    x = rng.standard_normal(4097).astype(np.float32)
    y_d = arrays.full((4097,), 1.0, "float32", device="cuda:0")  # ready on return
    stream = cuda.Stream(non_blocking=True)
    bound = eagle.plan.auto(saxpy).bind(a=3.0, x=arrays.asarray(x, device="cuda:0"), y=y_d)
    bound.launch(stream)
    bound.launch(stream.ptr())
    stream.synchronize()
    assert rel_error(y_d.numpy(), 1.0 + 6.0 * x.astype(np.float64)) < 1e-6


def test_mixed_residency_is_refused_by_name(rng: np.random.Generator) -> None:
    x_d = arrays.asarray(rng.standard_normal(8), device="cuda:0")
    y = np.full(8, np.nan)
    with pytest.raises(ValueError, match="plane 'x' is on cuda:0 but plane 'y' is on the host"):
        eagle.plan.auto(saxpy).run(a=1.0, x=x_d, y=y)
    assert np.isnan(y).all()


M, K, N = 48, 40, 56


@hawk.kernel
def _scale(x: hawk.Table["i":M, "k":K], s: hawk.Param, y: hawk.Mutable[hawk.Scalar]):
    i, k = hm.split_index(K)
    y = s * x.at(i=i, k=k)


@hawk.kernel
def _finish(c: hawk.Table["i":M, "j":N], z: hawk.Mutable[hawk.Scalar]):
    i, j = hm.split_index(N)
    z = hm.tanh(c.at(i=i, j=j)) + 1.0


class _Matrix:
    """A 2-D view of a contiguous 1-D device Array, through the CUDA array interface."""

    def __init__(self, flat: arrays.Array, shape: tuple[int, int]) -> None:
        self.flat = flat
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": flat.dtype.str,
            "data": (flat.ptr, False),
            "strides": None,
            "version": 3,
        }


def test_hawk_gemm_hawk_in_one_graph(rng: np.random.Generator) -> None:
    x = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    s = 0.75
    x_d, b_d = arrays.asarray(x, device="cuda:0"), arrays.asarray(b, device="cuda:0")
    s_d = arrays.full((1,), s, "float32", device="cuda:0")
    scaled = arrays.full((M * K,), np.nan, "float32", device="cuda:0")
    scaled_2d = arrays.asarray(_Matrix(scaled, (M, K)))
    product = arrays.full((M, N), np.nan, "float32", device="cuda:0")
    z = arrays.full((M * N,), np.nan, "float32", device="cuda:0")

    stream = cuda.Stream(non_blocking=True)
    first = eagle.plan.auto(_scale).bind(x=x_d, s=s_d, y=scaled)
    second = eagle.plan.auto(_finish).bind(c=product, z=z)
    operands = {"a": scaled_2d, "b": b_d, "out": product}
    handle = CublasCaptureHandle(stream.ptr())
    try:
        params = sgemm_params_for_arrays(scaled_2d, b_d, product)
        handle.warm(params, operands)
        product.fill(np.nan, stream)
        capturer = cuda.StreamCapturer(stream.ptr())
        capturer.begin()
        try:
            first.launch(stream)
            handle.sgemm(params, operands)
            second.launch(stream)
        finally:
            captured = capturer.end()
        assert captured.node_types().count("kernel") >= 3
        graph = cuda.Graph.from_captured(captured)
        launcher = graph.launcher().stream(stream.ptr())
        for _ in range(3):
            launcher.launch()
        launcher.synchronize()
        x64, b64 = x.astype(np.float64), b.astype(np.float64)
        assert rel_error(z.numpy(), (np.tanh(s * x64 @ b64) + 1.0).reshape(-1)) < 1e-5
        s_d.fill(-0.5, stream)
        launcher.launch()
        launcher.synchronize()
        assert rel_error(z.numpy(), (np.tanh(-0.5 * x64 @ b64) + 1.0).reshape(-1)) < 1e-5
        graph.destroy()
    finally:
        handle.destroy()


# -- plan.run reusing its binding --------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_repeated_runs_over_other_planes_of_one_shape_are_right(
    dtype: type, rng: np.random.Generator
) -> None:
    n = 5003
    xs = [rng.standard_normal(n).astype(dtype) for _ in range(3)]
    starts = [rng.standard_normal(n).astype(dtype) for _ in range(3)]
    x_d = [arrays.asarray(x, device="cuda:0") for x in xs]
    y_d = [arrays.asarray(y, device="cuda:0") for y in starts]
    expected = [y.astype(np.float64) for y in starts]
    plan = eagle.plan.auto(saxpy)
    for shift in range(3):
        for i in range(3):
            a = float(rng.uniform(-2.0, 2.0))
            plan.run(a=a, x=x_d[i], y=y_d[(i + shift) % 3])
            expected[(i + shift) % 3] += a * xs[i].astype(np.float64)
    for i in range(3):
        assert rel_error(y_d[i].numpy(), expected[i]) < TOLERANCE[np.dtype(dtype)], i


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_param_given_as_a_number_or_an_array_runs_alike(
    dtype: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded: list[str] = []
    load = eagle.cuda.module.load_kernel

    def spy(source: str, name: str, *, device: int = 0) -> Any:
        loaded.append(source)
        return load(source, name, device=device)

    monkeypatch.setattr(eagle.cuda.module, "load_kernel", spy)
    n = 4099
    x, y0 = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    x_d = arrays.asarray(x, device="cuda:0")
    plan = eagle.plan.auto(saxpy)
    a = float(np.asarray(rng.uniform(-2.0, 2.0), dtype))  # exact in the kernel's dtype
    for given in (a, arrays.full((1,), a, dtype, "cuda:0")):  # by value, then by pointer
        y_d = arrays.asarray(y0, device="cuda:0")
        plan.run(a=given, x=x_d, y=y_d)
        expected = y0.astype(np.float64) + a * x.astype(np.float64)
        assert rel_error(y_d.numpy(), expected) < TOLERANCE[np.dtype(dtype)]
    assert len(set(loaded)) == 2  # one kernel for each way of passing a


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_run_inside_a_capture_allocates_nothing_and_records_its_param(
    dtype: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eagle.cuda.memory import MemoryPool

    n = 4097
    x, y0 = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    x_d, y_d = arrays.asarray(x, device="cuda:0"), arrays.asarray(y0, device="cuda:0")
    plan = eagle.plan.auto(saxpy)
    stream = cuda.Stream(non_blocking=True)
    allocations: list[tuple] = []
    allocate = MemoryPool.allocate

    def counting(self, *args, **kwargs):
        allocations.append(args)
        return allocate(self, *args, **kwargs)

    with stream:
        plan.run(a=0.5, x=x_d, y=y_d)  # binds on this stream, outside the capture
        monkeypatch.setattr(MemoryPool, "allocate", counting)
        with cuda.StreamCapturer(stream) as capturer:
            plan.run(a=2.0, x=x_d, y=y_d)  # neither allocates nor synchronises
        plan.run(a=-1.0, x=x_d, y=y_d)
    assert allocations == []
    assert capturer.captured is not None
    assert capturer.captured.node_types() == ["kernel"]  # the number is passed by value
    graph = cuda.Graph.from_captured(capturer.captured)
    launcher = graph.launcher().stream(stream)
    launcher.launch()
    launcher.launch()  # replays take the captured 2.0, not the later -1.0
    launcher.synchronize()
    x64 = x.astype(np.float64)
    expected = y0.astype(np.float64) + (0.5 - 1.0 + 2.0 * 2.0) * x64
    assert rel_error(y_d.numpy(), expected) < TOLERANCE[np.dtype(dtype)]
    graph.destroy()


def test_a_bound_number_param_is_fixed_at_bind(rng: np.random.Generator) -> None:
    n = 4097
    x, y0 = rng.standard_normal(n), rng.standard_normal(n)
    x_d, y_d = arrays.asarray(x, device="cuda:0"), arrays.asarray(y0, device="cuda:0")
    bound = eagle.plan.auto(saxpy).bind(a=1.5, x=x_d, y=y_d)
    stream = cuda.Stream(non_blocking=True)
    with cuda.StreamCapturer(stream) as capturer:
        bound.launch(stream)
    assert capturer.captured is not None
    assert capturer.captured.node_types() == ["kernel"]  # no memset per launch
    graph = cuda.Graph.from_captured(capturer.captured)
    launcher = graph.launcher().stream(stream)
    launcher.launch()
    launcher.launch()
    launcher.synchronize()
    assert rel_error(y_d.numpy(), y0 + 3.0 * x) < 1e-12
    graph.destroy()


def test_a_routed_run_over_other_outputs_writes_each(rng: np.random.Generator) -> None:
    from tests._route_kernels import B, R, U
    from tests._route_kernels import contract as routed_contract

    plan = eagle.plan.auto(routed_contract, contraction="gemm")
    assert plan.route("device") == "gemm"
    sets = []
    for _ in range(2):
        w = rng.standard_normal((R, U)).astype(np.float32)
        f = rng.standard_normal((R, B)).astype(np.float32)
        planes = {
            "w": arrays.asarray(w, device="cuda:0"),
            "f": arrays.asarray(f, device="cuda:0"),
            "y": arrays.full((B * U,), np.nan, "float32", "cuda:0"),
        }
        sets.append((planes, (f.astype(np.float64).T @ w.astype(np.float64)).reshape(-1)))
    for planes, expected in sets * 2:  # the second round reuses each set's binding
        planes["y"].fill(np.nan)
        plan.run(**planes)
        assert rel_error(planes["y"].numpy(), expected) < 1e-5
