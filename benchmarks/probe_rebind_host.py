"""Host µs of eagle's own work in a rebind of every plane of 200 patched products, without
a GPU.

Usage (from the repository root): PYTHONPATH=. python benchmarks/probe_rebind_host.py [tree]

Issue #27 §4 asks a rebind of every plane of a graph of 200 routed products to cost at
most a third of capturing and instantiating the graph again. Its GPU figure comes from
``bench_rebind.py``; this probe times eagle's share of it on any machine, so that a change
to the rebind's host code can be measured between GPU runs. The graph is
``tests/test_rebind.py``'s stand-in (no driver); its 200 product sites are chained as
``bench_rebind.py``'s are (each reads the plane the one before writes, and all read one
weight plane), each already patched (a capture has shown where its 2 nodes hold each
plane's pointer), so every rebind writes pointers and sets nodes, whose driver calls are
no-ops here. The planes are device Arrays at made-up addresses. It swaps every plane
between two sets, 20 times a round, and prints the median and best of 15 rounds. Only
ratios between trees run on one machine mean anything; pass another tree's root as
``tree`` to put its eagle first on the path.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

if len(sys.argv) > 1:
    sys.path.insert(0, sys.argv[1])

import numpy as np

from eagle.arrays import Array
from eagle.cuda import _graph_nodes, _rebind
from eagle.cuda._node_arguments import ArgumentCopy, Patch
from eagle.cuda.graph import Launcher
from tests.test_rebind import FakeGraph

PRODUCTS, NODES = 200, 2
ROUNDS, REBINDS = 15, 20


class _Site(_rebind.ProductSite):
    """A product site whose nodes are known already (no graph to find them in)."""

    def resolve(self) -> list[Any]:
        return self.nodes


def _patched(site: _Site, first_node: int) -> None:
    """Make ``site`` patched: each of its nodes holds a pointer to each plane."""
    patch = Patch()
    for position in range(NODES):
        copy = ArgumentCopy(bytes(8 * len(site.planes)), [0])
        patch._copies.append(copy)
        for at, name in enumerate(site.planes):
            patch._words.setdefault(name, []).append((copy.slot(8 * at), 0, position))
        patch.params.append(None)
        patch._setters.append(lambda: None)
    site.nodes = list(range(first_node, first_node + NODES))  # node handles: ints here
    site._patch, site._learned = patch, set(site.planes)


def _array(ptr: int) -> Array:
    return Array(ptr=ptr, shape=(64, 64), dtype=np.dtype("float32"), strides=(256, 4),
                 device_index=0)  # fmt: skip


def main() -> None:
    weight = _array(0x900_0000)
    sets = [[_array(base + 0x1_0000 * i) for i in range(PRODUCTS + 1)]
            for base in (0x1000_0000, 0x2000_0000)]  # fmt: skip
    sites = []
    for i in range(PRODUCTS):
        planes = {"w": weight, "f": sets[0][i], "y": sets[0][i + 1]}
        site = _Site(f"plan {i}", planes, ("y",), lambda *args: None)
        _patched(site, NODES * i)
        sites.append(site)
    nodes = [node for site in sites for node in site.nodes]
    _graph_nodes.nodes = lambda graph: nodes  # the stand-in graph holds the sites' nodes only
    launcher = Launcher(FakeGraph(sites))  # type: ignore[arg-type]
    swaps = [dict(zip(sets[1 - turn], sets[turn], strict=True)) for turn in (0, 1)]
    turn = 0
    rounds = []
    for round_ in range(ROUNDS + 1):  # the first round warms up
        began = time.perf_counter()
        for _ in range(REBINDS):
            turn ^= 1
            launcher.rebind(swaps[turn])
        if round_:
            rounds.append((time.perf_counter() - began) * 1e6 / REBINDS)
    assert all(site.planes["y"] is sets[turn][i + 1] for i, site in enumerate(sites))
    print(
        f"rebind of every plane of {PRODUCTS} patched products (eagle's work): "
        f"median {statistics.median(rounds):.1f} µs, best {min(rounds):.1f}"
    )


if __name__ == "__main__":
    main()
