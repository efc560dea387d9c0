"""hawk planes in every precision vs torch on a GPU, and the host GEMM route vs numpy.

    python benchmarks/bench_precision.py [results.json]    # with eagle importable

Device (skipped without a GPU; torch optional, its side left empty when missing):

(a) the seed's contraction ``y[s*U + u] = sum_r w[r, u] f[r, s]`` routed
    (``eagle.plan.auto(kernel, contraction="gemm", math=...)``, bound once) at
    R = U = B = 4096 for bfloat16, float16, float32 (FP32 and TF32) and float64 planes,
    vs ``torch.mm(f.T, w, out=y)`` in the same dtype (target >= 0.95x for 16-bit);
(b) its routed adjoint (both gradients, added with beta = 1) vs torch autograd's
    backward of the same ``mm`` (``.grad`` accumulating; target >= 0.95x for 16-bit);
(c) ``y = a*x + y`` over 10^8 bfloat16 and float16 lanes, a memory-bound hawk kernel,
    vs torch's ``y.add_(x, alpha=a)``; bandwidth counts read x, read y, write y
    (target >= 80% of the H200's 4.8 TB/s).

Each error is ||out - ref|| / ||ref|| against a float64 host reference of the same
rounded inputs (for (c), of the first 10^7 lanes), recorded next to the timing.

Host (always): the host GEMM route (``host_route="gemm"``) forward vs
``numpy.matmul`` of the same shapes into the same output (target <= 1.2x), and its
adjoint vs numpy's two matmuls (target <= 2x), at the seed's shape and at 1024^3.

Device timings are medians of CUDA-event timings (``_timing.device_ms``), host ones
medians of wall time (``_timing.host_ms``). The table is printed last; with a path the
figures are also written there as JSON.
"""

# No `from __future__ import annotations`: hawk reads the kernels' annotations.

import json
import sys
from typing import Any

import ml_dtypes
import numpy as np
from _kernels import contract
from _timing import device_ms, host_ms

import eagle.diff
import eagle.plan
import hawk
from eagle import arrays, cuda

PEAK_TBS = 4.8
N = 4096
LANES = 10**8
CHECKED_LANES = 10**7
REPEAT = 20
PRECISIONS = [("bfloat16", "fp32"), ("float16", "fp32"), ("float32", "fp32"),
              ("float32", "tf32"), ("float64", "fp32")]  # fmt: skip
HOST_SHAPES = [(64, 32, 128), (1024, 1024, 1024)]


