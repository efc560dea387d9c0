# ruff: noqa: F821, F841, UP037
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["row":R], which pyflakes reads as forward references (F821, UP037).
"""The hawk test kernels, each with fresh inputs and a hand-written numpy reference.

Together they cover every construct of the language: params, branches
(if/elif/else, conditional expressions, and/or/not), loops with several
carries (and a negative step), nested loops, flat and named tables,
``split_index`` (of one extent and of two) and ``sample_index``, several outputs, read-modify-write
outputs, int arithmetic and casts, every ``hawk.math`` function, and
``Mutable[Table]`` adds (gathered, uniform and masked).

Each :class:`Case` makes planes with ``make(rng, dtype)`` and gives the
expected values of the planes the kernel writes with ``reference(planes)``,
computed from copies of the inputs (in float64, or in the kernel's dtype
where a discrete choice such as a comparison depends on rounding).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import hawk
from hawk import math as hm

Planes = dict[str, np.ndarray]


@dataclass(frozen=True)
class Case:
    name: str
    kernel: hawk.Kernel
    make: Callable[[np.random.Generator, np.dtype], Planes]
    reference: Callable[[Planes], Planes]
    #: outputs read before they are written (their initial values matter)
    read_first: tuple[str, ...] = ()


def _normal(rng: np.random.Generator, shape: tuple[int, ...] | int, dtype: np.dtype) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _poison(shape: tuple[int, ...] | int, dtype: np.dtype) -> np.ndarray:
    return np.full(shape, np.nan, dtype=dtype)


# -- 1. a param and a read-modify-write output --------------------------------------------


@hawk.kernel
def saxpy(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + y


def _saxpy_make(rng, dtype):
    return {
        "a": np.array([rng.uniform(0.5, 2.0)], dtype),
        "x": _normal(rng, 1000, dtype),
        "y": _normal(rng, 1000, dtype),
    }


def _saxpy_ref(p):
    return {"y": p["a"].astype(np.float64)[0] * p["x"] + p["y"]}


# -- 2. the contraction of DESIGN.md: named tables, split_index, a carried fold -----------

R, U, B = 16, 8, 12


@hawk.kernel
def contract(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)  # lane = sample * U + unit
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = acc


def _contract_make(rng, dtype):
    return {
        "w": _normal(rng, (R, U), dtype),
        "f": _normal(rng, (R, B), dtype),
        "y": _poison(B * U, dtype),
    }


def _contract_ref(p):
    w, f = p["w"].astype(np.float64), p["f"].astype(np.float64)
    return {"y": (f.T @ w).reshape(-1)}


# -- 3. branches: if/elif/else, and/not, a conditional expression, two outputs ------------


@hawk.kernel
def branches(
    x: hawk.Scalar, lo: hawk.Param, y: hawk.Mutable[hawk.Scalar], z: hawk.Mutable[hawk.Scalar]
):
    if x < lo:
        t = lo - x
        k = 1
    elif x > 0.5 and not x > 1.5:
        t = x * x
        k = 2
    else:
        t = -x
        k = 3
    y = t + k
    z = 0.5 if x > 0 or x < -2.0 else z


def _branches_make(rng, dtype):
    return {
        "x": rng.uniform(-3, 3, 2000).astype(dtype),
        "lo": np.array([-1.0], dtype),
        "y": _poison(2000, dtype),
        "z": _normal(rng, 2000, dtype),
    }


def _branches_ref(p):
    x, lo = p["x"].astype(np.float64), float(p["lo"][0])
    first, second = x < lo, (x > 0.5) & ~(x > 1.5)
    t = np.where(first, lo - x, np.where(second, x * x, -x))
    k = np.where(first, 1, np.where(second, 2, 3))
    z = np.where((x > 0) | (x < -2.0), 0.5, p["z"])
    return {"y": t + k, "z": z}


# -- 4. a loop with two carries and a negative step; a flat table; two outputs ------------

K = 7


@hawk.kernel
def horner(
    c: hawk.Table, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], dy: hawk.Mutable[hawk.Scalar]
):
    """The polynomial sum(c[k] x**k) and its derivative, by Horner's rule."""
    p = 0.0
    d = 0.0
    for k in range(K - 1, -1, -1):
        d = d * x + p
        p = p * x + c.at(k)
    y = p
    dy = d


def _horner_make(rng, dtype):
    return {
        "c": _normal(rng, K, dtype),
        "x": rng.uniform(-1.2, 1.2, 500).astype(dtype),
        "y": _poison(500, dtype),
        "dy": _poison(500, dtype),
    }


def _horner_ref(p):
    coefficients = p["c"].astype(np.float64)[::-1]
    x = p["x"].astype(np.float64)
    return {"y": np.polyval(coefficients, x), "dy": np.polyval(np.polyder(coefficients), x)}


