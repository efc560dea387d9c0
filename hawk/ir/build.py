"""Building IR: :func:`map_children` rewrites an expression's operands, and
:class:`Builder` collects statements into (nested) blocks. Every pass that
makes IR uses these two rather than a copy of its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hawk.ir.expr import Expr
from hawk.ir.stmt import Stmt

__all__ = ["Builder", "map_children"]


def map_children(node: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """``node`` with each operand expression replaced by ``fn(operand)``.

    The node is made again (so its types are checked again); ``node`` itself
    comes back when it has no operands.
    """
    changes: dict[str, Any] = {}
    for item in dataclasses.fields(node):  # type: ignore[arg-type]
        if not item.init:
            continue
        value = getattr(node, item.name)
        if isinstance(value, Expr):
            changes[item.name] = fn(value)
        elif isinstance(value, tuple) and value and all(isinstance(v, Expr) for v in value):
            changes[item.name] = tuple(fn(v) for v in value)
    return dataclasses.replace(node, **changes) if changes else node  # type: ignore[type-var]


class Builder:
    """Collects statements: :meth:`emit` appends to the current block, and
    ``with builder.nested() as block:`` collects a nested one.

    Attributes:
        out: the current block's statements so far.
    """

    def __init__(self) -> None:
        self.out: list[Stmt] = []

    def emit(self, stmt: Stmt) -> None:
        """Append ``stmt`` to the current block."""
        self.out.append(stmt)

    @contextmanager
    def nested(self) -> Iterator[list[Stmt]]:
        """Collect the statements emitted inside the ``with`` into the list it gives."""
        outer, self.out = self.out, []
        try:
            yield self.out
        finally:
            self.out = outer
