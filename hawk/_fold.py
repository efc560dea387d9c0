"""Constant folding: :func:`fold` evaluates a node whose operands are constants."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from hawk import ir
from hawk.errors import HawkError
from hawk.kinds import Type

__all__ = ["fold"]

_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
}

_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def _consts(node: ir.Expr) -> Iterator[Any]:
    for child in node.children():
        if not isinstance(child, ir.Const):
            return
        yield child.value


def fold(node: ir.Expr) -> ir.Expr:
    """``node`` with constant operands evaluated (ints exactly, reals in double).

    A real division by a constant zero is left to the device's IEEE rules.

    Raises:
        HawkError: an int ``//`` or ``%`` by the constant 0, or an int result
            outside 64 bits.
    """
    if (
        isinstance(node, ir.Binary)
        and node.op in ("//", "%")
        and node.type == Type.INT
        and node.right == ir.Const(0)
    ):
        raise HawkError(f"{node} divides an int by the constant 0 (ZeroDivisionError)")
    values = list(_consts(node))
    if len(values) != len(node.children()) or not values:
        return node
    if isinstance(node, ir.Binary):
        a, b = values
        if node.op in ("/", "//", "%") and b == 0:
            return node
        return ir.Const(_ARITHMETIC[node.op](a, b))
    if isinstance(node, ir.Unary):
        return ir.Const(-values[0] if node.op == "-" else values[0])
    if isinstance(node, ir.Cast):
        return ir.Const(float(values[0]) if node.to == Type.REAL else int(values[0]))
    if isinstance(node, ir.Compare):
        return ir.Const(_COMPARE[node.op](*values))
    if isinstance(node, ir.Logic):
        return ir.Const(values[0] and values[1] if node.op == "and" else values[0] or values[1])
    if isinstance(node, ir.Not):
        return ir.Const(not values[0])
    if isinstance(node, ir.Select):
        return ir.Const(values[1] if values[0] else values[2])
    return node
