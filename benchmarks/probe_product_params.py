"""What the kernel nodes of captured cuBLAS products hold, and what changes with the planes.

Usage: python benchmarks/probe_product_params.py

Issue #27 asks that rebinding every plane of a graph with 200 routed products take at
most 1/3 of a fresh capture. A rebind captures each product again today. This probe
asks whether the products' kernel arguments could be patched instead: it captures the
seed's routed contraction (64 x 64 x 64, float32) over two sets of planes, and for each
kernel node prints its function, the size of each argument (``cuFuncGetParamInfo``),
and every 8-byte word of the arguments that differs between the two captures, with the
plane whose pointer explains it (``plane + offset`` in both) or ``UNEXPLAINED``.
"""

from __future__ import annotations

import ctypes

import numpy as np
from _kernels import contract
from cuda.bindings import driver as cudadrv

import eagle.plan
from eagle import arrays, cuda
from eagle.cuda import _graph_nodes as graph_nodes
from hawk.emit import policy

EXTENT = 64


def _arguments(params) -> list[bytes]:
    """Each argument's bytes of a kernel node's parameters."""
    function = params.func
    if not int(function):  # a library kernel: its function in the current context
        status, function = cudadrv.cuKernelGetFunction(params.kern)
        assert status == cudadrv.CUresult.CUDA_SUCCESS, status
    sizes = []
    while True:
        status, _offset, size = cudadrv.cuFuncGetParamInfo(function, len(sizes))
        if status != cudadrv.CUresult.CUDA_SUCCESS:
            break
        sizes.append(size)
    pointers = (ctypes.c_void_p * len(sizes)).from_address(int(params.kernelParams))
    return [ctypes.string_at(pointers[i], size) for i, size in enumerate(sizes)]


def _capture(plan, w, f, y) -> list:
    stream = cuda.Stream(non_blocking=True)
    with stream:
        bound = plan.bind(w=w, f=f, y=y)
        bound.launch(stream)
    stream.synchronize()
    with cuda.StreamCapturer(stream) as cap:
        bound.launch(stream)
    graph = cuda.Graph.from_captured(cap.captured)
    nodes = graph_nodes.nodes(graph._graph)
    found = []
    for node in nodes:
        kind = graph_nodes.kind(node)
        if kind != "kernel":
            found.append((kind, None))
            continue
        params = graph_nodes.kernel_params(node)
        print(
            f"  kernel node: func {int(params.func):#x} kern {int(params.kern):#x} "
            f"kernelParams {int(params.kernelParams):#x} extra {int(params.extra or 0):#x} "
            f"grid {params.gridDimX}x{params.gridDimY}x{params.gridDimZ} "
            f"block {params.blockDimX}x{params.blockDimY}x{params.blockDimZ} "
            f"shared {params.sharedMemBytes}"
        )
        found.append((kind, _arguments(params)))
    return found, graph


def main() -> None:
    rng = np.random.default_rng(0)
    with policy.using(contraction="gemm"):
        plan = eagle.plan.auto(contract(EXTENT, EXTENT, EXTENT))
    sets = []
    for _ in range(2):
        w = arrays.asarray(
            rng.standard_normal((EXTENT, EXTENT)).astype(np.float32), device="cuda:0"
        )
        f = arrays.asarray(rng.standard_normal(EXTENT * EXTENT).astype(np.float32), device="cuda:0")
        y = arrays.zeros(EXTENT * EXTENT, "float32", "cuda:0")
        sets.append({"w": w, "f": f, "y": y})
    captures = []
    for index, planes in enumerate(sets):
        print(f"capture {index}: " + ", ".join(f"{n} {a.ptr:#x}" for n, a in planes.items()))
        captures.append(_capture(plan, **planes))
    (first, _g0), (second, _g1) = captures
    print(f"nodes: {[k for k, _ in first]} / {[k for k, _ in second]}")
    for (_, old), (_, new) in zip(first, second, strict=True):
        if old is None:
            continue
        print(f"  argument sizes {[len(a) for a in old]}")
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            for at in range(0, len(a) - len(a) % 8, 8):
                u, v = (int.from_bytes(x[at : at + 8], "little") for x in (a, b))
                if u == v:
                    continue
                why = "UNEXPLAINED"
                for name in sets[0]:
                    o, n = sets[0][name], sets[1][name]
                    if o.ptr <= u < o.ptr + o.nbytes and v - n.ptr == u - o.ptr:
                        why = f"{name} + {u - o.ptr}"
                print(f"    arg {index} byte {at}: {u:#x} -> {v:#x}  {why}")
            if len(a) % 8 and a[len(a) - len(a) % 8 :] != b[len(b) - len(b) % 8 :]:
                print(f"    arg {index}: its last {len(a) % 8} bytes differ")


if __name__ == "__main__":
    main()
