"""Where the host time of an eagle.torch forward + backward goes, on a GPU.

Usage: python benchmarks/profile_torch_step.py [calls]

Issue #12 measured ``f(x=x, z=z).sum().backward()`` for ``y = 0.5 * x + z`` over 1,000
float32 CUDA lanes at 285 µs per call against 129 µs for torch eager (target 2x). This
script runs the same step ``calls`` times (2,000 by default) under cProfile after a
warm-up and prints: how many bindings the op's runners made during the profiled calls
(each a full ``plan.bind``: a runner's cache misses when torch hands it tensors at new
addresses), the functions with the most own time and the most time below them, and the
torch ops the step launched (``torch.profiler``, CPU and CUDA), so the next change goes
where the time is.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
from typing import Any

import torch
from bench_torch import LANES, scale_add

import eagle.torch


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available():
        print("profile_torch_step needs a CUDA device; none is usable here")
        return 1
    calls = int(argv[1]) if len(argv) > 1 else 2000
    f = eagle.torch.function(scale_add)
    x = torch.randn(LANES, device="cuda", requires_grad=True)
    z = torch.randn(LANES, device="cuda", requires_grad=True)

    def step() -> None:
        f(x=x, z=z).sum().backward()

    for _ in range(200):
        step()
    torch.cuda.synchronize()
    binds = {"count": 0}
    runner_type = type(f._forward_runner)
    original = runner_type._bind

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        binds["count"] += 1
        return original(self, *args, **kwargs)

    runner_type._bind = counted
    profile = cProfile.Profile()
    try:
        profile.enable()
        for _ in range(calls):
            step()
        profile.disable()
    finally:
        runner_type._bind = original
    torch.cuda.synchronize()
    print(f"{calls} forward + backward calls: {binds['count']} bindings made during them")
    stats = pstats.Stats(profile).strip_dirs()
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        for _ in range(50):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
