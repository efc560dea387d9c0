"""IR values and expressions: :class:`Var` and the :class:`Expr` nodes.

Every node checks its operands' types when it is made and records its own
``type`` (a :class:`~hawk.kinds.Type`) and ``varying`` (False when it holds
the same value on every lane).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hawk._registry import Builtin, Form, math_functions, spelled, spellings
from hawk.errors import HawkError
from hawk.ir.planes import Plane
from hawk.kinds import PlaneKind, Type

__all__ = [
    "ARITHMETIC",
    "COMPARISONS",
    "EXPRESSIONS",
    "OPERATIONS",
    "Binary",
    "Call",
    "Cast",
    "Compare",
    "Const",
    "Expr",
    "Lane",
    "Load",
    "Logic",
    "Not",
    "Operation",
    "Read",
    "Ref",
    "Select",
    "Unary",
    "Var",
]

#: the arithmetic operators of :class:`Binary`
ARITHMETIC = frozenset(spellings(Form.BINARY))
#: the operators of :class:`Compare`
COMPARISONS = frozenset(spellings(Form.COMPARE))

#: the range of an int value (64-bit)
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


def int_takes(real: Any) -> Any:
    """True where ``int()`` of ``real`` (a number, or a numpy array elementwise) is an
    int64: finite and in ``[-2**63, 2**63)``; NaN and +-inf never are."""
    return (real >= -(2.0**63)) & (real < 2.0**63)


@dataclass(frozen=True)
class Var:
    """A variable, assigned exactly once (a loop carry once per iteration).

    Attributes:
        name: unique within its kernel (``acc``, ``acc.1``, ...).
        type: a :class:`~hawk.kinds.Type` (its string is accepted).
        varying: False when it holds the same value on every lane.
    """

    name: str
    type: Type
    varying: bool

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", Type(self.type))


# -- expressions -------------------------------------------------------------------------


TEXT_FORMS: dict[type, Callable[[Any], str]] = {}
"""How an expression, a statement and a kernel read as text (``str(node)``), by base class.

:mod:`hawk.ir.printing` fills it in: it reads every node class, so it comes after
them (:mod:`hawk.ir` imports it), and the nodes find their text form here.
"""


class Expr:
    """Base of expression nodes; each has ``type`` and ``varying``.

    A node that applies one of hawk's built-in operations (an operator or a
    ``hawk.math`` function) is an :class:`Operation`.
    """

    type: Type
    varying: bool

    def children(self) -> tuple[Expr, ...]:
        """The operand expressions, in evaluation order."""
        return ()

    def __str__(self) -> str:
        return TEXT_FORMS[Expr](self)


def _set(node: Expr, type_: Type, varying: bool) -> None:
    object.__setattr__(node, "type", type_)
    object.__setattr__(node, "varying", varying)


def _numeric(node: Expr, what: str) -> None:
    if node.type == Type.BOOL:
        raise HawkError(f"{what} needs a number, not a comparison ({node})")


class Operation(Expr, abc.ABC):
    """Base of the nodes that apply a built-in operation to their operands: its entry
    in hawk's registry (:attr:`builtin`) says what it computes, its derivative and how
    each backend writes it."""

    #: the registry's name for this class of node
    form: ClassVar[Form]

    @property
    @abc.abstractmethod
    def spelling(self) -> str:
        """How this node names its operation (an operator, a function's name)."""

    @property
    def builtin(self) -> Builtin:
        """The registry entry of this node's operation."""
        entry = spelled(self.form, self.spelling)
        assert entry is not None, f"{self.form} {self.spelling!r} is checked when made"
        return entry


@dataclass(frozen=True)
class Const(Expr):
    """A literal or folded constant; ``type`` from the Python value (an int
    must fit in 64 bits).

    Two constants are equal (and hash alike) only when one may stand for the
    other: same type and same value, a real's compared by its bits. So
    ``Const(1)``, ``Const(1.0)`` and ``Const(True)`` differ, as do ``0.0`` and
    ``-0.0``, while a NaN equals a NaN.
    """

    value: int | float | bool = field(compare=False)
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)
    key: tuple[Type, int | bool | str] = field(init=False, repr=False)  # what == compares

    def __post_init__(self) -> None:
        if isinstance(self.value, bool):
            _set(self, Type.BOOL, False)
        elif isinstance(self.value, int):
            if not INT_MIN <= self.value <= INT_MAX:
                raise HawkError(
                    f"the int constant {self.value} does not fit in 64 bits; hawk ints are "
                    f"from {INT_MIN} to {INT_MAX} (write a float, e.g. {float(self.value):g}, "
                    "for a real value)"
                )
            _set(self, Type.INT, False)
        elif isinstance(self.value, float):
            _set(self, Type.REAL, False)
        else:
            raise HawkError(f"a constant must be an int, float or bool, not {self.value!r}")
        bits = self.value.hex() if isinstance(self.value, float) else self.value
        object.__setattr__(self, "key", (self.type, bits))


