"""Plot the benchmark figures as SVG bar charts in docs/_static (standard library only).

Run from anywhere: ``python docs/_scripts/plots.py [OUT_DIR]``. Each chart reads the JSON its
benchmark script writes (``nox -s bench`` puts them in benchmarks/out/); where that file
is absent it reads the same fields from docs/_scripts/recorded.json, the figures recorded
in benchmarks/RESULTS.md. The output is committed; run the script again after a new run.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from svg import (  # the scripts' own helper, next to this file
    CUBLAS,
    CUBLAS_EDGE,
    HOST,
    HOST_EDGE,
    LINE,
    MUTED,
    PREP,
    PREP_EDGE,
    STATIC,
    YOURS,
    YOURS_EDGE,
    Svg,
)

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "benchmarks" / "out"
RECORDED = Path(__file__).resolve().parent / "recorded.json"

#: the chip the recorded figures come from, and its limits
FP32_TFLOPS = 67.0  # H200, no tensor cores
DENSE16_TFLOPS = 989.0  # H200 tensor cores, dense bfloat16 and float16
TF32_TFLOPS = 495.0  # H200 tensor cores, dense TF32
HBM_TB_S = 4.8  # datasheet
COPY_TB_S = 4.3  # a device-to-device copy on the benchmark machine

EAGLE = ("eagle", YOURS, YOURS_EDGE)
TORCH = ("torch", PREP, PREP_EDGE)
CUPY = ("CuPy", HOST, HOST_EDGE)
LOOP = ("hawk loop", HOST, HOST_EDGE)
ROUTED = ("hawk routed", CUBLAS, CUBLAS_EDGE)


def load(script: str) -> tuple[dict[str, Any], str]:
    """The JSON of ``benchmarks/bench_<script>.py`` and where it came from."""
    measured = MEASURED / f"{script}.json"
    if measured.is_file():
        return json.loads(measured.read_text()), str(measured.relative_to(ROOT))
    return json.loads(RECORDED.read_text())[script], "benchmarks/RESULTS.md"


def _nice_step(top: float) -> float:
    raw = top / 5
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def bars(
    title: str,
    groups: list[str],
    series: list[tuple[str, str, str]],
    values: list[list[float | None]],
    unit: str,
    *,
    limits: tuple[tuple[float, str], ...] = (),
    log: bool = False,
    source: str = "",
) -> Svg:
    """A grouped bar chart: one group per x label, one bar per series."""
    svg = Svg(860, 380, title)
    left, right, top, bottom = 78, 840, 80, 300
    svg.text(20, 30, title, anchor="start", bold=True, size=15)
    known = [v for row in values for v in row if v is not None]
    high = max([*known, *(limit for limit, _ in limits)]) * 1.12
    if log:
        low = 10 ** math.floor(math.log10(min(known)))
        high = 10 ** math.ceil(math.log10(high))

        def y_of(v: float) -> float:
            span = math.log10(high) - math.log10(low)
            return bottom - (math.log10(v) - math.log10(low)) / span * (bottom - top)

        ticks = [10**e for e in range(round(math.log10(low)), round(math.log10(high)) + 1)]
    else:
        step = _nice_step(high)
        high = step * math.ceil(high / step)

        def y_of(v: float) -> float:
            return bottom - v / high * (bottom - top)

        ticks = [step * i for i in range(round(high / step) + 1)]
    for tick in ticks:
        y = y_of(tick)
        svg.parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#e4e7eb"/>'
        )
        svg.text(left - 8, y + 4, f"{tick:g}", size=12, anchor="end", color=MUTED)
    svg.text(left - 8, top - 20, unit, size=12, anchor="end", color=MUTED)
    for index, (limit, label) in enumerate(limits):
        y = y_of(limit)
        svg.parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#c2410c" '
            'stroke-width="1.5" stroke-dasharray="6 4"/>'
        )
        at, anchor = (right, "end") if index % 2 == 0 else (left + 6, "start")
        svg.text(at, y - 6, label, size=12, anchor=anchor, color="#c2410c")
    width = (right - left) / len(groups)
    bar = min(56, (width - 40) / len(series))
    for g, group in enumerate(groups):
        x0 = left + g * width + (width - bar * len(series)) / 2
        for s, (_, fill, edge) in enumerate(series):
            value = values[s][g]
            if value is None:
                continue
            y = y_of(value)
            svg.rect(round(x0 + s * bar, 1), round(y, 1), round(bar - 4, 1), round(bottom - y, 1),
                     fill, edge, radius=2)  # fmt: skip
            svg.text(x0 + s * bar + (bar - 4) / 2, y - 5, f"{value:.3g}", size=11, halo=True)
        svg.text(left + g * width + width / 2, bottom + 22, group, size=13)
    x = left
    for label, fill, edge in series:
        svg.rect(x, 336, 14, 14, fill, edge, radius=2)
        svg.text(x + 20, 348, label, size=13, anchor="start")
        x += 40 + 8 * len(label)
    svg.text(right, 368, f"data: {source}", size=11, anchor="end", color=MUTED)
    axis = f'x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"'
    svg.parts.append(f'<line {axis} stroke="{LINE}"/>')
    return svg


def gemm() -> Svg:
    data, source = load("gemm")
    rows = [row for row in data["rows"] if row["case"].startswith("(a)")]
    groups = [row["shape"].split("^")[0] + "³" for row in rows]
    values = [[row.get(key) for row in rows] for key in ("eagle", "torch", "cupy")]
    return bars(
        "A captured float32 product against torch.mm and CuPy (TF32 off)",
        groups, [EAGLE, TORCH, CUPY], values, "TFLOP/s",
        limits=((FP32_TFLOPS, f"FP32 limit, {FP32_TFLOPS:g} TFLOP/s"),), source=source,
    )  # fmt: skip


#: short dtype names for the chart's group labels
SHORT = {"bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}


def precisions() -> Svg:
    data, source = load("gemm")
    rows = [row for row in data["rows"] if row["case"][:3] in ("(e)", "(f)", "(g)")]
    groups = []
    for row in rows:
        size, dtype = row["shape"].split()[:2]
        name = "TF32" if "TF32" in row["case"] else SHORT.get(dtype, dtype)
        groups.append(f"{name} {size.split('^')[0]}³")
    values = [[row.get(key) for row in rows] for key in ("eagle", "torch")]
    return bars(
        "Captured products in TF32, bfloat16, float16 and float64 against torch.mm",
        groups, [EAGLE, TORCH], values, "TFLOP/s",
        limits=((DENSE16_TFLOPS, f"dense 16-bit limit, {DENSE16_TFLOPS:g} TFLOP/s"),
                (TF32_TFLOPS, f"dense TF32 limit, {TF32_TFLOPS:g} TFLOP/s")),
        source=source,
    )  # fmt: skip


def route() -> Svg:
    data, source = load("route")
    sizes = [int(row["shape"].rsplit("=", 1)[1]) for row in data["rows"]]
    sides = ("raw_cublas", "routed", "loop")
    values = [
        [
            2 * n**3 / (row["ms"][side] * 1e-3) / 1e12
            for n, row in zip(sizes, data["rows"], strict=True)
        ]
        for side in sides
    ]
    return bars(
        "A hawk contraction: routed to cuBLAS, its own loop, and cuBLAS called directly",
        [f"R = U = B = {n}" for n in sizes],
        [("cuBLAS direct", PREP, PREP_EDGE), ROUTED, LOOP], values, "TFLOP/s",
        limits=((FP32_TFLOPS, f"FP32 limit, {FP32_TFLOPS:g} TFLOP/s"),), source=source,
    )  # fmt: skip


def diff() -> Svg:
    data, source = load("diff")
    rows = data["device"]
    keys = ("loop_adjoint_ms", "routed_adjoint_ms", "torch_autograd_ms")
    values = [[row.get(key) for row in rows] for key in keys]
    return bars(
        "Both gradients of a contraction: loop adjoint, routed adjoint, torch autograd",
        ["R, U, B = " + ", ".join(str(v) for v in row["R_U_B"]) for row in rows],
        [LOOP, ROUTED, ("torch autograd", PREP, PREP_EDGE)], values,
        "ms (log)", log=True, source=source,
    )  # fmt: skip


def bandwidth() -> Svg:
    data, source = load("hawk")
    rows = data["device"]["bandwidth"]
    return bars(
        "A memory-bound hawk kernel (y = a·x + 1) over 10⁸ lanes",
        [row["dtype"] for row in rows], [("hawk kernel", YOURS, YOURS_EDGE)],
        [[row["tb_per_s"] for row in rows]], "TB/s",
        limits=((HBM_TB_S, f"HBM datasheet, {HBM_TB_S:g} TB/s"),
                (COPY_TB_S, f"device copy, {COPY_TB_S:g} TB/s")),
        source=source,
    )  # fmt: skip


#: bench_scatter.py's cases, in the chart's order, and their labels
SCATTER_CASES = {
    "histogram": "histogram, 10⁸ samples",
    "deposit random": "deposit, random order",
    "deposit sorted": "deposit, sorted",
    "gather (adjoint)": "its adjoint (a gather)",
}


def scatter_fastest(data: dict[str, Any], case: str) -> tuple[tuple[float, str], ...]:
    """eagle's and torch's fastest sides of one case of bench_scatter.py's figures, as
    (ms, side name) each; the gather is the random deposit's ``gather``."""
    sides = data["deposit random"]["gather"] if case.startswith("gather") else data[case]["sides"]
    return tuple(
        min((ms, name) for name, (ms, _) in sides.items() if name.startswith(prefix))
        for prefix in ("hawk", "torch")
    )


