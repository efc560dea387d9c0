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

import sys

import torch
from bench_user_paths import B, R, U, contract, cycling_binds, tensor_sets
from profile_rebind import profiled, report

import eagle.cuda
import eagle.plan


def main(argv: list[str]) -> int:
    if not eagle.cuda.is_available():
        print("profile_routed_bind needs a CUDA device; none is usable here")
        return 1
    binds = int(argv[1]) if len(argv) > 1 else 2000
    plan = eagle.plan.auto(contract, contraction="gemm")
    sets = tensor_sets()
    for _ in range(3):
        for w, f, y in sets:
            plan.bind(w=w, f=f, y=y)
    seen, profile, wall = profiled(cycling_binds(plan, sets), binds)
    print(f"{binds} routed binds to new addresses ({R}x{U}x{B}):")
    print(f"  {wall * 1e6:.1f} µs per bind under cProfile")
    report(seen, profile, binds, "bind")
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
