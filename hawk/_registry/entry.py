"""The shape of a registry entry: :class:`Builtin`, one operation of the hawk language.

An operator (``+``, ``<``, ``and``, ``not``, a cast, a select) and a ``hawk.math``
function are entries of the same shape, each holding in one place what every part of
hawk needs to know of it:

* what it is: its name, the IR node that writes it (:class:`Form`) and how that node
  spells it, its arguments and documentation, the Python syntax that writes it in a
  kernel;
* what it computes: :attr:`Builtin.evaluate`, on Python numbers (constant folding) and,
  for a function, on numpy arrays (``hawk.math`` outside a kernel);
* its derivative rule (the adjoint pass, :mod:`hawk.diff`), or None for an operation
  with no gradient;
* one printer per backend: :attr:`Builtin.host`, its text in the numpy program of
  :mod:`hawk.emit.host`, and :attr:`Builtin.c`, its text in C, read by every C-family
  renderer (:mod:`hawk.emit.cuda` is one).

A debugging call (``hawk.math.debug_print``, ``hawk.math.breakpoint``) is a
:class:`DebugCall`: a statement with an action per lane, which only the reference
interpreter (:mod:`hawk.emit.reference`) takes; the other backends never see it.

A printer is a small function ``form(out, node, *args) -> str``: ``node`` is the IR node
(its ``type``, ``varying`` and operands), ``args`` its operands' texts, and ``out`` what
the emitter offers a printer (:class:`HostOut`, :class:`COut`). A new backend adds one
printer field here and one per entry.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

import numpy as np

from hawk.kinds import Type

__all__ = [
    "INT32",
    "Builtin",
    "CForm",
    "COut",
    "DebugCall",
    "Derivative",
    "Form",
    "HostForm",
    "HostOut",
    "definition_key",
    "function",
    "numpy",
    "own",
]


class Form(StrEnum):
    """The :mod:`hawk.ir` expression class that applies an operation (its name)."""

    UNARY = "Unary"
    BINARY = "Binary"
    COMPARE = "Compare"
    LOGIC = "Logic"
    NOT = "Not"
    CAST = "Cast"
    SELECT = "Select"
    CALL = "Call"


class HostOut(Protocol):
    """What the numpy program being written offers a host printer."""

    @property
    def checks(self) -> bool:
        """True when the program makes the checks of :mod:`hawk.emit.checks`."""

    def define(self, name: str, value: object) -> str:
        """Bind ``name`` to ``value`` in the program's namespace; gives ``name``."""

    def wraps(self, node: Any) -> bool:
        """True when the int operation ``node`` may leave int64 (its printer then wraps
        it, or checks it: :mod:`hawk._registry.integers`)."""

    def check_site(self, node: Any, kind: str) -> str | None:
        """The name of the check site of kind ``kind`` that operation ``node`` makes
        (:meth:`hawk.emit.checks.Ranges.operation_checks`), or None when it makes none."""

    def lanes(self) -> str:
        """The arguments naming the lanes a check sees: the mask, ``n`` and the unit of
        factored lanes."""


class COut(Protocol):
    """What the C text being written offers a C printer."""

    @property
    def checks(self) -> bool:
        """True when the kernel makes the checks of :mod:`hawk.emit.checks`."""

    @property
    def suffix(self) -> str:
        """The C math functions' suffix in the compute type (``f`` in float, ``""`` in
        double): what ``$f`` stands for in a printer's text."""

    def ctype(self, type_: Type) -> str:
        """The C type of an IR value of ``type_``."""

    def helper(self, key: tuple[str, str], definition: str) -> None:
        """Emit ``definition`` once, before the kernel (``$R`` is the compute type, ``$f``
        the math suffix and ``$inline`` the target's qualifier of a helper function)."""

    def wraps(self, node: Any) -> bool:
        """True when the int operation ``node`` may leave int64 (its printer then wraps
        it, or checks it: :mod:`hawk._registry.integers`)."""

    def int32(self, node: Any) -> bool:
        """True when the int ``node`` is written in 32 bits: its int operands' texts are
        ``int``, and a helper it calls is the :data:`INT32` definition."""

    def check_site(self, node: Any, kind: str) -> str | None:
        """The C text of the check site of kind ``kind`` that operation ``node`` makes
        (:meth:`hawk.emit.checks.Ranges.operation_checks`), or None when it makes none; a
        checking helper takes ``hawk_rec, <site>, lane``."""


