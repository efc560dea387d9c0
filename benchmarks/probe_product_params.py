"""What the kernel nodes of captured cuBLAS products hold, and what changes with the planes.

Usage: python benchmarks/probe_product_params.py

Issue #27 asks that rebinding every plane of a graph with 200 routed products take at
most 1/3 of a fresh capture. A rebind captures each product again today. This probe
asks whether the products' kernel arguments could be patched instead: it captures the
seed's routed contraction (64 x 64 x 64, float32) over two sets of planes, then its
adjoint's two products the same way, and for each kernel node prints its function, the
size of each argument (``cuFuncGetParamInfo``), and every 8-byte word of the arguments
that differs between the two captures, with the plane whose pointer explains it
(``plane + offset`` in both) or ``UNEXPLAINED``.
"""

from __future__ import annotations

import ctypes

import numpy as np
from _kernels import contract
from cuda.bindings import driver as cudadrv

import eagle.diff
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


def _capture(bind) -> tuple[list, object]:
    """Bind on a stream of its own (``bind()`` -> bound launches), run once, capture the
    launches; each node's kind and, for a kernel, its arguments' bytes."""
    stream = cuda.Stream(non_blocking=True)
    with stream:
        bound = bind()
        for launch in bound:
            launch.launch(stream)
    stream.synchronize()
    with cuda.StreamCapturer(stream) as cap:
        for launch in bound:
            launch.launch(stream)
    graph = cuda.Graph.from_captured(cap.captured)
    found = []
    for node in graph_nodes.nodes(graph._graph):
        kind = graph_nodes.kind(node)
        if kind != "kernel":
            found.append((kind, None))
            continue
        params = graph_nodes.kernel_params(node)
        print(
            f"  kernel node: func {int(params.func):#x} "
            f"grid {params.gridDimX}x{params.gridDimY}x{params.gridDimZ} "
            f"block {params.blockDimX}x{params.blockDimY}x{params.blockDimZ} "
            f"shared {params.sharedMemBytes}"
        )
        found.append((kind, _arguments(params)))
    return found, graph


def _compare(sets: list[dict], bind) -> None:
    """Capture ``bind(planes)`` over each of two sets of planes and print the words of
    the kernels' arguments that differ, with the plane whose move explains each."""
    captures = []
    for index, planes in enumerate(sets):
        print(f"capture {index}: " + ", ".join(f"{n} {a.ptr:#x}" for n, a in planes.items()))
        captures.append(_capture(lambda planes=planes: bind(planes)))
    (first, _g0), (second, _g1) = captures
    print(f"nodes: {[k for k, _ in first]} / {[k for k, _ in second]}")
    for (_, old), (_, new) in zip(first, second, strict=False):
        if old is None or new is None:
            continue
        print(f"  argument sizes {[len(a) for a in old]} / {[len(a) for a in new]}")
        for index, (a, b) in enumerate(zip(old, new, strict=False)):
            for at in range(0, min(len(a), len(b)) - 7, 8):
                u, v = (int.from_bytes(x[at : at + 8], "little") for x in (a, b))
                if u == v:
                    continue
                why = "UNEXPLAINED"
                for name in sets[0]:
                    o, n = sets[0][name], sets[1][name]
                    if o.ptr <= u < o.ptr + o.nbytes and v - n.ptr == u - o.ptr:
                        why = f"{name} + {u - o.ptr}"
                print(f"    arg {index} byte {at}: {u:#x} -> {v:#x}  {why}")


def main() -> None:
    rng = np.random.default_rng(0)
    with policy.using(contraction="gemm"):
        plan = eagle.plan.auto(contract(EXTENT, EXTENT, EXTENT))
    adjoint = eagle.diff.reverse(plan)

    def device(shape):
        return arrays.asarray(rng.standard_normal(shape).astype(np.float32), device="cuda:0")

    sets = []
    for _ in range(2):
        sets.append({
            "w": device((EXTENT, EXTENT)), "f": device(EXTENT * EXTENT),
            "y": device(EXTENT * EXTENT), "y_bar": device(EXTENT * EXTENT),
            "w_bar": device((EXTENT, EXTENT)), "f_bar": device(EXTENT * EXTENT),
        })  # fmt: skip
    print("== the forward product")
    _compare(sets, lambda p: [plan.bind(w=p["w"], f=p["f"], y=p["y"])])
    print("== the adjoint's two products (gradients added, on forked streams in a capture)")
    names = ("w", "f", "y_bar", "w_bar", "f_bar")
    _compare(sets, lambda p: [adjoint.bind(**{n: p[n] for n in names})])


if __name__ == "__main__":
    main()
