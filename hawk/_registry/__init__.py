"""The registry of hawk's built-in operations: every operator and ``hawk.math`` function
is one :class:`~hawk._registry.entry.Builtin` entry, holding its meaning, its derivative
rule and its printer for each backend (``entry``: the shape; ``operators`` and
``functions``: the entries).

An IR node that applies an operation finds its entry with :func:`spelled` (its
``builtin`` property); the tracer, constant folding, the adjoint pass and the emitters
read the entry rather than keeping a table of their own.
"""

from __future__ import annotations

from collections.abc import Iterator

from hawk._registry.entry import Builtin, DebugCall, Form
from hawk._registry.functions import DEBUG_CALLS, FUNCTIONS
from hawk._registry.operators import OPERATORS

__all__ = [
    "BUILTINS",
    "DEBUG_CALLS",
    "Builtin",
    "DebugCall",
    "Form",
    "math_functions",
    "spelled",
    "spellings",
]

#: every built-in operation, by name: the operators, then the ``hawk.math`` functions
BUILTINS: dict[str, Builtin] = {entry.name: entry for entry in (*OPERATORS, *FUNCTIONS)}

_OPERATORS = {(entry.form, entry.spelling): entry for entry in OPERATORS}


def spelled(form: Form, spelling: str) -> Builtin | None:
    """The entry that nodes of ``form`` name ``spelling``; None when there is none.

    A function's spelling is its name, looked up in :data:`BUILTINS` each time (so an
    entry added there is found); the operators are the language's syntax, fixed.
    """
    if form is Form.CALL:
        entry = BUILTINS.get(spelling)
        return entry if entry is not None and entry.form is Form.CALL else None
    return _OPERATORS.get((form, spelling))


def spellings(form: Form) -> Iterator[str]:
    """How nodes of ``form`` may name their operation, in registry order."""
    return (entry.spelling for entry in BUILTINS.values() if entry.form is form)


def math_functions() -> dict[str, Builtin]:
    """The ``hawk.math`` functions, by name."""
    return {name: entry for name, entry in BUILTINS.items() if entry.form is Form.CALL}
