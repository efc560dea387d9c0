"""Recognise a kernel that is one contraction: :func:`recognize`, :func:`lane_layout`.

A kernel is in the family when one of its ``Mutable[Scalar]`` outputs is
assigned one additive fold over one loop at the top of the kernel, whose
term reads tables::

    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = acc

:func:`recognize` describes the fold as a
:class:`~hawk.records.RecognizedContraction` (plain records, defined in
:mod:`hawk.records` and re-exported by ``eagle.gemm.contraction``), which
:func:`eagle.gemm.plan.lower_dense_gemm` lowers to matrix products.
:func:`lane_layout` says whether the lanes enumerate that product's elements
in row-major order, so that the product can be written straight into the
output's lane plane. Both only read the IR.

Operands are listed so that the output is the product ``op(a) @ op(b)``: when
the lanes are the product in row-major order (``sample, unit =
hm.split_index(U)``, ``f`` read at ``sample`` and ``w`` at ``unit``), ``a`` is
the table addressed by ``lane // n`` (here ``f``) and ``b`` the one addressed
by ``lane % n``; otherwise they are listed in the order the term reads them.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hawk import ir
from hawk.errors import HawkTypeError
from hawk.records import ContractionOperand, LaneLayout, RecognizedContraction, TermForm
from hawk.trace import Kernel

__all__ = [
    "ContractionOperand",
    "LaneLayout",
    "RecognizedContraction",
    "lane_layout",
    "recognize",
]

_OUTPUT_KINDS = {"output": "mutable", "accumulator": "accumulator"}
_ROLES = "abcdefgh"


def recognize(kernel: Kernel | ir.KernelIR) -> RecognizedContraction | None:
    """The contraction ``kernel`` computes, or None when it is not one.

    The first output (in declaration order) assigned one additive fold
    ``carry = carry + term`` over one top-level loop, with a term that reads
    tables, is described; every other kernel (no fold, a ``maximum`` fold, a
    term that reads no table, an output that transforms the fold) gives None.
    The record is dense when every read is addressed affinely in the loop
    variable with the table's declared strides; otherwise ``refusals`` say
    why: an index read from data (gathered), a stride built from a bare
    literal (``t.at(r * 32 + unit)``), an index not affine in the loop
    variable, a read shifted along the walked axis, a fold that does not
    start from zero, a term multiplying more than two reads.

    Raises:
        TypeError: ``kernel`` is not a ``@hawk.kernel`` (or its IR).
    """
    analysis = _analysis(kernel, "recognize")
    return None if analysis is None else analysis.record


def lane_layout(kernel: Kernel | ir.KernelIR) -> LaneLayout | None:
    """Whether the lanes of ``kernel``'s contraction enumerate its product in row-major order.

    None when :func:`recognize` finds no contraction.

    Raises:
        TypeError: ``kernel`` is not a ``@hawk.kernel`` (or its IR).
    """
    analysis = _analysis(kernel, "lane_layout")
    return None if analysis is None else analysis.layout


# -- the analysis ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Analysis:
    record: RecognizedContraction
    layout: LaneLayout


_analyses: weakref.WeakKeyDictionary[Kernel, _Analysis | None] = weakref.WeakKeyDictionary()


def _analysis(kernel: Kernel | ir.KernelIR, caller: str) -> _Analysis | None:
    """The analysis of ``kernel``, for the public function ``caller`` (named when
    ``kernel`` is not one)."""
    if isinstance(kernel, ir.KernelIR):
        return _analyse(kernel)
    if not isinstance(kernel, Kernel):
        raise HawkTypeError(
            f"{caller} takes a @hawk.kernel function (or its IR), not {type(kernel).__name__}"
        )
    if kernel not in _analyses:
        _analyses[kernel] = _analyse(kernel.ir)
    return _analyses[kernel]


@dataclass(frozen=True)
class _Fold:
    plane: ir.Plane
    loop: ir.Loop
    carry: ir.Carry
    term: ir.Expr
    fanin_source: str
    staged: bool


@dataclass(frozen=True)
class _Factor:
    """One table read of the term, analysed."""

    operand: ContractionOperand
    free: ir.Expr | None  # the index along the free axis of a two-axis table walked once
    free_label: str | None
    free_extent: int | None


def _analyse(kernel: ir.KernelIR) -> _Analysis | None:
    lets = kernel.lets()
    fold = _find_fold(kernel, lets)
    if fold is None:
        return None
    refusals: list[str] = []
    init = _inline(fold.carry.init, lets)
    if isinstance(init, ir.Cast) and isinstance(init.operand, ir.Const):
        init = init.operand  # (`acc = 0` starts a real fold from float(0))
    if not (isinstance(init, ir.Const) and init.value == 0):
        refusals.append(
            f"the fold of {fold.fanin_source!r} starts from {init}, not 0.0; a product starts "
            "from zero"
        )
    reads = list(_term_reads(fold.term, lets))
    factors = [_factor(read, fold.term, fold.loop.index, lets) for read in reads]
    if len(factors) > 2:
        names = ", ".join(repr(read.plane.name) for read in reads)
        refusals.append(
            f"the term multiplies {len(factors)} table reads ({names}); a matrix product "
            "multiplies two"
        )
    layout, factors = _order(factors)
    operands = tuple(
        dataclasses.replace(factor.operand, role=role)
        for factor, role in zip(factors, _ROLES, strict=False)
    )
    for operand in operands:
        refusals.extend(operand.refusals)
    record = RecognizedContraction(
        carry=_base(fold.carry.var),
        reduce_var=_base(fold.loop.index),
        reduce_extent=fold.loop.stop,
        reduce_start=fold.loop.start,
        reduce_step=fold.loop.step,
        operands=operands,
        operand_class="gemv" if len(operands) == 1 else "gemm",
        term_form=_term_form(fold.term, lets),
        outputs=tuple(
            (plane.name, _OUTPUT_KINDS[plane.kind])
            for plane in kernel.planes
            if plane.kind in _OUTPUT_KINDS
        ),
        dense=not refusals,
        refusals=tuple(dict.fromkeys(refusals)),
        staged_fanin=fold.staged,
        fanin_source=fold.fanin_source,
        adjoint_accumulates=True,
    )
    return _Analysis(record, layout)


def _find_fold(kernel: ir.KernelIR, lets: Mapping[ir.Var, ir.Expr]) -> _Fold | None:
    carries = {
        carry.var: (stmt, carry)
        for stmt in kernel.body
        if isinstance(stmt, ir.Loop)
        for carry in stmt.carries
    }
    for store in (stmt for stmt in kernel.body if isinstance(stmt, ir.Store)):
        chain: list[ir.Var] = []
        value = store.value
        while isinstance(value, ir.Ref) and value.var in lets:
            chain.append(value.var)
            value = lets[value.var]
        if not (isinstance(value, ir.Ref) and value.var in carries):
            continue
        loop, carry = carries[value.var]
        term = _fold_term(loop, carry, lets)
        if term is None:
            continue
        staged = [_base(var) for var in chain if _base(var) != store.plane.name]
        source = staged[0] if staged else _base(carry.var)
        return _Fold(store.plane, loop, carry, term, source, source != store.plane.name)
    return None


def _fold_term(loop: ir.Loop, carry: ir.Carry, lets: Mapping[ir.Var, ir.Expr]) -> ir.Expr | None:
    """The term of ``carry = carry + term``, or None when the update is not that."""
    update = _resolve(carry.update, lets)
    if not (isinstance(update, ir.Binary) and update.op == "+"):
        return None
    left, right = _resolve(update.left, lets), _resolve(update.right, lets)
    if _is_ref(left, carry.var):
        term = right
    elif _is_ref(right, carry.var):
        term = left
    else:
        return None
    carried = {c.var for c in loop.carries}
    nodes = list(_walk(term, lets))
    if any(isinstance(node, ir.Ref) and node.var in carried for node in nodes):
        return None  # the term reads the fold (or another carry): not a sum of reads
    if not any(isinstance(node, ir.Read) for node in nodes):
        return None
    return term


def _term_form(term: ir.Expr, lets: Mapping[ir.Var, ir.Expr]) -> TermForm:
    factors = _factors(term, lets)
    if not all(isinstance(factor, ir.Read) for factor in factors):
        return "transformed"
    return "bare_read" if len(factors) == 1 else "product_of_reads"


def _factors(expr: ir.Expr, lets: Mapping[ir.Var, ir.Expr]) -> list[ir.Expr]:
    expr = _resolve(expr, lets)
    if isinstance(expr, ir.Binary) and expr.op == "*":
        return _factors(expr.left, lets) + _factors(expr.right, lets)
    return [expr]


def _term_reads(expr: ir.Expr, lets: Mapping[ir.Var, ir.Expr]) -> Iterator[ir.Read]:
    """The table reads of the term, in order, not counting reads inside an index."""
    expr = _resolve(expr, lets)
    if isinstance(expr, ir.Read):
        yield expr
        return
    for child in expr.children():
        yield from _term_reads(child, lets)


# -- one operand -------------------------------------------------------------------------


def _factor(read: ir.Read, term: ir.Expr, index: ir.Var, lets: Mapping[ir.Var, ir.Expr]) -> _Factor:
    plane = read.plane
    labels = [label for label, _ in plane.axes] if plane.axes else [""]
    sizes: list[int | None] = [size for _, size in plane.axes] if plane.axes else [None]
    strides = list(plane.strides) if plane.strides else [1]
    expanded = [_inline(item, lets) for item in read.index]
    refusals: list[str] = []
    coefficients: list[int | None] = []
    literal: list[bool] = []
    for label, item in zip(labels, expanded, strict=True):
        where = f"the index of {plane.name!r}" + (f" along {label!r}" if label else "")
        nodes = list(ir.walk(item))
        coefficient = _coefficient(item, index)
        if any(_is_data(node) for node in nodes):
            refusals.append(f"{where} ({item}) is read from data: a gathered read is not dense")
        elif any(isinstance(node, ir.Ref) and node.var != index for node in nodes):
            refusals.append(
                f"{where} ({item}) depends on a value computed in a branch or another loop"
            )
        elif coefficient is None:
            refusals.append(f"{where} ({item}) is not affine in the loop variable {index.name}")
        coefficients.append(coefficient)
        literal.append(_has_literal_stride(item, index))
        if literal[-1]:
            refusals.append(
                f"{where} ({item}) builds a stride from a bare literal; declare the table's "
                'axes (hawk.Table["row":R, "col":C]) and address each by name'
            )
    walked = [position for position, c in enumerate(coefficients) if c != 0]
    reduce_dim = walked[0] if len(walked) == 1 and coefficients[walked[0]] is not None else None
    if len(walked) > 1:
        axes = ", ".join(repr(labels[position]) for position in walked)
        refusals.append(
            f"the loop variable {index.name} walks several axes of {plane.name!r}: {axes}"
        )
    if reduce_dim is not None and not literal[reduce_dim]:
        step, item = coefficients[reduce_dim], expanded[reduce_dim]
        label = labels[reduce_dim]
        if step != 1:
            refusals.append(
                f"{plane.name!r} is walked {step} elements along {label!r} per step of "
                f"{index.name}; a matrix operand is walked one element per step"
            )
        elif not _is_ref(item, index):
            refusals.append(
                f"the index of {plane.name!r} along {label!r} is {item}, {index.name} shifted; "
                f"a matrix operand reads element {index.name} at step {index.name}"
            )
    known = [c for c in coefficients if c is not None]
    reduce_stride = (
        sum(c * s for c, s in zip(known, strides, strict=True))
        if len(known) == len(coefficients)
        else None
    )
    free_position = 1 - reduce_dim if reduce_dim is not None and len(labels) == 2 else None
    operand = ContractionOperand(
        name=plane.name,
        role="a",
        dims=tuple(zip(labels, sizes, strides, strict=True)),
        bound=_lane_name(read, reduce_dim, lets),
        reads=tuple(
            tuple((label, str(item)) for label, item in node.address.items())
            for node in _walk(term, lets)
            if isinstance(node, ir.Read) and node.plane == plane
        ),
        reduce_stride=reduce_stride,
        reduce_dim=reduce_dim,
        stride_labels=tuple("literal" if flag else "declared" for flag in literal),
        dense=not refusals,
        refusals=tuple(refusals),
    )
    return _Factor(
        operand,
        None if free_position is None else expanded[free_position],
        None if free_position is None else labels[free_position],
        None if free_position is None else sizes[free_position],
    )


def _is_data(node: ir.Expr | ir.Stmt) -> bool:
    return isinstance(node, ir.Read | ir.Load) or (isinstance(node, ir.Cast) and node.to == "int")


def _coefficient(expr: ir.Expr, index: ir.Var) -> int | None:
    """``c`` when ``expr`` is ``c * index + (terms without index)``; None when not affine."""
    if not _mentions(expr, index):
        return 0
    if _is_ref(expr, index):
        return 1
    if isinstance(expr, ir.Unary):
        inner = _coefficient(expr.operand, index)
        return None if inner is None else (-inner if expr.op == "-" else inner)
    if isinstance(expr, ir.Binary) and expr.op in ("+", "-"):
        left, right = _coefficient(expr.left, index), _coefficient(expr.right, index)
        if left is None or right is None:
            return None
        return left + right if expr.op == "+" else left - right
    if isinstance(expr, ir.Binary) and expr.op == "*":
        for scale, other in ((expr.left, expr.right), (expr.right, expr.left)):
            if isinstance(scale, ir.Const) and scale.type == "int":
                assert isinstance(scale.value, int)  # a Const of type int holds an int
                inner = _coefficient(other, index)
                return None if inner is None else scale.value * inner
    return None


def _has_literal_stride(expr: ir.Expr, index: ir.Var) -> bool:
    """True when the loop variable or the lane is multiplied by a bare number."""
    for node in ir.walk(expr):
        if isinstance(node, ir.Binary) and node.op == "*":
            for scale, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(scale, ir.Const) and (
                    _mentions(other, index) or any(isinstance(n, ir.Lane) for n in ir.walk(other))
                ):
                    return True
    return False


def _lane_name(read: ir.Read, reduce_dim: int | None, lets: Mapping[ir.Var, ir.Expr]) -> str | None:
    """The name of the lane index addressing the read's free axis (``"unit"``), if any."""
    positions = [p for p in range(len(read.index)) if p != reduce_dim]
    if reduce_dim is not None:
        positions.append(reduce_dim)
    for position in positions:
        for node in ir.walk(read.index[position]):
            if isinstance(node, ir.Lane):
                return "lane"
            if (
                isinstance(node, ir.Ref)
                and node.var in lets
                and any(isinstance(n, ir.Lane) for n in _walk(lets[node.var], lets))
            ):
                return _base(node.var)
    return None


