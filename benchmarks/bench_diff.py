"""Reverse mode, side by side: the adjoint of the seed's ``contract`` kernel.

For each shape (the seed's, a large one and a square one) the gradients ``w_bar`` and
``f_bar`` of ``y = contract(w, f)`` for a cotangent ``y_bar``, computed by:

* the loop adjoint (``eagle.diff.reverse(plan)``: the vjp kernel, one thread
  per lane, atomic scatter-adds), with both gradient planes and with
  ``w_bar`` only (the adjoint specialised to the gradients asked for); and the
  same kernel emitted with ``warp_adds=False`` (every ``f_bar`` add a per-lane
  ``atomicAdd``, as before warp sums), launched directly, with each side's
  ``f_bar`` error against a float64 reference;
* the routed adjoint: the adjoint of the plan built under
  ``policy.using(contraction="gemm")`` (two cuBLAS products added into the
  gradient planes), timed through the same API when its ``route("device")``
  is ``"gemm"``, and otherwise recorded as not routed, with the reasons;
* torch autograd of the same matmul (``torch.autograd.grad``, TF32 off), when
  torch is installed;
* on the host, the adjoint's numpy program vs the two numpy matmuls.

The forward loop's time is given for scale. Device times are medians of CUDA
events after a warm-up; every side uses the same shapes and float32.

    python benchmarks/bench_diff.py results.json    (eagle installed, or PYTHONPATH=.)

Prints a table and writes every figure to the JSON file. Under two minutes.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
from _kernels import contract
from _timing import device_ms, host_ms

import eagle.cuda
import eagle.diff
import eagle.plan
import hawk
import hawk.diff
from eagle.cuda.module import PackedArgs
from eagle.plan._cuda_backend import BLOCK_SIZE
from eagle.plan._cuda_backend import grid as _grid
from hawk.emit import cuda as emit_cuda
from hawk.emit import policy

REPEAT = 20

SR, SU, SB = 64, 32, 128  # the seed's shape (DESIGN.md section 6)
LR, LU, LB = 256, 256, 4096  # a large one: 2**20 lanes
QR, QU, QB = 2048, 2048, 2048  # a square one, where the products are compute-bound


SHAPES = [
    ("seed", contract(SR, SU, SB), (SR, SU, SB)),
    ("large", contract(LR, LU, LB), (LR, LU, LB)),
    ("square", contract(QR, QU, QB), (QR, QU, QB)),
]


def _planes(rng: np.random.Generator, shape: tuple[int, int, int]) -> dict[str, np.ndarray]:
    rows, units, samples = shape
    return {
        "w": rng.standard_normal((rows, units)).astype(np.float32),
        "f": rng.standard_normal((rows, samples)).astype(np.float32),
        "y_bar": rng.standard_normal(samples * units).astype(np.float32),
    }


def _host_row(name: str, kernel: hawk.Kernel, shape, rng: np.random.Generator) -> dict:
    _, units, samples = shape
    p = _planes(rng, shape)
    w_bar, f_bar = np.zeros_like(p["w"]), np.zeros_like(p["f"])
    bound = eagle.diff.reverse(eagle.plan.auto(kernel)).bind(**p, w_bar=w_bar, f_bar=f_bar)
    y_bar = p["y_bar"].reshape(samples, units)
    hawk_ms = host_ms(bound.launch, 5)
    numpy_ms = host_ms(lambda: (p["f"] @ y_bar, p["w"] @ y_bar.T), 5)
    return {
        "shape": name,
        "R_U_B": shape,
        "hawk_host_adjoint_ms": hawk_ms,
        "numpy_two_matmuls_ms": numpy_ms,
        "hawk_over_numpy": hawk_ms / numpy_ms,
    }


def _torch_ms(p: dict[str, np.ndarray], shape: tuple[int, int, int]) -> tuple[Any, Any]:
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "torch has no CUDA device"
    torch.backends.cuda.matmul.allow_tf32 = False
    _, units, samples = shape
    w = torch.tensor(p["w"], device="cuda", requires_grad=True)
    f = torch.tensor(p["f"], device="cuda", requires_grad=True)
    y_bar = torch.tensor(p["y_bar"].reshape(samples, units), device="cuda")
    y = f.T @ w
    stream_ptr = torch.cuda.current_stream().cuda_stream
    ms = device_ms(
        lambda: torch.autograd.grad(y, (w, f), y_bar, retain_graph=True), stream_ptr, REPEAT
    )
    return ms, None


def _device_row(name: str, kernel: hawk.Kernel, shape, rng: np.random.Generator) -> dict:
    from eagle import arrays

    rows, units, samples = shape
    p = _planes(rng, shape)
    stream = eagle.cuda.Stream(non_blocking=True)
    ptr = stream.ptr()
    on = {k: arrays.asarray(v, device="cuda:0") for k, v in p.items()}
    w_bar = arrays.full((rows, units), 0.0, "float32", device="cuda:0")
    f_bar = arrays.full((rows, samples), 0.0, "float32", device="cuda:0")
    y = arrays.full((samples * units,), np.nan, "float32", device="cuda:0")
    row: dict[str, Any] = {"shape": name, "R_U_B": shape, "lanes": samples * units}

    forward = eagle.plan.auto(kernel).bind(w=on["w"], f=on["f"], y=y)
    row["forward_loop_ms"] = device_ms(lambda: forward.launch(ptr), ptr, REPEAT)

    adjoint = eagle.diff.reverse(eagle.plan.auto(kernel))
    both = adjoint.bind(**on, w_bar=w_bar, f_bar=f_bar)
    only_w = adjoint.bind(**on, w_bar=w_bar)
    row["loop_adjoint_ms"] = device_ms(lambda: both.launch(ptr), ptr, REPEAT)
    row["loop_adjoint_w_bar_only_ms"] = device_ms(lambda: only_w.launch(ptr), ptr, REPEAT)
    reference = p["w"].astype(np.float64) @ p["y_bar"].reshape(samples, units).T.astype(np.float64)
    for warp_adds in (True, False):
        ms, error = _emitted_adjoint(kernel, on, shape, warp_adds, reference, stream)
        side = "warp_sums" if warp_adds else "per_lane_atomics"
        row[f"loop_adjoint_{side}_ms"], row[f"loop_adjoint_{side}_f_bar_error"] = ms, error

    # -- the adjoint of the GEMM-routed plan, through the same API ------------------------------
    with policy.using(contraction="gemm"):
        routed_plan = eagle.plan.auto(kernel)
    routed = eagle.diff.reverse(routed_plan)
    row["routed_adjoint_route"] = routed.route("device")
    if row["routed_adjoint_route"] == "gemm":
        with stream:
            routed_bound = routed.bind(**on, w_bar=w_bar, f_bar=f_bar)
        row["routed_adjoint_ms"] = device_ms(lambda: routed_bound.launch(ptr), ptr, REPEAT)
        row["routed_adjoint_reasons"] = []
    else:
        row["routed_adjoint_ms"] = None
        row["routed_adjoint_reasons"] = list(routed.reasons)

    row["torch_autograd_ms"], row["torch_note"] = _torch_ms(p, shape)
    if row["torch_autograd_ms"]:
        row["loop_over_torch"] = row["loop_adjoint_ms"] / row["torch_autograd_ms"]
        if row["routed_adjoint_ms"]:
            row["routed_over_torch"] = row["routed_adjoint_ms"] / row["torch_autograd_ms"]
    flops = 2 * 2 * rows * units * samples  # two products of R x U x B multiply-adds
    row["loop_adjoint_gflops"] = flops / row["loop_adjoint_ms"] / 1e6
    return row


def _emitted_adjoint(
    kernel: hawk.Kernel,
    on: dict[str, Any],
    shape: tuple[int, int, int],
    warp_adds: bool,
    reference: np.ndarray,
    on_stream: eagle.cuda.Stream,
) -> tuple[float, float]:
    """The loop adjoint (both gradients) emitted with or without warp sums, launched
    directly: its median ms, and ``||f_bar - ref|| / ||ref||`` of one launch from zero."""
    from eagle import arrays

    stream = on_stream.ptr()
    rows, units, samples = shape
    adjoint = hawk.diff.vjp(kernel)
    emitted = emit_cuda.emit(
        adjoint.ir, {p.name: "float32" for p in adjoint.planes}, warp_adds=warp_adds
    )
    loaded = eagle.cuda.load_kernel(emitted.source, emitted.name)
    planes = {
        **on,
        "w_bar": arrays.zeros((rows, units), "float32", "cuda:0"),
        "f_bar": arrays.zeros((rows, samples), "float32", "cuda:0"),
    }
    record = arrays.zeros((8,), "int64", "cuda:0")  # indices in range: never written
    lanes = samples * units
    args = PackedArgs([*(planes[p.name] for p in adjoint.planes), np.int64(lanes), record])
    grid = _grid(lanes)
    loaded.launch(grid, BLOCK_SIZE, args, stream)
    on_stream.synchronize()  # numpy() waits for the stream eagle would use, not this one
    f_bar = planes["f_bar"].numpy().astype(np.float64)
    error = float(np.linalg.norm(f_bar - reference) / np.linalg.norm(reference))
    ms = device_ms(lambda: loaded.launch(grid, BLOCK_SIZE, args, stream), stream, REPEAT)
    return ms, error


def _format_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1].startswith("-"):  # (--help: the usage, not a file)
        print(__doc__)
        return 2
    rng = np.random.default_rng(0)
    report: dict[str, Any] = {"host": [_host_row(n, k, s, rng) for n, k, s in SHAPES[:1]]}
    for row in report["host"]:
        print(
            f"host {row['shape']} {row['R_U_B']}: hawk adjoint {row['hawk_host_adjoint_ms']:.2f} ms"
            f", numpy matmuls {row['numpy_two_matmuls_ms']:.2f} ms "
            f"({row['hawk_over_numpy']:.1f}x)"
        )
    if not eagle.cuda.is_available():
        report["device"] = None
        print("no CUDA device: device figures skipped")
    else:
        report["device"] = [_device_row(n, k, s, rng) for n, k, s in SHAPES]
        print(
            f"{'shape':<7}{'R,U,B':>16}{'fwd loop':>10}{'adj loop':>10}{'adj w only':>12}"
            f"{'adj routed':>12}{'torch':>9}{'loop/torch':>12}"
        )
        for row in report["device"]:
            ratio = row.get("loop_over_torch")
            print(
                f"{row['shape']:<7}{tuple(row['R_U_B'])!s:>16}"
                f"{_format_ms(row['forward_loop_ms']):>10}{_format_ms(row['loop_adjoint_ms']):>10}"
                f"{_format_ms(row['loop_adjoint_w_bar_only_ms']):>12}"
                f"{_format_ms(row['routed_adjoint_ms']):>12}"
                f"{_format_ms(row['torch_autograd_ms']):>9}"
                f"{'-' if ratio is None else f'{ratio:.1f}x':>12}"
            )
            if row["routed_adjoint_ms"] is None:
                print(f"  routed adjoint not timed: {'; '.join(row['routed_adjoint_reasons'])}")
            if row["torch_note"]:
                print(f"  torch not timed: {row['torch_note']}")
        print(
            f"{'loop adjoint':<7}{'R,U,B':>16}{'warp sums':>11}{'per lane':>10}{'speed-up':>10}"
            f"{'f_bar err (warp)':>18}{'(per lane)':>12}"
        )
        for row in report["device"]:
            warp, plain = row["loop_adjoint_warp_sums_ms"], row["loop_adjoint_per_lane_atomics_ms"]
            print(
                f"{row['shape']:<7}{tuple(row['R_U_B'])!s:>16}{warp:>11.3f}{plain:>10.3f}"
                f"{plain / warp:>9.1f}x{row['loop_adjoint_warp_sums_f_bar_error']:>18.1e}"
                f"{row['loop_adjoint_per_lane_atomics_f_bar_error']:>12.1e}"
            )
        print("times in ms (medians of CUDA events); float32; torch with TF32 off")
    with open(argv[1], "w") as out:
        json.dump(report, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
