"""The text form of the IR: ``str(node)`` of an expression, a statement or a kernel.

The node classes find these functions in :data:`hawk.ir.expr.TEXT_FORMS`, which this
module fills in when it is imported (:mod:`hawk.ir` imports it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from hawk.ir.expr import (
    TEXT_FORMS,
    Binary,
    Call,
    Cast,
    Compare,
    Const,
    Expr,
    Lane,
    Load,
    Logic,
    Not,
    Read,
    Ref,
    Select,
    Unary,
)
from hawk.ir.planes import Plane
from hawk.ir.rules import Rules
from hawk.ir.stmt import Accumulate, Debug, If, KernelIR, Let, Loop, Stmt, Store
from hawk.kinds import Type

__all__ = ["format_access", "format_expr", "format_kernel", "format_stmt"]


def format_expr(node: Expr) -> str:
    """An expression as hawk source, parenthesised only where needed."""
    return _format(node, 0)


def format_stmt(stmt: Stmt) -> str:
    """A statement, one line per nested statement."""
    return "\n".join(_format_stmt(stmt, 0))


def format_access(
    plane: Plane, index: tuple[Expr, ...], method: str = "at", value: Expr | None = None
) -> str:
    """A table access as hawk source: ``t.at(row=r, col=1)`` (a flat table: ``t.at(i)``),
    or with ``method`` ``"add"`` and its ``value``, ``t.add(row=r, col=1, value=v)``."""
    if plane.axes is None:
        parts = [_format(index[0], 0)]
    else:
        parts = [
            f"{label}={_format(i, 0)}" for (label, _), i in zip(plane.axes, index, strict=True)
        ]
    if value is not None:
        parts.append(f"value={_format(value, 0)}")
    return f"{plane.name}.{method}({', '.join(parts)})"


def format_kernel(kernel: KernelIR) -> str:
    """A kernel: its signature, then its body indented."""
    params = ", ".join(f"{p.name}: {p.declaration()}" for p in kernel.planes)
    lines = [f"kernel {kernel.name}({params}):"]
    for stmt in kernel.body:
        lines.extend(_format_stmt(stmt, 1))
    return "\n".join(lines)


_PRECEDENCE = {"or": 1, "and": 2, "not": 3, "cmp": 4, "+": 5, "-": 5, "*": 6, "/": 6}
_PRECEDENCE.update({"//": 6, "%": 6, "unary": 7, "**": 8})


def _format_const(value: int | float | bool) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


_EXPRESSIONS: Rules[Callable[[Any, int], str]] = Rules("printing", Expr)
_STATEMENTS: Rules[Callable[[Any, int], list[str]]] = Rules("printing", Stmt)


def _format(node: Expr, outer: int) -> str:
    """``node`` inside an expression of precedence ``outer`` (0: none)."""
    return _EXPRESSIONS(node)(node, outer)


@_EXPRESSIONS.rule(Const)
def _const(node: Const, outer: int) -> str:
    return _format_const(node.value)


@_EXPRESSIONS.rule(Lane)
def _lane(node: Lane, outer: int) -> str:
    return "lane"


@_EXPRESSIONS.rule(Ref)
def _ref(node: Ref, outer: int) -> str:
    return node.var.name


@_EXPRESSIONS.rule(Load)
def _load(node: Load, outer: int) -> str:
    return node.plane.name


@_EXPRESSIONS.rule(Read)
def _read(node: Read, outer: int) -> str:
    return format_access(node.plane, node.index)


@_EXPRESSIONS.rule(Call)
def _call(node: Call, outer: int) -> str:
    if node.fn == "pow":  # as a kernel most often writes it, x ** y (right-associative)
        base, exponent = node.args
        level = _PRECEDENCE["**"]
        left = _format(base, level + 1)
        if isinstance(base, Const) and left.startswith("-"):  # (-2) ** x, not -(2 ** x)
            left = f"({left})"
        return _paren(f"{left} ** {_format(exponent, level)}", level, outer)
    return f"{node.fn}({', '.join(_format(a, 0) for a in node.args)})"


@_EXPRESSIONS.rule(Cast)
def _cast(node: Cast, outer: int) -> str:
    return f"{'float' if node.to == Type.REAL else 'int'}({_format(node.operand, 0)})"


@_EXPRESSIONS.rule(Select)
def _select(node: Select, outer: int) -> str:
    text = f"{_format(node.if_true, 1)} if {_format(node.cond, 1)} else "
    text += _format(node.if_false, 1)
    return f"({text})" if outer > 0 else text


@_EXPRESSIONS.rule(Unary)
def _unary(node: Unary, outer: int) -> str:
    level = _PRECEDENCE["unary"]
    return _paren(f"{node.op}{_format(node.operand, level)}", level, outer)


@_EXPRESSIONS.rule(Not)
def _not(node: Not, outer: int) -> str:
    level = _PRECEDENCE["not"]
    return _paren(f"not {_format(node.operand, level)}", level, outer)


@_EXPRESSIONS.rule(Binary, Logic)
def _infix(node: Binary | Logic, outer: int) -> str:
    return _operator(node, _PRECEDENCE[node.op], outer)


@_EXPRESSIONS.rule(Compare)
def _compare(node: Compare, outer: int) -> str:
    return _operator(node, _PRECEDENCE["cmp"], outer)


def _operator(node: Binary | Compare | Logic, level: int, outer: int) -> str:
    left = _format(node.left, level)
    right = _format(node.right, level + 1)
    return _paren(f"{left} {node.op} {right}", level, outer)


def _paren(text: str, level: int, outer: int) -> str:
    return f"({text})" if level < outer else text


def _format_stmt(stmt: Stmt, depth: int) -> list[str]:
    """``stmt``'s lines, indented ``depth`` levels."""
    return _STATEMENTS(stmt)(stmt, depth)