@hawk.kernel
def axpy(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + y


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch


def torch_tensor(torch: Any, values: np.ndarray) -> Any:
    """``values`` (any hawk dtype) as a CUDA tensor of the same dtype and bits."""
    if values.dtype == ml_dtypes.bfloat16:
        bits = torch.from_numpy(values.view(np.int16)).cuda()
        return bits.view(torch.bfloat16)
    return torch.from_numpy(values).cuda()


def contraction_rows(torch: Any, rng: np.random.Generator) -> list[dict[str, Any]]:
    kernel = contract(N, N, N)
    rows = []
    stream = cuda.Stream(non_blocking=True)
    w64 = rng.standard_normal((N, N))
    f64 = rng.standard_normal((N, N))
    cot64 = rng.standard_normal((N, N))
    for dtype, math in PRECISIONS:
        dt = np.dtype(dtype)
        w, f, y_bar = w64.astype(dt), f64.astype(dt), cot64.astype(dt).reshape(-1)
        plan = eagle.plan.auto(kernel, contraction="gemm", math=math)
        dw, df, dy = (arrays.asarray(v, device="cuda:0") for v in (w, f, y_bar))
        y = arrays.asarray(np.full(N * N, np.nan, dt), device="cuda:0")
        w_bar = arrays.asarray(np.zeros((N, N), dt), device="cuda:0")
        f_bar = arrays.asarray(np.zeros((N, N), dt), device="cuda:0")
        with stream:
            forward = plan.bind(w=dw, f=df, y=y)
            adjoint = eagle.diff.reverse(plan).bind(w=dw, f=df, y_bar=dy, w_bar=w_bar, f_bar=f_bar)
        assert forward.route == "gemm" and adjoint.steps[0].route == "gemm"
        eagle_ms = device_ms(lambda b=forward: b.launch(stream), stream, REPEAT)
        reference = f.astype(np.float64).T @ w.astype(np.float64)
        error = rel_error(y.numpy().reshape(N, N), reference)
        adjoint_ms = device_ms(lambda b=adjoint: b.launch(stream), stream, REPEAT)
        row = {"dtype": dtype, "math": math, "eagle_ms": eagle_ms, "eagle_error": error,
               "eagle_adjoint_ms": adjoint_ms}  # fmt: skip
        if torch is not None:
            row.update(torch_contraction(torch, w, f, y_bar, math, reference))
            row["ratio"] = row["torch_ms"] / eagle_ms
            row["adjoint_ratio"] = row["torch_adjoint_ms"] / adjoint_ms
        rows.append(row)
        del dw, df, dy, y, w_bar, f_bar, forward, adjoint
    return rows


def torch_contraction(
    torch: Any, w: np.ndarray, f: np.ndarray, y_bar: np.ndarray, math: str, reference: Any
) -> dict[str, float]:
    """torch's side of one contraction row: ``torch.mm`` and autograd's backward."""
    torch.backends.cuda.matmul.allow_tf32 = math == "tf32"
    tw, tf = torch_tensor(torch, w), torch_tensor(torch, f)
    ty = torch.empty((N, N), dtype=tw.dtype, device="cuda")
    tstream = torch.cuda.current_stream().cuda_stream
    row = {"torch_ms": device_ms(lambda: torch.mm(tf.T, tw, out=ty), tstream, REPEAT)}
    row["torch_error"] = rel_error(ty.float().cpu().double().numpy(), reference)
    gw, gf = tw.clone().requires_grad_(), tf.clone().requires_grad_()
    out = torch.mm(gf.T, gw)
    grad = torch_tensor(torch, y_bar).view(N, N)
    out.backward(grad, retain_graph=True)  # .grad exists now: later calls add into it
    row["torch_adjoint_ms"] = device_ms(
        lambda: out.backward(grad, retain_graph=True), tstream, REPEAT
    )
    torch.backends.cuda.matmul.allow_tf32 = False
    return row


def bandwidth_rows(torch: Any, rng: np.random.Generator) -> list[dict[str, Any]]:
    rows = []
    stream = cuda.Stream(non_blocking=True)
    plan = eagle.plan.auto(axpy)
    for dtype in ("bfloat16", "float16"):
        dt = np.dtype(dtype)
        x = rng.standard_normal(LANES, np.float32).astype(dt)
        y0 = rng.standard_normal(LANES, np.float32).astype(dt)
        a = np.float32(0.5)
        dx, dy = arrays.asarray(x, device="cuda:0"), arrays.asarray(y0, device="cuda:0")
        with stream:
            bound = plan.bind(a=a, x=dx, y=dy)
        bound.launch(stream)  # one launch checked against float64
        stream.synchronize()
        head = slice(0, CHECKED_LANES)
        ref = a * x[head].astype(np.float64) + y0[head].astype(np.float64)
        error = rel_error(dy.numpy()[head], ref)
        ms = device_ms(lambda b=bound: b.launch(stream), stream, REPEAT)
        moved = 3 * LANES * dt.itemsize
        row = {"dtype": dtype, "lanes": LANES, "eagle_ms": ms, "eagle_error": error,
               "eagle_tbs": moved / ms / 1e9}  # fmt: skip
        row["fraction_of_peak"] = row["eagle_tbs"] / PEAK_TBS
        if torch is not None:
            tms = torch_axpy(torch, x, y0, float(a))
            row["torch_ms"], row["torch_tbs"] = tms, moved / tms / 1e9
        rows.append(row)
        del dx, dy, bound
    return rows


def torch_axpy(torch: Any, x: np.ndarray, y: np.ndarray, a: float) -> float:
    """Milliseconds of torch's ``y.add_(x, alpha=a)``."""
    tx, ty = torch_tensor(torch, x), torch_tensor(torch, y)
    tstream = torch.cuda.current_stream().cuda_stream
    return device_ms(lambda: ty.add_(tx, alpha=a), tstream, REPEAT)


def host_rows(rng: np.random.Generator) -> list[dict[str, Any]]:
    return [host_row(rng, r, u, b) for r, u, b in HOST_SHAPES]


def host_row(rng: np.random.Generator, r: int, u: int, b: int) -> dict[str, Any]:
    """The host GEMM route at one shape vs numpy, in float32."""
    kernel = contract(r, u, b)
    plan = eagle.plan.auto(kernel, contraction="gemm", host_route="gemm")
    w = rng.standard_normal((r, u)).astype(np.float32)
    f = rng.standard_normal((r, b)).astype(np.float32)
    y = np.empty(b * u, np.float32)
    y_bar = rng.standard_normal(b * u).astype(np.float32)
    w_bar, f_bar = np.zeros((r, u), np.float32), np.zeros((r, b), np.float32)
    repeat = 200 if r * u * b < 10**7 else 10
    forward = plan.bind(w=w, f=f, y=y)
    adjoint = eagle.diff.reverse(plan).bind(w=w, f=f, y_bar=y_bar, w_bar=w_bar, f_bar=f_bar)
    assert forward.route == "gemm" and adjoint.steps[0].route == "gemm"
    out = y.reshape(b, u)
    cot = y_bar.reshape(b, u)
    gw, gf = np.empty_like(w_bar), np.empty_like(f_bar)

    def numpy_adjoint() -> None:
        np.matmul(f, cot, out=gw)
        np.matmul(w, cot.T, out=gf)

    row = {
        "shape": [r, u, b],
        "eagle_ms": host_ms(forward.launch, repeat),
        "numpy_ms": host_ms(lambda: np.matmul(f.T, w, out=out), repeat),
        "eagle_adjoint_ms": host_ms(adjoint.launch, repeat),
        "numpy_adjoint_ms": host_ms(numpy_adjoint, repeat),
    }
    row["forward_vs_numpy"] = row["eagle_ms"] / row["numpy_ms"]
    row["adjoint_vs_numpy"] = row["eagle_adjoint_ms"] / row["numpy_adjoint_ms"]
    return row


def _cell(row: dict[str, Any], key: str, fmt: str) -> str:
    return format(row[key], fmt) if key in row else "-"


def main() -> None:
    rng = np.random.default_rng()
    results: dict[str, Any] = {"host": host_rows(rng)}
    if cuda.is_available():
        torch = import_torch()
        results["contraction"] = contraction_rows(torch, rng)
        results["bandwidth"] = bandwidth_rows(torch, rng)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as out:
            json.dump(results, out, indent=2)
    for row in results.get("contraction", []):
        print(
            f"contraction {N}^3 {row['dtype']:>8} {row['math']}: eagle "
            f"{row['eagle_ms']:.3f} ms (err {row['eagle_error']:.1e}), torch "
            f"{_cell(row, 'torch_ms', '.3f')} ms (err {_cell(row, 'torch_error', '.1e')}), "
            f"ratio {_cell(row, 'ratio', '.2f')}x | adjoint eagle "
            f"{row['eagle_adjoint_ms']:.3f} ms, torch {_cell(row, 'torch_adjoint_ms', '.3f')} "
            f"ms, ratio {_cell(row, 'adjoint_ratio', '.2f')}x"
        )
    for row in results.get("bandwidth", []):
        print(
            f"y = a*x + y, 1e8 {row['dtype']:>8}: eagle {row['eagle_ms']:.3f} ms "
            f"{row['eagle_tbs']:.2f} TB/s ({row['fraction_of_peak']:.0%} of {PEAK_TBS}; "
            f"err {row['eagle_error']:.1e}), torch {_cell(row, 'torch_tbs', '.2f')} TB/s"
        )
    for row in results["host"]:
        print(
            f"host route {tuple(row['shape'])}: forward {row['eagle_ms']:.4f} ms vs numpy "
            f"{row['numpy_ms']:.4f} ms ({row['forward_vs_numpy']:.2f}x); adjoint "
            f"{row['eagle_adjoint_ms']:.4f} ms vs numpy {row['numpy_adjoint_ms']:.4f} ms "
            f"({row['adjoint_vs_numpy']:.2f}x)"
        )


if __name__ == "__main__":
    main()
