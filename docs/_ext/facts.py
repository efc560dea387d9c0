"""What the pages say about dtypes, routes, requirements and the recorded benchmarks, read
from the code and the data when the site is built, so that it cannot drift.

Every fact here comes from calling eagle and hawk (on a tiny kernel, tiny arrays or
stand-in device buffers, never a device) or from reading ``pyproject.toml`` and
``docs/_scripts/recorded.json``; nothing restates a literal the code holds. The pages
use them as MyST substitutions (:func:`substitutions`): ``{{ plan_routes }}`` on a line of
its own is a table, ``{{ route_dtypes }}`` inside a sentence a phrase.

``eagle.torch`` needs PyTorch, which the documentation build does not install: where it
is absent the build reads what it decides from ``torch_facts.json`` next to this file,
which ``python docs/_ext/facts.py`` writes (with torch installed) and
``tests/test_docs_facts.py`` compares with the code whenever torch is there.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import sys
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the checkout's eagle and hawk, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels import K, M, N, contraction  # noqa: E402  (docs/_ext/kernels.py)

from eagle.cuda.loops import FLAG_DTYPES  # noqa: E402
from eagle.gemm import (  # noqa: E402
    GemmMappingUnavailable,
    gemm_params_for_arrays,
    sgemm_params_for_arrays,
)
from eagle.gemm._scaled import FP8_ARCH as _SCALED_ARCH  # noqa: E402
from eagle.gemm.dtypes import (  # noqa: E402
    OUT_DTYPES,
    PRODUCT_DTYPES,
    SCALED_DTYPES,
    dtype_of,
    product_dtypes,
)
from eagle.gemm.plan import (  # noqa: E402
    LoweredPlan,
    WorkspaceSpec,
    captured_calls,
    captured_gemm_calls,
    matmul_step,
)
from hawk.emit import DTYPES as PLANE_DTYPES  # noqa: E402
from hawk.emit import policy  # noqa: E402

TORCH_FACTS = Path(__file__).with_name("torch_facts.json")
RECORDED = ROOT / "docs" / "_scripts" / "recorded.json"
SIDES = ("host", "device")

#: what each ``math`` of :mod:`eagle.gemm.dtypes` sums in: the dtype of the sums, and the
#: pages' words for it; a math missing here stops the build (say what it is, then build)
SUMS_IN = {
    "fp32": ("float32", "float32"),
    "tf32": ("float32", "float32 over TF32-rounded factors"),
    "fp64": ("float64", "float64"),
    "fast_accum": ("float32", "the tensor cores' own accumulator (fast accumulation)"),
}

#: the pages' words for the routes of :meth:`eagle.plan.AutoPlan.route`
ROUTES = {"loop": "the kernel's loop", "gemm": "one cuBLAS product"}

# -- the dtypes asked about ---------------------------------------------------------------


def candidates() -> tuple[str, ...]:
    """Every dtype name that some table of the code names (planes, products, outputs),
    narrowest first: the dtypes each fact is asked about."""
    names = {d.name for d in PLANE_DTYPES} | set(PRODUCT_DTYPES)
    names |= {out for outs in OUT_DTYPES.values() for out in outs}
    return tuple(sorted(names, key=lambda name: (dtype_of(name).itemsize, name)))


def phrase(names: Iterable[str], joiner: str = "or") -> str:
    """``a``, ``a or b``, ``a, b or c``: names as a sentence lists them."""
    names = list(names)
    if not names:
        raise ValueError("a phrase of no dtype: the code takes none of the candidates")
    if len(names) == 1:
        return names[0]
    return f"{', '.join(names[:-1])} {joiner} {names[-1]}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _refused(probe: Callable[[], Any], *refusals: type[BaseException]) -> bool:
    """True when ``probe()`` raises one of ``refusals``, False when it returns."""
    try:
        probe()
    except refusals:
        return True
    return False


# -- products -----------------------------------------------------------------------------


def partners(dtype: str) -> list[str]:
    """The dtypes the factor ``b`` may have beside an ``a`` of ``dtype`` (its own, or for
    fp8 the dtypes it pairs with): those with which some ``out`` is written."""
    return [
        b
        for b in candidates()
        if any(
            not _refused(lambda b=b, out=out: product_dtypes(dtype, b, out), GemmMappingUnavailable)
            for out in candidates()
        )
    ]


def maths(dtype: str) -> list[str]:
    """The ``math`` values a product of ``dtype`` factors takes, its exact one first."""
    b, out = partners(dtype)[0], out_dtypes(dtype)[0]
    exact = product_dtypes(dtype, b, out)[2]
    others = [
        m
        for m in dict.fromkeys((*policy.MATH, *SUMS_IN))
        if m != exact
        and not _refused(lambda m=m: product_dtypes(dtype, b, out, m), GemmMappingUnavailable)
    ]
    return [exact, *others]


def sums_in(dtype: str) -> str:
    """How a product of ``dtype`` factors sums, every math it takes: ``float32 (exact), or
    float32 over TF32-rounded factors with math="tf32"``."""
    exact, *others = maths(dtype)
    text = SUMS_IN[exact][1]
    if others:
        text += " (exact)"
    for m in others:
        text += f', or {SUMS_IN[m][1]} with `math="{m}"`'
    return text


def rounded(dtype: str) -> bool:
    """Whether a product of ``dtype`` factors sums in a wider dtype than its own and may
    write its own, rounded once."""
    return SUMS_IN[maths(dtype)[0]][0] != dtype and dtype in out_dtypes(dtype)


def out_dtypes(dtype: str) -> list[str]:
    """The ``out`` dtypes a product of ``dtype`` factors writes."""
    b = partners(dtype)[0]
    return [
        out
        for out in candidates()
        if not _refused(lambda out=out: product_dtypes(dtype, b, out), GemmMappingUnavailable)
    ]


def product_dtype_names() -> list[str]:
    """The factor dtypes a product takes: those that pair with some dtype."""
    return [d for d in candidates() if partners(d)]


def product_table() -> str:
    """Factors, what they write, and what they sum in."""
    rows = []
    for dtype in product_dtype_names():
        sums = sums_in(dtype) + (f", rounded once into a {dtype} `out`" if rounded(dtype) else "")
        pairs = partners(dtype)
        factors = dtype if pairs == [dtype] else f"{dtype} (`b`: {phrase(pairs)})"
        rows.append([factors, phrase(out_dtypes(dtype)), sums])
    return _table(["factors `a`, `b`", "`out`", "sums in"], rows)


class _DeviceBuffer:
    """A stand-in for a device array: what the capture calls read off one (its address,
    layout and dtype), with no device behind it. Nothing reads its memory."""

    is_host = False
    device_index = 0
    device = "cuda:0"
    _next = 1 << 20

    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.dtype = dtype_of(dtype)
        self.shape = shape
        self.strides = tuple(int(s) for s in np.empty(shape, self.dtype).strides)
        self.ptr = _DeviceBuffer._next
        _DeviceBuffer._next += 1 << 20


def _product(dtype: str) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], dict[str, bool]]:
    """A product over ``dtype`` factors in a layout its products take, and its flags:
    ``(2, 3) @ (3, 4)`` into an ``out`` of the factors' dtype; for scaled (fp8) factors,
    which take one layout and write a wider ``out``, ``(16, 16) @ (16, 16).T`` beside the
    first dtype they pair with, into the first ``out`` they write."""
    if dtype in SCALED_DTYPES:
        names = (dtype, partners(dtype)[0], out_dtypes(dtype)[0])
        a, b, out = (np.ones((16, 16), dtype_of(name)) for name in names)
        return (a, b, out), {"transpose_b": True}
    a, b, out = (np.ones(shape, dtype_of(dtype)) for shape in ((2, 3), (3, 4), (2, 4)))
    return (a, b, out), {}


def _capture_probe(call: Callable[..., Any], dtype: str, **options: Any) -> bool:
    """True when ``call`` binds a plan of one product over ``dtype`` factors (:func:`_product`)
    to stand-in device buffers."""
    arrays, flags = _product(dtype)
    specs = [
        WorkspaceSpec(name, x.shape, x.dtype.name) for name, x in zip("abc", arrays, strict=True)
    ]
    step = matmul_step("c", a="a", b="b", out="c", **flags)
    plan = LoweredPlan((step,), "gemm", "run_to_run", tuple(specs[:2]), (specs[2],))
    buffers = {name: _DeviceBuffer(spec.shape, spec.dtype) for name, spec in plan.required.items()}
    return not _refused(lambda: call(plan, buffers, **options), GemmMappingUnavailable)


def host_matmul_dtypes() -> list[str]:
    """The factor dtypes ``matmul_step(...).run(bufs, "host")`` takes (:func:`_product`)."""
    from eagle.gemm import MatmulUnavailable

    def run(dtype: str) -> None:
        arrays, flags = _product(dtype)
        step = matmul_step("c", a="a", b="b", out="c", **flags)
        step.run(dict(zip("abc", arrays, strict=True)), "host")

    return [d for d in candidates() if not _refused(lambda d=d: run(d), MatmulUnavailable)]


#: the captured product calls: how each is asked whether it takes factors of a dtype
CAPTURE_CALLS: dict[str, Callable[[str], bool]] = {
    "`handle.sgemm` (params from `sgemm_params_for_arrays`)": lambda d: (
        not _refused(
            lambda: sgemm_params_for_arrays(*_product(d)[0], **_product(d)[1]),
            GemmMappingUnavailable,
        )
    ),
    "`handle.gemm` (params from `gemm_params_for_arrays`)": lambda d: (
        not _refused(
            lambda: gemm_params_for_arrays(*_product(d)[0], **_product(d)[1]),
            GemmMappingUnavailable,
        )
    ),
    "`captured_gemm_calls` (for `handle.sgemm`)": lambda d: _capture_probe(
        captured_gemm_calls, d, operand_class="gemm"
    ),
    "`captured_calls` (for `handle.gemm`)": lambda d: _capture_probe(captured_calls, d),
}


def captured_dtypes(call: str) -> list[str]:
    """The factor dtypes the captured product ``call`` (a key of CAPTURE_CALLS) takes."""
    return [d for d in product_dtype_names() if CAPTURE_CALLS[call](d)]


def captured_table() -> str:
    """Which factor dtypes each captured product call takes."""
    rows = [[call, phrase(captured_dtypes(call))] for call in CAPTURE_CALLS]
    return _table(["call", "factors"], rows)


# -- plans --------------------------------------------------------------------------------


def _route(dtype: str, side: str, **build: Any) -> str | None:
    """The route ``side`` takes for planes of ``dtype`` (None: not a plane dtype)."""
    import eagle.plan

    try:
        return eagle.plan.auto(contraction, **build).route(side, dtype)
    except (ValueError, TypeError):  # a dtype planes do not take (the refusal's kinds)
        return None


@dataclass(frozen=True)
class PlanRoute:
    """Where a plan over planes of one dtype runs each route."""

    dtype: str
    loop: tuple[str, ...]  # the sides that run the kernel's own loop
    gemm: tuple[str, ...]  # the sides that run one product, when the plan opts in


def plan_routes() -> list[PlanRoute]:
    """Each plane dtype: the sides its loop runs on, and those of the GEMM route."""
    found = []
    for dtype in candidates():
        loop = tuple(s for s in SIDES if _route(dtype, s, contraction="loop") == "loop")
        gemm = tuple(
            s for s in SIDES if _route(dtype, s, contraction="gemm", host_route="gemm") == "gemm"
        )
        if loop or gemm:
            found.append(PlanRoute(dtype, loop, gemm))
    return found


def route_dtypes() -> list[str]:
    """The plane dtypes the device's GEMM route takes."""
    return [r.dtype for r in plan_routes() if "device" in r.gemm]


