"""Python expressions -> hawk IR: the half of the tracer that reads expressions.

:class:`ExpressionTracer` holds what tracing one function needs (its
names, the values they hold, the statements made so far) and turns an
:mod:`ast` expression into a typed :class:`~hawk.ir.Expr`: arithmetic and
comparisons (folded when constant, :mod:`hawk._fold`), calls of
``hawk.math`` functions (checked against their registry entries, :mod:`hawk._registry`),
``int()``/``float()``, table reads and names. Names that are not the
kernel's own are looked up once, at decoration time (:mod:`hawk._scope`).
:mod:`hawk.trace` adds the statements.
"""

from __future__ import annotations

import ast
import math
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hawk import ir
from hawk._fold import check_constant, fold
from hawk._registry import BUILTINS, DEBUG_CALLS, Form, math_functions, spelled
from hawk._scope import Unresolved, as_number, module_attribute, resolve
from hawk.errors import HawkError
from hawk.ir.expr import INT_MAX
from hawk.kinds import PlaneKind, Type

__all__ = [
    "BINOPS",
    "DEPTH",
    "GUARDED_DEPTH",
    "ExpressionTracer",
    "Gone",
    "assigned_names",
    "snippet",
]

#: how deep the operations of one IR expression nest at most where a kernel's expression
#: nests deeper (ExpressionTracer.bounded): well inside the recursion of the passes over
#: the IR and the parentheses Python's parser takes in a generated program (200)
DEPTH = 32

#: how deep an expression on a side of a conditional that makes checks may nest (it is
#: never bound to a variable: ExpressionTracer.bounded)
GUARDED_DEPTH = 150


@dataclass(frozen=True)
class Gone:
    """A name that exists in Python but has no value at this point of a kernel."""

    why: str


_CONSTRUCTS = {
    ast.While: "a while loop (hawk loops are for x in range(<constant>))",
    ast.Break: "break (hawk loops always run their whole range)",
    ast.Continue: "continue (use if/else inside the loop)",
    ast.Return: "return (outputs are hawk.Mutable planes: assign to them)",
    ast.With: "a with statement",
    ast.Try: "try/except",
    ast.Raise: "raise",
    ast.Assert: "assert",
    ast.Delete: "del",
    ast.Global: "global",
    ast.Nonlocal: "nonlocal",
    ast.FunctionDef: "a nested function",
    ast.AsyncFunctionDef: "a nested function",
    ast.ClassDef: "a class",
    ast.Import: "import (import at module level and use the name)",
    ast.ImportFrom: "import (import at module level and use the name)",
    ast.AnnAssign: "an annotated assignment",
    ast.Match: "match",
    ast.AsyncFor: "async for",
    ast.AsyncWith: "async with",
    ast.Lambda: "lambda",
    ast.List: "a list",
    ast.Tuple: "a tuple (outside an unpacking assignment)",
    ast.Dict: "a dict",
    ast.Set: "a set",
    ast.ListComp: "a list comprehension",
    ast.SetComp: "a set comprehension",
    ast.DictComp: "a dict comprehension",
    ast.GeneratorExp: "a generator expression",
    ast.Subscript: "indexing with [] (read tables with .at(...))",
    ast.JoinedStr: "an f-string",
    ast.NamedExpr: "the walrus operator",
    ast.Starred: "*unpacking",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield from",
}


def _syntax(form: Form) -> dict[type[ast.AST], str]:
    """The Python operator classes that write the operations of ``form``, each with the
    operation's spelling in the IR (from the registry)."""
    return {
        entry.syntax: entry.spelling
        for entry in BUILTINS.values()
        if entry.form is form and entry.syntax is not None
    }


#: Python's arithmetic operators in a kernel, as the IR spells them; ``**`` is the
#: function ``pow`` (folded exactly between constants; of two ints an int, unless the
#: exponent is a negative constant)
BINOPS = {**_syntax(Form.BINARY), ast.Pow: "**"}
#: the most bits a power of int constants is worked out to (to name its exact value)
_POWER_BITS = 4096

