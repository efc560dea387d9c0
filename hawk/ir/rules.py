"""Rule tables: how a pass or an emitter dispatches on the class of an IR node.

Each pass over the IR and each emitter that must handle every node keeps a
:class:`Rules` table from node class to handler, one per family (expressions,
statements). A node whose class has no rule is refused by name, ``HawkError("no adjoint
rule for Foo")``, never handled by a default: a new IR class gets a rule in every
table, or it is refused everywhere. :data:`TABLES` lists every table made, so a test
holds each to every class of :data:`~hawk.ir.EXPRESSIONS` and
:data:`~hawk.ir.STATEMENTS`.

Analyses that recognise a pattern (contraction recognition, the emitters' loop
batching, the range proofs of the checks) are not tables: a node they do not know
fails the pattern, which is their safe answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from hawk.errors import HawkError, HawkTypeError, HawkValueError
from hawk.ir.expr import Expr
from hawk.ir.stmt import Stmt

__all__ = ["TABLES", "Rules"]

H = TypeVar("H", bound=Callable[..., Any])

#: every rule table, in the order they were made
TABLES: list[Rules[Any]] = []


class Rules(Generic[H]):
    """One pass's (or emitter's) handler for each class of one IR family.

    Attributes:
        name: the pass, as its refusals name it (``"adjoint"``).
        family: :class:`~hawk.ir.Expr` or :class:`~hawk.ir.Stmt`.
    """

    def __init__(self, name: str, family: type[Expr] | type[Stmt]) -> None:
        self.name = name
        self.family = family
        self._rules: dict[type, H] = {}
        TABLES.append(self)

    def rule(self, *classes: type) -> Callable[[H], H]:
        """A decorator that makes a handler the rule of ``classes``."""

        def register(handler: H) -> H:
            for cls in classes:
                if not issubclass(cls, self.family):
                    raise HawkTypeError(
                        f"{self.name}: {cls.__name__} is not a {self.family.__name__}"
                    )
                if cls in self._rules:
                    raise HawkValueError(f"{self.name} has a rule for {cls.__name__} already")
                self._rules[cls] = handler
            return handler

        return register

    def __call__(self, node: Expr | Stmt) -> H:
        """The rule of ``node``'s class.

        Raises:
            HawkError: the class has no rule here.
        """
        try:
            return self._rules[type(node)]
        except KeyError:
            raise HawkError(f"no {self.name} rule for {type(node).__name__}") from None

    def method(self, owner: object, node: Expr | Stmt) -> Callable[..., Any]:
        """The rule of ``node``'s class as a method of ``owner``, looked up by the rule's
        name, so a subclass of ``owner``'s class that overrides it is heard."""
        return getattr(owner, self(node).__name__)

    @property
    def classes(self) -> frozenset[type]:
        """The classes it has a rule for."""
        return frozenset(self._rules)

    def __repr__(self) -> str:
        return f"<rules of {self.name} for {self.family.__name__}>"