def scatter() -> Svg:
    data, source = load("scatter")
    fastest = [scatter_fastest(data, case) for case in SCATTER_CASES]
    hawk_ms = [ours[0] for ours, _ in fastest]
    torch_ms = [theirs[0] for _, theirs in fastest]
    return bars(
        "Scatter-adds: eagle's fastest against torch's fastest (lower is better)",
        list(SCATTER_CASES.values()), [EAGLE, TORCH], [hawk_ms, torch_ms], "ms",
        source=source,
    )  # fmt: skip


def rebind() -> Svg:
    data, source = load("rebind")
    rows = data["rows"]
    groups = [f"{'hawk' if row['kind'] == 'hawk' else 'cuBLAS'}, {row['launches']}"
              for row in rows]  # fmt: skip
    keys = ("rebind_one", "rebind_all", "capture_instantiate")
    values = [[row["us"][key] for row in rows] for key in keys]
    return bars(
        "Pointing a graph of N launches at other arrays: rebind against capturing again",
        groups,
        [("rebind one plane", YOURS, YOURS_EDGE), ("rebind every plane", CUBLAS, CUBLAS_EDGE),
         ("capture + instantiate", PREP, PREP_EDGE)],
        values, "µs (log)", log=True, source=source,
    )  # fmt: skip


