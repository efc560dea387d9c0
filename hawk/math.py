"""The functions a hawk kernel may call.

Inside a kernel they become IR; outside one the numeric functions work on
numbers and numpy arrays (so a reference can be written with them), while
``sample_index`` and ``split_index`` only have a meaning per lane and raise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from hawk.ir import HawkError

__all__ = [
    "abs",
    "cos",
    "exp",
    "log",
    "maximum",
    "minimum",
    "pow",
    "sample_index",
    "sin",
    "split_index",
    "sqrt",
    "tanh",
]

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
def split_index(n: int) -> tuple[int, int]:
    """``(lane // n, lane % n)`` for a constant int ``n``; unpack it:
    ``sample, unit = split_index(U)``."""
    raise HawkError("hawk.math.split_index() only has a meaning inside a @hawk.kernel")


@_op("exp")
def exp(x: Any) -> Any:
    """e ** x."""
    return np.exp(x)


@_op("log")
def log(x: Any) -> Any:
    """The natural logarithm."""
    return np.log(x)


@_op("sqrt")
def sqrt(x: Any) -> Any:
    """The square root."""
    return np.sqrt(x)


@_op("sin")
def sin(x: Any) -> Any:
    """The sine (radians)."""
    return np.sin(x)


@_op("cos")
def cos(x: Any) -> Any:
    """The cosine (radians)."""
    return np.cos(x)


@_op("tanh")
def tanh(x: Any) -> Any:
    """The hyperbolic tangent."""
    return np.tanh(x)


@_op("abs")
def abs(x: Any) -> Any:
    """The absolute value (int for an int)."""
    return np.abs(x)


@_op("minimum")
def minimum(x: Any, y: Any) -> Any:
    """The smaller of two values (NaN if either is NaN)."""
    return np.minimum(x, y)


@_op("maximum")
def maximum(x: Any, y: Any) -> Any:
    """The larger of two values (NaN if either is NaN)."""
    return np.maximum(x, y)


@_op("pow")
def pow(x: Any, y: Any) -> Any:
    """x ** y for reals (also written ``x ** y`` in a kernel)."""
    return np.power(x, y)