@dataclass(frozen=True)
class Lane(Expr):
    """The lane index, ``hm.sample_index()`` (int, 0 <= lane < lane count)."""

    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        _set(self, Type.INT, True)


@dataclass(frozen=True)
class Ref(Expr):
    """The value of a :class:`Var`."""

    var: Var
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        _set(self, self.var.type, self.var.varying)


@dataclass(frozen=True)
class Load(Expr):
    """This lane's value of an input or output plane, or a param's value.

    An output's load is its value before the kernel ran (stores come last).
    """

    plane: Plane
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.plane.kind not in (PlaneKind.INPUT, PlaneKind.OUTPUT, PlaneKind.PARAM):
            raise HawkError(f"Load reads a lane plane or a param, not {self.plane.declaration()}")
        _set(self, Type.REAL, self.plane.is_lane)


def _check_index(plane: Plane, index: tuple[Expr, ...]) -> None:
    want = 1 if plane.axes is None else len(plane.axes)
    if len(index) != want:
        raise HawkError(f"table {plane.name!r} takes {want} index(es), not {len(index)}")
    for position, item in enumerate(index):
        if item.type != Type.INT:
            label = "index" if plane.axes is None else f"axis {plane.axes[position][0]!r}"
            raise HawkError(
                f"{label} of table {plane.name!r} is {item.type}, not int ({item}); "
                "convert a real with int(...)"
            )


@dataclass(frozen=True)
class Read(Expr):
    """An element of a table: ``plane.at(...)``.

    ``index`` holds one int expression per axis in declared order (one for a
    flat table); the element is ``sum(index[k] * plane.strides[k])``.
    """

    plane: Plane
    index: tuple[Expr, ...]
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.plane.kind != PlaneKind.TABLE:
            raise HawkError(f"only a hawk.Table is read with .at, not {self.plane.declaration()}")
        _check_index(self.plane, self.index)
        _set(self, Type.REAL, any(i.varying for i in self.index))

    def children(self) -> tuple[Expr, ...]:
        return self.index

    @property
    def address(self) -> dict[str, Expr]:
        """A named table's index by axis label (``{"": index}`` when flat)."""
        if self.plane.axes is None:
            return {"": self.index[0]}
        return {label: item for (label, _), item in zip(self.plane.axes, self.index, strict=True)}


