"""The registry of ``hawk.math`` functions: one :class:`Function` entry each.

An entry holds everything hawk knows of a function: its name and arguments,
its documentation, whether an int argument stays int, its numpy form (the
host emitter), its CUDA C form (the device emitter), and its derivative rule
(:mod:`hawk.diff`). The user-facing functions in :mod:`hawk.math` are made
from the entries, and :class:`~hawk.ir.Call` checks calls against them, so
adding a function is adding one entry to :data:`FUNCTIONS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hawk.kinds import Type

__all__ = ["FUNCTIONS", "Function"]

#: a derivative rule: ``rule(bar, result, *args)`` -> the gradient sent to each argument
Derivative = Callable[..., tuple[Any, ...]]


@dataclass(frozen=True)
class Function:
    """One ``hawk.math`` function.

    Attributes:
        name: its name in ``hawk.math`` and in the IR's :class:`~hawk.ir.Call`.
        params: its argument names (their count is its arity).
        doc: the docstring of ``hawk.math.<name>``.
        numpy: the numpy function computing it over arrays, ``numpy.<numpy>``.
        cuda: the CUDA C function by argument type (``"real"`` always, ``"int"``
            when an int argument stays int); ``$f`` stands for the math suffix
            (``f`` in float, nothing in double).
        device: CUDA C definitions hawk emits for its own functions (named
            ``hawk_<name>``), by argument type; ``$R`` stands for the real type.
        derivative: ``derivative(bar, result, *args)`` -> one gradient per
            argument, given the gradient ``bar`` of the result. The values are
            symbolic: they support ``+ - * /``, unary ``-``, ``<`` and ``>``
            (against values or floats), ``cond.select(a, b)`` and
            ``x.call(name, *others)`` of a registered function.
    """

    name: str
    params: tuple[str, ...]
    doc: str
    numpy: str
    cuda: Mapping[Type, str]
    derivative: Derivative
    device: Mapping[Type, str] = field(default_factory=dict)

    @property
    def arity(self) -> int:
        """How many arguments it takes."""
        return len(self.params)

    @property
    def keeps_int(self) -> bool:
        """True when int arguments give an int (the others compute in real)."""
        return Type.INT in self.cuda


def _real(name: str, doc: str, derivative: Derivative, numpy: str | None = None) -> Function:
    """A one-argument real function with a CUDA math-library form of the same name."""
    return Function(name, ("x",), doc, numpy or name, {Type.REAL: name + "$f"}, derivative)


def _select(name: str, test: str) -> Function:
    """``minimum`` / ``maximum``: NaN when either argument is NaN, like numpy."""
    return Function(
        name,
        ("x", "y"),
        f"The {'smaller' if name == 'minimum' else 'larger'} of two values (NaN if either is NaN).",
        name,
        {Type.REAL: f"hawk_{name}", Type.INT: f"hawk_{name}"},
        lambda bar, result, x, y: (
            _first(x, y, test).select(bar, 0.0),
            _first(x, y, test).select(0.0, bar),
        ),
        {
            Type.INT: f"__device__ __forceinline__ long long hawk_{name}(long long a, long long b)"
            f"\n{{\n    return a {test} b ? a : b;\n}}",
            Type.REAL: f"__device__ __forceinline__ $R hawk_{name}($R a, $R b)\n{{\n"
            f"    return (a {test} b || a != a) ? a : b;\n}}",
        },
    )


def _first(x: Any, y: Any, test: str) -> Any:
    return x < y if test == "<" else x > y


_ENTRIES = (
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
    Function(
        "abs",
        ("x",),
        "The absolute value (int for an int).",
        "abs",
        {Type.REAL: "fabs$f", Type.INT: "llabs"},
        lambda bar, result, x: ((x > 0.0).select(bar, (x < 0.0).select(-bar, 0.0)),),
    ),
    _select("minimum", "<"),
    _select("maximum", ">"),
    Function(
        "pow",
        ("x", "y"),
        "x ** y for reals (also written ``x ** y`` in a kernel).",
        "power",
        {Type.REAL: "pow$f"},
        lambda bar, result, x, y: (
            bar * (y * x.call("pow", y - 1.0)),
            bar * (result * x.call("log")),
        ),
    ),
)

#: every ``hawk.math`` function by name
FUNCTIONS: Mapping[str, Function] = {entry.name: entry for entry in _ENTRIES}
