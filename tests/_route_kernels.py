# ruff: noqa: F821, F841, UP037
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["row":R], which pyflakes reads as forward references (F821, UP037).
"""Contraction kernels for the recognition and route tests, and a maker of contractions.

The extents differ from one another (R, U, B = 12, 5, 7), so a transposed or
swapped product cannot pass for the right one. :func:`make_contract` writes a
two-table contraction with a chosen layout (table axis orders, term order, lane
order, extents) as source and traces it, so tests can draw many of them.
"""

from __future__ import annotations

import itertools
import linecache

import numpy as np

import hawk
from hawk import math as hm

R, U, B = 12, 5, 7


# -- fits the route --------------------------------------------------------------------------


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


@hawk.kernel
def contract_other_order(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    unit, sample = hm.split_index(B)  # lane = unit * B + sample
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = acc


@hawk.kernel
def contract_direct(
    w: hawk.Table["unit":U, "row":R],
    f: hawk.Table["sample":B, "row":R],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    y = 0.0
    for r in range(R):
        product = f.at(sample=sample, row=r) * w.at(unit=unit, row=r)
        y += product


# -- recognised, but not the route ----------------------------------------------------------


@hawk.kernel
def transformed(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 0.0
    for r in range(R):
        acc = acc + hm.exp(w.at(row=r, unit=unit)) * f.at(row=r, sample=sample)
    y = acc


@hawk.kernel
def two_outputs(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
    z: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = acc
    z = 2.0 * acc


@hawk.kernel
def gathered(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    order: hawk.Table["row":R],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=int(order.at(row=r)), unit=unit) * f.at(row=r, sample=sample)
    y = acc


@hawk.kernel
def literal_stride(
    w: hawk.Table,
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(r * U + unit) * f.at(row=r, sample=sample)
    y = acc


@hawk.kernel
def three_operands(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    s: hawk.Table["row":R],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample) * s.at(row=r)
    y = acc


@hawk.kernel
def interleaved_lanes(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    lane = hm.sample_index()
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=lane % U) * f.at(row=r, sample=lane % B)
    y = acc


@hawk.kernel
def row_sum(w: hawk.Table["row":R, "unit":U], y: hawk.Mutable[hawk.Scalar]):
    unit = hm.sample_index()
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit)
    y = acc


@hawk.kernel
def not_affine(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r * r % R, unit=unit) * f.at(row=r, sample=sample)
    y = acc


@hawk.kernel
def reversed_walk(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=R - 1 - r, unit=unit) * f.at(row=r, sample=sample)
    y = acc


@hawk.kernel
def partial_range(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 0.0
    for r in range(1, R):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = acc


@hawk.kernel
def gram(w: hawk.Table["row":R, "unit":U], y: hawk.Mutable[hawk.Scalar]):
    i, j = hm.split_index(U)
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=i) * w.at(row=r, unit=j)
    y = acc


@hawk.kernel
def offset_start(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 1.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = acc


# -- outside the family ----------------------------------------------------------------------


@hawk.kernel
def max_fold(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = -1.0e30
    for r in range(R):
        acc = hm.maximum(acc, w.at(row=r, unit=unit) * f.at(row=r, sample=sample))
    y = acc


@hawk.kernel
def scaled_output(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = 0.5 * acc


@hawk.kernel
def no_fold(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = 2.0 * x + 1.0


@hawk.kernel
def fold_without_tables(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
    for r in range(R):
        acc = acc + x * r
    y = acc


# -- neighbours in a graph -------------------------------------------------------------------


@hawk.kernel
def double(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = 2.0 * x


@hawk.kernel
def square(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = x * x + 1.0


# -- inputs ------------------------------------------------------------------------------------


def planes(kernel: hawk.Kernel, rng: np.random.Generator, dtype=np.float64) -> dict:
    """Fresh random planes for one of this module's kernels (outputs poisoned with NaN)."""
    values: dict[str, np.ndarray] = {}
    lanes = {row_sum: U, gram: U * U}.get(kernel, B * U)
    for plane in kernel.planes:
        if plane.kind == "table" and plane.name == "order":
            values[plane.name] = rng.permutation(R).astype(dtype)
        elif plane.kind == "table" and plane.axes is None:
            values[plane.name] = rng.standard_normal(R * U).astype(dtype)
        elif plane.kind == "table":
            values[plane.name] = rng.standard_normal(plane.shape).astype(dtype)
    for plane in kernel.planes:
        if plane.kind == "output":
            values[plane.name] = np.full(lanes, np.nan, dtype)
        elif plane.kind == "input":
            values[plane.name] = rng.standard_normal(lanes).astype(dtype)
    return values


# -- made to order ---------------------------------------------------------------------------

_made = itertools.count()

_TEMPLATE = """\
@hawk.kernel
def made(
    w: hawk.Table[{w_axes}],
    f: hawk.Table[{f_axes}],
    y: hawk.Mutable[hawk.Scalar],
):
    {major}, {minor} = hm.split_index({n})
    acc = 0.0
    for r in range({R}):
        acc = acc + {first} * {second}
    y = acc
"""


def make_contract(
    R: int,
    U: int,
    B: int,
    *,
    w_reduce_first: bool = True,
    f_reduce_first: bool = True,
    sample_major: bool = True,
    w_first: bool = True,
) -> hawk.Kernel:
    """``y[lane] = sum_r w[r, unit] * f[r, sample]`` in the layout asked for.

    Args:
        R, U, B: the reduce extent, and the free extents of ``w`` and ``f``.
        w_reduce_first: ``w`` is declared ``("row", "unit")`` (else ``("unit", "row")``).
        f_reduce_first: ``f`` is declared ``("row", "sample")`` (else ``("sample", "row")``).
        sample_major: lane = sample * U + unit (else unit * B + sample).
        w_first: the term reads ``w`` first.
    """
    w_axes = [f'"row":{R}', f'"unit":{U}']
    f_axes = [f'"row":{R}', f'"sample":{B}']
    if not w_reduce_first:
        w_axes.reverse()
    if not f_reduce_first:
        f_axes.reverse()
    w_read, f_read = "w.at(row=r, unit=unit)", "f.at(row=r, sample=sample)"
    source = _TEMPLATE.format(
        w_axes=", ".join(w_axes),
        f_axes=", ".join(f_axes),
        major="sample" if sample_major else "unit",
        minor="unit" if sample_major else "sample",
        n=U if sample_major else B,
        R=R,
        first=w_read if w_first else f_read,
        second=f_read if w_first else w_read,
    )
    filename = f"<route kernel {next(_made)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"hawk": hawk, "hm": hm}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["made"]


def reference(kernel_planes: dict, *, sample_major: bool = True) -> np.ndarray:
    """The float64 result of a :func:`make_contract` kernel (or ``contract``), lane by lane.

    ``w`` and ``f`` are given in their declared shapes; pass them as (R, U) and (R, B).
    """
    w = np.asarray(kernel_planes["w"], np.float64)
    f = np.asarray(kernel_planes["f"], np.float64)
    product = f.T @ w  # (B, U): element (sample, unit)
    return (product if sample_major else product.T).reshape(-1)


@hawk.kernel
def named_like_a_gradient(
    w: hawk.Table["row":R, "unit":U],
    w_bar: hawk.Table["row":R, "sample":B],  # the adjoint names w's gradient w_bar2
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit) * w_bar.at(row=r, sample=sample)
    y = acc


@hawk.kernel
def contract_beside(
    x: hawk.Scalar,  # planes the product does not read (left over from a refactoring)
    a: hawk.Param,
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)  # lane = sample * U + unit
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = acc


@hawk.kernel
def contract_int_zero(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 0  # an int zero: the real fold starts from float(0)
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = acc
