"""Where the host time of rebinding every plane of a graph of cuBLAS products goes.

Usage: python benchmarks/profile_rebind.py [rebinds] [one]

Issue #14 asks that a rebind of a graph holding cuBLAS nodes be at least 3x faster than
capturing and instantiating it again, at 200 nodes. ``bench_rebind.py`` measured a rebind
of one plane at 28.7x, but a rebind of every plane of 200 routed products at 0.2x (25.2 ms
against 5.4 ms). This script builds the same graph (``bench_rebind.Chain``, 200 routed
64^3 products in a chain), rebinds every plane (with ``one``: the first product's input
alone) ``rebinds`` times (20 by default) under cProfile after a warm-up, and prints per
rebind: each CUDA runtime/driver call eagle made
(count and µs, timed around eagle's checked wrapper), then the functions with the most
own time and the most time below them, so the next change goes where the time is.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from bench_rebind import Chain

import eagle.cuda
from eagle.cuda import _runtime

NODES = 200


def _timed_calls() -> tuple[dict[str, list[float]], list[tuple[Any, str, Any]]]:
    """Time every checked CUDA call made so far (each one's wrapper on eagle's checked
    bindings): (name -> [count, seconds]), and the originals to put back."""
    seen: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    originals = []
    for binding in (_runtime.cudart, _runtime.cudadrv):
        for name, function in list(vars(binding).items()):
            if not name.startswith("_"):
                vars(binding)[name] = _timed(name, function, seen)
                originals.append((binding, name, function))
    return seen, originals


def profiled(
    step: Callable[[], object], times: int
) -> tuple[dict[str, list[float]], cProfile.Profile, float]:
    """Run ``step`` ``times`` times under cProfile with every checked CUDA call timed:
    the calls (name -> [count, seconds]), the profile, and wall seconds per step."""
    seen, originals = _timed_calls()
    profile = cProfile.Profile()
    began = time.perf_counter()
    try:
        profile.enable()
        for _ in range(times):
            step()
        profile.disable()
    finally:
        for binding, name, function in originals:
            vars(binding)[name] = function
    return seen, profile, (time.perf_counter() - began) / times


def report(seen: dict[str, list[float]], profile: cProfile.Profile, times: int, per: str) -> None:
    """Print each CUDA call's count and µs per ``per`` (one of ``times``), then the
    functions with the most own and the most cumulative time."""
    print(f"  {'CUDA call':<40} {'per ' + per:>12} {'µs per ' + per:>16}")
    for name, (count, seconds) in sorted(seen.items(), key=lambda item: -item[1][1]):
        print(f"  {name:<40} {count / times:>12.2f} {seconds / times * 1e6:>16.1f}")
    stats = pstats.Stats(profile).strip_dirs()
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(40)


def _timed(name: str, function: Any, seen: dict[str, list[float]]) -> Any:
    def timed(*args: Any) -> Any:
        began = time.perf_counter()
        try:
            return function(*args)
        finally:
            entry = seen[name]
            entry[0] += 1
            entry[1] += time.perf_counter() - began

    return timed


def main(argv: list[str]) -> int:
    if not eagle.cuda.is_available():
        print("profile_rebind needs a CUDA device; none is usable here")
        return 1
    rebinds = int(argv[1]) if len(argv) > 1 else 20
    every = len(argv) < 3 or argv[2] != "one"
    chain = Chain("cublas", NODES, np.random.default_rng(0))
    step = chain.rebind_all if every else chain.rebind_one
    for _ in range(4):
        step()
    seen, profile, wall = profiled(step, rebinds)
    what = "every plane" if every else "the first product's input"
    print(f"{rebinds} rebinds of {what}, {NODES} routed products, {chain.nodes} nodes:")
    print(f"  {wall * 1e3:.2f} ms per rebind under cProfile")
    report(seen, profile, rebinds, "rebind")
    error = chain.check()
    print(f"replayed after the rebinds: rel. error {error:.1e} against numpy")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
