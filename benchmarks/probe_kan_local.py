"""The local KAN kernels written several ways, each emitted with 64- and 32-bit ints.

Usage: PYTHONPATH=. python benchmarks/probe_kan_local.py    # needs a CUDA device

At S = 16384, 64 -> 64, G = 8, float32: the local forward with 1 and 4 outputs per lane,
``x_bar`` with ``y_bar`` read sample-major (as ``_kan.py`` does) and output-major, and the
chunked ``c_bar``, each a hawk kernel emitted by ``hawk.emit.cuda`` as it is ("64-bit":
since session 18 the ints hawk proves to fit 32 bits, such as the clamped cell of the
local kernels and what is computed from it, are ``int`` there already),
with ``floor`` of a float taken to int64 without a double (``64, ff``, :func:`float_floor`),
with only the offsets of table reads in 32 bits (``64, o32``, :func:`narrow_offsets`),
and with its int values rewritten to 32 bits by :func:`narrowed` (a text rewrite, good
for these kernels only: every int they compute is below 2**31). Each line gives the
median CUDA-event time of a direct launch, the registers ptxas gives it and the relative
error of its result against float64. What it measures is how much of each kernel's time
the 64-bit index arithmetic and the lane shape cost.
"""

# ruff: noqa: F821, F841 - hawk's axis annotations and output planes confuse these checks

# No ``from __future__ import annotations``: hawk evaluates the tables' extents.

import functools
import re
import sys
from collections.abc import Callable
from typing import Any

import _kan
import numpy as np
from _timing import device_ms
from probe_lane_unroll import registers

import eagle.cuda
import hawk
from eagle import arrays
from eagle.cuda.module import PackedArgs
from eagle.plan._cuda_backend import BLOCK_SIZE
from eagle.plan._cuda_backend import grid as _grid
from hawk import math as hm
from hawk.emit import cuda as emit_cuda

S, NI, NO, G = 16384, 64, 64, 8