@dataclass(frozen=True)
class Unary(Operation):
    """``-x`` or ``+x`` on a number."""

    op: str
    operand: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    form: ClassVar[Form] = Form.UNARY

    @property
    def spelling(self) -> str:
        return self.op

    def __post_init__(self) -> None:
        if spelled(Form.UNARY, self.op) is None:
            raise HawkError(f"unknown unary operator {self.op!r}")
        _numeric(self.operand, f"unary {self.op}")
        _set(self, self.operand.type, self.operand.varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Binary(Operation):
    """Arithmetic on two numbers of one type (``/`` takes reals only).

    ``//`` and ``%`` follow Python: floor division, and a remainder with the
    divisor's sign.
    """

    op: str
    left: Expr
    right: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    form: ClassVar[Form] = Form.BINARY

    @property
    def spelling(self) -> str:
        return self.op

    def __post_init__(self) -> None:
        if self.op not in ARITHMETIC:
            raise HawkError(f"unknown arithmetic operator {self.op!r}")
        _numeric(self.left, self.op)
        _numeric(self.right, self.op)
        if self.left.type != self.right.type:
            raise HawkError(
                f"operands of {self.op} differ in type ({self.left.type} and "
                f"{self.right.type}); cast one with Cast"
            )
        if self.op == "/" and self.left.type != Type.REAL:
            raise HawkError("/ divides reals; cast int operands with Cast('real', ...)")
        _set(self, self.left.type, self.left.varying or self.right.varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Compare(Operation):
    """A comparison of two numbers of one type; bool."""

    op: str
    left: Expr
    right: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    form: ClassVar[Form] = Form.COMPARE

    @property
    def spelling(self) -> str:
        return self.op

    def __post_init__(self) -> None:
        if self.op not in COMPARISONS:
            raise HawkError(f"unknown comparison {self.op!r}")
        _numeric(self.left, self.op)
        _numeric(self.right, self.op)
        if self.left.type != self.right.type:
            raise HawkError(f"operands of {self.op} differ in type; cast one with Cast")
        _set(self, Type.BOOL, self.left.varying or self.right.varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Logic(Operation):
    """``and`` / ``or`` of two bools."""

    op: str
    left: Expr
    right: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    form: ClassVar[Form] = Form.LOGIC

    @property
    def spelling(self) -> str:
        return self.op

    def __post_init__(self) -> None:
        if spelled(Form.LOGIC, self.op) is None:
            raise HawkError(f"unknown logical operator {self.op!r}")
        for side in (self.left, self.right):
            if side.type != Type.BOOL:
                raise HawkError(f"'{self.op}' combines comparisons, not {side.type} ({side})")
        _set(self, Type.BOOL, self.left.varying or self.right.varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Not(Operation):
    """``not`` of a bool."""

    operand: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    form: ClassVar[Form] = Form.NOT

    @property
    def spelling(self) -> str:
        return "not"

    def __post_init__(self) -> None:
        if self.operand.type != Type.BOOL:
            raise HawkError(f"'not' takes a comparison, not {self.operand.type} ({self.operand})")
        _set(self, Type.BOOL, self.operand.varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Call(Operation):
    """A ``hawk.math`` function (a registry entry, :mod:`hawk._registry`).

    Arguments share one type; the result is that type (ints only for a
    function that keeps ints, such as ``abs``; the others take reals), or the
    entry's own result type (``floor``: an int from a real).
    """

    fn: str
    args: tuple[Expr, ...]
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    form: ClassVar[Form] = Form.CALL

    @property
    def spelling(self) -> str:
        return self.fn

    def __post_init__(self) -> None:
        function = spelled(Form.CALL, self.fn)
        if function is None:
            raise HawkError(f"unknown function {self.fn!r}; hawk has {sorted(math_functions())}")
        if len(self.args) != function.arity:
            raise HawkError(f"{self.fn} takes {function.arity} argument(s), not {len(self.args)}")
        for arg in self.args:
            _numeric(arg, self.fn)
        types = {arg.type for arg in self.args}
        if len(types) != 1:
            raise HawkError(f"arguments of {self.fn} differ in type; cast one with Cast")
        (kind,) = types
        if kind == Type.INT and not function.keeps_int:
            raise HawkError(f"{self.fn} takes reals; cast int arguments with Cast('real', ...)")
        _set(self, function.result or kind, any(arg.varying for arg in self.args))

    def children(self) -> tuple[Expr, ...]:
        return self.args


@dataclass(frozen=True)
class Cast(Operation):
    """int -> real (exact for |x| < 2**24 in float32), or real -> int (toward zero)."""

    to: Type
    operand: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    form: ClassVar[Form] = Form.CAST

    @property
    def spelling(self) -> str:
        return self.to

    def __post_init__(self) -> None:
        if self.to not in (Type.INT, Type.REAL):
            raise HawkError(f"Cast goes to int or real, not {self.to!r}")
        object.__setattr__(self, "to", Type(self.to))
        _numeric(self.operand, f"{self.to}()")
        _set(self, self.to, self.operand.varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Select(Operation):
    """``if_true if cond else if_false`` (both sides of one type)."""

    cond: Expr
    if_true: Expr
    if_false: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    form: ClassVar[Form] = Form.SELECT

    @property
    def spelling(self) -> str:
        return "select"

    def __post_init__(self) -> None:
        if self.cond.type != Type.BOOL:
            raise HawkError(f"a select's condition must be a comparison, not {self.cond}")
        if self.if_true.type != self.if_false.type:
            raise HawkError("the two sides of a select differ in type; cast one with Cast")
        varying = self.cond.varying or self.if_true.varying or self.if_false.varying
        _set(self, self.if_true.type, varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.cond, self.if_true, self.if_false)


#: every expression class: each pass and emitter has a rule for each (:mod:`hawk.ir.rules`)
EXPRESSIONS: tuple[type[Expr], ...] = (
    Const,
    Lane,
    Ref,
    Load,
    Read,
    Unary,
    Binary,
    Compare,
    Logic,
    Not,
    Call,
    Cast,
    Select,
)
#: the expression classes that apply a built-in operation (:class:`Operation`)
OPERATIONS: tuple[type[Operation], ...] = (Unary, Binary, Compare, Logic, Not, Call, Cast, Select)
