"""fp8 products on a GPU (sm_89 or newer): eagle's cuBLASLt product vs ``torch._scaled_mm``.

    python benchmarks/bench_fp8.py [results.json]    # with eagle importable

At 4096^3 and 8192^3, float8_e4m3fn factors (``a`` of shape (M, K), ``b`` of shape (N, K),
the layout both take) with per-tensor float32 scales, bfloat16 ``out``, fast
accumulation off and on (eagle ``math="fast_accum"``, torch ``use_fast_accum=True``):

* ``captured``: eagle's ``handle.gemm`` recorded PER_GRAPH times in one graph, replayed;
* ``eager``: eagle's ``handle.gemm`` called back to back (params and operands made once);
* ``torch``: ``torch._scaled_mm`` called back to back.

Target: eagle >= 0.9x torch's TFLOP/s (torch gave 1032 and 1424 TFLOP/s on the H200).
For context, bfloat16 rows: eagle's captured ``handle.gemm`` vs ``torch.mm``. The
``error`` column is ||eagle - ref|| / ||ref|| against a float64 host reference of the
dequantised, scaled factors (at 4096 only; ``torch_error`` is torch's). Device times come
from CUDA events around back-to-back launches after a warm-up; each figure is the median
of TRIALS runs, and the sides take turns ROUNDS times so that the GPU's clocks drift over
both. The table is printed; with a path, the figures are also written there as JSON.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
from _report import print_table, write_record

from eagle import arrays, cuda
from eagle.cuda._runtime import cudart, runtime
from eagle.gemm import CublasCaptureHandle, gemm_params_for_arrays

TRIALS = 5
ROUNDS = 3
PER_GRAPH = 10  # products in one captured graph
REPS = {4096: 20, 8192: 5}  # launches (graph replays for captured) per timed batch
SCALES = (0.5, 0.25)  # a's and b's per-tensor scales
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
BF16 = np.dtype(ml_dtypes.bfloat16)


def device_seconds(enqueue: Callable[[], Any], stream_ptr: int, reps: int) -> float:
    """Median seconds per ``enqueue()`` on ``stream_ptr`` over TRIALS batches of ``reps``
    back-to-back calls, from CUDA events, after one warm-up call."""
    enqueue()
    cudart.cudaStreamSynchronize(stream_ptr)
    start, end = cuda.Event(), cuda.Event()
    samples = []
    for _ in range(TRIALS):
        start.record(stream_ptr)
        for _ in range(reps):
            enqueue()
        end.record(stream_ptr)
        end.synchronize()
        samples.append(start.elapsed_ms(end) / 1e3 / reps)
    return statistics.median(samples)


def tflops(n: int, seconds: float) -> float:
    return 2 * n**3 / seconds / 1e12


# --- eagle -------------------------------------------------------------------------------------


class EagleProduct:
    """One fp8 (or bfloat16) product on a handle of its own stream: its operands on the
    device, its params, warmed."""

    def __init__(self, a: np.ndarray, b: np.ndarray, math: str | None) -> None:
        self.stream = cuda.Stream(non_blocking=True)
        self.operands = {
            "a": arrays.asarray(a, device="cuda:0"),
            "b": arrays.asarray(b, device="cuda:0"),
            "out": arrays.empty((a.shape[0], b.shape[0]), "bfloat16", "cuda:0"),
        }
        if a.dtype == E4M3:
            for role, scale in zip(("a_scale", "b_scale"), SCALES, strict=True):
                self.operands[role] = arrays.full((1,), scale, "float32", "cuda:0")
        self.handle = CublasCaptureHandle(self.stream)
        self.params = gemm_params_for_arrays(
            self.operands["a"], self.operands["b"], self.operands["out"],
            transpose_b=True, math=math,
        )  # fmt: skip
        self.handle.warm(self.params, self.operands)

    def enqueue(self) -> None:
        self.handle.gemm(self.params, self.operands)

    def eager(self, reps: int) -> float:
        return device_seconds(self.enqueue, self.stream.ptr(), reps)

    def captured(self, reps: int) -> float:
        with cuda.capture(self.stream) as cap:
            for _ in range(PER_GRAPH):
                self.enqueue()
        graph = cuda.Graph.from_captured(cap.captured)
        launch = graph.launcher().stream(self.stream).launch
        seconds = device_seconds(launch, self.stream.ptr(), reps) / PER_GRAPH
        graph.destroy()
        return seconds

    def result(self) -> np.ndarray:
        self.enqueue()
        self.stream.synchronize()
        return self.operands["out"].numpy().astype(np.float64)

    def close(self) -> None:
        self.stream.synchronize()
        self.handle.destroy()


# --- torch -------------------------------------------------------------------------------------


class TorchProduct:
    """The same product with ``torch._scaled_mm`` (fp8) or ``torch.mm`` (bfloat16)."""

    def __init__(self, torch: ModuleType, a: np.ndarray, b: np.ndarray, fast: bool) -> None:
        self.torch = torch
        self.a, self.bt = _torch_device(torch, a), _torch_device(torch, b).t()  # (K, N)
        self.out = torch.empty((a.shape[0], b.shape[0]), dtype=torch.bfloat16, device="cuda")
        self.scales = [torch.tensor(s, dtype=torch.float32, device="cuda") for s in SCALES]
        self.fast = fast
        self.stream = torch.cuda.Stream()

    def enqueue(self) -> None:
        torch = self.torch
        if self.a.dtype == torch.bfloat16:
            torch.mm(self.a, self.bt, out=self.out)
            return
        self.out = torch._scaled_mm(
            self.a, self.bt, self.scales[0], self.scales[1],
            out_dtype=torch.bfloat16, use_fast_accum=self.fast,
        )  # fmt: skip

    def seconds(self, reps: int) -> float:
        with self.torch.cuda.stream(self.stream):
            return device_seconds(self.enqueue, self.stream.cuda_stream, reps)

    def result(self) -> np.ndarray:
        with self.torch.cuda.stream(self.stream):
            self.enqueue()
        self.stream.synchronize()
        return self.out.double().cpu().numpy()


def _torch_device(torch: ModuleType, values: np.ndarray) -> Any:
    """``values`` as a CUDA tensor of the same dtype, moved as their bits."""
    bits = np.ascontiguousarray(values).view(np.uint8 if values.itemsize == 1 else np.int16)
    dtype = torch.float8_e4m3fn if values.dtype == E4M3 else torch.bfloat16
    return torch.from_numpy(bits).cuda().view(dtype)


# --- the run -----------------------------------------------------------------------------------


def _error(result: np.ndarray, reference: np.ndarray) -> float:
    return float(np.linalg.norm(result - reference) / np.linalg.norm(reference))


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(__doc__)
        return 2
    if not cuda.is_available():
        print("bench_fp8 needs a CUDA device; none is usable here")
        return 1
    attr = runtime().cudaDeviceAttr
    capability = tuple(
        cudart.cudaDeviceGetAttribute(getattr(attr, f"cudaDevAttrComputeCapability{p}"), 0)
        for p in ("Major", "Minor")
    )
    if capability < (8, 9):
        print(f"bench_fp8 needs sm_89 or newer; cuda:0 is sm_{capability[0]}{capability[1]}")
        return 1
    try:
        import torch
    except ImportError:
        torch = None
        print("note: torch is not installed; its side is skipped")
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    for n in (4096, 8192):
        reps = REPS[n]
        a = rng.standard_normal((n, n)).astype(E4M3)
        b = rng.standard_normal((n, n)).astype(E4M3)
        reference = None
        if n == 4096:
            reference = SCALES[0] * SCALES[1] * (a.astype(np.float64) @ b.astype(np.float64).T)
        for fast in (False, True):
            rows.append(_fp8_row(torch, a, b, fast, reps, reference))
        wide = (a.astype(np.float32).astype(BF16), b.astype(np.float32).astype(BF16))
        rows.append(_bf16_row(torch, *wide, reps))
    report(rows)
    if argv:
        write_record(argv[0], {
            "torch": getattr(torch, "__version__", None),
            "trials": TRIALS, "rounds": ROUNDS, "per_graph": PER_GRAPH,
            "rows": rows,
        })  # fmt: skip
    return 0


def _fp8_row(
    torch: ModuleType | None,
    a: np.ndarray,
    b: np.ndarray,
    fast: bool,
    reps: int,
    reference: np.ndarray | None,
) -> dict[str, Any]:
    n = a.shape[0]
    eagle = EagleProduct(a, b, "fast_accum" if fast else None)
    other = TorchProduct(torch, a, b, fast) if torch else None
    captured, eager, torched = [], [], []
    for _ in range(ROUNDS):
        captured.append(eagle.captured(reps))
        eager.append(eagle.eager(reps * PER_GRAPH))
        if other:
            torched.append(other.seconds(reps * PER_GRAPH))
    row: dict[str, Any] = {
        "case": f"fp8 e4m3 x e4m3 -> bf16, fast_accum={fast}",
        "shape": f"{n}^3",
        "captured": tflops(n, statistics.median(captured)),
        "eager": tflops(n, statistics.median(eager)),
        "torch": tflops(n, statistics.median(torched)) if torched else None,
    }
    if torched:
        row["captured_ratio"] = row["captured"] / row["torch"]
        row["eager_ratio"] = row["eager"] / row["torch"]
    row["target"] = ">= 0.9"
    if reference is not None:
        row["error"] = _error(eagle.result(), reference)
        row["torch_error"] = _error(other.result(), reference) if other else None
    eagle.close()
    return row


def _bf16_row(torch: ModuleType | None, a: np.ndarray, b: np.ndarray, reps: int) -> dict[str, Any]:
    n = a.shape[0]
    eagle = EagleProduct(a, b, None)
    other = TorchProduct(torch, a, b, False) if torch else None
    captured, torched = [], []
    for _ in range(ROUNDS):
        captured.append(eagle.captured(reps))
        if other:
            torched.append(other.seconds(reps * PER_GRAPH))
    eagle.close()
    row: dict[str, Any] = {
        "case": "context: bf16 x bf16 -> bf16 (torch.mm)",
        "shape": f"{n}^3",
        "captured": tflops(n, statistics.median(captured)),
        "eager": None,
        "torch": tflops(n, statistics.median(torched)) if torched else None,
    }
    if torched:
        row["captured_ratio"] = row["captured"] / row["torch"]
    return row


def report(rows: list[dict[str, Any]]) -> None:
    def cell(value: Any) -> str:
        return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else value

    header = ("case", "shape", "captured", "eager", "torch", "captured_ratio", "eager_ratio",
              "error", "torch_error", "target")  # fmt: skip
    print("TFLOP/s (ratios: eagle / torch)")
    print_table([header] + [tuple(cell(r.get(key)) for key in header) for r in rows])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
