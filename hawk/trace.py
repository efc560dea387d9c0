"""Python source -> hawk IR.

:func:`kernel` reads a function's source with :mod:`ast` (the body is never
run, loops are never unrolled) and builds a :class:`~hawk.ir.KernelIR`.
Names that are not parameters or assigned in the body are looked up once,
at decoration time, in the function's closure, globals and builtins: they
must be numbers (baked in as constants), modules (for ``hm.exp`` or
``math.pi``) or hawk's functions. Anything outside the language raises
:class:`~hawk.HawkError` naming the source line.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import sys
import types
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hawk import ir
from hawk._expressions import BINOPS, ExpressionTracer, Gone, assigned_names, snippet
from hawk._registry import DEBUG_CALLS
from hawk._scope import closure
from hawk.decl import VALUE_KEYWORD, _declared_plane
from hawk.errors import HawkError, HawkTypeError
from hawk.ir.expr import INT_MAX, INT_MIN
from hawk.kinds import PlaneKind, Type

__all__ = ["Kernel", "kernel"]


class Kernel:
    """A traced hawk kernel; run it with ``eagle.plan.auto(kernel)``.

    Attributes:
        name: the function's name.
        ir: the :class:`~hawk.ir.KernelIR` (``print(kernel.ir)`` shows it), without
            the debugging calls (``hm.debug_print``, ``hm.breakpoint``): what every
            pass and emitter reads.
        debug_ir: the IR with its debugging calls (``hawk.ir.Debug``), which
            the reference interpreter runs (:mod:`hawk.emit.reference`).
        planes: its planes in declaration order.
        fn: the Python function it was read from.
        runtime: what a runtime keeps with the kernel, so that it goes when the kernel
            goes (eagle keeps there what its plans of the kernel share).
    """

    def __init__(self, fn: Callable[..., Any], kernel_ir: ir.KernelIR) -> None:
        self.fn = fn
        self.debug_ir = kernel_ir
        body = ir.without_debug(kernel_ir.body)
        self.ir = kernel_ir if body == kernel_ir.body else replace(kernel_ir, body=body)
        self.name = kernel_ir.name
        self.planes = kernel_ir.planes
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.__module__ = fn.__module__  # where pickle finds it, as it finds a function
        self.__qualname__ = fn.__qualname__
        # what hawk.diff derived from this kernel, by the planes it differentiates and
        # its options: kept here (an adjoint refers to its primal) so both go with the kernel
        self._adjoints: dict[tuple[Any, ...], Kernel] = {}
        # the names of its adjoints' cotangent and gradient planes (hawk.diff), once asked
        self._adjoint_names: tuple[dict[str, str], dict[str, str]] | None = None
        self.runtime: dict[Any, Any] = {}

    def __repr__(self) -> str:
        return f"<hawk kernel {self.name}({', '.join(p.name for p in self.planes)})>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Refused: a kernel runs over planes through a plan, not as a Python call.

        Raises:
            HawkTypeError: always, saying how to run the kernel.
        """
        names = ", ".join(f"{p.name}=..." for p in self.planes)
        raise HawkTypeError(
            f"kernel {self.name!r} is not called like a function; run it over its planes "
            f"with eagle.plan.auto({self.name}).run({names}) (or wrap it for torch with "
            f"eagle.torch.function({self.name}))"
        )

    def __copy__(self) -> Kernel:
        """The kernel itself: it is immutable, as a function is (one defined inside a
        function included, which cannot be pickled)."""
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Kernel:
        return self

    def __reduce__(self) -> str | tuple[Any, ...]:
        """Pickle by reference, as Python pickles a function: by its module and name, so
        it loads as the kernel that module defines.

        Raises:
            TypeError: the kernel is not reachable by its module and name (defined
                inside a function, or rebound to another name).
        """
        found: Any = sys.modules.get(self.__module__)
        for part in self.__qualname__.split("."):
            found = getattr(found, part, None)
        if found is not self:
            raise HawkTypeError(
                f"hawk kernel {self.name!r} is pickled by reference, like a function, and "
                f"{self.__module__}.{self.__qualname__} is not this kernel (defined inside a "
                "function, or named otherwise); define it at module level under its own name"
            )
        return self.__qualname__


