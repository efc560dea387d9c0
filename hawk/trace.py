"""Python source -> hawk IR.

:func:`kernel` reads a function's source with :mod:`ast` (the body is never
run, loops are never unrolled) and builds a :class:`~hawk.ir.KernelIR`.
Names that are not parameters or assigned in the body are looked up once,
at decoration time, in the function's closure, globals and builtins: they
must be numbers (baked in as constants), modules (for ``hm.exp`` or
``math.pi``) or hawk's functions. Anything outside the language raises
:class:`~hawk.ir.HawkError` naming the source line.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from hawk import ir
from hawk.decl import VALUE_KEYWORD, plane_of
from hawk.ir import HawkError

__all__ = ["Kernel", "kernel"]


class Kernel:
    """A traced hawk kernel; run it with ``eagle.plan.auto(kernel)``.

    Attributes:
        name: the function's name.
        ir: the :class:`~hawk.ir.KernelIR` (``print(kernel.ir)`` shows it).
        planes: its planes in declaration order.
        fn: the Python function it was read from.
    """

    def __init__(self, fn: Callable[..., Any], kernel_ir: ir.KernelIR) -> None:
        self.fn = fn
        self.ir = kernel_ir
        self.name = kernel_ir.name
        self.planes = kernel_ir.planes
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<hawk kernel {self.name}({', '.join(p.name for p in self.planes)})>"


def kernel(fn: Callable[..., Any]) -> Kernel:
    """Read ``fn`` as a hawk kernel (use as the decorator ``@hawk.kernel``).

    hawk reads the function's source, so define it in a file or a notebook
    cell (for source given to ``exec``, register it in :mod:`linecache` under
    the filename passed to ``compile``).

    Raises:
        HawkError: ``fn`` is outside the hawk language; the message names the
            line and the construct.
    """
    if not isinstance(fn, types.FunctionType):
        raise HawkError(f"@hawk.kernel takes a Python function, not {type(fn).__name__}")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise HawkError(f"cannot read the source of {fn.__qualname__}: {exc}") from exc
    tree = ast.parse(source)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        raise HawkError(f"@hawk.kernel takes a def statement; {fn.__qualname__} is not one")
    return Kernel(fn, _Tracer(fn, node).trace())


# -- what a name can stand for -----------------------------------------------------------


@dataclass(frozen=True)
class _Gone:
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

_BINOPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}

_CMPOPS = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
}

_FOLD = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
}


def _assigned_names(stmts: list[ast.stmt]) -> list[str]:
    """Names a block assigns (anywhere inside it), in first-assignment order."""
    names: dict[str, None] = {}
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names[node.id] = None
    return list(names)


class _Tracer:
    def __init__(self, fn: types.FunctionType, node: ast.FunctionDef) -> None:
        self.fn = fn
        self.node = node
        self.name = fn.__name__
        self.line_offset = fn.__code__.co_firstlineno - 1
        self.locals = set(_assigned_names(node.body))
        self.versions: dict[str, int] = {}
        self.env: dict[str, ir.Expr | ir.Plane | _Gone] = {}
        self.out: list[ir.Stmt] = []

    # -- errors and names ----------------------------------------------------------------

    def error(self, node: ast.AST, message: str) -> HawkError:
        line = self.line_offset + getattr(node, "lineno", 1)
        return HawkError(f"kernel {self.name!r}, line {line}: {message}", line)

    def refuse(self, node: ast.AST) -> HawkError:
        what = _CONSTRUCTS.get(type(node), type(node).__name__)
        return self.error(node, f"{what} is not in hawk: {_snippet(node)}")

    def new_var(self, name: str, type_: ir.Type, varying: bool) -> ir.Var:
        version = self.versions.get(name, -1) + 1
        self.versions[name] = version
        return ir.Var(name if version == 0 else f"{name}.{version}", type_, varying)

    # -- the function --------------------------------------------------------------------

    def trace(self) -> ir.KernelIR:
        planes = self.planes()
        if not any(p.is_lane for p in planes):
            raise self.error(
                self.node,
                "a kernel needs a per-lane plane (hawk.Scalar or hawk.Mutable[hawk.Scalar]): "
                "the lane count is their length",
            )
        for plane in planes:
            if plane.kind == "output":
                self.versions[plane.name] = 0  # its assigned values print as y.1, y.2, ...
            if plane.kind in ("input", "output", "param"):
                self.env[plane.name] = ir.Load(plane)
            else:
                self.env[plane.name] = plane
        body = self.node.body
        if body and _is_docstring(body[0]):
            body = body[1:]
        self.block(body)
        for plane in planes:
            if plane.kind == "output":
                value = self.env[plane.name]
                if value == ir.Load(plane):
                    raise self.error(
                        self.node,
                        f"output {plane.name!r} is never assigned; declare it hawk.Scalar if it "
                        "is an input",
                    )
                self.out.append(ir.Store(plane, self.real(self.node, value, plane.name)))
            if plane.kind == "accumulator" and not any(
                isinstance(node, ir.Accumulate) and node.plane == plane
                for stmt in self.out
                for node in ir.walk(stmt)
            ):
                raise self.error(
                    self.node, f"{plane.name!r} is declared Mutable[Table] but never added to"
                )
        return ir.KernelIR(self.name, planes, tuple(self.out))

    def planes(self) -> tuple[ir.Plane, ...]:
        args = self.node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            raise self.error(
                self.node, "kernel parameters are plain names (no *args, **kwargs, defaults)"
            )
        try:
            annotations = inspect.get_annotations(self.fn, eval_str=True)
        except Exception as exc:
            raise self.error(self.node, f"cannot evaluate the annotations: {exc}") from exc
        planes = []
        for arg in args.args:
            if arg.arg not in annotations:
                raise self.error(
                    arg,
                    f"parameter {arg.arg!r} has no declaration; annotate it hawk.Scalar, "
                    "hawk.Mutable[hawk.Scalar], hawk.Param or hawk.Table",
                )
            try:
                planes.append(plane_of(arg.arg, annotations[arg.arg]))
            except HawkError as exc:
                raise self.error(arg, str(exc)) from exc
        return tuple(planes)

    # -- statements ----------------------------------------------------------------------

    def block(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self.statement(stmt)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            self.assign(node)
        elif isinstance(node, ast.AugAssign):
            if not isinstance(node.target, ast.Name):
                raise self.error(node, f"assign to a name, not {_snippet(node.target)}")
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise self.error(node, f"operator {_snippet(node)} is not in hawk")
            current = self.load_name(node.target.id, node.target)
            self.bind(node.target, self.arith(node, op, current, self.expr(node.value)))
        elif isinstance(node, ast.If):
            self.if_statement(node)
        elif isinstance(node, ast.For):
            self.for_statement(node)
        elif isinstance(node, ast.Expr):
            self.expression_statement(node)
        elif isinstance(node, ast.Pass):
            return
        else:
            raise self.refuse(node)

    def assign(self, node: ast.Assign) -> None:
        if len(node.targets) != 1:
            raise self.error(node, "chained assignment (a = b = ...) is not in hawk")
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name):
            self.bind(target, self.expr(value))
            return
        if not (
            isinstance(target, ast.Tuple) and all(isinstance(t, ast.Name) for t in target.elts)
        ):
            raise self.error(node, f"assign to names, not {_snippet(target)}")
        values = self.tuple_value(value, len(target.elts))
        for name, item in zip(target.elts, values, strict=True):
            self.bind(name, item)

    def tuple_value(self, node: ast.expr, count: int) -> list[ir.Expr]:
        if isinstance(node, ast.Tuple):
            if len(node.elts) != count:
                raise self.error(node, f"unpacking {len(node.elts)} values into {count} names")
            return [self.expr(item) for item in node.elts]
        if isinstance(node, ast.Call) and self.math_op(node.func) == "split_index":
            if count != 2:
                raise self.error(node, "split_index gives two values: a, b = split_index(n)")
            return list(self.split_index(node))
        raise self.error(node, f"only a tuple or split_index(n) unpacks: {_snippet(node)}")

    def bind(self, target: ast.Name, value: ir.Expr) -> None:
        name = target.id
        current = self.env.get(name)
        if isinstance(current, ir.Plane):
            raise self.error(
                target, f"{name!r} is a {current.declaration()} plane; it cannot be assigned"
            )
        if isinstance(current, ir.Load) and current.plane.kind != "output":
            raise self.error(
                target,
                f"{name!r} is a {current.plane.declaration()} input; assign to a new name, or "
                "declare it hawk.Mutable[hawk.Scalar]",
            )
        if isinstance(current, ir.Load):
            value = self.real(target, value, name)
        var = self.new_var(name, value.type, value.varying)
        self.out.append(ir.Let(var, value))
        self.env[name] = ir.Ref(var)

    def expression_statement(self, node: ast.Expr) -> None:
        call = node.value
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "add"
            and isinstance(call.func.value, ast.Name)
            and isinstance(self.env.get(call.func.value.id), ir.Plane)
        ):
            plane = self.env[call.func.value.id]
            assert isinstance(plane, ir.Plane)
            if plane.kind != "accumulator":
                raise self.error(
                    node,
                    f"{plane.name!r} is a {plane.declaration()}, read-only; declare it "
                    f"hawk.Mutable[{plane.declaration()}] to add into it",
                )
            value_args = [k for k in call.keywords if k.arg == VALUE_KEYWORD]
            if len(value_args) != 1:
                raise self.error(node, f"{plane.name}.add(...) takes the value as value=<expr>")
            value = self.real(node, self.expr(value_args[0].value), f"{plane.name}.add")
            index = self.address(call, plane, [k for k in call.keywords if k.arg != VALUE_KEYWORD])
            self.out.append(ir.Accumulate(plane, index, value))
            return
        if isinstance(call, ast.Constant) and isinstance(call.value, str):
            return  # a string on its own line is a comment
        raise self.error(node, f"this expression has no effect: {_snippet(node)}")

    def if_statement(self, node: ast.If) -> None:
        cond = self.condition(node.test)
        if isinstance(cond, ir.Const):
            self.block(node.body if cond.value else node.orelse)
            return
        before = dict(self.env)
        outer = self.out
        self.out = []
        self.block(node.body)
        then_block, then_env = self.out, self.env
        self.out, self.env = [], dict(before)
        self.block(node.orelse)
        else_block, else_env = self.out, self.env
        self.out, self.env = outer, dict(before)
        merges = []
        for name in _assigned_names([*node.body, *node.orelse]):
            then_value, else_value = then_env.get(name), else_env.get(name)
            if then_value is before.get(name) and else_value is before.get(name):
                continue
            if not isinstance(then_value, ir.Expr) or not isinstance(else_value, ir.Expr):
                gone = then_value if isinstance(then_value, _Gone) else else_value
                self.env[name] = (
                    gone
                    if isinstance(gone, _Gone)
                    else _Gone(
                        f"{name!r} is assigned in only one branch of the if at line "
                        f"{self.line_offset + node.lineno}; assign it before the if or in every "
                        "branch"
                    )
                )
                continue
            then_value, else_value = self.join(node, name, then_value, else_value)
            varying = cond.varying or then_value.varying or else_value.varying
            var = self.new_var(name, then_value.type, varying)
            merges.append(ir.Merge(var, then_value, else_value))
            self.env[name] = ir.Ref(var)
        self.out.append(ir.If(cond, tuple(then_block), tuple(else_block), tuple(merges)))

    def for_statement(self, node: ast.For) -> None:
        if node.orelse:
            raise self.error(node, "for ... else is not in hawk")
        if not isinstance(node.target, ast.Name):
            raise self.error(node, f"a loop variable is one name, not {_snippet(node.target)}")
        start, stop, step = self.range_bounds(node)
        index_name = node.target.id
        body_names = _assigned_names(node.body)
        if index_name in body_names:
            raise self.error(node, f"the loop variable {index_name!r} is assigned in its loop")
        before = dict(self.env)
        inits = {n: v for n in body_names if isinstance(v := before.get(n), ir.Expr)}
        kinds = {n: (v.type, v.varying) for n, v in inits.items()}
        saved_versions = dict(self.versions)
        while True:  # widen carried types (int -> real, uniform -> varying) to a fixed point
            index, carry_vars, body, updates = self.loop_body(node, index_name, kinds)
            widened = {
                n: (self.join_type(node, n, kinds[n][0], u.type), kinds[n][1] or u.varying)
                for n, u in updates.items()
            }
            if widened == kinds:
                break
            kinds = widened
            self.versions = dict(saved_versions)
        carries = tuple(
            ir.Carry(
                var,
                self.cast_to(node, inits[n], var.type, n),
                self.cast_to(node, updates[n], var.type, n),
            )
            for n, var in carry_vars.items()
        )
        self.out.append(ir.Loop(index, start, stop, step, carries, body))
        line = self.line_offset + node.lineno
        for name in body_names:
            self.env[name] = (
                ir.Ref(carry_vars[name])
                if name in carry_vars
                else _Gone(
                    f"{name!r} is assigned inside the loop at line {line} but not before it; "
                    "assign it before the loop to use it after"
                )
            )
        self.env[index_name] = _Gone(
            f"the loop variable {index_name!r} (line {line}) is not defined after its loop"
        )

    def loop_body(
        self, node: ast.For, index_name: str, kinds: dict[str, tuple[ir.Type, bool]]
    ) -> tuple[ir.Var, dict[str, ir.Var], tuple[ir.Stmt, ...], dict[str, ir.Expr]]:
        """Trace the body once, with the carried variables of the given kinds."""
        before, outer = dict(self.env), self.out
        index = self.new_var(index_name, "int", False)
        carry_vars = {n: self.new_var(n, *kind) for n, kind in kinds.items()}
        self.env[index_name] = ir.Ref(index)
        self.env.update({n: ir.Ref(var) for n, var in carry_vars.items()})
        self.out = []
        self.block(node.body)
        body, body_env = tuple(self.out), self.env
        self.out, self.env = outer, before
        updates = {}
        for name in carry_vars:
            update = body_env[name]
            if isinstance(update, _Gone):
                raise self.error(node, update.why)
            updates[name] = update
        return index, carry_vars, body, updates

    def range_bounds(self, node: ast.For) -> tuple[int, int, int]:
        it = node.iter
        if not (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name)
            and it.func.id not in self.env
            and self.resolve_or_none(it.func.id) is builtins.range
            and 1 <= len(it.args) <= 3
            and not it.keywords
        ):
            raise self.error(node, f"loops are for x in range(<constant>), not {_snippet(it)}")
        bounds = []
        for arg in it.args:
            value = self.expr(arg)
            if not (isinstance(value, ir.Const) and value.type == "int"):
                kind = "varying" if value.varying else "uniform"
                raise self.error(
                    arg,
                    f"a loop bound must be a constant int, not {_snippet(arg)} (a {kind} "
                    f"{value.type} value)",
                )
            bounds.append(value.value)
        if len(bounds) == 1:
            bounds.insert(0, 0)
        if len(bounds) == 2:
            bounds.append(1)
        if bounds[2] == 0:
            raise self.error(node, "range() step must not be zero")
        return bounds[0], bounds[1], bounds[2]

    # -- types ---------------------------------------------------------------------------

    def join_type(self, node: ast.AST, name: str, a: ir.Type, b: ir.Type) -> ir.Type:
        if a == b:
            return a
        if "bool" in (a, b):
            raise self.error(
                node, f"{name!r} holds a comparison in one place and a number in another"
            )
        return "real"

    def join(self, node: ast.AST, name: str, a: ir.Expr, b: ir.Expr) -> tuple[ir.Expr, ir.Expr]:
        kind = self.join_type(node, name, a.type, b.type)
        return self.cast_to(node, a, kind, name), self.cast_to(node, b, kind, name)

    def cast_to(self, node: ast.AST, value: ir.Expr, kind: ir.Type, name: str) -> ir.Expr:
        if value.type == kind:
            return value
        if value.type == "int" and kind == "real":
            return _fold(ir.Cast("real", value))
        raise self.error(node, f"{name!r} needs a {kind} value, not {value.type} ({value})")

    def real(self, node: ast.AST, value: ir.Expr, name: str) -> ir.Expr:
        return self.cast_to(node, value, "real", name)

    def condition(self, node: ast.expr) -> ir.Expr:
        value = self.expr(node)
        if value.type != "bool":
            raise self.error(
                node, f"a condition must be a comparison, not {_snippet(node)} ({value.type})"
            )
        return value

    def arith(self, node: ast.AST, op: str, left: ir.Expr, right: ir.Expr) -> ir.Expr:
        for side in (left, right):
            if side.type == "bool":
                raise self.error(node, f"{op} needs numbers, not a comparison: {_snippet(node)}")
        if op == "**":
            if isinstance(left, ir.Const) and isinstance(right, ir.Const):
                try:
                    value = left.value**right.value
                except (ZeroDivisionError, OverflowError) as exc:
                    raise self.error(node, f"{_snippet(node)}: {exc}") from exc
                if isinstance(value, complex):
                    raise self.error(node, f"{_snippet(node)} is not a real number")
                return ir.Const(value)
            return self.call_math(node, "pow", [left, right])
        if op == "/" or left.type != right.type:
            left, right = self.real(node, left, op), self.real(node, right, op)
        return _fold(ir.Binary(op, left, right))

    # -- expressions ---------------------------------------------------------------------

    def expr(self, node: ast.expr) -> ir.Expr:
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool | int | float):
                return ir.Const(value)
            raise self.error(node, f"the constant {value!r} is not a number")
        if isinstance(node, ast.Name):
            return self.load_name(node.id, node)
        if isinstance(node, ast.BinOp):
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise self.error(node, f"operator in {_snippet(node)} is not in hawk")
            return self.arith(node, op, self.expr(node.left), self.expr(node.right))
        if isinstance(node, ast.UnaryOp):
            operand = self.expr(node.operand)
            if isinstance(node.op, ast.Not):
                if operand.type != "bool":
                    raise self.error(node, f"'not' takes a comparison: {_snippet(node)}")
                return _fold(ir.Not(operand))
            if isinstance(node.op, ast.USub | ast.UAdd) and operand.type != "bool":
                return _fold(ir.Unary("-" if isinstance(node.op, ast.USub) else "+", operand))
            raise self.error(node, f"operator in {_snippet(node)} is not in hawk")
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            values = [self.condition(v) for v in node.values]
            result = values[0]
            for value in values[1:]:
                result = _fold(ir.Logic(op, result, value))
            return result
        if isinstance(node, ast.IfExp):
            cond = self.condition(node.test)
            a, b = self.join(
                node, "the conditional expression", self.expr(node.body), self.expr(node.orelse)
            )
            return _fold(ir.Select(cond, a, b))
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Attribute):
            value = self.resolve_attribute(node)
            return self.constant(node, value, _snippet(node))
        raise self.refuse(node)

    def compare(self, node: ast.Compare) -> ir.Expr:
        left = self.expr(node.left)
        result: ir.Expr | None = None
        for op_node, right_node in zip(node.ops, node.comparators, strict=True):
            op = _CMPOPS.get(type(op_node))
            if op is None:
                raise self.error(node, f"comparison in {_snippet(node)} is not in hawk")
            right = self.expr(right_node)
            for side in (left, right):
                if side.type == "bool":
                    raise self.error(node, f"{op} compares numbers: {_snippet(node)}")
            a, b = (
                (left, right)
                if left.type == right.type
                else (self.real(node, left, op), self.real(node, right, op))
            )
            term = _fold(ir.Compare(op, a, b))
            result = term if result is None else _fold(ir.Logic("and", result, term))
            left = right
        assert result is not None
        return result

    def load_name(self, name: str, node: ast.AST) -> ir.Expr:
        value = self.env.get(name)
        if isinstance(value, ir.Expr):
            return value
        if isinstance(value, ir.Plane):
            how = f"{name}.at(...)" if value.kind == "table" else f"{name}.add(..., value=v)"
            raise self.error(node, f"{name!r} is a {value.declaration()}; use {how}")
        if isinstance(value, _Gone):
            raise self.error(node, value.why)
        if name in self.locals:
            raise self.error(node, f"name {name!r} is used before assignment")
        try:
            value = self.resolve_global(name)
        except _Unresolved:
            raise self.error(node, f"name {name!r} is not defined") from None
        return self.constant(node, value, name)

    def resolve_global(self, name: str) -> Any:
        code = self.fn.__code__
        if name in code.co_freevars and self.fn.__closure__:
            cell = self.fn.__closure__[code.co_freevars.index(name)]
            try:
                return cell.cell_contents
            except ValueError:
                pass
        if name in self.fn.__globals__:
            return self.fn.__globals__[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise _Unresolved(name)

    def resolve_attribute(self, node: ast.Attribute) -> Any:
        parts = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            parts.append(base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or base.id in self.env or base.id in self.locals:
            raise self.error(node, f"attribute access {_snippet(node)} is not in hawk")
        try:
            value = self.resolve_global(base.id)
        except _Unresolved:
            raise self.error(node, f"name {base.id!r} is not defined") from None
        for part in reversed(parts):
            if not isinstance(value, types.ModuleType) or not hasattr(value, part):
                raise self.error(node, f"attribute access {_snippet(node)} is not in hawk")
            value = getattr(value, part)
        return value

    def constant(self, node: ast.AST, value: Any, text: str) -> ir.Expr:
        if isinstance(value, bool | np.bool_):
            return ir.Const(bool(value))
        if isinstance(value, int | np.integer):
            return ir.Const(int(value))
        if isinstance(value, float | np.floating):
            return ir.Const(float(value))
        raise self.error(
            node,
            f"{text!r} is a {type(value).__name__}; a kernel uses names of its own, its "
            "parameters, and int or float constants",
        )

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
        except (_Unresolved, HawkError):
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
                raise self.error(node, f"{op}() takes positional arguments: {_snippet(node)}")
            if op == "sample_index":
                if node.args:
                    raise self.error(node, "sample_index() takes no arguments")
                return ir.Lane()
            if op == "split_index":
                raise self.error(
                    node, "split_index gives two values; unpack it: a, b = hm.split_index(n)"
                )
            return self.call_math(node, op, [self.expr(a) for a in node.args])
        if isinstance(func, ast.Name) and func.id not in self.env and func.id not in self.locals:
            target = self.resolve_or_none(func.id)
            if target is int or target is float:
                if len(node.args) != 1 or node.keywords:
                    raise self.error(node, f"{func.id}() takes one argument: {_snippet(node)}")
                value = self.expr(node.args[0])
                if value.type == "bool":
                    raise self.error(node, f"{func.id}() of a comparison is not in hawk")
                kind: ir.Type = "int" if target is int else "real"
                return value if value.type == kind else _fold(ir.Cast(kind, value))
        raise self.error(
            node,
            f"unknown call {_snippet(func)}(...): a kernel calls hawk.math functions, int() "
            "and float()",
        )

    def resolve_or_none(self, name: str) -> Any:
        try:
            return self.resolve_global(name)
        except _Unresolved:
            return None

    def call_math(self, node: ast.AST, op: str, args: list[ir.Expr]) -> ir.Expr:
        if len(args) != ir.FUNCTIONS[op]:
            raise self.error(node, f"{op}() takes {ir.FUNCTIONS[op]} argument(s): {_snippet(node)}")
        for arg in args:
            if arg.type == "bool":
                raise self.error(node, f"{op}() takes numbers, not a comparison")
        if op not in ir.INT_FUNCTIONS or any(a.type == "real" for a in args):
            args = [self.real(node, a, op) for a in args]
        return ir.Call(op, tuple(args))

    def split_index(self, node: ast.Call) -> tuple[ir.Expr, ir.Expr]:
        if len(node.args) != 1 or node.keywords:
            raise self.error(node, "split_index(n) takes one constant int")
        n = self.expr(node.args[0])
        if not (isinstance(n, ir.Const) and n.type == "int" and n.value > 0):
            raise self.error(node, f"split_index(n) needs a positive constant int, not {n}")
        return ir.Binary("//", ir.Lane(), n), ir.Binary("%", ir.Lane(), n)

    def table_call(self, node: ast.Call, plane: ir.Plane, method: str) -> ir.Expr:
        if method == "add":
            raise self.error(node, f"{plane.name}.add(...) is a statement, not a value")
        if method != "at":
            raise self.error(
                node, f"tables have .at(...) (and .add for Mutable[Table]), not .{method}"
            )
        if plane.kind != "table":
            raise self.error(node, f"{plane.name!r} is a Mutable[Table]: it is added to, not read")
        return ir.Read(plane, self.address(node, plane, node.keywords))

    def address(
        self, node: ast.Call, plane: ir.Plane, keywords: list[ast.keyword]
    ) -> tuple[ir.Expr, ...]:
        method = f"{plane.name}.{'at' if plane.kind == 'table' else 'add'}"
        if plane.axes is None:
            if len(node.args) != 1 or keywords:
                raise self.error(
                    node, f"{method}(i) takes one flat index ({plane.name} is a flat Table)"
                )
            items = [(None, node.args[0])]
        else:
            if node.args:
                raise self.error(
                    node,
                    f"{method} addresses axes by name: {plane.name} is {plane.declaration()}",
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
            if value.type != "int":
                where = "the index" if label is None else f"axis {label!r}"
                raise self.error(
                    node,
                    f"{method}: {where} is {value.type} ({_snippet(item)}); an index is an int "
                    "(convert with int(...))",
                )
            index.append(value)
        return tuple(index)


class _Unresolved(Exception):
    pass


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _snippet(node: ast.AST) -> str:
    text = ast.unparse(node).splitlines()[0] if isinstance(node, ast.AST) else str(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _consts(node: ir.Expr) -> Iterator[Any]:
    for child in node.children():
        if not isinstance(child, ir.Const):
            return
        yield child.value


def _fold(node: ir.Expr) -> ir.Expr:
    """``node`` with constant operands evaluated (ints exactly, reals in double)."""
    values = list(_consts(node))
    if len(values) != len(node.children()) or not values:
        return node
    if isinstance(node, ir.Binary):
        a, b = values
        if node.op in ("/", "//", "%") and b == 0:
            return node
        return ir.Const(_FOLD[node.op](a, b))
    if isinstance(node, ir.Unary):
        return ir.Const(-values[0] if node.op == "-" else values[0])
    if isinstance(node, ir.Cast):
        return ir.Const(float(values[0]) if node.to == "real" else int(values[0]))
    if isinstance(node, ir.Compare):
        a, b = values
        ops = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}
        return ir.Const(ops[node.op])
    if isinstance(node, ir.Logic):
        return ir.Const(values[0] and values[1] if node.op == "and" else values[0] or values[1])
    if isinstance(node, ir.Not):
        return ir.Const(not values[0])
    if isinstance(node, ir.Select):
        return ir.Const(values[1] if values[0] else values[2])
    return node