_UNARY_OPS = _syntax(Form.UNARY)
_COMPARE_OPS = _syntax(Form.COMPARE)
_LOGIC_OPS = _syntax(Form.LOGIC)
_NOT_OPS = _syntax(Form.NOT)

#: a call outside hawk.math (``np.sin``, ``math.exp``, ``max``) -> the hawk.math function
#: that does its job, for the refusal's advice
_HAWK_MATH = {
    **{name: name for name in math_functions()},
    "max": "maximum",
    "min": "minimum",
    "fmax": "maximum",
    "fmin": "minimum",
    "fabs": "abs",
    "power": "pow",
}
#: how to write what a comparison used as a number means
_COMPARISON_HINT = (
    "a comparison is not a number in hawk: write the value you mean with a conditional, "
    "such as 1.0 if x > 0.0 else 0.0"
)
#: the operators a kernel has, for the refusal of one it has not
_OPERATORS = (
    "kernels have + - * / // % ** and comparisons (no bitwise or matrix operators: a "
    "product is a loop of multiply-adds)"
)


def _checks_nothing(value: ir.Expr) -> bool:
    """True when evaluating ``value`` on any lane makes no check that could fail."""
    return not any(
        isinstance(node, ir.Read | ir.Cast)
        or (isinstance(node, ir.Operation) and node.type == Type.INT)
        for node in ir.walk(value)
    )


def assigned_names(stmts: list[ast.stmt]) -> list[str]:
    """Names a block assigns (anywhere inside it), in first-assignment order."""
    names: dict[str, None] = {}
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names[node.id] = None
    return list(names)


