"""Where the cost of a checked table read goes: variants of one gather kernel side by side.

Usage: python benchmarks/probe_gather_checks.py out.json

``bench_checks.py`` measured the gather ``y = t.at(int(i))`` over 10^8 float32 lanes at
+80% with the first failing read kept in registers and recorded after the lane loop, and at
+32% once a failing read called ``hawk_fail`` from its clamp (today's emitter), against the
same kernel emitted without checks. This probe launches variants of the checked kernel on
the same planes and grid, so one run says which part costs:

* ``unchecked``: ``checks=False``;
* ``emitted``: the checked kernel eagle launches today (a failing read calls ``hawk_fail``);
* ``kept, branch``: the first failure kept in registers (a branch), recorded after the loop;
* ``kept, selects``: the same kept with selects instead of a branch;
* ``kept, two selects``: only the failing site and lane kept, with selects;
* ``flag``: only whether a read failed kept (one OR; the lane would need a second pass);
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
from _report import probe_ready
from _timing import device_ms

import eagle.cuda
import hawk
from eagle import arrays
from eagle.cuda.module import PackedArgs
from eagle.plan._cuda_backend import BLOCK_SIZE
from eagle.plan._cuda_backend import grid as _grid
from hawk.emit import cuda as emit_cuda

LANES = 10**8
TABLE = 4096


@hawk.kernel
def gather(t: hawk.Table, i: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = t.at(int(i))  # noqa: F841 - the kernel assigns to its output plane


_CLAMP_HEAD = "__device__ __forceinline__ long long hawk_clamp("
_KEPT_HEAD = """\
struct hawk_failure { long long site, lane, value, extent; };
__device__ __forceinline__ long long hawk_clamp(
    long long index, long long extent, hawk_failure& first, long long site, long long lane)
{
    const bool in = (unsigned long long)index < (unsigned long long)extent;
"""
_KEPT = {
    "kept, branch": "    if (__builtin_expect(!in && first.site < 0, 0)) "
    "first = {site, lane, index, extent};\n",
    "kept, selects": """\
    const bool take = !in & (first.site < 0);
    first.site = take ? site : first.site;
    first.lane = take ? lane : first.lane;
    first.value = take ? index : first.value;
    first.extent = take ? extent : first.extent;
""",
    "kept, two selects": """\
    const bool take = !in & (first.site < 0);
    first.site = take ? site : first.site;
    first.lane = take ? lane : first.lane;
""",
    "flag": "    first.value |= (long long)!in;\n",
}
_KEPT_TAIL = "    return in ? index : 0LL;\n}"
_CLAMP_ONLY = """\
__device__ __forceinline__ long long hawk_clamp(
    long long index, long long extent, unsigned long long* rec, long long site, long long lane)
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


def _kept(checked: str, update: str, flag: bool) -> str:
    """``checked`` with a thread's first failing read kept in registers by ``update`` and
    recorded once, after the lane loop (the flag variant: whether one failed)."""
    source = _replace_function(checked, _CLAMP_HEAD, _KEPT_HEAD + update + _KEPT_TAIL)
    source = source.replace("n_t, hawk_rec, 0LL, lane)", "n_t, hawk_read_failure, 0LL, lane)")
    first = "    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    source = source.replace(
        first, first + "    hawk_failure hawk_read_failure = {-1LL, 0LL, 0LL, 0LL};\n"
    )
    failed = "hawk_read_failure.value != 0" if flag else "hawk_read_failure.site >= 0"
    fields = ", ".join(f"hawk_read_failure.{f}" for f in ("site", "lane", "value", "extent"))
    end = source.rindex("}")
    return source[:end] + f"    if ({failed}) hawk_fail(hawk_rec, {fields});\n" + source[end:]


def _variants(checked: str, unchecked: str) -> dict[str, str]:
    variants = {"unchecked": unchecked, "emitted": checked}
    variants.update({name: _kept(checked, u, name == "flag") for name, u in _KEPT.items()})
    variants["clamp only"] = _replace_function(checked, _CLAMP_HEAD, _CLAMP_ONLY)
    variants["plain int()"] = _replace_function(
        checked, "__device__ __forceinline__ long long hawk_to_int(float x)", _PLAIN_INT
    )
    variants["no unroll"] = checked.replace("#pragma unroll 4\n", "", 1)
    return variants


def main(argv: list[str]) -> int:
    status = probe_ready(argv, __doc__)
    if status is not None:
        return status
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
