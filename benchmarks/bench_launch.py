"""Host cost of one kernel launch: raw driver calls vs cuda.core.launch vs eagle.

    python benchmarks/bench_launch.py [results.json]    (eagle installed, or PYTHONPATH=.)

One trivial kernel (one thread adds ``a`` to ``x[0]``), one non-blocking stream, one
block of 32 threads, the same loaded function for every side but cuda.core's:

* raw cuLaunchKernel: ``cuda.bindings.driver.cuLaunchKernel`` with a parameter array
  packed once and the stream as a raw pointer;
* raw cuLaunchKernelEx: ``cuda.bindings.driver.cuLaunchKernelEx`` with a launch
  configuration and parameter array made once (the driver call cuda.core makes);
* cuda.core: ``cuda.core.launch(stream, config, kernel, *args)`` on the same cubin;
* eagle packed: ``Kernel.launch(grid, block, PackedArgs(args), stream)``;
* eagle list: ``Kernel.launch(grid, block, [x, a, n], stream)`` (packed per call);
* a hawk plan (``y = a*x + y`` over 1,000 lanes): ``BoundPlan.launch(stream)``, and
  ``plan.run(a=a, x=x, y=y)`` on the same planes, with ``a`` a one-element Array and
  with ``a`` a number (written into the reused binding before each launch).

Each side runs 1,000 launches to warm up; then each trial runs 20,000 launches back to
back of every side in turn (so a drift of the host's clock speed reaches every side
alike). The host figure is the wall-clock time of a side's launch loop divided by 20,000
(the stream is synchronized outside the loop), the device figure the CUDA-event time of
the same loop divided likewise. Both are medians of five trials; every side runs with
the benchmark's stream as eagle's current stream. Every side's ``x[0]`` (``y[0]`` for the
plans) is checked against the number of launches it made. The table is printed; with a path, the
figures are also written there as JSON.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import eagle.plan
import hawk
from eagle import arrays, cuda
from eagle.cuda.module import PackedArgs, device_arch

LAUNCHES = 20_000
LANES = 1_000
WARMUP = 1_000
TRIALS = 5
BLOCK = 32
NAME = "eagle_bench_tick"
SOURCE = f"""
extern "C" __global__ void {NAME}(float* x, float a, long long n) {{
    if (threadIdx.x == 0 && blockIdx.x == 0 && n > 0) x[0] += a;
}}
"""


@hawk.kernel
def axpy(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + y


def measure(
    launches: dict[str, Callable[[], Any]], stream: cuda.Stream
) -> dict[str, tuple[float, float]]:
    """Median host and device microseconds per launch of each side on ``stream``, the
    sides taking turns within each trial."""
    start, end = cuda.Event(), cuda.Event()
    for launch in launches.values():
        for _ in range(WARMUP):
            launch()
    stream.synchronize()
    host: dict[str, list[float]] = {label: [] for label in launches}
    device: dict[str, list[float]] = {label: [] for label in launches}
    for _ in range(TRIALS):
        for label, launch in launches.items():
            start.record(stream)
            began = time.perf_counter()
            for _ in range(LAUNCHES):
                launch()
            host[label].append(time.perf_counter() - began)
            end.record(stream)
            end.synchronize()
            device[label].append(start.elapsed_ms(end) / 1e3)
    return {
        label: (
            statistics.median(host[label]) / LAUNCHES * 1e6,
            statistics.median(device[label]) / LAUNCHES * 1e6,
        )
        for label in launches
    }


def sides(stream: cuda.Stream) -> dict[str, tuple[Callable[[], Any], Any]]:
    """Each side's launch function and the device array its launches add into."""
    from cuda.bindings import driver
    from cuda.core import Device, LaunchConfig, ObjectCode, launch

    kernel = cuda.load_kernel(SOURCE, NAME)
    a, n = np.float32(1.0), np.int64(1)
    labels = ("raw", "ex", "core", "pk", "ls")
    out = {name: arrays.zeros((1,), "float32", "cuda:0") for name in labels}

    raw_args = PackedArgs([out["raw"], a, n])
    function, stream_ptr = kernel._function, stream.ptr()

    def raw() -> None:
        driver.cuLaunchKernel(function, 1, 1, 1, BLOCK, 1, 1, 0, stream_ptr, raw_args.address, 0)

    ex_args = PackedArgs([out["ex"], a, n])
    ex_config = driver.CUlaunchConfig()
    ex_config.gridDimX = ex_config.gridDimY = ex_config.gridDimZ = 1
    ex_config.blockDimX, ex_config.blockDimY, ex_config.blockDimZ = BLOCK, 1, 1
    ex_config.sharedMemBytes, ex_config.numAttrs = 0, 0
    ex_config.hStream = driver.CUstream(stream_ptr)

    def ex() -> None:
        driver.cuLaunchKernelEx(ex_config, function, ex_args.address, 0)

    Device(0).set_current()
    image = cuda.compile_cuda(SOURCE, name=NAME, arch=device_arch(0))
    core_kernel = ObjectCode.from_cubin(image).get_kernel(NAME)
    core_stream = Device(0).create_stream(stream)
    config = LaunchConfig(grid=1, block=BLOCK)
    core_ptr = np.uint64(out["core"].ptr)

    def core() -> None:
        launch(core_stream, config, core_kernel, core_ptr, a, n)

    packed = PackedArgs([out["pk"], a, n])
    listed = [out["ls"], a, n]
    plan = eagle.plan.auto(axpy)
    x, one = arrays.ones((LANES,), "float32", "cuda:0"), arrays.ones((1,), "float32", "cuda:0")
    ys = {name: arrays.zeros((LANES,), "float32", "cuda:0") for name in ("bound", "run", "num")}
    bound = plan.bind(a=one, x=x, y=ys["bound"])
    return {
        "raw cuLaunchKernel": (raw, out["raw"]),
        "raw cuLaunchKernelEx": (ex, out["ex"]),
        "cuda.core.launch": (core, out["core"]),
        "eagle Kernel.launch, PackedArgs": (
            lambda: kernel.launch(1, BLOCK, packed, stream),
            out["pk"],
        ),
        "eagle Kernel.launch, argument list": (
            lambda: kernel.launch(1, BLOCK, listed, stream),
            out["ls"],
        ),
        "eagle BoundPlan.launch": (lambda: bound.launch(stream), ys["bound"]),
        "eagle plan.run, Param an Array": (
            lambda: plan.run(a=one, x=x, y=ys["run"]),
            ys["run"],
        ),
        "eagle plan.run, Param a number": (
            lambda: plan.run(a=1.0, x=x, y=ys["num"]),
            ys["num"],
        ),
    }


def main(out_path: str | None) -> None:
    stream = cuda.Stream(non_blocking=True)
    with stream:  # plan.run launches on eagle's current stream
        made = sides(stream)
        figures = measure({label: launch for label, (launch, _) in made.items()}, stream)
    stream.synchronize()
    rows = []
    for label, (_, x) in made.items():
        expected = WARMUP + TRIALS * LAUNCHES
        assert float(x.numpy()[0]) == expected, f"{label}: x[0] = {x.numpy()[0]}, not {expected}"
        host_us, device_us = figures[label]
        rows.append({"side": label, "host_us": host_us, "device_us": device_us})
    print(f"one launch of a trivial kernel, median of {TRIALS} x {LAUNCHES} launches")
    print(f"  {'side':36s} {'host µs':>9s} {'device µs':>10s}")
    for row in rows:
        print(f"  {row['side']:36s} {row['host_us']:9.2f} {row['device_us']:10.2f}")
    if out_path:
        with open(out_path, "w") as handle:
            json.dump({"launches": LAUNCHES, "trials": TRIALS, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
