"""Generic IR passes: what a body reads and writes, flattening, and pruning.

* :func:`refs` and :func:`has_effects` answer questions about IR;
* :func:`flatten` rewrites a body so every real operation is its own
  :class:`~hawk.ir.Let` over atoms (:func:`is_atom`);
* :func:`prune` drops the values nothing uses;
* :class:`Namer` makes fresh variable names for a pass that adds variables.

:mod:`hawk.diff` builds the adjoint with them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from hawk import ir
from hawk.kinds import Type

__all__ = [
    "Namer",
    "base_name",
    "flatten",
    "has_effects",
    "in_source_names",
    "is_atom",
    "prune",
    "refs",
]


class Namer:
    """Fresh, unique variable names: ``<base>.d<k>`` (primal names are ``<base>.<k>``).

    Args:
        kernel: the kernel the names are made for: they count on from the largest ``k``
            its own variables have (an adjoint's adjoint has ``.d<k>`` names already,
            and a variable is known by its name).
    """

    def __init__(self, kernel: ir.KernelIR | None = None) -> None:
        self.count = 0
        if kernel is not None:
            found = (_MADE.fullmatch(var.name) for var in _variables(kernel))
            self.count = max((int(m.group(2)) for m in found if m), default=0)

    def var(self, base: str, type_: Type, varying: bool) -> ir.Var:
        """A new variable named after ``base``."""
        self.count += 1
        return ir.Var(f"{base}.d{self.count}", type_, varying)

    def like(self, var: ir.Var) -> ir.Var:
        """A new variable of ``var``'s name, type and uniformity."""
        return self.var(base_name(var), var.type, var.varying)


#: a name :class:`Namer` made, ``<base>.d<k>``
_MADE = re.compile(r"\b([A-Za-z_]\w*)\.d(\d+)\b")


def _variables(kernel: ir.KernelIR) -> set[ir.Var]:
    """Every variable ``kernel`` binds or reads (loop indices included)."""
    found = set()
    for node in ir.walk(kernel):
        for attribute in ("var", "index"):
            value = getattr(node, attribute, None)
            if isinstance(value, ir.Var):
                found.add(value)
    return found


def in_source_names(text: str) -> str:
    """``text`` (printed IR, for a message) with each copy :class:`Namer` made of a kernel's
    variable named as the kernel names it (``j.d7`` reads ``j``); a gradient's own name
    (``x_bar.d3``) stays, as no kernel variable has it."""

    def named(match: re.Match[str]) -> str:
        base = match.group(1)
        return match.group(0) if base.endswith("_bar") else base

    return _MADE.sub(named, text)


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


