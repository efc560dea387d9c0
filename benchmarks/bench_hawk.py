"""hawk kernels, side by side.

Host: each kernel's numpy program (through ``eagle.plan``) vs the same
computation hand-written in numpy (target: within 2x) vs a per-lane Python
loop, on the same inputs. Device (skipped without one): a memory-bound
kernel's bandwidth at 1e8 lanes vs the H200's ~4.8 TB/s (target >= 70%), the
host time of ``BoundPlan.launch`` (target <= 10 us), a graph replay's
time per kernel node, and ``y = a*x + y`` at 1e8 lanes in float32 and float64:
hawk (vectorised lane loop, as plans emit it), hawk's scalar lane loop
(``emit(vector=False)``) and torch's ``y.add_(x, alpha=a)`` (skipped without
torch), target hawk >= 1.0x torch.

    python benchmarks/bench_hawk.py results.json    (eagle installed, or PYTHONPATH=.)

Prints a table and writes every figure to the JSON file. Medians throughout;
device times from CUDA events after a warm-up.
"""

# ruff: noqa: F841 - kernels assign to their output planes

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import numpy as np
from _kernels import contract
from _timing import device_ms, host_ms

import eagle.cuda
import eagle.plan
import hawk
from eagle.cuda.module import PackedArgs
from eagle.plan._cuda_backend import BLOCK_SIZE
from eagle.plan._cuda_backend import grid as _grid
from hawk import math as hm
from hawk.emit import cuda as emit_cuda

H200_BANDWIDTH = 4.8e12  # bytes per second
HOST_LANES = 1_000_000
DEVICE_LANES = 100_000_000