def kernel(fn: Callable[..., Any] | None = None) -> Kernel:
    """Read ``fn`` as a hawk kernel (use as the decorator ``@hawk.kernel``).

    hawk reads the function's source, so define it in a file or a notebook
    cell, not in a plain REPL or ``python -c`` (for source given to ``exec``,
    register it in :mod:`linecache` under the filename passed to ``compile``).

    Raises:
        HawkError: ``fn`` is outside the hawk language; the message names the
            line and the construct.
    """
    if fn is None:
        raise HawkTypeError(
            "@hawk.kernel takes no arguments: write @hawk.kernel, without parentheses"
        )
    # a function under decorators that keep it as __wrapped__ (functools.wraps) is read
    # as written: its source, and the closure and globals its body sees
    written = inspect.unwrap(fn)
    if not isinstance(fn, types.FunctionType) or not isinstance(written, types.FunctionType):
        raise HawkError(f"@hawk.kernel takes a Python function, not {type(fn).__name__}")
    if written.__name__ == "<lambda>":
        raise HawkError(f"@hawk.kernel takes a def statement; {written.__qualname__} is a lambda")
    try:
        source = _dedented(inspect.getsource(written))
    except (OSError, TypeError) as exc:
        raise HawkError(
            f"cannot read the source of {fn.__qualname__} ({exc}): hawk reads a kernel's "
            "source, which Python keeps only for code in a file or a notebook cell; define "
            "the kernel in a .py file or a notebook cell, not in a plain REPL or python -c"
        ) from exc
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:  # (source Python compiled, cut out of its context)
        raise HawkError(
            f"cannot read the source of {fn.__qualname__} on its own ({exc.msg}, its line "
            f"{exc.lineno}); define the kernel with a def statement of its own"
        ) from exc
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        raise HawkError(f"@hawk.kernel takes a def statement; {fn.__qualname__} is not one")
    return Kernel(fn, _Tracer(written, node, source.splitlines()).trace())


def _dedented(source: str) -> str:
    """``source`` with its first line's indentation taken off every line that has it (a
    line with less, such as a comment at column 0, is left as it is)."""
    lines = source.splitlines(keepends=True)
    first = lines[0]
    indent = first[: len(first) - len(first.lstrip())]
    if not indent:
        return source
    return "".join(line[len(indent) :] if line.startswith(indent) else line for line in lines)


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


