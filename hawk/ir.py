"""hawk's IR: a small typed, structured form of one kernel.

A kernel is a list of statements run once per lane. Values are typed
``"int"`` (64-bit), ``"real"`` (the kernel's float type, fixed when it is
emitted for concrete dtypes) or ``"bool"``, and are either *uniform* (the same
on every lane) or *varying*. Every assignment makes a new variable (each
:class:`Var` is assigned once), so a pass can read a value's definition
without tracking reassignment. Control flow is structured:

* :class:`Loop` iterates a constant ``range``; each variable the body
  reassigns is a :class:`Carry` — the same :class:`Var` holds the value on
  entry to every iteration and, after the loop, the final value.
* :class:`If` runs one of two blocks; each variable either block assigns is a
  :class:`Merge` — a select of the two blocks' values by the condition.

Outputs are written by :class:`Store` (a lane's value of a
``Mutable[Scalar]``, once, at the end of the kernel) and :class:`Accumulate`
(an add into a ``Mutable[Table]`` element; atomic on the device).

:func:`walk` is the one traversal; ``str(kernel_ir)`` prints a kernel.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "Accumulate",
    "Binary",
    "Call",
    "Carry",
    "Cast",
    "Compare",
    "Const",
    "Expr",
    "HawkError",
    "If",
    "KernelIR",
    "Lane",
    "Let",
    "Load",
    "Logic",
    "Loop",
    "Merge",
    "Not",
    "Plane",
    "Read",
    "Ref",
    "Select",
    "Stmt",
    "Store",
    "Type",
    "Unary",
    "Var",
    "walk",
]

Type = Literal["int", "real", "bool"]

#: the functions :class:`Call` knows, with their argument counts
FUNCTIONS = {
    "exp": 1,
    "log": 1,
    "sqrt": 1,
    "sin": 1,
    "cos": 1,
    "tanh": 1,
    "abs": 1,
    "minimum": 2,
    "maximum": 2,
    "pow": 2,
}

#: functions that keep an int argument int (the others compute in real)
INT_FUNCTIONS = frozenset({"abs", "minimum", "maximum"})

ARITHMETIC = frozenset({"+", "-", "*", "/", "//", "%"})
COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})

PLANE_KINDS = ("input", "output", "param", "table", "accumulator")


class HawkError(Exception):
    """A function is outside the hawk language, or an IR node is ill-typed.

    Attributes:
        line: the source line the refusal is about, when there is one.
    """

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


# -- planes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plane:
    """One kernel parameter.

    Attributes:
        name: the parameter's name.
        kind: ``"input"`` (``hawk.Scalar``), ``"output"``
            (``hawk.Mutable[hawk.Scalar]``), ``"param"`` (``hawk.Param``),
            ``"table"`` (``hawk.Table``) or ``"accumulator"``
            (``hawk.Mutable[hawk.Table]``, only added to).
        axes: a named table's ``((label, extent), ...)`` in declared
            (row-major) order; None for a flat table and for the other kinds.
    """

    name: str
    kind: str
    axes: tuple[tuple[str, int], ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in PLANE_KINDS:
            raise HawkError(f"plane {self.name!r}: kind must be one of {PLANE_KINDS}")
        if self.axes is not None and self.kind not in ("table", "accumulator"):
            raise HawkError(f"plane {self.name!r}: only tables have axes")

    @property
    def is_lane(self) -> bool:
        """True for planes holding one value per lane (inputs and outputs)."""
        return self.kind in ("input", "output")

    @property
    def is_table(self) -> bool:
        """True for tables, read with ``.at`` or added to with ``.add``."""
        return self.kind in ("table", "accumulator")

    @property
    def shape(self) -> tuple[int, ...] | None:
        """A named table's declared shape; None otherwise."""
        return None if self.axes is None else tuple(size for _, size in self.axes)

    @property
    def strides(self) -> tuple[int, ...] | None:
        """A named table's row-major strides in elements; None otherwise."""
        if self.axes is None:
            return None
        strides, step = [], 1
        for _, size in reversed(self.axes):
            strides.append(step)
            step *= size
        return tuple(reversed(strides))

    def declaration(self) -> str:
        """The declaration as written in hawk, e.g. ``Table["row":4, "col":3]``."""
        if self.kind == "input":
            return "Scalar"
        if self.kind == "output":
            return "Mutable[Scalar]"
        if self.kind == "param":
            return "Param"
        table = "Table"
        if self.axes is not None:
            table += "[" + ", ".join(f'"{label}":{size}' for label, size in self.axes) + "]"
        return table if self.kind == "table" else f"Mutable[{table}]"


