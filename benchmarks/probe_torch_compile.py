"""Where the host time of the KAN training step goes, eagle eager against eagle under
``torch.compile(fullgraph=True)``, on a GPU.

Usage: PYTHONPATH=. python benchmarks/probe_torch_compile.py    # torch with CUDA

``bench_torch.py`` measures eagle's KAN step (one basis op and one routed contraction
through ``eagle.torch``, Adam) slower under ``torch.compile`` than eager (1.998 against
1.570 ms per step in session 11), although the compiled graphs hold no extra copy. This
probe runs both modes on the same model and data and prints, per mode, the wall time per
step and the functions with the most cumulative host time over the timed steps
(``cProfile``), so the two lists can be compared line by line. A minute or two, most of
it compiling.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time

import torch
from bench_torch import KAN_STEPS, _kan_models

STEPS = KAN_STEPS
SHOWN = 30  # functions listed per mode


def _step_for(loss_fn, x0, c0, mode: str):
    x = x0.clone().requires_grad_(True)
    c = c0.clone().requires_grad_(True)
    optimizer = torch.optim.Adam([c], lr=1e-3)
    fn = torch.compile(loss_fn, fullgraph=True) if mode == "compile" else loss_fn

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        x.grad = None
        fn(x, c).backward()
        optimizer.step()

    for _ in range(8):  # compiles, binds, warms
        step()
    torch.cuda.synchronize()
    return step


def main() -> None:
    models, c0 = _kan_models()
    loss_fn, x0 = models["eagle"]
    for mode in ("eager", "compile"):
        step = _step_for(loss_fn, x0, c0, mode)
        began = time.perf_counter()
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - began) * 1e3 / STEPS
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(SHOWN)
        print(f"=== eagle {mode}: {wall:.3f} ms per step (wall, {STEPS} steps)")
        print(out.getvalue())


if __name__ == "__main__":
    main()
