"""Reverse mode on the device (run with ``nox -s gpu``): device adjoints against host
adjoints, and a forward with its adjoint captured into one graph and replayed."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.diff
import eagle.plan
import hawk.diff
from eagle import arrays, cuda
from tests._diff_kernels import ALL, adjoint_planes, random_cotangents
from tests._hawk_kernels import Case, contract, saxpy
from tests._util import rel_error
from tests.test_plan_gpu import _to_device

pytestmark = pytest.mark.gpu

#: the device adjoint in ``dtype`` against the host adjoint run in float64: the error of
#: what the adjoint added to each gradient plane, relative to the sizes of the two terms
#: of that addition (the plane starts at random values, and a sum that nearly cancels
#: them keeps only the dtype's digits of both; atomics add in any order)
TOLERANCE = {np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-10}


def _added_error(values: np.ndarray, expected: np.ndarray, begun: np.ndarray) -> float:
    added, expected_added = values - begun, expected - begun
    scale = np.linalg.norm(expected_added) + np.linalg.norm(begun)
    return float(np.linalg.norm(added - expected_added) / scale)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_device_adjoint_matches_host_adjoint(
    case: Case, dtype: type, rng: np.random.Generator
) -> None:
    planes = case.make(rng, np.dtype(dtype))
    cotangents = random_cotangents(case.kernel, planes, rng)
    wrt = list(hawk.diff.gradient_planes(case.kernel))
    given, start = adjoint_planes(case.kernel, planes, cotangents, wrt, rng)
    in_float64 = {
        name: value.astype(np.float64) if value.dtype.kind == "f" else value.copy()
        for name, value in given.items()
    }
    on_device = _to_device(given)
    adjoint = eagle.diff.reverse(eagle.plan.auto(case.kernel))
    assert adjoint.route("device") == "loop"
    adjoint.run(**in_float64)
    adjoint.run(**on_device)
    for gradient, begun in start.items():
        device_values = on_device[gradient].numpy()
        assert device_values.dtype == np.dtype(dtype)
        if np.array_equal(in_float64[gradient], begun):  # a gradient that is zero (a step's)
            assert np.array_equal(device_values, begun), gradient
        else:
            assert not np.array_equal(device_values, begun), gradient
            error = _added_error(
                device_values.astype(np.float64), in_float64[gradient], begun.astype(np.float64)
            )
            assert error < TOLERANCE[np.dtype(dtype)], (gradient, error)


def _contract_device(rng: np.random.Generator, dtype: str) -> dict[str, arrays.Array]:
    w, f = rng.standard_normal((16, 8)), rng.standard_normal((16, 12))
    return {
        "w": arrays.asarray(w.astype(dtype), device="cuda:0"),
        "f": arrays.asarray(f.astype(dtype), device="cuda:0"),
    }


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_forward_and_reverse_in_one_graph_replayed(dtype: str, rng: np.random.Generator) -> None:
    inputs = _contract_device(rng, dtype)
    y = arrays.full((96,), np.nan, dtype, device="cuda:0")
    y_bar_host = rng.standard_normal(96)
    y_bar = arrays.asarray(y_bar_host.astype(dtype), device="cuda:0")
    w_start, f_start = rng.standard_normal((16, 8)), rng.standard_normal((16, 12))
    w_bar = arrays.asarray(w_start.astype(dtype), device="cuda:0")
    f_bar = arrays.asarray(f_start.astype(dtype), device="cuda:0")

    stream = cuda.Stream(non_blocking=True)
    forward = eagle.plan.auto(contract).bind(**inputs, y=y)
    backward = eagle.diff.reverse(eagle.plan.auto(contract)).bind(
        **inputs, y_bar=y_bar, w_bar=w_bar, f_bar=f_bar
    )
    with cuda.StreamCapturer(stream.ptr()) as capturer:
        forward.launch(stream)
        backward.launch(stream)
    assert capturer.captured is not None
    assert capturer.captured.node_types().count("kernel") == 2
    graph = cuda.Graph.from_captured(capturer.captured)
    launcher = graph.launcher().stream(stream.ptr())
    replays = 3
    for _ in range(replays):
        launcher.launch()
    launcher.synchronize()

    w = inputs["w"].numpy().astype(np.float64)
    f = inputs["f"].numpy().astype(np.float64)
    yb = y_bar.numpy().astype(np.float64).reshape(12, 8)  # lane = sample * U + unit
    tolerance = 1e-5 if dtype == "float32" else 1e-12
    assert rel_error(y.numpy(), (f.T @ w).reshape(-1)) < tolerance
    w_added = w_bar.numpy().astype(np.float64) - w_start.astype(dtype)
    f_added = f_bar.numpy().astype(np.float64) - f_start.astype(dtype)
    assert rel_error(w_added, replays * (f @ yb)) < tolerance
    assert rel_error(f_added, replays * (w @ yb.T)) < tolerance
    graph.destroy()


def test_bound_adjoint_capture_and_a_sequence_on_the_device(rng: np.random.Generator) -> None:
    first, second = _contract_device(rng, "float32"), _contract_device(rng, "float32")
    second["w"] = first["w"]
    cotangents = [rng.standard_normal(96).astype(np.float32) for _ in range(2)]
    w_bar = arrays.full((16, 8), 0.25, "float32", device="cuda:0")
    plan = eagle.plan.auto(contract)
    bound = eagle.diff.reverse([plan, plan]).bind(
        {**first, "y_bar": arrays.asarray(cotangents[0], device="cuda:0"), "w_bar": w_bar},
        {**second, "y_bar": arrays.asarray(cotangents[1], device="cuda:0"), "w_bar": w_bar},
    )
    assert bound.side == "device" and len(bound.steps) == 2
    stream = cuda.Stream(non_blocking=True)
    launcher = bound.capture(stream)
    launcher.launch()
    launcher.launch()
    launcher.synchronize()
    once = sum(
        p["f"].numpy().astype(np.float64) @ c.astype(np.float64).reshape(12, 8)
        for p, c in zip((first, second), cotangents, strict=True)
    )
    assert rel_error(w_bar.numpy().astype(np.float64) - 0.25, 2 * once) < 1e-5


def test_a_param_gradient_sums_every_lane(rng: np.random.Generator) -> None:
    n = 1 << 20
    x = rng.standard_normal(n)
    y_bar = rng.standard_normal(n)
    a_bar = arrays.full((1,), 0.5, "float64", device="cuda:0")
    x_bar = arrays.full((n,), -1.0, "float64", device="cuda:0")
    eagle.diff.reverse(eagle.plan.auto(saxpy)).run(
        a=1.5,
        x=arrays.asarray(x, device="cuda:0"),
        y_bar=arrays.asarray(y_bar, device="cuda:0"),
        a_bar=a_bar,
        x_bar=x_bar,
    )
    assert rel_error(a_bar.numpy() - 0.5, [np.dot(x, y_bar)]) < 1e-10
    assert rel_error(x_bar.numpy() + 1.0, 1.5 * y_bar) < 1e-14
