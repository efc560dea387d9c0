"""Why eagle's KAN training step is slower under ``torch.compile`` than eager, on a GPU.

Usage: python benchmarks/profile_kan_compile.py [steps]

Issue #25 asks that the KAN model of ``bench_torch.py`` (a basis op and a routed
contraction through ``eagle.torch``, Adam) be no slower under ``torch.compile(fullgraph=
True)`` than eager; session 13 measured 2.0 against 1.57 ms per step. This script runs
``steps`` steps (50 by default) of eagle's model eager and compiled, and prints for each
mode: the wall milliseconds per step, the functions with the most own time under
cProfile, and the torch ops and CUDA kernels of the steps (``torch.profiler``), so that
what the compiled step adds shows up side by side.
"""

from __future__ import annotations

import sys

import torch
from _report import print_profile
from _timing import loop_ms
from bench_torch import _kan_models
from profile_kan_step import _step


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available():
        print("profile_kan_compile needs a CUDA device; none is usable here")
        return 1
    steps = int(argv[1]) if len(argv) > 1 else 50
    models, c0 = _kan_models()
    loss_fn, x0 = models["eagle"]
    for mode in ("eager", "compile"):
        step = _step(loss_fn, x0, c0, mode)  # warmed up
        print(f"== {mode}: {loop_ms(step, steps, torch.cuda.synchronize):.3f} ms per step (wall)")
        print_profile(step, steps, torch.cuda.synchronize, 22)
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        ) as prof:
            for _ in range(steps):
                step()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22))
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=16))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
