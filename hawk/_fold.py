"""Constant folding: :func:`fold` evaluates a node whose operands are constants.

An operation is evaluated by its registry entry (``Builtin.evaluate``), ints exactly and
reals in double. A ``hawk.math`` call is never folded: its value is left to the math
library of the backend that runs it, as an operator's is not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hawk import ir
from hawk.errors import HawkError
from hawk.kinds import Type

__all__ = ["fold"]

_RULES: ir.Rules[Callable[[Any], ir.Expr]] = ir.Rules("fold", ir.Expr)


def fold(node: ir.Expr) -> ir.Expr:
    """``node`` with constant operands evaluated (ints exactly, reals in double).

    A real division by a constant zero is left to the device's IEEE rules.

    Raises:
        HawkError: an int ``//`` or ``%`` by the constant 0, or an int result
            outside 64 bits; a node with no folding rule.
    """
    return _RULES(node)(node)


@_RULES.rule(ir.Const, ir.Lane, ir.Ref, ir.Load, ir.Read, ir.Call)
def _unchanged(node: ir.Expr) -> ir.Expr:
    return node


def _constants(node: ir.Expr) -> list[int | float | bool] | None:
    """The values of ``node``'s operands when every one is a constant, else None."""
    values = [child.value for child in node.children() if isinstance(child, ir.Const)]
    return values if len(values) == len(node.children()) else None


@_RULES.rule(ir.Binary)
def _binary(node: ir.Binary) -> ir.Expr:
    if node.op in ("//", "%") and node.type == Type.INT and node.right == ir.Const(0):
        raise HawkError(f"{node} divides an int by the constant 0 (ZeroDivisionError)")
    values = _constants(node)
    if values is None or (node.op in ("/", "//", "%") and values[1] == 0):
        return node
    return ir.Const(node.builtin.evaluate(*values))


@_RULES.rule(ir.Unary, ir.Compare, ir.Logic, ir.Not, ir.Cast, ir.Select)
def _evaluated(node: ir.Operation) -> ir.Expr:
    values = _constants(node)
    return node if values is None else ir.Const(node.builtin.evaluate(*values))
