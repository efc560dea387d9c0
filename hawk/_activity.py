"""Activity analysis for reverse mode: which values carry a gradient.

:class:`Activity` reads a flattened body (:func:`hawk._passes.flatten`) and
records which values depend on the planes the gradient is taken with
respect to, which of those carry a gradient (*active*), which reach a store or
an add at all (*useful*: only they can have a non-zero gradient), and which
ints come from a step of such data (*stepped*: an address computed from them
has no derivative). A step is an int computed from real data by an operation with
no derivative rule, ``int()``; ``hawk.math.floor`` declares a zero
derivative, so an address through it is piecewise constant, not a step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from hawk import ir
from hawk.kinds import Type

__all__ = ["Activity"]

_BLOCK: ir.Rules[Callable[[Activity, Any], None]] = ir.Rules("activity", ir.Stmt)
_ACTIVE: ir.Rules[Callable[[Activity, Any], bool]] = ir.Rules("activity", ir.Expr)


class Activity:
    """Which values carry a gradient (*active*: real, and a differentiable
    function of a plane in ``wrt``), which depend on ``wrt`` at all, and which
    ints come from a step of such data (*stepped*, with the step)."""

    def __init__(self, wrt: set[ir.Plane]) -> None:
        self.wrt = wrt
        self.depends: dict[ir.Var, frozenset[str]] = {}
        self.stepped: dict[ir.Var, ir.Operation] = {}
        self.active: set[ir.Var] = set()
        self.useful: set[ir.Var] = set()

    def block(self, stmts: Iterable[ir.Stmt]) -> None:
        for stmt in stmts:
            _BLOCK(stmt)(self, stmt)

    def reaching(self, stmts: Iterable[ir.Stmt]) -> None:
        """Find the real values of ``stmts`` that reach a store or an add through real
        operations (*useful*), to a fixed point through loops. A loop's carry that reaches
        none (overwritten, or only compared) gets no reverse sweep, where its zero
        gradient times an infinite partial would make NaN. A carry's initial value is
        useful only where the loop may run no iteration or an iteration reads the carry
        (a loop nested in it reads it where its own carry's initial value is useful)."""
        stmts = tuple(stmts)
        flows = _flows(stmts)
        loops = [
            (
                loop,
                _flows(loop.body) + [(c.var, _real_refs(c.update)) for c in loop.carries],
                [(id(c), _real_refs(c.init)) for stmt in loop.body for inner in ir.walk(stmt)
                 if isinstance(inner, ir.Loop) for c in inner.carries],
            )
            for stmt in stmts
            for loop in ir.walk(stmt)
            if isinstance(loop, ir.Loop)
        ]  # fmt: skip
        inits: set[int] = set()  # the carries (ids) whose initial values are useful
        changed = True
        while changed:
            size = len(self.useful), len(inits)
            for var, reads in flows:
                if var is None or var in self.useful:
                    self.useful |= reads
            for loop, inner, nested in loops:
                for carry in loop.carries:
                    read = any(
                        (var is None or var in self.useful) and carry.var in reads
                        for var, reads in inner
                    ) or any(key in inits and carry.var in reads for key, reads in nested)
                    if carry.var in self.useful and (loop.trip_count == 0 or read):
                        inits.add(id(carry))
                        self.useful |= _real_refs(carry.init)
            changed = (len(self.useful), len(inits)) != size

    @_BLOCK.rule(ir.Let)
    def let(self, stmt: ir.Let) -> None:
        self.assign(stmt.var, stmt.value)

    @_BLOCK.rule(ir.Loop)
    def loop(self, stmt: ir.Loop) -> None:
        while True:  # carried values: to a fixed point
            size = self.size()
            for carry in stmt.carries:
                self.assign(carry.var, carry.init)
            self.block(stmt.body)
            for carry in stmt.carries:
                self.assign(carry.var, carry.update)
            if self.size() == size:
                break

    @_BLOCK.rule(ir.If)
    def branch(self, stmt: ir.If) -> None:
        self.block(stmt.then)
        self.block(stmt.orelse)
        for merge in stmt.merges:
            self.assign(merge.var, merge.then_value)
            self.assign(merge.var, merge.else_value)

    @_BLOCK.rule(ir.Store, ir.Accumulate)
    def effect(self, stmt: ir.Store | ir.Accumulate) -> None:
        """A store or an add assigns no variable (the reverse sweep reads its value)."""

    def size(self) -> tuple[int, int, int]:
        return sum(map(len, self.depends.values())), len(self.stepped), len(self.active)

    def assign(self, var: ir.Var, value: ir.Expr) -> None:
        planes = self.planes_of(value)
        if planes:
            self.depends[var] = self.depends.get(var, frozenset()) | planes
        cast = self.step(value)
        if cast is not None:
            self.stepped.setdefault(var, cast)
        if var.type == Type.REAL and self.is_active(value):
            self.active.add(var)

    def planes_of(self, node: ir.Expr) -> frozenset[str]:
        """The ``wrt`` planes ``node`` depends on, through any data flow."""
        if isinstance(node, ir.Ref):
            return self.depends.get(node.var, frozenset())
        found: frozenset[str] = frozenset()
        if isinstance(node, ir.Load | ir.Read) and node.plane in self.wrt:
            found = frozenset({node.plane.name})
        for child in node.children():
            found |= self.planes_of(child)
        return found

    def step(self, node: ir.Expr) -> ir.Operation | None:
        """A step of ``wrt`` data that ``node`` is computed from, if any: an int made
        from a real by an operation with no derivative rule (``int()``)."""
        if isinstance(node, ir.Ref):
            return self.stepped.get(node.var)
        if (
            isinstance(node, ir.Operation)
            and node.type == Type.INT
            and node.builtin.derivative is None
            and any(c.type == Type.REAL and self.planes_of(c) for c in node.children())
        ):
            return node
        for child in node.children():
            cast = self.step(child)
            if cast is not None:
                return cast
        return None

    def step_in(self, index: tuple[ir.Expr, ...]) -> ir.Operation | None:
        for item in index:
            cast = self.step(item)
            if cast is not None:
                return cast
        return None

    def is_active(self, node: ir.Expr) -> bool:
        """True when ``node`` carries a gradient: it is real, and a differentiable
        function of the ``wrt`` planes (a node with no activity rule is refused)."""
        rule = _ACTIVE(node)
        return node.type == Type.REAL and rule(self, node)

    @_ACTIVE.rule(ir.Const, ir.Lane)
    def constant(self, node: ir.Const | ir.Lane) -> bool:
        return False

    @_ACTIVE.rule(ir.Ref)
    def ref(self, node: ir.Ref) -> bool:
        return node.var in self.active

    @_ACTIVE.rule(ir.Load)
    def load(self, node: ir.Load) -> bool:
        return node.plane in self.wrt

    @_ACTIVE.rule(ir.Read)
    def read(self, node: ir.Read) -> bool:
        # a stepped address is active so the reverse sweep reaches it and refuses
        return node.plane in self.wrt or self.step_in(node.index) is not None

    @_ACTIVE.rule(*ir.OPERATIONS)
    def operation(self, node: ir.Operation) -> bool:
        """An operation with a derivative rule (not a step such as ``//`` or ``int()``)
        whose operands carry a gradient."""
        if node.builtin.derivative is None:
            return False
        return any(self.is_active(child) for child in node.children())


def _flows(stmts: Iterable[ir.Stmt]) -> list[tuple[ir.Var | None, set[ir.Var]]]:
    """Where the values of ``stmts`` flow: ``(variable bound, what its value reads)``
    (:func:`_real_refs`), the variable None for a store's or an add's value; a loop's
    carries by their updates (their initial values are :meth:`Activity.reaching`'s to
    decide). A statement with no rule is refused (never taken to bind nothing)."""
    values: list[tuple[ir.Var | None, ir.Expr]] = []
    for stmt in stmts:
        for node in ir.walk(stmt):  # (a merge's and a carry's values come with their block)
            if isinstance(node, ir.Stmt):
                values += _FLOWS(node)(node)
    return [(var, _real_refs(value)) for var, value in values]


#: the values each statement binds (a variable, or None for a store's or an add's)
_FLOWS: ir.Rules[Callable[[Any], list[tuple[ir.Var | None, ir.Expr]]]] = ir.Rules(
    "activity flows", ir.Stmt
)
_FLOWS.rule(ir.Let)(lambda stmt: [(stmt.var, stmt.value)])
_FLOWS.rule(ir.If)(
    lambda stmt: [(m.var, value) for m in stmt.merges for value in (m.then_value, m.else_value)]
)
_FLOWS.rule(ir.Loop)(lambda stmt: [(c.var, c.update) for c in stmt.carries])
_FLOWS.rule(ir.Store, ir.Accumulate)(lambda stmt: [(None, stmt.value)])


def _real_refs(node: ir.Expr) -> set[ir.Var]:
    """The real variables ``node`` reads through real operations only (not through a
    comparison, an int, or a table's index)."""
    if node.type != Type.REAL:
        return set()
    if isinstance(node, ir.Ref):
        return {node.var}
    found: set[ir.Var] = set()
    for child in node.children():
        found |= _real_refs(child)
    return found
