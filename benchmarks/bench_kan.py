"""One KAN layer training step on a GPU: eagle's captured graph vs torch, and where it goes.

    python benchmarks/bench_kan.py results.json [--sweep[=DTYPE]] [--local | --no-torch]
    (eagle installed, or PYTHONPATH=.)

The layer (``benchmarks/_kan.py``, the kernels docs/kan.md walks through) at 16,384
samples, 64 inputs, 64 outputs and 8 grid intervals, float32: a uniform cubic B-spline
basis kernel writes ``phi`` (704 rows x 16,384 samples, 46 MB), the seed's contraction
``y = phi^T c`` runs as one cuBLAS product, and the step's backward is the routed adjoint
(``c_bar += phi y_bar`` and ``phi_bar += c y_bar^T``) followed by the basis adjoint into
``x_bar``. A step is the forward of both launches plus their reverse for a fixed
cotangent ``y_bar``, the gradient planes zeroed first. Timed per step:

* eagle, the whole step captured in ONE CUDA graph and replayed, two ways: the basis
  adjoint written by hand (one lane per (input, sample), no atomics), and
  ``eagle.diff.reverse([basis, contract])`` (the basis kernel's vjp, an atomic add per
  lane); the first way again with the ``c_bar`` product forked onto a second stream inside
  the capture (events join it back), so it overlaps the ``phi_bar`` product and the basis
  adjoint; the forked step with both gradient products written (beta = 0) by products
  bound on each stream's cuBLAS handle, so neither plane is zeroed first and ``phi_bar``
  is not read back; and the first way launched eagerly, for the graph's gain;
* torch with TF32 off, the same math (autograd of the forward): eager,
  ``torch.compile`` and ``torch.compile(mode="reduce-overhead")``;
* eagle's step launch by launch, each captured alone (20 times in one graph, so no host
  time is counted) with the bytes it must move and its TB/s against the H200's 4.8 TB/s.

The local kernels (``_kan.py``: each input reaches 4 basis functions, found with
``hm.floor``; no ``phi``, no product) against the dense step, both through the public API
only (``eagle.plan.auto`` launches and ``eagle.diff.reverse(..., accumulate=False)``,
captured in one graph): the dense step with written gradient products; the same
launches as one ``eagle.plan.sequence``, whose ``c_bar`` product runs on a branch of the
capture across the hand-written basis adjoint; the backward as one
``eagle.diff.reverse([basis, contract], accumulate=False)``, whose ``c_bar`` product runs
on a branch of the capture across the basis kernel's vjp; the local step
with its hand-written backward (``x_bar`` and the chunked ``c_bar`` reduction); the
local step whose backward is ``eagle.diff.reverse`` of the local forward; and a hybrid,
the local forward and ``x_bar`` with ``c_bar`` as the dense layer's product over ``phi``.
The default run measures them at the shape above in float32; ``--sweep`` measures every
S in {4096, 16384, 65536}, width (inputs = outputs) in {32, 64, 128} and G in {5, 8,
16}, in float32 and float64 (several minutes, most of it compiling), or in one dtype
with ``--sweep=float32`` or ``--sweep=float64``. ``--local`` measures
the public-API steps alone (dense against local, under a minute), without eagle's
hand-wired steps and torch's, whose ``torch.compile`` modes take most of a default run;
``--no-torch`` measures eagle's steps alone, the hand-wired ones and the public ones.

Step figures are medians over batches of back-to-back steps between CUDA events (a batch
per trial, after warm-up), the same shapes and data for every side. Gradients are checked
against torch autograd and a float64 numpy reference (relative error ||a - b|| / ||b||).
Every section is guarded: a side that fails is recorded with its error and the rest still
run. The summary table is printed last; every figure goes to the JSON file. About a
minute on an H200, most of it torch.compile.
"""

# No `from __future__ import annotations`: hawk reads the kernels' annotations.

import json
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
from _kan import KanKernels, basis_arguments, cardinal, kan_kernels, reference
from _report import device_name
from _timing import device_ms

import eagle.diff
import eagle.plan
from eagle import arrays, cuda
from eagle.gemm import CublasCaptureHandle, gemm_params_for_arrays
from hawk.emit import policy

SAMPLES, INPUTS, OUTPUTS, INTERVALS = 16384, 64, 64, 8
PEAK_TBPS = 4.8  # H200 HBM3e
TRIALS = 20  # batches per step figure (median)
BATCH = 10  # steps per batch
PIECE_TIMES = 20  # launches of one piece in its timing graph
WARMUP = 5
SLOW_MS = 20.0  # a step slower than this is timed alone, three times
TARGET_MS = 0.2
TARGET_OVER_TORCH = 3.0
F32 = 4


