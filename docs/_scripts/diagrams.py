"""Draw the documentation's diagrams as SVG files in docs/_static (standard library only).

Run from anywhere: ``python docs/_scripts/diagrams.py [OUT_DIR]``. The output is committed; run the
script again after changing a drawing. The SVG parameters of the product diagram are
computed with eagle itself, and the dtypes the journey's GEMM branch takes are read from
the plans (docs/_ext/facts.py), so the pictures cannot drift from what eagle does.
"""

from __future__ import annotations

import sys
from pathlib import Path

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

#: short dtype names, for labels in narrow boxes
SHORT = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64"}


def _facts():
    """docs/_ext/facts.py: what the pages state, read from the code."""
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    import facts

    return facts


def captured_graph() -> Svg:
    svg = Svg(860, 404, "Your kernel, a captured cuBLAS product and your kernel, in one graph")
    # before the capture
    svg.rect(20, 20, 820, 120, PREP, PREP_EDGE)
    svg.text(40, 46, "Before the capture (allocates, loads, waits: not capture-legal)",
             anchor="start", bold=True)  # fmt: skip
    steps = [
        ("CublasCaptureHandle(stream)", "a cuBLAS handle on the stream"),
        ("its workspace", "32 MiB from eagle's pool, set once"),
        ("handle.warm(params, operands)", "runs each product once"),
    ]
    for index, (code, note) in enumerate(steps):
        x = 40 + index * 270
        svg.rect(x, 62, 250, 62, "#ffffff", PREP_EDGE)
        svg.text(x + 125, 88, code, size=13, mono=True)
        svg.text(x + 125, 110, note, size=12, color=MUTED)
    # the capture
    svg.rect(20, 170, 820, 130, "#fafbfc", LINE, dash=True)
    svg.text(40, 194, "with cuda.StreamCapturer(stream) as cap:", anchor="start", bold=True)
    svg.text(820, 194, "recorded, not run", anchor="end", color=MUTED)
    nodes = [
        (40, "your kernel", "bound.launch(stream)", YOURS, YOURS_EDGE),
        (315, "cuBLAS Sgemm node", "handle.sgemm(params, operands)", CUBLAS, CUBLAS_EDGE),
        (590, "your kernel", "kernel.launch(..., stream)", YOURS, YOURS_EDGE),
    ]
    for x, name, call, fill, edge in nodes:
        svg.rect(x, 212, 230, 70, fill, edge)
        svg.text(x + 115, 240, name, bold=True)
        svg.text(x + 115, 264, call, size=12, mono=True, color=MUTED)
    svg.arrow(270, 247, 313, 247)
    svg.arrow(545, 247, 588, 247)
    svg.path("M 430 124 L 430 210", dash=True, color=PREP_EDGE)
    svg.text(442, 160, "the handle and workspace the node uses", size=12, anchor="start",
             color=MUTED)  # fmt: skip
    # the replay
    svg.rect(20, 326, 820, 62, HOST, HOST_EDGE)
    svg.text(430, 352, "graph = cuda.Graph.from_captured(cap.captured)", size=13, mono=True)
    svg.text(430, 374, "graph.launcher().stream(stream).launch()   # one launch replays all three",
             size=13, mono=True)  # fmt: skip
    svg.arrow(430, 300, 430, 324)
    return svg


