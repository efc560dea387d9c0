"""The KAN layer on a device: each launch, then the whole training step captured in one
graph, against a float64 numpy reference (benchmarks/_kan.py, at the benchmark's shape
too)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import eagle.diff
import eagle.plan
from eagle import arrays, cuda
from hawk.emit import policy
from tests.test_kan import kan

pytestmark = pytest.mark.gpu

EPS32 = float(np.finfo(np.float32).eps)

# (samples, inputs, outputs, intervals): odd extents, and the benchmark's
SHAPES = [(1000, 5, 7, 8), (16384, 64, 64, 8)]


def _device(values: np.ndarray) -> arrays.Array:
    return arrays.asarray(np.ascontiguousarray(values, np.float32), device="cuda:0")


def _poisoned(*shape: int) -> arrays.Array:
    return arrays.full(shape, np.nan, "float32", "cuda:0")


def _rel(got: arrays.Array, ref: np.ndarray) -> float:
    values = got.numpy().astype(np.float64).reshape(ref.shape)
    return float(np.linalg.norm(values - ref) / np.linalg.norm(ref))


class _Layer:
    """Fresh random data for one layer, its float64 reference and poisoned device planes."""

    def __init__(self, rng: np.random.Generator, shape: tuple[int, int, int, int]) -> None:
        self.layer = layer = kan.kan_kernels(*shape)
        host = {
            "x": rng.uniform(layer.lo - 0.1, layer.hi + 0.1, (layer.inputs, layer.samples)),
            "c": rng.standard_normal((layer.rows, layer.outputs)) / np.sqrt(layer.rows),
            "y_bar": rng.standard_normal(layer.samples * layer.outputs),
        }
        host = {k: v.astype(np.float32) for k, v in host.items()}
        self.ref = kan.reference(layer, host["x"], host["c"], host["y_bar"])
        self.x, self.c, self.y_bar = (_device(host[k]) for k in ("x", "c", "y_bar"))
        self.phi = _poisoned(layer.rows, layer.samples)
        self.phi_bar = _poisoned(layer.rows, layer.samples)
        self.y = _poisoned(layer.samples * layer.outputs)
        self.c_bar = _poisoned(layer.rows, layer.outputs)
        self.x_bar = _poisoned(layer.inputs, layer.samples)
        self.basis = eagle.plan.auto(layer.basis)
        with policy.using(contraction="gemm"):
            self.contract = eagle.plan.auto(layer.contract)

    def bounds(self) -> dict[str, float]:
        """Normwise float32 bounds: a few ulp per term of each value's longest sum."""
        layer = self.layer
        return {
            "phi": 16 * EPS32 * (layer.intervals + 3),
            "y": 8 * layer.rows * EPS32,
            "c_bar": 8 * layer.samples * EPS32,
            "phi_bar": 8 * layer.outputs * EPS32,
            "x_bar": 8 * (layer.outputs + layer.intervals + 3) * EPS32,
        }


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_each_launch_matches_the_reference(rng, shape):
    t = _Layer(rng, shape)
    bound = t.bounds()
    stream = cuda.Stream(non_blocking=True)
    with stream:
        t.basis.bind(x=t.x, phi=t.phi.reshape(-1)).launch(stream)
        forward = t.contract.bind(c=t.c, phi=t.phi, y=t.y)
        assert forward.route == "gemm", forward.reasons
        forward.launch(stream)
        t.c_bar.fill(0.0, stream)
        t.phi_bar.fill(0.0, stream)
        adjoint = eagle.diff.reverse(t.contract).bind(
            c=t.c, phi=t.phi, y_bar=t.y_bar, c_bar=t.c_bar, phi_bar=t.phi_bar
        )
        assert [step.route for step in adjoint.steps] == ["gemm"]
        adjoint.launch(stream)
    stream.synchronize()
    assert _rel(t.phi, t.ref["phi"]) < bound["phi"]
    assert _rel(t.y, t.ref["y"]) < bound["y"]
    assert _rel(t.c_bar, t.ref["c_bar"]) < bound["c_bar"]
    assert _rel(t.phi_bar, t.ref["phi_bar"]) < bound["phi_bar"]

    phi_bar = _device(t.ref["phi_bar"])  # the exact cotangent, so x_bar's bound is its own
    start = rng.standard_normal(t.x_bar.shape).astype(np.float32)
    for name, run in (
        ("by hand", lambda x_bar: eagle.plan.auto(t.layer.basis_adjoint).run(
            x=t.x, phi_bar=phi_bar, x_bar=x_bar.reshape(-1))),
        ("vjp", lambda x_bar: eagle.diff.reverse(t.basis).run(
            x=t.x, phi_bar=phi_bar.reshape(-1), x_bar=x_bar)),
    ):  # fmt: skip
        x_bar = _device(start)
        run(x_bar)
        assert _rel(x_bar, start + t.ref["x_bar"]) < bound["x_bar"], name


def _step_graph(t: _Layer, stream: cuda.Stream, by_hand: bool) -> cuda.Graph:
    """Forward, zeroed gradients and reverse of both launches, captured in one graph."""
    planes: dict[str, Any] = {"c": t.c, "phi": t.phi, "y_bar": t.y_bar}
    with stream:
        forward = [
            t.basis.bind(x=t.x, phi=t.phi.reshape(-1)),
            t.contract.bind(c=t.c, phi=t.phi, y=t.y),
        ]
        if by_hand:
            backward = [
                eagle.diff.reverse(t.contract).bind(**planes, c_bar=t.c_bar, phi_bar=t.phi_bar),
                eagle.plan.auto(t.layer.basis_adjoint).bind(
                    x=t.x, phi_bar=t.phi_bar, x_bar=t.x_bar.reshape(-1)
                ),
            ]
        else:
            backward = [
                eagle.diff.reverse([t.basis, t.contract]).bind(
                    {"x": t.x, "phi_bar": t.phi_bar.reshape(-1), "x_bar": t.x_bar},
                    {**planes, "c_bar": t.c_bar, "phi_bar": t.phi_bar},
                )
            ]
    with cuda.StreamCapturer(stream) as capturer:
        for launch in forward:
            launch.launch(stream)
        for gradient in (t.c_bar, t.phi_bar, t.x_bar):
            gradient.fill(0.0, stream)
        for launch in backward:
            launch.launch(stream)
    return cuda.Graph.from_captured(capturer.captured)


@pytest.mark.parametrize("by_hand", [True, False], ids=["by_hand", "by_reverse"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_training_step_in_one_graph_gives_one_steps_gradients(rng, shape, by_hand):
    t = _Layer(rng, shape)
    bound = t.bounds()
    stream = cuda.Stream(non_blocking=True)
    graph = _step_graph(t, stream, by_hand)
    try:
        assert "memalloc" not in graph.node_types()
        runner = graph.launcher().stream(stream)
        for _ in range(3):  # the gradients are zeroed inside: replays do not accumulate
            runner.launch()
        runner.synchronize()
        assert _rel(t.y, t.ref["y"]) < bound["y"]
        assert _rel(t.c_bar, t.ref["c_bar"]) < bound["c_bar"]
        # x_bar carries phi_bar's rounding (a sum over outputs) through the slopes
        assert _rel(t.x_bar, t.ref["x_bar"]) < bound["x_bar"] + bound["phi_bar"]
    finally:
        graph.destroy()