_FLATTEN_STATEMENTS: ir.Rules[Callable[[_Flatten, Any], None]] = ir.Rules("flatten", ir.Stmt)
_FLATTEN_EXPRESSIONS: ir.Rules[Callable[[_Flatten, Any], ir.Expr]] = ir.Rules("flatten", ir.Expr)


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
                _FLATTEN_STATEMENTS(stmt)(self, stmt)
            atoms = [self.atom(value) for value in values]
        return tuple(block), atoms

    # -- statements ----------------------------------------------------------------------

    @_FLATTEN_STATEMENTS.rule(ir.Let)
    def let(self, stmt: ir.Let) -> None:
        value = stmt.value if is_atom(stmt.value) else self.operation(stmt.value)
        self.emit(ir.Let(stmt.var, value))

    @_FLATTEN_STATEMENTS.rule(ir.Loop)
    def loop(self, stmt: ir.Loop) -> None:
        inits = [self.atom(c.init) for c in stmt.carries]
        body, updates = self.flat_block(stmt.body, [c.update for c in stmt.carries])
        carries = tuple(
            ir.Carry(c.var, init, update)
            for c, init, update in zip(stmt.carries, inits, updates, strict=True)
        )
        self.emit(ir.Loop(stmt.index, stmt.start, stmt.stop, stmt.step, carries, body))

    @_FLATTEN_STATEMENTS.rule(ir.If)
    def branch(self, stmt: ir.If) -> None:
        then, then_values = self.flat_block(stmt.then, [m.then_value for m in stmt.merges])
        orelse, else_values = self.flat_block(stmt.orelse, [m.else_value for m in stmt.merges])
        merges = tuple(
            ir.Merge(m.var, a, b)
            for m, a, b in zip(stmt.merges, then_values, else_values, strict=True)
        )
        self.emit(ir.If(stmt.cond, then, orelse, merges))

    @_FLATTEN_STATEMENTS.rule(ir.Store)
    def store(self, stmt: ir.Store) -> None:
        self.emit(ir.Store(stmt.plane, self.atom(stmt.value)))

    @_FLATTEN_STATEMENTS.rule(ir.Accumulate)
    def accumulate(self, stmt: ir.Accumulate) -> None:
        self.emit(ir.Accumulate(stmt.plane, stmt.index, self.atom(stmt.value)))

    # -- expressions ---------------------------------------------------------------------

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
        """``node``, a real operation over atoms (an int or bool value stays whole)."""
        rule = _FLATTEN_EXPRESSIONS(node)
        return rule(self, node) if node.type == Type.REAL else node

    @_FLATTEN_EXPRESSIONS.rule(
        ir.Const, ir.Lane, ir.Ref, ir.Load, ir.Read, ir.Cast, ir.Compare, ir.Logic, ir.Not
    )
    def whole(self, node: ir.Expr) -> ir.Expr:
        """An atom, a read (its index is an int), an int's conversion or a bool: whole."""
        return node

    @_FLATTEN_EXPRESSIONS.rule(ir.Unary, ir.Binary, ir.Call)
    def operands(self, node: ir.Operation) -> ir.Expr:
        """An operation that evaluates every operand: over atoms."""
        return ir.map_children(node, self.atom)

    @_FLATTEN_EXPRESSIONS.rule(ir.Select)
    def select(self, node: ir.Select) -> ir.Expr:
        """A real select: an ``if``, so a read on its untaken side stays unevaluated."""
        then, (a,) = self.flat_block((), [node.if_true])
        orelse, (b,) = self.flat_block((), [node.if_false])
        var = self.namer.var("select", Type.REAL, node.varying)
        self.emit(ir.If(node.cond, then, orelse, (ir.Merge(var, a, b),)))
        return ir.Ref(var)


# -- dropping what nothing uses ----------------------------------------------------------


def prune(stmts: Iterable[ir.Stmt], live: set[ir.Var]) -> tuple[ir.Stmt, ...]:
    """``stmts`` without the values nothing after them uses (stores and adds
    are always used); adds every variable the kept statements read to ``live``."""
    kept: list[ir.Stmt] = []
    for stmt in reversed(list(stmts)):
        _PRUNE(stmt)(stmt, live, kept)
    return tuple(reversed(kept))


#: a statement's pruning: ``rule(stmt, live, kept)`` appends what of it is kept (walking
#: backwards) and adds what that reads to ``live``
_PRUNE: ir.Rules[Callable[[Any, set[ir.Var], list[ir.Stmt]], None]] = ir.Rules("prune", ir.Stmt)


@_PRUNE.rule(ir.Let)
def _prune_let(stmt: ir.Let, live: set[ir.Var], kept: list[ir.Stmt]) -> None:
    if stmt.var in live:
        kept.append(stmt)
        live |= refs(stmt.value)


@_PRUNE.rule(ir.Store, ir.Accumulate)
def _prune_effect(stmt: ir.Store | ir.Accumulate, live: set[ir.Var], kept: list[ir.Stmt]) -> None:
    kept.append(stmt)
    live |= refs(stmt)


@_PRUNE.rule(ir.If)
def _prune_if(stmt: ir.If, live: set[ir.Var], kept: list[ir.Stmt]) -> None:
    merges = tuple(m for m in stmt.merges if m.var in live)
    for merge in merges:
        live |= refs(merge.then_value) | refs(merge.else_value)
    then = prune(stmt.then, live)
    orelse = prune(stmt.orelse, live)
    if merges or has_effects(then) or has_effects(orelse):
        live |= refs(stmt.cond)
        kept.append(ir.If(stmt.cond, then, orelse, merges))


@_PRUNE.rule(ir.Loop)
def _prune_loop(stmt: ir.Loop, live: set[ir.Var], kept: list[ir.Stmt]) -> None:
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