#: the key, beside the IR types, of a helper's C definition for int operands written in
#: 32 bits (:meth:`COut.int32`): an overload of the helper taking and giving ``int``
INT32 = "int32"


def definition_key(out: COut, node: Any) -> Type | str:
    """The key of the C definition of the helper that ``node``'s printer calls: its type,
    or :data:`INT32` for an int written in 32 bits."""
    type_ = Type(node.type)
    return INT32 if type_ == Type.INT and out.int32(node) else type_


#: a host printer: ``form(out, node, *args)`` -> the operation's numpy text
HostForm = Callable[..., str]
#: a C printer: ``form(out, node, *args)`` -> the operation's C text
CForm = Callable[..., str]
#: a derivative rule: ``rule(bar, result, *args)`` -> the gradient sent to each argument
#: (None for one that gets none), given the gradient ``bar`` of the result. The values
#: are symbolic: they support ``+ - * / //``, unary ``-``, ``<`` and ``>`` (against values
#: or floats), ``cond.select(a, b)`` and ``x.call(name, *others)`` of a registered function.
Derivative = Callable[..., tuple[Any, ...]]


@dataclass(frozen=True)
class Builtin:
    """One operation of the hawk language: an operator or a ``hawk.math`` function.

    Attributes:
        name: its unique name (``add``, ``floordiv``, ``exp``); a function's is its name
            in ``hawk.math``.
        form: the IR expression class that applies it.
        spelling: how that class's node names it: ``Binary.op`` (``"+"``), ``Unary.op``,
            ``Compare.op``, ``Logic.op``, ``Cast.to`` (``"int"``, ``"real"``),
            ``Call.fn``; ``"not"`` and ``"select"`` for the classes of one operation.
        params: its argument names (their count is its arity).
        doc: what it computes (a function's ``hawk.math`` docstring).
        evaluate: computes it in Python: on numbers for every entry (constant folding
            evaluates operators with it), on numpy arrays too for a function (its
            ``hawk.math`` form outside a kernel).
        host: its numpy printer.
        c: its C printer.
        derivative: its derivative rule; None when it has no gradient (a comparison, a
            step such as ``//`` or ``int()``).
        lazy: the positions of the arguments it does not always evaluate (the sides of
            a select, the right of ``and``/``or``): a pass must not evaluate them ahead.
        syntax: the Python operator class that writes it in a kernel (``ast.Add``);
            None for one written otherwise.
        keeps_int: a function whose int arguments give an int (the others take reals).
        result: the type of its result when it is not its arguments' type (``floor``:
            an int from a real); None for one whose result has its arguments' type.
        bounds: for a function that keeps ints, its least and greatest int result from
            its arguments' least and greatest values (``minimum``: the least of each);
            the emitters prove table indices in range with it. None when unknown.
    """

    name: str
    form: Form
    spelling: str
    params: tuple[str, ...]
    doc: str
    evaluate: Callable[..., Any]
    host: HostForm
    c: CForm
    derivative: Derivative | None = None
    lazy: tuple[int, ...] = ()
    syntax: type[ast.AST] | None = None
    keeps_int: bool = False
    result: Type | None = None
    bounds: Callable[..., tuple[int, int]] | None = None

    @property
    def arity(self) -> int:
        """How many arguments it takes."""
        return len(self.params)


# -- hawk.math functions ---------------------------------------------------------------


