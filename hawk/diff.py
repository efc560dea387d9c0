"""Reverse mode: ``vjp(kernel)`` is the adjoint of a kernel, itself a hawk kernel.

The adjoint runs once per lane, like its primal, and is emitted and run by
the same emitters and plans (``eagle.plan.auto(vjp(kernel))``, or
``eagle.diff.reverse(plan)``, which picks the planes for you). Its planes:

* the primal's inputs, params and tables, unchanged (not its outputs: the
  adjoint recomputes every value it needs from the inputs);
* ``<out>_bar`` for each output: the cotangent of a ``Mutable[Scalar]`` (one
  value per lane) or of a ``Mutable[Table]`` (a table of its shape);
* a gradient plane for each plane the gradient is taken with respect to,
  which the adjoint **adds into**: ``<x>_bar`` for a ``Scalar`` (per lane),
  ``<a>_bar`` for a ``Param`` (one element: the sum over lanes), ``<t>_bar``
  for a table (a ``Mutable[Table]`` of its shape: each read scatters its
  gradient into the element it read, atomic on the device);
* an output the primal reads before writing it (``y = a * x + y``) is also an
  input, its value before the launch: its gradient plane is ``<y>_in_bar``,
  and the adjoint takes that value as plane ``<y>`` only when it needs it.

The gradient of a ``Mutable[Table]``'s initial value is its cotangent itself
(adds pass it through), so it has no plane.

How the reverse sweep gets the values it needs: it **recomputes** them. The
adjoint first reruns the primal body (without its stores and adds), then
walks it backwards. hawk values are per-lane scalars, with no per-lane arrays
to keep a tape in; storing a loop's carried values would take a scratch plane
of lanes x iterations per loop that every caller (and every captured graph)
would have to allocate and keep, so nothing is stored:

* **branches**: the reverse sweep of an ``if`` is an ``if`` on the same
  condition that recomputes the taken block and sends the gradient back
  through it only (the gradient follows the taken branch; a condition itself
  has no gradient);
* **loops**: the reverse sweep is a loop over the same range backwards, which
  recomputes each iteration's body from the loop index and carries the
  gradients of the carried values (and of the outer values the body reads)
  from one iteration to the one before. When the body's gradient needs a
  carried value (Horner's ``p * x`` needs ``p``), each reverse iteration first
  reruns the forward loop up to that iteration: T(T+1)/2 body evaluations
  for T iterations. A fold whose gradient needs no carried value (a sum of
  products, ``acc + w.at(..) * f.at(..)``) costs T.

Steps have a zero derivative: comparisons, ``//``, and ``int()`` of a value
(the gradient is the one almost everywhere, as finite differences away from
the steps see it). The exception is a step in an address: a table read (or
an add whose value carries a gradient) at an index computed with ``int()``
from data the gradient is taken with respect to jumps between elements, and
has no derivative through its address; :func:`vjp` refuses it with a
:class:`~hawk.ir.HawkError` naming the read and the cast. Take the gradient
with respect to other planes (``wrt``), or interpolate between two reads.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from hawk import ir
from hawk.ir import HawkError
from hawk.trace import Kernel

__all__ = ["AdjointKernel", "cotangent_planes", "gradient_planes", "vjp"]

#: the suffix of cotangent and gradient planes
BAR = "_bar"
#: the suffix of the gradient of an output's value before the launch
INITIAL_BAR = "_in_bar"
#: the axis of a param's one-element gradient plane
PARAM_AXIS = "element"

_ZERO = ir.Const(0.0)

# A gradient is kept per primal Var, and per plane for lane planes and params.
_Key = ir.Var | ir.Plane


class AdjointKernel(Kernel):
    """The reverse-mode kernel of a primal kernel; made by :func:`vjp`.

    Attributes:
        primal: the primal :class:`~hawk.trace.Kernel`.
        wrt: the primal planes the gradient is taken with respect to, in
            declaration order.
        gradients: ``{primal plane: gradient plane}`` for those planes.
        cotangents: ``{output: cotangent plane}`` for every output.
        fn: the primal's Python function (the adjoint was derived from it).
    """

    def __init__(
        self,
        primal: Kernel,
        wrt: tuple[str, ...],
        cotangents: dict[str, str],
        kernel_ir: ir.KernelIR,
    ) -> None:
        super().__init__(primal.fn, kernel_ir)
        self.primal = primal
        self.wrt = wrt
        all_gradients = gradient_planes(primal)
        self.gradients = {name: all_gradients[name] for name in wrt}
        self.cotangents = cotangents
        self.__doc__ = f"The adjoint of hawk kernel {primal.name!r} with respect to {wrt}."

    def __repr__(self) -> str:
        return f"<hawk adjoint {self.name}({', '.join(p.name for p in self.planes)})>"


def gradient_planes(kernel: Kernel) -> dict[str, str]:
    """``{plane: gradient plane}`` for every plane of ``kernel`` a gradient can
    be taken with respect to, in declaration order: inputs, params, tables
    (``<name>_bar``) and outputs read before they are written
    (``<name>_in_bar``, the gradient of the value before the launch).

    Raises:
        TypeError: ``kernel`` is not a ``@hawk.kernel``.
    """
    _check_kernel(kernel)
    read_first = _read_first(kernel.ir)
    result = {}
    for plane in kernel.planes:
        if plane.kind in ("input", "param", "table"):
            result[plane.name] = plane.name + BAR
        elif plane in read_first:
            result[plane.name] = plane.name + INITIAL_BAR
    return result


def cotangent_planes(kernel: Kernel) -> dict[str, str]:
    """``{output: cotangent plane}`` for every ``Mutable`` plane of ``kernel``,
    in declaration order (``y`` -> ``y_bar``).

    Raises:
        TypeError: ``kernel`` is not a ``@hawk.kernel``.
    """
    _check_kernel(kernel)
    return {p.name: p.name + BAR for p in kernel.planes if p.kind in ("output", "accumulator")}


_adjoints: weakref.WeakKeyDictionary[Kernel, dict[tuple[str, ...], AdjointKernel]] = (
    weakref.WeakKeyDictionary()
)


def vjp(kernel: Kernel, wrt: Iterable[str] | None = None) -> AdjointKernel:
    """The reverse-mode (vector-Jacobian product) kernel of ``kernel``.

    Args:
        kernel: a ``@hawk.kernel``.
        wrt: the primal planes to take the gradient with respect to (names
            from :func:`gradient_planes`); None for all of them. Only these
            gradients are computed, and only their planes are taken.

    Returns:
        The adjoint kernel (the same object for the same request), whose
        planes are described in :mod:`hawk.diff`.

    Raises:
        TypeError: ``kernel`` is not a ``@hawk.kernel``.
        HawkError: ``wrt`` names no plane, or a plane that has no gradient;
            a plane of ``kernel`` is named like one of the adjoint's; or the
            gradient passes through an address computed with ``int()`` of
            differentiated data.
    """
    candidates = gradient_planes(kernel)
    names = tuple(candidates) if wrt is None else _check_wrt(kernel, wrt, candidates)
    cache = _adjoints.setdefault(kernel, {})
    adjoint = cache.get(names)
    if adjoint is None:
        cotangents = cotangent_planes(kernel)
        adjoint_ir = _build(kernel.ir, names, cotangents)
        adjoint = cache[names] = AdjointKernel(kernel, names, cotangents, adjoint_ir)
    return adjoint


def _check_kernel(kernel: object) -> None:
    if not isinstance(kernel, Kernel):
        raise TypeError(f"hawk.diff takes a @hawk.kernel function, not {type(kernel).__name__}")


def _check_wrt(kernel: Kernel, wrt: Iterable[str], candidates: dict[str, str]) -> tuple[str, ...]:
    if isinstance(wrt, str):
        wrt = (wrt,)
    wanted = set(wrt)
    for name in wanted:
        if name in candidates:
            continue
        planes = {p.name: p for p in kernel.planes}
        if name in planes:
            why = f"{name!r} is an output it writes without reading first"
        else:
            why = f"it has no plane {name!r}"
        raise HawkError(
            f"cannot take the gradient of kernel {kernel.name!r} with respect to {name!r}: {why}; "
            f"its differentiable planes are {', '.join(candidates) or 'none'}"
        )
    if not wanted:
        raise HawkError(
            f"vjp({kernel.name}) needs at least one plane to differentiate with respect to; "
            f"choose from {', '.join(candidates) or 'none'}"
        )
    return tuple(name for name in candidates if name in wanted)


def _read_first(kernel_ir: ir.KernelIR) -> set[ir.Plane]:
    return {
        node.plane
        for node in ir.walk(kernel_ir)
        if isinstance(node, ir.Load) and node.plane.kind == "output"
    }


# -- building the adjoint ----------------------------------------------------------------


def _build(primal: ir.KernelIR, wrt: tuple[str, ...], cotangents: dict[str, str]) -> ir.KernelIR:
    namer = _Namer()
    body, _ = _Flatten(namer).block(primal.body)
    # an output's Load is its value before the launch: an input of the adjoint
    loads = {p: ir.Plane(p.name, "input") if p.kind == "output" else p for p in primal.planes}
    cotangent = {
        p: ir.Plane(cotangents[p.name], "input" if p.kind == "output" else "table", p.axes)
        for p in primal.planes
        if p.name in cotangents
    }
    gradient = {p: _gradient_plane(p) for p in primal.planes if p.name in wrt}
    analysis = _Analysis(set(gradient))
    analysis.block(body)
    builder = _Adjoint(primal.name, namer, analysis, loads, cotangent, gradient)
    env: dict[ir.Var, ir.Expr] = {}
    grads: dict[_Key, ir.Expr] = {}
    builder.forward(body, env)
    builder.reverse(body, env, grads)
    for plane, target in gradient.items():
        if plane.kind == "param" and plane in grads:
            builder.emit(ir.Accumulate(target, (ir.Const(0),), grads[plane]))
    for plane, target in gradient.items():
        if plane.is_lane and plane in grads:
            builder.emit(ir.Store(target, ir.Binary("+", ir.Load(target), grads[plane])))
    adjoint_body = _prune(builder.out, set())
    used = {node.plane for s in adjoint_body for node in ir.walk(s) if isinstance(node, ir.Load)}
    planes = [
        loads[p] for p in primal.planes if p.kind in ("input", "param", "table") or loads[p] in used
    ]
    planes += [cotangent[p] for p in primal.planes if p in cotangent]
    planes += [gradient[p] for p in primal.planes if p in gradient]
    _check_names(primal, planes)
    return ir.KernelIR(primal.name + "_vjp", tuple(planes), adjoint_body)


def _gradient_plane(plane: ir.Plane) -> ir.Plane:
    if plane.kind == "input":
        return ir.Plane(plane.name + BAR, "output")
    if plane.kind == "output":
        return ir.Plane(plane.name + INITIAL_BAR, "output")
    if plane.kind == "param":
        return ir.Plane(plane.name + BAR, "accumulator", ((PARAM_AXIS, 1),))
    return ir.Plane(plane.name + BAR, "accumulator", plane.axes)


def _check_names(primal: ir.KernelIR, planes: list[ir.Plane]) -> None:
    seen: set[str] = set()
    for plane in planes:
        if plane.name in seen:
            raise HawkError(
                f"kernel {primal.name!r} has a plane named {plane.name!r}, which its adjoint "
                f"uses for a cotangent or gradient plane; rename that plane"
            )
        seen.add(plane.name)


class _Namer:
    """Fresh, unique variable names: ``<base>.d<k>`` (primal names are ``<base>.<k>``)."""

    def __init__(self) -> None:
        self.count = 0

    def var(self, base: str, type_: ir.Type, varying: bool) -> ir.Var:
        self.count += 1
        return ir.Var(f"{base}.d{self.count}", type_, varying)

    def like(self, var: ir.Var) -> ir.Var:
        return self.var(_base(var), var.type, var.varying)

    def gradient(self, key: _Key, varying: bool) -> ir.Var:
        base = _base(key) if isinstance(key, ir.Var) else key.name
        return self.var(base + BAR, "real", varying)


def _base(var: ir.Var) -> str:
    return var.name.split(".")[0]


def _rebuild(node: ir.Expr, fn: Callable[[ir.Expr], ir.Expr]) -> ir.Expr:
    """``node`` with each child expression replaced by ``fn(child)``."""
    changes = {}
    for item in dataclasses.fields(node):
        if not item.init:
            continue
        value = getattr(node, item.name)
        if isinstance(value, ir.Expr):
            changes[item.name] = fn(value)
        elif isinstance(value, tuple) and value and all(isinstance(v, ir.Expr) for v in value):
            changes[item.name] = tuple(fn(v) for v in value)
    return dataclasses.replace(node, **changes) if changes else node


def _refs(node: ir.Expr | ir.Stmt) -> set[ir.Var]:
    return {n.var for n in ir.walk(node) if isinstance(n, ir.Ref)}


def _has_effects(stmts: Iterable[ir.Stmt]) -> bool:
    return any(isinstance(n, ir.Store | ir.Accumulate) for stmt in stmts for n in ir.walk(stmt))


# -- 1. one operation per real value -----------------------------------------------------


class _Flatten:
    """Rewrite a body so every real operation is its own :class:`~hawk.ir.Let`
    over atoms (a Ref, a Const or a Load), so the reverse sweep finds each
    intermediate value by name. Int and bool expressions stay whole (they have
    no gradient, and ``and``/``or`` keep their short circuit); a real select
    becomes an ``if``, so a read on its untaken side stays unevaluated."""

    def __init__(self, namer: _Namer) -> None:
        self.namer = namer
        self.out: list[ir.Stmt] = []

    def block(
        self, stmts: Iterable[ir.Stmt], values: Iterable[ir.Expr] = ()
    ) -> tuple[tuple[ir.Stmt, ...], list[ir.Expr]]:
        """``stmts`` flattened, and ``values`` (evaluated after them) as atoms."""
        outer, self.out = self.out, []
        for stmt in stmts:
            self.statement(stmt)
        atoms = [self.atom(value) for value in values]
        block, self.out = tuple(self.out), outer
        return block, atoms

    def statement(self, stmt: ir.Stmt) -> None:
        if isinstance(stmt, ir.Let):
            value = stmt.value if _is_atom(stmt.value) else self.operation(stmt.value)
            self.out.append(ir.Let(stmt.var, value))
        elif isinstance(stmt, ir.Loop):
            inits = [self.atom(c.init) for c in stmt.carries]
            body, updates = self.block(stmt.body, [c.update for c in stmt.carries])
            carries = tuple(
                ir.Carry(c.var, init, update)
                for c, init, update in zip(stmt.carries, inits, updates, strict=True)
            )
            self.out.append(ir.Loop(stmt.index, stmt.start, stmt.stop, stmt.step, carries, body))
        elif isinstance(stmt, ir.If):
            then, then_values = self.block(stmt.then, [m.then_value for m in stmt.merges])
            orelse, else_values = self.block(stmt.orelse, [m.else_value for m in stmt.merges])
            merges = tuple(
                ir.Merge(m.var, a, b)
                for m, a, b in zip(stmt.merges, then_values, else_values, strict=True)
            )
            self.out.append(ir.If(stmt.cond, then, orelse, merges))
        elif isinstance(stmt, ir.Store):
            self.out.append(ir.Store(stmt.plane, self.atom(stmt.value)))
        elif isinstance(stmt, ir.Accumulate):
            self.out.append(ir.Accumulate(stmt.plane, stmt.index, self.atom(stmt.value)))
        else:
            raise TypeError(f"not a hawk statement: {stmt!r}")

    def atom(self, node: ir.Expr) -> ir.Expr:
        if node.type != "real" or _is_atom(node):
            return node
        value = self.operation(node)
        if _is_atom(value):
            return value
        var = self.namer.var("t", "real", value.varying)
        self.out.append(ir.Let(var, value))
        return ir.Ref(var)

    def operation(self, node: ir.Expr) -> ir.Expr:
        if node.type != "real" or isinstance(node, ir.Read | ir.Cast):
            return node
        if isinstance(node, ir.Select):
            then, (a,) = self.block((), [node.if_true])
            orelse, (b,) = self.block((), [node.if_false])
            var = self.namer.var("select", "real", node.varying)
            self.out.append(ir.If(node.cond, then, orelse, (ir.Merge(var, a, b),)))
            return ir.Ref(var)
        return _rebuild(node, self.atom)


def _is_atom(node: ir.Expr) -> bool:
    return isinstance(node, ir.Ref | ir.Const | ir.Load | ir.Lane)


# -- 2. what depends on what -------------------------------------------------------------


class _Analysis:
    """Which values carry a gradient (*active*: real, and a differentiable
    function of a plane in ``wrt``), which depend on ``wrt`` at all, and which
    ints come from ``int()`` of such data (*stepped*, with the cast)."""

    def __init__(self, wrt: set[ir.Plane]) -> None:
        self.wrt = wrt
        self.depends: dict[ir.Var, frozenset[str]] = {}
        self.stepped: dict[ir.Var, ir.Cast] = {}
        self.active: set[ir.Var] = set()

    def block(self, stmts: Iterable[ir.Stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ir.Let):
                self.assign(stmt.var, stmt.value)
            elif isinstance(stmt, ir.Loop):
                while True:  # carried values: to a fixed point
                    size = self.size()
                    for carry in stmt.carries:
                        self.assign(carry.var, carry.init)
                    self.block(stmt.body)
                    for carry in stmt.carries:
                        self.assign(carry.var, carry.update)
                    if self.size() == size:
                        break
            elif isinstance(stmt, ir.If):
                self.block(stmt.then)
                self.block(stmt.orelse)
                for merge in stmt.merges:
                    self.assign(merge.var, merge.then_value)
                    self.assign(merge.var, merge.else_value)

    def size(self) -> tuple[int, int, int]:
        return sum(map(len, self.depends.values())), len(self.stepped), len(self.active)

    def assign(self, var: ir.Var, value: ir.Expr) -> None:
        planes = self.planes_of(value)
        if planes:
            self.depends[var] = self.depends.get(var, frozenset()) | planes
        cast = self.step(value)
        if cast is not None:
            self.stepped.setdefault(var, cast)
        if var.type == "real" and self.is_active(value):
            self.active.add(var)

    def planes_of(self, node: ir.Expr) -> frozenset[str]:
        """The ``wrt`` planes ``node`` depends on, through any data flow."""
        if isinstance(node, ir.Ref):
            return self.depends.get(node.var, frozenset())
        found = frozenset()
        if isinstance(node, ir.Load | ir.Read) and node.plane in self.wrt:
            found = frozenset({node.plane.name})
        for child in node.children():
            found |= self.planes_of(child)
        return found

    def step(self, node: ir.Expr) -> ir.Cast | None:
        """An ``int()`` of ``wrt`` data that ``node`` is computed from, if any."""
        if isinstance(node, ir.Ref):
            return self.stepped.get(node.var)
        if (
            isinstance(node, ir.Cast)
            and node.to == "int"
            and node.operand.type == "real"
            and self.planes_of(node.operand)
        ):
            return node
        for child in node.children():
            cast = self.step(child)
            if cast is not None:
                return cast
        return None

    def step_in(self, index: tuple[ir.Expr, ...]) -> ir.Cast | None:
        for item in index:
            cast = self.step(item)
            if cast is not None:
                return cast
        return None

    def is_active(self, node: ir.Expr) -> bool:
        if node.type != "real" or isinstance(node, ir.Const | ir.Cast):
            return False
        if isinstance(node, ir.Ref):
            return node.var in self.active
        if isinstance(node, ir.Load):
            return node.plane in self.wrt
        if isinstance(node, ir.Read):
            # a stepped address is active so the reverse sweep reaches it and refuses
            return node.plane in self.wrt or self.step_in(node.index) is not None
        if isinstance(node, ir.Binary) and node.op == "//":
            return False
        return any(self.is_active(child) for child in node.children())


# -- 3. the forward rerun and the reverse sweep ------------------------------------------


@dataclass(frozen=True)
class _ReverseLoop:
    """A reverse loop and the gradients it leaves: of the active carried values'
    initial values, and of the outer values its body reads."""

    loop: ir.Loop
    initial: dict[ir.Var, ir.Var]
    outer: dict[_Key, ir.Var]


@dataclass(frozen=True)
class _LoopKinds:
    """Whether each gradient a reverse loop carries varies by lane: those of the
    active carried values, and those of the outer values its body reads."""

    carried: dict[ir.Var, bool]
    outer: dict[_Key, bool]


class _Adjoint:
    """Emits the adjoint body: :meth:`forward` reruns primal statements (fresh
    variables, no stores or adds), :meth:`reverse` sweeps them backwards.

    ``env`` maps each primal variable in scope to its recomputed value;
    ``grads`` maps each primal variable (or lane plane / param) to the
    gradient accumulated for it so far.
    """

    def __init__(
        self,
        name: str,
        namer: _Namer,
        analysis: _Analysis,
        loads: dict[ir.Plane, ir.Plane],
        cotangent: dict[ir.Plane, ir.Plane],
        gradient: dict[ir.Plane, ir.Plane],
    ) -> None:
        self.name = name
        self.namer = namer
        self.analysis = analysis
        self.loads = loads
        self.cotangent = cotangent
        self.gradient = gradient
        self.out: list[ir.Stmt] = []

    def emit(self, stmt: ir.Stmt) -> None:
        self.out.append(stmt)

    @contextmanager
    def block(self) -> Iterator[list[ir.Stmt]]:
        outer, self.out = self.out, []
        try:
            yield self.out
        finally:
            self.out = outer

    def let(self, base: str, value: ir.Expr) -> ir.Expr:
        if _is_atom(value):
            return value
        var = self.namer.var(base, value.type, value.varying)
        self.emit(ir.Let(var, value))
        return ir.Ref(var)

    def value(self, node: ir.Expr, env: dict[ir.Var, ir.Expr]) -> ir.Expr:
        """``node`` (primal) in terms of the recomputed values of ``env``."""
        if isinstance(node, ir.Ref):
            return env[node.var]
        if isinstance(node, ir.Load):
            return ir.Load(self.loads[node.plane])
        return _rebuild(node, lambda child: self.value(child, env))

    # -- forward -------------------------------------------------------------------------

    def forward(self, stmts: Iterable[ir.Stmt], env: dict[ir.Var, ir.Expr]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ir.Let):
                var = self.namer.like(stmt.var)
                self.emit(ir.Let(var, self.value(stmt.value, env)))
                env[stmt.var] = ir.Ref(var)
            elif isinstance(stmt, ir.Loop):
                index = self.namer.like(stmt.index)
                carries = {c.var: self.namer.like(c.var) for c in stmt.carries}
                inits = [self.value(c.init, env) for c in stmt.carries]
                inner = {**env, stmt.index: ir.Ref(index)}
                inner.update({old: ir.Ref(new) for old, new in carries.items()})
                with self.block() as body:
                    self.forward(stmt.body, inner)
                new_carries = tuple(
                    ir.Carry(carries[c.var], init, self.value(c.update, inner))
                    for c, init in zip(stmt.carries, inits, strict=True)
                )
                self.emit(
                    ir.Loop(index, stmt.start, stmt.stop, stmt.step, new_carries, tuple(body))
                )
                env.update({old: ir.Ref(new) for old, new in carries.items()})
            elif isinstance(stmt, ir.If):
                cond = self.value(stmt.cond, env)
                then_env, else_env = dict(env), dict(env)
                with self.block() as then:
                    self.forward(stmt.then, then_env)
                with self.block() as orelse:
                    self.forward(stmt.orelse, else_env)
                merges = tuple(
                    ir.Merge(
                        self.namer.like(m.var),
                        self.value(m.then_value, then_env),
                        self.value(m.else_value, else_env),
                    )
                    for m in stmt.merges
                )
                self.emit(ir.If(cond, tuple(then), tuple(orelse), merges))
                env.update(
                    {m.var: ir.Ref(new.var) for m, new in zip(stmt.merges, merges, strict=True)}
                )

    # -- reverse -------------------------------------------------------------------------

    def reverse(
        self, stmts: tuple[ir.Stmt, ...], env: dict[ir.Var, ir.Expr], grads: dict[_Key, ir.Expr]
    ) -> None:
        for stmt in reversed(stmts):
            if isinstance(stmt, ir.Let):
                bar = grads.pop(stmt.var, None)
                if bar is not None:
                    self.backprop(stmt.value, bar, env, grads, result=env[stmt.var])
            elif isinstance(stmt, ir.Store):
                self.backprop(stmt.value, ir.Load(self.cotangent[stmt.plane]), env, grads)
            elif isinstance(stmt, ir.Accumulate):
                if self.analysis.is_active(stmt.value):
                    self.check_address(stmt.plane, stmt.index, "add")
                    index = tuple(self.value(i, env) for i in stmt.index)
                    read = ir.Read(self.cotangent[stmt.plane], index)
                    bar = self.let(stmt.plane.name + BAR, read)
                    self.backprop(stmt.value, bar, env, grads)
            elif isinstance(stmt, ir.If):
                self.reverse_if(stmt, env, grads)
            elif isinstance(stmt, ir.Loop):
                self.reverse_loop(stmt, env, grads)

    def add(self, key: _Key, contribution: ir.Expr, grads: dict[_Key, ir.Expr]) -> None:
        old = grads.get(key)
        if old is None and _is_atom(contribution):
            grads[key] = contribution
            return
        total = contribution if old is None else ir.Binary("+", old, contribution)
        var = self.namer.gradient(key, total.varying)
        self.emit(ir.Let(var, total))
        grads[key] = ir.Ref(var)

    def give(
        self,
        atom: ir.Expr,
        contribution: Callable[[], ir.Expr],
        grads: dict[_Key, ir.Expr],
    ) -> None:
        """Add ``contribution()`` to the gradient of ``atom`` when it carries one."""
        if isinstance(atom, ir.Ref) and atom.var in self.analysis.active:
            self.add(atom.var, contribution(), grads)
        elif isinstance(atom, ir.Load) and atom.plane in self.gradient:
            self.add(atom.plane, contribution(), grads)

    def check_address(self, plane: ir.Plane, index: tuple[ir.Expr, ...], method: str) -> None:
        cast = self.analysis.step_in(index)
        if cast is None:
            return
        planes = sorted(self.analysis.planes_of(cast.operand))
        raise HawkError(
            f"kernel {self.name!r}: cannot differentiate {plane.name}.{method}(...) with respect "
            f"to {', '.join(planes)}: its address uses {cast}, a step in that data, so it has no "
            "derivative through the address; take the gradient with respect to other planes "
            "(vjp(kernel, wrt=...)), or read two neighbouring elements and interpolate"
        )

    def backprop(
        self,
        node: ir.Expr,
        bar: ir.Expr,
        env: dict[ir.Var, ir.Expr],
        grads: dict[_Key, ir.Expr],
        result: ir.Expr | None = None,
    ) -> None:
        """Send ``bar``, the gradient of ``node``'s value, to its operands."""
        if node.type != "real":
            return
        if isinstance(node, ir.Ref | ir.Load):
            self.give(node, lambda: bar, grads)
        elif isinstance(node, ir.Read):
            self.check_address(node.plane, node.index, "at")
            if node.plane in self.gradient:
                index = tuple(self.value(i, env) for i in node.index)
                self.emit(ir.Accumulate(self.gradient[node.plane], index, bar))
        elif isinstance(node, ir.Unary):
            self.give(node.operand, lambda: bar if node.op == "+" else ir.Unary("-", bar), grads)
        elif isinstance(node, ir.Binary):
            self.binary(node, bar, env, grads)
        elif isinstance(node, ir.Call):
            assert result is not None
            self.call(node, bar, env, grads, result)

    def binary(
        self, node: ir.Binary, bar: ir.Expr, env: dict[ir.Var, ir.Expr], grads: dict[_Key, ir.Expr]
    ) -> None:
        left, right = node.left, node.right
        lv, rv = self.value(left, env), self.value(right, env)
        if node.op == "+":
            self.give(left, lambda: bar, grads)
            self.give(right, lambda: bar, grads)
        elif node.op == "-":
            self.give(left, lambda: bar, grads)
            self.give(right, lambda: ir.Unary("-", bar), grads)
        elif node.op == "*":
            self.give(left, lambda: ir.Binary("*", bar, rv), grads)
            self.give(right, lambda: ir.Binary("*", bar, lv), grads)
        elif node.op == "/":
            self.give(left, lambda: ir.Binary("/", bar, rv), grads)
            self.give(
                right,
                lambda: ir.Unary(
                    "-", ir.Binary("/", ir.Binary("*", bar, lv), ir.Binary("*", rv, rv))
                ),
                grads,
            )
        elif node.op == "%":  # x % c = x - c * (x // c)
            self.give(left, lambda: bar, grads)
            self.give(
                right, lambda: ir.Unary("-", ir.Binary("*", bar, ir.Binary("//", lv, rv))), grads
            )

    def call(
        self,
        node: ir.Call,
        bar: ir.Expr,
        env: dict[ir.Var, ir.Expr],
        grads: dict[_Key, ir.Expr],
        result: ir.Expr,
    ) -> None:
        args = [self.value(a, env) for a in node.args]
        x = args[0]
        mul = ir.Binary
        derivative = {
            "exp": lambda: mul("*", bar, result),
            "log": lambda: mul("/", bar, x),
            "sqrt": lambda: mul("/", mul("*", bar, ir.Const(0.5)), result),
            "sin": lambda: mul("*", bar, ir.Call("cos", (x,))),
            "cos": lambda: ir.Unary("-", mul("*", bar, ir.Call("sin", (x,)))),
            "tanh": lambda: mul("*", bar, mul("-", ir.Const(1.0), mul("*", result, result))),
            "abs": lambda: ir.Select(
                ir.Compare(">", x, _ZERO),
                bar,
                ir.Select(ir.Compare("<", x, _ZERO), ir.Unary("-", bar), _ZERO),
            ),
        }
        if node.fn in derivative:
            self.give(node.args[0], derivative[node.fn], grads)
            return
        y = args[1]
        if node.fn in ("minimum", "maximum"):
            first = ir.Compare("<" if node.fn == "minimum" else ">", x, y)
            self.give(node.args[0], lambda: ir.Select(first, bar, _ZERO), grads)
            self.give(node.args[1], lambda: ir.Select(first, _ZERO, bar), grads)
        elif node.fn == "pow":
            lower = (
                ir.Const(y.value - 1.0) if isinstance(y, ir.Const) else mul("-", y, ir.Const(1.0))
            )
            self.give(
                node.args[0], lambda: mul("*", bar, mul("*", y, ir.Call("pow", (x, lower)))), grads
            )
            self.give(
                node.args[1], lambda: mul("*", bar, mul("*", result, ir.Call("log", (x,)))), grads
            )
        else:
            raise HawkError(f"kernel {self.name!r}: no derivative for hawk.math.{node.fn}")

    # -- branches ------------------------------------------------------------------------

    def reverse_if(
        self, stmt: ir.If, env: dict[ir.Var, ir.Expr], grads: dict[_Key, ir.Expr]
    ) -> None:
        bars = {m.var: grads.pop(m.var) for m in stmt.merges if m.var in grads}
        cond = self.value(stmt.cond, env)
        sides = []
        for block, pick in ((stmt.then, "then_value"), (stmt.orelse, "else_value")):
            side_env, side_grads = dict(env), dict(grads)
            with self.block() as stmts:
                self.forward(block, side_env)
                for merge in stmt.merges:
                    if merge.var in bars:
                        self.give(getattr(merge, pick), lambda m=merge: bars[m.var], side_grads)
                self.reverse(block, side_env, side_grads)
            sides.append((tuple(stmts), side_grads))
        (then, then_grads), (orelse, else_grads) = sides
        merges = []
        for key in {**then_grads, **else_grads}:
            a, b = then_grads.get(key, _ZERO), else_grads.get(key, _ZERO)
            if a is grads.get(key) and b is grads.get(key):
                continue
            var = self.namer.gradient(key, cond.varying or a.varying or b.varying)
            merges.append(ir.Merge(var, a, b))
            grads[key] = ir.Ref(var)
        self.emit(ir.If(cond, then, orelse, tuple(merges)))

    # -- loops ---------------------------------------------------------------------------

    def reverse_loop(
        self, stmt: ir.Loop, env: dict[ir.Var, ir.Expr], grads: dict[_Key, ir.Expr]
    ) -> None:
        active = [c for c in stmt.carries if c.var in self.analysis.active]
        bars = {c.var: grads.pop(c.var, _ZERO) for c in active}
        kinds = _LoopKinds({c.var: bars[c.var].varying for c in active}, {})
        while True:  # until the gradients it carries, and which of them vary, are known
            attempt = self.reverse_loop_once(stmt, env, grads, active, bars, kinds)
            if isinstance(attempt, _ReverseLoop):
                break
            kinds = attempt
        self.emit(attempt.loop)
        grads.update({key: ir.Ref(var) for key, var in attempt.outer.items()})
        for carry in active:
            self.give(carry.init, lambda c=carry: ir.Ref(attempt.initial[c.var]), grads)

    def reverse_loop_once(
        self,
        stmt: ir.Loop,
        env: dict[ir.Var, ir.Expr],
        grads: dict[_Key, ir.Expr],
        active: list[ir.Carry],
        bars: dict[ir.Var, ir.Expr],
        kinds: _LoopKinds,
    ) -> _ReverseLoop | _LoopKinds:
        """The reverse loop, or, when ``kinds`` guessed too little, a better guess."""
        index = self.namer.like(stmt.index)
        entry = {c.var: self.namer.like(c.var) for c in stmt.carries}  # values on entry
        carried = {c.var: self.namer.gradient(c.var, kinds.carried[c.var]) for c in active}
        outer = {key: self.namer.gradient(key, varying) for key, varying in kinds.outer.items()}
        inner_env = {**env, stmt.index: ir.Ref(index)}
        inner_env.update({old: ir.Ref(new) for old, new in entry.items()})
        inner_grads: dict[_Key, ir.Expr] = {key: ir.Ref(var) for key, var in outer.items()}
        with self.block() as body:
            self.forward(stmt.body, inner_env)
            for carry in active:
                self.give(carry.update, lambda c=carry: ir.Ref(carried[c.var]), inner_grads)
            self.reverse(stmt.body, inner_env, inner_grads)
        updates = {c.var: inner_grads.pop(c.var, _ZERO) for c in active}
        needed = _LoopKinds(
            {var: kinds.carried[var] or update.varying for var, update in updates.items()},
            {
                key: kinds.outer.get(key, grads.get(key, _ZERO).varying) or value.varying
                for key, value in inner_grads.items()
            },
        )
        if needed != kinds:
            return needed
        carries = [ir.Carry(carried[c.var], bars[c.var], updates[c.var]) for c in active]
        carries += [
            ir.Carry(var, grads.get(key, _ZERO), inner_grads[key]) for key, var in outer.items()
        ]
        roots = set().union(*(_refs(c.update) for c in carries))
        live = set(roots)
        pruned = _prune(body, live)
        if any(var in live for var in entry.values()):  # the gradient needs carried values
            with self.block() as rerun:
                self.rerun_to(stmt, env, index, entry)
            pruned = _prune((*rerun, *body), set(roots))
        last = stmt.start + (stmt.trip_count - 1) * stmt.step
        loop = ir.Loop(index, last, stmt.start - stmt.step, -stmt.step, tuple(carries), pruned)
        return _ReverseLoop(loop, carried, outer)

    def rerun_to(
        self,
        stmt: ir.Loop,
        env: dict[ir.Var, ir.Expr],
        until: ir.Var,
        entry: dict[ir.Var, ir.Var],
    ) -> None:
        """Define ``entry``: the carried values on entry to iteration ``until``,
        by rerunning the loop's iterations before it."""
        index = self.namer.like(stmt.index)
        state = {c.var: self.namer.like(c.var) for c in stmt.carries}
        inner = {**env, stmt.index: ir.Ref(index)}
        inner.update({old: ir.Ref(new) for old, new in state.items()})
        with self.block() as then:
            self.forward(stmt.body, inner)
        merges = tuple(
            ir.Merge(self.namer.like(c.var), self.value(c.update, inner), ir.Ref(state[c.var]))
            for c in stmt.carries
        )
        before = ir.Compare("<" if stmt.step > 0 else ">", ir.Ref(index), ir.Ref(until))
        carries = tuple(
            ir.Carry(state[c.var], self.value(c.init, env), ir.Ref(m.var))
            for c, m in zip(stmt.carries, merges, strict=True)
        )
        body = (ir.If(before, tuple(then), (), merges),)
        self.emit(ir.Loop(index, stmt.start, stmt.stop, stmt.step, carries, body))
        for carry in stmt.carries:
            self.emit(ir.Let(entry[carry.var], ir.Ref(state[carry.var])))