def _per_call_ms(call: Callable[[], object], stream: Any, batch: int) -> float:
    """Median CUDA-event milliseconds per ``call()``, over batches of ``batch`` calls.

    A call slower than ``SLOW_MS`` (an atomics-bound adjoint, say) is timed alone, a few
    times, so that one slow step cannot take the whole run's time."""
    first = device_ms(call, stream, 1)
    if first > SLOW_MS:
        return device_ms(call, stream, 3)
    for _ in range(WARMUP):
        call()

    def calls() -> None:
        for _ in range(batch):
            call()

    return device_ms(calls, stream, TRIALS) / batch


def _rel(got: np.ndarray, ref: np.ndarray) -> float:
    ref64 = np.asarray(ref, np.float64)
    return float(np.linalg.norm(np.asarray(got, np.float64) - ref64) / np.linalg.norm(ref64))


def _guard(record: dict[str, Any], key: str, work: Callable[[], Any]) -> Any:
    """``work()``; on an exception, record it under ``record[key]`` and return None."""
    try:
        return work()
    except Exception as exc:
        record[key] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
        return None


# -- eagle ----------------------------------------------------------------------------------


class _EagleLayer:
    """Device planes, bound launches and the captured step graphs of one layer."""

    def __init__(self, layer: KanKernels, data: dict[str, np.ndarray]) -> None:
        self.layer = layer
        self.stream = cuda.Stream(non_blocking=True)
        rows, samples, stream = layer.rows, layer.samples, self.stream

        def device(values: np.ndarray) -> arrays.Array:
            return arrays.asarray(np.ascontiguousarray(values, np.float32), device="cuda:0")

        def poisoned(shape: tuple[int, ...]) -> arrays.Array:
            return arrays.full(shape, np.nan, "float32", "cuda:0")

        x, c, y_bar = device(data["x"]), device(data["c"]), device(data["y_bar"])
        self.phi, self.phi_bar = poisoned((rows, samples)), poisoned((rows, samples))
        self.y = poisoned((samples * layer.outputs,))
        self.c_bar, self.x_bar = poisoned(c.shape), poisoned(x.shape)
        phi_lanes, phi_bar_lanes = self.phi.reshape(-1), self.phi_bar.reshape(-1)
        x_bar_lanes = self.x_bar.reshape(-1)

        basis = eagle.plan.auto(layer.basis)
        with policy.using(contraction="gemm"):
            contract = eagle.plan.auto(layer.contract)
        self.routes = {"contract": contract.route("device"), "reasons": list(contract.reasons)}
        contract_adjoint = eagle.diff.reverse(contract)
        contract_planes = {"c": c, "phi": self.phi, "y_bar": y_bar}
        with stream:  # a routed launch's cuBLAS handle belongs to the stream it is bound on
            self.basis = basis.bind(x=x, phi=phi_lanes)
            self.contract = contract.bind(c=c, phi=self.phi, y=self.y)
            self.products = contract_adjoint.bind(
                **contract_planes, c_bar=self.c_bar, phi_bar=self.phi_bar
            )
            self.c_bar_product = contract_adjoint.bind(**contract_planes, c_bar=self.c_bar)
            self.phi_bar_product = contract_adjoint.bind(**contract_planes, phi_bar=self.phi_bar)
            self.basis_adjoint = eagle.plan.auto(layer.basis_adjoint).bind(
                x=x, phi_bar=self.phi_bar, x_bar=x_bar_lanes
            )
            self.basis_vjp = eagle.diff.reverse(basis).bind(
                x=x, phi_bar=phi_bar_lanes, x_bar=self.x_bar
            )
            self.reverse_both = eagle.diff.reverse([basis, contract]).bind(
                {"x": x, "phi_bar": phi_bar_lanes, "x_bar": self.x_bar},
                {**contract_planes, "c_bar": self.c_bar, "phi_bar": self.phi_bar},
            )
        self.routes["products"] = [step.route for step in self.products.steps]
        self.routes["reverse_both"] = [step.route for step in self.reverse_both.steps]
        for bound in (self.contract, *self.products.steps, *self.reverse_both.steps):
            bound.prepare(stream)
        for bound in (*self.c_bar_product.steps, *self.phi_bar_product.steps):
            bound.prepare(stream)
        # the forked step runs the c_bar product on a second stream, joined by events
        self.side = cuda.Stream(non_blocking=True)
        for bound in self.c_bar_product.steps:
            bound.prepare(self.side)  # a cuBLAS handle for that stream too
        self.fork, self.join = cuda.Event(timing=False), cuda.Event(timing=False)
        # the written step: both gradient products bound directly with beta = 0, so they
        # write their gradient planes (nothing to zero first, phi_bar never read back)
        y_bar_rows = y_bar.reshape(samples, layer.outputs)
        self.handles = (CublasCaptureHandle(stream), CublasCaptureHandle(self.side))
        self.written = []
        for handle, a, out, transpose_b in (
            (self.handles[1], self.phi, self.c_bar, False),  # c_bar = phi y_bar
            (self.handles[0], c, self.phi_bar, True),  # phi_bar = c y_bar^T
        ):
            operands = {"a": a, "b": y_bar_rows, "out": out}
            params = gemm_params_for_arrays(a, y_bar_rows, out, transpose_b=transpose_b)
            handle.warm(params, operands, keep_out=True)
            self.written.append(handle.bind(params, operands))

    # the launches of one step, enqueued on ``stream``

    def forward(self, stream: Any) -> None:
        self.basis.launch(stream)
        self.contract.launch(stream)

    def zero_gradients(self, stream: Any) -> None:
        self.c_bar.fill(0.0, stream)
        self.phi_bar.fill(0.0, stream)
        self.x_bar.fill(0.0, stream)

    def step_by_hand(self, stream: Any) -> None:
        """Forward, then the routed products and the hand-written basis adjoint."""
        self.forward(stream)
        self.zero_gradients(stream)
        self.products.launch(stream)
        self.basis_adjoint.launch(stream)

    def step_by_reverse(self, stream: Any) -> None:
        """Forward, then ``eagle.diff.reverse([basis, contract])`` (vjp, atomics)."""
        self.forward(stream)
        self.zero_gradients(stream)
        self.reverse_both.launch(stream)

    def step_forked(self, stream: Any) -> None:
        """As :meth:`step_by_hand`, with ``c_bar``'s product on the side stream, alongside
        the ``phi_bar`` product and the basis adjoint (they need only the forward)."""
        self.forward(stream)
        self.fork.record(stream)
        self.fork.wait(self.side)
        self.c_bar.fill(0.0, self.side)
        self.c_bar_product.launch(self.side)
        self.join.record(self.side)
        self.phi_bar.fill(0.0, stream)
        self.x_bar.fill(0.0, stream)
        self.phi_bar_product.launch(stream)
        self.basis_adjoint.launch(stream)
        self.join.wait(stream)

    def step_written(self, stream: Any) -> None:
        """As :meth:`step_forked`, with both gradients written (beta = 0) by products bound
        on each stream's handle, so only ``x_bar`` is zeroed."""
        c_bar_product, phi_bar_product = self.written
        self.forward(stream)
        self.fork.record(stream)
        self.fork.wait(self.side)
        c_bar_product()
        self.join.record(self.side)
        self.x_bar.fill(0.0, stream)
        phi_bar_product()
        self.basis_adjoint.launch(stream)
        self.join.wait(stream)

    def graph(self, enqueue: Callable[[Any], None], times: int = 1) -> cuda.Graph:
        with cuda.StreamCapturer(self.stream) as capturer:
            for _ in range(times):
                enqueue(self.stream)
        return cuda.Graph.from_captured(capturer.captured)

    def results(self) -> dict[str, np.ndarray]:
        self.stream.synchronize()
        return {
            "y": self.y.numpy(),
            "c_bar": self.c_bar.numpy(),
            "x_bar": self.x_bar.numpy(),
        }

    def poison(self) -> None:
        for plane in (self.phi, self.phi_bar, self.y, self.c_bar, self.x_bar):
            plane.fill(np.nan, self.stream)