@hawk.kernel
def axpb(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + 1.0


@hawk.kernel
def softclip(x: hawk.Scalar, lo: hawk.Param, y: hawk.Mutable[hawk.Scalar]):
    if x < lo:
        y = lo + hm.exp(x - lo) - 1.0
    elif x > 1.0:
        y = hm.log(x) + 1.0
    else:
        y = x


@hawk.kernel
def axpy(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + y


K = 8


@hawk.kernel
def horner(c: hawk.Table, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    p = 0.0
    for k in range(K - 1, -1, -1):
        p = p * x + c.at(k)
    y = p


R, U = 64, 64


contract_kernel = contract(R, U, HOST_LANES // U)


# -- host --------------------------------------------------------------------------------


def _host_cases(rng: np.random.Generator) -> list[dict]:
    n = HOST_LANES
    x = rng.uniform(-3, 3, n)
    y = np.empty(n)
    c = rng.standard_normal(K)
    w = rng.standard_normal((R, U))
    f = rng.standard_normal((R, n // U))

    def numpy_softclip() -> None:
        with np.errstate(invalid="ignore"):
            y[:] = np.where(
                x < -1.0, -1.0 + np.exp(x + 1.0) - 1.0, np.where(x > 1.0, np.log(x) + 1.0, x)
            )

    def numpy_horner() -> None:
        p = np.zeros(n)
        for k in range(K - 1, -1, -1):
            p = p * x + c[k]
        y[:] = p

    def numpy_contract() -> None:
        unit, sample = np.arange(n) % U, np.arange(n) // U
        acc = np.zeros(n)
        for r in range(R):
            acc = acc + w[r, unit] * f[r, sample]
        y[:] = acc

    def loop_softclip(count: int) -> None:
        for i in range(count):
            v = x[i]
            y[i] = -1.0 + np.exp(v + 1.0) - 1.0 if v < -1.0 else (np.log(v) + 1.0 if v > 1.0 else v)

    def loop_horner(count: int) -> None:
        for i in range(count):
            p = 0.0
            for k in range(K - 1, -1, -1):
                p = p * x[i] + c[k]
            y[i] = p

    def loop_axpb(count: int) -> None:
        for i in range(count):
            y[i] = 2.0 * x[i] + 1.0

    def loop_contract(count: int) -> None:
        for i in range(count):
            acc = 0.0
            for r in range(R):
                acc += w[r, i % U] * f[r, i // U]
            y[i] = acc

    def numpy_axpb() -> None:
        y[:] = 2.0 * x + 1.0

    cases = [
        ("axpb", axpb, {"a": 2.0, "x": x, "y": y}, numpy_axpb, loop_axpb),
        ("softclip", softclip, {"x": x, "lo": -1.0, "y": y}, numpy_softclip, loop_softclip),
        ("horner", horner, {"c": c, "x": x, "y": y}, numpy_horner, loop_horner),
        ("contract", contract_kernel, {"w": w, "f": f, "y": y}, numpy_contract, loop_contract),
    ]
    rows = []
    loop_lanes = 20_000  # the Python loop is timed on a prefix and scaled to every lane
    for name, kernel, planes, by_hand, by_lane in cases:
        bound = eagle.plan.auto(kernel).bind(**planes)
        hawk_ms = host_ms(bound.launch, 5)
        numpy_ms = host_ms(by_hand, 5)
        start = time.perf_counter()
        by_lane(loop_lanes)
        loop_ms = (time.perf_counter() - start) * 1e3 * n / loop_lanes
        rows.append(
            {
                "kernel": name,
                "lanes": n,
                "hawk_host_ms": hawk_ms,
                "numpy_ms": numpy_ms,
                "python_loop_ms": loop_ms,
                "hawk_over_numpy": hawk_ms / numpy_ms,
                "loop_over_hawk": loop_ms / hawk_ms,
            }
        )
    return rows


# -- device ------------------------------------------------------------------------------


def _device(rng: np.random.Generator) -> dict:
    from eagle import arrays

    stream = eagle.cuda.Stream(non_blocking=True)
    results: dict = {"device": "cuda:0"}

    bandwidth = []
    for dtype in ("float32", "float64"):
        x = arrays.asarray(rng.standard_normal(DEVICE_LANES).astype(dtype), device="cuda:0")
        y = arrays.full((DEVICE_LANES,), np.nan, dtype, device="cuda:0")
        bound = eagle.plan.auto(axpb).bind(a=2.0, x=x, y=y)
        ms = device_ms(lambda b=bound: b.launch(stream), stream, 20)
        moved = 2 * DEVICE_LANES * np.dtype(dtype).itemsize  # read x, write y
        bandwidth.append(
            {
                "kernel": "axpb (y = a*x + 1)",
                "dtype": dtype,
                "lanes": DEVICE_LANES,
                "ms": ms,
                "bytes": moved,
                "tb_per_s": moved / ms / 1e9,
                "fraction_of_4_8_tb_s": moved / (ms / 1e3) / H200_BANDWIDTH,
            }
        )
        del x, y, bound
    results["bandwidth"] = bandwidth
    results["axpy"] = [_axpy_row(rng, dtype, stream) for dtype in ("float32", "float64")]

    small = 1024
    x = arrays.asarray(rng.standard_normal(small).astype("float32"), device="cuda:0")
    y = arrays.full((small,), 0.0, "float32", device="cuda:0")
    bound = eagle.plan.auto(axpb).bind(a=2.0, x=x, y=y)
    batches, per_batch = 20, 500
    times = []
    for _ in range(batches):
        stream.synchronize()
        start = time.perf_counter()
        for _ in range(per_batch):
            bound.launch(stream)
        times.append((time.perf_counter() - start) / per_batch)
    stream.synchronize()
    results["bound_launch_host_us"] = statistics.median(times) * 1e6

    stream_ms = device_ms(lambda: [bound.launch(stream) for _ in range(100)], stream, 20)
    nodes = 100
    with eagle.cuda.StreamCapturer(stream.ptr()) as capturer:
        for _ in range(nodes):
            bound.launch(stream)
    graph = eagle.cuda.Graph.from_captured(capturer.captured)
    launcher = graph.launcher().stream(stream.ptr())
    graph_ms = device_ms(launcher.launch, stream, 20)
    graph.destroy()
    results["graph_replay"] = {
        "lanes": small,
        "nodes": nodes,
        "graph_us_per_node": graph_ms * 1e3 / nodes,
        "stream_launch_us_per_kernel": stream_ms * 1e3 / nodes,
    }
    return results


def _axpy_row(rng: np.random.Generator, dtype: str, stream: Any) -> dict:
    """``y = a*x + y`` at DEVICE_LANES: hawk's plan, hawk's scalar lane loop, torch."""
    from eagle import arrays

    host_x = rng.standard_normal(DEVICE_LANES).astype(dtype)
    x = arrays.asarray(host_x, device="cuda:0")
    y = arrays.full((DEVICE_LANES,), 0.5, dtype, device="cuda:0")
    moved = 3 * DEVICE_LANES * np.dtype(dtype).itemsize  # read x and y, write y
    row: dict[str, Any] = {"kernel": "axpy (y = a*x + y)", "dtype": dtype, "lanes": DEVICE_LANES}
    bound = eagle.plan.auto(axpy).bind(a=1e-3, x=x, y=y)
    row["hawk_ms"] = device_ms(lambda: bound.launch(stream), stream, 20)
    scalar = emit_cuda.emit(axpy.ir, dict.fromkeys("axy", dtype), vector=False)
    kernel = eagle.cuda.load_kernel(scalar.source, scalar.name)
    a = arrays.full((1,), 1e-3, dtype, device="cuda:0")
    record = arrays.zeros((8,), "int64", "cuda:0")  # no checks in this kernel: never written
    args = PackedArgs([a, x, y, np.int64(DEVICE_LANES), record])
    grid = _grid(DEVICE_LANES)
    row["hawk_scalar_ms"] = device_ms(
        lambda: kernel.launch(grid, BLOCK_SIZE, args, stream), stream, 20
    )
    row["torch_ms"] = _torch_axpy_ms(host_x)
    for side in ("hawk", "hawk_scalar", "torch"):
        ms = row[f"{side}_ms"]
        row[f"{side}_tb_per_s"] = None if ms is None else moved / ms / 1e9
    row["torch_over_hawk"] = None if row["torch_ms"] is None else row["torch_ms"] / row["hawk_ms"]
    return row


def _torch_axpy_ms(host_x: np.ndarray) -> float | None:
    """torch's ``y.add_(x, alpha=a)`` on the same data, or None without torch (or its GPU)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    x = torch.from_numpy(host_x).cuda()
    y = torch.full_like(x, 0.5)
    return device_ms(lambda: y.add_(x, alpha=1e-3), torch.cuda.current_stream().cuda_stream, 20)


def _ms(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1].startswith("-"):  # (--help: the usage, not a file)
        print(__doc__)
        return 2
    rng = np.random.default_rng(0)
    report: dict = {"host": _host_cases(rng)}
    print(
        f"{'kernel':<10}{'lanes':>10}{'hawk ms':>10}{'numpy ms':>10}{'loop ms':>11}"
        f"{'hawk/np':>9}{'loop/hawk':>11}"
    )
    for row in report["host"]:
        print(
            f"{row['kernel']:<10}{row['lanes']:>10}{row['hawk_host_ms']:>10.2f}"
            f"{row['numpy_ms']:>10.2f}{row['python_loop_ms']:>11.0f}"
            f"{row['hawk_over_numpy']:>9.2f}{row['loop_over_hawk']:>11.0f}"
        )
    if eagle.cuda.is_available():
        device = report["device"] = _device(rng)
        for row in device["bandwidth"]:
            print(
                f"device {row['kernel']} {row['dtype']} at {row['lanes']:.0e} lanes: "
                f"{row['ms']:.3f} ms, {row['tb_per_s']:.2f} TB/s "
                f"({100 * row['fraction_of_4_8_tb_s']:.0f}% of 4.8 TB/s)"
            )
        print(
            f"{'y = a*x + y':<14}{'dtype':>8}{'hawk ms':>9}{'TB/s':>6}{'scalar ms':>11}"
            f"{'TB/s':>6}{'torch ms':>10}{'TB/s':>6}{'torch/hawk':>12}"
        )
        for row in device["axpy"]:
            ratio = row["torch_over_hawk"]
            print(
                f"{'1e8 lanes':<14}{row['dtype']:>8}{_ms(row['hawk_ms']):>9}"
                f"{_ms(row['hawk_tb_per_s'], 2):>6}{_ms(row['hawk_scalar_ms']):>11}"
                f"{_ms(row['hawk_scalar_tb_per_s'], 2):>6}{_ms(row['torch_ms']):>10}"
                f"{_ms(row['torch_tb_per_s'], 2):>6}{_ms(ratio, 2):>12}"
            )
        print(f"BoundPlan.launch host time: {device['bound_launch_host_us']:.2f} us per launch")
        replay = device["graph_replay"]
        print(
            f"graph replay: {replay['graph_us_per_node']:.2f} us per kernel node vs "
            f"{replay['stream_launch_us_per_kernel']:.2f} us per stream launch "
            f"({replay['nodes']} kernels of {replay['lanes']} lanes)"
        )
    else:
        report["device"] = None
        print("no CUDA device: device figures skipped")
    with open(argv[1], "w") as out:
        json.dump(report, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
