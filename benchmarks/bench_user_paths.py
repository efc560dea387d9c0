# ruff: noqa: F821, F841, UP037 - hawk's axis annotations and output planes confuse these checks
"""Host cost of the paths a newcomer takes first, side by side in one run.

    python benchmarks/bench_user_paths.py [results.json]    (eagle importable, needs a GPU)

One kernel, ``y = a * x + y`` over 1,000 float32 lanes on the device, and one routed
contraction (``contraction="gemm"``, R = U = B = 64):

* ``plan.run`` with a reused plan over eagle Arrays, torch tensors, CuPy arrays, and an
  object that has only ``__cuda_array_interface__`` (over the same CuPy memory);
* ``eagle.plan.auto(kernel).run(...)`` in a loop (a new plan per call) against a reused
  plan, over torch tensors;
* binding the routed plan to new addresses: one bind per call, cycling over four sets of
  freshly allocated tensors of the same layout (after each set was bound once), against
  a bind to the same tensors as the last call; the same over eagle Arrays of those
  tensors (what ``eagle.torch`` binds), and the routed adjoint
  (``eagle.diff.reverse(plan)``, both gradients) over four sets of tensors;
* torch's own ``y.add_(x, alpha=a)`` on the same tensors, the yardstick.

Figures are host wall-clock medians in microseconds, per call, after a warm-up; the
device is synchronised between batches so no queue builds up. Targets (issue "the paths
users take"): CuPy and CUDA-array-interface objects within 1.5x of torch tensors;
``auto(kernel).run`` within 2x of a reused plan; a routed bind to new addresses of a
warmed alignment class at most 50 µs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence

import cupy
import torch
from _timing import host_ms

import eagle.diff
import eagle.plan
import hawk
from eagle import arrays
from hawk import math as hm

LANES = 1_000
REPEAT = 2_000
R = U = B = 64


@hawk.kernel
def axpb(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + y


@hawk.kernel
def contract(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = acc


class _InterfaceOnly:
    """An array known to eagle only by its CUDA array interface (v3)."""

    def __init__(self, array: cupy.ndarray) -> None:
        self.__cuda_array_interface__ = array.__cuda_array_interface__


def _us(fn: Callable[[], object], repeat: int = REPEAT) -> float:
    torch.cuda.synchronize()
    figure = host_ms(fn, repeat) * 1e3
    torch.cuda.synchronize()
    return figure


def _plane_sides() -> dict[str, float]:
    plan = eagle.plan.auto(axpb)
    xt = torch.randn(LANES, device="cuda")
    yt = torch.randn(LANES, device="cuda")
    xc, yc = cupy.asarray(xt.cpu().numpy()), cupy.asarray(yt.cpu().numpy())
    xe, ye = (
        arrays.asarray(xt.cpu().numpy(), device="cuda:0"),
        arrays.zeros(LANES, "float32", "cuda:0"),
    )
    xi, yi = _InterfaceOnly(xc), _InterfaceOnly(yc)
    return {
        "torch add_": _us(lambda: yt.add_(xt, alpha=0.5)),
        "plan.run eagle Arrays": _us(lambda: plan.run(a=0.5, x=xe, y=ye)),
        "plan.run torch tensors": _us(lambda: plan.run(a=0.5, x=xt, y=yt)),
        "plan.run CuPy arrays": _us(lambda: plan.run(a=0.5, x=xc, y=yc)),
        "plan.run CUDA array interface": _us(lambda: plan.run(a=0.5, x=xi, y=yi)),
        "auto(kernel).run torch tensors": _us(
            lambda: eagle.plan.auto(axpb).run(a=0.5, x=xt, y=yt), REPEAT // 4
        ),
    }


def tensor_sets(count: int = 4) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``count`` sets of fresh CUDA tensors (w, f, y) for the routed contraction."""
    return [
        (
            torch.randn(R, U, device="cuda"),
            torch.randn(R, B, device="cuda"),
            torch.empty(B * U, device="cuda"),
        )
        for _ in range(count)
    ]


def cycling_binds(
    plan: eagle.plan.AutoPlan, sets: Sequence[tuple[torch.Tensor, ...]]
) -> Callable[[], None]:
    """A call that binds ``plan`` to the next of ``sets`` each time, cycling."""
    turn = [0]

    def fresh() -> None:
        w, f, y = sets[turn[0] % len(sets)]
        turn[0] += 1
        plan.bind(w=w, f=f, y=y)

    return fresh


def _rebind_sides() -> dict[str, float]:
    plan = eagle.plan.auto(contract, contraction="gemm")
    sets = tensor_sets()
    for w, f, y in sets:  # each set's addresses once, so the alignment class is warm
        plan.bind(w=w, f=f, y=y)
    fresh = cycling_binds(plan, sets)
    w, f, y = sets[0]
    views = [tuple(arrays.asarray(t) for t in tensors) for tensors in sets]  # eagle Arrays
    for vw, vf, vy in views:
        plan.bind(w=vw, f=vf, y=vy)
    adjoint = eagle.diff.reverse(plan)
    gradients = [
        {"w": w, "f": f, "y_bar": torch.randn_like(y), "w_bar": torch.zeros_like(w),
         "f_bar": torch.zeros_like(f)}
        for w, f, y in sets
    ]  # fmt: skip
    for planes in gradients:
        adjoint.bind(**planes)
    turn = [0]

    def next_of(items: Sequence[object]) -> object:
        turn[0] += 1
        return items[turn[0] % len(items)]

    return {
        "routed bind, same tensors": _us(lambda: plan.bind(w=w, f=f, y=y), 400),
        "routed bind, new addresses": _us(fresh, 400),
        "routed bind, new eagle Arrays": _us(
            lambda: plan.bind(**dict(zip("wfy", next_of(views), strict=True))), 400
        ),
        "routed adjoint bind, new addresses": _us(lambda: adjoint.bind(**next_of(gradients)), 400),
    }


def main() -> None:
    figures = {"planes": _plane_sides(), "routed bind": _rebind_sides()}
    print(f"host µs per call (median; {LANES} float32 lanes; routed {R}x{U}x{B})")
    for group, sides in figures.items():
        for side, us in sides.items():
            print(f"  {group:12s} {side:34s} {us:9.1f}")
    planes = figures["planes"]
    print(
        "  ratios: CuPy/torch {:.2f}x, CAI/torch {:.2f}x, auto().run/reused {:.2f}x".format(
            planes["plan.run CuPy arrays"] / planes["plan.run torch tensors"],
            planes["plan.run CUDA array interface"] / planes["plan.run torch tensors"],
            planes["auto(kernel).run torch tensors"] / planes["plan.run torch tensors"],
        )
    )
    rebind = figures["routed bind"]
    print(
        "  targets: routed bind to new addresses {:.1f} µs (at most 50), auto(kernel).run "
        "{:.2f}x a reused plan (at most 2)".format(
            rebind["routed bind, new addresses"],
            planes["auto(kernel).run torch tensors"] / planes["plan.run torch tensors"],
        )
    )
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as out:
            json.dump({"lanes": LANES, "host_us": figures}, out, indent=2)


if __name__ == "__main__":
    main()
