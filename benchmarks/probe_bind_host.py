"""Host µs of a moved routed bind, measured without a GPU.

Usage (from the repository root): PYTHONPATH=. python benchmarks/probe_bind_host.py [tree]

Issue #25 asks a routed bind to new addresses to cost at most 50 µs. Its GPU figure comes
from ``bench_user_paths.py``; this probe times the same path (``bench_user_paths``'
contraction shape aside: the test suite's small contraction) on any machine, so that a
change to the bind's host code can be measured between GPU runs. cuBLAS and the CUDA
runtime are the test suite's fakes (``tests/test_gemm_capture.py``'s ``FakeDevice``: the
real ``CublasCaptureHandle`` over a recording cuBLAS), and the planes are device Arrays
over host memory. It binds the plan to each of four sets of planes (warming their
alignment class), then cycles over them: best of 40 rounds of 400 binds. The adjoint's
bind (both gradients) is timed the same way over the route tests' fakes
(``tests/test_route.py``'s ``fake_cublas``: stream handles and side streams faked too,
so its products' moves cost less than cuBLAS's). Only ratios between trees run on one
machine mean anything; pass another tree's root as ``tree`` to put its eagle first on
the path.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

if len(sys.argv) > 1:
    sys.path.insert(0, sys.argv[1])

import numpy as np
import pytest

import eagle.diff
import eagle.plan
from eagle.plan import _route
from hawk.emit import policy
from tests import _route_kernels as k
from tests import test_route
from tests.test_route import _host_backed, _routed_fake_device

ROUNDS, BINDS = 40, 400


def _best_us(bind: Callable[[int], object]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        began = time.perf_counter()
        for turn in range(BINDS):
            bind(turn % 4)
        best = min(best, (time.perf_counter() - began) / BINDS)
    return best * 1e6


def main() -> int:
    patch = pytest.MonkeyPatch()
    device = _routed_fake_device(patch)
    _route._products_kept.clear()
    with policy.using(contraction="gemm"):
        plan = eagle.plan.auto(k.contract)
    rng = np.random.default_rng(0)

    def plane(*shape: int) -> object:
        values = rng.standard_normal(shape).astype(np.float32)
        device.cublas.register(values)
        return _host_backed(values)

    forward = [
        {"w": plane(k.R, k.U), "f": plane(k.R, k.B), "y": plane(k.B * k.U)} for _ in range(4)
    ]
    for _ in range(3):
        for planes in forward:
            plan.bind(**planes)
    print("host µs per routed bind to new addresses (fake cuBLAS, host-backed planes)")
    print(f"  plan.bind                  {_best_us(lambda i: plan.bind(**forward[i])):7.2f}")
    patch.undo()
    print(f"  adjoint bind, 2 gradients  {_adjoint_us():7.2f}")
    return 0


def _adjoint_us() -> float:
    """The routed adjoint's bind to new addresses, over the route tests' fakes."""
    patch = pytest.MonkeyPatch()
    test_route.fake_cublas.__wrapped__(patch)  # type: ignore[attr-defined]
    test_route.forget_bindings(k.contract)
    with policy.using(contraction="gemm"):
        adjoint = eagle.diff.reverse(eagle.plan.auto(k.contract))
    shapes = {"w": (k.R, k.U), "f": (k.R, k.B), "y_bar": (k.B * k.U,), "w_bar": (k.R, k.U),
              "f_bar": (k.R, k.B)}  # fmt: skip
    sets = [
        {name: test_route._FakeDeviceArray(shape, 0x1000000 * (turn + 1) + 0x100000 * at)
         for at, (name, shape) in enumerate(shapes.items())}
        for turn in range(4)
    ]  # fmt: skip
    for _ in range(3):
        for planes in sets:
            adjoint.bind(**planes)
    figure = _best_us(lambda i: adjoint.bind(**sets[i]))
    patch.undo()
    return figure


if __name__ == "__main__":
    sys.exit(main())