class _Tracer(ExpressionTracer):
    """Traces one function: its planes, then its statements in order."""

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
            if plane.kind == PlaneKind.OUTPUT:
                self.versions[plane.name] = 0  # its assigned values print as y.1, y.2, ...
            if plane.kind in (PlaneKind.INPUT, PlaneKind.OUTPUT, PlaneKind.PARAM):
                self.env[plane.name] = ir.Load(plane)
            else:
                self.env[plane.name] = plane
        body = self.node.body
        if body and _is_docstring(body[0]):
            body = body[1:]
        self.block(body)
        for plane in planes:
            if plane.kind == PlaneKind.OUTPUT:
                value = self.env[plane.name]
                if isinstance(value, Gone):
                    raise self.error(
                        self.node,
                        f"output {plane.name!r} has no value at the end of the kernel: {value.why}",
                    )
                # an output's name starts as its Load, and bind never puts a plane there
                assert isinstance(value, ir.Expr)
                if value == ir.Load(plane):
                    raise self.error(
                        self.node,
                        f"output {plane.name!r} is never assigned; declare it hawk.Scalar if it "
                        "is an input",
                    )
                self.emit(ir.Store(plane, self.real(self.node, value, plane.name)))
            if plane.kind == PlaneKind.ACCUMULATOR and not any(
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
            # (annotations written as strings, under `from __future__ import annotations`,
            # see the closure the body sees)
            annotations = inspect.get_annotations(self.fn, eval_str=True, locals=closure(self.fn))
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
                planes.append(_declared_plane(arg.arg, annotations[arg.arg]))
            except HawkError as exc:
                raise self.error(arg, exc.message) from exc
        return tuple(planes)

    # -- statements ----------------------------------------------------------------------

    def block(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            try:
                self.statement(stmt)
            except HawkError as exc:
                raise self.located(stmt, exc) from exc

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            self.assign(node)
        elif isinstance(node, ast.AugAssign):
            if not isinstance(node.target, ast.Name):
                raise self.error(node, f"assign to a name, not {snippet(node.target)}")
            op = BINOPS.get(type(node.op))
            if op is None:
                raise self.error(node, f"operator {snippet(node)} is not in hawk")
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
            raise self.error(node, f"assign to names, not {snippet(target)}")
        names = [t for t in target.elts if isinstance(t, ast.Name)]  # all of them, as checked
        values = self.tuple_value(value, len(names))
        for name, item in zip(names, values, strict=True):
            self.bind(name, item)

    def tuple_value(self, node: ast.expr, count: int) -> list[ir.Expr]:
        if isinstance(node, ast.Tuple):
            if len(node.elts) != count:
                raise self.error(node, f"unpacking {len(node.elts)} values into {count} names")
            return [self.expr(item) for item in node.elts]
        if isinstance(node, ast.Call) and self.math_op(node.func) == "split_index":
            values = self.split_index(node)
            if count != len(values):
                raise self.error(
                    node,
                    f"split_index of {len(node.args)} extent(s) gives {len(values)} values, "
                    f"not {count}: a, b = split_index(n) or a, b, c = split_index(n1, n2)",
                )
            return list(values)
        raise self.error(node, f"only a tuple or split_index(n) unpacks: {snippet(node)}")

    def bind(self, target: ast.Name, value: ir.Expr) -> None:
        name = target.id
        current = self.env.get(name)
        if isinstance(current, ir.Plane):
            raise self.error(
                target, f"{name!r} is a {current.declaration()} plane; it cannot be assigned"
            )
        if isinstance(current, ir.Load) and current.plane.kind != PlaneKind.OUTPUT:
            raise self.error(
                target,
                f"{name!r} is a {current.plane.declaration()} input; assign to a new name, or "
                "declare it hawk.Mutable[hawk.Scalar]",
            )
        if isinstance(current, ir.Load):
            value = self.real(target, value, name)
        var = self.new_var(name, value.type, value.varying)
        self.emit(ir.Let(var, value))
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
            if plane.kind != PlaneKind.ACCUMULATOR:
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
            self.emit(ir.Accumulate(plane, index, value))
            return
        if isinstance(call, ast.Call) and self.math_op(call.func) in DEBUG_CALLS:
            self.debug_call(call)
            return
        if isinstance(call, ast.Constant) and isinstance(call.value, str):
            return  # a string on its own line is a comment
        if isinstance(call, ast.Yield | ast.YieldFrom | ast.Await):
            raise self.refuse(call)  # (a generator or coroutine, not an unused value)
        debugging = {"print": "hm.debug_print(...)", "breakpoint": "hm.breakpoint()"}
        called = (
            call.func.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else ""
        )
        if called in debugging:
            raise self.error(
                node,
                f"{called}() is not in hawk: call {debugging[called]} (hawk.math) on a line of "
                "its own, and run the plan with backend='reference', where it acts",
            )
        raise self.error(node, f"this expression has no effect: {snippet(node)}")

    def debug_call(self, call: ast.Call) -> None:
        """``hm.debug_print(...)`` or ``hm.breakpoint()``: a ``hawk.ir.Debug``, with
        the names in scope here."""
        op = self.math_op(call.func)
        assert op is not None
        if call.keywords:
            raise self.error(call, f"{op}() takes positional arguments: {snippet(call)}")
        if call.args and not DEBUG_CALLS[op].takes_values:
            raise self.error(
                call, f"hm.{op}() takes no arguments (the kernel's names are its locals)"
            )
        items: list[str | ir.Expr] = []
        for arg in call.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                items.append(arg.value)
            else:
                items.append(self.expr(arg))
        names = tuple(
            (name, value) for name, value in self.env.items() if isinstance(value, ir.Expr)
        )
        self.emit(ir.Debug(op, tuple(items), names))

    def if_statement(self, node: ast.If) -> None:
        cond = self.condition(node.test)
        if isinstance(cond, ir.Const):
            self.block(node.body if cond.value else node.orelse)
            return
        before = dict(self.env)
        with self.nested() as then_block:
            self.block(node.body)
        then_env, self.env = self.env, dict(before)
        with self.nested() as else_block:
            self.block(node.orelse)
        else_env, self.env = self.env, dict(before)
        merges = []
        for name in assigned_names([*node.body, *node.orelse]):
            then_value, else_value = then_env.get(name), else_env.get(name)
            if then_value is before.get(name) and else_value is before.get(name):
                continue
            if not isinstance(then_value, ir.Expr) or not isinstance(else_value, ir.Expr):
                gone = then_value if isinstance(then_value, Gone) else else_value
                self.env[name] = (
                    gone
                    if isinstance(gone, Gone)
                    else Gone(
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
        self.emit(ir.If(cond, tuple(then_block), tuple(else_block), tuple(merges)))

    def for_statement(self, node: ast.For) -> None:
        if node.orelse:
            raise self.error(node, "for ... else is not in hawk")
        if not isinstance(node.target, ast.Name):
            raise self.error(node, f"a loop variable is one name, not {snippet(node.target)}")
        start, stop, step = self.range_bounds(node)
        index_name = node.target.id
        body_names = assigned_names(node.body)
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
        self.emit(ir.Loop(index, start, stop, step, carries, body))
        line = self.line_offset + node.lineno
        for name in body_names:
            self.env[name] = (
                ir.Ref(carry_vars[name])
                if name in carry_vars
                else Gone(
                    f"{name!r} is assigned inside the loop at line {line} but not before it; "
                    "assign it before the loop to use it after"
                )
            )
        self.env[index_name] = Gone(
            f"the loop variable {index_name!r} (line {line}) is not defined after its loop"
        )

    def loop_body(
        self, node: ast.For, index_name: str, kinds: dict[str, tuple[ir.Type, bool]]
    ) -> tuple[ir.Var, dict[str, ir.Var], tuple[ir.Stmt, ...], dict[str, ir.Expr]]:
        """Trace the body once, with the carried variables of the given kinds."""
        before = dict(self.env)
        index = self.new_var(index_name, Type.INT, False)
        carry_vars = {n: self.new_var(n, *kind) for n, kind in kinds.items()}
        self.env[index_name] = ir.Ref(index)
        self.env.update({n: ir.Ref(var) for n, var in carry_vars.items()})
        with self.nested() as stmts:
            self.block(node.body)
        body, body_env = tuple(stmts), self.env
        self.env = before
        updates: dict[str, ir.Expr] = {}
        for name in carry_vars:
            update = body_env[name]
            if isinstance(update, Gone):
                raise self.error(node, update.why)
            assert isinstance(update, ir.Expr)  # a carry held a value, and bind refuses planes
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
            advice = ""
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Name):
                name = it.func.id
                if name == "range" and (name in self.env or name in self.locals):
                    advice = (
                        "; the kernel assigns a variable called 'range', which hides Python's "
                        "range (rename the variable)"
                    )
                elif name == "range" and self.resolve_or_none(name) is not builtins.range:
                    advice = (
                        "; 'range' in the kernel's module is not Python's range: a name there "
                        "hides it (rename that name)"
                    )
            elif isinstance(it, ast.Name):
                over = self.env.get(it.id)
                if isinstance(over, ir.Plane) and over.axes:
                    label, extent = over.axes[0]
                    advice = (
                        f"; to go through table {over.name}, write for k in range({extent}) "
                        f"and read {over.name}.at({label}=k)"
                    )
            raise self.error(
                node, f"loops are for x in range(<constant>), not {snippet(it)}{advice}"
            )
        bounds: list[int] = []
        for arg in it.args:
            value = self.expr(arg)
            if not (isinstance(value, ir.Const) and value.type == Type.INT):
                kind = "varying" if value.varying else "uniform"
                raise self.error(
                    arg,
                    f"a loop bound must be a constant int, not {snippet(arg)} (a {kind} "
                    f"{value.type} value); the bound is fixed when the kernel is made: use an "
                    "int of the module, or a table's extent",
                )
            assert isinstance(value.value, int)  # a Const of type int holds an int
            bounds.append(value.value)
        if len(bounds) == 1:
            bounds.insert(0, 0)
        if len(bounds) == 2:
            bounds.append(1)
        start, stop, step = bounds
        if step == 0:
            raise self.error(node, "range() step must not be zero")
        passes = range(start, stop, step)  # (len() of one of 2**63 passes or more overflows)
        # the counter after the last pass, and before the first (where the gradient's
        # reversed loop stops)
        ends = (passes[-1] + step, start - step) if passes else ()
        if not all(INT_MIN <= value <= INT_MAX for value in ends):
            raise self.error(
                node,
                f"range({start}, {stop}, {step}) steps its counter past the int64 range "
                "after its last pass, or before its first (its gradient's loop runs it "
                "backwards); hawk counts loops in int64, so keep the range one step inside "
                f"{INT_MIN} .. {INT_MAX}",
            )
        return start, stop, step