# -- the lanes ---------------------------------------------------------------------------


def _order(factors: list[_Factor]) -> tuple[LaneLayout, list[_Factor]]:
    """The lane layout, and the factors with the lanes' major one first when they form one."""
    if len(factors) == 1:
        (only,) = factors
        if only.free is not None and _lane_form(only.free) == ("lane", 0):
            return LaneLayout(only.free_extent, 1), factors
        return LaneLayout(None, None, _not_lanes(factors, "lane")), factors
    if len(factors) == 2:
        first, second = factors
        for rows, cols in ((first, second), (second, first)):
            if _major_minor(rows, cols):
                return LaneLayout(rows.free_extent, cols.free_extent), [rows, cols]
        return LaneLayout(None, None, _not_lanes(factors, "lane // n and lane % n")), factors
    return (
        LaneLayout(None, None, f"the term reads {len(factors)} tables; the lanes of a product "
                               "address two"),
        factors,
    )  # fmt: skip


def _major_minor(rows: _Factor, cols: _Factor) -> bool:
    if rows.free is None or cols.free is None or cols.free_extent is None:
        return False
    n = cols.free_extent
    return _lane_form(rows.free) == ("//", n) and _lane_form(cols.free) == ("%", n)


def _lane_form(expr: ir.Expr) -> tuple[str, int] | None:
    if isinstance(expr, ir.Lane):
        return ("lane", 0)
    if (
        isinstance(expr, ir.Binary)
        and expr.op in ("//", "%")
        and isinstance(expr.left, ir.Lane)
        and isinstance(expr.right, ir.Const)
    ):
        return (expr.op, int(expr.right.value))
    return None


