"""Why eagle's captured 16-bit product trails ``torch.mm`` at 8192^3: its variants side by side.

Usage: PYTHONPATH=. python benchmarks/probe_gemm_gap.py [out.json]    # torch with CUDA, nvmath

Needs a CUDA device, torch built with CUDA and nvmath-python; without one it says which
and exits 1. About a minute on an H200.

Issue #13 wants captured bfloat16/float16 products >= 0.95x ``torch.mm`` at 4096^3 and
8192^3 and float64 at 4096^3. The H200 run of ``bench_gemm.py`` rows (f)/(g) measured 1.01x /
0.928x (bfloat16), 1.00x / 0.927x (float16) and 0.979x (float64), though both sides call
cuBLAS with the same shapes. This probe runs, in one process, on the same operands (fresh
random data: every side multiplies the same values), for bfloat16 and float16 at 8192^3
and 4096^3 and float64 at 4096^3:

* ``torch eager``: ``torch.mm(a, b, out=c)`` on a torch stream, the reference of ``vs torch``;
* ``torch eager, Lt``: the same under ``preferred_blas_library("cublaslt")``;
* ``torch graph``: the same products captured in a ``torch.cuda.graph``, replayed;
* ``eagle graph``: bench_gemm's (f)/(g) side: operands in eagle's pool (``device_array``), a
  ``CublasCaptureHandle``, ``handle.gemm`` captured in an eagle graph, replayed;
* ``eagle eager``: ``handle.gemm`` on the same handle and stream, with no graph;
* ``eagle graph, torch mem``: the eagle graph over torch's tensors (the allocator's part);
* ``raw ...``: ``nvmath.bindings.cublas.gemm_ex`` (``dgemm`` for float64) on a handle of the
  probe's own, on torch's tensors. ``raw as eagle`` makes eagle's call (``COMPUTE_32F``,
  ``GemmAlgo.DEFAULT``, a 32 MiB workspace, ``DEFAULT_MATH``, operands swapped: C^T = B^T
  A^T); each other ``raw`` row changes one of those: ``TENSOR_OP`` algo, compute type
  (``FAST_16F``/``FAST_16BF``, or the legacy ``CUDA_R_32F`` that torch passes), workspace
  0 or 64 MiB, ``DISALLOW_REDUCED_PRECISION_REDUCTION``, ``unswapped`` (C = A B with both
  operands transposed, written column-major), or ``eagle mem`` (eagle's operands);
  ``raw as torch`` makes torch's call (legacy compute type, ``DEFAULT_TENSOR_OP``, the math
  mode torch's flags give set around each call).

Timing: every side enqueues a few products per launch (4 at 8192^3, 16 at 4096^3, 2 for
float64) on its stream (torch's, eagle's, or the raw handles'); ``_timing.device_ms``
times 3 launches with CUDA events after one warm-up launch; the sides take 9 turns, each
starting at the next side, after a second of warm-up products, so the clock and power
drift over all of them. A row's TFLOP/s is the median over the turns, ``spread`` the range
of the turns over that median. Each side's result is checked once against ``torch
eager``'s (``error``: relative Frobenius norm; a wrong call cannot look fast: such a row
says ``WRONG``). A cuBLAS refusal (a compute type the dtype has not, say) is printed in
place of the row's figures.

Then ``torch.profiler`` (CUDA activity) records two launches of every side: ``kern TFLOP/s``
is the product rate of the kernels alone (no gaps between them), ``kernels`` says whether
the side ran the same kernel names as ``torch eager``, and the list after the table names
each side's kernels with their count and mean duration. The GPU's clock, power and
temperature (``nvidia-smi``) are printed at the start and after each shape's timings.

What to read: if ``eagle graph`` and ``raw as eagle`` run torch's kernel at torch's kernel
rate, the gap is not cuBLAS's choice (look at ``spread`` and the clocks); if their kernel
differs, the ``raw`` row that gets torch's kernel names the setting to change in
``eagle/gemm/capture.py``; ``eagle graph, torch mem`` against ``eagle graph`` isolates the
operands' memory. With a path, the rows, kernels, clocks and library versions are also
written there as JSON.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
from _report import print_table, write_record
from _timing import device_ms
from bench_gemm import device_array

from eagle import arrays, cuda
from eagle.cuda._runtime import cudart, runtime
from eagle.gemm import CublasCaptureHandle, gemm_params_for_arrays

CASES = (("bfloat16", 8192), ("float16", 8192), ("bfloat16", 4096), ("float16", 4096),
         ("float64", 4096))  # fmt: skip
PRODUCTS = {8192: 4, 4096: 16}  # products per timed launch, 16-bit (about 5.7 and 2.9 ms)
PRODUCTS_64 = 2  # float64 4096^3 (about 2 ms a product)
TURNS = 9
REPEAT = 3  # timed launches per side per turn (after one warm-up launch)
WARM_UP_S = 1.0  # seconds of torch products before each shape's turns
PROFILED_LAUNCHES = 2
PROFILE_BUDGET_S = 40.0  # profiling stops here (the sides left say so), the 8192^3 ones done
WORKSPACE = 32 * 1024 * 1024  # eagle's (eagle.gemm.capture.WORKSPACE_BYTES) and torch's on Hopper
MIB = 1024 * 1024
TOLERANCE = {"bfloat16": 1e-2, "float16": 1e-2, "float64": 1e-10}  # error above: WRONG
NUMPY_DTYPES = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16),
                "float64": np.dtype(np.float64)}  # fmt: skip
DATA_TYPES = {"float16": 2, "bfloat16": 14, "float32": 0, "float64": 1}  # cudaDataType_t
LEGACY_32F = 0  # CUDA_R_32F passed as the compute type, as torch does
SMI_FIELDS = "clocks.sm,clocks.mem,power.draw,temperature.gpu"


@dataclasses.dataclass
class Side:
    """One way of computing ``c = a @ b``, ready to launch ``products`` products."""

    name: str
    stream: int  # the raw stream its launches go to
    launch: Callable[[], Any]
    result: Callable[[], Any]  # its product as a torch tensor laid out as torch's
    products: int
    keep: tuple[Any, ...] = ()  # what its pointers address
    refused: str | None = None
    error: float | None = None
    samples: list[float] = dataclasses.field(default_factory=list)  # ms per product, per turn
    kernels: list[dict[str, Any]] | None = None
    profile_error: str | None = None


@dataclasses.dataclass
class Case:
    dtype: str
    n: int
    sides: list[Side]
    closers: list[Callable[[], Any]]  # graphs before the handles they used
    smi_after: str | None = None


@dataclasses.dataclass(frozen=True)
class Raw:
    """A raw cuBLAS call's settings; the defaults are eagle's."""

    name: str
    compute: int | None = None  # None: eagle's (COMPUTE_32F; dgemm for float64)
    algo: int | None = None  # None: GemmAlgo.DEFAULT
    workspace: int = WORKSPACE
    math: int = 0  # DEFAULT_MATH
    swapped: bool = True  # C^T = B^T A^T, as eagle and torch map row-major products
    torch_math: bool = False  # set the math mode before each call and reset it after
    eagle_memory: bool = False


def raw_variants(cublas: ModuleType, torch: ModuleType, dtype: str) -> list[Raw]:
    """The raw calls of one dtype: eagle's, torch's, and one setting changed at a time."""
    algo = cublas.GemmAlgo
    math = cublas.Math
    compute = cublas.ComputeType
    if dtype == "float64":
        return [
            Raw("raw as eagle (dgemm)"),
            Raw("raw eagle mem", eagle_memory=True),
            Raw("raw gemm_ex 64F", compute=int(compute.COMPUTE_64F)),
            Raw(
                "raw gemm_ex 64F TENSOR_OP",
                compute=int(compute.COMPUTE_64F),
                algo=int(algo.DEFAULT_TENSOR_OP),
            ),
            Raw("raw workspace 0", workspace=0),
            Raw("raw workspace 64M", workspace=64 * MIB),
            Raw("raw unswapped", swapped=False),
        ]
    flag = f"allow_{'bf16' if dtype == 'bfloat16' else 'fp16'}_reduced_precision_reduction"
    try:
        reduced = bool(getattr(torch.backends.cuda.matmul, flag))
    except Exception:
        reduced = True
    disallow = int(math.DISALLOW_REDUCED_PRECISION_REDUCTION)
    fast = "COMPUTE_32F_FAST_16BF" if dtype == "bfloat16" else "COMPUTE_32F_FAST_16F"
    return [
        Raw("raw as eagle"),
        Raw("raw eagle mem", eagle_memory=True),
        Raw(
            "raw as torch",
            compute=LEGACY_32F,
            algo=int(algo.DEFAULT_TENSOR_OP),
            math=0 if reduced else disallow,
            torch_math=True,
        ),
        Raw("raw algo TENSOR_OP", algo=int(algo.DEFAULT_TENSOR_OP)),
        Raw("raw compute legacy 32F", compute=LEGACY_32F),
        Raw(f"raw compute {fast[8:]}", compute=int(getattr(compute, fast))),
        Raw("raw workspace 0", workspace=0),
        Raw("raw workspace 64M", workspace=64 * MIB),
        Raw("raw DISALLOW_REDUCED", math=disallow),
        Raw("raw unswapped", swapped=False),
    ]


# --- the sides ---------------------------------------------------------------------------------


def torch_sides(torch: ModuleType, ta: Any, tb: Any, products: int) -> tuple[list[Side], Any]:
    """torch eager (the reference), eager preferring cuBLASLt, and a torch CUDA graph;
    and the graph, to be dropped before the handles."""
    stream = torch.cuda.Stream()
    out, out_lt, out_graph = (torch.empty_like(ta) for _ in range(3))

    def eager() -> None:
        with torch.cuda.stream(stream):
            for _ in range(products):
                torch.mm(ta, tb, out=out)

    def eager_lt() -> None:
        before = torch.backends.cuda.preferred_blas_library()
        torch.backends.cuda.preferred_blas_library("cublaslt")
        try:
            with torch.cuda.stream(stream):
                for _ in range(products):
                    torch.mm(ta, tb, out=out_lt)
        finally:
            torch.backends.cuda.preferred_blas_library(before)

    capture = torch.cuda.Stream()
    capture.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture):  # torch's recipe: warm up on the capturing stream
        for _ in range(products):
            torch.mm(ta, tb, out=out_graph)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture):
        for _ in range(products):
            torch.mm(ta, tb, out=out_graph)
    torch.cuda.synchronize()

    def replay() -> None:
        with torch.cuda.stream(capture):
            graph.replay()

    sides = [
        Side("torch eager", stream.cuda_stream, eager, lambda: out, products),
        Side("torch eager, Lt", stream.cuda_stream, eager_lt, lambda: out_lt, products),
        Side("torch graph", capture.cuda_stream, replay, lambda: out_graph, products),
    ]
    return sides, graph


def wrap(tensor: Any, dtype: str) -> arrays.Array:
    """A torch CUDA tensor's memory as an eagle Array of ``dtype`` (no copy)."""
    kind = NUMPY_DTYPES[dtype]
    strides = tuple(stride * kind.itemsize for stride in tensor.stride())
    return arrays.Array(
        ptr=tensor.data_ptr(), shape=tuple(tensor.shape), dtype=kind, strides=strides,
        device_index=tensor.device.index or 0, owner=tensor,
    )  # fmt: skip