def plane_dtypes() -> list[str]:
    """The dtypes a plan's planes may have."""
    return [r.dtype for r in plan_routes() if r.loop]


def _sides(sides: tuple[str, ...], host_note: str = "") -> str:
    if not sides:
        return "–"
    return " and ".join(f"{s}{host_note if s == 'host' else ''}" for s in sides)


def plan_table() -> str:
    """Per plane dtype: where the loop runs, where the GEMM route runs, what it sums in."""
    rows = [
        [
            r.dtype,
            _sides(r.loop),
            _sides(r.gemm, ' (`host_route="gemm"`)'),
            (sums_in(r.dtype) + (", rounded once into the output" if rounded(r.dtype) else ""))
            if r.gemm
            else "–",
        ]
        for r in plan_routes()
    ]
    header = ["planes", "the kernel's loop", 'GEMM route (`contraction="gemm"`)', "sums in"]
    return _table(header, rows)


# -- eagle.torch --------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchRoute:
    """How ``eagle.torch.function(kernel, contraction)`` runs tensors of one dtype."""

    dtype: str
    cpu: str  # the route CPU tensors take
    cuda_loop: str  # CUDA tensors under contraction="loop"
    cuda_gemm: str  # CUDA tensors under contraction="gemm"


def torch_routes_from_code() -> list[TorchRoute]:
    """Ask ``eagle.torch`` (needs torch): which tensor dtypes its op takes (a call on CPU
    tensors) and which route its plans give them."""
    import torch

    import eagle.torch

    ops = {c: eagle.torch.function(contraction, c) for c in policy.CONTRACTIONS}
    found = []
    for dtype in candidates():
        kind = getattr(torch, dtype, None)
        if kind is None:  # no torch dtype of that name: no tensor can have it
            continue
        planes = {"w": torch.ones(K, M, dtype=kind), "f": torch.ones(K, N, dtype=kind)}
        if _refused(functools.partial(ops["loop"], **planes), TypeError):
            continue
        found.append(
            TorchRoute(
                dtype,
                ops["gemm"].plan.route("host", dtype),
                ops["loop"].plan.route("device", dtype),
                ops["gemm"].plan.route("device", dtype),
            )
        )
    return found


