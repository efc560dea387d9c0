"""Host cost of ``plan.run`` with a reused plan over host planes, by who made them.

    python benchmarks/bench_intake.py [results.json]    (eagle installed, or PYTHONPATH=.)

One kernel, ``y = a * x + 1`` over 1,000 float32 lanes with ``a`` a number, run again and
again over the same planes, each made by one producer: numpy arrays, host eagle Arrays and
CPU torch tensors (when torch is installed); no device is needed. Every run after the first
reuses the plan's binding, found by the planes' layout keys (eagle.arrays._holder). A
second row per producer is a fresh ``plan.bind`` over the same planes (what a run costs
when its key is not found). ``bench_user_paths.py`` measures the device producers (eagle,
torch, CuPy, the CUDA array interface).

Each side runs 200 warm-up runs; then each trial runs 2,000 runs (200 binds) of every side
in turn, so a drift of the host's clock reaches every side alike; the figure is the fastest
trial's time per call, in microseconds (a shared host's noise only adds). With a path, the
figures are also written there as JSON.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import numpy as np

import eagle.plan
import hawk
from eagle import arrays

LANES = 1000
RUNS = 2000
BINDS = 200
TRIALS = 5


@hawk.kernel
def axpb(x: hawk.Scalar, a: hawk.Param, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + 1.0  # noqa: F841


def _planes() -> dict[str, tuple[object, object]]:
    """Producer -> (x, y) over the same values."""
    values = np.random.default_rng(0).standard_normal(LANES).astype(np.float32)
    planes: dict[str, tuple[object, object]] = {
        "numpy": (values.copy(), np.zeros(LANES, np.float32)),
        "eagle host": (arrays.asarray(values.copy()), arrays.zeros(LANES, "float32")),
    }
    try:
        import torch
    except ImportError:
        return planes
    planes["torch cpu"] = (torch.from_numpy(values.copy()), torch.zeros(LANES))
    return planes


def _sides(planes: dict[str, tuple[object, object]]) -> dict[str, Callable[[], object]]:
    sides: dict[str, Callable[[], object]] = {}
    for producer, (x, y) in planes.items():
        plan = eagle.plan.auto(axpb)
        sides[f"{producer} run"] = lambda p=plan, x=x, y=y: p.run(x=x, a=2.0, y=y)
        sides[f"{producer} bind"] = lambda p=plan, x=x, y=y: p.bind(x=x, a=2.0, y=y)
    return sides


def _trial(fn: Callable[[], object], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        fn()
    return (time.perf_counter() - start) / count * 1e6


def main(out_path: str | None) -> None:
    sides = _sides(_planes())
    for fn in sides.values():
        _trial(fn, 200)
    best = {name: float("inf") for name in sides}
    for _ in range(TRIALS):
        for name, fn in sides.items():
            count = BINDS if name.endswith("bind") else RUNS
            best[name] = min(best[name], _trial(fn, count))
    for name, us in best.items():
        print(f"{name:24s} {us:9.2f} us")
    if out_path:
        with open(out_path, "w") as out:
            json.dump({"date": time.strftime("%Y-%m-%d"), "us": best}, out,
                      indent=2)  # fmt: skip
        print(f"wrote {out_path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