class ExpressionTracer(ir.Builder):
    """Traces the expressions of one function; :class:`hawk.trace` adds statements."""

    def __init__(self, fn: types.FunctionType, node: ast.FunctionDef, source: list[str]) -> None:
        super().__init__()
        self.fn = fn
        self.node = node
        self.source = source
        self.name = fn.__name__
        self.line_offset = fn.__code__.co_firstlineno - 1
        self.locals = set(assigned_names(node.body))
        self.versions: dict[str, int] = {}
        self.env: dict[str, ir.Expr | ir.Plane | Gone] = {}
        # how many sides of a conditional (x if c else y, and/or) enclose the expression
        # being traced: a value there is not bound to a variable of its own (see bounded)
        self.guarded = 0
        self._depths: dict[int, tuple[ir.Expr, int]] = {}

    # -- errors and names ----------------------------------------------------------------

    def error(self, node: ast.AST, message: str) -> HawkError:
        """A refusal of ``node``: its line, the source text there, and its column."""
        lineno = getattr(node, "lineno", 1)
        line = self.line_offset + lineno
        text = self.source[lineno - 1] if lineno <= len(self.source) else None
        return HawkError(
            f"kernel {self.name!r}, line {line}: {message}",
            line,
            getattr(node, "col_offset", None),
            text,
        )

    def located(self, node: ast.AST, exc: HawkError) -> HawkError:
        """``exc`` (from making an IR node) pointing at ``node``, unless it points somewhere."""
        return exc if exc.line is not None else self.error(node, exc.message)

    def refuse(self, node: ast.AST) -> HawkError:
        what = _CONSTRUCTS.get(type(node), type(node).__name__)
        return self.error(node, f"{what} is not in hawk: {snippet(node)}")

    def new_var(self, name: str, type_: ir.Type, varying: bool) -> ir.Var:
        version = self.versions.get(name, -1) + 1
        self.versions[name] = version
        return ir.Var(name if version == 0 else f"{name}.{version}", type_, varying)

    # -- types ---------------------------------------------------------------------------

    def join_type(self, node: ast.AST, name: str, a: ir.Type, b: ir.Type) -> ir.Type:
        if a == b:
            return a
        if Type.BOOL in (a, b):
            raise self.error(
                node, f"{name!r} holds a comparison in one place and a number in another"
            )
        return Type.REAL

    def join(self, node: ast.AST, name: str, a: ir.Expr, b: ir.Expr) -> tuple[ir.Expr, ir.Expr]:
        kind = self.join_type(node, name, a.type, b.type)
        return self.cast_to(node, a, kind, name), self.cast_to(node, b, kind, name)

    def cast_to(self, node: ast.AST, value: ir.Expr, kind: ir.Type, name: str) -> ir.Expr:
        if value.type == kind:
            return value
        if value.type == Type.INT and kind == Type.REAL:
            return fold(ir.Cast(Type.REAL, value))
        hint = f"; {_COMPARISON_HINT}" if value.type == Type.BOOL else ""
        raise self.error(node, f"{name!r} needs a {kind} value, not {value.type} ({value}){hint}")

    def real(self, node: ast.AST, value: ir.Expr, name: str) -> ir.Expr:
        return self.cast_to(node, value, Type.REAL, name)

    def condition(self, node: ast.expr) -> ir.Expr:
        value = self.expr(node)
        if value.type != Type.BOOL:
            raise self.error(
                node, f"a condition must be a comparison, not {snippet(node)} ({value.type})"
            )
        return value

    def not_a_number(self, node: ast.AST, what: str, side: ir.Expr) -> HawkError:
        """The refusal of ``side``, a comparison or a bool constant, where ``what`` needs a
        number: hawk takes True and False as conditions only."""
        if isinstance(side, ir.Const):
            return self.error(
                node,
                f"{what}, not the bool constant {side.value}: {snippet(node)}; hawk takes True "
                "and False as conditions, not numbers: use the constant as the condition itself "
                "(if FLAG:), or write the number you mean, such as 1.0 if FLAG else 0.0",
            )
        return self.error(node, f"{what}, not a comparison: {snippet(node)}; {_COMPARISON_HINT}")

    def arith(self, node: ast.AST, op: str, left: ir.Expr, right: ir.Expr) -> ir.Expr:
        for side in (left, right):
            if side.type == Type.BOOL:
                raise self.not_a_number(node, f"{op} needs numbers", side)
        if op == "**":
            if isinstance(left, ir.Const) and isinstance(right, ir.Const):
                base, exponent = left.value, right.value
                if (
                    isinstance(base, int)
                    and isinstance(exponent, int)
                    and abs(base) > 1  # (1, 0 and -1 to any power fit)
                    and exponent * abs(base).bit_length() > _POWER_BITS
                ):
                    raise self.error(  # (not worked out: its exact value is too large)
                        node,
                        f"the constant expression {snippet(node)} is at least 2**64 in size, "
                        "which does not fit in 64 bits; hawk ints are int64, and a constant "
                        "expression must fit (write a float base for a real value)",
                    )
                try:
                    value = left.value**right.value
                except ZeroDivisionError as exc:
                    raise self.error(node, f"{snippet(node)}: {exc}") from exc
                except OverflowError as exc:
                    raise self.error(
                        node,
                        f"the constant expression {snippet(node)} is beyond the largest real "
                        "(about 1.8e308); write math.inf for an infinity",
                    ) from exc
                if isinstance(value, complex):
                    raise self.error(node, f"{snippet(node)} is not a real number")
                check_constant(snippet(node), value)
                return ir.Const(value)
            if isinstance(right, ir.Const) and right.type == Type.INT and right.value < 0:
                left = self.real(node, left, op)  # an int to a negative power is a real
            return self.call_math(node, "pow", [left, right])
        if op == "/" or left.type != right.type:
            left, right = self.real(node, left, op), self.real(node, right, op)
        return fold(ir.Binary(op, left, right))

    # -- expressions ---------------------------------------------------------------------

    def expr(self, node: ast.expr) -> ir.Expr:
        """The IR of ``node``; a refusal by the IR itself names ``node``'s line."""
        try:
            if isinstance(node, ast.BinOp | ast.UnaryOp):
                return self.operators(node)
            return self.bounded(self.expression(node))
        except HawkError as exc:
            raise self.located(node, exc) from exc

    def operators(self, root: ast.BinOp | ast.UnaryOp) -> ir.Expr:
        """The IR of a tree of arithmetic operators, walked without recursion (a sum of
        thousands of terms is one such tree), each operation :meth:`bounded`."""
        stack: list[tuple[ast.expr, bool]] = [(root, False)]
        values: list[ir.Expr] = []
        while stack:
            node, ready = stack.pop()
            if ready:
                count = 2 if isinstance(node, ast.BinOp) else 1
                operands = values[-count:]
                del values[-count:]
                try:
                    values.append(self.bounded(self.operation(node, operands)))
                except HawkError as exc:
                    raise self.located(node, exc) from exc
            elif isinstance(node, ast.BinOp):
                stack += [(node, True), (node.right, False), (node.left, False)]
            elif isinstance(node, ast.UnaryOp):
                stack += [(node, True), (node.operand, False)]
            else:
                values.append(self.expr(node))
        (value,) = values
        return value

    def operation(self, node: ast.expr, operands: list[ir.Expr]) -> ir.Expr:
        """The IR of the operator ``node`` (a ``BinOp`` or ``UnaryOp``) of ``operands``."""
        if isinstance(node, ast.BinOp):
            op = BINOPS.get(type(node.op))
            if op is None:
                raise self.error(node, f"operator in {snippet(node)} is not in hawk; {_OPERATORS}")
            left, right = operands
            return self.arith(node, op, left, right)
        assert isinstance(node, ast.UnaryOp)
        (operand,) = operands
        if type(node.op) in _NOT_OPS:
            if operand.type != Type.BOOL:
                raise self.error(node, f"'not' takes a comparison: {snippet(node)}")
            return fold(ir.Not(operand))
        unary = _UNARY_OPS.get(type(node.op))
        if unary is not None and operand.type != Type.BOOL:
            return fold(ir.Unary(unary, operand))
        if unary is not None:
            raise self.not_a_number(node, f"{unary} needs a number", operand)
        raise self.error(node, f"operator in {snippet(node)} is not in hawk; {_OPERATORS}")

    def bounded(self, value: ir.Expr) -> ir.Expr:
        """``value``, or a reference to a new variable bound to it where its operations
        nest deeper than :data:`DEPTH`: so no expression of the IR, and no line of a
        generated program, nests deeper however long the kernel's expression is. On a
        side of a conditional, binding a value evaluates it on every lane, so a value
        there is bound only when it makes no check (no table read, no operation on
        ints, no conversion); one that makes checks is refused past
        :data:`GUARDED_DEPTH`."""
        depth = self.depth(value)
        if depth <= DEPTH:
            return value
        if self.guarded and not _checks_nothing(value):
            if depth <= GUARDED_DEPTH:
                return value
            raise HawkError(
                f"an expression on a side of a conditional (x if c else y, and, or) nests "
                f"deeper than {GUARDED_DEPTH} operations and reads a table or computes with "
                "ints; assign it to a variable before the conditional (every lane then "
                "evaluates it), or split it into shorter parts"
            )
        var = self.new_var("_part", value.type, value.varying)
        self.emit(ir.Let(var, value))
        return ir.Ref(var)

    def depth(self, value: ir.Expr) -> int:
        """How deep the operations of ``value`` nest (1: no operands), without recursion."""
        known = self._depths
        stack = [value]
        while stack:
            node = stack[-1]
            if id(node) in known:
                stack.pop()
                continue
            pending = [c for c in node.children() if id(c) not in known]
            if pending:
                stack += pending
                continue
            stack.pop()
            below = [known[id(c)][1] for c in node.children()]
            known[id(node)] = (node, 1 + max(below, default=0))
        return known[id(value)][1]

    @contextmanager
    def conditional(self) -> Iterator[None]:
        """Trace a side of a conditional inside the ``with`` (see :meth:`bounded`)."""
        self.guarded += 1
        try:
            yield
        finally:
            self.guarded -= 1

    def expression(self, node: ast.expr) -> ir.Expr:
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool | int | float):
                return ir.Const(value)
            hint = " (write math.inf or math.nan for those reals)" if isinstance(value, str) else ""
            raise self.error(node, f"the constant {value!r} is not a number{hint}")
        if isinstance(node, ast.Name):
            return self.load_name(node.id, node)
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.BoolOp):
            op = _LOGIC_OPS[type(node.op)]
            result = self.condition(node.values[0])
            for item in node.values[1:]:
                if isinstance(result, ir.Const) and result.value == (op == "or"):
                    return result  # a constant that decides it: the rest is never read
                with self.conditional():
                    term = self.condition(item)
                result = self.bounded(fold(ir.Logic(op, result, term)))
            return result
        if isinstance(node, ast.IfExp):
            cond = self.condition(node.test)
            if isinstance(cond, ir.Const):  # as an if statement: only the side taken is read
                return self.expr(node.body if cond.value else node.orelse)
            with self.conditional():
                body, orelse = self.expr(node.body), self.expr(node.orelse)
            a, b = self.join(node, "the conditional expression", body, orelse)
            return fold(ir.Select(cond, a, b))
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Attribute):
            value = self.resolve_attribute(node)
            return self.constant(node, value, snippet(node))
        raise self.refuse(node)

    def compare(self, node: ast.Compare) -> ir.Expr:
        left = self.expr(node.left)
        result: ir.Expr | None = None
        for op_node, right_node in zip(node.ops, node.comparators, strict=True):
            op = _COMPARE_OPS.get(type(op_node))
            if op is None:
                raise self.error(
                    node,
                    f"comparison in {snippet(node)} is not in hawk; hawk compares numbers with "
                    "<, <=, >, >=, == and != (write x in (1.0, 2.0) as x == 1.0 or x == 2.0)",
                )
            if result is None:
                right = self.expr(right_node)
            else:  # evaluated only where the comparisons before it hold
                with self.conditional():
                    right = self.expr(right_node)
            for side in (left, right):
                if side.type == Type.BOOL:
                    raise self.not_a_number(node, f"{op} compares numbers", side)
            a, b = (
                (left, right)
                if left.type == right.type
                else (self.real(node, left, op), self.real(node, right, op))
            )
            term = fold(ir.Compare(op, a, b))
            result = term if result is None else fold(ir.Logic("and", result, term))
            left = right
        assert result is not None
        return result

    def load_name(self, name: str, node: ast.AST) -> ir.Expr:
        value = self.env.get(name)
        if isinstance(value, ir.Expr):
            return value
        if isinstance(value, ir.Plane):
            how = (
                f"{name}.at(...)" if value.kind == PlaneKind.TABLE else f"{name}.add(..., value=v)"
            )
            raise self.error(node, f"{name!r} is a {value.declaration()}; use {how}")
        if isinstance(value, Gone):
            raise self.error(node, value.why)
        if name in self.locals:
            raise self.error(node, f"name {name!r} is used before assignment")
        try:
            value = self.resolve_global(name)
        except Unresolved as exc:
            raise self.error(node, exc.message) from None
        return self.constant(node, value, name)

    def resolve_global(self, name: str) -> Any:
        return resolve(self.fn, name)

    def resolve_attribute(self, node: ast.Attribute) -> Any:
        parts = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            parts.append(base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or base.id in self.env or base.id in self.locals:
            raise self.error(node, f"attribute access {snippet(node)} is not in hawk")
        try:
            value = self.resolve_global(base.id)
        except Unresolved as exc:
            raise self.error(node, exc.message) from None
        try:
            return module_attribute(value, parts[::-1])
        except Unresolved:
            raise self.error(node, f"attribute access {snippet(node)} is not in hawk") from None

    def constant(self, node: ast.AST, value: Any, text: str) -> ir.Expr:
        number = as_number(value)
        if number is None:
            raise self.error(
                node,
                f"{text!r} is a {type(value).__name__}; a kernel uses names of its own, its "
                "parameters, and int or float constants",
            )
        return ir.Const(number)

    def math_op(self, func: ast.expr) -> str | None:
        if isinstance(func, ast.Name) and (func.id in self.env or func.id in self.locals):
            return None
        try:
            target = (
                self.resolve_global(func.id)
                if isinstance(func, ast.Name)
                else self.resolve_attribute(func)
                if isinstance(func, ast.Attribute)
                else None
            )
        except (Unresolved, HawkError):
            return None
        return getattr(target, "__hawk_op__", None)

    def call(self, node: ast.Call) -> ir.Expr:
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            plane = self.env.get(func.value.id)
            if isinstance(plane, ir.Plane):
                return self.table_call(node, plane, func.attr)
        op = self.math_op(func)
        if op is not None:
            if node.keywords:
                raise self.error(node, f"{op}() takes positional arguments: {snippet(node)}")
            if op == "sample_index":
                if node.args:
                    raise self.error(node, "sample_index() takes no arguments")
                return ir.Lane()
            if op in DEBUG_CALLS:
                raise self.error(node, f"hm.{op}(...) gives no value; call it on a line of its own")
            if op == "split_index":
                raise self.error(
                    node, "split_index gives several values; unpack it: a, b = hm.split_index(n)"
                )
            args = [self.expr(a) for a in node.args]
            if op == "pow" and len(args) == 2:  # hm.pow(a, b) is a ** b
                return self.arith(node, "**", *args)
            return self.call_math(node, op, args)
        if isinstance(func, ast.Name) and func.id not in self.env and func.id not in self.locals:
            target = self.resolve_or_none(func.id)
            if target is int or target is float:
                if len(node.args) != 1 or node.keywords:
                    raise self.error(node, f"{func.id}() takes one argument: {snippet(node)}")
                value = self.expr(node.args[0])
                if value.type == Type.BOOL:
                    raise self.error(
                        node, f"{func.id}() of a comparison is not in hawk; {_COMPARISON_HINT}"
                    )
                kind = Type.INT if target is int else Type.REAL
                return value if value.type == kind else fold(ir.Cast(kind, value))
        rebound = ""
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if isinstance(func, ast.Name) and func.id in ("int", "float"):
            rebound = f"; here {func.id!r} is not the builtin (a local or the module rebinds it)"
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            head = func.value.id
            local = head in self.env or head in self.locals
            module = None if local else self.resolve_or_none(head)
            bound = self.env.get(head)
            if getattr(module, "__name__", None) == "hawk.math":
                rebound = f"; hawk.math has no function {func.attr!r}"
            elif head == "hm":
                rebound = "; here 'hm' is not hawk.math (a local or the module rebinds it)"
            elif isinstance(bound, ir.Load) and func.attr in ("at", "add"):
                each = "for all lanes" if bound.plane.kind == PlaneKind.PARAM else "per lane"
                rebound = (
                    f"; {head!r} is a {bound.plane.declaration()}, one value {each}: use {head} "
                    "itself, or declare it a hawk.Table to index it"
                )
        if not rebound and _HAWK_MATH.get(called) is not None:
            rebound = f"; inside a kernel, write hm.{_HAWK_MATH[called]}(...) (hawk.math)"
        raise self.error(
            node,
            f"unknown call {snippet(func)}(...): a kernel calls hawk.math functions, int() "
            f"and float(){rebound}",
        )

    def resolve_or_none(self, name: str) -> Any:
        try:
            return self.resolve_global(name)
        except Unresolved:
            return None

    def call_math(self, node: ast.AST, op: str, args: list[ir.Expr]) -> ir.Expr:
        function = spelled(Form.CALL, op)
        assert function is not None, f"hawk.math.{op} has a registry entry"
        if len(args) != function.arity:
            raise self.error(node, f"{op}() takes {function.arity} argument(s): {snippet(node)}")
        for arg in args:
            if arg.type == Type.BOOL:
                raise self.error(node, f"{op}() takes numbers, not a comparison")
        if op == "floor" and args[0].type == Type.INT:
            return args[0]  # the greatest int at most an int is itself (not its real's floor)
        if not function.keeps_int or any(a.type == Type.REAL for a in args):
            args = [self.real(node, a, op) for a in args]
        return ir.Call(op, tuple(args))

    def split_index(self, node: ast.Call) -> tuple[ir.Expr, ...]:
        """The lane's indices in a row-major array whose last axes have the extents given:
        ``(lane // n, lane % n)`` for one, ``(lane // (n1 * n2), lane // n2 % n1, lane %
        n2)`` for two, and so on."""
        if not node.args or node.keywords:
            raise self.error(
                node, "split_index takes constant ints: split_index(n) or split_index(n1, n2)"
            )
        extents = []
        for arg in node.args:
            n = self.expr(arg)
            if not (isinstance(n, ir.Const) and n.type == Type.INT and n.value > 0):
                raise self.error(node, f"split_index needs positive constant ints, not {n}")
            extents.append(int(n.value))
        if math.prod(extents) > INT_MAX:
            raise self.error(node, f"split_index's extents {extents} multiply beyond int64")
        lane = ir.Lane()
        inner = [
            ir.Binary("%", _over(lane, extents[k + 1 :]), ir.Const(n))
            for k, n in enumerate(extents)
        ]
        return (_over(lane, extents), *inner)

    def table_call(self, node: ast.Call, plane: ir.Plane, method: str) -> ir.Expr:
        if method == "add":
            raise self.error(node, f"{plane.name}.add(...) is a statement, not a value")
        if method != "at":
            raise self.error(
                node, f"tables have .at(...) (and .add for Mutable[Table]), not .{method}"
            )
        if plane.kind != PlaneKind.TABLE:
            raise self.error(node, f"{plane.name!r} is a Mutable[Table]: it is added to, not read")
        return ir.Read(plane, self.address(node, plane, node.keywords))

    def address(
        self, node: ast.Call, plane: ir.Plane, keywords: list[ast.keyword]
    ) -> tuple[ir.Expr, ...]:
        method = f"{plane.name}.{'at' if plane.kind == 'table' else 'add'}"
        items: list[tuple[str | None, ast.expr]]
        if any(k.arg is None for k in keywords):
            raise self.error(node, f"{method} takes its axes as written keywords, not **")
        if plane.axes is None:
            if keywords:
                call = (
                    f"{method}(i, value=...)" if plane.kind != PlaneKind.TABLE else f"{method}(i)"
                )
                raise self.error(
                    node,
                    f"{method}: unknown keyword {keywords[0].arg!r}; {plane.name} is a flat "
                    f"Table, addressed by one index: {call}",
                )
            if len(node.args) != 1:
                raise self.error(
                    node, f"{method}(i) takes one flat index ({plane.name} is a flat Table)"
                )
            items = [(None, node.args[0])]
        else:
            if node.args:
                example = ", ".join(f"{label}=..." for label, _ in plane.axes)
                if plane.kind != PlaneKind.TABLE:
                    example += ", value=v"
                raise self.error(
                    node,
                    f"{method} addresses axes by name: {plane.name} is {plane.declaration()}; "
                    f"write {plane.name}.{method.rpartition('.')[2]}({example})",
                )
            labels = [label for label, _ in plane.axes]
            given = {k.arg: k.value for k in keywords}
            unknown = [k.arg for k in keywords if k.arg not in labels]
            if unknown:
                raise self.error(
                    node,
                    f"{method}: unknown axis {unknown[0]!r}; {plane.name} has axes {labels}",
                )
            missing = [label for label in labels if label not in given]
            if missing:
                raise self.error(
                    node,
                    f"{method}: partial address, axis {missing[0]!r} is missing; address every "
                    f"axis of {plane.name} ({', '.join(labels)}) by name",
                )
            items = [(label, given[label]) for label in labels]
        index = []
        for label, item in items:
            value = self.expr(item)
            if value.type != Type.INT:
                where = "the index" if label is None else f"axis {label!r}"
                raise self.error(
                    node,
                    f"{method}: {where} is {value.type} ({snippet(item)}); an index is an int "
                    "(convert with int(...))",
                )
            index.append(value)
        return tuple(index)


def snippet(node: ast.AST) -> str:
    text = ast.unparse(node).splitlines()[0] if isinstance(node, ast.AST) else str(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _over(lane: ir.Expr, extents: list[int]) -> ir.Expr:
    """``lane // prod(extents)``, or the lane itself for no extents."""
    return ir.Binary("//", lane, ir.Const(math.prod(extents))) if extents else lane