def as_torch(torch: ModuleType, array: arrays.Array, like: Any) -> Any:
    """An eagle device array's bytes copied into a new tensor shaped and typed as ``like``."""
    copy = torch.empty_like(like)
    cudart.cudaDeviceSynchronize()
    kind = runtime().cudaMemcpyKind.cudaMemcpyDeviceToDevice
    cudart.cudaMemcpy(copy.data_ptr(), array.ptr, copy.numel() * copy.element_size(), kind)
    cudart.cudaDeviceSynchronize()
    return copy


def eagle_sides(
    torch: ModuleType, host: tuple[np.ndarray, np.ndarray], tensors: tuple[Any, Any],
    dtype: str, products: int,
) -> tuple[list[Side], list[Callable[[], Any]], dict[str, arrays.Array]]:  # fmt: skip
    """bench_gemm's captured product, the same handle called eagerly, and the graph over
    torch's tensors; the closers (graphs, then the handle) and eagle's operands."""
    a, b = host
    ta, tb = tensors
    stream = cuda.Stream(non_blocking=True)
    operands = {"a": device_array(a), "b": device_array(b),
                "out": device_array(np.empty((a.shape[0], b.shape[1]), a.dtype))}  # fmt: skip
    handle = CublasCaptureHandle(stream)
    params = gemm_params_for_arrays(*operands.values())
    handle.warm(params, operands)
    out_torch = torch.empty_like(ta)
    borrowed = {"a": wrap(ta, dtype), "b": wrap(tb, dtype), "out": wrap(out_torch, dtype)}
    borrowed_params = gemm_params_for_arrays(*borrowed.values())
    handle.warm(borrowed_params, borrowed)

    def captured(params: Any, ops: dict[str, arrays.Array]) -> cuda.Graph:
        with cuda.capture(stream) as cap:
            for _ in range(products):
                handle.gemm(params, ops)
        return cuda.Graph.from_captured(cap.captured)

    graph = captured(params, operands)
    borrowed_graph = captured(borrowed_params, borrowed)
    eager_out = device_array(np.empty((a.shape[0], b.shape[1]), a.dtype))
    eager_ops = {"a": operands["a"], "b": operands["b"], "out": eager_out}
    handle.warm(params, eager_ops)

    def eager() -> None:
        for _ in range(products):
            handle.gemm(params, eager_ops)

    ptr = stream.ptr()
    sides = [
        Side("eagle graph", ptr, graph.launcher().stream(stream).launch,
             lambda: as_torch(torch, operands["out"], ta), products, (stream,)),
        Side("eagle eager", ptr, eager, lambda: as_torch(torch, eager_out, ta), products,
             (stream,)),
        Side("eagle graph, torch mem", ptr, borrowed_graph.launcher().stream(stream).launch,
             lambda: out_torch, products, (stream,)),
    ]  # fmt: skip
    return sides, [graph.destroy, borrowed_graph.destroy, handle.destroy], operands


