"""Which chunked loops the numpy program runs on lanes factored into groups and units.

A chunked loop (``hawk/emit/_batch.py``) whose lane values come from ``lane // U``
and ``lane % U`` (a ``split_index`` kernel) runs, when ``n`` is a multiple of
``U``, on lanes laid out as ``(G, U)`` with ``G = n // U``: a value has the shape
``(C, G, U)`` of the chunk's iterations, groups and units, each axis of size 1
where it does not depend on it (its *axes*). ``lane // U`` is then a ``(1, G, 1)``
array, ``lane % U`` a ``(1, 1, U)`` one, and a table read at ``r * U + lane % U``
gathers ``C * U`` elements instead of ``C * n``.

An add into a table sums its value over the axes its address does not depend
on before it adds; where the value is a product (``a * b``, through the loop's
bound values), that sum is a contraction of the factors (a matrix product:
``hawk/emit/_host_runtime.py``), and a bound value that only feeds such
products is never formed. A carry the loop sums is the same contraction, over
the iterations. A pass's arrays are then at most ``C`` rows of what varies per
iteration, so a chunk holds more iterations where no per-iteration value
varies by both group and unit. Where a factor is infinite, or its terms (or the
carry they are added to) could overflow the float range
(``_host_runtime._factored_sum_is_safe``), the pass forms the terms instead
(multiplied as the kernel groups them; a carry adds them in turn), so infs and NaNs
arise from them as in the kernel run lane by lane.

The analysis is pure: :func:`factor` gives what the emitter needs, or None
when the loop keeps its lane arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hawk import ir
from hawk.emit._batch import Batch, lane_uses
from hawk.kinds import Type

__all__ = ["GROUP", "LANES", "ROW", "UNIT", "Factoring", "Grouping", "factor"]

#: the axes a value depends on, as bits: the chunk's iteration, the group, the unit
ROW, GROUP, UNIT = 1, 2, 4
LANES = GROUP | UNIT

#: how a product's factors are multiplied: a factor's position, or a pair of groupings
Grouping = int | tuple["Grouping", "Grouping"]


@dataclass(frozen=True)
class Factoring:
    """How one chunked loop runs on factored lanes.

    Attributes:
        unit: ``U``, the number of units in a group.
        outer: the axes of each varying variable the loop reads but does not bind
            (values from before the loop; GROUP, UNIT or LANES).
        planes: the varying planes the loop loads (LANES each).
        lane: True when the loop reads the lane itself.
        fused: the loop's bound values that are never formed: they only feed sums of
            products (:meth:`factors` looks through them).
        widths: the lane axes of the values a pass forms with one row per iteration
            (GROUP, UNIT, LANES or 0).
        body: the loop's bound values.
    """

    unit: int
    outer: Mapping[ir.Var, int]
    planes: tuple[ir.Plane, ...]
    lane: bool
    fused: frozenset[ir.Var]
    widths: frozenset[int]
    body: Mapping[ir.Var, ir.Expr]

    def factors(self, value: ir.Expr) -> list[ir.Expr]:
        """The factors of ``value`` as a product, through its fused bound values."""
        return _factors(value, self.body, self.fused)

    def grouping(self, value: ir.Expr) -> Grouping:
        """How the kernel multiplies :meth:`factors` of ``value``: a factor's position, or
        a pair of groupings (``x * (w * a)`` is ``(0, (1, 2))``)."""
        return _grouping(value, self.body, self.fused, [0])


def factor(
    plan: Batch, lets: Mapping[ir.Var, ir.Expr], checked: Callable[[ir.Expr], bool]
) -> Factoring | None:
    """The factored form of the chunked loop ``plan``, or None where it keeps lanes.

    Args:
        plan: the chunked loop.
        lets: the kernel's bound values (:meth:`hawk.ir.KernelIR.lets`).
        checked: True for an expression whose evaluation makes a check: a bound value
            that does is always formed, where the loop forms it today.
    """
    if any(how == "=" for _, _, how in plan.updates):
        return None
    body = {s.var: s.value for s in plan.body if isinstance(s, ir.Let)}
    outer = _outer_axes(plan, body, lets)
    if outer is None:
        return None
    unit, axes_of = outer
    planes = tuple(
        dict.fromkeys(
            node.plane
            for value in _values(plan)
            for node in ir.walk(value)
            if isinstance(node, ir.Load) and node.varying
        )
    )
    lane = any(isinstance(node, ir.Lane) for value in _values(plan) for node in ir.walk(value))
    products = {var for var, value in body.items() if _is_product(value) and not checked(value)}
    fused, formed = _fuse(plan, body, products)
    axes = _Axes(plan.loop.index, body, axes_of)
    widths = frozenset(
        axes(node) & LANES
        for root in formed
        for node in ir.walk(root)
        if isinstance(node, ir.Expr) and axes(node) & ROW
    )
    return Factoring(unit, axes_of, planes, lane, fused, widths, body)


def _values(plan: Batch) -> list[ir.Expr]:
    """Every expression the chunked loop evaluates."""
    values: list[ir.Expr] = [term for _, term, _ in plan.updates]
    for stmt in plan.body:
        if isinstance(stmt, ir.Let):
            values.append(stmt.value)
        elif isinstance(stmt, ir.Accumulate):
            values.extend([*stmt.index, stmt.value])
    return values


def _outer_axes(
    plan: Batch, body: Mapping[ir.Var, ir.Expr], lets: Mapping[ir.Var, ir.Expr]
) -> tuple[int, dict[ir.Var, int]] | None:
    """``U`` and the axes of each varying variable from outside the loop that it reads;
    None unless some are ``lane // U`` or ``lane % U`` for one ``U``."""
    inside = {plan.loop.index, *body}
    outer = {
        node.var
        for value in _values(plan)
        for node in ir.walk(value)
        if isinstance(node, ir.Ref) and node.var.varying and node.var not in inside
    }
    parts = {var: lane_uses(ir.Ref(var), lets) for var in outer}
    sizes = {
        size for uses in parts.values() if uses is not None and len(uses) == 1 for _, size in uses
    }
    if len(sizes) != 1:
        return None
    (unit,) = sizes
    axes: dict[ir.Var, int] = {}
    for var, uses in parts.items():
        if uses == {("//", unit)}:
            axes[var] = GROUP
        elif uses == {("%", unit)}:
            axes[var] = UNIT
        else:
            axes[var] = LANES
    return unit, axes