@dataclass(frozen=True)
class Var:
    """A variable, assigned exactly once (a loop carry once per iteration).

    Attributes:
        name: unique within its kernel (``acc``, ``acc.1``, ...).
        type: ``"int"``, ``"real"`` or ``"bool"``.
        varying: False when it holds the same value on every lane.
    """

    name: str
    type: Type
    varying: bool


# -- expressions -------------------------------------------------------------------------


class Expr:
    """Base of expression nodes; each has ``type`` and ``varying``."""

    type: Type
    varying: bool

    def children(self) -> tuple[Expr, ...]:
        """The operand expressions, in evaluation order."""
        return ()

    def __str__(self) -> str:
        return _format(self, 0)


def _set(node: Expr, type_: Type, varying: bool) -> None:
    object.__setattr__(node, "type", type_)
    object.__setattr__(node, "varying", varying)


def _numeric(node: Expr, what: str) -> None:
    if node.type == "bool":
        raise HawkError(f"{what} needs a number, not a comparison ({node})")


@dataclass(frozen=True)
class Const(Expr):
    """A literal or folded constant; ``type`` from the Python value."""

    value: int | float | bool
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.value, bool):
            _set(self, "bool", False)
        elif isinstance(self.value, int):
            _set(self, "int", False)
        elif isinstance(self.value, float):
            _set(self, "real", False)
        else:
            raise HawkError(f"a constant must be an int, float or bool, not {self.value!r}")


@dataclass(frozen=True)
class Lane(Expr):
    """The lane index, ``hm.sample_index()`` (int, 0 <= lane < lane count)."""

    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        _set(self, "int", True)


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
        if self.plane.kind not in ("input", "output", "param"):
            raise HawkError(f"Load reads a lane plane or a param, not {self.plane.declaration()}")
        _set(self, "real", self.plane.is_lane)


def _check_index(plane: Plane, index: tuple[Expr, ...]) -> None:
    want = 1 if plane.axes is None else len(plane.axes)
    if len(index) != want:
        raise HawkError(f"table {plane.name!r} takes {want} index(es), not {len(index)}")
    for position, item in enumerate(index):
        if item.type != "int":
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
        if self.plane.kind != "table":
            raise HawkError(f"only a hawk.Table is read with .at, not {self.plane.declaration()}")
        _check_index(self.plane, self.index)
        _set(self, "real", any(i.varying for i in self.index))

    def children(self) -> tuple[Expr, ...]:
        return self.index

    @property
    def address(self) -> dict[str, Expr]:
        """A named table's index by axis label (``{"": index}`` when flat)."""
        if self.plane.axes is None:
            return {"": self.index[0]}
        return {label: item for (label, _), item in zip(self.plane.axes, self.index, strict=True)}