def raw_side(
    cublas: ModuleType, torch: ModuleType, raw: Raw, dtype: str, tensors: tuple[Any, Any],
    eagle_operands: dict[str, arrays.Array], stream: Any, products: int,
) -> tuple[Side, Callable[[], Any]]:  # fmt: skip
    """One raw call on a handle of its own, bound to ``stream``; and its closer."""
    ta, tb = tensors
    n = ta.shape[0]
    out = torch.empty_like(ta)
    out_array = device_array(np.empty((n, n), NUMPY_DTYPES[dtype])) if raw.eagle_memory else None
    if out_array is not None:
        a_ptr, b_ptr, c_ptr = eagle_operands["a"].ptr, eagle_operands["b"].ptr, out_array.ptr
    else:
        a_ptr, b_ptr, c_ptr = ta.data_ptr(), tb.data_ptr(), out.data_ptr()

    def result() -> Any:
        """The product laid out as torch's (an unswapped call writes it column-major)."""
        product = out if out_array is None else as_torch(torch, out_array, ta)
        return product if raw.swapped else product.t()

    scalars = np.array((1.0, 0.0), np.float64 if dtype == "float64" else np.float32)
    alpha, beta = scalars.ctypes.data, scalars.ctypes.data + scalars.itemsize
    workspace = torch.empty(max(raw.workspace, 1), dtype=torch.uint8, device=ta.device)
    handle = cublas.create()
    cublas.set_stream(handle, stream.cuda_stream)  # resets the workspace: set it after
    cublas.set_workspace(handle, workspace.data_ptr() if raw.workspace else 0, raw.workspace)
    cublas.set_pointer_mode(handle, int(cublas.PointerMode.HOST))
    cublas.set_math_mode(handle, raw.math)
    op = int(cublas.Operation.N if raw.swapped else cublas.Operation.T)
    first, second = (b_ptr, a_ptr) if raw.swapped else (a_ptr, b_ptr)
    if dtype == "float64" and raw.compute is None:
        args: tuple[Any, ...] = (handle, op, op, n, n, n, alpha, first, n, second, n, beta,
                                 c_ptr, n)  # fmt: skip
        function = cublas.dgemm
    else:
        kind = DATA_TYPES[dtype]
        compute = int(cublas.ComputeType.COMPUTE_32F) if raw.compute is None else raw.compute
        algo = int(cublas.GemmAlgo.DEFAULT) if raw.algo is None else raw.algo
        args = (handle, op, op, n, n, n, alpha, first, kind, n, second, kind, n, beta, c_ptr,
                kind, n, compute, algo)  # fmt: skip
        function = cublas.gemm_ex
    if raw.torch_math:

        def launch() -> None:
            for _ in range(products):
                cublas.set_math_mode(handle, raw.math)
                function(*args)
                cublas.set_math_mode(handle, 0)

    else:

        def launch() -> None:
            for _ in range(products):
                function(*args)

    kept = (ta, tb, out, out_array, eagle_operands, scalars, workspace, stream)
    side = Side(raw.name, stream.cuda_stream, launch, result, products, kept)
    return side, lambda: cublas.destroy(handle)


