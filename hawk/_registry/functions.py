"""The ``hawk.math`` functions, one :class:`~hawk._registry.entry.Builtin` each.

:mod:`hawk.math` makes its public functions from these entries, and the tracer, both
emitters and the adjoint read them, so a function is added by adding one entry here.
"""

from __future__ import annotations

from typing import Any

from hawk._registry.entry import Builtin, function, numpy
from hawk.kinds import Type

__all__ = ["FUNCTIONS"]


def _real(name: str, doc: str, derivative: Any) -> Builtin:
    """A one-argument real function that numpy and C's math library both have."""
    return function(
        name, ("x",), doc, host=numpy(name), c={Type.REAL: name + "$f"}, derivative=derivative
    )


def _select(name: str, test: str) -> Builtin:
    """``minimum`` / ``maximum``: NaN when either argument is NaN, like numpy."""
    return function(
        name,
        ("x", "y"),
        f"The {'smaller' if name == 'minimum' else 'larger'} of two values (NaN if either is NaN).",
        host=numpy(name),
        c={Type.REAL: f"hawk_{name}", Type.INT: f"hawk_{name}"},
        derivative=lambda bar, result, x, y: (
            _first(x, y, test).select(bar, 0.0),
            _first(x, y, test).select(0.0, bar),
        ),
        definitions={
            Type.INT: f"$inline long long hawk_{name}(long long a, long long b)"
            f"\n{{\n    return a {test} b ? a : b;\n}}",
            Type.REAL: f"$inline $R hawk_{name}($R a, $R b)\n{{\n"
            f"    return (a {test} b || a != a) ? a : b;\n}}",
        },
    )


def _first(x: Any, y: Any, test: str) -> Any:
    return x < y if test == "<" else x > y


#: every ``hawk.math`` function
FUNCTIONS: tuple[Builtin, ...] = (
    _real("exp", "e ** x.", lambda bar, result, x: (bar * result,)),
    _real("log", "The natural logarithm.", lambda bar, result, x: (bar / x,)),
    _real("sqrt", "The square root.", lambda bar, result, x: (bar * 0.5 / result,)),
    _real("sin", "The sine (radians).", lambda bar, result, x: (bar * x.call("cos"),)),
    _real("cos", "The cosine (radians).", lambda bar, result, x: (-(bar * x.call("sin")),)),
    _real(
        "tanh",
        "The hyperbolic tangent.",
        lambda bar, result, x: (bar * (1.0 - result * result),),
    ),
    function(
        "abs",
        ("x",),
        "The absolute value (int for an int).",
        host=numpy("abs"),
        c={Type.REAL: "fabs$f", Type.INT: "llabs"},
        derivative=lambda bar, result, x: ((x > 0.0).select(bar, (x < 0.0).select(-bar, 0.0)),),
    ),
    _select("minimum", "<"),
    _select("maximum", ">"),
    function(
        "pow",
        ("x", "y"),
        "x ** y for reals (also written ``x ** y`` in a kernel).",
        host=numpy("power"),
        c={Type.REAL: "pow$f"},
        derivative=lambda bar, result, x, y: (
            bar * (y * x.call("pow", y - 1.0)),
            bar * (result * x.call("log")),
        ),
    ),
)
