"""The C family's renderer: what every C-like target writes alike.

:class:`CStyle` writes a kernel's body as C: ``const`` bindings, ``for`` loops over a
constant range with their carried values, ``if`` blocks with their merged values, and
expressions. An operation's text comes from its operator table, :attr:`CStyle.code_for_op`
(a registry entry's name -> its C printer, :mod:`hawk._registry`), made from every
entry's ``c`` printer and the target's own :attr:`~CStyle.operators`, which override the
entries the target writes otherwise. A read on a side of ``x if c else y`` or on the right
of ``and``/``or`` that makes a check turns that expression into an ``if`` block, so a
lane checks (and reads) only the side it takes. The text is the C++ subset CUDA
compiles (the helpers hawk defines are overloaded by operand type), which a C++
compiler for the CPU takes as well.

A target is one subclass. It says what C leaves to the platform: the qualifier of the
helper functions hawk defines (:attr:`~CStyle.inline`), how infinities and NaN are
spelled (:meth:`~CStyle.nonfinite`), how a lane reads a table (:meth:`~CStyle.read`),
stores an output (:meth:`~CStyle.store`) and adds into a table
(:meth:`~CStyle.accumulate`), how an integer divisor is checked
(:meth:`~CStyle.divisor`), and the function around the body (its lanes, its
arguments). :mod:`hawk.emit.cuda` is one.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np

from hawk import ir
from hawk._registry import BUILTINS
from hawk._registry.entry import CForm
from hawk.emit import Names
from hawk.emit.checks import (
    INT32_LANES,
    MAX_LANES,
    CheckSite,
    IntOverflow,
    Ranges,
    operation_site,
)
from hawk.kinds import Type

__all__ = ["CStyle"]

_STATEMENTS: ir.Rules[Callable[..., None]] = ir.Rules("C emitter", ir.Stmt)
_EXPRESSIONS: ir.Rules[Callable[..., str]] = ir.Rules("C emitter", ir.Expr)


class CStyle(abc.ABC):
    """Writes one kernel's body as C (the body's lines, in :attr:`lines`), for a target
    subclass to place in its function.

    The renderer is the ``out`` of its operator table's printers
    (:class:`~hawk._registry.entry.COut`).

    Attributes:
        kernel: the kernel's IR.
        real: the C type of the compute dtype (``float`` or ``double``).
        names: the identifiers of variables and helper values.
        ranges: what is proved of the kernel's ints (:class:`~hawk.emit.checks.Ranges`).
        lines: the body written so far.
        depth: the nesting of the statement being written (a read declares its load there).
        code_for_op: the operator table, by registry entry name.
        sites: the check sites of the kernel, in the order the text numbers them.
    """

    #: the qualifier of a helper function hawk defines (``$inline`` in a definition)
    inline: ClassVar[str]
    #: the target's own printers, by registry entry name, for what it writes otherwise
    operators: ClassVar[Mapping[str, CForm]] = {}

    def __init__(
        self,
        kernel: ir.KernelIR,
        real: str,
        *,
        checks: bool,
        int_overflow: IntOverflow = "wrap",
        lanes: int = MAX_LANES,
    ) -> None:
        self.kernel = kernel
        self.real = real
        self.names = Names()
        self.ranges = Ranges(kernel, enabled=checks, int_overflow=int_overflow, lanes=lanes)
        self.sites: list[CheckSite] = []
        self.lines: list[str] = []
        self.depth = 0
        self.code_for_op: dict[str, CForm] = {
            **{name: entry.c for name, entry in BUILTINS.items()},
            **self.operators,
        }
        self._helpers: dict[tuple[str, str], str] = {}

    # -- what printers ask of the renderer (hawk._registry.entry.COut) --------------------

    @property
    def checks(self) -> bool:
        """True when the kernel makes the checks of :mod:`hawk.emit.checks`."""
        return self.ranges.enabled

    @property
    def suffix(self) -> str:
        """The C math functions' suffix in the compute type (``$f``)."""
        return "f" if self.real == "float" else ""

    def ctype(self, type_: Type) -> str:
        """The C type of an IR value of ``type_``."""
        return {Type.INT: "long long", Type.REAL: self.real, Type.BOOL: "bool"}[type_]

    def wraps(self, node: ir.Expr) -> bool:
        """True when the int operation ``node`` may leave int64."""
        return self.ranges.wraps(node)

    def int32(self, node: ir.Expr) -> bool:
        """True when the int ``node`` is written in 32 bits (``int``), its int operands
        too (:meth:`hawk.emit.checks.Ranges.int32`)."""
        return self.ranges.int32(node)

    def var_type(self, var: ir.Var) -> str:
        """The C type of a variable: ``int`` for an int proved to fit 32 bits
        (:meth:`hawk.emit.checks.Ranges.int32_var`), else :meth:`ctype`."""
        return "int" if self.ranges.int32_var(var) else self.ctype(var.type)

    def check_site(self, node: ir.Expr, kind: str) -> str | None:
        """The C text of the check site of kind ``kind`` that operation ``node`` makes (a
        new site of :attr:`sites`), or None when it makes none."""
        if kind not in self.ranges.operation_checks(node):
            return None
        self.sites.append(operation_site(node, kind))
        return f"{len(self.sites) - 1}LL"

    def helper(self, key: tuple[str, str], definition: str) -> None:
        """Emit ``definition`` once, among :meth:`helpers`."""
        self._helpers[key] = definition

    def helpers(self) -> list[str]:
        """The helper definitions the body uses, in the order of their keys."""
        return [self.fill(text) for _, text in sorted(self._helpers.items())]

    def uses(self, key: tuple[str, str]) -> bool:
        """True when the body uses the helper ``key``."""
        return key in self._helpers

    def fill(self, text: str) -> str:
        """``text`` with ``$inline``, ``$R`` (the compute type) and ``$f`` (its math
        suffix) filled in."""
        return (
            text.replace("$inline", self.inline).replace("$R", self.real).replace("$f", self.suffix)
        )

    # -- what a target supplies -----------------------------------------------------------

    @abc.abstractmethod
    def nonfinite(self, value: float) -> str:
        """The C text of an infinity or NaN in the compute type."""

    @abc.abstractmethod
    def read(self, node: ir.Read) -> str:
        """A lane's read of a table element."""

    @abc.abstractmethod
    def store(self, stmt: ir.Store, depth: int) -> None:
        """A lane's store of its value of an output."""

    @abc.abstractmethod
    def accumulate(self, stmt: ir.Accumulate, depth: int) -> None:
        """A lane's add into a table element."""

    @abc.abstractmethod
    def divisor(self, node: ir.Binary, text: str) -> str:
        """The divisor ``text`` of an integer ``//`` or ``%``, checked against zero."""

    # -- statements -----------------------------------------------------------------------

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def statement(self, stmt: ir.Stmt, depth: int) -> None:
        _STATEMENTS.method(self, stmt)(stmt, depth)

    @_STATEMENTS.rule(ir.Let)
    def let(self, stmt: ir.Let, depth: int) -> None:
        """``const <type> <name> = <value>;``, an int held in 32 bits where it fits (a value
        computed in 64 bits on the way, as a clamp of a wide int, is then narrowed)."""
        value = self.value(stmt.value, depth)
        type_ = self.var_type(stmt.var)
        if type_ == "int" and not self.int32(stmt.value):
            value = f"(int)({value})"
        self.emit(depth, f"const {type_} {self.names.var(stmt.var)} = {value};")

    _STATEMENTS.rule(ir.Store)(store)
    _STATEMENTS.rule(ir.Accumulate)(accumulate)

    @_STATEMENTS.rule(ir.Loop)
    def loop(self, loop: ir.Loop, depth: int) -> None:
        for carry in loop.carries:
            name = self.names.var(carry.var)
            init = self.value(carry.init, depth)
            self.emit(depth, f"{self.ctype(carry.var.type)} {name} = {init};")
        index = self.names.var(loop.index)
        cmp = "<" if loop.step > 0 else ">"
        type_ = self.var_type(loop.index)
        ll = "" if type_ == "int" else "LL"
        start, stop, step = (self.int_const(v, ll) for v in (loop.start, loop.stop, loop.step))
        self.emit(
            depth, f"for ({type_} {index} = {start}; {index} {cmp} {stop}; {index} += {step}) {{"
        )
        for stmt in loop.body:
            self.statement(stmt, depth + 1)
        if len(loop.carries) == 1:
            (carry,) = loop.carries
            update = self.value(carry.update, depth + 1)
            self.emit(depth + 1, f"{self.names.var(carry.var)} = {update};")
        else:
            temps = []
            for carry in loop.carries:
                temp = self.names.fresh("next")
                temps.append(temp)
                type_ = self.ctype(carry.var.type)
                self.emit(
                    depth + 1, f"const {type_} {temp} = {self.value(carry.update, depth + 1)};"
                )
            for carry, temp in zip(loop.carries, temps, strict=True):
                self.emit(depth + 1, f"{self.names.var(carry.var)} = {temp};")
        self.emit(depth, "}")

    @_STATEMENTS.rule(ir.If)
    def branch(self, stmt: ir.If, depth: int) -> None:
        for merge in stmt.merges:
            self.emit(depth, f"{self.ctype(merge.var.type)} {self.names.var(merge.var)};")
        self.emit(depth, f"if ({self.value(stmt.cond, depth)}) {{")
        for inner in stmt.then:
            self.statement(inner, depth + 1)
        for merge in stmt.merges:
            value = self.value(merge.then_value, depth + 1)
            self.emit(depth + 1, f"{self.names.var(merge.var)} = {value};")
        self.emit(depth, "} else {")
        for inner in stmt.orelse:
            self.statement(inner, depth + 1)
        for merge in stmt.merges:
            value = self.value(merge.else_value, depth + 1)
            self.emit(depth + 1, f"{self.names.var(merge.var)} = {value};")
        self.emit(depth, "}")

    # -- expressions ----------------------------------------------------------------------

    def offset(self, node: ir.Read | ir.Accumulate, texts: list[str], checked: bool) -> str:
        """The element offset of a table access from its index texts; in 32 bits when
        every index is, the table holds fewer than 2**31 elements and no index was
        ``checked`` in the kernel (each is then within its axis, proved or checked at
        launch, so the offset is below the table's size)."""
        plane = node.plane
        if plane.strides is None:
            return texts[0]
        narrow = (
            not checked
            and math.prod(extent for _, extent in plane.axes or ()) < INT32_LANES
            and all(self.int32(item) for item in node.index)
        )
        ll = "" if narrow else "LL"
        terms = [
            text if stride == 1 else f"{text} * {stride}{ll}"
            for text, stride in zip(texts, plane.strides, strict=True)
        ]
        return " + ".join(terms)

    def value(self, node: ir.Expr, depth: int) -> str:
        """The text of ``node`` in a statement at ``depth``, where its reads declare their
        loads."""
        self.depth = depth
        return self.expr(node)

    def expr(self, node: ir.Expr) -> str:
        return _EXPRESSIONS.method(self, node)(node)

    def expr_in(self, node: ir.Expr, wide: bool) -> str:
        """The text of ``node`` as an operand: an int written in 32 bits is widened to
        ``long long`` when ``wide`` (an operation in 64 bits, whose helpers take no
        mix of the two)."""
        if not (wide and node.type == Type.INT and self.int32(node)):
            return self.expr(node)
        if isinstance(node, ir.Const):
            return self.int_const(int(node.value), "LL")
        if isinstance(node, ir.Lane):
            return "lane"
        return f"((long long){self.expr(node)})"

    def operands(self, node: ir.Operation) -> list[str]:
        """The texts of ``node``'s operands: in 32 bits where ``node`` computes in 32 bits
        (every int operand is, and an int ``node`` itself fits), else in 64."""
        ints = [child for child in node.children() if child.type == Type.INT]
        narrow = all(self.int32(child) for child in ints) and (
            node.type != Type.INT or self.int32(node)
        )
        return [self.expr_in(child, not narrow) for child in node.children()]

    @staticmethod
    def int_const(value: int, suffix: str) -> str:
        """The C literal of an int, with ``suffix`` (``"LL"`` or none). The least value of
        its width is written as one more, minus 1: C reads ``-9223372036854775808LL`` as
        the negation of a literal too large for ``long long`` (an unsigned one)."""
        if value >= 0:
            return f"{value}{suffix}"
        if value == (-(2**63) if suffix else -(2**31)):
            return f"({value + 1}{suffix} - 1{suffix})"
        return f"({value}{suffix})"

    @_EXPRESSIONS.rule(ir.Const)
    def const(self, node: ir.Const) -> str:
        value = node.value
        if node.type == Type.BOOL:
            return "true" if value else "false"
        if node.type == Type.INT:
            return self.int_const(int(value), "" if self.int32(node) else "LL")
        if self.real == "float":
            value = float(np.float32(value))
        if not math.isfinite(value):
            return self.nonfinite(value)
        text = repr(float(value)) + ("f" if self.real == "float" else "")
        return text if value >= 0 else f"({text})"

    @_EXPRESSIONS.rule(ir.Lane)
    def lane(self, node: ir.Lane) -> str:
        return "((int)lane)" if self.int32(node) else "lane"

    @_EXPRESSIONS.rule(ir.Ref)
    def ref(self, node: ir.Ref) -> str:
        return self.names.var(node.var)

    @_EXPRESSIONS.rule(ir.Load)
    def load(self, node: ir.Load) -> str:
        return Names.load(node.plane.name)

    _EXPRESSIONS.rule(ir.Read)(read)

    @_EXPRESSIONS.rule(ir.Unary, ir.Compare, ir.Not, ir.Call, ir.Cast)
    def operation(self, node: ir.Operation) -> str:
        """Its printer in :attr:`code_for_op`, over its operands' texts."""
        form = self.code_for_op[node.builtin.name]
        return form(self, node, *self.operands(node))

    @_EXPRESSIONS.rule(ir.Binary)
    def binary(self, node: ir.Binary) -> str:
        """As :meth:`operation`, the divisor of an integer ``//`` or ``%`` checked first."""
        left, right = self.operands(node)
        if self.ranges.divides(node):
            right = self.divisor(node, right)
        return self.code_for_op[node.builtin.name](self, node, left, right)

    @_EXPRESSIONS.rule(ir.Logic)
    def logic(self, node: ir.Logic) -> str:
        """As :meth:`operation`; with a checked read on the right, an ``if`` block: only
        the lanes where the right decides the result check its reads."""
        if not self.reads_checked(node.right):
            return self.operation(node)
        name = self.names.fresh("lhs")
        self.emit(self.depth, f"bool {name} = {self.expr(node.left)};")
        self.emit(self.depth, f"if ({name}) {{" if node.op == "and" else f"if (!{name}) {{")
        self.nested(name, node.right)
        self.emit(self.depth, "}")
        return name

    @_EXPRESSIONS.rule(ir.Select)
    def select(self, node: ir.Select) -> str:
        """As :meth:`operation`; with a checked read on a side, an ``if`` block: only the
        lanes that take a side check its reads."""
        if not (self.reads_checked(node.if_true) or self.reads_checked(node.if_false)):
            return self.operation(node)
        cond = self.expr(node.cond)
        name = self.names.fresh("sel")
        type_ = "int" if self.int32(node) else self.ctype(node.type)
        self.emit(self.depth, f"{type_} {name};")
        self.emit(self.depth, f"if ({cond}) {{")
        self.nested(name, node.if_true)
        self.emit(self.depth, "} else {")
        self.nested(name, node.if_false)
        self.emit(self.depth, "}")
        return name

    def reads_checked(self, node: ir.Expr) -> bool:
        """True when ``node`` makes a checked read."""
        return any(
            isinstance(item, ir.Read) and self.ranges.read_checked(item) for item in ir.walk(node)
        )

    def nested(self, target: str, node: ir.Expr) -> None:
        """``target = node;`` one level deeper (inside a block just opened)."""
        depth = self.depth
        self.emit(depth + 1, f"{target} = {self.value(node, depth + 1)};")
        self.depth = depth