def torch_routes() -> list[TorchRoute]:
    """:func:`torch_routes_from_code`, or where torch is absent what it last recorded."""
    if importlib.util.find_spec("torch") is not None:
        return torch_routes_from_code()
    return [TorchRoute(**row) for row in json.loads(TORCH_FACTS.read_text())]


def torch_table() -> str:
    """Per tensor dtype: the route of CPU tensors and of CUDA tensors under each policy."""
    rows = [
        [r.dtype, ROUTES[r.cpu], ROUTES[r.cuda_loop], ROUTES[r.cuda_gemm]] for r in torch_routes()
    ]
    header = ["tensors", "on the CPU", 'CUDA, `contraction="loop"`', 'CUDA, `contraction="gemm"`']
    return _table(header, rows)


# -- arrays from other frameworks ---------------------------------------------------------

#: the calls that take only eagle Arrays as device operands today; every other call that
#: takes an array also takes other frameworks' arrays. tests/test_docs_facts.py checks that
#: each still refuses one: when a call learns to take them, the test fails; drop it here.
EAGLE_ARRAYS_ONLY: tuple[str, ...] = ()


def foreign_arrays() -> str:
    """Which calls take torch tensors, CuPy arrays and DLPack or CUDA-array-interface
    objects, and which take eagle Arrays only (a sentence)."""
    sentence = (
        "Plans (`plan.run`, `plan.bind`, adjoints) and `eagle.arrays.asarray` take torch "
        "tensors, CuPy arrays and any object with `__cuda_array_interface__` or `__dlpack__` "
        "without a copy"
    )
    if not EAGLE_ARRAYS_ONLY:
        return sentence + ", and so does every other call that takes an array."
    names = [name if name.startswith(("`", "a ")) else f"`{name}`" for name in EAGLE_ARRAYS_ONLY]
    return (
        f"{sentence}. For now {phrase(names, 'and')} take eagle Arrays: wrap another "
        "framework's array with `eagle.arrays.asarray(x)` first (no copy either)."
    )


