"""Side-by-side timings of eagle.gemm on a GPU, against torch (TF32 off), CuPy and numpy.

    python benchmarks/bench_gemm.py [results.json]    # with eagle importable


(a) a captured float32 product vs ``torch.mm`` at 1024, 4096 and 8192 (target >= 0.98
    of torch's throughput);
(b) a chain of 200 small (64^3) products replayed from one graph vs torch's CUDA graph of
    the same chain (target <= 1.05x torch's time per product);
(c) the host cost of an eager ``matmul_step(...).run(bufs, "device")`` vs ``torch.mm``
    (target: no slower than torch);
(d) the host ``matmul_step`` vs ``numpy.matmul`` (target >= 0.9x numpy's speed);
(e) TF32 throughput at 8192 (eagle ``handle.gemm`` with ``math="tf32"`` params vs torch
    with TF32 allowed; target >= 0.95);
(f) captured bfloat16 and float16 products (``handle.gemm``, float32 sums) at 4096 and
    8192 vs ``torch.mm`` in the same dtype (target >= 0.95), with the fraction of the
    H200's 989 TFLOP/s dense 16-bit limit;
(g) a captured float64 product at 4096 vs ``torch.mm`` in float64 (target >= 0.95);
(h) the host cost per call at 64^3 of ``handle.sgemm(params, operands)`` (params made
    once) vs the raw ``nvmath.bindings.cublas.sgemm`` call vs ``torch.mm(out=)`` (target:
    within 1.5 us of the raw call).

Next to (e)-(g), the ``error`` column is ||out - ref|| / ||ref|| of eagle's product
against a float64 host reference of the same rounded factors at 4096^3 (torch's in
``torch_error``). Data is random (16-bit products run faster on zeros).

Device times come from CUDA events around many back-to-back launches after a warm-up,
host times from ``time.perf_counter``; every figure is the median of five runs (for
(e)-(g), the median of three turns of eagle then torch, each the median of five runs, so
that the GPU's clock and power state drift over both sides), and every side gets the same
shapes and data. torch and CuPy are optional: a missing one's side is
skipped with a note. The table is printed; with a path, the figures are also written
there as JSON.
"""

from __future__ import annotations

import importlib
import statistics
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
from _report import print_table, write_record

from eagle import arrays, cuda
from eagle.cuda._runtime import cudart
from eagle.gemm import (
    CublasCaptureHandle,
    gemm_params_for_arrays,
    matmul_step,
    sgemm_params_for_arrays,
)

TRIALS = 5
ROUNDS = 3  # turns of eagle then torch for the (e)-(g) rows, each of TRIALS timings
PER_GRAPH = 10  # products recorded in one graph for (a) and (e), so launches are back to back
GRAPH_REPLAYS = {1024: 20, 4096: 3, 8192: 1}  # graph launches per timed batch, by size
CHAIN = 200
PEAK_16 = 989.0  # TFLOP/s: the H200's dense bfloat16/float16 tensor-core limit
TORCH_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32",
                "float64": "float64"}  # fmt: skip