@_STATEMENTS.rule(Let)
def _let(stmt: Let, depth: int) -> list[str]:
    return [f"{_pad(depth)}{stmt.var.name} = {stmt.value}"]


@_STATEMENTS.rule(Store)
def _store(stmt: Store, depth: int) -> list[str]:
    return [f"{_pad(depth)}store {stmt.plane.name} = {stmt.value}"]


@_STATEMENTS.rule(Accumulate)
def _accumulate(stmt: Accumulate, depth: int) -> list[str]:
    return [f"{_pad(depth)}add {format_access(stmt.plane, stmt.index)} += {stmt.value}"]


@_STATEMENTS.rule(Debug)
def _debug(stmt: Debug, depth: int) -> list[str]:
    """A debugging call (only a kernel's ``debug_ir`` holds one), as it was written."""
    items = ", ".join(repr(item) if isinstance(item, str) else str(item) for item in stmt.items)
    return [f"{_pad(depth)}{stmt.call}({items})"]


@_STATEMENTS.rule(Loop)
def _loop(stmt: Loop, depth: int) -> list[str]:
    pad = _pad(depth)
    bounds = f"{stmt.start}, {stmt.stop}, {stmt.step}"
    carries = ", ".join(f"{c.var.name} = {c.init}" for c in stmt.carries)
    head = f"{pad}for {stmt.index.name} in range({bounds})"
    lines = [head + (f" carrying {carries}:" if carries else ":")]
    for inner in stmt.body:
        lines.extend(_format_stmt(inner, depth + 1))
    lines.extend(f"{pad}    next {c.var.name} = {c.update}" for c in stmt.carries)
    return lines


@_STATEMENTS.rule(If)
def _if(stmt: If, depth: int) -> list[str]:
    pad = _pad(depth)
    lines = [f"{pad}if {stmt.cond}:"]
    lines.extend(_format_branch(stmt.then, [m.then_value for m in stmt.merges], stmt, depth))
    lines.append(f"{pad}else:")
    lines.extend(_format_branch(stmt.orelse, [m.else_value for m in stmt.merges], stmt, depth))
    return lines


def _pad(depth: int) -> str:
    return "    " * depth


def _format_branch(block: tuple[Stmt, ...], values: list[Expr], stmt: If, depth: int) -> list[str]:
    pad = "    " * (depth + 1)
    lines = [line for inner in block for line in _format_stmt(inner, depth + 1)]
    lines.extend(f"{pad}-> {m.var.name} = {v}" for m, v in zip(stmt.merges, values, strict=True))
    return lines or [f"{pad}pass"]


TEXT_FORMS.update({Expr: format_expr, Stmt: format_stmt, KernelIR: format_kernel})
