"""Host cost of eagle.torch, side by side with torch, on 1,000 CUDA lanes.

For ``y = 0.5 * x + z`` over 1,000 float32 lanes on the device:

* forward: the hawk kernel as ``eagle.torch.function`` vs torch eager
  ``0.5 * x + z`` vs the same eager expression wrapped as a bare
  ``torch.library.custom_op``;
* forward + backward: ``f(x=x, z=z).sum().backward()`` vs torch's
  ``(0.5 * x + z).sum().backward()``;
* a ``torch.cuda.graph`` replay of a mixed step (a torch op, the hawk kernel through
  ``plan.run``, the same through the torch op, another torch op) vs the same step in
  eager torch, as host microseconds per replay or call;
* a KAN layer's training step (S = 16384, 64 -> 64 features, G = 8, cubic, float32): the
  B-spline basis and the routed contraction as two ``eagle.torch`` ops against torch's
  closed form of the same layer, each eager, under ``torch.compile`` (default mode and
  ``reduce-overhead``) and captured whole with ``torch.cuda.graph`` (forward, backward and
  ``torch.optim.Adam(capturable=True)``), in a plain loop of steps without a synchronize:
  wall milliseconds per step and CUDA-event milliseconds per step, and for eagle the
  number of bindings a step makes in steady state (0 expected, in a process that has run
  the ops under ``torch.compile``). Every variant is made and warmed first; then they take
  turns for five rounds, and each figure is the median over the rounds.

Times are host wall-clock medians per call (after a warm-up), every side on the same
tensors; the calls only enqueue work, and the device is synchronised between batches.
Each host figure is the median of five rounds in which the sides take turns, and its
ratio to torch eager the median of the rounds' ratios (a host's speed drifts between
runs by more than the gaps measured). The targets: forward + backward within 1.5x of
torch eager, the forward as close to 1x as it gets.

    python benchmarks/bench_torch.py results.json    (eagle installed, or PYTHONPATH=.)

Prints a table and writes every figure to the JSON file. Under a minute.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable

import torch
from _kan import basis_arguments, cardinal, kan_kernels
from _timing import host_ms

import eagle.diff
import eagle.plan
import eagle.torch
import hawk

LANES = 1000
REPEAT = 2000
ROUNDS = 5  # alternating rounds of the host figures (each side's median is reported)


@hawk.kernel
def scale_add(x: hawk.Scalar, z: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = 0.5 * x + z  # noqa: F841 (a kernel assigns to its output plane)


@torch.library.custom_op("eagle_bench::scale_add", mutates_args=())
def _bare(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return 0.5 * x + z


@_bare.register_fake
def _(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _us(fn) -> float:
    """Median host microseconds of ``fn()``; the device drains before timing."""
    torch.cuda.synchronize()
    figure = host_ms(fn, REPEAT) * 1e3
    torch.cuda.synchronize()
    return figure


def _mixed_graph(f, v, z) -> torch.cuda.CUDAGraph:
    """A torch op, the kernel through plan.run, the kernel through the torch op, a torch op:
    warmed up and captured on one side stream, as torch asks; checked once replayed."""
    plan = eagle.plan.auto(scale_add)

    def step():
        h = torch.empty_like(v)
        plan.run(x=v * 2.0, z=z, y=h)
        return torch.relu(f(x=h, z=z))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        out = step()
    graph.replay()
    torch.testing.assert_close(out, torch.relu(0.5 * (0.5 * (v * 2.0) + z) + z))
    return graph


KAN = {"samples": 16384, "inputs": 64, "outputs": 64, "intervals": 8}
KAN_STEPS = 50
KAN_ROUNDS = 5  # alternating rounds of the KAN variants


class _BindCount:
    """Counts every plan and adjoint-plan binding (a runner's miss binds one)."""

    def __init__(self) -> None:
        self.count = 0
        self._originals = {}

    def __enter__(self) -> _BindCount:
        for cls in (eagle.plan.AutoPlan, eagle.diff.AdjointPlan):
            original = self._originals[cls] = cls.bind

            def counted(plan, *args, _original=original, **kwargs):
                self.count += 1
                return _original(plan, *args, **kwargs)

            cls.bind = counted
        return self

    def __exit__(self, *exc: object) -> None:
        for cls, original in self._originals.items():
            cls.bind = original


def _kan_models():
    """The eagle model (two eagle.torch ops) and torch's closed form, as functions of
    (x, c) -> loss, with their data: x input-major (I, S) for eagle, (S, I) for torch."""
    layer = kan_kernels(**KAN)
    basis = eagle.torch.function(layer.basis)
    contract = eagle.torch.function(layer.contract, contraction="gemm")
    rows, samples = layer.rows, layer.samples
    functions = torch.arange(layer.functions, device="cuda", dtype=torch.float32)
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(layer.inputs, samples, device="cuda", generator=gen) * 1.8 - 0.9
    c0 = torch.randn(rows, layer.outputs, device="cuda", generator=gen) * 0.1
    target = torch.randn(samples * layer.outputs, device="cuda", generator=gen)

    def eagle_loss(x, c):
        phi = basis(x=x, lanes=rows * samples).view(rows, samples)
        return (contract(c=c, phi=phi) - target).square().mean()

    def torch_loss(x_t, c):
        phi = cardinal(basis_arguments(layer, x_t, functions), torch.where).reshape(samples, rows)
        return ((phi @ c).reshape(-1) - target).square().mean()

    return {"eagle": (eagle_loss, x), "torch": (torch_loss, x.T.contiguous())}, c0


def _kan_variant(loss_fn, x0, c0, mode: str) -> Callable[[], None]:
    """One training step of one model in one mode, warmed up (a captured step replays
    the graph it captured)."""
    x = x0.clone().requires_grad_(True)
    c = c0.clone().requires_grad_(True)
    capturable = mode == "cuda.graph"
    optimizer = torch.optim.Adam([c], lr=1e-3, capturable=capturable)
    fn = loss_fn
    if mode == "compile":
        fn = torch.compile(loss_fn, fullgraph=True)
    elif mode == "reduce-overhead":
        fn = torch.compile(loss_fn, mode="reduce-overhead", fullgraph=True)

    def step() -> None:
        if mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        optimizer.zero_grad(set_to_none=not capturable)  # a captured step keeps c.grad
        x.grad = None
        fn(x, c).backward()
        optimizer.step()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(5):
            step()
    torch.cuda.current_stream().wait_stream(side)
    if capturable:
        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=False)
        with torch.cuda.graph(graph):
            fn(x, c).backward()
            optimizer.step()

        def step(held: object = (x, c, optimizer)) -> None:
            """A replay; ``held`` keeps the tensors whose memory the graph works on."""
            graph.replay()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    return step


