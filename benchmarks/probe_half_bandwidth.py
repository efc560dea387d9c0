"""Why 16-bit memory-bound kernels move fewer bytes per second than float32 ones.

Usage: python benchmarks/probe_half_bandwidth.py out.json

Issue #13 asks for a memory-bound bfloat16 kernel at >= 80% of 4.8 TB/s; the H200 run
measured ``y = a*x + y`` at 10^8 lanes at 72% (bfloat16) and 73% (float16) against 87%
in float32 with the same vectorised lane loop (16-byte accesses, 32 registers in every
dtype). This probe launches variants of the emitted kernel side by side, each on the
same planes, so one run says which change pays before the emitter is changed:

* ``emitted``: the kernel and grid eagle uses today;
* ``grid by groups``: one block per 256 groups of lanes (each thread one vector group);
* ``persistent``: 16 blocks per SM, each thread looping over many groups (the unrolled
  group loop then keeps 4 groups' loads in flight);
* ``no group unroll``: the group loop without ``#pragma unroll 4``;
* ``hardware rounding`` (bfloat16): ``cvt.rn.bf16.f32`` instead of the bit arithmetic.

Each row: median ms over 20 launches (CUDA events, after a warm-up), TB/s of the bytes
the kernel must move (read x and y, write y) and the fraction of 4.8 TB/s; torch's
``y.add_(x, alpha=a)`` on the same data when torch is installed.
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
from hawk.emit._cuda_lanes import VECTOR_BYTES

LANES = 10**8
HBM_TB_S = 4.8
SMS = 132


@hawk.kernel
def axpy(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + y


_HARDWARE_BF16 = """\
__device__ __forceinline__ hawk_bf16 hawk_round_bf16(float v)
{
    hawk_bf16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
    return r;
}"""


def _variants(source: str, dtype: str, width: int) -> dict[str, tuple[str, int]]:
    """Each variant's source and grid (blocks)."""
    groups = LANES // width
    variants = {
        "emitted": (source, _grid(LANES)),
        "grid by groups": (source, -(-groups // BLOCK_SIZE)),
        "persistent": (source, SMS * 16),
        "no group unroll": (
            source.replace(
                "#pragma unroll 4\n        for (long long group", "        for (long long group", 1
            ),
            _grid(LANES),
        ),
    }
    if dtype == "bfloat16":
        start = source.index("__device__ __forceinline__ hawk_bf16 hawk_round_bf16(float v)")
        end = source.index("}", source.index("return r;", start)) + 1
        variants["hardware rounding"] = (
            source[:start] + _HARDWARE_BF16 + source[end:],
            _grid(LANES),
        )
    return variants


def _torch_ms(x: np.ndarray, y: np.ndarray, dtype: str) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    kind = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[dtype]
    tx = torch.from_numpy(x.astype(np.float32)).cuda().to(kind)
    ty = torch.from_numpy(y.astype(np.float32)).cuda().to(kind)
    stream = torch.cuda.current_stream().cuda_stream
    return device_ms(lambda: ty.add_(tx, alpha=1e-3), stream, 20)


def probe(dtype: str, rng: np.random.Generator) -> list[dict[str, Any]]:
    emitted = emit_cuda.emit(axpy.ir, {"a": "float32", "x": dtype, "y": dtype})
    width = VECTOR_BYTES // np.dtype(dtype).itemsize
    host_x = rng.standard_normal(LANES).astype(dtype)
    host_y = rng.standard_normal(LANES).astype(dtype)
    a = arrays.full((1,), 1e-3, "float32", "cuda:0")
    x = arrays.asarray(host_x, device="cuda:0")
    y = arrays.asarray(host_y, device="cuda:0")
    record = arrays.zeros((8,), "int64", "cuda:0")
    stream = eagle.cuda.Stream(non_blocking=True)
    moved = 3 * LANES * np.dtype(dtype).itemsize
    rows = []
    for name, (source, grid) in _variants(emitted.source, dtype, width).items():
        kernel = eagle.cuda.load_kernel(source, emitted.name)
        args = PackedArgs([a, x, y, np.int64(LANES), record])
        ms = device_ms(
            lambda k=kernel, g=grid, p=args: k.launch(g, BLOCK_SIZE, p, stream.ptr()),
            stream.ptr(),
            20,
        )
        rows.append({"dtype": dtype, "variant": name, "blocks": grid, "ms": ms})
    torch_ms = _torch_ms(host_x, host_y, dtype)
    if torch_ms is not None:
        rows.append({"dtype": dtype, "variant": "torch add_", "blocks": None, "ms": torch_ms})
    for row in rows:
        row["tb_per_s"] = moved / row["ms"] / 1e9
        row["of_hbm"] = row["tb_per_s"] / HBM_TB_S
    return rows


def main(argv: list[str]) -> int:
    status = probe_ready(argv, __doc__)
    if status is not None:
        return status
    rng = np.random.default_rng(0)
    rows = [row for dtype in ("bfloat16", "float16", "float32") for row in probe(dtype, rng)]
    for row in rows:
        print(
            f"{row['dtype']:<9} {row['variant']:<18} {row['ms']:.3f} ms "
            f"{row['tb_per_s']:.2f} TB/s ({100 * row['of_hbm']:.0f}%)"
        )
    with open(argv[1], "w") as out:
        json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
