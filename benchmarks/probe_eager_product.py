"""Host cost of one small eager product, four ways, and what a graph launch would cost.

Usage: PYTHONPATH=. python benchmarks/probe_eager_product.py    # torch with CUDA, nvmath

A 64^3 float32 product, host microseconds per call (bench_gemm.py's ``host_seconds``:
trials of 2,000 calls taken in turn, medians), three turns: ``torch.mm(out=)``, eagle's
``matmul_step(...).run(bufs, "device")``, the raw ``nvmath.bindings.cublas.sgemm`` call
on a handle of its own, and ``cudaGraphLaunch`` of a graph holding that one product
(captured once through eagle), the floor an eager product replayed from a cached graph
would have. Under a minute.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch
from bench_gemm import Side, eagle_eager, host_seconds, raw_sgemm_call, torch_eager
from cuda.bindings import runtime

from eagle import arrays, cuda
from eagle.cuda.graph import Graph, capture
from eagle.gemm import matmul_step

N = 64


def graph_launch(a: np.ndarray, b: np.ndarray) -> Side:
    """``cudaGraphLaunch`` of a captured one-product graph on a stream of its own."""
    stream = cuda.Stream(non_blocking=True)
    bufs = {"a": arrays.asarray(a, device="cuda:0"), "b": arrays.asarray(b, device="cuda:0"),
            "out": arrays.empty((N, N), "float32", "cuda:0")}  # fmt: skip
    step = matmul_step("out", a="a", b="b", out="out")
    with stream:
        step.run(bufs, "device")  # the stream's handle, made and warmed outside the capture
        with capture(stream) as capturer:
            step.run(bufs, "device")
    graph = Graph.from_captured(capturer.captured)
    exec_handle, ptr = graph._exec, stream.ptr()

    def run(_kept: Any = (graph, bufs)) -> None:
        runtime.cudaGraphLaunch(exec_handle, ptr)

    bufs["out"].fill(np.nan, stream)  # poisoned: the replay must write every element
    run()
    stream.synchronize()
    error = np.linalg.norm(bufs["out"].numpy() - a @ b) / np.linalg.norm(a @ b)
    print(f"graph-launched product: relative error {error:.1e}")
    return run, stream.synchronize


def main() -> int:
    if not torch.cuda.is_available():
        print("probe_eager_product needs torch with a CUDA device; none is usable here")
        return 1
    rng = np.random.default_rng()
    a = rng.standard_normal((N, N)).astype(np.float32)
    b = rng.standard_normal((N, N)).astype(np.float32)
    sides = {
        "torch.mm(out=)": torch_eager(torch, a, b),
        "matmul_step.run": eagle_eager(a, b),
        "raw nvmath sgemm": raw_sgemm_call(a, b),
        "cudaGraphLaunch": graph_launch(a, b),
    }
    for turn in (1, 2, 3):
        times = host_seconds(sides, 2000)
        print(f"turn {turn}: " + " | ".join(f"{k} {v * 1e6:.2f} us" for k, v in times.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
