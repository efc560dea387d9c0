"""What ``torch.compile`` itself adds to a small training step, and what an eagle op call
costs by each route, on a GPU.

Usage: python benchmarks/probe_compile_floor.py

Issue #25 asks that the KAN model of ``bench_torch.py`` be no slower under
``torch.compile(fullgraph=True)`` than eager. This probe separates torch's part from
eagle's, over 1,000 float32 CUDA lanes, in host µs per step (median of 5 rounds of 2,000
steps, the sides taking turns):

* torch alone: ``(x * 2).square().mean().backward()`` eager and compiled;
* torch's own ``torch.library`` op for ``x * 2``, forward and backward registered as
  eagle registers its ops, eager and compiled;
* eagle: the same with ``bench_torch``'s ``scale_add`` op in place of ``x * 2``, eager and
  compiled;
* one eagle forward call without autograd: ``f(x=, z=)`` (the eager route), the
  registered op called directly (the route compiled code takes), and the function's
  ``_forward`` (what both end in);

with the number of bindings each side made (torch handing the ops new addresses), then
the compiled eagle step under cProfile.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
from _report import print_profile
from _timing import loop_ms
from bench_torch import scale_add

import eagle.torch
from eagle._torch_runner import Runner

ROUNDS, REPEAT = 5, 2000


def _us(fn: Callable[[], object]) -> float:
    for _ in range(200):
        fn()
    return loop_ms(fn, REPEAT, torch.cuda.synchronize) * 1e3


def _bare_ops():
    """``y = 2 x`` as a bare op of torch's own (``torch.library``, as eagle registers its
    ops: a forward op and a backward op, each with a fake and an autograd formula)."""
    lib = torch.library.Library("floor_probe", "FRAGMENT")
    lib.define("double(Tensor x) -> Tensor")
    lib.define("double_backward(Tensor g) -> Tensor")
    lib.impl("double", lambda x: x * 2.0, "CUDA")
    lib.impl("double_backward", lambda g: g * 2.0, "CUDA")
    for name in ("double", "double_backward"):
        torch.library.register_fake(f"floor_probe::{name}", lambda t: torch.empty_like(t), lib=lib)
    ops = torch.ops.floor_probe

    def setup(ctx, inputs, output):
        pass

    def backward(ctx, g):
        return ops.double_backward.default(g)

    def second(ctx, gg):
        return ops.double_backward.default(gg)

    torch.library.register_autograd("floor_probe::double", backward, setup_context=setup, lib=lib)
    torch.library.register_autograd(
        "floor_probe::double_backward", second, setup_context=setup, lib=lib
    )
    return lib, ops.double.default


def main() -> None:
    _library, double = _bare_ops()  # (the library keeps the ops registered)
    f = eagle.torch.function(scale_add)
    x = torch.randn(1000, device="cuda", requires_grad=True)
    z = torch.randn(1000, device="cuda")
    v = x.detach()

    def torch_loss(x):
        return (x * 2.0).square().mean()

    def eagle_loss(x):
        return f(x=x, z=z).square().mean()

    def op_loss(x):
        return double(x).square().mean()

    torch_compiled = torch.compile(torch_loss, fullgraph=True)
    eagle_compiled = torch.compile(eagle_loss, fullgraph=True)
    op_compiled = torch.compile(op_loss, fullgraph=True)
    sides = {
        "torch eager fwd+bwd": lambda: torch_loss(x).backward(),
        "torch compiled fwd+bwd": lambda: torch_compiled(x).backward(),
        "bare op eager fwd+bwd": lambda: op_loss(x).backward(),
        "bare op compiled fwd+bwd": lambda: op_compiled(x).backward(),
        "eagle eager fwd+bwd": lambda: eagle_loss(x).backward(),
        "eagle compiled fwd+bwd": lambda: eagle_compiled(x).backward(),
        "eagle call, no grad": lambda: f(x=v, z=z),
        "registered op": lambda: f.op(v, z, None, -1, torch.float32, f.key),
        "_forward": lambda: f._forward([v, z], [None], 1000, torch.float32),
    }
    rounds: dict[str, list[float]] = {side: [] for side in sides}
    binds = dict.fromkeys(sides, 0)
    original = Runner._bind
    for _ in range(ROUNDS):
        for side, fn in sides.items():

            def counted(self, *args, _side=side, **kwargs):
                binds[_side] += 1
                return original(self, *args, **kwargs)

            Runner._bind = counted
            try:
                rounds[side].append(_us(fn))
            finally:
                Runner._bind = original
    print(f"host µs per step, 1000 float32 CUDA lanes, median of {ROUNDS} rounds of {REPEAT}")
    for side, times in rounds.items():
        shown = ", ".join(f"{t:.1f}" for t in times)
        print(
            f"  {side:26s} {statistics.median(times):8.1f}   binds {binds[side]:5d}   "
            f"(rounds: {shown})"
        )
    print(f"eagle compiled fwd+bwd, {REPEAT} steps under cProfile:")
    print_profile(lambda: eagle_compiled(x).backward(), REPEAT, torch.cuda.synchronize, 30)


if __name__ == "__main__":
    main()