def row_column_major() -> Svg:
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from eagle.gemm import sgemm_params_for_arrays

    a, b, out = (np.empty(shape, np.float32) for shape in ((3, 4), (4, 5), (3, 5)))
    p = sgemm_params_for_arrays(a, b, out)
    svg = Svg(860, 420, "A row-major product and the column-major cuBLAS call that computes it")
    cell = 22

    def grid(x, y, rows, cols, fill, edge, label, numbers_by_row: bool) -> None:
        for r in range(rows):
            for c in range(cols):
                svg.rect(x + c * cell, y + r * cell, cell, cell, fill, edge, radius=0)
                index = r * cols + c if numbers_by_row else c * rows + r
                svg.text(x + c * cell + cell / 2, y + r * cell + 15, str(index), size=10,
                         color=MUTED)  # fmt: skip
        svg.text(x + cols * cell / 2, y + rows * cell + 20, label, size=13, mono=True)

    svg.text(20, 34, "What you write: row-major, out = a @ b", anchor="start", bold=True)
    grid(40, 56, 3, 5, CUBLAS, CUBLAS_EDGE, "out (3×5)", True)
    svg.text(180, 90, "=", size=22)
    grid(200, 56, 3, 4, YOURS, YOURS_EDGE, "a (3×4)", True)
    svg.text(310, 90, "@", size=22)
    grid(330, 46, 4, 5, HOST, HOST_EDGE, "b (4×5)", True)
    svg.text(470, 62, "The numbers are each element's offset in", anchor="start", size=13,
             color=MUTED)  # fmt: skip
    svg.text(470, 82, "memory: row by row (C order, numpy's default).", anchor="start",
             size=13, color=MUTED)  # fmt: skip

    svg.text(20, 214, "What cuBLAS computes: column-major, the same memory read as transposes",
             anchor="start", bold=True)  # fmt: skip
    grid(40, 236, 5, 3, CUBLAS, CUBLAS_EDGE, "outᵀ (5×3)", False)
    svg.text(134, 290, "=", size=22)
    grid(154, 236, 5, 4, HOST, HOST_EDGE, "bᵀ (5×4)", False)
    svg.text(256, 290, "@", size=22)
    grid(276, 246, 4, 3, YOURS, YOURS_EDGE, "aᵀ (4×3)", False)
    call = (
        f"cublasSgemm({p.op_a}, {p.op_b}, m={p.m}, n={p.n}, k={p.k}, "
        f"first={p.operands[0]}, lda={p.lda}, second={p.operands[1]}, ldb={p.ldb}, ldc={p.ldc})"
    )
    svg.lines(400, 262, [
        "Read column by column, the memory of b is bᵀ and that of a is aᵀ,",
        "and (a @ b)ᵀ = bᵀ @ aᵀ: so eagle passes b as cuBLAS's first operand",
        "and a as its second, and nothing is copied or transposed.",
        "Leading dimensions come from the byte strides, so a slice of a",
        "larger matrix is used where it lies.",
    ], size=13, anchor="start", color=MUTED)  # fmt: skip
    svg.rect(20, 370, 820, 34, "#fafbfc", LINE)
    svg.text(430, 392, call, size=13, mono=True)
    return svg


def hawk_journey() -> Svg:
    facts = _facts()
    svg = Svg(860, 470, "From @hawk.kernel to numpy, CUDA C or one cuBLAS product")
    svg.rect(20, 20, 300, 86, YOURS, YOURS_EDGE)
    svg.lines(36, 44, ["@hawk.kernel", "def layer(w, f, y):", "    ..."], size=13, mono=True,
              anchor="start")  # fmt: skip
    svg.rect(380, 20, 460, 86, "#fafbfc", LINE)
    svg.lines(396, 46, [
        "read once, when the module is imported:",
        "source → IR (typed, one assignment per variable,",
        "loops kept as loops); outside the language: HawkError",
    ], size=13, anchor="start")  # fmt: skip
    svg.arrow(320, 63, 378, 63)
    svg.rect(180, 140, 500, 58, HOST, HOST_EDGE)
    svg.text(430, 164, "plan = eagle.plan.auto(layer);  plan.run(**planes)", size=13, mono=True)
    svg.text(430, 186, "chooses by where the arrays live", size=13, color=MUTED)
    svg.arrow(610, 106, 560, 138)
    branches = [
        (20, "host arrays (numpy)", YOURS, YOURS_EDGE, [
            "hawk.emit.host", "→ one numpy function,", "vectorised over all lanes",
        ]),
        (300, "device arrays", YOURS, YOURS_EDGE, [
            "hawk.emit.cuda → CUDA C", "→ NVRTC, for the GPU's sm_XY", "→ one thread per lane",
        ]),
        (580, "device arrays, policy gemm", CUBLAS, CUBLAS_EDGE, [
            "hawk.contraction.recognize", "→ lower_dense_gemm", "→ one cuBLAS product over",
            facts.phrase(SHORT[d] for d in facts.route_dtypes()) + " planes",
        ]),
    ]  # fmt: skip
    for x, when, fill, edge, rows in branches:
        svg.arrow(430, 198, x + 130, 248)
        svg.rect(x, 250, 260, 116, fill, edge)
        svg.text(x + 130, 274, when, size=13, bold=True)
        svg.lines(x + 130, 300, rows, size=13)
    svg.rect(20, 384, 820, 66, "#fafbfc", LINE)
    svg.lines(430, 410, [
        "The GEMM branch is taken only for a kernel that is one dense two-operand contraction,",
        "built under policy.using(contraction=\"gemm\"); plan.route(side) says which branch runs.",
    ], size=13)  # fmt: skip
    return svg