def build(torch: ModuleType, cublas: ModuleType, dtype: str, n: int, seed: int) -> Case:
    """Every side of one dtype and shape over the same fresh random operands, each run once
    and checked against torch eager's product."""
    kind = getattr(torch, dtype)
    generator = torch.Generator(device="cuda").manual_seed(seed)
    draw = torch.float64 if dtype == "float64" else torch.float32
    ta, tb = (torch.randn((n, n), generator=generator, dtype=draw, device="cuda").to(kind)
              for _ in range(2))  # fmt: skip
    if dtype == "float64":
        host = (ta.cpu().numpy(), tb.cpu().numpy())
    else:  # the same bits on the host, as ml_dtypes / numpy values
        host = tuple(t.view(torch.int16).cpu().numpy().view(NUMPY_DTYPES[dtype]) for t in (ta, tb))
    products = PRODUCTS_64 if dtype == "float64" else PRODUCTS[n]
    sides, torch_graph = torch_sides(torch, ta, tb, products)
    mine, closers, eagle_operands = eagle_sides(torch, host, (ta, tb), dtype, products)
    sides += mine
    raw_stream = torch.cuda.Stream()
    for raw in raw_variants(cublas, torch, dtype):
        try:
            side, closer = raw_side(cublas, torch, raw, dtype, (ta, tb), eagle_operands,
                                    raw_stream, products)  # fmt: skip
        except Exception as exc:  # a handle or workspace that could not be set
            sides.append(Side(raw.name, 0, _nothing, _nothing, products, refused=_why(exc)))
            continue
        sides.append(side)
        closers.append(closer)
    closers.insert(0, torch_graph.reset)
    truth = torch.mm(ta, tb).double()
    scale = float(torch.linalg.norm(truth))
    for side in sides:
        if side.refused is None:
            check(torch, side, truth, scale)
    return Case(dtype, n, sides, closers)


