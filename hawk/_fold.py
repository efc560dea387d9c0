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
from hawk.ir.expr import INT_MAX, INT_MIN, int_takes
from hawk.kinds import Type

__all__ = ["check_constant", "fold"]

_RULES: ir.Rules[Callable[[Any], ir.Expr]] = ir.Rules("fold", ir.Expr)


def fold(node: ir.Expr) -> ir.Expr:
    """``node`` with constant operands evaluated (ints exactly, reals in double).

    A real division by a constant zero is left to the device's IEEE rules.

    Raises:
        HawkError: an int ``//`` or ``%`` by the constant 0, or an int result of
            constants outside 64 bits (run-time ints wrap; a constant expression must
            fit, as a written constant must); a node with no folding rule.
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
    return _constant(node, node.builtin.evaluate(*values))


@_RULES.rule(ir.Unary, ir.Compare, ir.Logic, ir.Not, ir.Cast, ir.Select)
def _evaluated(node: ir.Operation) -> ir.Expr:
    values = _constants(node)
    if values is None:
        return node
    real_to_int = (
        isinstance(node, ir.Cast) and node.to == Type.INT and node.operand.type == Type.REAL
    )
    if real_to_int and not int_takes(values[0]):  # NaN, +-inf, beyond int64
        return node  # int() raises as the kernel runs, naming the lane
    return _constant(node, node.builtin.evaluate(*values))


def _constant(node: ir.Operation, value: int | float | bool) -> ir.Const:
    """The constant ``node`` of constants folds to.

    Raises:
        HawkError: an int beyond int64 (:func:`check_constant`).
    """
    check_constant(str(node), value)
    return ir.Const(value)


def check_constant(text: str, value: int | float | bool) -> None:
    """Refuse the value of the constant expression ``text`` when it is an int beyond int64,
    as a constant written so is: an expression of constants is a constant its author
    wrote, whose exact value they meant (operations on run-time values wrap instead).

    Raises:
        HawkError: ``value`` is an int outside int64.
    """
    if type(value) is int and not INT_MIN <= value <= INT_MAX:
        size = abs(value).bit_length()
        shown = str(value) if size <= 128 else f"about {'-' if value < 0 else ''}2**{size - 1}"
        example = f", e.g. {float(value):g}," if size <= 1023 else ""
        raise HawkError(
            f"the constant expression {text} is {shown}, which does not fit in 64 bits; "
            f"hawk ints are from {INT_MIN} to {INT_MAX}, and a constant expression must "
            f"fit (write a float{example} for a real value)"
        )
