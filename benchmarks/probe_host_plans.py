"""Host µs of ``plan.run`` on the host: a reused plan against a plan made per call.

Usage (from the repository root): PYTHONPATH=. python benchmarks/probe_host_plans.py [tree]

``y = a * x + y`` over 1,000 float64 lanes, as numpy arrays and (when torch is installed)
CPU tensors: ``plan.run`` of one plan made once, and ``eagle.plan.auto(kernel).run(...)``
with a new plan each call, which finds the binding the plans of the kernel share. Figures
are medians of 3,000 calls after 200 warm-up calls, per call, in µs; the sides take turns
for three rounds. Only ratios between trees run on one machine mean anything; pass
another tree's root as ``tree`` to put its eagle first on the path.
"""

from __future__ import annotations

import sys

if len(sys.argv) > 1:
    sys.path.insert(0, sys.argv[1])

import numpy as np
from _timing import host_ms

import eagle.plan
import hawk

LANES = 1_000
REPEAT = 3_000
ROUNDS = 3


@hawk.kernel
def axpb(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + y


def _sides(x, y) -> dict[str, object]:
    plan = eagle.plan.auto(axpb)
    return {
        "reused plan": lambda: plan.run(a=0.5, x=x, y=y),
        "auto(kernel) per call": lambda: eagle.plan.auto(axpb).run(a=0.5, x=x, y=y),
    }


def main() -> None:
    planes = {"numpy": (np.ones(LANES), np.zeros(LANES))}
    try:
        import torch
    except ImportError:
        pass
    else:
        planes["torch CPU"] = (
            torch.ones(LANES, dtype=torch.float64),
            torch.zeros(LANES, dtype=torch.float64),
        )
    for name, (x, y) in planes.items():
        sides = _sides(x, y)
        for fn in sides.values():
            for _ in range(200):
                fn()
        figures: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(ROUNDS):
            for side, fn in sides.items():
                figures[side].append(host_ms(fn, REPEAT) * 1e3)
        reused = sorted(figures["reused plan"])[ROUNDS // 2]
        for side, values in figures.items():
            median = sorted(values)[ROUNDS // 2]
            print(f"{name:10s} {side:24s} {median:7.1f} µs  ({median / reused:.2f}x reused)")


if __name__ == "__main__":
    main()