# -- 4. dropping what the adjoint does not use -------------------------------------------


def _prune(stmts: Iterable[ir.Stmt], live: set[ir.Var]) -> tuple[ir.Stmt, ...]:
    """``stmts`` without the values nothing after them uses (stores and adds
    are always used); adds every variable the kept statements read to ``live``."""
    kept: list[ir.Stmt] = []
    for stmt in reversed(list(stmts)):
        if isinstance(stmt, ir.Let):
            if stmt.var in live:
                kept.append(stmt)
                live |= _refs(stmt.value)
        elif isinstance(stmt, ir.Store | ir.Accumulate):
            kept.append(stmt)
            live |= _refs(stmt)
        elif isinstance(stmt, ir.If):
            merges = tuple(m for m in stmt.merges if m.var in live)
            for merge in merges:
                live |= _refs(merge.then_value) | _refs(merge.else_value)
            then = _prune(stmt.then, live)
            orelse = _prune(stmt.orelse, live)
            if merges or _has_effects(then) or _has_effects(orelse):
                live |= _refs(stmt.cond)
                kept.append(ir.If(stmt.cond, then, orelse, merges))
        elif isinstance(stmt, ir.Loop):
            used = {c.var for c in stmt.carries if c.var in live}
            while True:
                inner = set(live)
                for carry in stmt.carries:
                    if carry.var in used:
                        inner |= _refs(carry.update)
                body = _prune(stmt.body, inner)
                more = {c.var for c in stmt.carries if c.var in inner} - used
                if not more:
                    break
                used |= more
            carries = tuple(c for c in stmt.carries if c.var in used)
            if carries or _has_effects(body):
                live |= inner
                for carry in carries:
                    live |= _refs(carry.init)
                kept.append(ir.Loop(stmt.index, stmt.start, stmt.stop, stmt.step, carries, body))
    return tuple(reversed(kept))
