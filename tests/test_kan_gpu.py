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


# -- written gradients and the local kernels ------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_written_products_need_no_zeroing(rng, shape):
    """``reverse(contract, accumulate=False)``: both products with beta = 0 over poisoned
    gradient planes, in a graph replayed three times."""
    t = _Layer(rng, shape)
    bound = t.bounds()
    stream = cuda.Stream(non_blocking=True)
    with stream:
        forward = [
            t.basis.bind(x=t.x, phi=t.phi.reshape(-1)),
            t.contract.bind(c=t.c, phi=t.phi, y=t.y),
        ]
        backward = eagle.diff.reverse(t.contract, accumulate=False).bind(
            c=t.c, phi=t.phi, y_bar=t.y_bar, c_bar=t.c_bar, phi_bar=t.phi_bar
        )
    with cuda.StreamCapturer(stream) as capturer:
        for launch in (*forward, backward):
            launch.launch(stream)
    graph = cuda.Graph.from_captured(capturer.captured)
    try:
        assert "memset" not in graph.node_types()  # nothing zeroed
        runner = graph.launcher().stream(stream)
        for _ in range(3):
            runner.launch()
        runner.synchronize()
        assert _rel(t.c_bar, t.ref["c_bar"]) < bound["c_bar"]
        assert _rel(t.phi_bar, t.ref["phi_bar"]) < bound["phi_bar"]
    finally:
        graph.destroy()


class _Local:
    """The local kernels' device planes over one layer's data (``c`` read as (I, NB, O))."""

    def __init__(self, rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> None:
        *extents, chunk = shape
        self.layer = layer = kan.kan_kernels(*extents, chunk=chunk)
        host = {
            "x": rng.uniform(layer.lo - 0.1, layer.hi + 0.1, (layer.inputs, layer.samples)),
            "c": rng.standard_normal((layer.rows, layer.outputs)) / np.sqrt(layer.rows),
            "y_bar": rng.standard_normal(layer.samples * layer.outputs),
        }
        host = {k: v.astype(dtype) for k, v in host.items()}
        self.ref = kan.reference(layer, host["x"], host["c"], host["y_bar"])
        on = {k: arrays.asarray(v, device="cuda:0") for k, v in host.items()}
        self.x, self.y_bar = on["x"], on["y_bar"].reshape(layer.samples, layer.outputs)
        self.c = on["c"].reshape(layer.inputs, layer.functions, layer.outputs)
        chunks = -(-layer.samples // layer.chunk)

        def poisoned(*shape: int) -> arrays.Array:
            return arrays.full(shape, np.nan, dtype, "cuda:0")

        self.y = poisoned(layer.samples * layer.outputs)
        self.x_bar = poisoned(layer.inputs, layer.samples)
        quarter = -(-layer.outputs // 4)
        self.sums = {f"p{m}": poisoned(chunks * layer.rows * quarter) for m in range(4)}
        self.c_bar = poisoned(layer.inputs, layer.functions, layer.outputs)

    def by_hand(self) -> list[Any]:
        """The bound launches of a step with the hand-written backward."""
        layer = self.layer
        return [
            eagle.plan.auto(layer.local).bind(x=self.x, c=self.c, y=self.y),
            eagle.plan.auto(layer.local_x_bar).bind(
                x=self.x, c=self.c, y_bar=self.y_bar, x_bar=self.x_bar.reshape(-1)
            ),
            eagle.plan.auto(layer.local_c_bar).bind(x=self.x, y_bar=self.y_bar, **self.sums),
            eagle.plan.auto(layer.local_c_bar_sum).bind(**self.sums, c_bar=self.c_bar.reshape(-1)),
        ]

    def derived(self) -> list[Any]:
        """The bound launches of a step with ``eagle.diff.reverse`` (written)."""
        plan = eagle.plan.auto(self.layer.local)
        return [
            plan.bind(x=self.x, c=self.c, y=self.y),
            eagle.diff.reverse(plan, accumulate=False).bind(
                x=self.x, c=self.c, y_bar=self.y_bar.reshape(-1), x_bar=self.x_bar,
                c_bar=self.c_bar,
            ),
        ]  # fmt: skip

    def errors(self) -> dict[str, float]:
        return {
            "y": _rel(self.y, self.ref["y"]),
            "x_bar": _rel(self.x_bar, self.ref["x_bar"]),
            "c_bar": _rel(self.c_bar, self.ref["c_bar"].reshape(self.c_bar.shape)),
        }


LOCAL_SHAPES = [(1000, 5, 7, 8, 64), (16384, 64, 64, 8, 64)]


@pytest.mark.parametrize("derived", [False, True], ids=["by_hand", "derived"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", LOCAL_SHAPES, ids=str)
def test_the_local_step_in_one_graph_matches_the_reference(rng, shape, dtype, derived):
    t = _Local(rng, shape, dtype)
    stream = cuda.Stream(non_blocking=True)
    with stream:
        launches = t.derived() if derived else t.by_hand()
    with cuda.StreamCapturer(stream) as capturer:
        for launch in launches:
            launch.launch(stream)
    graph = cuda.Graph.from_captured(capturer.captured)
    try:
        assert "memalloc" not in graph.node_types()
        runner = graph.launcher().stream(stream)
        for _ in range(3):  # every gradient is written: replays do not accumulate
            runner.launch()
        runner.synchronize()
        tolerance = 1e-5 if dtype == "float32" else 1e-12
        for name, error in t.errors().items():
            assert error < tolerance, (name, error)
    finally:
        graph.destroy()
