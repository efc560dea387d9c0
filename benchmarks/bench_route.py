"""The GEMM route of a hawk contraction vs the kernel's own loop vs raw cuBLAS, on a GPU.

    python benchmarks/bench_route.py [results.json]    # with eagle importable

For ``y[sample * U + unit] = sum_r w[r, unit] * f[r, sample]`` at R = U = B = 4096 and
at 1024, float32, the same device planes for every side:

* routed: ``eagle.plan.auto(contract)`` built under ``policy.using(contraction="gemm")``,
  bound once, ``bound.launch(stream)`` per run (one Sgemm into the lane plane);
* loop: the same kernel's plan under the default policy (one thread per lane);
* raw cuBLAS: ``CublasCaptureHandle.sgemm`` of the same product (``f.T @ w`` into a
  separate (B, U) matrix), nothing between you and cuBLAS.

Host cost (issue #15: a routed ``BoundPlan.launch`` no slower than ``torch.mm(out=)``
for the same small product): at R = U = B = 32 and 64, host microseconds per call of
``routed.launch(stream)``, of ``routed_plan.run(...)``, of the raw ``handle.sgemm`` and of
``torch.mm(f.T, w, out=y)`` (when torch is installed), each side 20,000 back-to-back calls
after 1,000 to warm up, five trials taken in turn with the other sides', median; the
device is synchronised between trials.

Targets: routed >= 0.95x raw cuBLAS's throughput, and >= 5x the loop's. Each side is
timed with CUDA events around back-to-back launches on one stream after a warm-up (the
launch count is chosen so a batch takes about a quarter second); every figure is the
median of five batches. The table is printed; with a path, the figures are also written
there as JSON. Runs in well under two minutes on an H200.
"""


# No `from __future__ import annotations`: the kernel's annotations must see the closure's n.

import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _kernels import contract
from _report import print_table, write_record

import eagle.plan
import hawk
from eagle import arrays, cuda
from eagle.gemm import CublasCaptureHandle, sgemm_params_for_arrays
from hawk.emit import policy

TRIALS = 5
BATCH_SECONDS = 0.25
SIZES = (1024, 4096)


def contract_kernel(n: int) -> hawk.Kernel:
    """The seed's contraction with R = U = B = ``n``."""
    return contract(n, n, n)


def device_seconds(enqueue: Callable[[], Any], stream: cuda.Stream) -> float:
    """Median seconds per ``enqueue()`` on ``stream``, from CUDA events."""
    start, end = cuda.Event(), cuda.Event()

    def batch(reps: int) -> float:
        start.record(stream)
        for _ in range(reps):
            enqueue()
        end.record(stream)
        end.synchronize()
        return start.elapsed_ms(end) / 1e3 / reps

    once = batch(1)  # the warm-up, and the measure of a batch
    reps = max(1, min(200, int(BATCH_SECONDS / max(once, 1e-6))))
    return statistics.median(batch(reps) for _ in range(TRIALS))


def make_operands(n: int, rng: np.random.Generator) -> tuple[Any, ...]:
    """Random float32 ``w`` and ``f`` of R = U = B = ``n``, on the host and the device,
    and a NaN-filled (B, U) product matrix on the device."""
    w = rng.standard_normal((n, n)).astype(np.float32)
    f = rng.standard_normal((n, n)).astype(np.float32)
    w_d, f_d = arrays.asarray(w, device="cuda:0"), arrays.asarray(f, device="cuda:0")
    return w, f, w_d, f_d, arrays.full((n, n), np.nan, "float32", "cuda:0")


def measure(n: int, rng: np.random.Generator) -> dict[str, Any]:
    kernel = contract_kernel(n)
    _, _, w_d, f_d, out = make_operands(n, rng)
    y_routed = arrays.full((n * n,), np.nan, "float32", "cuda:0")
    y_loop = arrays.full((n * n,), np.nan, "float32", "cuda:0")
    stream = cuda.Stream(non_blocking=True)

    with policy.using(contraction="gemm"):
        routed_plan = eagle.plan.auto(kernel)
    with stream:
        routed = routed_plan.bind(w=w_d, f=f_d, y=y_routed)
        loop = eagle.plan.auto(kernel).bind(w=w_d, f=f_d, y=y_loop)
    assert routed.route == "gemm", routed.reasons

    handle = CublasCaptureHandle(stream)
    operands = {"a": f_d, "b": w_d, "out": out}
    params = sgemm_params_for_arrays(f_d, w_d, out, transpose_a=True)
    handle.warm(params, operands)
    try:
        seconds = {
            "raw_cublas": device_seconds(lambda: handle.sgemm(params, operands), stream),
            "routed": device_seconds(lambda: routed.launch(stream), stream),
            "loop": device_seconds(lambda: loop.launch(stream), stream),
        }
    finally:
        handle.destroy()
    stream.synchronize()
    agree = float(
        np.linalg.norm(y_routed.numpy().astype(np.float64) - y_loop.numpy())
        / np.linalg.norm(y_loop.numpy().astype(np.float64))
    )
    flops = 2.0 * n**3
    return {
        "shape": f"R=U=B={n}",
        "ms": {side: s * 1e3 for side, s in seconds.items()},
        "tflops": {side: flops / s / 1e12 for side, s in seconds.items()},
        "routed_vs_raw": seconds["raw_cublas"] / seconds["routed"],
        "routed_vs_loop": seconds["loop"] / seconds["routed"],
        "routed_loop_rel_diff": agree,
        "targets": {"routed_vs_raw": ">= 0.95", "routed_vs_loop": ">= 5"},
    }


