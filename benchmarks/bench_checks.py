"""The cost of hawk's run-time checks (hawk.emit.checks): each kernel with and without them.

Device (CUDA events, median of 20 after a warm-up; target: checked within 3% of
unchecked): ``y = a*x + y`` over 1e8 float32 lanes (no table access, so no check),
the seed's contraction loop ``y[s*U+u] = sum_r w.at(row=r, unit=u) * f.at(row=r,
sample=s)`` at R, U, B = 256, 256, 4096 (the loop's own kernel, not the GEMM route;
one check, on ``sample``), and a gather ``y = t.at(int(i))`` over 1e8 lanes, whose
index comes from the data (a check per lane). The checked side runs as plans run it
(``plan.bind(...).launch()``); the unchecked side is the same kernel emitted with
``checks=False``, launched with the same grid. Host: the numpy programs, checked and
not, at smaller sizes (median wall-clock).

    python benchmarks/bench_checks.py results.json    (eagle installed, or PYTHONPATH=.)
"""

# ruff: noqa: F841 - kernels assign to their output planes

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from _kernels import contract
from _timing import device_ms, host_ms

import eagle.cuda
import eagle.plan
import hawk
from eagle import arrays, cuda
from eagle.cuda.module import PackedArgs
from eagle.plan._cuda_backend import BLOCK_SIZE
from eagle.plan._cuda_backend import grid as _grid
from hawk.emit import cuda as emit_cuda
from hawk.emit import host as emit_host

REPEAT = 20
TARGET = 0.03


@hawk.kernel
def axpy(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + y


@hawk.kernel
def gather(t: hawk.Table, i: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = t.at(int(i))


def _cases(rng: np.random.Generator, lanes: int, shape: tuple[int, int, int]) -> list[Any]:
    """(name, kernel, planes as float32 numpy arrays, reference of y or None)."""
    r, u, b = shape
    x, y = rng.standard_normal(lanes, np.float32), rng.standard_normal(lanes, np.float32)
    w, f = rng.standard_normal((r, u), np.float32), rng.standard_normal((r, b), np.float32)
    table = rng.standard_normal(4096, np.float32)
    index = rng.integers(0, table.size, lanes).astype(np.float32)
    return [
        (f"axpy, {lanes:.0e} lanes", axpy, {"a": np.float32(1.5), "x": x, "y": y}, None),
        (
            f"contraction loop, R,U,B = {r},{u},{b}",
            contract(r, u, b),
            {"w": w, "f": f, "y": np.zeros(b * u, np.float32)},
            (f.T.astype(np.float64) @ w.astype(np.float64)).reshape(-1),
        ),
        (
            f"gather t.at(int(i)), {lanes:.0e} lanes",
            gather,
            {"t": table, "i": index, "y": np.zeros(lanes, np.float32)},
            table[index.astype(np.int64)].astype(np.float64),
        ),
    ]


def _unchecked_launch(
    kernel: hawk.Kernel, planes: dict[str, Any], lanes: int
) -> Callable[[], None]:
    emitted = emit_cuda.emit(kernel.ir, {p.name: "float32" for p in kernel.planes}, checks=False)
    loaded = cuda.load_kernel(emitted.source, emitted.name)
    lengths = [np.int64(planes[name].shape[0]) for name in emitted.lengths]
    record = arrays.zeros((8,), "int64", "cuda:0")  # no checks: never written
    args = PackedArgs([*(planes[p.name] for p in kernel.planes), np.int64(lanes), *lengths, record])
    grid, stream = _grid(lanes), cuda.current_stream()
    return lambda: loaded.launch(grid, BLOCK_SIZE, args, stream)


def _device_rows(rng: np.random.Generator) -> list[dict[str, Any]]:
    rows = []
    stream = cuda.current_stream()
    for name, kernel, values, reference in _cases(rng, 100_000_000, (256, 256, 4096)):
        planes = {
            key: float(v) if np.ndim(v) == 0 else arrays.asarray(v, device="cuda:0")
            for key, v in values.items()
        }
        lanes = int(values["y"].shape[0])
        bound = eagle.plan.auto(kernel).bind(**planes)
        assert bound.route == "loop"
        checked = device_ms(bound.launch, stream, REPEAT)
        device_planes = {
            k: v if not isinstance(v, float) else arrays.full((1,), v, "float32", "cuda:0")
            for k, v in planes.items()
        }
        unchecked = device_ms(_unchecked_launch(kernel, device_planes, lanes), stream, REPEAT)
        error = None
        if reference is not None:
            bound.launch()
            out = planes["y"].numpy().astype(np.float64)
            error = float(np.linalg.norm(out - reference) / np.linalg.norm(reference))
        rows.append(_row("device", name, checked, unchecked, error))
    return rows


def _host_rows(rng: np.random.Generator) -> list[dict[str, Any]]:
    rows = []
    for name, kernel, values, _ in _cases(rng, 1_000_000, (64, 64, 256)):
        dtypes = {p.name: "float32" for p in kernel.planes}
        args = [np.atleast_1d(values[p.name]) for p in kernel.planes]
        lanes = int(values["y"].shape[0])
        timings = []
        for checks in (True, False):
            program = emit_host.emit(kernel.ir, dtypes, checks=checks)
            timings.append(host_ms(lambda p=program, a=args, n=lanes: p.function(*a, n), REPEAT))
        rows.append(_row("host", name, *timings, None))
    return rows


def _row(
    side: str, name: str, checked: float, unchecked: float, error: float | None
) -> dict[str, Any]:
    return {
        "side": side,
        "kernel": name,
        "checked_ms": checked,
        "unchecked_ms": unchecked,
        "overhead": checked / unchecked - 1.0,
        "rel_error": error,
    }


def main(out_path: str | None) -> None:
    rng = np.random.default_rng()
    rows = _host_rows(rng)
    if eagle.cuda.is_available():
        rows += _device_rows(rng)
    print(f"{'side':6s} {'kernel':42s} {'checked ms':>11s} {'unchecked ms':>13s} {'overhead':>9s}")
    for row in rows:
        flag = "" if row["side"] == "host" or row["overhead"] <= TARGET else "  (over 3%)"
        print(
            f"{row['side']:6s} {row['kernel']:42s} {row['checked_ms']:11.3f} "
            f"{row['unchecked_ms']:13.3f} {row['overhead']:+8.1%}{flag}"
        )
    if out_path:
        with open(out_path, "w") as handle:
            json.dump({"target": TARGET, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
