"""A param's gradient over many lanes: hawk's emitted adjoint against plain atomics.

The adjoint of ``y = a * x`` with respect to the param ``a`` adds ``x * y_bar``
from every lane into one element. hawk's CUDA emitter sums a full warp with
shuffles first (one ``atomicAdd`` per warp); the other side is the same
emitted source with that helper replaced by a plain per-lane ``atomicAdd``.
Both are timed with CUDA events (median of 10 after a warm-up) and checked
against a float64 dot product.

    python benchmarks/bench_param_grad.py results.json    (eagle installed, or PYTHONPATH=.)
"""

# ruff: noqa: F841 - the kernel assigns its output plane

from __future__ import annotations

import json
import sys

import numpy as np
from _timing import device_ms

import hawk
import hawk.diff
from eagle import arrays, cuda
from eagle.cuda.module import PackedArgs
from eagle.plan._cuda_backend import BLOCK_SIZE
from eagle.plan._cuda_backend import grid as _grid
from hawk.emit import cuda as emit_cuda

LANES = 1 << 24
REPEAT = 10


@hawk.kernel
def scale(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = a * x


def main(out_path: str | None) -> None:
    adjoint = hawk.diff.vjp(scale, ["a"])
    emitted = emit_cuda.emit(adjoint.ir, {p.name: "float32" for p in adjoint.planes})
    rng = np.random.default_rng()
    x = rng.standard_normal(LANES).astype(np.float32)
    y_bar = rng.standard_normal(LANES).astype(np.float32)
    planes = {
        "a": arrays.asarray(np.array([1.5], np.float32), device="cuda:0"),
        "x": arrays.asarray(x, device="cuda:0"),
        "y_bar": arrays.asarray(y_bar, device="cuda:0"),
    }
    reference = float(np.dot(x.astype(np.float64), y_bar.astype(np.float64)))
    stream = cuda.current_stream()
    grid = _grid(LANES)
    rows = []
    sides = (
        ("warp sum, then one atomicAdd (emitted)", emitted.source),
        ("atomicAdd per lane", emitted.source.replace("hawk_add_uniform(", "atomicAdd(")),
    )
    for label, source in sides:
        kernel = cuda.load_kernel(source, emitted.name)
        a_bar = arrays.zeros((1,), "float32", "cuda:0")
        values = [planes.get(p.name, a_bar) for p in adjoint.planes]
        record = arrays.zeros((8,), "int64", "cuda:0")  # no checks here: never written
        args = PackedArgs([*values, np.int64(LANES), record])
        kernel.launch(grid, BLOCK_SIZE, args, stream)
        stream.synchronize()
        error = abs(float(a_bar.numpy()[0]) - reference) / abs(reference)
        ms = device_ms(
            lambda k=kernel, a=args: k.launch(grid, BLOCK_SIZE, a, stream), stream, REPEAT
        )
        rows.append({"side": label, "ms": ms, "rel_error": error})
    print(f"param gradient over {LANES} lanes, float32")
    for row in rows:
        print(f"  {row['side']:40s} {row['ms']:8.3f} ms   rel. error {row['rel_error']:.1e}")
    if out_path:
        with open(out_path, "w") as handle:
            json.dump({"lanes": LANES, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