HOST_SIZES = (32, 64)
HOST_CALLS = 20_000


Side = tuple[Callable[[], Any], Callable[[], Any], Any]  # call_once, synchronize, context


def host_us(sides: dict[str, Side]) -> dict[str, float]:
    """Median host microseconds per call of each side over five trials of back-to-back
    calls made inside the side's context, the sides' trials taken in turn so that the
    host's drift reaches every side alike."""
    for call_once, synchronize, context in sides.values():
        with context:
            for _ in range(1_000):
                call_once()
        synchronize()
    trials: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(TRIALS):
        for name, (call_once, synchronize, context) in sides.items():
            with context:
                began = time.perf_counter()
                for _ in range(HOST_CALLS):
                    call_once()
                trials[name].append((time.perf_counter() - began) / HOST_CALLS * 1e6)
            synchronize()
    return {name: statistics.median(values) for name, values in trials.items()}


def host_cost(n: int, rng: np.random.Generator) -> dict[str, Any]:
    """Host µs per call of the routed launch, the routed run, raw cuBLAS and torch.mm."""
    kernel = contract_kernel(n)
    w, f, w_d, f_d, out = make_operands(n, rng)
    y = arrays.full((n * n,), np.nan, "float32", "cuda:0")
    stream = cuda.Stream(non_blocking=True)
    routed_plan = eagle.plan.auto(kernel, contraction="gemm")
    with stream:
        routed = routed_plan.bind(w=w_d, f=f_d, y=y)
    handle = CublasCaptureHandle(stream)
    operands = {"a": f_d, "b": w_d, "out": out}
    params = sgemm_params_for_arrays(f_d, w_d, out, transpose_a=True)
    handle.warm(params, operands)
    none = contextlib.nullcontext()
    sides: dict[str, Side] = {
        "routed_launch": (lambda: routed.launch(stream), stream.synchronize, none),
        # a plan's run goes to eagle's current stream
        "routed_run": (lambda: routed_plan.run(w=w_d, f=f_d, y=y), stream.synchronize, stream),
        "raw_cublas": (lambda: handle.sgemm(params, operands), stream.synchronize, none),
    }
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tw, tf = torch.from_numpy(w).cuda(), torch.from_numpy(f).cuda()
        tf_t = tf.T  # the transposed view made once, as the routed plan's layout is at bind
        ty = torch.empty(n, n, device="cuda")
        torch.backends.cuda.matmul.allow_tf32 = False
        sides["torch_mm_out"] = (lambda: torch.mm(tf_t, tw, out=ty), torch.cuda.synchronize, none)
    try:
        us = host_us(sides)
    finally:
        handle.destroy()
    if torch is not None:
        assert float((ty - tf_t @ tw).abs().max()) < 1e-3
    row: dict[str, Any] = {"shape": f"R=U=B={n}", "host_us": us}
    if "torch_mm_out" in us:
        row["routed_launch_vs_torch"] = us["routed_launch"] / us["torch_mm_out"]
        row["target"] = "routed_launch_vs_torch <= 1"
    return row


def report(rows: list[dict[str, Any]]) -> None:
    header = ("shape", "raw cuBLAS ms", "routed ms", "loop ms", "routed TFLOP/s",
              "routed/raw", "routed/loop", "|routed-loop|/|loop|")  # fmt: skip
    table = [header]
    for row in rows:
        ms = row["ms"]
        table.append((
            row["shape"], f"{ms['raw_cublas']:.3f}", f"{ms['routed']:.3f}", f"{ms['loop']:.3f}",
            f"{row['tflops']['routed']:.1f}", f"{row['routed_vs_raw']:.3f} (>= 0.95)",
            f"{row['routed_vs_loop']:.1f}x (>= 5)", f"{row['routed_loop_rel_diff']:.1e}",
        ))  # fmt: skip
    print_table(table)


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(__doc__)
        return 2
    if not cuda.is_available():
        print("bench_route needs a CUDA device; none is usable here")
        return 1
    began = time.perf_counter()
    rng = np.random.default_rng(0)
    rows = [measure(n, rng) for n in SIZES]
    report(rows)
    host_rows = [host_cost(n, rng) for n in HOST_SIZES]
    for row in host_rows:
        costs = ", ".join(f"{side} {us:.2f}" for side, us in row["host_us"].items())
        ratio = row.get("routed_launch_vs_torch")
        versus = f"; routed launch / torch.mm(out=) {ratio:.2f} (<= 1)" if ratio else ""
        print(f"host us per call, {row['shape']}: {costs}{versus}")
    print(f"({time.perf_counter() - began:.0f} s)")
    if argv:
        fields = {"numpy": np.__version__, "trials": TRIALS, "rows": rows, "host_rows": host_rows}
        write_record(argv[0], fields)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
