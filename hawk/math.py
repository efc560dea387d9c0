"""The functions a hawk kernel may call.

Inside a kernel they become IR; outside one the numeric functions work on
numbers and numpy arrays (so a reference can be written with them), while
``sample_index`` and ``split_index`` only have a meaning per lane and raise.
The debugging calls ``debug_print`` and ``breakpoint`` act per lane on the reference
backend and are compiled out on the others; outside a kernel they print or break.

The numeric functions are made from hawk's one table of operations (each
entry's vectorised form and documentation), so this list and what a kernel may
call cannot disagree.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from hawk._registry import DEBUG_CALLS, Builtin, DebugCall, math_functions
from hawk.errors import HawkError, HawkTypeError

__all__ = ["sample_index", "split_index", *math_functions(), *DEBUG_CALLS]

_F = TypeVar("_F", bound=Callable[..., Any])


def _op(name: str) -> Callable[[_F], _F]:
    def mark(function: _F) -> _F:
        function.__hawk_op__ = name  # type: ignore[attr-defined]
        return function

    return mark


@_op("sample_index")
def sample_index() -> int:
    """The lane index (int, from 0 to the lane count - 1)."""
    raise HawkError("hawk.math.sample_index() only has a meaning inside a @hawk.kernel")


@_op("split_index")
def split_index(*extents: int) -> tuple[int, ...]:
    """The lane's indices in a row-major array whose last axes have the constant int
    ``extents``: ``(lane // n, lane % n)`` for one, ``(lane // (n1 * n2), lane // n2 % n1,
    lane % n2)`` for two, and so on. Unpack it: ``sample, unit = split_index(U)``, ``chunk,
    row, col = split_index(R, C)``."""
    raise HawkError("hawk.math.split_index() only has a meaning inside a @hawk.kernel")


def _public(entry: Builtin) -> Callable[..., Any]:
    """``hawk.math.<name>``: the entry's vectorised function, documented and marked."""
    compute = entry.evaluate

    def function(*args: Any) -> Any:
        if len(args) != entry.arity:
            raise HawkTypeError(f"hawk.math.{entry.name} takes {entry.arity} argument(s)")
        try:
            return compute(*args)
        except TypeError as exc:  # (numpy's, for a str or an object)
            raise HawkTypeError(
                f"hawk.math.{entry.name} takes numbers or numpy arrays of them ({exc})"
            ) from None

    function.__name__ = function.__qualname__ = entry.name
    function.__module__ = __name__
    function.__doc__ = entry.doc
    function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_ONLY) for p in entry.params]
    )
    return _op(entry.name)(function)


globals().update({name: _public(entry) for name, entry in math_functions().items()})


def _debugging(call: DebugCall) -> Callable[..., Any]:
    """``hawk.math.<name>`` of a debugging call: outside a kernel, its ``outside``."""
    action = call.outside

    def function(*values: Any) -> None:
        action(*values)

    function.__name__ = function.__qualname__ = call.name
    function.__module__ = __name__
    function.__doc__ = call.doc
    return _op(call.name)(function)


globals().update({name: _debugging(call) for name, call in DEBUG_CALLS.items()})