#: the KAN steps of the chart, in its order: (label, side, recorded section, where in it)
KAN_STEPS = (
    ("hand-wired", "eagle", "kan", ("eagle", "steps", "graph_written", "ms")),
    ("dense", "eagle", "kan_local", ("rows", 0, "dense_written")),
    ("sequenced", "eagle", "kan_local", ("rows", 0, "dense_sequenced")),
    ("local, hand", "eagle", "kan_local", ("rows", 0, "local_by_hand")),
    ("local, diff", "eagle", "kan_local", ("rows", 0, "local_derived")),
    ("hybrid", "eagle", "kan_local", ("rows", 0, "local_hybrid")),
    ("reduce-overhead", "torch", "kan", ("torch", "modes", "reduce_overhead", "ms")),
    ("compile", "torch", "kan", ("torch", "modes", "compile", "ms")),
    ("eager", "torch", "kan", ("torch", "modes", "eager", "ms")),
)


def kan() -> Svg:
    sources = []
    values: dict[str, list[float | None]] = {"eagle": [], "torch": []}
    for _, side, section, path in KAN_STEPS:
        value, source = load(section)
        sources.append(source)
        for key in path:
            value = value[key]
        for name, column in values.items():
            column.append(value if name == side else None)
    return bars(
        "A KAN layer's training step, one graph each (16,384 x 64 -> 64, G = 8, float32)",
        [label for label, *_ in KAN_STEPS], [EAGLE, TORCH], list(values.values()),
        "ms per step (log)", log=True, source=", ".join(dict.fromkeys(sources)),
    )  # fmt: skip


PLOTS = {
    "bench-gemm.svg": gemm,
    "bench-precisions.svg": precisions,
    "bench-route.svg": route,
    "bench-diff.svg": diff,
    "bench-bandwidth.svg": bandwidth,
    "bench-scatter.svg": scatter,
    "bench-rebind.svg": rebind,
    "bench-kan.svg": kan,
}


def main(argv: list[str]) -> None:
    """Write every drawing to docs/_static, or to the directory given as the one argument."""
    directory = Path(argv[0]) if argv else STATIC
    directory.mkdir(parents=True, exist_ok=True)
    for name, draw in PLOTS.items():
        print(draw().write(name, directory))


if __name__ == "__main__":
    main(sys.argv[1:])