# -- 5. nested loops over named tables, sample_index ---------------------------------------

NI, NJ, NS = 5, 6, 40


@hawk.kernel
def nested(
    m: hawk.Table["i":NI, "j":NJ],
    u: hawk.Table["sample":NS, "i":NI],
    v: hawk.Scalar,
    y: hawk.Mutable[hawk.Scalar],
):
    s = hm.sample_index()
    acc = 0.0
    for i in range(NI):
        row = 0.0
        for j in range(NJ):
            row = row + m.at(i=i, j=j) * (j + 1)
        acc = acc + u.at(sample=s, i=i) * row
    y = acc * v


def _nested_make(rng, dtype):
    return {
        "m": _normal(rng, (NI, NJ), dtype),
        "u": _normal(rng, (NS, NI), dtype),
        "v": _normal(rng, NS, dtype),
        "y": _poison(NS, dtype),
    }


def _nested_ref(p):
    m, u = p["m"].astype(np.float64), p["u"].astype(np.float64)
    return {"y": (u @ (m @ np.arange(1, NJ + 1))) * p["v"]}


# -- 6. every math function, ** and a module constant ----------------------------------------


@hawk.kernel
def mathfns(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    a = hm.abs(x) + 0.5
    e = hm.exp(-a) + hm.log(a) + hm.sqrt(a) + hm.sin(x * math.pi) + hm.cos(x) + hm.tanh(x)
    y = e + hm.minimum(x, 0.25) + hm.maximum(x, -0.25) + hm.pow(a, 1.5) + a**2 + hm.abs(-3)


def _mathfns_make(rng, dtype):
    return {"x": rng.uniform(-2, 2, 3000).astype(dtype), "y": _poison(3000, dtype)}


def _mathfns_ref(p):
    x = p["x"].astype(np.float64)
    a = np.abs(x) + 0.5
    e = np.exp(-a) + np.log(a) + np.sqrt(a) + np.sin(x * np.pi) + np.cos(x) + np.tanh(x)
    return {"y": e + np.minimum(x, 0.25) + np.maximum(x, -0.25) + a**1.5 + a**2 + 3}


# -- 7. int arithmetic (Python's floor semantics), casts, real // and % ---------------------


@hawk.kernel
def intops(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar], k: hawk.Mutable[hawk.Scalar]):
    i = hm.sample_index()
    q = i // 3
    r = i % 3
    n = -i // 4
    m = -i % 4
    j = int(x * 8.0)
    y = float(q) + r * 0.5 + x // 0.25 + x % 0.25
    k = n + m + j + hm.minimum(q, 5) + hm.maximum(r, 1) + hm.abs(n)


def _intops_make(rng, dtype):
    # exact binary fractions, so every floor and truncation is the same in float32
    x = (rng.integers(-40, 40, 300) + rng.integers(1, 8, 300) / 8.0 * 0.5) / 4.0
    return {"x": x.astype(dtype), "y": _poison(300, dtype), "k": _poison(300, dtype)}


def _intops_ref(p):
    x = p["x"].astype(np.float64)
    i = np.arange(x.size)
    q, r, n, m = i // 3, i % 3, -i // 4, -i % 4
    j = np.trunc(x * 8.0)
    y = q + r * 0.5 + np.floor_divide(x, 0.25) + np.remainder(x, 0.25)
    return {"y": y, "k": n + m + j + np.minimum(q, 5) + np.maximum(r, 1) + np.abs(n)}


# -- 8. Mutable[Table] adds: gathered, masked, uniform index --------------------------------

NB = 8


@hawk.kernel
def histogram(
    x: hawk.Scalar,
    lo: hawk.Param,
    counts: hawk.Mutable[hawk.Table],
    stats: hawk.Mutable[hawk.Table["what":3]],
):
    b = int((x - lo) * 4.0)
    if b >= 0 and b < NB:
        counts.add(b, value=1.0)
        stats.add(what=0, value=1.0)
    stats.add(what=1, value=x)
    stats.add(what=2, value=2.0)


def _histogram_make(rng, dtype):
    x = (rng.integers(-6, 2 * NB + 6, 4000) + 0.5) / 8.0  # exact, never on a bin edge
    return {
        "x": x.astype(dtype),
        "lo": np.array([0.0], dtype),
        "counts": _normal(rng, NB, dtype),
        "stats": _normal(rng, 3, dtype),
    }


def _histogram_ref(p):
    x = p["x"].astype(np.float64)
    bins = np.trunc((x - float(p["lo"][0])) * 4.0).astype(np.int64)
    inside = (bins >= 0) & (bins < NB)
    counts = p["counts"].astype(np.float64)
    np.add.at(counts, bins[inside], 1.0)
    stats = p["stats"].astype(np.float64) + np.array([inside.sum(), x.sum(), 2.0 * x.size])
    return {"counts": counts, "stats": stats}


