"""The text form of the IR: ``str(node)`` of an expression, a statement or a kernel."""

from __future__ import annotations

import math

from hawk.ir.expr import (
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
from hawk.ir.stmt import Accumulate, If, KernelIR, Let, Loop, Stmt, Store
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
_PRECEDENCE.update({"//": 6, "%": 6, "unary": 7})


def _format_const(value: int | float | bool) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


def _format(node: Expr, outer: int) -> str:
    if isinstance(node, Const):
        return _format_const(node.value)
    if isinstance(node, Lane):
        return "lane"
    if isinstance(node, Ref):
        return node.var.name
    if isinstance(node, Load):
        return node.plane.name
    if isinstance(node, Read):
        return format_access(node.plane, node.index)
    if isinstance(node, Call):
        return f"{node.fn}({', '.join(_format(a, 0) for a in node.args)})"
    if isinstance(node, Cast):
        return f"{'float' if node.to == Type.REAL else 'int'}({_format(node.operand, 0)})"
    if isinstance(node, Select):
        text = f"{_format(node.if_true, 1)} if {_format(node.cond, 1)} else "
        text += _format(node.if_false, 1)
        return f"({text})" if outer > 0 else text
    if isinstance(node, Unary):
        level = _PRECEDENCE["unary"]
        return _paren(f"{node.op}{_format(node.operand, level)}", level, outer)
    if isinstance(node, Not):
        level = _PRECEDENCE["not"]
        return _paren(f"not {_format(node.operand, level)}", level, outer)
    if isinstance(node, Binary | Compare | Logic):
        level = _PRECEDENCE["cmp" if isinstance(node, Compare) else node.op]
        left = _format(node.left, level)
        right = _format(node.right, level + 1)
        return _paren(f"{left} {node.op} {right}", level, outer)
    raise TypeError(f"not a hawk expression: {node!r}")


def _paren(text: str, level: int, outer: int) -> str:
    return f"({text})" if level < outer else text


def _format_stmt(stmt: Stmt, depth: int) -> list[str]:
    pad = "    " * depth
    if isinstance(stmt, Let):
        return [f"{pad}{stmt.var.name} = {stmt.value}"]
    if isinstance(stmt, Store):
        return [f"{pad}store {stmt.plane.name} = {stmt.value}"]
    if isinstance(stmt, Accumulate):
        return [f"{pad}add {format_access(stmt.plane, stmt.index)} += {stmt.value}"]
    if isinstance(stmt, Loop):
        bounds = f"{stmt.start}, {stmt.stop}, {stmt.step}"
        carries = ", ".join(f"{c.var.name} = {c.init}" for c in stmt.carries)
        head = f"{pad}for {stmt.index.name} in range({bounds})"
        lines = [head + (f" carrying {carries}:" if carries else ":")]
        for inner in stmt.body:
            lines.extend(_format_stmt(inner, depth + 1))
        lines.extend(f"{pad}    next {c.var.name} = {c.update}" for c in stmt.carries)
        return lines
    if isinstance(stmt, If):
        lines = [f"{pad}if {stmt.cond}:"]
        lines.extend(_format_branch(stmt.then, [m.then_value for m in stmt.merges], stmt, depth))
        lines.append(f"{pad}else:")
        lines.extend(_format_branch(stmt.orelse, [m.else_value for m in stmt.merges], stmt, depth))
        return lines
    raise TypeError(f"not a hawk statement: {stmt!r}")


def _format_branch(block: tuple[Stmt, ...], values: list[Expr], stmt: If, depth: int) -> list[str]:
    pad = "    " * (depth + 1)
    lines = [line for inner in block for line in _format_stmt(inner, depth + 1)]
    lines.extend(f"{pad}-> {m.var.name} = {v}" for m, v in zip(stmt.merges, values, strict=True))
    return lines or [f"{pad}pass"]