def _nothing() -> None:
    return None


def _why(exc: BaseException) -> str:
    """An exception on one line: its type and message."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def check(torch: ModuleType, side: Side, truth: Any, scale: float) -> None:
    """Run ``side`` once (its warm-up) and keep its error against ``truth`` (torch eager's
    product in float64, whose norm is ``scale``), or why cuBLAS or torch refused it."""
    try:
        torch.cuda.synchronize()
        side.launch()
        torch.cuda.synchronize()
        result = side.result().double()
    except Exception as exc:
        side.refused = _why(exc)
        return
    side.error = float(torch.linalg.norm(result - truth)) / scale


# --- timing and kernels ------------------------------------------------------------------------


def time_case(torch: ModuleType, case: Case) -> None:
    """TURNS turns over the sides that run, each turn starting one side further on."""
    live = [side for side in case.sides if side.refused is None]
    reference = live[0]  # torch eager: the warm-up brings the clocks up
    began = time.perf_counter()
    while time.perf_counter() - began < WARM_UP_S:
        reference.launch()
        torch.cuda.synchronize()
    for turn in range(TURNS):
        start = turn % len(live)
        for side in live[start:] + live[:start]:
            ms = device_ms(side.launch, side.stream, REPEAT)
            side.samples.append(ms / side.products)
    case.smi_after = gpu_state()


def profile_side(torch: ModuleType, side: Side) -> None:
    """The GPU kernels ``PROFILED_LAUNCHES`` launches of ``side`` ran: name, count, mean us."""
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(PROFILED_LAUNCHES):
                side.launch()
            torch.cuda.synchronize()
        totals: dict[str, list[float]] = {}
        for event in prof.events():
            if event.device_type == DeviceType.CUDA:
                entry = totals.setdefault(event.name, [0, 0.0])
                entry[0] += 1
                entry[1] += event.time_range.elapsed_us()
    except Exception as exc:
        side.profile_error = f"profiler failed: {_why(exc)}"
        return
    side.kernels = [
        {"name": name, "count": int(count), "mean_us": total / count, "total_us": total}
        for name, (count, total) in sorted(totals.items(), key=lambda item: -item[1][1])
    ]


def profile_all(torch: ModuleType, cases: list[Case]) -> None:
    """Profile every side that ran, in order, until PROFILE_BUDGET_S seconds are spent or
    the profiler has failed three times in a row."""
    began, failed = time.perf_counter(), 0
    for case in cases:
        for side in case.sides:
            if side.refused is not None:
                continue
            if time.perf_counter() - began > PROFILE_BUDGET_S:
                side.profile_error = f"not profiled: {PROFILE_BUDGET_S:.0f} s of profiling spent"
            elif failed >= 3:
                side.profile_error = "not profiled: the profiler failed three times in a row"
            else:
                profile_side(torch, side)
                failed = failed + 1 if side.profile_error else 0


def gpu_state() -> str | None:
    """``nvidia-smi``'s SM and memory clocks, power and temperature, or None."""
    for fields in (SMI_FIELDS, "clocks.sm,power.draw"):
        try:
            done = subprocess.run(
                ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20, check=False,
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode == 0 and done.stdout.strip():
            return f"{fields}: {done.stdout.strip()}"
    return None


# --- the report ------------------------------------------------------------------------------


def tflops(n: int, ms: float) -> float:
    return 2 * n**3 / (ms * 1e-3) / 1e12


def rows_of(cases: list[Case]) -> list[dict[str, Any]]:
    """One row per side: its median rate, spread, ratio to torch eager, kernels and error."""
    rows = []
    for case in cases:
        torch_ms = _median(case.sides[0].samples)
        torch_kernels = _names(case.sides[0])
        for side in case.sides:
            median = _median(side.samples)
            kernel_ms = _kernel_ms(side)
            names = _names(side)
            rows.append({
                "dtype": case.dtype, "shape": f"{case.n}^3", "side": side.name,
                "tflops": tflops(case.n, median) if median else None,
                "spread": (max(side.samples) - min(side.samples)) / median if median else None,
                "vs_torch": torch_ms / median if median and torch_ms else None,
                "kernel_tflops": tflops(case.n, kernel_ms) if kernel_ms else None,
                "same_kernels": (names == torch_kernels) if names and torch_kernels else None,
                "error": side.error,
                "wrong": side.error is not None and not side.error <= TOLERANCE[case.dtype],
                "refused": side.refused,
                "turn_ms": side.samples,
                "kernels": side.kernels,
                "profile_error": side.profile_error,
            })  # fmt: skip
    return rows


def _median(samples: list[float]) -> float | None:
    return statistics.median(samples) if samples else None


def _names(side: Side) -> frozenset[str] | None:
    return frozenset(k["name"] for k in side.kernels) if side.kernels else None


def _kernel_ms(side: Side) -> float | None:
    """Milliseconds of GPU kernels per product, from the profiled launches."""
    if not side.kernels:
        return None
    return sum(k["total_us"] for k in side.kernels) / 1e3 / (PROFILED_LAUNCHES * side.products)


def report(rows: list[dict[str, Any]]) -> None:
    def cell(value: Any, form: str) -> str:
        return "-" if value is None else format(value, form)

    header = ("dtype", "shape", "side", "TFLOP/s", "spread", "vs torch", "kern TFLOP/s",
              "kernels", "error")  # fmt: skip
    table = [header]
    for row in rows:
        if row["refused"]:
            table.append((row["dtype"], row["shape"], row["side"], "refused", "", "", "", "",
                          row["refused"][:60]))  # fmt: skip
            continue
        same = row["same_kernels"]
        table.append((
            row["dtype"], row["shape"], row["side"], cell(row["tflops"], ".0f"),
            cell(row["spread"], ".1%"), cell(row["vs_torch"], ".3f"),
            cell(row["kernel_tflops"], ".0f"),
            "-" if same is None else "same" if same else "OTHER",
            cell(row["error"], ".1e") + (" WRONG" if row["wrong"] else ""),
        ))  # fmt: skip
    print_table(table)


def report_kernels(rows: list[dict[str, Any]]) -> None:
    """Each side's kernels; a side whose kernels are the previous side's says so."""
    print("\nkernels per side (torch.profiler, "
          f"{PROFILED_LAUNCHES} launches; count, mean us):")  # fmt: skip
    shape = None
    previous: list[tuple[str, int]] | None = None
    for row in rows:
        if (row["dtype"], row["shape"]) != shape:
            shape = (row["dtype"], row["shape"])
            previous = None
            print(f"{row['dtype']} {row['shape']}")
        if row["refused"]:
            print(f"  {row['side']}: refused: {row['refused']}")
            continue
        if row["profile_error"]:
            print(f"  {row['side']}: {row['profile_error']}")
            continue
        kernels = row["kernels"] or []
        listed = [(k["name"], k["count"]) for k in kernels]
        if not kernels:
            print(f"  {row['side']}: no kernels seen")
        elif listed == previous:
            times = ", ".join(f"{k['mean_us']:.1f}" for k in kernels)
            print(f"  {row['side']}: as above ({times} us)")
        else:
            print(f"  {row['side']}:")
            for k in kernels:
                print(f"      {k['count']:>3} x {k['mean_us']:9.1f} us  {k['name']}")
        previous = listed


def libraries(torch: ModuleType, cublas: ModuleType) -> dict[str, Any]:
    """What each side links: torch's build, BLAS preference and flags, nvmath's cuBLAS
    version."""
    info: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    with contextlib.suppress(Exception):
        info["torch_preferred_blas"] = str(torch.backends.cuda.preferred_blas_library())
    for flag in ("allow_bf16_reduced_precision_reduction",
                 "allow_fp16_reduced_precision_reduction"):  # fmt: skip
        with contextlib.suppress(Exception):
            info[flag] = getattr(torch.backends.cuda.matmul, flag)
    size = getattr(torch.backends.cuda, "cublas_workspace_size", None)
    if size is not None:
        with contextlib.suppress(Exception):
            info["torch_cublas_workspace_size"] = size()
    with contextlib.suppress(Exception):
        handle = cublas.create()
        info["nvmath_cublas_version"] = cublas.get_version(handle)
        cublas.destroy(handle)
    return info


def cublas_files() -> list[str] | None:
    """The cuBLAS and cuBLASLt files mapped into this process (torch's and nvmath's)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if line.strip()}
    except OSError:
        return None
    return sorted(path for path in paths if "libcublas" in path)


# --- the run -----------------------------------------------------------------------------------


def requirements() -> tuple[ModuleType, ModuleType] | str:
    """torch (with CUDA) and nvmath's cuBLAS bindings, or why the probe cannot run."""
    if not cuda.is_available():
        return "probe_gemm_gap needs a CUDA device; none is usable here"
    try:
        import torch
    except ImportError:
        return "probe_gemm_gap compares against torch.mm, and torch is not installed"
    if not torch.cuda.is_available():
        return f"probe_gemm_gap needs torch with CUDA; torch {torch.__version__} sees no GPU"
    try:
        from nvmath.bindings import cublas
    except ImportError as exc:
        return f"probe_gemm_gap calls cuBLAS through nvmath-python, which is missing ({exc})"
    return torch, cublas


def main(argv: list[str]) -> int:
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__)
        return 2
    found = requirements()
    if isinstance(found, str):
        print(found)
        return 1
    torch, cublas = found
    started = began = time.perf_counter()
    info = libraries(torch, cublas)
    for key, value in info.items():
        print(f"{key}: {value}")
    smi_start = gpu_state()
    print(f"GPU at start: {smi_start or 'nvidia-smi unavailable'}")
    cases, failures = [], {}
    for seed, (dtype, n) in enumerate(CASES):
        try:  # one shape that breaks leaves the others to run
            case = build(torch, cublas, dtype, n, seed)
            built = time.perf_counter()
            time_case(torch, case)
        except Exception as exc:
            traceback.print_exc()
            failures[f"{dtype} {n}^3"] = _why(exc)
            continue
        print(f"{dtype} {n}^3: built in {built - began:.1f} s, timed in "
              f"{time.perf_counter() - built:.1f} s; GPU after: "
              f"{case.smi_after or 'nvidia-smi unavailable'}")  # fmt: skip
        began = time.perf_counter()
        cases.append(case)
    profile_all(torch, cases)  # after every timing, so the profiler cannot disturb one
    print(f"profiled in {time.perf_counter() - began:.1f} s")
    info["cublas_files"] = cublas_files()  # torch's and nvmath's are both loaded by now
    rows = rows_of(cases)
    print()
    report(rows)
    report_kernels(rows)
    print(f"\ncuBLAS files mapped: {info['cublas_files']}")
    for shape, why in failures.items():
        print(f"{shape} FAILED: {why}")
    print(f"probe took {time.perf_counter() - started:.0f} s")
    if len(argv) == 2:
        write_record(argv[1], {
            **info, "gpu_at_start": smi_start,
            "gpu_after": {f"{c.dtype} {c.n}^3": c.smi_after for c in cases},
            "turns": TURNS, "repeat": REPEAT, "rows": rows, "failures": failures,
        })  # fmt: skip
    for case in cases:
        for close in case.closers:
            with contextlib.suppress(Exception):
                close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
