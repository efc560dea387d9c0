"""Whether the KAN adjoint's two gradient products gain from running on branches.

Usage: PYTHONPATH=. python benchmarks/probe_kan_fork.py    # needs a CUDA device

At ``bench_kan.py``'s shape (S = 16384, 64 -> 64, G = 8, float32) the routed adjoint of the
contraction writes two gradients with beta = 0: ``c_bar`` (704 x 64 out of a 16,384-long
sum) and ``phi_bar`` (704 x 16,384 out of a 64-long sum). Issue #27 asks that the public
step, ``eagle.diff.reverse(..., accumulate=False)``, come within 5% of the step
``bench_kan.py`` wires by hand. This probe prints, in one process:

* microseconds per launch of each product alone, of both in one adjoint launch (inside a
  capture eagle forks them onto two branches), and of the two single-product launches
  forked by hand onto a second stream with events; each captured 20 times in one graph;
* the kernel nodes of one captured adjoint launch and what each depends on;
* milliseconds per step of ``bench_kan.py``'s hand-wired written step and of its public
  ``dense_written``, ``dense_sequenced`` (the same launches as one
  ``eagle.plan.sequence``) and ``dense_reversed`` steps, in three turns.

Under half a minute on an H200.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import bench_kan
import numpy as np
from _kan import KanKernels, kan_kernels
from _timing import device_ms

import eagle.diff
import eagle.plan
from eagle import arrays, cuda
from eagle.cuda import _graph_nodes
from hawk.emit import policy

TIMES = 20  # launches per timing graph


def _graphed(stream: Any, launch: Callable[[Any], None], times: int) -> tuple[Any, Any, float]:
    """``launch`` captured ``times`` times in one graph: the graph, its capture, and µs per
    launch (median of CUDA events over 15 replays)."""
    with cuda.StreamCapturer(stream) as capturer:
        for _ in range(times):
            launch(stream)
    graph = cuda.Graph.from_captured(capturer.captured)
    runner = graph.launcher().stream(stream)
    return graph, capturer, device_ms(runner.launch, stream, 15) / times * 1e3


def _products(layer: KanKernels) -> None:
    rng = np.random.default_rng(0)

    def device(values: np.ndarray) -> arrays.Array:
        return arrays.asarray(np.ascontiguousarray(values, np.float32), device="cuda:0")

    samples, outputs = layer.samples, layer.outputs
    planes = {
        "c": device(rng.standard_normal((layer.rows, outputs)) / np.sqrt(layer.rows)),
        "phi": device(rng.random((layer.rows, samples))),
        "y_bar": device(rng.standard_normal(samples * outputs)),
    }
    c_bar = arrays.full((layer.rows, outputs), np.nan, "float32", "cuda:0")
    phi_bar = arrays.full((layer.rows, samples), np.nan, "float32", "cuda:0")
    with policy.using(contraction="gemm"):
        adjoint = eagle.diff.reverse(eagle.plan.auto(layer.contract), accumulate=False)
    stream, side = cuda.Stream(non_blocking=True), cuda.Stream(non_blocking=True)
    with stream:
        both = adjoint.bind(**planes, c_bar=c_bar, phi_bar=phi_bar)
        only_c = adjoint.bind(**planes, c_bar=c_bar)
        only_phi = adjoint.bind(**planes, phi_bar=phi_bar)
    only_c.prepare(side)
    fork, join = cuda.Event(timing=False), cuda.Event(timing=False)

    def by_hand(on: Any) -> None:
        fork.record(on)
        fork.wait(side)
        only_c.launch(side)
        join.record(side)
        only_phi.launch(on)
        join.wait(on)

    rows = (
        ("c_bar product alone", only_c.launch),
        ("phi_bar product alone", only_phi.launch),
        ("both, one adjoint launch (forked)", both.launch),
        ("both, forked by hand", by_hand),
    )
    for name, launch in rows:
        graph, _, us = _graphed(stream, launch, TIMES)
        print(f"{name:36s} {us:7.1f} µs per launch   {len(graph.node_types())} nodes")
        graph.destroy()
    graph, capturer, _ = _graphed(stream, both.launch, 1)
    found, before_of = _graph_nodes.edges(capturer.captured._handle)
    print("one captured adjoint launch:")
    for key, node in found.items():
        deps = [hex(int(dep)) for dep in before_of[key]]
        print(f"  node {key:#x} {_graph_nodes.kind(node)}, depends on {deps or 'nothing'}")
    graph.destroy()


def _steps(layer: KanKernels) -> None:
    data = bench_kan._layer_data(layer, "float32")
    public = bench_kan._PublicSteps(layer, data, "float32")
    wired = bench_kan._EagleLayer(layer, data)
    for turn in range(3):
        graph = wired.graph(wired.step_written)
        runner = graph.launcher().stream(wired.stream)
        ms = bench_kan._per_call_ms(runner.launch, wired.stream, bench_kan.BATCH)
        graph.destroy()
        figures = [f"hand-wired written {ms:.4f}"]
        for name in ("dense_written", "dense_sequenced", "dense_reversed"):
            figures.append(f"{name} {public.measure(name)['ms']:.4f}")
        print(f"turn {turn}, ms per step: " + ", ".join(figures))


def main() -> int:
    if not cuda.is_available():
        print("probe_kan_fork needs a CUDA device; none is usable here")
        return 1
    layer = kan_kernels(bench_kan.SAMPLES, bench_kan.INPUTS, bench_kan.OUTPUTS, bench_kan.INTERVALS)
    _products(layer)
    _steps(layer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
