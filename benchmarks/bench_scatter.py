# ruff: noqa: F821, UP037 - hawk's axis annotations and output planes confuse these checks
"""Scatter-adds as simulation codes write them, eagle (hawk kernels) against torch, one run.

    python benchmarks/bench_scatter.py [results.json]    (eagle importable, needs a GPU)

* **histogram**: 10**8 float32 samples in [0, 1) into 1,024 bins. hawk: one lane per
  sample adding 1 into ``counts[bin]``, as ``eagle.plan.auto`` runs it (the small table
  summed per block in shared memory), with ``adds="deterministic"`` and with
  ``adds="global"`` (a global atomic per lane); torch: ``torch.histc`` and
  ``torch.bincount`` of integer bins computed by torch (the bin computation is timed
  with bincount).
* **deposit**: a 2-D bilinear (cloud-in-cell) deposit of 10**7 particles' charges onto a
  periodic 1024 x 1024 grid, with the particles in random order and sorted by cell.
  hawk: one lane per particle adding four weighted charges; torch: ``index_add_``,
  ``scatter_add_`` and ``index_put_(accumulate=True)`` over the 4 x 10**7 (cell, value)
  pairs it computes from the same positions (the index and weight computation is timed).
* **gather**: the deposit's adjoint with respect to the charges, ``q_bar[p] = sum of the
  four weights times grid_bar`` at the particle's cells: hawk's through
  ``eagle.diff.reverse`` of the deposit plan (``hawk.diff.vjp``), torch's as the same
  gather written with ``grid_bar.view(-1)[cells]``.

Each figure is the median CUDA-event time of 20 calls after warm-up, in milliseconds. Every
side's result is compared with a float64 reference (relative 2-norm error). The fraction
of the HBM bound is reported for the histogram (reads 4 bytes per sample) and the sorted
deposit (reads 12 bytes per particle, writes the grid once), at 4.8 TB/s.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable

import numpy as np
import torch

import eagle.diff
import eagle.plan
import hawk
from hawk import math as hm

SAMPLES = 10**8
BINS = 1024
PARTICLES = 10**7
SIDE = 1024
REPEAT = 20
HBM = 4.8e12


@hawk.kernel
def histogram(x: hawk.Scalar, counts: hawk.Mutable[hawk.Table["bin":BINS]]):
    b = int(hm.minimum(hm.maximum(x * float(BINS), 0.0), float(BINS - 1)))
    counts.add(bin=b, value=1.0)


@hawk.kernel
def deposit(
    px: hawk.Scalar,
    py: hawk.Scalar,
    q: hawk.Scalar,
    grid: hawk.Mutable[hawk.Table["row":SIDE, "col":SIDE]],
):
    i = int(px)
    j = int(py)
    fx = px - i
    fy = py - j
    i1 = (i + 1) % SIDE
    j1 = (j + 1) % SIDE
    grid.add(row=j, col=i, value=q * (1.0 - fx) * (1.0 - fy))
    grid.add(row=j, col=i1, value=q * fx * (1.0 - fy))
    grid.add(row=j1, col=i, value=q * (1.0 - fx) * fy)
    grid.add(row=j1, col=i1, value=q * fx * fy)


def _ms(fn: Callable[[], object]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEAT):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _rel(got: torch.Tensor, ref: np.ndarray) -> float:
    got64 = got.double().cpu().numpy().reshape(ref.shape)
    return float(np.linalg.norm(got64 - ref) / np.linalg.norm(ref))


def _histogram() -> dict[str, object]:
    x = torch.rand(SAMPLES, device="cuda")
    ref = np.bincount(
        np.minimum((x.double().cpu().numpy() * BINS).astype(np.int64), BINS - 1), minlength=BINS
    ).astype(np.float64)
    counts = torch.zeros(BINS, device="cuda")

    def hawk_side(adds: str) -> tuple[float, float]:
        plan = eagle.plan.auto(histogram, adds=adds)

        def run() -> None:
            counts.zero_()
            plan.run(x=x, counts=counts)

        return _ms(run), _rel(counts, ref)

    def bincount() -> torch.Tensor:
        return torch.bincount((x * BINS).long().clamp_(0, BINS - 1), minlength=BINS)

    sides = {
        "hawk": hawk_side("auto"),
        "hawk (deterministic)": hawk_side("deterministic"),
        "hawk (global adds)": hawk_side("global"),
        "torch.histc": (_ms(lambda: torch.histc(x, BINS, 0.0, 1.0)), None),
        "torch.bincount": (_ms(bincount), _rel(bincount(), ref)),
    }
    sides["torch.histc"] = (sides["torch.histc"][0], _rel(torch.histc(x, BINS, 0.0, 1.0), ref))
    return {"sides": sides, "hbm_ms": SAMPLES * 4 / HBM * 1e3}


def _cells(px: torch.Tensor, py: torch.Tensor, q: torch.Tensor):
    i, j = px.long(), py.long()
    fx, fy = px - i, py - j
    i1, j1 = (i + 1) % SIDE, (j + 1) % SIDE
    cells = torch.cat([j * SIDE + i, j * SIDE + i1, j1 * SIDE + i, j1 * SIDE + i1])
    weights = torch.cat([(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy])
    return cells, weights, weights * q.repeat(4)


def _deposit_reference(px, py, q) -> np.ndarray:
    x, y, c = (t.double().cpu().numpy() for t in (px, py, q))
    i, j = x.astype(np.int64), y.astype(np.int64)
    fx, fy = x - i, y - j
    grid = np.zeros(SIDE * SIDE)
    for cell, w in (
        (j * SIDE + i, (1 - fx) * (1 - fy)),
        (j * SIDE + (i + 1) % SIDE, fx * (1 - fy)),
        (((j + 1) % SIDE) * SIDE + i, (1 - fx) * fy),
        (((j + 1) % SIDE) * SIDE + (i + 1) % SIDE, fx * fy),
    ):
        np.add.at(grid, cell, c * w)
    return grid


def _deposit(order: str) -> dict[str, object]:
    gen = torch.Generator(device="cuda").manual_seed(7)
    px = torch.rand(PARTICLES, device="cuda", generator=gen) * SIDE
    py = torch.rand(PARTICLES, device="cuda", generator=gen) * SIDE
    q = torch.rand(PARTICLES, device="cuda", generator=gen) + 0.5
    if order == "sorted":
        key = py.long() * SIDE + px.long()
        perm = torch.argsort(key)
        px, py, q = px[perm].contiguous(), py[perm].contiguous(), q[perm].contiguous()
    ref = _deposit_reference(px, py, q)
    grid = torch.zeros(SIDE, SIDE, device="cuda")
    flat = grid.view(-1)
    plan = eagle.plan.auto(deposit)

    def hawk_side() -> None:
        grid.zero_()
        plan.run(px=px, py=py, q=q, grid=grid)

    def index_add() -> torch.Tensor:
        cells, _, values = _cells(px, py, q)
        return torch.zeros(SIDE * SIDE, device="cuda").index_add_(0, cells, values)

    def scatter_add() -> torch.Tensor:
        cells, _, values = _cells(px, py, q)
        return torch.zeros(SIDE * SIDE, device="cuda").scatter_add_(0, cells, values)

    def index_put() -> torch.Tensor:
        cells, _, values = _cells(px, py, q)
        return torch.zeros(SIDE * SIDE, device="cuda").index_put_((cells,), values, True)

    sides: dict[str, tuple[float, float]] = {"hawk": (_ms(hawk_side), _rel(flat, ref))}
    for name, fn in (
        ("torch index_add_", index_add),
        ("torch scatter_add_", scatter_add),
        ("torch index_put_", index_put),
    ):
        sides[name] = (_ms(fn), _rel(fn(), ref))
    bytes_moved = PARTICLES * 12 + SIDE * SIDE * 4
    result: dict[str, object] = {"sides": sides, "hbm_ms": bytes_moved / HBM * 1e3}
    if order == "random":
        result["gather"] = _gather(plan, px, py, q)
    return result


def _gather(plan, px, py, q) -> dict[str, tuple[float, float]]:
    grid_bar = torch.randn(SIDE, SIDE, device="cuda")
    x, y, g = (t.double().cpu().numpy() for t in (px, py, grid_bar.view(-1)))
    i, j = x.astype(np.int64), y.astype(np.int64)
    fx, fy = x - i, y - j
    i1, j1 = (i + 1) % SIDE, (j + 1) % SIDE
    ref = (
        g[j * SIDE + i] * (1 - fx) * (1 - fy)
        + g[j * SIDE + i1] * fx * (1 - fy)
        + g[j1 * SIDE + i] * (1 - fx) * fy
        + g[j1 * SIDE + i1] * fx * fy
    )
    adjoint = eagle.diff.reverse(plan)
    q_bar = torch.zeros(PARTICLES, device="cuda")

    def hawk_side() -> None:
        q_bar.zero_()
        adjoint.run(px=px, py=py, q=q, grid_bar=grid_bar, q_bar=q_bar)

    def torch_side() -> torch.Tensor:
        cells, weights, _ = _cells(px, py, q)
        return (grid_bar.view(-1)[cells] * weights).view(4, -1).sum(0)

    return {
        "hawk (eagle.diff.reverse)": (_ms(hawk_side), _rel(q_bar, ref)),
        "torch gather": (_ms(torch_side), _rel(torch_side(), ref)),
    }


def main() -> None:
    report = {
        "histogram": _histogram(),
        "deposit random": _deposit("random"),
        "deposit sorted": _deposit("sorted"),
    }
    print(f"median of {REPEAT} CUDA-event timings (ms); error: relative 2-norm vs float64")
    for what, entry in report.items():
        groups = {what: entry["sides"]}
        if "gather" in entry:
            groups["gather (adjoint)"] = entry["gather"]
        for name, sides in groups.items():
            best_torch = min(ms for side, (ms, _) in sides.items() if side.startswith("torch"))
            for side, (ms, err) in sides.items():
                note = f"{best_torch / ms:5.2f}x best torch" if side.startswith("hawk") else ""
                print(f"  {name:17s} {side:27s} {ms:8.3f}  err {err:.1e}  {note}")
        if "hbm_ms" in entry and what != "deposit random":
            hawk_ms = entry["sides"]["hawk"][0]
            print(
                f"  {what:17s} HBM bound {entry['hbm_ms']:.3f} ms: hawk at "
                f"{entry['hbm_ms'] / hawk_ms:.0%}"
            )
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as out:
            json.dump(report, out, indent=2)


if __name__ == "__main__":
    main()