@dataclass(frozen=True)
class _HostFunction:
    """A function's host printer: a call of ``compute`` by ``name`` in the numpy program
    (``_np.<name>`` is numpy's own; another name is bound in the program's namespace)."""

    compute: Callable[..., Any]
    name: str

    def __call__(self, out: HostOut, node: Any, *args: str) -> str:
        name = self.name if self.name.startswith("_np.") else out.define(self.name, self.compute)
        return f"{name}({', '.join(args)})"


def numpy(attribute: str) -> _HostFunction:
    """The host form of numpy's function ``numpy.<attribute>``."""
    return _HostFunction(getattr(np, attribute), f"_np.{attribute}")


def own(compute: Callable[..., Any]) -> _HostFunction:
    """The host form of ``compute``, hawk's own vectorised function, bound in the program
    as ``_hawk_<its name>``."""
    return _HostFunction(compute, "_hawk_" + compute.__name__.lstrip("_"))


@dataclass(frozen=True)
class _CFunction:
    """A function's C printer: a call of its C function for the argument type (``$f`` the
    math suffix), emitting the definition of a function hawk defines itself first."""

    name: str
    functions: Mapping[Type, str]
    definitions: Mapping[Type | str, str]

    def __call__(self, out: COut, node: Any, *args: str) -> str:
        type_ = Type(node.type)
        key = definition_key(out, node)
        if key in self.definitions:
            out.helper((self.name, key), self.definitions[key])
        return f"{self.functions[type_].replace('$f', out.suffix)}({', '.join(args)})"


def function(
    name: str,
    params: tuple[str, ...],
    doc: str,
    *,
    host: _HostFunction,
    c: Mapping[Type, str],
    derivative: Derivative,
    definitions: Mapping[Type | str, str] | None = None,
    bounds: Callable[..., tuple[int, int]] | None = None,
) -> Builtin:
    """A ``hawk.math`` function's entry.

    Args:
        name: its name in ``hawk.math`` and in :class:`~hawk.ir.Call`.
        params: its argument names.
        doc: the docstring of ``hawk.math.<name>``.
        host: its vectorised form, :func:`numpy` or :func:`own`.
        c: its C function by argument type (``Type.REAL`` always, ``Type.INT`` when an
            int argument stays int), ``$f`` standing for the math suffix.
        derivative: its derivative rule.
        definitions: C definitions of the functions hawk defines itself (``hawk_<name>``),
            by argument type (:data:`INT32` for ints written in 32 bits), emitted when a
            kernel calls them.
        bounds: its int results' range from its int arguments' (see :class:`Builtin`).
            An int result with bounds may be written in 32 bits (:meth:`COut.int32`), so
            a function hawk defines for ints then has an :data:`INT32` definition too.
    """
    if bounds is not None and Type.INT in (definitions or {}):
        assert INT32 in (definitions or {}), f"{name}: an int with bounds needs its INT32 form"
    return Builtin(
        name,
        Form.CALL,
        name,
        params,
        doc,
        host.compute,
        host,
        _CFunction(name, c, definitions or {}),
        derivative,
        keeps_int=Type.INT in c,
        bounds=bounds,
    )


@dataclass(frozen=True)
class DebugCall:
    """A debugging call of the hawk language: a statement that does something per lane on
    the reference backend (:mod:`hawk.emit.reference`) and is compiled out elsewhere
    (``kernel.ir``, which the numpy and C emitters read, leaves it out).

    Attributes:
        name: its name in ``hawk.math``.
        doc: what it does (the docstring of ``hawk.math.<name>``).
        run: its action for one lane, ``run(lane, values, scope)``: ``values`` are its
            arguments (text or the lane's numbers), ``scope`` the kernel's names in scope
            there and the lane's values of them.
        outside: what ``hawk.math.<name>(*values)`` does outside a kernel.
        takes_values: whether it takes arguments (a kernel that passes some to one that
            takes none is refused when it is decorated).
    """

    name: str
    doc: str
    run: Callable[[int, tuple[Any, ...], Mapping[str, Any]], None]
    outside: Callable[..., None]
    takes_values: bool = True