def _pieces(layer: KanKernels) -> list[tuple[str, str, int, float]]:
    """(key, label, bytes moved at least, flops) of each launch of eagle's step."""
    x = layer.inputs * layer.samples * F32
    phi = layer.rows * layer.samples * F32
    c = layer.rows * layer.outputs * F32
    y = layer.samples * layer.outputs * F32
    product = 2.0 * layer.rows * layer.outputs * layer.samples
    return [
        ("basis", "basis forward: phi from x", x + phi, 0.0),
        ("contract", "contraction y = phi^T c (cuBLAS)", phi + c + y, product),
        ("zero", "zero c_bar, phi_bar, x_bar", c + phi + x, 0.0),
        ("c_bar_product", "adjoint product c_bar += phi y_bar", phi + y + 2 * c, product),
        ("phi_bar_product", "adjoint product phi_bar += c y_bar^T", c + y + 2 * phi, product),
        ("products", "both adjoint products", 3 * phi + 2 * y + 3 * c, 2 * product),
        ("basis_adjoint", "basis adjoint by hand (no atomics)", 3 * x + phi, 0.0),
        ("basis_vjp", "basis adjoint by vjp (atomic adds)", 3 * x + phi, 0.0),
    ]


def _eagle_side(layer: KanKernels, data: dict[str, np.ndarray]) -> dict[str, Any]:
    side: dict[str, Any] = {}
    built = _guard(side, "error", lambda: _EagleLayer(layer, data))
    if built is None:
        return side
    e: _EagleLayer = built
    side["routes"] = e.routes
    launches = {
        "basis": e.basis.launch,
        "contract": e.contract.launch,
        "zero": e.zero_gradients,
        "c_bar_product": e.c_bar_product.launch,
        "phi_bar_product": e.phi_bar_product.launch,
        "products": e.products.launch,
        "basis_adjoint": e.basis_adjoint.launch,
        "basis_vjp": e.basis_vjp.launch,
    }
    pieces: list[dict[str, Any]] = []
    for key, label, moved, flops in _pieces(layer):
        row: dict[str, Any] = {"key": key, "label": label, "bytes": moved, "flops": flops}

        def timed(enqueue: Callable[[Any], None] = launches[key]) -> float:
            graph = e.graph(enqueue, PIECE_TIMES)
            try:
                runner = graph.launcher().stream(e.stream)
                return device_ms(runner.launch, e.stream, TRIALS) / PIECE_TIMES
            finally:
                graph.destroy()

        ms = _guard(row, "error", timed)
        print(f"  piece {key}: {ms if ms is None else round(ms, 4)} ms", flush=True)
        row["ms"] = ms
        if ms:
            row["tbps"] = moved / ms / 1e9
            row["of_peak"] = row["tbps"] / PEAK_TBPS
            row["tflops"] = flops / ms / 1e9 if flops else None
        pieces.append(row)
    side["pieces"] = pieces

    steps = {
        "graph_by_hand": e.step_by_hand,
        "graph_by_reverse": e.step_by_reverse,
        "graph_forked": e.step_forked,
        "graph_written": e.step_written,
    }
    side["steps"] = {}
    for name, enqueue in steps.items():
        record: dict[str, Any] = {}

        def measure(enqueue: Callable[[Any], None] = enqueue, record=record) -> None:
            graph = e.graph(enqueue)
            record["nodes"] = graph.node_types()
            runner = graph.launcher().stream(e.stream)
            record["ms"] = _per_call_ms(runner.launch, e.stream, BATCH)
            e.poison()
            runner.launch()  # one step from poisoned planes: the gradients of one step
            record["results"] = e.results()
            graph.destroy()

        _guard(record, "error", measure)
        print(f"  step {name}: {record.get('ms')} ms", flush=True)
        side["steps"][name] = record
    eager: dict[str, Any] = {}
    _guard(
        eager,
        "error",
        lambda: eager.update(ms=_per_call_ms(lambda: e.step_by_hand(e.stream), e.stream, BATCH)),
    )
    side["steps"]["eager_by_hand"] = eager
    return side


