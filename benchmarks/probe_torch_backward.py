"""Where ``eagle.torch``'s forward + backward host time goes, piece by piece, on a GPU.

Usage: PYTHONPATH=. python benchmarks/probe_torch_backward.py    # torch with CUDA

For ``y = 0.5 * x + z`` over 1,000 float32 CUDA lanes (bench_torch.py's kernel), host
microseconds per call (median of 2,000, two passes): the whole ``f(x=x, z=z).sum().backward()``
against torch eager, against a plain Python ``torch.autograd.Function`` doing the same
math with torch ops (the floor any Python-level backward pays) and against two halves
(eagle's forward with torch's backward, torch's forward with eagle's gradient call); the
forward with and without autograd recording, and the backward's own pieces: the op's
gradient call on a broadcast (stride-0) and on a contiguous cotangent, and the torch
calls it makes (``zeros_like``, ``contiguous()`` of a broadcast). Then the gradient
call and the calls below it timed in the main thread and in autograd's device thread.
Under a minute.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from _timing import host_ms
from bench_torch import LANES, scale_add

import eagle.torch

REPEAT = 2000


_F: Any = None  # the eagle.torch Function the mixed sides below call


class _EagleForward(torch.autograd.Function):
    """eagle's forward (its ``_forward``) with the plain torch backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return _F._forward(x, z, None, -1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * 0.5, None


class _EagleBackward(torch.autograd.Function):
    """torch's forward with eagle's gradient call (its ``_computed_gradients``) as the backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, z)
        return 0.5 * x + z

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        x, z = ctx.saved_tensors
        return _F._computed_gradients((x, z), (None,), (grad,), (True, False, False))[0], None


class _Plain(torch.autograd.Function):
    """``0.5 * x + z`` with a Python backward in torch ops."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return 0.5 * x + z

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * 0.5, None


def _us(fn: Callable[[], object]) -> float:
    torch.cuda.synchronize()
    figure = host_ms(fn, REPEAT) * 1e3
    torch.cuda.synchronize()
    return figure


def main() -> int:
    if not torch.cuda.is_available():
        print("probe_torch_backward needs torch with a CUDA device; none is usable here")
        return 1
    global _F
    f = _F = eagle.torch.function(scale_add)
    x = torch.randn(LANES, device="cuda", requires_grad=True)
    z = torch.randn(LANES, device="cuda")
    v = x.detach()
    broadcast = torch.ones((), device="cuda").expand(LANES)  # what sum().backward() hands in
    contiguous = torch.ones(LANES, device="cuda")
    needs = [True, False, False]  # x's gradient only (not z's, not y's initial value)
    rows: dict[str, Callable[[], object]] = {
        "torch eager, forward + backward": lambda: (0.5 * x + z).sum().backward(),
        "eagle.torch, forward + backward": lambda: f(x=x, z=z).sum().backward(),
        "autograd.Function, forward + backward": lambda: _Plain.apply(x, z).sum().backward(),
        "eagle forward, torch backward": lambda: _EagleForward.apply(x, z).sum().backward(),
        "torch forward, eagle backward": lambda: _EagleBackward.apply(x, z).sum().backward(),
        "sum().backward() of a leaf alone": lambda: x.sum().backward(),
        "eagle.torch forward, not recorded": lambda: f(x=v, z=z),
        "eagle.torch forward, recorded": lambda: f(x=x, z=z),
        "eagle _forward alone": lambda: f._forward(v, z, None, -1),
        "torch eager forward, recorded": lambda: 0.5 * x + z,
        "eagle gradients, broadcast cotangent": lambda: f._computed_gradients(
            (v, z), (None,), (broadcast,), needs
        ),
        "eagle gradients, contiguous cotangent": lambda: f._computed_gradients(
            (v, z), (None,), (contiguous,), needs
        ),
        "torch.zeros_like": lambda: torch.zeros_like(v),
        "torch.empty_like": lambda: torch.empty_like(v),
        "contiguous() of a broadcast": lambda: broadcast.contiguous(),
        "torch mul (the plain backward's math)": lambda: contiguous * 0.5,
    }
    for turn in (1, 2):
        for name, fn in rows.items():
            print(f"pass {turn}  {name:40s} {_us(fn):8.1f} us", flush=True)
    _inside_engine(f, x, z)
    return 0


def _inside_engine(f: Any, x: torch.Tensor, z: torch.Tensor) -> None:
    """The gradient call and the calls below it, timed where they run: called directly
    (the main thread) and by autograd's device thread during ``backward()``. Prints, per
    thread, each function's median microseconds and calls per step."""
    import eagle._torch_runner
    import eagle.cuda._runtime
    import eagle.cuda.module
    import eagle.plan._bound

    timed: dict[tuple[str, str], list[float]] = {}
    main = threading.get_ident()

    def wrap(owner: Any, name: str, label: str) -> Callable[[], None]:
        original = getattr(owner, name)

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                where = "main" if threading.get_ident() == main else "autograd"
                timed.setdefault((label, where), []).append(time.perf_counter() - start)

        setattr(owner, name, timed_call)
        return lambda: setattr(owner, name, original)

    v, bar = x.detach(), torch.ones((), device="cuda").expand(x.numel())
    needs = [True, False, False]
    undo = [
        wrap(f, "_computed_gradients", "gradient call"),
        wrap(eagle._torch_runner.Runner, "run", "Runner.run"),
        wrap(eagle.plan._bound.Bound, "launch", "Bound.launch"),
        wrap(eagle.cuda.module.Kernel, "launch", "Kernel.launch"),
        wrap(eagle.cuda._runtime, "_invoke", "checked CUDA call"),
        wrap(torch, "empty_like", "torch.empty_like"),
    ]
    try:
        _us(lambda: f._computed_gradients((v, z), (None,), (bar,), needs))
        _us(lambda: f(x=x, z=z).sum().backward())
    finally:
        for restore in reversed(undo):
            restore()
        del f._computed_gradients
    steps = REPEAT + 1
    for (label, where), times in sorted(timed.items(), key=lambda item: item[0][::-1]):
        median = statistics.median(times) * 1e6
        print(f"{where:8s} {label:22s} {median:8.1f} us median, {len(times) / steps:.1f} per step")


if __name__ == "__main__":
    sys.exit(main())
