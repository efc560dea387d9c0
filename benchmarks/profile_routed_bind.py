"""Where the host time of binding a routed plan to new addresses goes.

Usage: python benchmarks/profile_routed_bind.py [binds]

Issue #25 asks that binding a routed plan to new addresses of a warmed alignment class
cost at most 50 µs. This script builds ``bench_user_paths``' routed contraction
(R = U = B = 64, ``contraction="gemm"``), binds it once to each of four sets of torch
tensors (warming their alignment class), then binds ``binds`` times (2,000 by default)
cycling over the sets under cProfile, and prints per bind: each CUDA runtime/driver call
eagle made (count and µs), then the functions with the most own and cumulative time.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

import torch
from bench_user_paths import B, R, U, contract
from profile_rebind import _timed_calls

import eagle.cuda
import eagle.plan


def main(argv: list[str]) -> int:
    if not eagle.cuda.is_available():
        print("profile_routed_bind needs a CUDA device; none is usable here")
        return 1
    binds = int(argv[1]) if len(argv) > 1 else 2000
    plan = eagle.plan.auto(contract, contraction="gemm")
    sets = [
        (
            torch.randn(R, U, device="cuda"),
            torch.randn(R, B, device="cuda"),
            torch.empty(B * U, device="cuda"),
        )
        for _ in range(4)
    ]
    for _ in range(3):
        for w, f, y in sets:
            plan.bind(w=w, f=f, y=y)
    seen, original = _timed_calls()
    profile = cProfile.Profile()
    began = time.perf_counter()
    try:
        profile.enable()
        for turn in range(binds):
            w, f, y = sets[turn % len(sets)]
            plan.bind(w=w, f=f, y=y)
        profile.disable()
    finally:
        for binding, name, function in original:
            vars(binding)[name] = function
    wall = (time.perf_counter() - began) / binds
    print(f"{binds} routed binds to new addresses ({R}x{U}x{B}):")
    print(f"  {wall * 1e6:.1f} µs per bind under cProfile")
    for name, (count, seconds) in sorted(seen.items(), key=lambda item: -item[1][1]):
        print(f"  {name:<40} {count / binds:>8.2f} per bind {seconds / binds * 1e6:>8.1f} µs")
    stats = pstats.Stats(profile).strip_dirs()
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