@dataclass(frozen=True)
class Unary(Expr):
    """``-x`` or ``+x`` on a number."""

    op: str
    operand: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.op not in ("-", "+"):
            raise HawkError(f"unknown unary operator {self.op!r}")
        _numeric(self.operand, f"unary {self.op}")
        _set(self, self.operand.type, self.operand.varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Binary(Expr):
    """Arithmetic on two numbers of one type (``/`` takes reals only).

    ``//`` and ``%`` follow Python: floor division, and a remainder with the
    divisor's sign.
    """

    op: str
    left: Expr
    right: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

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
        if self.op == "/" and self.left.type != "real":
            raise HawkError("/ divides reals; cast int operands with Cast('real', ...)")
        _set(self, self.left.type, self.left.varying or self.right.varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Compare(Expr):
    """A comparison of two numbers of one type; bool."""

    op: str
    left: Expr
    right: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.op not in COMPARISONS:
            raise HawkError(f"unknown comparison {self.op!r}")
        _numeric(self.left, self.op)
        _numeric(self.right, self.op)
        if self.left.type != self.right.type:
            raise HawkError(f"operands of {self.op} differ in type; cast one with Cast")
        _set(self, "bool", self.left.varying or self.right.varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Logic(Expr):
    """``and`` / ``or`` of two bools."""

    op: str
    left: Expr
    right: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.op not in ("and", "or"):
            raise HawkError(f"unknown logical operator {self.op!r}")
        for side in (self.left, self.right):
            if side.type != "bool":
                raise HawkError(f"'{self.op}' combines comparisons, not {side.type} ({side})")
        _set(self, "bool", self.left.varying or self.right.varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class Not(Expr):
    """``not`` of a bool."""

    operand: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.operand.type != "bool":
            raise HawkError(f"'not' takes a comparison, not {self.operand.type} ({self.operand})")
        _set(self, "bool", self.operand.varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Call(Expr):
    """A ``hawk.math`` function (see :data:`FUNCTIONS`).

    Arguments share one type; the result is that type (``abs``,
    ``minimum``, ``maximum`` of ints are ints; the others take reals).
    """

    fn: str
    args: tuple[Expr, ...]
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        arity = FUNCTIONS.get(self.fn)
        if arity is None:
            raise HawkError(f"unknown function {self.fn!r}; hawk has {sorted(FUNCTIONS)}")
        if len(self.args) != arity:
            raise HawkError(f"{self.fn} takes {arity} argument(s), not {len(self.args)}")
        for arg in self.args:
            _numeric(arg, self.fn)
        types = {arg.type for arg in self.args}
        if len(types) != 1:
            raise HawkError(f"arguments of {self.fn} differ in type; cast one with Cast")
        (kind,) = types
        if kind == "int" and self.fn not in INT_FUNCTIONS:
            raise HawkError(f"{self.fn} takes reals; cast int arguments with Cast('real', ...)")
        _set(self, kind, any(arg.varying for arg in self.args))

    def children(self) -> tuple[Expr, ...]:
        return self.args


@dataclass(frozen=True)
class Cast(Expr):
    """int -> real (exact for |x| < 2**24 in float32), or real -> int (toward zero)."""

    to: Type
    operand: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.to not in ("int", "real"):
            raise HawkError(f"Cast goes to int or real, not {self.to!r}")
        _numeric(self.operand, f"{self.to}()")
        _set(self, self.to, self.operand.varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Select(Expr):
    """``if_true if cond else if_false`` (both sides of one type)."""

    cond: Expr
    if_true: Expr
    if_false: Expr
    type: Type = field(init=False, compare=False)
    varying: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.cond.type != "bool":
            raise HawkError(f"a select's condition must be a comparison, not {self.cond}")
        if self.if_true.type != self.if_false.type:
            raise HawkError("the two sides of a select differ in type; cast one with Cast")
        varying = self.cond.varying or self.if_true.varying or self.if_false.varying
        _set(self, self.if_true.type, varying)

    def children(self) -> tuple[Expr, ...]:
        return (self.cond, self.if_true, self.if_false)


# -- statements --------------------------------------------------------------------------


class Stmt:
    """Base of statement nodes."""

    def children(self) -> tuple[Expr | Stmt, ...]:
        """Sub-expressions and nested statements, in program order."""
        return ()

    def __str__(self) -> str:
        return "\n".join(_format_stmt(self, 0))


def _check_assign(var: Var, value: Expr, what: str) -> None:
    if var.type != value.type:
        raise HawkError(f"{what} {var.name}: a {var.type} variable given a {value.type} value")
    if value.varying and not var.varying:
        raise HawkError(f"{what} {var.name}: a uniform variable given a varying value")


@dataclass(frozen=True)
class Let(Stmt):
    """``var = value``."""

    var: Var
    value: Expr

    def __post_init__(self) -> None:
        _check_assign(self.var, self.value, "Let")

    def children(self) -> tuple[Expr | Stmt, ...]:
        return (self.value,)


@dataclass(frozen=True)
class Carry(Stmt):
    """A loop-carried variable: ``var = init`` before the loop, ``var = update``
    after each iteration (``update`` is evaluated in the body's scope)."""

    var: Var
    init: Expr
    update: Expr

    def __post_init__(self) -> None:
        _check_assign(self.var, self.init, "Carry")
        _check_assign(self.var, self.update, "Carry")


@dataclass(frozen=True)
class Loop(Stmt):
    """``for index in range(start, stop, step)`` with constant bounds.

    All carries' updates are evaluated before any is assigned.
    """

    index: Var
    start: int
    stop: int
    step: int
    carries: tuple[Carry, ...]
    body: tuple[Stmt, ...]

    def __post_init__(self) -> None:
        if self.index.type != "int" or self.index.varying:
            raise HawkError(f"loop index {self.index.name} must be a uniform int")
        if self.step == 0:
            raise HawkError("a loop's step must not be zero")

    @property
    def trip_count(self) -> int:
        """How many times the body runs."""
        return len(range(self.start, self.stop, self.step))

    def children(self) -> tuple[Expr | Stmt, ...]:
        inits = tuple(c.init for c in self.carries)
        updates = tuple(c.update for c in self.carries)
        return (*inits, *self.body, *updates)


@dataclass(frozen=True)
class Merge(Stmt):
    """A variable an :class:`If` assigns: ``then_value`` (evaluated in the then
    block's scope) when the condition holds, else ``else_value``."""

    var: Var
    then_value: Expr
    else_value: Expr

    def __post_init__(self) -> None:
        _check_assign(self.var, self.then_value, "Merge")
        _check_assign(self.var, self.else_value, "Merge")


@dataclass(frozen=True)
class If(Stmt):
    """Run ``then`` where ``cond`` holds and ``orelse`` elsewhere; then assign
    each merge's variable. Semantically a select: a vectorising emitter may
    run both blocks, provided side effects (:class:`Accumulate`) apply only
    where their block was taken."""

    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...]
    merges: tuple[Merge, ...]

    def __post_init__(self) -> None:
        if self.cond.type != "bool":
            raise HawkError(f"an if's condition must be a comparison, not {self.cond}")
        for merge in self.merges:
            if self.cond.varying and not merge.var.varying:
                raise HawkError(f"Merge {merge.var.name}: a varying condition makes it varying")

    def children(self) -> tuple[Expr | Stmt, ...]:
        return (
            self.cond,
            *self.then,
            *(m.then_value for m in self.merges),
            *self.orelse,
            *(m.else_value for m in self.merges),
        )


@dataclass(frozen=True)
class Store(Stmt):
    """Write this lane's element of an output plane."""

    plane: Plane
    value: Expr

    def __post_init__(self) -> None:
        if self.plane.kind != "output":
            raise HawkError(f"Store writes a Mutable[Scalar], not {self.plane.declaration()}")
        if self.value.type != "real":
            raise HawkError(f"Store into {self.plane.name!r} needs a real value, not {self.value}")

    def children(self) -> tuple[Expr | Stmt, ...]:
        return (self.value,)


@dataclass(frozen=True)
class Accumulate(Stmt):
    """Add ``value`` into an element of a ``Mutable[Table]`` (atomic on the
    device; every lane that runs it adds)."""

    plane: Plane
    index: tuple[Expr, ...]
    value: Expr

    def __post_init__(self) -> None:
        if self.plane.kind != "accumulator":
            raise HawkError(f"only a Mutable[Table] is added to, not {self.plane.declaration()}")
        _check_index(self.plane, self.index)
        if self.value.type != "real":
            raise HawkError(f"{self.plane.name}.add needs a real value, not {self.value}")

    def children(self) -> tuple[Expr | Stmt, ...]:
        return (*self.index, self.value)


@dataclass(frozen=True)
class KernelIR:
    """One kernel: its planes in declaration order and its body.

    Attributes:
        name: the Python function's name.
        planes: the parameters, in declaration order.
        body: the statements; every :class:`Store` comes last.
    """

    name: str
    planes: tuple[Plane, ...]
    body: tuple[Stmt, ...]

    def plane(self, name: str) -> Plane:
        """The plane called ``name``.

        Raises:
            KeyError: the kernel has no such plane.
        """
        for plane in self.planes:
            if plane.name == name:
                return plane
        raise KeyError(f"kernel {self.name!r} has no plane {name!r}")

    def __str__(self) -> str:
        params = ", ".join(f"{p.name}: {p.declaration()}" for p in self.planes)
        lines = [f"kernel {self.name}({params}):"]
        for stmt in self.body:
            lines.extend(_format_stmt(stmt, 1))
        return "\n".join(lines)


def walk(node: KernelIR | Stmt | Expr) -> Iterator[Stmt | Expr]:
    """Every statement and expression under ``node``, pre-order, in program order.

    A :class:`Loop`'s carry inits come before its body and its updates after;
    an :class:`If`'s condition, then block and then values come before its
    else block and else values.
    """
    stack: list[Stmt | Expr] = list(reversed(node.body)) if isinstance(node, KernelIR) else [node]
    while stack:
        item = stack.pop()
        yield item
        stack.extend(reversed(item.children()))


# -- printing ----------------------------------------------------------------------------

_PRECEDENCE = {"or": 1, "and": 2, "not": 3, "cmp": 4, "+": 5, "-": 5, "*": 6, "/": 6}
_PRECEDENCE.update({"//": 6, "%": 6, "unary": 7})


def _format_const(value: int | float | bool) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


def _format(node: Expr, outer: int) -> str:
    if isinstance(node, Const):
        return _format_const(node.value)
    if isinstance(node, Lane):
        return "lane"
    if isinstance(node, Ref):
        return node.var.name
    if isinstance(node, Load):
        return node.plane.name
    if isinstance(node, Read):
        if node.plane.axes is None:
            return f"{node.plane.name}.at({_format(node.index[0], 0)})"
        parts = ", ".join(f"{label}={_format(i, 0)}" for label, i in node.address.items())
        return f"{node.plane.name}.at({parts})"
    if isinstance(node, Call):
        return f"{node.fn}({', '.join(_format(a, 0) for a in node.args)})"
    if isinstance(node, Cast):
        return f"{'float' if node.to == 'real' else 'int'}({_format(node.operand, 0)})"
    if isinstance(node, Select):
        text = f"{_format(node.if_true, 1)} if {_format(node.cond, 1)} else "
        text += _format(node.if_false, 1)
        return f"({text})" if outer > 0 else text
    if isinstance(node, Unary):
        level = _PRECEDENCE["unary"]
        return _paren(f"{node.op}{_format(node.operand, level)}", level, outer)
    if isinstance(node, Not):
        level = _PRECEDENCE["not"]
        return _paren(f"not {_format(node.operand, level)}", level, outer)
    if isinstance(node, Binary | Compare | Logic):
        level = _PRECEDENCE["cmp" if isinstance(node, Compare) else node.op]
        left = _format(node.left, level)
        right = _format(node.right, level + 1)
        return _paren(f"{left} {node.op} {right}", level, outer)
    raise TypeError(f"not a hawk expression: {node!r}")


def _paren(text: str, level: int, outer: int) -> str:
    return f"({text})" if level < outer else text


def _format_stmt(stmt: Stmt, depth: int) -> list[str]:
    pad = "    " * depth
    if isinstance(stmt, Let):
        return [f"{pad}{stmt.var.name} = {stmt.value}"]
    if isinstance(stmt, Store):
        return [f"{pad}store {stmt.plane.name} = {stmt.value}"]
    if isinstance(stmt, Accumulate):
        target = _format(Read(_as_table(stmt.plane), stmt.index), 0)
        return [f"{pad}add {target} += {stmt.value}"]
    if isinstance(stmt, Loop):
        bounds = f"{stmt.start}, {stmt.stop}, {stmt.step}"
        carries = ", ".join(f"{c.var.name} = {c.init}" for c in stmt.carries)
        head = f"{pad}for {stmt.index.name} in range({bounds})"
        lines = [head + (f" carrying {carries}:" if carries else ":")]
        for inner in stmt.body:
            lines.extend(_format_stmt(inner, depth + 1))
        lines.extend(f"{pad}    next {c.var.name} = {c.update}" for c in stmt.carries)
        return lines
    if isinstance(stmt, If):
        lines = [f"{pad}if {stmt.cond}:"]
        lines.extend(_format_branch(stmt.then, [m.then_value for m in stmt.merges], stmt, depth))
        lines.append(f"{pad}else:")
        lines.extend(_format_branch(stmt.orelse, [m.else_value for m in stmt.merges], stmt, depth))
        return lines
    raise TypeError(f"not a hawk statement: {stmt!r}")


def _format_branch(block: tuple[Stmt, ...], values: list[Expr], stmt: If, depth: int) -> list[str]:
    pad = "    " * (depth + 1)
    lines = [line for inner in block for line in _format_stmt(inner, depth + 1)]
    lines.extend(f"{pad}-> {m.var.name} = {v}" for m, v in zip(stmt.merges, values, strict=True))
    return lines or [f"{pad}pass"]


def _as_table(plane: Plane) -> Plane:
    return Plane(plane.name, "table", plane.axes)