# -- requirements -------------------------------------------------------------------------


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def dependencies() -> list[str]:
    """The distributions ``pip install`` brings (pyproject's ``dependencies``, by name)."""
    specs = pyproject()["project"]["dependencies"]
    return [re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0] for spec in specs]


def driver() -> tuple[int, int]:
    """The CUDA version and the NVIDIA driver release eagle needs, as its refusal of an older
    driver states them."""
    from eagle.cuda import CudaDriverTooOld

    message = str(CudaDriverTooOld(0))
    needs = re.search(r"needs CUDA (\d+)\.\d+ \(driver (\d+) or newer\)", message)
    if needs is None:
        raise ValueError(f"CudaDriverTooOld no longer says what eagle needs so: {message!r}")
    return int(needs.group(1)), int(needs.group(2))


def python_version() -> str:
    """The oldest Python the package installs on (pyproject's ``requires-python``)."""
    spec = pyproject()["project"]["requires-python"]
    match = re.fullmatch(r">=\s*(\d+\.\d+)", spec)
    if match is None:
        raise ValueError(f"requires-python is {spec!r}; say here how the pages should put it")
    return match.group(1)


# -- the recorded benchmarks --------------------------------------------------------------


def recorded() -> dict[str, Any]:
    """The recorded figures (docs/_scripts/recorded.json), by benchmark script.

    Raises:
        ValueError: an object of the file names one key twice (json keeps the last,
            so the pages would show one entry and the record keep both).
    """
    return json.loads(RECORDED.read_text(), object_pairs_hook=_one_of_each)


def _one_of_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise ValueError(f"{RECORDED.name} names {', '.join(twice)} twice in one object")
    return dict(pairs)