def _not_lanes(factors: list[_Factor], wanted: str) -> str:
    described = []
    for factor in factors:
        name = factor.operand.name
        if factor.free is None:
            return (
                f"the lanes do not address a product: {name!r} is not a two-axis table walked "
                "along one axis by the loop, so it has no free axis for the lanes"
            )
        described.append(f"{name}.{factor.free_label} by {factor.free}")
    how = (
        "the lane itself (hm.sample_index())"
        if wanted == "lane"
        else "lane // n for one table's free axis and lane % n for the other's, n being that "
        "other axis's extent (a, b = hm.split_index(n))"
    )
    return (
        f"the lanes are not the product's elements in row-major order: {', '.join(described)}; "
        f"the route needs {how}"
    )


# -- walking the IR through definitions --------------------------------------------------


def _base(var: ir.Var) -> str:
    return var.name.split(".")[0]


def _is_ref(expr: ir.Expr | ir.Stmt, var: ir.Var) -> bool:
    return isinstance(expr, ir.Ref) and expr.var == var


def _mentions(expr: ir.Expr, var: ir.Var) -> bool:
    return any(_is_ref(node, var) for node in ir.walk(expr))


def _resolve(expr: ir.Expr, lets: Mapping[ir.Var, ir.Expr]) -> ir.Expr:
    """``expr`` with a reference to a ``Let`` replaced by its value, repeatedly."""
    while isinstance(expr, ir.Ref) and expr.var in lets:
        expr = lets[expr.var]
    return expr


def _walk(expr: ir.Expr, lets: Mapping[ir.Var, ir.Expr]) -> Iterator[ir.Expr]:
    """Every node of ``expr``, pre-order, seeing through references to ``Let`` values."""
    expr = _resolve(expr, lets)
    yield expr
    for child in expr.children():
        yield from _walk(child, lets)


def _inline(expr: ir.Expr, lets: Mapping[ir.Var, ir.Expr]) -> ir.Expr:
    """``expr`` rebuilt with every reference to a ``Let`` replaced by its value."""
    expr = _resolve(expr, lets)
    if not expr.children():
        return expr
    assert dataclasses.is_dataclass(expr)  # every Expr node class is a dataclass
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(expr):
        value = getattr(expr, field.name)
        if not field.init:
            continue
        if isinstance(value, ir.Expr):
            changes[field.name] = _inline(value, lets)
        elif isinstance(value, tuple) and all(isinstance(item, ir.Expr) for item in value):
            changes[field.name] = tuple(_inline(item, lets) for item in value)
    return dataclasses.replace(expr, **changes)