def _is_product(value: ir.Expr) -> bool:
    """True for a product of two reals (``a * b``)."""
    return isinstance(value, ir.Binary) and value.op == "*" and value.type == Type.REAL


def _factors(
    value: ir.Expr, body: Mapping[ir.Var, ir.Expr], fused: frozenset[ir.Var] | set[ir.Var]
) -> list[ir.Expr]:
    """The factors of ``value`` read as a product, looking through the ``fused`` bound
    values (a value that is no product is its own one factor)."""
    if isinstance(value, ir.Ref) and value.var in fused:
        return _factors(body[value.var], body, fused)
    if _is_product(value):
        assert isinstance(value, ir.Binary)
        return [*_factors(value.left, body, fused), *_factors(value.right, body, fused)]
    return [value]


def _grouping(
    value: ir.Expr, body: Mapping[ir.Var, ir.Expr], fused: frozenset[ir.Var], next_: list[int]
) -> Grouping:
    """:meth:`Factoring.grouping`, numbering the factors from ``next_[0]`` as
    :func:`_factors` lists them."""
    if isinstance(value, ir.Ref) and value.var in fused:
        return _grouping(body[value.var], body, fused, next_)
    if _is_product(value):
        assert isinstance(value, ir.Binary)
        left = _grouping(value.left, body, fused, next_)
        return (left, _grouping(value.right, body, fused, next_))
    next_[0] += 1
    return next_[0] - 1


def _fuse(
    plan: Batch, body: Mapping[ir.Var, ir.Expr], products: set[ir.Var]
) -> tuple[frozenset[ir.Var], list[ir.Expr]]:
    """The bound products never formed (only read as factors of summed products), and
    the expressions the factored loop forms: bound values, addresses and factors."""
    fused = set(products)
    while True:
        formed: list[ir.Expr] = []
        for stmt in plan.body:
            if isinstance(stmt, ir.Let) and stmt.var not in fused:
                formed.append(stmt.value)
            elif isinstance(stmt, ir.Accumulate):
                formed.extend([*stmt.index, *_factors(stmt.value, body, fused)])
        for _, term, _ in plan.updates:
            formed.extend(_factors(term, body, fused))
        read = {n.var for root in formed for n in ir.walk(root) if isinstance(n, ir.Ref)}
        if not read & fused:
            return frozenset(fused), formed
        fused -= read


class _Axes:
    """The axes of the chunked loop's expressions (memoised by bound variable)."""

    def __init__(
        self, index: ir.Var, body: Mapping[ir.Var, ir.Expr], outer: Mapping[ir.Var, int]
    ) -> None:
        self.known: dict[ir.Var, int] = {index: ROW, **outer}
        self.body = body

    def __call__(self, node: ir.Expr) -> int:
        if isinstance(node, ir.Ref):
            if node.var not in self.known:
                value = self.body.get(node.var)
                self.known[node.var] = 0 if value is None else self(value)
            return self.known[node.var]
        if isinstance(node, ir.Lane | ir.Load):
            return LANES if node.varying else 0
        axes = 0
        for child in node.children():
            axes |= self(child)
        return axes
