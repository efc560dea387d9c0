"""Where the cost of a checked table read goes: variants of one gather kernel side by side.

Usage: python benchmarks/probe_gather_checks.py out.json

``bench_checks.py`` measured the gather ``y = t.at(int(i))`` over 10^8 float32 lanes at
+80% with checks (clamped read, first failure kept in registers, recorded after the lane
loop) against the same kernel emitted without them. This probe launches variants of the
checked kernel on the same planes and grid, so one run says which part costs:

* ``unchecked``: ``checks=False``;
* ``emitted``: the checked kernel eagle launches today;
* ``selects``: the first failure kept with selects instead of a branch;
* ``two selects``: only the failing site and lane kept, with selects;
* ``flag``: only whether a read failed kept (one OR; the lane would need a second pass);
* ``fail call``: no failure kept; a failing read calls ``hawk_fail`` at once;
* ``clamp only``: the clamp and select with no failure kept (a lower bound: unsafe);
* ``plain int()``: the emitted kernel with ``hawk_to_int`` a bare cast;
* ``no unroll``: the emitted kernel without ``#pragma unroll 4`` on the lane loop.

Each row: median ms over 20 launches (CUDA events, after a warm-up) and the overhead over
``unchecked``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
from _timing import device_ms

import eagle.cuda
import hawk
from eagle import arrays
from eagle.cuda.module import PackedArgs
from eagle.plan import BLOCK_SIZE, _grid
from hawk.emit import cuda as emit_cuda

LANES = 10**8
TABLE = 4096


@hawk.kernel
def gather(t: hawk.Table, i: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = t.at(int(i))  # noqa: F841 - the kernel assigns to its output plane


_CLAMP_HEAD = "__device__ __forceinline__ long long hawk_clamp("
_SELECTS = """\
__device__ __forceinline__ long long hawk_clamp(
    long long index, long long extent, long long site, long long lane, hawk_failure& first)
{
    const bool in = (unsigned long long)index < (unsigned long long)extent;
    const bool take = !in & (first.site < 0);
    first.site = take ? site : first.site;
    first.lane = take ? lane : first.lane;
    first.value = take ? index : first.value;
    first.extent = take ? extent : first.extent;
    return in ? index : 0LL;
}"""
_TWO_SELECTS = """\
__device__ __forceinline__ long long hawk_clamp(
    long long index, long long extent, long long site, long long lane, hawk_failure& first)
{
    const bool in = (unsigned long long)index < (unsigned long long)extent;
    const bool take = !in & (first.site < 0);
    first.site = take ? site : first.site;
    first.lane = take ? lane : first.lane;
    return in ? index : 0LL;
}"""
_FLAG = """\
__device__ __forceinline__ long long hawk_clamp(
    long long index, long long extent, long long site, long long lane, hawk_failure& first)
{
    const bool in = (unsigned long long)index < (unsigned long long)extent;
    first.value |= (long long)!in;
    return in ? index : 0LL;
}"""
_FAIL_CALL = """\
__device__ __forceinline__ long long hawk_clamp(
    long long index, long long extent, long long site, long long lane, unsigned long long* rec)
{
    const bool in = (unsigned long long)index < (unsigned long long)extent;
    if (__builtin_expect(!in, 0)) hawk_fail(rec, site, lane, index, extent);
    return in ? index : 0LL;
}"""
_CLAMP_ONLY = """\
__device__ __forceinline__ long long hawk_clamp(
    long long index, long long extent, long long site, long long lane, hawk_failure& first)
{
    return (unsigned long long)index < (unsigned long long)extent ? index : 0LL;
}"""
_PLAIN_INT = """\
__device__ __forceinline__ long long hawk_to_int(float x)
{
    return (long long)x;
}"""


def _replace_function(source: str, head: str, body: str) -> str:
    start = source.index(head)
    end = source.index("\n}", start) + 2
    return source[:start] + body + source[end:]


def _variants(checked: str, unchecked: str) -> dict[str, str]:
    return {
        "unchecked": unchecked,
        "emitted": checked,
        "selects": _replace_function(checked, _CLAMP_HEAD, _SELECTS),
        "two selects": _replace_function(checked, _CLAMP_HEAD, _TWO_SELECTS),
        "flag": _replace_function(checked, _CLAMP_HEAD, _FLAG).replace(
            "if (hawk_read_failure.site >= 0)", "if (hawk_read_failure.value != 0)"
        ),
        "fail call": _replace_function(checked, _CLAMP_HEAD, _FAIL_CALL).replace(
            "lane, hawk_read_failure);", "lane, hawk_rec);"
        ),
        "clamp only": _replace_function(checked, _CLAMP_HEAD, _CLAMP_ONLY),
        "plain int()": _replace_function(
            checked, "__device__ __forceinline__ long long hawk_to_int(float x)", _PLAIN_INT
        ),
        "no unroll": checked.replace("#pragma unroll 4\n", "", 1),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    if not eagle.cuda.is_available():
        print("no CUDA device: nothing to probe")
        return 0
    rng = np.random.default_rng(0)
    dtypes = {p.name: "float32" for p in gather.planes}
    checked = emit_cuda.emit(gather.ir, dtypes)
    unchecked = emit_cuda.emit(gather.ir, dtypes, checks=False)
    t = arrays.asarray(rng.standard_normal(TABLE, np.float32), device="cuda:0")
    i = arrays.asarray(rng.integers(0, TABLE, LANES).astype(np.float32), device="cuda:0")
    y = arrays.full((LANES,), np.nan, "float32", "cuda:0")
    record = arrays.zeros((8,), "int64", "cuda:0")
    stream = eagle.cuda.Stream(non_blocking=True)
    args = PackedArgs([t, i, y, np.int64(LANES), np.int64(TABLE), record])
    rows: list[dict[str, Any]] = []
    for name, source in _variants(checked.source, unchecked.source).items():
        kernel = eagle.cuda.load_kernel(source, checked.name)
        ms = device_ms(
            lambda k=kernel: k.launch(_grid(LANES), BLOCK_SIZE, args, stream.ptr()),
            stream.ptr(),
            20,
        )
        rows.append({"variant": name, "ms": ms})
    base = rows[0]["ms"]
    for row in rows:
        row["overhead"] = row["ms"] / base - 1.0
        print(f"{row['variant']:<12} {row['ms']:.3f} ms {100 * row['overhead']:+.1f}%")
    with open(argv[1], "w") as out:
        json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
