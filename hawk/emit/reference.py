"""hawk IR -> a per-lane interpreter: the kernel run one lane at a time in plain Python.

The reference backend (``eagle.plan.auto(kernel, backend="reference")``) runs this, for
debugging: each lane walks the kernel's statements in order, with numpy scalars of the
kernel's compute dtype for reals and ``numpy.int64`` for ints (which wrap in two's
complement), so a lane computes exactly what the numpy program of :mod:`hawk.emit.host`
computes for it. Operations are their registry entries' ``evaluate``; loads, stores and
adds convert as the numpy program does (a 16-bit plane is read as float32, and a store or
an add rounds to the plane's dtype). A sum over lanes or loop iterations (an add that
many lanes make, a loop the numpy program runs a chunk of iterations at a time) is made
one term at a time here, so it may round otherwise.

Every table access and every integer ``//`` and ``%`` is checked when a lane makes it,
raising :class:`~hawk.errors.PlaneIndexError` or ``ZeroDivisionError`` for that lane;
only the side of an ``if``, a select, ``and`` or ``or`` that a lane takes is evaluated.

Debugging calls (``hawk.ir.Debug``, in the kernel's ``debug_ir``) run here alone:
``hm.debug_print`` prints per lane, ``hm.breakpoint`` stops in the debugger with ``lane``
and the kernel's names as local variables.

The program's function takes one flat numpy array per plane in declaration order (a
param as a one-element array), then the lane count ``n``, as the numpy program's does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hawk import ir
from hawk._registry import DEBUG_CALLS
from hawk._registry.integers import EXACT, wrapped
from hawk.dtypes import storable
from hawk.emit import compute_dtype, plane_dtypes
from hawk.emit.checks import LaneCheck, division_site, index_site, operation_site
from hawk.ir.expr import int_takes
from hawk.kinds import PlaneKind, Type

__all__ = ["ReferenceProgram", "emit"]


@dataclass(frozen=True)
class ReferenceProgram:
    """One kernel made ready to interpret for planes of given dtypes.

    Attributes:
        kernel: the IR it runs (debugging calls included).
        function: ``function(*planes, n)``: runs lanes ``0 .. n - 1`` in order.
        arguments: the plane names in argument order (``n`` follows them).
        launch_checks: none: every check is made as a lane runs.
    """

    kernel: ir.KernelIR
    function: Callable[..., None]
    arguments: tuple[str, ...]
    launch_checks: tuple[LaneCheck, ...] = ()

    @property
    def source(self) -> str:
        """The IR it runs as text, without its debugging calls (``print(kernel.ir)``)."""
        kernel = self.kernel
        return str(ir.KernelIR(kernel.name, kernel.planes, ir.without_debug(kernel.body)))


def emit(
    kernel: ir.KernelIR, dtypes: Mapping[str, Any], int_overflow: str = "wrap"
) -> ReferenceProgram:
    """The interpreter of ``kernel`` (its ``debug_ir``, to run its debugging calls) for
    the given plane dtypes. Ints wrap as the numpy program's do; with ``int_overflow``
    ``"check"`` an int operation whose exact value leaves int64 raises instead.

    Raises:
        HawkError: as :func:`hawk.emit.host.emit`: a plane without a dtype, an unknown
            plane, another dtype, or an add into a plane that takes none.
    """
    planes = plane_dtypes(kernel, dtypes)
    real = compute_dtype(planes).type
    arguments = tuple(p.name for p in kernel.planes)

    def function(*arrays: np.ndarray) -> None:
        *values, n = arrays
        lanes = _Lanes(kernel, dict(zip(arguments, values, strict=True)), real)
        lanes.checked = int_overflow == "check"
        with np.errstate(all="ignore"):
            for lane in range(int(n)):
                lanes.run(lane)
            lanes.round_sums()

    return ReferenceProgram(kernel, function, arguments)


_STATEMENTS: ir.Rules[Callable[..., None]] = ir.Rules("reference", ir.Stmt)
_EXPRESSIONS: ir.Rules[Callable[..., Any]] = ir.Rules("reference", ir.Expr)


class _Lanes:
    """Runs one kernel over planes, a lane at a time."""

    def __init__(self, kernel: ir.KernelIR, planes: dict[str, np.ndarray], real: type) -> None:
        self.kernel = kernel
        self.planes = planes
        self.real = real
        self.lane = 0
        self.env: dict[ir.Var, Any] = {}
        self.checked = False
        # a 16-bit table's adds, summed in the compute dtype and rounded in once at the end
        self.sums: dict[str, np.ndarray] = {}

    def run(self, lane: int) -> None:
        self.lane, self.env = lane, {}
        self.block(self.kernel.body)

    # -- statements ----------------------------------------------------------------------

    def block(self, stmts: tuple[ir.Stmt, ...]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ir.Debug):  # only here: no other table sees one
                self.debug(stmt)
            else:
                _STATEMENTS(stmt)(self, stmt)

    def debug(self, stmt: ir.Debug) -> None:
        values = tuple(item if isinstance(item, str) else self.expr(item) for item in stmt.items)
        scope = {name: self.expr(value) for name, value in stmt.names}
        DEBUG_CALLS[stmt.call].run(self.lane, values, scope)

    @_STATEMENTS.rule(ir.Let)
    def let(self, stmt: ir.Let) -> None:
        self.env[stmt.var] = self.expr(stmt.value)

    @_STATEMENTS.rule(ir.Loop)
    def loop(self, stmt: ir.Loop) -> None:
        for carry in stmt.carries:
            self.env[carry.var] = self.expr(carry.init)
        for index in range(stmt.start, stmt.stop, stmt.step):
            self.env[stmt.index] = np.int64(index)
            self.block(stmt.body)
            updates = [self.expr(carry.update) for carry in stmt.carries]
            for carry, value in zip(stmt.carries, updates, strict=True):
                self.env[carry.var] = value

    @_STATEMENTS.rule(ir.If)
    def branch(self, stmt: ir.If) -> None:
        taken = bool(self.expr(stmt.cond))
        self.block(stmt.then if taken else stmt.orelse)
        for merge in stmt.merges:
            self.env[merge.var] = self.expr(merge.then_value if taken else merge.else_value)

    @_STATEMENTS.rule(ir.Store)
    def store(self, stmt: ir.Store) -> None:
        # a one-element slice: the value is cast to the plane's dtype as an array is
        plane = self.planes[stmt.plane.name]
        plane[self.lane : self.lane + 1] = storable(self.expr(stmt.value), plane.dtype)

    @_STATEMENTS.rule(ir.Accumulate)
    def accumulate(self, stmt: ir.Accumulate) -> None:
        table = self.planes[stmt.plane.name]
        offset = self.offset(stmt, table)
        value = self.expr(stmt.value)
        if table.dtype.itemsize == 2:  # bfloat16 or float16: one rounding per element
            sums = self.sums.get(stmt.plane.name)
            if sums is None:
                sums = self.sums[stmt.plane.name] = np.zeros(table.shape, self.real)
            table = sums
        np.add.at(table, offset, value)  # rounds as the numpy program's add

    def round_sums(self) -> None:
        """Each 16-bit table element with a non-zero sum becomes its value plus the sum,
        rounded once (as the numpy program's ``_round_sums``)."""
        for name, sums in self.sums.items():
            table, added = self.planes[name], sums != 0
            table[added] = storable(table[added].astype(sums.dtype) + sums[added], table.dtype)

    # -- expressions ---------------------------------------------------------------------

    def expr(self, node: ir.Expr) -> Any:
        return _EXPRESSIONS(node)(self, node)

    @_EXPRESSIONS.rule(ir.Const)
    def const(self, node: ir.Const) -> Any:
        if node.type == Type.INT:
            return np.int64(node.value)
        return self.real(node.value) if node.type == Type.REAL else node.value

    @_EXPRESSIONS.rule(ir.Lane)
    def lane_index(self, node: ir.Lane) -> Any:
        return np.int64(self.lane)

    @_EXPRESSIONS.rule(ir.Ref)
    def ref(self, node: ir.Ref) -> Any:
        return self.env[node.var]

    @_EXPRESSIONS.rule(ir.Load)
    def load(self, node: ir.Load) -> Any:
        plane = self.planes[node.plane.name]
        return self.real(plane[0 if node.plane.kind == PlaneKind.PARAM else self.lane])

    @_EXPRESSIONS.rule(ir.Read)
    def read(self, node: ir.Read) -> Any:
        table = self.planes[node.plane.name]
        return self.real(table[self.offset(node, table)])

    def offset(self, node: ir.Read | ir.Accumulate, table: np.ndarray) -> int:
        """The element a table access names, each index checked against its extent."""
        strides = node.plane.strides or (1,)
        shape = node.plane.shape or (len(table),)
        offset = 0
        for position, item in enumerate(node.index):
            value = int(self.expr(item))
            if not 0 <= value < shape[position]:
                raise index_site(node, position).error(self.lane, value, shape[position])
            offset += value * strides[position]
        return offset

    @_EXPRESSIONS.rule(ir.Unary, ir.Compare, ir.Not, ir.Call)
    def operation(self, node: ir.Operation) -> Any:
        """Its registry entry's value on its operands' values; an int's ``-`` and ``abs``
        exact, then wrapped into int64, and an int ``pow`` as :meth:`binary`'s ``**``."""
        values = tuple(self.expr(child) for child in node.children())
        kind = _int_unary(node) if node.type == Type.INT else None
        if kind is not None:
            value = int(values[0])
            return self.wrapped(node, abs(value) if kind == "abs" else -value)
        if node.type == Type.INT and isinstance(node, ir.Call) and node.fn == "pow":
            return self.int_binary(node, "**", *values)  # (``x ** y`` is traced as pow)
        if isinstance(node, ir.Call) and node.fn == "floor":
            return self.to_int(node, np.floor(values[0]))  # (its operand is a real)
        return _apply(node, *values)

    @_EXPRESSIONS.rule(ir.Binary)
    def binary(self, node: ir.Binary) -> Any:
        """As :meth:`operation`; of two ints exact, then wrapped into int64 (an integer
        ``//`` or ``%`` by zero and a negative ``**`` exponent refused first)."""
        left, right = self.expr(node.left), self.expr(node.right)
        if node.type != Type.INT or node.op not in _INT_OPS:
            return _apply(node, left, right)
        return self.int_binary(node, node.op, left, right)

    def int_binary(self, node: ir.Binary | ir.Call, op: str, left: Any, right: Any) -> np.int64:
        """The int ``left op right`` exact, then wrapped into int64 (an integer ``//`` or
        ``%`` by zero and a negative ``**`` exponent refused first)."""
        a, b = int(left), int(right)
        if op in ("//", "%") and b == 0:
            assert isinstance(node, ir.Binary)  # (a pow is no division)
            raise division_site(node).error(self.lane, 0)
        if op == "**" and b < 0:
            raise operation_site(node, "exponent").error(self.lane, b)
        return self.wrapped(node, EXACT[op](a, b))

    def wrapped(self, node: ir.Expr, exact: int) -> np.int64:
        """``exact`` brought into int64; raised for a value beyond it when checking."""
        value = wrapped(exact)
        if self.checked and value != exact:
            raise operation_site(node, "overflow").error(self.lane, value)
        return np.int64(value)

    @_EXPRESSIONS.rule(ir.Cast)
    def cast(self, node: ir.Cast) -> Any:
        """``float()`` in the compute dtype; ``int()`` toward zero, raising for NaN, +-inf
        and reals beyond int64 (as the numpy program does)."""
        value = self.expr(node.operand)
        if node.to == Type.REAL:
            return self.real(value)
        if node.operand.type == Type.INT:
            return value
        return self.to_int(node, value)

    def to_int(self, node: ir.Cast | ir.Call, value: Any) -> Any:
        """The real ``value`` toward zero as the int of ``int()`` or ``hm.floor``, raising
        for NaN, +-inf and reals beyond int64 (as the numpy program does)."""
        if not int_takes(value):
            bits = np.float64(value).view(np.int64).item()
            raise operation_site(node, "int").error(self.lane, bits)
        return np.int64(int(value))

    @_EXPRESSIONS.rule(ir.Logic)
    def logic(self, node: ir.Logic) -> Any:
        """``and`` / ``or``, the right side evaluated only where it decides the result."""
        left = bool(self.expr(node.left))
        if left == (node.op == "or"):
            return left
        return bool(self.expr(node.right))

    @_EXPRESSIONS.rule(ir.Select)
    def select(self, node: ir.Select) -> Any:
        """The side the condition takes, the other not evaluated."""
        return self.expr(node.if_true if self.expr(node.cond) else node.if_false)


#: the int operators computed exactly, then wrapped (:data:`~hawk._registry.integers.EXACT`)
_INT_OPS = frozenset(("+", "-", "*", "//", "%", "**"))


def _int_unary(node: ir.Operation) -> str | None:
    """``"neg"`` or ``"abs"`` for an int negation or absolute value, else None."""
    if isinstance(node, ir.Unary) and node.op == "-":
        return "neg"
    if isinstance(node, ir.Call) and node.fn == "abs":
        return "abs"
    return None


def _apply(node: ir.Operation, *values: Any) -> Any:
    """The registry entry's ``evaluate`` of ``node`` on its operands' ``values``, as the
    numpy program makes it. A varying real is computed on one-element arrays (a varying
    operand) and numbers (a uniform one), as numpy's array loops compute it there: its
    scalar math may round otherwise, and ``x ** 2.0`` of an array squares. The rest is
    computed on numbers, as the numpy program computes a uniform value."""
    if not (node.varying and node.type == Type.REAL):
        return node.builtin.evaluate(*values)
    arrays = (
        np.reshape(value, 1) if operand.varying else value
        for operand, value in zip(node.children(), values, strict=True)
    )
    return node.builtin.evaluate(*arrays)[0]
