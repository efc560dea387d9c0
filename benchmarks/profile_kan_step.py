"""Where the time of bench_torch.py's KAN training step goes, on a GPU.

Usage: PYTHONPATH=. python benchmarks/profile_kan_step.py [steps]    (torch with CUDA)

The step of ``bench_torch.py`` (a B-spline basis op and a routed contraction through
``eagle.torch``, S = 16384, 64 -> 64, G = 8, float32, ``torch.optim.Adam``, gradients set
to None between steps) is run ``steps`` times (20 by default) in a plain loop without a
synchronize, for eagle eager, eagle under ``torch.compile(fullgraph=True)``, and torch's
closed form under ``torch.compile`` for reference. For each it prints:

* host milliseconds per step (the median time ``step()`` takes to return, the device
  left running), wall milliseconds per step (the loop and a final synchronize), device
  milliseconds between CUDA events around the loop, and the device's busy milliseconds
  per step (the sum of its kernels' times in ``torch.profiler``). Wall near host and
  busy far below wall: the step is bound by the host, not by its kernels;
* eagle's bindings per step (0 expected in steady state);
* the CUDA kernel table of ``torch.profiler`` over the steps, sorted by device time
  (a copy or a fill that should not be there shows up here), then its CPU table sorted
  by self CPU time;
* for the eagle sides, ``cProfile`` of the steps: the functions with the most own time,
  then the most time below them (autograd's device thread runs the backward, so its
  Python shows up under ``run_backward``).

Under two minutes, most of it ``torch.compile``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from _report import print_profile
from bench_torch import KAN, _BindCount, _kan_models

WARMUP = 20  # steps before the figures: under torch.compile, 8 left 3 binds in 20 steps
ROWS = 25  # rows of each table


def _step(loss_fn: Callable[..., Any], x0: Any, c0: Any, mode: str) -> Callable[[], None]:
    """One training step of ``loss_fn`` (as bench_torch.py's), warmed up."""
    x = x0.clone().requires_grad_(True)
    c = c0.clone().requires_grad_(True)
    optimizer = torch.optim.Adam([c], lr=1e-3)
    fn = torch.compile(loss_fn, fullgraph=True) if mode == "compile" else loss_fn

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        x.grad = None
        fn(x, c).backward()
        optimizer.step()

    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    return step


def _times(step: Callable[[], None], steps: int) -> dict[str, float]:
    """Host, wall, event and bindings figures per step over ``steps`` steps."""
    host = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with _BindCount() as binds:
        began = time.perf_counter()
        start.record()
        for _ in range(steps):
            called = time.perf_counter()
            step()
            host.append(time.perf_counter() - called)
        end.record()
        torch.cuda.synchronize()
        wall = time.perf_counter() - began
    return {
        "host_ms": statistics.median(host) * 1e3,
        "wall_ms": wall * 1e3 / steps,
        "event_ms": start.elapsed_time(end) / steps,
        "binds_per_step": binds.count / steps,
    }


def _profiled(step: Callable[[], None], steps: int) -> tuple[Any, float]:
    """torch.profiler over ``steps`` steps, and the device's busy milliseconds per step."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    busy_us = sum(
        event.time_range.elapsed_us()
        for event in prof.events()
        if event.device_type == torch.autograd.DeviceType.CUDA
    )
    return prof, busy_us / 1e3 / steps


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available():
        print("profile_kan_step needs a CUDA device; none is usable here")
        return 1
    steps = int(argv[1]) if len(argv) > 1 else 20
    models, c0 = _kan_models()
    print(f"KAN training step {KAN}, Adam, {steps} steps without a synchronize")
    for side, mode in (("eagle", "eager"), ("eagle", "compile"), ("torch", "compile")):
        loss_fn, x0 = models[side]
        step = _step(loss_fn, x0, c0, mode)
        figures = _times(step, steps)
        prof, busy = _profiled(step, steps)
        print(
            f"\n===== {side} {mode}: host {figures['host_ms']:.3f} ms/step, wall "
            f"{figures['wall_ms']:.3f}, events {figures['event_ms']:.3f}, device busy "
            f"{busy:.3f}, binds/step {figures['binds_per_step']:.2f}"
        )
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=ROWS))
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=ROWS))
        if side == "eagle":
            print_profile(step, steps, torch.cuda.synchronize, ROWS, ("tottime", "cumulative"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