def _kan_steps(step: Callable[[], None]) -> dict[str, float]:
    """Wall and CUDA-event milliseconds per step, and binds per step, over
    :data:`KAN_STEPS` steps of ``step`` in a plain loop."""
    with _BindCount() as binds:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        began = time.perf_counter()
        start.record()
        for _ in range(KAN_STEPS):
            step()
        end.record()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - began) * 1e3 / KAN_STEPS
    return {
        "wall_ms": wall,
        "event_ms": start.elapsed_time(end) / KAN_STEPS,
        "binds_per_step": binds.count / KAN_STEPS,
    }


def _kan_training() -> dict[str, dict[str, object]]:
    """Every variant's figures: each variant is made and warmed once, then all of them
    take turns for :data:`KAN_ROUNDS` rounds (a host's pace drifts by more than the
    gaps between the variants); each figure is the median over the rounds, with the
    rounds' figures beside it."""
    models, c0 = _kan_models()
    steps: dict[str, Callable[[], None]] = {}
    figures: dict[str, dict[str, object]] = {}
    for side, (loss_fn, x) in models.items():
        for mode in ("compile", "reduce-overhead", "cuda.graph", "eager"):
            try:
                steps[f"{side} {mode}"] = _kan_variant(loss_fn, x, c0, mode)
            except Exception as exc:  # a variant that cannot run is reported, not fatal
                figures[f"{side} {mode}"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    rounds: dict[str, list[dict[str, float]]] = {variant: [] for variant in steps}
    for _ in range(KAN_ROUNDS):
        for variant, step in steps.items():
            rounds[variant].append(_kan_steps(step))
    for variant, taken in rounds.items():
        figures[variant] = {
            key: statistics.median(turn[key] for turn in taken) for key in taken[0]
        } | {"rounds_wall_ms": [turn["wall_ms"] for turn in taken]}
    return figures


def _alternating(sides: dict[str, Callable[[], object]]) -> dict[str, list[float]]:
    """Each side's host µs per call in :data:`ROUNDS` rounds, the sides taking turns
    within each round (so a host that slows down slows every side alike)."""
    rounds: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(ROUNDS):
        for side, fn in sides.items():
            rounds[side].append(_us(fn))
    return rounds


def _over_eager(rounds: dict[str, list[float]]) -> dict[str, float]:
    """Each side's ratio to torch eager: the median of the rounds' ratios."""
    eager = rounds["torch eager"]
    return {
        side: statistics.median(t / e for t, e in zip(times, eager, strict=True))
        for side, times in rounds.items()
    }


def main() -> None:
    f = eagle.torch.function(scale_add)
    x = torch.randn(LANES, device="cuda", requires_grad=True)
    z = torch.randn(LANES, device="cuda")
    v = x.detach()  # the forward sides take tensors that need no gradient
    torch.testing.assert_close(f(x=v, z=z), 0.5 * v + z)
    rounds = {
        "forward": _alternating(
            {
                "eagle.torch": lambda: f(x=v, z=z),
                "torch eager": lambda: 0.5 * v + z,
                "torch custom_op": lambda: _bare(v, z),
            }
        ),
        "forward+backward": _alternating(
            {
                "eagle.torch": lambda: f(x=x, z=z).sum().backward(),
                "torch eager": lambda: (0.5 * x + z).sum().backward(),
            }
        ),
        "mixed step": _alternating(
            {
                "eagle graph replay": _mixed_graph(f, v, z).replay,
                "torch eager": lambda: torch.relu(0.5 * (0.5 * (v * 2.0) + z) + z),
            }
        ),
    }
    figures = {
        what: {side: statistics.median(times) for side, times in sides.items()}
        for what, sides in rounds.items()
    }
    ratios = {what: _over_eager(sides) for what, sides in rounds.items()}
    print(
        f"host cost per call, {LANES} float32 CUDA lanes, median of {ROUNDS} alternating "
        f"rounds of {REPEAT} calls each (µs; ratio: median of the rounds' ratios)"
    )
    for what, sides in rounds.items():
        for side, times in sides.items():
            shown = ", ".join(f"{t:.1f}" for t in times)
            print(
                f"  {what:17s} {side:18s} {figures[what][side]:8.1f}   "
                f"{ratios[what][side]:5.2f}x eager   (rounds: {shown})"
            )
    kan = _kan_training()
    print(
        f"KAN training step {KAN}, Adam, {KAN_STEPS} steps without a synchronize (ms/step; "
        f"median of {KAN_ROUNDS} rounds in which the variants take turns)"
    )
    for variant, record in kan.items():
        if "error" in record:
            print(f"  {variant:22s} failed: {record['error']}")
            continue
        shown = ", ".join(f"{t:.3f}" for t in record["rounds_wall_ms"])
        print(
            f"  {variant:22s} wall {record['wall_ms']:7.3f}  device {record['event_ms']:7.3f}"
            f"  binds/step {record['binds_per_step']:.2f}   (rounds' wall: {shown})"
        )
    eager, compiled = kan.get("eagle eager", {}), kan.get("torch compile", {})
    if "rounds_wall_ms" in eager and "rounds_wall_ms" in compiled:
        ratio = statistics.median(
            e / t for e, t in zip(eager["rounds_wall_ms"], compiled["rounds_wall_ms"], strict=True)
        )
        print(f"  eagle eager / torch compile, wall: {ratio:.3f} (median of the rounds' ratios)")
    result = {
        "lanes": LANES,
        "repeat": REPEAT,
        "rounds": ROUNDS,
        "host_us": figures,
        # the first side's ratio (eagle's), as docs/_scripts/recorded.json keeps it
        "over_eager": {what: next(iter(sides.values())) for what, sides in ratios.items()},
        "ratios": ratios,
        "rounds_us": rounds,
        "kan_step": kan,
    }
    with open(sys.argv[1], "w") as out:
        json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