# -- 9. branches inside loops (varying and uniform), a loop inside a branch ----------------

KB, UB = 6, 5


@hawk.kernel
def loop_branch(w: hawk.Table["k":KB, "unit":UB], x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    unit = hm.sample_index() % UB
    best = -1.0e30
    arg = 0
    first = 0.0
    for k in range(KB):
        v = w.at(k=k, unit=unit) * x
        if v > best:
            best = v
            arg = k
        if k == 0:
            first = v
    if x > 0.0:
        s = 0.0
        for k in range(KB):
            s += w.at(k=k, unit=unit)
    else:
        s = x
    y = best + arg + first + s


def _loop_branch_make(rng, dtype):
    return {
        "w": _normal(rng, (KB, UB), dtype),
        "x": _normal(rng, 200, dtype),
        "y": _poison(200, dtype),
    }


def _loop_branch_ref(p):
    w, x = p["w"], p["x"]
    unit = np.arange(x.size) % UB
    # in the kernel's compute dtype (16-bit planes compute in float32), so the argmax agrees
    real = np.float64 if w.dtype == np.float64 else np.float32
    values = (w.astype(real)[:, unit] * x.astype(real)).astype(np.float64)
    arg = np.argmax(values, axis=0)
    s = np.where(x > 0, w.astype(np.float64)[:, unit].sum(axis=0), x)
    return {"y": values.max(axis=0) + arg + values[0] + s}


# -- 10. a loop carry that starts uniform and varies after one step, added to a table ------

KM = 4


@hawk.kernel
def moments(x: hawk.Scalar, a: hawk.Param, m: hawk.Mutable[hawk.Table["power":KM]]):
    """m[k] += the sum over lanes of a * x**k (the carry is a on every lane at k = 0)."""
    term = a
    for k in range(KM):
        m.add(power=k, value=term)
        term = term * x


def _moments_make(rng, dtype):
    return {
        "x": rng.uniform(-1, 1, 300).astype(dtype),
        "a": np.array([1.5], dtype),
        "m": _normal(rng, KM, dtype),
    }


def _moments_ref(p):
    x, a = p["x"].astype(np.float64), float(p["a"][0])
    return {"m": p["m"].astype(np.float64) + [a * np.sum(x**k) for k in range(KM)]}


# -- 11. a three-way split of the lane: the elements of a 3-D table in row-major order -----

BA, BB, BC = 3, 4, 5


@hawk.kernel
def blocks(t: hawk.Table["a":BA, "b":BB, "c":BC], y: hawk.Mutable[hawk.Scalar]):
    i, j, k = hm.split_index(BB, BC)  # lane = (i * BB + j) * BC + k
    y = t.at(a=i, b=j, c=k) * 2.0 + float(i * 100 + j * 10 + k)


def _blocks_make(rng, dtype):
    return {"t": _normal(rng, (BA, BB, BC), dtype), "y": _poison(BA * BB * BC, dtype)}


def _blocks_ref(p):
    i, j, k = np.unravel_index(np.arange(BA * BB * BC), (BA, BB, BC))
    return {"y": p["t"].astype(np.float64).reshape(-1) * 2.0 + (i * 100 + j * 10 + k)}


CASES = [
    Case("saxpy", saxpy, _saxpy_make, _saxpy_ref, read_first=("y",)),
    Case("contract", contract, _contract_make, _contract_ref),
    Case("branches", branches, _branches_make, _branches_ref, read_first=("z",)),
    Case("horner", horner, _horner_make, _horner_ref),
    Case("nested", nested, _nested_make, _nested_ref),
    Case("mathfns", mathfns, _mathfns_make, _mathfns_ref),
    Case("intops", intops, _intops_make, _intops_ref),
    Case("histogram", histogram, _histogram_make, _histogram_ref, read_first=("counts", "stats")),
    Case("loop_branch", loop_branch, _loop_branch_make, _loop_branch_ref),
    Case("moments", moments, _moments_make, _moments_ref, read_first=("m",)),
    Case("blocks", blocks, _blocks_make, _blocks_ref),
]

#: relative tolerance of a result against the float64 reference, per dtype
TOLERANCE = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 2e-5}


def written(case: Case) -> list[str]:
    """The planes the kernel writes."""
    return [p.name for p in case.kernel.planes if p.kind in ("output", "accumulator")]


def signature(case: Case, dtype: str | np.dtype) -> dict[str, str | np.dtype]:
    """Every plane of the kernel in ``dtype``, as the emitters take it."""
    return {p.name: dtype for p in case.kernel.planes}
