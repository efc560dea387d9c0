"""Where the time of a rebind of every plane of 200 routed products goes.

Usage: python benchmarks/probe_patch_cost.py

``bench_rebind.py`` reads 3.3 ms for a rebind of every plane of 200 routed products once
they are patched, against 2.5 ms for 200 hawk kernels, though eagle's Python does less
per product site than per kernel site. This script splits the product figure into the
driver's node updates (each patched node's ``cuGraphExecKernelNodeSetParams``, timed
alone) and eagle's own work (the same rebind with the node updates left out), beside the
hawk kernel nodes' updates. It also prints what a product node's parameters hold (its
function, the arguments' sizes), times the rebind again after a garbage collection and
with the collector off, checks a replay, and profiles 20 rebinds.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from typing import Any

import numpy as np
from _report import print_profile
from _timing import host_ms
from bench_rebind import Chain

import eagle.cuda
from eagle.cuda import _graph_nodes

NODES = 200
REPEAT = 101


def _setters(chain: Chain) -> list[Any]:
    """Each node update of ``chain``'s graph, as a rebind of every plane makes it."""
    sites = chain.graph._rebind_state.sites
    if chain.kind == "hawk":
        return [site.update for site in sites]
    return [setter for site in sites for setter in site._patch._setters]


def _per_update(setters: list[Any]) -> float:
    """Median µs of one node update, over rounds through all of them."""
    rounds = []
    for _ in range(21):
        began = time.perf_counter()
        for setter in setters:
            setter()
        rounds.append((time.perf_counter() - began) * 1e6 / len(setters))
    return statistics.median(rounds)


def main() -> int:
    if not eagle.cuda.is_available():
        print("probe_patch_cost needs a CUDA device; none is usable here")
        return 1
    rng = np.random.default_rng(0)
    hawk = Chain("hawk", NODES, rng)
    hawk.rebind_all()
    hawk.rebind_all()
    print(f"hawk: rebind of every plane {host_ms(hawk.rebind_all, REPEAT) * 1e3:.0f} µs; "
          f"one node update {_per_update(_setters(hawk)):.2f} µs")  # fmt: skip
    hawk.destroy()

    chain = Chain("cublas", NODES, rng)
    for _ in range(3):  # the first captures and learns; the later ones patch
        chain.rebind_all()
    sites = chain.graph._rebind_state.sites
    patched = sum(site._patch is not None for site in sites)
    setters = _setters(chain)
    print(f"cublas: {patched} of {len(sites)} sites patched, {len(setters)} nodes")
    whole = host_ms(chain.rebind_all, REPEAT) * 1e3
    one = _per_update(setters)
    real = _graph_nodes.set_kernel
    _graph_nodes.set_kernel = lambda *args: None
    try:
        python = host_ms(chain.rebind_all, REPEAT) * 1e3
    finally:
        _graph_nodes.set_kernel = real
    chain.rebind_all()
    chain.rebind_all()  # every node set to the planes eagle holds again
    print(f"cublas: rebind of every plane {whole:.0f} µs; without the node updates "
          f"{python:.0f} µs; one node update {one:.2f} µs (x {len(setters)} = "
          f"{one * len(setters):.0f} µs)")  # fmt: skip
    params = sites[0]._patch.params[0]
    arguments = _graph_nodes.kernel_arguments(params) or []
    print(f"a product node: func {int(params.func):#x}, kern {int(params.kern):#x}; "
          f"{len(arguments)} arguments, {sum(len(a) for a in arguments)} bytes; planes "
          f"nested: {chain.graph._rebind_state.nested}")  # fmt: skip
    gc.collect()
    collected = host_ms(chain.rebind_all, REPEAT) * 1e3
    gc.disable()
    try:
        without_gc = host_ms(chain.rebind_all, REPEAT) * 1e3
    finally:
        gc.enable()
    print(f"cublas: rebind of every plane after a collection {collected:.0f} µs; with the "
          f"collector off {without_gc:.0f} µs; replay rel err {chain.check():.1e}")  # fmt: skip
    print("== 20 rebinds of every plane under cProfile")
    print_profile(chain.rebind_all, 20, lambda: None, 14)
    chain.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
