# ruff: noqa: F821, F841, UP037 - hawk's axis annotations and output planes confuse these checks
"""What int64 wrapping, the opt-in overflow checks and the 16-bit add rule cost on the
device, one run.

    python benchmarks/bench_ints.py results.json    (eagle importable, needs a GPU)

* **hash**: 10**8 lanes of an int hash (a multiply-add that wraps, three rounds), stored
  as a real: written in unsigned arithmetic (``"wrap"``, the default) against
  ``int_overflow="check"``, and against the same kernel over lanes whose arithmetic is
  proved (``proved``: three multiply-adds of values below 2**20, which never leave
  int64, written as plain signed arithmetic).
* **histogram**: 10**8 float32 samples into 1,024 bins of float32 (the adds' own cost)
  and of bfloat16 (sums in float32 scratch, rounded once by the last block).
* **grid**: 10**7 adds into a 2048 x 2048 table, float32 against bfloat16: the last
  block's pass over 4M elements per launch is what the 16-bit rule adds.

Each figure is the median CUDA-event time of 20 launches of a bound plan, in
milliseconds, after one warm-up.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
from _report import print_table, probe_ready, write_record
from _timing import device_ms

import eagle.plan
import hawk
from eagle import arrays, cuda
from hawk import math as hm

LANES = 10**8
BINS = 1024
ADDS = 10**7
SIDE = 2048
REPEAT = 20


@hawk.kernel
def hashed(y: hawk.Mutable[hawk.Scalar]):
    h = hm.sample_index()
    for _ in range(3):
        h = h * 6364136223846793005 + 1442695040888963407
    y = float(h % 1024)


@hawk.kernel
def proved(y: hawk.Mutable[hawk.Scalar]):
    h = hm.sample_index() % 1048576
    h1 = (h * 2654435761 + 12345) % 1048576
    h2 = (h1 * 2654435761 + 12345) % 1048576
    h3 = (h2 * 2654435761 + 12345) % 1048576
    y = float(h3 % 1024)


@hawk.kernel
def histogram(x: hawk.Scalar, counts: hawk.Mutable[hawk.Table["bin":BINS]]):
    b = int(hm.minimum(hm.maximum(x * float(BINS), 0.0), float(BINS - 1)))
    counts.add(bin=b, value=1.0)


@hawk.kernel
def grid(px: hawk.Scalar, q: hawk.Scalar, g: hawk.Mutable[hawk.Table["row":SIDE, "col":SIDE]]):
    i = int(px)
    g.add(row=i // SIDE, col=i % SIDE, value=q)


def _time(kernel: hawk.Kernel, stream: cuda.Stream, **planes: object) -> float:
    overflow = planes.pop("int_overflow", "wrap")
    with stream:
        bound = eagle.plan.auto(kernel, int_overflow=overflow).bind(**planes)  # type: ignore[arg-type]
    return device_ms(lambda: bound.launch(stream), stream, REPEAT)


def main() -> int:
    status = probe_ready(sys.argv, __doc__)
    if status is not None:
        return status
    stream = cuda.Stream(non_blocking=True)
    rng = np.random.default_rng(7)
    rows = [["case", "variant", "ms"]]
    record: dict[str, float] = {}

    y = arrays.empty(LANES, "float32", "cuda:0")
    for variant, kernel, overflow in (
        ("wrap", hashed, "wrap"),
        ("check", hashed, "check"),
        ("proved", proved, "wrap"),
    ):
        record[f"hash/{variant}"] = _time(kernel, stream, y=y, int_overflow=overflow)

    x = arrays.asarray(rng.random(LANES, np.float32), device="cuda:0")
    for dtype in ("float32", ml_dtypes.bfloat16):
        counts = arrays.asarray(np.zeros(BINS, dtype), device="cuda:0")
        record[f"histogram/{np.dtype(dtype).name}"] = _time(histogram, stream, x=x, counts=counts)

    px = arrays.asarray(rng.integers(0, SIDE * SIDE, ADDS).astype(np.float32), device="cuda:0")
    q = arrays.asarray(rng.standard_normal(ADDS, np.float32), device="cuda:0")
    for dtype in ("float32", ml_dtypes.bfloat16):
        table = arrays.asarray(np.zeros((SIDE, SIDE), dtype), device="cuda:0")
        record[f"grid/{np.dtype(dtype).name}"] = _time(grid, stream, px=px, q=q, g=table)

    for key, ms in record.items():
        case, variant = key.split("/")
        rows.append([case, variant, f"{ms:.3f}"])
    print_table(rows)
    write_record(sys.argv[1], {"median_ms": record})
    return 0


if __name__ == "__main__":
    sys.exit(main())
