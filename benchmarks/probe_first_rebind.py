"""Why the first rebind of every plane of a graph costs more than the later ones.

Usage: python benchmarks/probe_first_rebind.py

``bench_rebind.py`` read, for 200 hawk launches, 28.3 ms for the first rebind of every
plane against 2.5 ms for each later one (run AG), though the graph had been rebound
before (one plane, many times) and nothing new is made. This script builds the same
hawk chain, rebinds one plane (the rebind's bookkeeping is made then), and times each
kernel node's update (``KernelSite.update``: one ``cuGraphExecKernelNodeSetParams``)
the first time and the second time it is made, then the first and a later rebind of
every plane of a fresh chain, the first one under cProfile. It also times rebinds of
every plane one after another against rebinds each made after a launch of the graph, as
a program that rebinds between replays makes them.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
from _report import print_profile
from bench_rebind import Chain

import eagle.cuda

NODES = 200


def _us(fn) -> float:
    began = time.perf_counter()
    fn()
    return (time.perf_counter() - began) * 1e6


def _updates(chain: Chain, what: str) -> None:
    """Time each kernel node's update of ``chain``'s graph twice over and print them."""
    sites = chain.graph._rebind_state.sites
    first = [_us(site.update) for site in sites]
    second = [_us(site.update) for site in sites]
    print(f"{what}, µs (median / max over {len(sites)} nodes): first "
          f"{statistics.median(first):.1f} / {max(first):.1f}, second "
          f"{statistics.median(second):.1f} / {max(second):.1f}")  # fmt: skip


def main() -> int:
    if not eagle.cuda.is_available():
        print("probe_first_rebind needs a CUDA device; none is usable here")
        return 1
    rng = np.random.default_rng(0)
    chain = Chain("hawk", NODES, rng)
    chain.rebind_one()
    _updates(chain, "node update")
    chain.destroy()
    for kind in ("hawk", "cublas"):
        chain = Chain(kind, NODES, rng)
        chain.rebind_one()
        chain.rebind_one()  # back to the first set
        idle = [_us(chain.rebind_all) for _ in range(4)]
        launched = []
        for _ in range(4):
            chain.launcher.launch()
            chain.launcher.synchronize()
            launched.append(_us(chain.rebind_all))
        print(f"{kind}: every plane, µs, one rebind after another: "
              + ", ".join(f"{t:.0f}" for t in idle)
              + "; each after a launch of the graph: "
              + ", ".join(f"{t:.0f}" for t in launched))  # fmt: skip
        if kind == "hawk":
            chain.launcher.launch()
            chain.launcher.synchronize()
            _updates(chain, "hawk node update after a launch")
        chain.destroy()
    for turn in range(2):
        chain = Chain("hawk", NODES, rng)
        chain.rebind_one()
        chain.rebind_one()  # back to the first set
        if turn:
            print("== the first rebind of every plane, under cProfile")
            print_profile(chain.rebind_all, 1, lambda: None, 14, ("tottime", "cumulative"))
        else:
            print(f"first rebind of every plane: {_us(chain.rebind_all):.0f} µs; then "
                  f"{_us(chain.rebind_all):.0f}, {_us(chain.rebind_all):.0f} µs")  # fmt: skip
        chain.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
