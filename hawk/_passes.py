"""Generic IR passes: what a body reads and writes, flattening, and pruning.

* :func:`refs` and :func:`has_effects` answer questions about IR;
* :func:`flatten` rewrites a body so every real operation is its own
  :class:`~hawk.ir.Let` over atoms (:func:`is_atom`);
* :func:`prune` drops the values nothing uses;
* :class:`Namer` makes fresh variable names for a pass that adds variables.

:mod:`hawk.diff` builds the adjoint with them.
"""

from __future__ import annotations

from collections.abc import Iterable

from hawk import ir
from hawk.kinds import Type

__all__ = ["Namer", "base_name", "flatten", "has_effects", "is_atom", "prune", "refs"]


class Namer:
    """Fresh, unique variable names: ``<base>.d<k>`` (primal names are ``<base>.<k>``)."""

    def __init__(self) -> None:
        self.count = 0

    def var(self, base: str, type_: Type, varying: bool) -> ir.Var:
        """A new variable named after ``base``."""
        self.count += 1
        return ir.Var(f"{base}.d{self.count}", type_, varying)

    def like(self, var: ir.Var) -> ir.Var:
        """A new variable of ``var``'s name, type and uniformity."""
        return self.var(base_name(var), var.type, var.varying)


def base_name(var: ir.Var) -> str:
    """The source name of ``var`` (``acc`` for ``acc.3``)."""
    return var.name.split(".")[0]


def refs(node: ir.Expr | ir.Stmt) -> set[ir.Var]:
    """The variables ``node`` reads."""
    return {n.var for n in ir.walk(node) if isinstance(n, ir.Ref)}


def has_effects(stmts: Iterable[ir.Stmt]) -> bool:
    """True when ``stmts`` store or add into a plane."""
    return any(isinstance(n, ir.Store | ir.Accumulate) for stmt in stmts for n in ir.walk(stmt))


def is_atom(node: ir.Expr) -> bool:
    """True for a value with no operation: a Ref, a Const, a Load or the lane."""
    return isinstance(node, ir.Ref | ir.Const | ir.Load | ir.Lane)


# -- one operation per real value --------------------------------------------------------


def flatten(stmts: Iterable[ir.Stmt], namer: Namer) -> tuple[ir.Stmt, ...]:
    """``stmts`` with every real operation its own :class:`~hawk.ir.Let` over atoms
    (:func:`is_atom`), so a later pass finds each intermediate value by name.

    Int and bool expressions stay whole (they have no gradient, and
    ``and``/``or`` keep their short circuit); a real select becomes an ``if``,
    so a read on its untaken side stays unevaluated. New variables come from
    ``namer``.
    """
    body, _ = _Flatten(namer).flat_block(stmts)
    return body


class _Flatten(ir.Builder):
    def __init__(self, namer: Namer) -> None:
        super().__init__()
        self.namer = namer

    def flat_block(
        self, stmts: Iterable[ir.Stmt], values: Iterable[ir.Expr] = ()
    ) -> tuple[tuple[ir.Stmt, ...], list[ir.Expr]]:
        """``stmts`` flattened, and ``values`` (evaluated after them) as atoms."""
        with self.nested() as block:
            for stmt in stmts:
                self.statement(stmt)
            atoms = [self.atom(value) for value in values]
        return tuple(block), atoms

    def statement(self, stmt: ir.Stmt) -> None:
        if isinstance(stmt, ir.Let):
            value = stmt.value if is_atom(stmt.value) else self.operation(stmt.value)
            self.emit(ir.Let(stmt.var, value))
        elif isinstance(stmt, ir.Loop):
            inits = [self.atom(c.init) for c in stmt.carries]
            body, updates = self.flat_block(stmt.body, [c.update for c in stmt.carries])
            carries = tuple(
                ir.Carry(c.var, init, update)
                for c, init, update in zip(stmt.carries, inits, updates, strict=True)
            )
            self.emit(ir.Loop(stmt.index, stmt.start, stmt.stop, stmt.step, carries, body))
        elif isinstance(stmt, ir.If):
            then, then_values = self.flat_block(stmt.then, [m.then_value for m in stmt.merges])
            orelse, else_values = self.flat_block(stmt.orelse, [m.else_value for m in stmt.merges])
            merges = tuple(
                ir.Merge(m.var, a, b)
                for m, a, b in zip(stmt.merges, then_values, else_values, strict=True)
            )
            self.emit(ir.If(stmt.cond, then, orelse, merges))
        elif isinstance(stmt, ir.Store):
            self.emit(ir.Store(stmt.plane, self.atom(stmt.value)))
        elif isinstance(stmt, ir.Accumulate):
            self.emit(ir.Accumulate(stmt.plane, stmt.index, self.atom(stmt.value)))
        else:
            raise TypeError(f"not a hawk statement: {stmt!r}")

    def atom(self, node: ir.Expr) -> ir.Expr:
        if node.type != Type.REAL or is_atom(node):
            return node
        value = self.operation(node)
        if is_atom(value):
            return value
        var = self.namer.var("t", Type.REAL, value.varying)
        self.emit(ir.Let(var, value))
        return ir.Ref(var)

    def operation(self, node: ir.Expr) -> ir.Expr:
        if node.type != Type.REAL or isinstance(node, ir.Read | ir.Cast):
            return node
        if isinstance(node, ir.Select):
            then, (a,) = self.flat_block((), [node.if_true])
            orelse, (b,) = self.flat_block((), [node.if_false])
            var = self.namer.var("select", Type.REAL, node.varying)
            self.emit(ir.If(node.cond, then, orelse, (ir.Merge(var, a, b),)))
            return ir.Ref(var)
        return ir.map_children(node, self.atom)


# -- dropping what nothing uses ----------------------------------------------------------


def prune(stmts: Iterable[ir.Stmt], live: set[ir.Var]) -> tuple[ir.Stmt, ...]:
    """``stmts`` without the values nothing after them uses (stores and adds
    are always used); adds every variable the kept statements read to ``live``."""
    kept: list[ir.Stmt] = []
    for stmt in reversed(list(stmts)):
        if isinstance(stmt, ir.Let):
            if stmt.var in live:
                kept.append(stmt)
                live |= refs(stmt.value)
        elif isinstance(stmt, ir.Store | ir.Accumulate):
            kept.append(stmt)
            live |= refs(stmt)
        elif isinstance(stmt, ir.If):
            merges = tuple(m for m in stmt.merges if m.var in live)
            for merge in merges:
                live |= refs(merge.then_value) | refs(merge.else_value)
            then = prune(stmt.then, live)
            orelse = prune(stmt.orelse, live)
            if merges or has_effects(then) or has_effects(orelse):
                live |= refs(stmt.cond)
                kept.append(ir.If(stmt.cond, then, orelse, merges))
        elif isinstance(stmt, ir.Loop):
            used = {c.var for c in stmt.carries if c.var in live}
            while True:
                inner = set(live)
                for carry in stmt.carries:
                    if carry.var in used:
                        inner |= refs(carry.update)
                body = prune(stmt.body, inner)
                more = {c.var for c in stmt.carries if c.var in inner} - used
                if not more:
                    break
                used |= more
            carries = tuple(c for c in stmt.carries if c.var in used)
            if carries or has_effects(body):
                live |= inner
                for carry in carries:
                    live |= refs(carry.init)
                kept.append(ir.Loop(stmt.index, stmt.start, stmt.stop, stmt.step, carries, body))
    return tuple(reversed(kept))
