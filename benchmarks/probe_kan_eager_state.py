"""Whether eagle's eager KAN step is slower once other modes have run in the process.

Usage: python benchmarks/probe_kan_eager_state.py [steps]

``bench_torch.py`` timed the eager KAN step last, after ``torch.compile``,
reduce-overhead and ``torch.cuda.graph`` ran in the same process, and each step after a
warm-up on a side stream; it read 1.747 ms per step there against 1.28 ms in a process
that ran the eager step first (run AB). (It now makes every variant first and times
them in turns.) This script times eagle's and torch's eager
steps (``steps`` steps, 50 by default, wall ms) fresh, then again after each of the
other modes of ``bench_torch._kan_variant`` has run, so the mode that leaves the process
slower shows, and prints eagle's eager step under cProfile before and after them all.
"""

from __future__ import annotations

import sys

import torch
from _report import print_profile
from _timing import loop_ms
from bench_torch import _kan_models, _kan_variant
from profile_kan_step import _step


def _times(models, c0, steps: int) -> str:
    figures = []
    for side, (loss_fn, x0) in models.items():
        step = _step(loss_fn, x0, c0, "eager")
        figures.append(f"{side} {loop_ms(step, steps, torch.cuda.synchronize):.3f}")
    return ", ".join(figures)


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available():
        print("probe_kan_eager_state needs a CUDA device; none is usable here")
        return 1
    steps = int(argv[1]) if len(argv) > 1 else 50
    models, c0 = _kan_models()
    loss_fn, x0 = models["eagle"]
    print(f"fresh: {_times(models, c0, steps)} ms per eager step (wall)")
    print("== eagle eager, fresh")
    print_profile(_step(loss_fn, x0, c0, "eager"), steps, torch.cuda.synchronize, 16)
    for mode in ("eager", "compile", "reduce-overhead", "cuda.graph"):
        for fn, x in models.values():
            _kan_variant(fn, x, c0, mode)
        print(f"after {mode} ran: {_times(models, c0, steps)} ms per eager step (wall)")
    print("== eagle eager, after every mode ran")
    print_profile(_step(loss_fn, x0, c0, "eager"), steps, torch.cuda.synchronize, 16)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
