"""What a free name of a kernel stands for, looked up once at decoration time.

A name a kernel uses that is neither a parameter nor assigned in its body
is looked up in the function's closure, then its globals, then the
builtins (:func:`resolve`); ``a.b.c`` reads attributes of modules only
(:func:`module_attribute`). Numbers are baked in as constants
(:func:`as_number`).
"""

from __future__ import annotations

import builtins
import types
from typing import Any

import numpy as np

from hawk.errors import HawkError

__all__ = ["Unresolved", "as_number", "closure", "module_attribute", "resolve"]


class Unresolved(HawkError, LookupError):
    """A name that is neither in the closure, the globals nor the builtins (the message
    says which, or why it has no value)."""


def resolve(fn: types.FunctionType, name: str) -> Any:
    """The value ``name`` has for ``fn``'s body, outside the body.

    Raises:
        Unresolved: ``fn`` cannot see such a name, or it is a variable of an enclosing
            function that has no value yet (assigned after the kernel's ``def``).
    """
    code = fn.__code__
    if name in code.co_freevars and fn.__closure__:
        cell = fn.__closure__[code.co_freevars.index(name)]
        try:
            return cell.cell_contents
        except ValueError:  # (Python would read it when the body runs; hawk reads it now)
            raise Unresolved(
                f"name {name!r} is a variable of the function around the kernel, with no "
                "value yet: hawk reads it when the kernel is made (@hawk.kernel), so assign "
                "it before the kernel's def"
            ) from None
    if name in fn.__globals__:
        return fn.__globals__[name]
    if hasattr(builtins, name):
        return getattr(builtins, name)
    raise Unresolved(
        f"name {name!r} is not defined; a kernel reads its parameters, the names it assigns "
        f"and numbers of its module or closure: add {name} as a parameter (e.g. {name}: "
        "hawk.Param) or define it before the kernel"
    )


def closure(fn: types.FunctionType) -> dict[str, Any]:
    """The variables of the functions around ``fn`` that its body reads and that have a
    value, by name."""
    values = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        try:
            values[name] = cell.cell_contents
        except ValueError:  # assigned after fn's def
            continue
    return values


def module_attribute(value: Any, parts: list[str]) -> Any:
    """``value.parts[0].parts[1]...``, reading attributes of modules only.

    Raises:
        Unresolved: a step is not a module, or has no such attribute.
    """
    for part in parts:
        if not isinstance(value, types.ModuleType) or not hasattr(value, part):
            raise Unresolved(part)
        value = getattr(value, part)
    return value


def as_number(value: Any) -> bool | int | float | None:
    """``value`` as a Python bool, int or float (numpy scalars included); None otherwise."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    return None