def _plots() -> Any:
    """docs/_scripts/plots.py, for the chip's limits the plots draw."""
    spec = importlib.util.spec_from_file_location("docs_plots", RECORDED.with_name("plots.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the pages' words for the torch variants ``benchmarks/bench_kan.py`` times
TORCH_MODES = {
    "eager": "torch eager",
    "compile": "`torch.compile`",
    "reduce_overhead": '`torch.compile(mode="reduce-overhead")`',
}


def _span(values: Iterable[float], form: str) -> str:
    low, high = min(values), max(values)
    return f"{low:{form}}" if f"{low:{form}}" == f"{high:{form}}" else f"{low:{form}}–{high:{form}}"


def kan_figures() -> dict[str, Any]:
    """The recorded KAN step: eagle's best graph, torch's best variant, and the ratio."""
    kan = recorded()["kan"]
    eagle_ms = min(step["ms"] for step in kan["eagle"]["steps"].values())
    modes = kan["torch"]["modes"]
    best = min(modes, key=lambda mode: modes[mode]["ms"])
    return {
        "date": kan["date"],
        "eagle_ms": f"{eagle_ms:g}",
        "torch_ms": f"{modes[best]['ms']:g}",
        "torch_mode": TORCH_MODES[best],
        "ratio": f"{kan['over_best_torch']:g}",
    }


#: the steps of ``kan_local`` rows, and the pages' words for them
KAN_LOCAL_STEPS = {
    "dense_written": "dense, gradients written",
    "dense_sequenced": "dense, as one `eagle.plan.sequence`",
    "local_by_hand": "local, backward by hand",
    "local_derived": "local, `eagle.diff.reverse`",
    "local_hybrid": "local, `c_bar` as a product",
}


def kan_local_table() -> str:
    """docs/kan.md's table of dense against local KAN steps, from the ``kan_local`` rows of
    the recorded figures (``bench_kan.py`` writes them under ``recorded``); a step not
    measured yet reads "pending"."""
    section = recorded()["kan_local"]
    header = ["samples x inputs -> outputs", "dtype"]
    header += [f"{word}, ms" for word in KAN_LOCAL_STEPS.values()]
    rows = []
    for row in section["rows"]:
        times = [_ms_or_pending(row.get(step)) for step in KAN_LOCAL_STEPS]
        rows.append([row["shape"], row["dtype"], *times])
    where = section.get("device") or "a device not measured yet"
    return _table(header, rows) + f"\n\nOn {where}; whole training steps, one graph each."


#: bench_rebind.py's kinds of graph, and the pages' words for them
REBIND_KINDS = {"hawk": "hawk kernels", "cublas": "routed cuBLAS products"}


def _rebind_rows() -> dict[tuple[str, int], dict[str, float]]:
    """The recorded rebind figures (host µs) by (kind of graph, launches), with
    ``"share"``: every plane's rebind over a capture (the median of the rounds' ratios
    where ``bench_rebind.py`` recorded it, else the ratio of the medians)."""
    return {
        (row["kind"], row["launches"]): {
            **row["us"],
            "share": row.get(
                "all_share", row["us"]["rebind_all"] / row["us"]["capture_instantiate"]
            ),
        }
        for row in recorded()["rebind"]["rows"]
    }


def rebind_table() -> str:
    """docs/benchmarks.md's table of rebinds against capturing again, from the ``rebind``
    figures recorded (``bench_rebind.py``'s rows)."""
    header = ["graph", "launches", "rebind one plane", "every plane, first time",
              "every plane, later", "capture + instantiate", "later / capture"]  # fmt: skip
    rows = []
    for (kind, launches), us in _rebind_rows().items():
        every, capture = us["rebind_all"], us["capture_instantiate"]
        rows.append([REBIND_KINDS[kind], str(launches), f"{us['rebind_one']:.1f}",
                     _us_or_dash(us.get("first_rebind_all")), f"{every:.1f}", f"{capture:.1f}",
                     f"{us['share']:.2f}"])  # fmt: skip
    where = recorded()["rebind"]["device"]
    shares = ", ".join(f"{share:g}" for share in recorded()["rebind"]["products_all_share_runs"])
    return _table(header, rows) + (
        f"\n\nOn {where}; host µs, medians of many calls. The first rebind of every plane "
        "is shown for the products, which are captured again the first time their planes "
        "move; a hawk kernel's first rebind captures nothing. The later rebinds of every "
        "plane and the captures take turns in rounds, and their share is the median of "
        "the rounds' ratios. The later rebind of every "
        f"plane of the largest graph of products, over a capture, in each run recorded: "
        f"{shares}."
    )


def _us_or_dash(value: float | None) -> str:
    """A recorded figure in µs, or "-" where none is recorded."""
    return "-" if value is None else f"{value:.1f}"


def rebind_figures() -> dict[str, str]:
    """The figures the pages quote of the largest recorded graphs (200 launches): a hawk
    plane's rebind in µs, and every plane's rebind of the products over a capture."""
    rows = _rebind_rows()
    launches = max(n for _, n in rows)
    hawk, products = rows["hawk", launches], rows["cublas", launches]
    return {
        "launches": str(launches),
        "hawk_one_us": f"{hawk['rebind_one']:.0f}",
        "products_one_us": f"{products['rebind_one']:.0f}",
        "products_one_speedup": f"{products['capture_instantiate'] / products['rebind_one']:.0f}",
        "products_all_share": f"{products['share']:.2f}",
        "products_all_share_range": _share_range(recorded()["rebind"]["products_all_share_runs"]),
        "products_all_share_runs": str(len(recorded()["rebind"]["products_all_share_runs"])),
    }


def _share_range(shares: list[float]) -> str:
    """The lowest and highest of several runs' shares, as "0.27–0.37"."""
    return f"{min(shares):.2f}–{max(shares):.2f}"


def kan_sweep_table() -> str:
    """The sweep of ``bench_kan.py --sweep`` as recorded: per dtype, samples and width, the
    dense step and the fastest local step at each number of intervals, ms."""
    section = recorded()["kan_sweep"]
    cells: dict[tuple[str, int, int], dict[int, str]] = {}
    for row in section["rows"]:
        key = (row["dtype"], row["samples"], row["width"])
        cells.setdefault(key, {})[row["intervals"]] = (
            f"{row['dense_written']} / {row['best_local']}"
        )
    grids = sorted({row["intervals"] for row in section["rows"]})
    header = ["dtype", "samples", "inputs = outputs", *(f"G = {g}: dense / local" for g in grids)]
    rows = [
        [dtype, str(samples), str(width), *(found.get(g, "-") for g in grids)]
        for (dtype, samples, width), found in cells.items()
    ]
    return _table(header, rows) + (
        f"\n\nOn {section['device']}; ms per training step, one graph each: the dense step "
        "with written gradients, and the fastest of the three local steps."
    )


#: bench_scatter.py's cases, and the pages' words for them
SCATTER_CASES = {
    "histogram": "histogram of 10⁸ float32 samples, 1,024 bins",
    "deposit random": "deposit of 10⁷ particles on 1024², random order",
    "deposit sorted": "the same deposit, particles sorted by cell",
    "gather (adjoint)": "its adjoint for the charges (`eagle.diff.reverse`)",
}


def scatter_table() -> str:
    """docs/benchmarks.md's table of scatter-adds, from the ``scatter`` figures recorded:
    eagle's fastest side and torch's fastest side of each case, and their ratio."""
    section, fastest = recorded()["scatter"], _plots().scatter_fastest
    rows = []
    for case, words in SCATTER_CASES.items():
        ours, best = fastest(section, case)
        name = best[1] if "." in best[1] else best[1].removeprefix("torch ")
        rows.append(
            [words, f"{ours[0]:.3f}", f"{best[0]:.3f} (`{name}`)", f"{best[0] / ours[0]:.2f}"]
        )
    header = ["case", "eagle, ms", "torch's fastest, ms", "torch / eagle"]
    return _table(header, rows) + f"\n\nOn {section['device']}, medians of 20 CUDA-event timings."


#: the ways ``benchmarks/bench_torch.py`` runs its KAN training step, and the pages' words
TORCH_STEP_MODES = {
    "eager": "eager",
    "compile": "`torch.compile(fullgraph=True)`",
    "reduce-overhead": '`torch.compile(mode="reduce-overhead")`',
    "cuda.graph": "the whole step in one `torch.cuda.graph`",
}


def torch_step_table() -> str:
    """docs/torch.md's table of the eager KAN training step (``bench_torch.py``), eagle's
    ops against torch's closed form in each mode, from the ``torch_step`` figures
    recorded."""
    section = recorded()["torch_step"]
    wall = section["wall_ms"]
    rows = [
        [words, f"{wall[f'eagle {mode}']:g}", f"{wall[f'torch {mode}']:g}"]
        for mode, words in TORCH_STEP_MODES.items()
    ]
    header = ["the step runs", "eagle's ops, ms", "torch's closed form, ms"]
    return _table(header, rows) + (
        f"\n\nOn {section['device']}, {section['date']}: wall milliseconds per step over 50 "
        "steps, without a synchronize; each figure is the median of five rounds in which "
        "every variant takes its turn."
    )


def _ms_or_pending(value: float | None) -> str:
    return "pending" if value is None else f"{value:g}"


def headline_figures() -> dict[str, str]:
    """The recorded figures the short versions quote (the benchmarks' headline, the landing
    page's bullets), as the pages print them."""
    data, limits = recorded(), _plots()
    products = data["gemm"]["rows"]
    ratios = [row["eagle"] / row["torch"] for row in products]
    bf16 = max(row["eagle"] for row in products if "bfloat16" in row["shape"])
    largest = data["route"]["rows"][-1]
    route = largest["ms"]
    faster = [r["torch_autograd_ms"] / r["routed_adjoint_ms"] for r in data["diff"]["device"]]
    bandwidth = [row["tb_per_s"] for row in data["hawk"]["device"]["bandwidth"]]
    over, step = data["torch"]["over_eager"], data["torch"]["host_us"]["mixed step"]
    return {
        "gemm_ratio": _span(ratios, ".2f"),
        "bf16_share": f"{bf16 / limits.DENSE16_TFLOPS:.0%}",
        "route_routed_ms": f"{route['routed']:g}",
        "route_cublas_ms": f"{route['raw_cublas']:g}",
        "route_size": largest["shape"].rsplit("=", 1)[1],
        "route_over_loop": f"{route['loop'] / route['routed']:.0f}",
        "adjoint_over_torch": _span(faster, ".1f"),
        "bandwidth": _span(bandwidth, ".2f"),
        "bandwidth_share": _span([b / limits.HBM_TB_S * 100 for b in bandwidth], ".0f"),
        "hbm": f"{limits.HBM_TB_S:g}",
        "torch_forward": f"{over['forward']:g}",
        "torch_backward": f"{over['forward+backward']:g}",
        "graph_step_us": f"{step['eagle graph replay']:g}",
        "eager_step_us": f"{step['torch eager']:g}",
    }


def bench_headline() -> str:
    """The benchmarks' short version, from the recorded figures: one bullet per claim, then
    the dates they were recorded."""
    h, kan = headline_figures(), kan_figures()
    dates = sorted({s["date"] for s in recorded().values() if s.get("date")})
    lines = [
        "- **A captured product runs at the speed of `torch.mm`** in every precision "
        f"({h['gemm_ratio']} times its TFLOP/s: both call the same cuBLAS kernels); "
        f"bfloat16 reaches {h['bf16_share']} of the dense tensor-core limit.",
        "- **A hawk contraction on the GEMM route** runs at the speed of cuBLAS called "
        f"directly ({h['route_routed_ms']} against {h['route_cublas_ms']} ms at "
        f"R = U = B = {h['route_size']}), {h['route_over_loop']} times faster than its own "
        f"loop; its routed gradient is {h['adjoint_over_torch']} times faster than torch's "
        "autograd.",
        f"- **A memory-bound hawk kernel** moves {h['bandwidth']} TB/s "
        f"({h['bandwidth_share']}% of the datasheet's {h['hbm']} TB/s).",
        f"- **A KAN layer's training step**, captured in one graph, takes "
        f"**{kan['eagle_ms']} ms**, {kan['ratio']} times faster than the best torch variant "
        f"({kan['torch_mode']}, {kan['torch_ms']} ms).",
        f"- **A hawk kernel as a torch op** (`eagle.torch`) costs {h['torch_forward']} times "
        "torch eager's host time per forward call and "
        f"**{h['torch_backward']}** times per forward and backward; a mixed step "
        f"replayed from one `torch.cuda.graph` costs {h['graph_step_us']} µs of "
        f"host time against {h['eager_step_us']} µs eager.",
    ]
    recorded_line = f"Recorded {' to '.join(sorted({dates[0], dates[-1]}))}."
    return "\n".join([*lines, "", recorded_line])


# -- GPU architectures -----------------------------------------------------------------

#: the oldest architecture CUDA 13 compiles for and runs (Turing)
CUDA_OLDEST = "sm_75"

#: the oldest architecture with fp8 tensor cores, as eagle's fp8 products check it
FP8_ARCH = "sm_{}{}".format(*_SCALED_ARCH)

#: per feature the pages name: the oldest GPU architecture it needs, and why. Every product
#: dtype must have a row (a dtype missing here stops the build: say what it needs, then
#: build); a row with no product dtype behind it stops it too.
ARCHITECTURES: dict[str, tuple[str, str]] = {
    "hawk kernels, every plane dtype": (
        CUDA_OLDEST,
        "the kernel is compiled for the device's own architecture; 16-bit table adds use "
        "the hardware's atomic add where there is one (float16 from sm_70, bfloat16 from "
        "sm_90) and a compare-and-swap loop before",
    ),
    "float32 products": (CUDA_OLDEST, "cuBLAS Sgemm"),
    "float64 products": (CUDA_OLDEST, "cuBLAS Dgemm"),
    "float16 products": (CUDA_OLDEST, "cuBLAS GemmEx on tensor cores"),
    "bfloat16 products": ("sm_80", "cuBLAS GemmEx; bfloat16 tensor cores from Ampere"),
    'float32 products with `math="tf32"`': ("sm_80", "TF32 tensor cores from Ampere"),
    "float8_e4m3fn products": (FP8_ARCH, "cuBLASLt on fp8 tensor cores, from Ada and Hopper"),
    "float8_e5m2 products": (FP8_ARCH, "cuBLASLt on fp8 tensor cores, from Ada and Hopper"),
}


def architecture_table() -> str:
    """Each feature and the oldest GPU architecture it needs, checked against the product
    dtypes the code takes."""
    named = {feature.split(" products")[0] for feature in ARCHITECTURES if "products" in feature}
    missing = set(product_dtype_names()) - named
    if missing:
        raise KeyError(f"no architecture for {sorted(missing)} products: add them to ARCHITECTURES")
    stale = named - set(product_dtype_names())
    if stale:
        raise KeyError(
            f"ARCHITECTURES names {sorted(stale)} products, which the code does not take"
        )
    rows = [[feature, f"{arch} or newer", why] for feature, (arch, why) in ARCHITECTURES.items()]
    return _table(["feature", "GPU architecture", "why"], rows)


def architecture_summary() -> str:
    """The architectures in a sentence: what runs on every GPU CUDA 13 supports, and what
    needs a newer one."""
    architecture_table()  # the same checks against the product dtypes
    newer: dict[str, list[str]] = {}
    for feature, (arch, _) in ARCHITECTURES.items():
        if arch != CUDA_OLDEST:
            newer.setdefault(arch, []).append(feature)
    text = f"every GPU CUDA 13 supports ({CUDA_OLDEST} and newer)"
    if newer:
        needs = "; ".join(
            f"{phrase(features, 'and')} need {arch} or newer"
            for arch, features in sorted(newer.items())
        )
        text += f", except that {needs}"
    return text


# -- the release ----------------------------------------------------------------------------


def version() -> str:
    """The package version (``hawk/_version.py``, the one place it is written)."""
    from hawk._version import __version__

    return __version__


def status() -> str:
    """What the version says about stability, in a phrase."""
    major = int(version().split(".")[0])
    if major == 0:
        return (
            "an early release (0.x): names and behaviour may still change between minor "
            "versions, and every change is in the changelog"
        )
    return f"a stable release: the API changes only with a new major version ({major + 1}.0)"


# -- what the pages use -------------------------------------------------------------------


@functools.cache
def substitutions() -> dict[str, str]:
    """The MyST substitutions the pages use, by name."""
    routes = torch_routes()
    return {
        "product_table": product_table(),
        "captured_table": captured_table(),
        "plan_routes": plan_table(),
        "torch_routes": torch_table(),
        "plane_dtypes": phrase(plane_dtypes()),
        "route_dtypes": phrase(route_dtypes()),
        "matmul_dtypes": phrase(host_matmul_dtypes()),
        "sgemm_dtypes": phrase(captured_dtypes(next(iter(CAPTURE_CALLS)))),
        "torch_dtypes": phrase(r.dtype for r in routes),
        "torch_gemm_dtypes": phrase(r.dtype for r in routes if r.cuda_gemm == "gemm"),
        "flag_dtypes": phrase(FLAG_DTYPES),
        "foreign_arrays": foreign_arrays(),
        "driver": "a CUDA {} driver ({} or newer)".format(*driver()),
        "python": python_version(),
        "dependencies": phrase((f"`{name}`" for name in dependencies()), "and"),
        "bench_headline": bench_headline(),
        "version": version(),
        "status": status(),
        "bench_gemm_ratio": headline_figures()["gemm_ratio"],
        "product_dtypes": phrase(product_dtype_names()),
        "architectures": architecture_table(),
        "architecture_summary": architecture_summary(),
        **{f"kan_{key}": value for key, value in kan_figures().items() if key != "date"},
        "kan_local_table": kan_local_table(),
        "kan_sweep_table": kan_sweep_table(),
        "scatter_table": scatter_table(),
        "rebind_table": rebind_table(),
        **{f"rebind_{key}": value for key, value in rebind_figures().items()},
        "torch_step_table": torch_step_table(),
    }


def main() -> None:
    """Record what ``eagle.torch`` decides, for builds without torch."""
    rows = [r.__dict__ for r in torch_routes_from_code()]
    TORCH_FACTS.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {TORCH_FACTS}")


if __name__ == "__main__":
    main()