def lanes_grid() -> Svg:
    units, samples = 4, 3
    svg = Svg(860, 284, "Lanes mapped to a grid through split_index")
    cell = 46
    svg.text(20, 32, "The lanes: one output plane y, one value per lane", anchor="start",
             bold=True)  # fmt: skip
    colours = [YOURS, CUBLAS, HOST]
    edges = [YOURS_EDGE, CUBLAS_EDGE, HOST_EDGE]
    for lane in range(units * samples):
        row = lane // units
        svg.rect(20 + lane * 52, 48, cell, 36, colours[row], edges[row], radius=4)
        svg.text(20 + lane * 52 + cell / 2, 72, str(lane), size=14, mono=True)
    svg.text(20, 136, "sample, unit = hm.split_index(4)", anchor="start", mono=True, size=14)
    svg.lines(20, 162, [
        "sample = lane // 4   (the row)",
        "unit   = lane % 4    (the column)",
        "",
        "The grid is y read row-major as",
        "(sample, unit): y.reshape(3, 4).",
    ], size=13, mono=False, anchor="start", color=MUTED)  # fmt: skip
    x0, y0 = 430, 130
    svg.text(x0 + units * cell / 2, y0 - 8, "unit →", size=13, color=MUTED)
    svg.text(x0 - 50, y0 + samples * cell / 2, "sample ↓", size=13, color=MUTED)
    for lane in range(units * samples):
        row, col = divmod(lane, units)
        svg.rect(x0 + col * cell, y0 + row * cell, cell, cell, colours[row], edges[row],
                 radius=0)  # fmt: skip
        svg.text(x0 + col * cell + cell / 2, y0 + row * cell + 20, str(lane), size=13,
                 mono=True)  # fmt: skip
        svg.text(x0 + col * cell + cell / 2, y0 + row * cell + 37, f"({row},{col})", size=10,
                 color=MUTED)  # fmt: skip
    svg.lines(x0 + units * cell + 24, y0 + 18, [
        "Every lane runs the body once;",
        "lane 6 is sample 1, unit 2.",
        "A contraction whose lanes are",
        "its product in this order can",
        "be routed to one GEMM.",
    ], size=13, anchor="start", color=MUTED)  # fmt: skip
    return svg


DRAWINGS = {
    "captured-graph.svg": captured_graph,
    "row-column-major.svg": row_column_major,
    "hawk-journey.svg": hawk_journey,
    "lanes-grid.svg": lanes_grid,
}


def main(argv: list[str]) -> None:
    """Write every drawing to docs/_static, or to the directory given as the one argument."""
    directory = Path(argv[0]) if argv else STATIC
    directory.mkdir(parents=True, exist_ok=True)
    for name, draw in DRAWINGS.items():
        print(draw().write(name, directory))


if __name__ == "__main__":
    main(sys.argv[1:])