def kernels() -> dict[str, tuple[hawk.Kernel, int]]:
    """Each probed kernel and its lane count."""
    layer = _kan.kan_kernels(S, NI, NO, G)
    NB = G + 3
    INV_H = G / 2.0
    G0 = -1.0 - 3.0 / INV_H
    Q4 = NO // 4

    @hawk.kernel
    def forward4(
        x: hawk.Table["input":NI, "sample":S],
        c: hawk.Table["input":NI, "fn":NB, "out":NO],
        y0: hawk.Mutable[hawk.Scalar],
        y1: hawk.Mutable[hawk.Scalar],
        y2: hawk.Mutable[hawk.Scalar],
        y3: hawk.Mutable[hawk.Scalar],
    ):
        s, og = hm.split_index(Q4)  # y_m[s, og] = y[s, og + m * Q4]
        a0, a1, a2, a3 = 0.0, 0.0, 0.0, 0.0
        for i in range(NI):
            u = (x.at(input=i, sample=s) - G0) * INV_H
            j = hm.floor(u)
            t = u - j
            r = 1.0 - t
            k0 = hm.minimum(hm.maximum(j - 3, 0), NB - 1)
            k1 = hm.minimum(hm.maximum(j - 2, 0), NB - 1)
            k2 = hm.minimum(hm.maximum(j - 1, 0), NB - 1)
            k3 = hm.minimum(hm.maximum(j, 0), NB - 1)
            w0 = r * r * r if k0 == j - 3 else 0.0
            w1 = (3.0 * t - 6.0) * t * t + 4.0 if k1 == j - 2 else 0.0
            w2 = ((-3.0 * t + 3.0) * t + 3.0) * t + 1.0 if k2 == j - 1 else 0.0
            w3 = t * t * t if k3 == j else 0.0
            a0 = a0 + (
                w0 * c.at(input=i, fn=k0, out=og)
                + w1 * c.at(input=i, fn=k1, out=og)
                + w2 * c.at(input=i, fn=k2, out=og)
                + w3 * c.at(input=i, fn=k3, out=og)
            )
            a1 = a1 + (
                w0 * c.at(input=i, fn=k0, out=og + Q4)
                + w1 * c.at(input=i, fn=k1, out=og + Q4)
                + w2 * c.at(input=i, fn=k2, out=og + Q4)
                + w3 * c.at(input=i, fn=k3, out=og + Q4)
            )
            a2 = a2 + (
                w0 * c.at(input=i, fn=k0, out=og + 2 * Q4)
                + w1 * c.at(input=i, fn=k1, out=og + 2 * Q4)
                + w2 * c.at(input=i, fn=k2, out=og + 2 * Q4)
                + w3 * c.at(input=i, fn=k3, out=og + 2 * Q4)
            )
            a3 = a3 + (
                w0 * c.at(input=i, fn=k0, out=og + 3 * Q4)
                + w1 * c.at(input=i, fn=k1, out=og + 3 * Q4)
                + w2 * c.at(input=i, fn=k2, out=og + 3 * Q4)
                + w3 * c.at(input=i, fn=k3, out=og + 3 * Q4)
            )
        y0, y1, y2, y3 = a0 / 6.0, a1 / 6.0, a2 / 6.0, a3 / 6.0

    @hawk.kernel
    def x_bar_by_out(
        x: hawk.Table["input":NI, "sample":S],
        c: hawk.Table["input":NI, "fn":NB, "out":NO],
        y_bar_t: hawk.Table["out":NO, "sample":S],
        x_bar: hawk.Mutable[hawk.Scalar],
    ):
        i, s = hm.split_index(S)  # as _kan's local_x_bar, y_bar read output-major
        u = (x.at(input=i, sample=s) - G0) * INV_H
        j = hm.floor(u)
        t = u - j
        r = 1.0 - t
        k0 = hm.minimum(hm.maximum(j - 3, 0), NB - 1)
        k1 = hm.minimum(hm.maximum(j - 2, 0), NB - 1)
        k2 = hm.minimum(hm.maximum(j - 1, 0), NB - 1)
        k3 = hm.minimum(hm.maximum(j, 0), NB - 1)
        g0, g1, g2, g3 = 0.0, 0.0, 0.0, 0.0
        for o in range(NO):
            g = y_bar_t.at(out=o, sample=s)
            g0 = g0 + c.at(input=i, fn=k0, out=o) * g
            g1 = g1 + c.at(input=i, fn=k1, out=o) * g
            g2 = g2 + c.at(input=i, fn=k2, out=o) * g
            g3 = g3 + c.at(input=i, fn=k3, out=o) * g
        dw0 = -0.5 * r * r if k0 == j - 3 else 0.0
        dw1 = (1.5 * t - 2.0) * t if k1 == j - 2 else 0.0
        dw2 = (-1.5 * t + 1.0) * t + 0.5 if k2 == j - 1 else 0.0
        dw3 = 0.5 * t * t if k3 == j else 0.0
        x_bar = (dw0 * g0 + dw1 * g1 + dw2 * g2 + dw3 * g3) * INV_H

    return {
        "forward, 1 out/lane": (layer.local, S * NO),
        "forward, 4 out/lane": (forward4, S * Q4),
        "x_bar, y_bar (s,o)": (layer.local_x_bar, NI * S),
        "x_bar, y_bar (o,s)": (x_bar_by_out, NI * S),
        "c_bar chunks": (layer.local_c_bar, (S // layer.chunk) * layer.rows * (NO // 4)),
        "c_bar sum": (layer.local_c_bar_sum, layer.rows * NO),
    }


_HELPERS_32 = (
    "__device__ __forceinline__ int hawk_minimum(int a, int b) { return a < b ? a : b; }",
    "__device__ __forceinline__ int hawk_maximum(int a, int b) { return a > b ? a : b; }",
    "__device__ __forceinline__ int hawk_floor_i32(float f)\n{\n"
    "    return fabsf(f) < 2147483648.0f ? (int)floorf(f) : (int)0x80000000u;\n}",
    "__device__ __forceinline__ int hawk_floordiv32(int a, int b) { return a / b; }",
    "__device__ __forceinline__ int hawk_mod32(int a, int b) { return a % b; }",
    "__device__ __forceinline__ int hawk_sub32(int a, int b) { return a - b; }",
)


_FLOOR_FLOAT = """
__device__ __forceinline__ long long hawk_floor_f(float f)
{
    return fabsf(f) < 9223372036854775808.0f ? (long long)floorf(f) : (long long)(1ULL << 63);
}
"""


def float_floor(source: str) -> str:
    """``source`` with ``floor`` of a float taken to a 64-bit int without passing through
    double."""
    head, sep, body = source.partition('extern "C"')
    body = re.sub(r"hawk_floor_int\(\(double\)floorf\(([^()]*)\)\)", r"hawk_floor_f(\1)", body)
    return head + _FLOOR_FLOAT + sep + body


def narrow_offsets(source: str) -> str:
    """``source`` with the element offset of each table read computed in 32 bits (each
    index variable cast to ``int``), every other int left in 64 bits: what an emitter can
    do where it proves each index within its axis and the table below 2**31 elements."""
    head, sep, body = source.partition('extern "C"')

    def offset(match: re.Match[str]) -> str:
        inside = re.sub(r"\b(v\d+_\w+)", r"(int)\1", match.group(2))
        inside = re.sub(r"\b(\d+)LL\b", r"\1", inside)
        return f"{match.group(1)}[{inside}]"

    body = re.sub(r"\b(p_\w+)\[([^\[\]]*v\d+_[^\[\]]*)\]", offset, body)
    return head + sep + body


def narrowed(source: str) -> str:
    """``source`` with its int variables, loop indices and constants in 32 bits (valid for
    these kernels' non-negative lanes and indices below 2**31 only)."""
    head, sep, body = source.partition('extern "C"')
    body = re.sub(r"const long long (v\d+_)", r"const int \1", body)
    body = re.sub(r"for \(long long (v\d+_)", r"for (int \1", body)
    body = body.replace("const long long lane = at;", "const int lane = (int)at;")
    body = re.sub(r"\b(\d+)LL\b", r"\1", body)
    body = re.sub(r"hawk_floor_int\(\(double\)floorf\(([^()]*)\)\)", r"hawk_floor_i32(\1)", body)
    body = body.replace("hawk_wrap_sub(", "hawk_sub32(")
    body = body.replace("hawk_floordiv(", "hawk_floordiv32(").replace("hawk_mod(", "hawk_mod32(")
    # hawk defines its own 32-bit minimum and maximum where a kernel has ints that fit
    defined = {line.strip() for line in head.splitlines()}
    helpers = [text for text in _HELPERS_32 if text.partition("{")[0].strip() not in defined]
    return head + "\n" + "\n".join(helpers) + "\n" + sep + body


def main() -> int:
    if not eagle.cuda.is_available():
        print("probe_kan_local needs a CUDA device; none is usable here")
        return 1
    rng = np.random.default_rng(7)
    layer = _kan.kan_kernels(S, NI, NO, G)
    x = rng.uniform(-1.2, 1.2, (NI, S)).astype(np.float32)
    c = rng.standard_normal((layer.rows, NO)).astype(np.float32) * 0.1
    y_bar = rng.standard_normal((S, NO)).astype(np.float32)
    ref = _kan.reference(layer, x, c, y_bar)
    y_ref = ref["y"].reshape(S, NO)
    stream = eagle.cuda.Stream(non_blocking=True)
    ptr = stream.ptr()
    device = functools.partial(arrays.asarray, device="cuda:0")
    inputs = {
        "x": device(x),
        "c": device(c),
        "y_bar": device(y_bar),
        "y_bar_t": device(np.ascontiguousarray(y_bar.T)),
    }
    chunks = S // layer.chunk
    checks: dict[str, Callable[[dict[str, np.ndarray]], float]] = {
        "forward, 1 out/lane": lambda out: _error(out["y"].reshape(S, NO), y_ref),
        "forward, 4 out/lane": lambda out: _error(
            np.stack([out[f"y{m}"].reshape(S, NO // 4) for m in range(4)], 1).reshape(S, NO),
            y_ref,
        ),
        "x_bar, y_bar (s,o)": lambda out: _error(out["x_bar"].reshape(NI, S), ref["x_bar"]),
        "x_bar, y_bar (o,s)": lambda out: _error(out["x_bar"].reshape(NI, S), ref["x_bar"]),
        "c_bar chunks": lambda out: _error(
            np.stack(
                [out[f"p{m}"].reshape(chunks, layer.rows, NO // 4).sum(0) for m in range(4)], 1
            ).reshape(layer.rows, NO),
            ref["c_bar"],
        ),
        "c_bar sum": lambda out: 0.0,
    }
    record = arrays.zeros((8,), "int64", "cuda:0")
    print(f"S={S}, {NI}->{NO}, G={G}, float32")
    print(f"{'kernel':24s} {'ints':6s} {'regs':>5s} {'ms':>8s}  rel. error")
    for name, (kernel, lanes) in kernels().items():
        planes = {}
        for plane in kernel.planes:
            size = _size(plane, lanes)
            if plane.name in inputs:
                planes[plane.name] = inputs[plane.name]
            elif name == "c_bar sum":
                planes[plane.name] = device(rng.standard_normal(size).astype(np.float32))
            else:
                planes[plane.name] = arrays.full((size,), np.nan, "float32", "cuda:0")
        args = PackedArgs([*(planes[p.name] for p in kernel.planes), np.int64(lanes), record])
        emitted = emit_cuda.emit(kernel.ir, {p.name: "float32" for p in kernel.planes}, narrow=True)
        sources = (
            ("64-bit", emitted.source),
            ("64, ff", float_floor(emitted.source)),
            ("64, o32", narrow_offsets(emitted.source)),
            ("32-bit", narrowed(emitted.source)),
        )
        for ints, source in sources:
            loaded = eagle.cuda.load_kernel(source, emitted.name)
            launch = functools.partial(loaded.launch, _grid(lanes), BLOCK_SIZE, args, ptr)
            ms = device_ms(launch, ptr, 20)
            stream.synchronize()
            out = {k: v.numpy() for k, v in planes.items() if k not in inputs}
            print(
                f"{name:24s} {ints:6s} {registers(source):5d} {ms:8.4f}  {checks[name](out):.2e}",
                flush=True,
            )
    return 0


def _size(plane: Any, lanes: int) -> int:
    return lanes if plane.axes is None else int(np.prod([e for _, e in plane.axes]))


def _error(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


if __name__ == "__main__":
    sys.exit(main())
