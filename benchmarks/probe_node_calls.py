"""What each graph-node call of an every-plane rebind costs, by the way it is made.

    python benchmarks/probe_node_calls.py    (eagle installed, or PYTHONPATH=.)

Issue #27 §4 asks that rebinding every plane of a graph of 200 routed products take at
most a third of capturing it again. ``profile_rebind.py`` put most of a rebind's time in
three driver calls per node: the node's type, its kernel parameters, and setting them on
the instantiated graph. This probe builds ``bench_rebind.Chain`` (200 products), takes
its graph's kernel nodes, and times each of those calls per node (median of 2,000 passes
over every node): through eagle's checked wrapper, through ``cuda.bindings`` alone, and
through ``ctypes`` on ``libcuda`` with a hand-declared ``CUDA_KERNEL_NODE_PARAMS_v2``.
It then sets every node's parameters from ``ctypes`` and checks that a replay still
matches numpy, so a cheaper way is known to be a correct one too.
"""

from __future__ import annotations

import ctypes
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from bench_rebind import Chain

import eagle.cuda
from eagle.cuda import _graph_nodes
from eagle.cuda._runtime import cudadrv, driver, runtime

NODES = 200
PASSES = 2000


class _KernelNodeParams(ctypes.Structure):
    """``CUDA_KERNEL_NODE_PARAMS_v2`` of ``cuda.h`` (CUDA 12 and 13)."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared", ctypes.c_uint),
        ("params", ctypes.c_void_p),
        ("extra", ctypes.c_void_p),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
    ]


def _per_node_us(call: Callable[[Any], object], nodes: list[Any]) -> float:
    rounds = []
    for _ in range(max(1, PASSES // len(nodes))):
        began = time.perf_counter()
        for node in nodes:
            call(node)
        rounds.append((time.perf_counter() - began) / len(nodes))
    return statistics.median(rounds) * 1e6


def main() -> int:
    if not eagle.cuda.is_available():
        print("probe_node_calls needs a CUDA device; none is usable here")
        return 1
    chain = Chain("cublas", NODES, np.random.default_rng(0))
    graph = chain.graph._graph
    exec_handle = chain.graph._exec
    found = _graph_nodes.nodes(graph)
    kernels = [n for n in found if _graph_nodes.kind(n) == "kernel"]
    print(f"{len(found)} nodes, {len(kernels)} kernel nodes, {NODES} products")
    d, r = driver(), runtime()
    cu_nodes = [d.CUgraphNode(int(n)) for n in kernels]
    cu_exec = d.CUgraphExec(int(exec_handle))
    pairs = zip(kernels, cu_nodes, strict=True)
    params = {int(n): cudadrv.cuGraphKernelNodeGetParams(c) for n, c in pairs}

    lib = ctypes.CDLL("libcuda.so.1")
    get = lib.cuGraphKernelNodeGetParams_v2
    put = lib.cuGraphExecKernelNodeSetParams_v2
    kind = lib.cuGraphNodeGetType
    for f in (get, put, kind):
        f.restype = ctypes.c_int
    raw = [ctypes.c_void_p(int(n)) for n in kernels]
    raw_exec = ctypes.c_void_p(int(exec_handle))
    held = {id(n): _KernelNodeParams() for n in raw}
    node_type = ctypes.c_int()

    def c_get(node: Any) -> None:
        status = get(node, ctypes.byref(held[id(node)]))
        assert status == 0, status

    def c_put(node: Any) -> None:
        status = put(raw_exec, node, ctypes.byref(held[id(node)]))
        assert status == 0, status

    def c_kind(node: Any) -> None:
        status = kind(node, ctypes.byref(node_type))
        assert status == 0, status

    rows = [
        ("type, eagle's wrapper", _graph_nodes.kind, kernels),
        ("type, cuda.bindings", r.cudaGraphNodeGetType, kernels),
        ("type, ctypes", c_kind, raw),
        ("get params, eagle's wrapper", cudadrv.cuGraphKernelNodeGetParams, cu_nodes),
        ("get params, cuda.bindings", d.cuGraphKernelNodeGetParams, cu_nodes),
        ("get params, ctypes", c_get, raw),
        (
            "set params, eagle's wrapper",
            lambda n: cudadrv.cuGraphExecKernelNodeSetParams(cu_exec, n, params[int(n)]),
            cu_nodes,
        ),
        (
            "set params, cuda.bindings",
            lambda n: d.cuGraphExecKernelNodeSetParams(cu_exec, n, params[int(n)]),
            cu_nodes,
        ),
        ("set params, ctypes", c_put, raw),
    ]
    for label, call, nodes in rows:
        print(f"  {label:<32} {_per_node_us(call, nodes):8.2f} µs per node")
    for node in raw:  # every node set from ctypes, then a replay checked
        c_get(node)
        c_put(node)
    print(f"replay after the ctypes sets: rel. error {chain.check():.1e} against numpy")
    return 0  # (bench_rebind.py times the whole rebind against capturing again)


if __name__ == "__main__":
    sys.exit(main())