def optional(name: str) -> ModuleType | None:
    """The module, or None (with a printed note) when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        print(f"note: {name} is not installed; its side is skipped")
        return None


def device_seconds(enqueue: Callable[[], Any], stream_ptr: int, reps: int) -> float:
    """Median seconds per ``enqueue()`` on ``stream_ptr``, from CUDA events."""
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


Side = tuple[Callable[[], Any], Callable[[], Any]]  # run once; wait for what runs queued


def host_seconds(sides: dict[str, Side], reps: int) -> dict[str, float]:
    """Median wall seconds per run of each side, their trials interleaved so drift hits all."""
    for run, wait in sides.values():
        run()
        wait()
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(TRIALS):
        for name, (run, wait) in sides.items():
            began = time.perf_counter()
            for _ in range(reps):
                run()
            wait()
            samples[name].append((time.perf_counter() - began) / reps)
    return {name: statistics.median(values) for name, values in samples.items()}


def tflops(n: int, seconds: float) -> float:
    return 2 * n**3 / seconds / 1e12


# --- the eagle sides -------------------------------------------------------------------------


def replayed_seconds(
    stream: cuda.Stream, enqueue: Callable[[int], Any], count: int, reps: int
) -> float:
    """Seconds per product of a graph of ``enqueue(0)`` .. ``enqueue(count - 1)`` captured
    on ``stream``, replayed."""
    with cuda.capture(stream) as cap:
        for step in range(count):
            enqueue(step)
    graph = cuda.Graph.from_captured(cap.captured)
    seconds = device_seconds(graph.launcher().stream(stream).launch, stream.ptr(), reps)
    graph.destroy()
    return seconds / count


def eagle_captured(a: np.ndarray, b: np.ndarray, math: str, reps: int) -> float:
    """Seconds per product of a graph of PER_GRAPH captured products, replayed."""
    stream = cuda.Stream(non_blocking=True)
    operands = {
        "a": arrays.asarray(a, device="cuda:0"),
        "b": arrays.asarray(b, device="cuda:0"),
        "out": arrays.empty((a.shape[0], b.shape[1]), "float32", "cuda:0"),
    }
    handle = CublasCaptureHandle(stream, math=math)
    params = sgemm_params_for_arrays(operands["a"], operands["b"], operands["out"])
    handle.warm(params, operands)
    seconds = replayed_seconds(stream, lambda _: handle.sgemm(params, operands), PER_GRAPH, reps)
    handle.destroy()
    return seconds


def device_array(values: np.ndarray) -> arrays.Array:
    """``values`` on cuda:0; 16-bit values travel as their bits (uint16)."""
    values = np.ascontiguousarray(values)
    if values.itemsize != 2:
        return arrays.asarray(values, device="cuda:0")
    bits = arrays.asarray(values.view(np.uint16), device="cuda:0")
    return arrays.Array(
        ptr=bits.ptr, shape=bits.shape, dtype=values.dtype, strides=bits.strides,
        device_index=0, owner=bits,
    )  # fmt: skip


def eagle_gemm(
    a: np.ndarray, b: np.ndarray, math: str | None, reps: int
) -> tuple[float, np.ndarray]:
    """Seconds per product of PER_GRAPH captured ``handle.gemm`` products, and the result."""
    stream = cuda.Stream(non_blocking=True)
    operands = {"a": device_array(a), "b": device_array(b),
                "out": device_array(np.empty((a.shape[0], b.shape[1]), a.dtype))}  # fmt: skip
    handle = CublasCaptureHandle(stream)
    params = gemm_params_for_arrays(*operands.values(), math=math)
    handle.warm(params, operands)
    seconds = replayed_seconds(stream, lambda _: handle.gemm(params, operands), PER_GRAPH, reps)
    handle.destroy()
    return seconds, operands["out"].numpy()


def eagle_sgemm_call(x: np.ndarray, w: np.ndarray) -> Side:
    """``handle.sgemm(params, operands)`` with params made once."""
    stream = cuda.Stream(non_blocking=True)
    operands = {"a": device_array(x), "b": device_array(w),
                "out": device_array(np.empty((x.shape[0], w.shape[1]), x.dtype))}  # fmt: skip
    handle = CublasCaptureHandle(stream)
    params = sgemm_params_for_arrays(*operands.values())
    handle.warm(params, operands)
    return (lambda: handle.sgemm(params, operands)), stream.synchronize


def raw_sgemm_call(x: np.ndarray, w: np.ndarray) -> Side:
    """The raw ``nvmath.bindings.cublas.sgemm`` call of the same product, on a raw handle."""
    from nvmath.bindings import cublas  # type: ignore[import-untyped]

    stream = cuda.Stream(non_blocking=True)
    a, b = device_array(x), device_array(w)
    out = device_array(np.empty((x.shape[0], w.shape[1]), x.dtype))
    raw = cublas.create()
    cublas.set_stream(raw, stream.ptr())
    scalars = np.array([1.0, 0.0], np.float32)
    alpha, beta = scalars.ctypes.data, scalars.ctypes.data + 4
    m, n, k = w.shape[1], x.shape[0], x.shape[1]
    first, second, target = b.ptr, a.ptr, out.ptr
    held = (a, b, out, scalars)  # the memory the pointers address lives as long as run

    def run(_held: tuple[Any, ...] = held) -> None:
        cublas.sgemm(raw, 0, 0, m, n, k, alpha, first, m, second, k, beta, target, m)

    return run, stream.synchronize


def torch_device(torch: ModuleType, values: np.ndarray) -> Any:
    """The same values as a torch CUDA tensor (16-bit rounded by torch from float32, to
    nearest even as ml_dtypes does)."""
    dtype = getattr(torch, TORCH_DTYPES[values.dtype.name])
    if values.itemsize == 2:
        return torch.from_numpy(values.astype(np.float32)).cuda().to(dtype)
    return torch.from_numpy(values).cuda()


def torch_typed(
    torch: ModuleType, a: np.ndarray, b: np.ndarray, tf32: bool, reps: int
) -> tuple[float, np.ndarray]:
    """Seconds per ``torch.mm`` in the factors' dtype, and its result (as float64)."""
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    ta, tb = torch_device(torch, a), torch_device(torch, b)
    out = torch.empty((a.shape[0], b.shape[1]), dtype=ta.dtype, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        seconds = device_seconds(lambda: torch.mm(ta, tb, out=out), stream.cuda_stream, reps)
    torch.set_float32_matmul_precision("highest")
    return seconds, out.double().cpu().numpy()


def error(result: np.ndarray, reference: np.ndarray) -> float:
    result = np.asarray(result, dtype=np.float64)
    return float(np.linalg.norm(result - reference) / np.linalg.norm(reference))


def eagle_chain(x: np.ndarray, w: np.ndarray, reps: int) -> float:
    """Seconds per product of CHAIN dependent products replayed from one graph."""
    stream = cuda.Stream(non_blocking=True)
    ping, pong = (arrays.asarray(x, device="cuda:0") for _ in range(2))
    weight = arrays.asarray(w, device="cuda:0")
    handle = CublasCaptureHandle(stream)
    params = sgemm_params_for_arrays(ping, weight, pong)  # the same layout both ways
    handle.warm(params, {"a": ping, "b": weight, "out": pong})

    def product(step: int) -> None:
        source, target = (ping, pong) if step % 2 == 0 else (pong, ping)
        handle.sgemm(params, {"a": source, "b": weight, "out": target})

    seconds = replayed_seconds(stream, product, CHAIN, reps)
    handle.destroy()
    return seconds


def eagle_eager(a: np.ndarray, b: np.ndarray) -> Side:
    """An eager ``matmul_step(...).run(bufs, "device")`` on eagle's current stream."""
    bufs = {
        "a": arrays.asarray(a, device="cuda:0"),
        "b": arrays.asarray(b, device="cuda:0"),
        "out": arrays.empty((a.shape[0], b.shape[1]), "float32", "cuda:0"),
    }
    step = matmul_step("out", a="a", b="b", out="out")
    return (lambda: step.run(bufs, "device")), cuda.current_stream().synchronize


def eagle_host(a: np.ndarray, b: np.ndarray, transpose_a: bool) -> Side:
    """A host ``matmul_step``, with ``a`` read transposed when ``transpose_a``."""
    out = np.empty((a.shape[1] if transpose_a else a.shape[0], b.shape[1]), a.dtype)
    step = matmul_step("out", a="a", b="b", out="out", transpose_a=transpose_a)
    bufs = {"a": a, "b": b, "out": out}
    return (lambda: step.run(bufs, "host")), _no_wait


def _no_wait() -> None:
    return None


# --- the other sides ---------------------------------------------------------------------------


def torch_mm(torch: ModuleType, a: np.ndarray, b: np.ndarray, tf32: bool, reps: int) -> float:
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    out = torch.empty((a.shape[0], b.shape[1]), dtype=torch.float32, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        seconds = device_seconds(lambda: torch.mm(ta, tb, out=out), stream.cuda_stream, reps)
    torch.set_float32_matmul_precision("highest")
    return seconds


def torch_chain(torch: ModuleType, x: np.ndarray, w: np.ndarray, reps: int) -> float:
    torch.set_float32_matmul_precision("highest")
    ping, pong, weight = (torch.from_numpy(v).cuda() for v in (x, x, w))

    def chain() -> None:
        for step in range(CHAIN):
            source, target = (ping, pong) if step % 2 == 0 else (pong, ping)
            torch.mm(source, weight, out=target)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chain()  # torch's recipe: warm up on a side stream before capturing
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    replay = torch.cuda.Stream()
    with torch.cuda.stream(replay):
        seconds = device_seconds(graph.replay, replay.cuda_stream, reps)
    return seconds / CHAIN


def torch_eager(torch: ModuleType, a: np.ndarray, b: np.ndarray) -> Side:
    torch.set_float32_matmul_precision("highest")
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    out = torch.empty((a.shape[0], b.shape[1]), dtype=torch.float32, device="cuda")
    return (lambda: torch.mm(ta, tb, out=out)), torch.cuda.synchronize


def numpy_matmul(a: np.ndarray, b: np.ndarray) -> Side:
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    return (lambda: np.matmul(a, b, out=out)), _no_wait


def cupy_matmul(cupy: ModuleType, a: np.ndarray, b: np.ndarray, reps: int) -> float:
    ca, cb = cupy.asarray(a), cupy.asarray(b)
    out = cupy.empty((a.shape[0], b.shape[1]), dtype=cupy.float32)
    with cupy.cuda.Stream(non_blocking=True) as stream:
        return device_seconds(lambda: cupy.matmul(ca, cb, out=out), stream.ptr, reps)


# --- the run -----------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(__doc__)
        return 2
    if not cuda.is_available():
        print("bench_gemm needs a CUDA device; none is usable here")
        return 1
    torch, cupy = optional("torch"), optional("cupy")
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []

    def row(case: str, shape: str, unit: str, figures: dict[str, float | None], **verdict: Any):
        rows.append({"case": case, "shape": shape, "unit": unit, **figures, **verdict})

    for n in (1024, 4096, 8192):
        a, b = (rng.standard_normal((n, n), np.float32) for _ in range(2))
        reps = GRAPH_REPLAYS[n]
        eagle = tflops(n, eagle_captured(a, b, "fp32", reps))
        other = tflops(n, torch_mm(torch, a, b, False, reps * PER_GRAPH)) if torch else None
        cp = tflops(n, cupy_matmul(cupy, a, b, reps * PER_GRAPH)) if cupy else None
        row("(a) captured sgemm vs torch.mm", f"{n}^3 float32", "TFLOP/s",
            {"eagle": eagle, "torch": other, "cupy": cp},
            ratio=eagle / other if other else None, target=">= 0.98")  # fmt: skip

    x = rng.standard_normal((64, 64), np.float32)
    w = rng.standard_normal((64, 64), np.float32) / 8  # keeps the chain's values bounded
    eagle = eagle_chain(x, w, 20) * 1e6
    other = torch_chain(torch, x, w, 20) * 1e6 if torch else None
    row("(b) chain of 200 products in one graph", "64^3 float32", "us/product",
        {"eagle": eagle, "torch": other, "cupy": None},
        ratio=eagle / other if other else None, target="<= 1.05")  # fmt: skip

    sides = {"eagle": eagle_eager(x, w)}
    if torch:
        sides["torch"] = torch_eager(torch, x, w)
    times = {name: seconds * 1e6 for name, seconds in host_seconds(sides, 2000).items()}
    row("(c) eager product, host cost", "64^3 float32", "us/call",
        {"eagle": times["eagle"], "torch": times.get("torch"), "cupy": None},
        ratio=times["eagle"] / times["torch"] if torch else None, target="<= 1.0")  # fmt: skip

    sides = {"eagle": eagle_sgemm_call(x, w), "raw": raw_sgemm_call(x, w)}
    if torch:
        sides["torch"] = torch_eager(torch, x, w)
    times = {name: seconds * 1e6 for name, seconds in host_seconds(sides, 2000).items()}
    row("(h) handle.sgemm, host cost", "64^3 float32", "us/call",
        {"eagle": times["eagle"], "torch": times.get("torch"), "cupy": None,
         "raw": times["raw"]},
        ratio=times["eagle"] - times["raw"], target="eagle - raw <= 1.5 us")  # fmt: skip

    for n, dtype, transpose_a in ((256, np.float64, False), (1024, np.float64, False),
                                  (1024, np.float32, False), (1024, np.float32, True)):  # fmt: skip
        a, b = rng.standard_normal((n, n)).astype(dtype), rng.standard_normal((n, n)).astype(dtype)
        sides = {
            "eagle": eagle_host(a, b, transpose_a),
            "numpy": numpy_matmul(a.T if transpose_a else a, b),
        }
        times = host_seconds(sides, 200 if n == 256 else 10)
        row("(d) host matmul_step vs numpy.matmul",
            f"{n}^3 {np.dtype(dtype).name}{' a.T' if transpose_a else ''}", "GFLOP/s",
            {"eagle": 2 * n**3 / times["eagle"] / 1e9, "torch": None, "cupy": None,
             "numpy": 2 * n**3 / times["numpy"] / 1e9},
            ratio=times["numpy"] / times["eagle"], target=">= 0.9")  # fmt: skip

    cases = [("(e) TF32 captured gemm vs torch.mm (TF32)", np.float32, "tf32", (4096, 8192)),
             ("(f) captured bfloat16 gemm vs torch.mm", ml_dtypes.bfloat16, None, (4096, 8192)),
             ("(f) captured float16 gemm vs torch.mm", np.float16, None, (4096, 8192)),
             ("(g) captured float64 gemm vs torch.mm", np.float64, None, (4096,))]  # fmt: skip
    for case, dtype, math, sizes in cases:
        for n in sizes:
            a, b = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
            reps = 1 if n == 8192 or dtype == np.float64 else 3
            eagle_runs, torch_runs, torch_result = [], [], None
            for _ in range(ROUNDS):  # the sides take turns, so clock and power drift hit both
                seconds, result = eagle_gemm(a, b, math, reps)
                eagle_runs.append(seconds)
                if torch:
                    other, torch_result = torch_typed(torch, a, b, math == "tf32", reps * PER_GRAPH)
                    torch_runs.append(other)
            seconds = statistics.median(eagle_runs)
            other = statistics.median(torch_runs) if torch else None
            figures: dict[str, Any] = {"eagle": tflops(n, seconds), "cupy": None,
                                       "torch": tflops(n, other) if other else None}  # fmt: skip
            if n == 4096:
                reference = a.astype(np.float64) @ b.astype(np.float64)
                figures["error"] = error(result, reference)
                figures["torch_error"] = (
                    error(torch_result, reference) if torch_result is not None else None
                )
            if np.dtype(dtype).itemsize == 2:
                figures["of_peak"] = figures["eagle"] / PEAK_16
            row(case, f"{n}^3 {np.dtype(dtype).name}", "TFLOP/s", figures,
                ratio=figures["eagle"] / figures["torch"] if other else None,
                target=">= 0.95")  # fmt: skip

    report(rows)
    if argv:
        write_record(argv[0], {
            "torch": getattr(torch, "__version__", None),
            "cupy": getattr(cupy, "__version__", None),
            "numpy": np.__version__,
            "trials": TRIALS,
            "rows": rows,
        })  # fmt: skip
    return 0


def report(rows: list[dict[str, Any]]) -> None:
    def cell(value: Any) -> str:
        return "-" if value is None else f"{value:.3g}" if isinstance(value, float) else value

    header = ("case", "shape", "unit", "eagle", "torch", "cupy", "numpy", "raw", "of_peak",
              "error", "torch_error", "ratio", "target")  # fmt: skip
    table = [header] + [tuple(cell(r.get(key)) for key in header) for r in rows]
    print_table(table)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
