"""Host cost of eagle.torch, side by side with torch, on 1,000 CUDA lanes.

For ``y = 0.5 * x + z`` over 1,000 float32 lanes on the device:

* forward: the hawk kernel as ``eagle.torch.function`` vs torch eager
  ``0.5 * x + z`` vs the same eager expression wrapped as a bare
  ``torch.library.custom_op``;
* forward + backward: ``f(x=x, z=z).sum().backward()`` vs torch's
  ``(0.5 * x + z).sum().backward()``;
* a ``torch.cuda.graph`` replay of a mixed step (a torch op, the hawk kernel through
  ``plan.run``, the same through the torch op, another torch op) vs the same step in
  eager torch, as host microseconds per replay or call.

Times are host wall-clock medians per call (after a warm-up), every side on the same
tensors; the calls only enqueue work, and the device is synchronised between batches.
The target is within 2x of torch eager.

    python benchmarks/bench_torch.py results.json    (eagle installed, or PYTHONPATH=.)

Prints a table and writes every figure to the JSON file. Under a minute.
"""

from __future__ import annotations

import json
import sys

import torch
from _timing import host_ms

import eagle.plan
import eagle.torch
import hawk

LANES = 1000
REPEAT = 2000


@hawk.kernel
def scale_add(x: hawk.Scalar, z: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = 0.5 * x + z  # noqa: F841 (a kernel assigns to its output plane)


@torch.library.custom_op("eagle_bench::scale_add", mutates_args=())
def _bare(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return 0.5 * x + z


@_bare.register_fake
def _(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _us(fn) -> float:
    """Median host microseconds of ``fn()``; the device drains before timing."""
    torch.cuda.synchronize()
    figure = host_ms(fn, REPEAT) * 1e3
    torch.cuda.synchronize()
    return figure


def _mixed_graph(f, v, z) -> torch.cuda.CUDAGraph:
    """A torch op, the kernel through plan.run, the kernel through the torch op, a torch op:
    warmed up and captured on one side stream, as torch asks; checked once replayed."""
    plan = eagle.plan.auto(scale_add)

    def step():
        h = torch.empty_like(v)
        plan.run(x=v * 2.0, z=z, y=h)
        return torch.relu(f(x=h, z=z))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        out = step()
    graph.replay()
    torch.testing.assert_close(out, torch.relu(0.5 * (0.5 * (v * 2.0) + z) + z))
    return graph


def main() -> None:
    f = eagle.torch.function(scale_add)
    x = torch.randn(LANES, device="cuda", requires_grad=True)
    z = torch.randn(LANES, device="cuda")
    v = x.detach()  # the forward sides take tensors that need no gradient
    torch.testing.assert_close(f(x=v, z=z), 0.5 * v + z)
    figures = {
        "forward": {
            "eagle.torch": _us(lambda: f(x=v, z=z)),
            "torch eager": _us(lambda: 0.5 * v + z),
            "torch custom_op": _us(lambda: _bare(v, z)),
        },
        "forward+backward": {
            "eagle.torch": _us(lambda: f(x=x, z=z).sum().backward()),
            "torch eager": _us(lambda: (0.5 * x + z).sum().backward()),
        },
        "mixed step": {
            "eagle graph replay": _us(_mixed_graph(f, v, z).replay),
            "torch eager": _us(lambda: torch.relu(0.5 * (0.5 * (v * 2.0) + z) + z)),
        },
    }
    print(f"host cost per call, {LANES} float32 CUDA lanes, median of {REPEAT} (µs)")
    for what, sides in figures.items():
        eager = sides["torch eager"]
        for side, us in sides.items():
            print(f"  {what:17s} {side:16s} {us:8.1f}   {us / eager:5.2f}x eager")
    with open(sys.argv[1], "w") as out:
        json.dump({"lanes": LANES, "repeat": REPEAT, "host_us": figures}, out, indent=2)


if __name__ == "__main__":
    main()