# -- dense against local, through the public API ------------------------------------------

SWEEP_SAMPLES = (4096, 16384, 65536)
SWEEP_WIDTHS = (32, 64, 128)
SWEEP_INTERVALS = (5, 8, 16)
SWEEP_DTYPES = ("float32", "float64")
LOCAL_TARGET_MS = 0.10  # whole step at S=16384, 64 -> 64, G=8, float32


class _PublicSteps:
    """One layer's device planes and its captured steps, each made only of
    ``eagle.plan.auto`` launches, ``eagle.diff.reverse(..., accumulate=False)`` and
    ``eagle.plan.sequence``."""

    def __init__(self, layer: KanKernels, data: dict[str, np.ndarray], dtype: str) -> None:
        self.layer, self.dtype = layer, dtype
        self.stream = cuda.Stream(non_blocking=True)
        samples, rows, outputs = layer.samples, layer.rows, layer.outputs
        by_function = (layer.inputs, layer.functions, outputs)

        def device(values: np.ndarray) -> arrays.Array:
            return arrays.asarray(np.ascontiguousarray(values, dtype), device="cuda:0")

        def poisoned(*shape: int) -> arrays.Array:
            return arrays.full(shape, np.nan, dtype, "cuda:0")

        x, c, y_bar = device(data["x"]), device(data["c"]), device(data["y_bar"])
        self.y, self.x_bar = poisoned(samples * outputs), poisoned(layer.inputs, samples)
        self.c_bar = poisoned(rows, outputs)
        phi, phi_bar = poisoned(rows, samples), poisoned(rows, samples)
        chunks = -(-samples // layer.chunk)
        quarter = -(-outputs // 4)
        sums = {f"p{m}": poisoned(chunks * rows * quarter) for m in range(4)}
        basis = eagle.plan.auto(layer.basis)
        with policy.using(contraction="gemm"):
            contract = eagle.plan.auto(layer.contract)
        local = eagle.plan.auto(layer.local)
        c3, c_bar3 = c.reshape(*by_function), self.c_bar.reshape(*by_function)
        y_bar2 = y_bar.reshape(samples, outputs)
        x_bar_lanes = self.x_bar.reshape(-1)
        with self.stream:
            # the dense launches, bound once: the dense steps share them
            dense_basis = basis.bind(x=x, phi=phi.reshape(-1))
            dense_contract = contract.bind(c=c, phi=phi, y=self.y)
            written = eagle.diff.reverse(contract, accumulate=False).bind(
                c=c, phi=phi, y_bar=y_bar, c_bar=self.c_bar, phi_bar=phi_bar
            )
            basis_adjoint = eagle.plan.auto(layer.basis_adjoint).bind(
                x=x, phi_bar=phi_bar, x_bar=x_bar_lanes
            )
            self.steps: dict[str, list[Any]] = {
                "dense_written": [
                    dense_basis,
                    dense_contract,
                    _Fill(self.x_bar),  # the basis adjoint adds into x_bar
                    written,
                    basis_adjoint,
                ],
                # the dense_written launches as one sequence: the c_bar product's branch
                # stays open across the hand-written basis adjoint (x_bar zeroed first)
                "dense_sequenced": [
                    _Fill(self.x_bar),
                    eagle.plan.sequence([dense_basis, dense_contract, written, basis_adjoint]),
                ],
                # one adjoint of both launches: the c_bar product's branch stays open
                # across the basis kernel's vjp (which adds into x_bar, zeroed first)
                "dense_reversed": [
                    dense_basis,
                    dense_contract,
                    eagle.diff.reverse([basis, contract], accumulate=False).bind(
                        {"x": x, "phi_bar": phi_bar.reshape(-1), "x_bar": self.x_bar},
                        {
                            "c": c,
                            "phi": phi,
                            "y_bar": y_bar,
                            "c_bar": self.c_bar,
                            "phi_bar": phi_bar,
                        },
                    ),
                ],
                "local_by_hand": [
                    local.bind(x=x, c=c3, y=self.y),
                    eagle.plan.auto(layer.local_x_bar).bind(
                        x=x, c=c3, y_bar=y_bar2, x_bar=x_bar_lanes
                    ),
                    eagle.plan.auto(layer.local_c_bar).bind(x=x, y_bar=y_bar2, **sums),
                    eagle.plan.auto(layer.local_c_bar_sum).bind(
                        **sums, c_bar=self.c_bar.reshape(-1)
                    ),
                ],
                "local_derived": [
                    local.bind(x=x, c=c3, y=self.y),
                    eagle.diff.reverse(local, accumulate=False).bind(
                        x=x, c=c3, y_bar=y_bar, x_bar=self.x_bar, c_bar=c_bar3
                    ),
                ],
                # the local forward and x_bar, c_bar as the dense layer's product over phi
                "local_hybrid": [
                    local.bind(x=x, c=c3, y=self.y),
                    eagle.plan.auto(layer.local_x_bar).bind(
                        x=x, c=c3, y_bar=y_bar2, x_bar=x_bar_lanes
                    ),
                    dense_basis,
                    eagle.diff.reverse(contract, accumulate=False).bind(
                        c=c, phi=phi, y_bar=y_bar, c_bar=self.c_bar
                    ),
                ],
            }
        self.routes = {name: [_route(b) for b in bound] for name, bound in self.steps.items()}

    def launches(self, name: str) -> Callable[[Any], None]:
        def enqueue(stream: Any) -> None:
            for launch in self.steps[name]:
                launch.launch(stream)

        return enqueue

    def measure(self, name: str) -> dict[str, Any]:
        """The step captured alone: ms per step, node kinds, and one step's results from
        poisoned planes."""
        record: dict[str, Any] = {}
        with cuda.StreamCapturer(self.stream) as capturer:
            self.launches(name)(self.stream)
        graph = cuda.Graph.from_captured(capturer.captured)
        try:
            record["nodes"] = graph.node_types()
            runner = graph.launcher().stream(self.stream)
            record["ms"] = _per_call_ms(runner.launch, self.stream, BATCH)
            for plane in (self.y, self.x_bar, self.c_bar):
                plane.fill(np.nan, self.stream)
            runner.launch()
            self.stream.synchronize()
            record["results"] = {
                "y": self.y.numpy(),
                "c_bar": self.c_bar.numpy(),
                "x_bar": self.x_bar.numpy(),
            }
        finally:
            graph.destroy()
        return record

    def pieces(self, name: str) -> list[dict[str, Any]]:
        """Each launch of step ``name`` captured alone (PIECE_TIMES times in one graph)."""
        rows = []
        for launch in self.steps[name]:
            row: dict[str, Any] = {"launch": repr(launch)}

            def timed(launch: Any = launch) -> float:
                with cuda.StreamCapturer(self.stream) as capturer:
                    for _ in range(PIECE_TIMES):
                        launch.launch(self.stream)
                graph = cuda.Graph.from_captured(capturer.captured)
                try:
                    runner = graph.launcher().stream(self.stream)
                    slow = device_ms(runner.launch, self.stream, 1) > SLOW_MS
                    trials = 3 if slow else TRIALS
                    return device_ms(runner.launch, self.stream, trials) / PIECE_TIMES
                finally:
                    graph.destroy()

            row["ms"] = _guard(row, "error", timed)
            rows.append(row)
        return rows


def _route(bound: Any) -> Any:
    """How a launch of a step runs: a plan's route, an adjoint's per step, a sequence's
    per launch, or a fill."""
    if isinstance(bound, _Fill):
        return "fill"
    if isinstance(bound, eagle.plan.BoundSequence):
        return [_route(launch) for launch in bound.launches]
    steps = getattr(bound, "steps", None)
    return bound.route if steps is None else [step.route for step in steps]


class _Fill:
    """Zeroes a plane as a launch of a step would (``launch(stream)``)."""

    def __init__(self, plane: arrays.Array) -> None:
        self.plane = plane

    def launch(self, stream: Any) -> None:
        self.plane.fill(0.0, stream)

    def __repr__(self) -> str:
        return f"fill({self.plane.shape})"


def _public_side(
    layer: KanKernels, data: dict[str, np.ndarray], dtype: str, pieces: bool
) -> dict[str, Any]:
    """The dense and local steps of one layer: ms, errors against float64, and (with
    ``pieces``) each launch alone."""
    side: dict[str, Any] = {}
    built = _guard(side, "error", lambda: _PublicSteps(layer, data, dtype))
    if built is None:
        return side
    e: _PublicSteps = built
    side["routes"] = e.routes
    truth = reference(layer, data["x"], data["c"], data["y_bar"])
    side["steps"] = {}
    for name in e.steps:
        record: dict[str, Any] = {}
        measured = _guard(record, "error", lambda name=name: e.measure(name))
        if measured is not None:
            record.update(measured)
            record["vs_float64"] = _checks(record.pop("results"), truth)
        if pieces:
            record["pieces"] = e.pieces(name)
        side["steps"][name] = record
    return side


def _layer_data(layer: KanKernels, dtype: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    data = {
        "x": rng.uniform(layer.lo, layer.hi, (layer.inputs, layer.samples)),
        "c": rng.standard_normal((layer.rows, layer.outputs)) / np.sqrt(layer.rows),
        "y_bar": rng.standard_normal(layer.samples * layer.outputs),
    }
    return {k: v.astype(dtype) for k, v in data.items()}


def _sweep(dtypes: tuple[str, ...] = SWEEP_DTYPES) -> list[dict[str, Any]]:
    """Dense against local at every shape of the sweep, in each of ``dtypes``."""
    rows = []
    for dtype in dtypes:
        for samples in SWEEP_SAMPLES:
            for width in SWEEP_WIDTHS:
                for intervals in SWEEP_INTERVALS:
                    layer = kan_kernels(samples, width, width, intervals)
                    side = _public_side(layer, _layer_data(layer, dtype), dtype, pieces=False)
                    steps = side.get("steps", {})
                    row = {
                        "samples": samples,
                        "width": width,
                        "intervals": intervals,
                        "dtype": dtype,
                        **{f"{name}_ms": r.get("ms") for name, r in steps.items()},
                        "errors": {name: r.get("vs_float64") for name, r in steps.items()},
                    }
                    if "error" in side:
                        row["error"] = side["error"]
                    print(_sweep_line(row), flush=True)
                    rows.append(row)
    return rows


def _sweep_line(row: dict[str, Any]) -> str:
    shape = f"S={row['samples']:<6} {row['width']:>3}->{row['width']:<3} G={row['intervals']:<2}"
    times = "  ".join(f"{name} {_fmt(row.get(f'{name}_ms'))}" for name in _PUBLIC_STEPS)
    return f"{row['dtype']:<8} {shape}  {times}"


# -- torch ----------------------------------------------------------------------------------


def _torch_side(layer: KanKernels, data: dict[str, np.ndarray]) -> dict[str, Any]:
    side: dict[str, Any] = {}
    try:
        import torch
    except ImportError:
        side["error"] = "torch is not installed"
        return side
    if not torch.cuda.is_available():
        side["error"] = "torch has no CUDA device"
        return side
    side["version"] = torch.__version__
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    samples, rows = layer.samples, layer.rows
    x = torch.tensor(data["x"].T.copy(), device="cuda", requires_grad=True)  # (S, I)
    c = torch.tensor(data["c"], device="cuda", requires_grad=True)
    y_bar = torch.tensor(data["y_bar"].reshape(samples, layer.outputs), device="cuda")
    functions = torch.arange(layer.functions, device="cuda", dtype=torch.float32)

    def forward(x: Any, c: Any) -> Any:
        phi = cardinal(basis_arguments(layer, x, functions), torch.where).reshape(samples, rows)
        return phi @ c

    modes: dict[str, tuple[Callable[[Any, Any], Any], bool]] = {
        "eager": (forward, False),
        "compile": (torch.compile(forward), False),
        "reduce_overhead": (torch.compile(forward, mode="reduce-overhead"), True),
    }
    stream = torch.cuda.current_stream().cuda_stream
    side["modes"] = {}
    for name, (fn, graphs) in modes.items():
        record: dict[str, Any] = {}

        def step(fn: Callable[[Any, Any], Any] = fn, graphs: bool = graphs) -> Any:
            if graphs:
                torch.compiler.cudagraph_mark_step_begin()
            y = fn(x, c)
            return (y, *torch.autograd.grad(y, (c, x), y_bar))

        def measure(step: Callable[[], Any] = step, record=record) -> None:
            began = time.perf_counter()
            step()  # compiles, for the compiled modes
            record["first_call_s"] = time.perf_counter() - began
            record["ms"] = _per_call_ms(step, stream, BATCH)
            y, c_bar, x_bar = (t.detach().cpu().numpy() for t in step())
            record["results"] = {"y": y.reshape(-1), "c_bar": c_bar, "x_bar": x_bar.T}

        _guard(record, "error", measure)
        side["modes"][name] = record
    return side


# -- the report -----------------------------------------------------------------------------


def _checks(results: dict[str, np.ndarray], truth: dict[str, np.ndarray]) -> dict[str, float]:
    return {key: _rel(results[key], truth[key]) for key in ("y", "c_bar", "x_bar")}


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _print_table(report: dict[str, Any]) -> None:
    eagle_side, torch_side = report["eagle"], report["torch"]
    print(f"\nKAN layer training step: S={SAMPLES} I={INPUTS} O={OUTPUTS} G={INTERVALS}, float32")
    print(f"routes: {eagle_side.get('routes')}")
    print(f"\n{'launch of eagle step':<42}{'ms':>8}{'MB':>8}{'TB/s':>7}{'of 4.8':>8}{'TFLOP/s':>9}")
    for row in eagle_side.get("pieces", []):
        peak = row.get("of_peak")
        print(
            f"{row['label']:<42}{_fmt(row.get('ms')):>8}{row['bytes'] / 1e6:>8.1f}"
            f"{_fmt(row.get('tbps'), '.2f'):>7}{'-' if peak is None else f'{peak:.0%}':>8}"
            f"{_fmt(row.get('tflops'), '.1f'):>9}"
        )
        if "error" in row:
            print(f"  failed: {row['error']}")
    for name in ("by_hand", "by_reverse"):
        parts = report.get(f"sum_of_pieces_{name}_ms")
        print(f"sum of the pieces, step {name}: {_fmt(parts)} ms")

    print(f"\n{'step':<28}{'ms/step':>9}   rel. error vs torch eager / vs float64 numpy")
    print(f"{'':<40}{'y':^18}{'c_bar':^18}{'x_bar':^18}")
    rows = [(f"eagle {k}", v) for k, v in eagle_side.get("steps", {}).items()]
    rows += [(f"torch {k}", v) for k, v in torch_side.get("modes", {}).items()]
    for label, record in rows:
        vs_torch, vs_f64 = record.get("vs_torch_eager", {}), record.get("vs_float64", {})
        errors = "".join(
            f"{_fmt(vs_torch.get(key), '.1e'):>9}/{_fmt(vs_f64.get(key), '.1e'):<8}"
            for key in ("y", "c_bar", "x_bar")
        )
        print(f"{label:<28}{_fmt(record.get('ms')):>9}   {errors}")
        if "error" in record:
            print(f"  failed: {record['error']}")
    if "error" in torch_side:
        print(f"torch not timed: {torch_side['error']}")
    public = report.get("public", {})
    if public.get("steps"):
        print(f"\nthrough the public API only (dense vs local), {SAMPLES} samples, float32")
        print(f"{'step':<28}{'ms/step':>9}   rel. error vs float64: y / c_bar / x_bar")
        for name, record in public["steps"].items():
            errors = record.get("vs_float64", {})
            shown = " / ".join(_fmt(errors.get(k), ".1e") for k in ("y", "c_bar", "x_bar"))
            print(f"{name:<28}{_fmt(record.get('ms')):>9}   {shown}")
            for piece in record.get("pieces", []):
                print(f"    {piece['launch'][:60]:<60}{_fmt(piece.get('ms')):>9}")
            if "error" in record:
                print(f"  failed: {record['error']}")
    if "error" in public:
        print(f"public steps failed: {public['error']}")
    for key, text in report["targets"].items():
        print(f"target {key}: {text}")
    print(f"device: {report['device']}; times: medians of CUDA events, TF32 off")


def _targets(report: dict[str, Any]) -> dict[str, str]:
    steps = report["eagle"].get("steps", {})
    graph_ms = [r.get("ms") for name, r in steps.items() if name.startswith("graph")]
    best_eagle = min((ms for ms in graph_ms if ms), default=None)
    targets = {"step": "eagle's graph was not measured"}
    if best_eagle is not None:
        met = "met" if best_eagle <= TARGET_MS else "NOT met"
        targets["step"] = f"eagle {best_eagle:.3f} ms (<= {TARGET_MS} ms: {met})"
    public = report.get("public", {}).get("steps", {})
    local_ms = [public.get(k, {}).get("ms") for k in _PUBLIC_STEPS if k.startswith("local")]
    best_local = min((ms for ms in local_ms if ms), default=None)
    if best_local is not None:
        met = "met" if best_local <= LOCAL_TARGET_MS else "NOT met"
        targets["local_step"] = f"{best_local:.3f} ms (<= {LOCAL_TARGET_MS} ms: {met})"
    torch_ms = [r["ms"] for r in report["torch"].get("modes", {}).values() if r.get("ms")]
    if torch_ms and best_eagle is not None:
        ratio = min(torch_ms) / best_eagle
        met = "met" if ratio >= TARGET_OVER_TORCH else "NOT met"
        targets["over_best_torch"] = f"{ratio:.2f}x (>= {TARGET_OVER_TORCH}x: {met})"
    return targets


def _section(name: str, began: float, measure: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """``measure(*args, **kw)``, saying when it starts (a run cut short by a time limit
    then shows which section it was in)."""
    print(f"[{time.perf_counter() - began:.0f} s] measuring the {name} side", flush=True)
    return measure(*args, **kw)


def main(argv: list[str]) -> int:
    sweeps = [arg for arg in argv[1:] if arg == "--sweep" or arg.startswith("--sweep=")]
    local_only = "--local" in argv[1:]
    no_torch = local_only or "--no-torch" in argv[1:]
    paths = [arg for arg in argv[1:] if arg not in ("--local", "--no-torch", *sweeps)]
    dtypes: list[str] = []
    for arg in sweeps:  # --sweep: every dtype; --sweep=float64: that one
        chosen = arg.partition("=")[2]
        dtypes += [chosen] if chosen else SWEEP_DTYPES
    if len(paths) != 1 or paths[0].startswith("-") or not set(dtypes) <= set(SWEEP_DTYPES):
        print(__doc__)
        return 2
    out_path = paths[0]
    if not cuda.is_available():
        print("bench_kan needs a CUDA device; none is usable here")
        return 1
    began = time.perf_counter()
    layer = kan_kernels(SAMPLES, INPUTS, OUTPUTS, INTERVALS)
    rng = np.random.default_rng(0)
    data = {
        "x": rng.uniform(layer.lo, layer.hi, (INPUTS, SAMPLES)),
        "c": rng.standard_normal((layer.rows, OUTPUTS)) / np.sqrt(layer.rows),
        "y_bar": rng.standard_normal(SAMPLES * OUTPUTS),
    }
    data = {k: v.astype(np.float32) for k, v in data.items()}
    truth = reference(layer, data["x"], data["c"], data["y_bar"])
    report: dict[str, Any] = {
        "device": device_name(),
        "date": time.strftime("%Y-%m-%d"),
        "shape": {
            "samples": SAMPLES,
            "inputs": INPUTS,
            "outputs": OUTPUTS,
            "intervals": INTERVALS,
            "rows": layer.rows,
        },
        "eagle": {} if local_only else _section("eagle", began, _eagle_side, layer, data),
        "public": _section("public", began, _public_side, layer, data, "float32", pieces=True),
        "torch": {} if no_torch else _section("torch", began, _torch_side, layer, data),
    }
    if sweeps:
        report["sweep"] = _section("sweep", began, _sweep, tuple(dict.fromkeys(dtypes)))
    torch_truth = report["torch"].get("modes", {}).get("eager", {}).get("results")
    for record in report["torch"].get("modes", {}).values():
        if "results" in record:
            record["vs_float64"] = _checks(record.pop("results"), truth)
    for record in report["eagle"].get("steps", {}).values():
        if "results" in record:
            results = record.pop("results")
            record["vs_float64"] = _checks(results, truth)
            if torch_truth is not None:
                record["vs_torch_eager"] = _checks(results, torch_truth)
    pieces = {row["key"]: row.get("ms") for row in report["eagle"].get("pieces", [])}
    for name, adjoint in (("by_hand", "basis_adjoint"), ("by_reverse", "basis_vjp")):
        keys = ["basis", "contract", "zero", "products", adjoint]
        if all(pieces.get(k) for k in keys):
            report[f"sum_of_pieces_{name}_ms"] = sum(pieces[k] for k in keys)
    report["targets"] = _targets(report)
    report["recorded"] = _recorded(report)
    report["seconds"] = time.perf_counter() - began
    with open(out_path, "w") as out:
        json.dump(report, out, indent=2, default=float)
    _print_table(report)
    print(f"wrote {out_path} ({report['seconds']:.0f} s)")
    return 0


def _recorded(report: dict[str, Any]) -> dict[str, Any]:
    """The figures docs/_scripts/recorded.json keeps under ``kan_local`` (docs/kan.md's
    table of dense against local steps): one row per shape and dtype measured."""
    rows = []
    for row in report.get("sweep", []):
        shape = _shape(row["samples"], row["width"], row["intervals"])
        rows.append({"shape": shape, "dtype": row["dtype"]})
        rows[-1].update({k: row.get(f"{k}_ms") for k in _PUBLIC_STEPS})
    if not rows:
        steps = report.get("public", {}).get("steps", {})
        row = {"shape": _shape(SAMPLES, INPUTS, INTERVALS), "dtype": "float32"}
        rows.append({**row, **{k: steps.get(k, {}).get("ms") for k in _PUBLIC_STEPS}})
    return {"device": report["device"], "date": report["date"], "rows": rows}


def _shape(samples: int, width: int, intervals: int) -> str:
    return f"{samples:,} x {width} -> {width}, G = {intervals}"


_PUBLIC_STEPS = (
    "dense_written",
    "dense_sequenced",
    "dense_reversed",
    "local_by_hand",
    "local_derived",
    "local_hybrid",
)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
