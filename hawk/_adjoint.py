"""The reverse sweep: :class:`Adjoint` emits the body of an adjoint kernel.

It reruns primal statements (:meth:`Adjoint.forward`) and sweeps them
backwards (:meth:`Adjoint.reverse`), sending each value's gradient to the
values it was computed from; an operation's gradient (an operator's or a
``hawk.math`` function's) comes from the derivative rule of its registry entry
(:mod:`hawk._registry`). How
branches and loops are reversed is described in :mod:`hawk.diff`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from hawk import ir
from hawk._activity import Activity
from hawk._fold import fold
from hawk._passes import Namer, base_name, is_atom, prune, refs
from hawk.errors import HawkError, HawkTypeError
from hawk.kinds import Type

__all__ = ["BAR", "Adjoint", "GradientNamer", "Key"]

#: the suffix of cotangent and gradient planes (and of gradient variables)
BAR = "_bar"

_ZERO = ir.Const(0.0)

_FORWARD: ir.Rules[Callable[[Adjoint, Any, dict[ir.Var, ir.Expr]], None]] = ir.Rules(
    "adjoint forward", ir.Stmt
)
_REVERSE: ir.Rules[Callable[..., None]] = ir.Rules("adjoint reverse", ir.Stmt)
_BACKPROP: ir.Rules[Callable[..., None]] = ir.Rules("adjoint", ir.Expr)

#: what a gradient is kept for: a primal Var, or a lane plane or param
Key = ir.Var | ir.Plane


class GradientNamer(Namer):
    """:class:`~hawk._passes.Namer` that also names gradients: ``<base>_bar.d<k>``."""

    def gradient(self, key: Key, varying: bool) -> ir.Var:
        """A new variable for the gradient of ``key``."""
        base = base_name(key) if isinstance(key, ir.Var) else key.name
        return self.var(base + BAR, Type.REAL, varying)


class _Symbol:
    """An IR expression as a derivative rule of :mod:`hawk._registry` writes it:
    arithmetic and comparisons build IR (folding two constants), ``select``
    and ``call`` build a select and a function call."""

    def __init__(self, expr: ir.Expr) -> None:
        self.expr = expr

    def _binary(self, op: str, left: object, right: object) -> _Symbol:
        return _Symbol(fold(ir.Binary(op, _lift(left), _lift(right))))

    def __add__(self, other: object) -> _Symbol:
        return self._binary("+", self, other)

    def __radd__(self, other: object) -> _Symbol:
        return self._binary("+", other, self)

    def __sub__(self, other: object) -> _Symbol:
        return self._binary("-", self, other)

    def __rsub__(self, other: object) -> _Symbol:
        return self._binary("-", other, self)

    def __mul__(self, other: object) -> _Symbol:
        return self._binary("*", self, other)

    def __rmul__(self, other: object) -> _Symbol:
        return self._binary("*", other, self)

    def __truediv__(self, other: object) -> _Symbol:
        return self._binary("/", self, other)

    def __floordiv__(self, other: object) -> _Symbol:
        return self._binary("//", self, other)

    def __neg__(self) -> _Symbol:
        return _Symbol(ir.Unary("-", self.expr))

    def __lt__(self, other: object) -> _Symbol:
        return _Symbol(ir.Compare("<", self.expr, _lift(other)))

    def __gt__(self, other: object) -> _Symbol:
        return _Symbol(ir.Compare(">", self.expr, _lift(other)))

    def __le__(self, other: object) -> _Symbol:
        return _Symbol(ir.Compare("<=", self.expr, _lift(other)))

    def __ge__(self, other: object) -> _Symbol:
        return _Symbol(ir.Compare(">=", self.expr, _lift(other)))

    def select(self, if_true: object, if_false: object) -> _Symbol:
        return _Symbol(ir.Select(self.expr, _lift(if_true), _lift(if_false)))

    def call(self, name: str, *others: object) -> _Symbol:
        return _Symbol(ir.Call(name, (self.expr, *(_lift(o) for o in others))))


def _lift(value: object) -> ir.Expr:
    if isinstance(value, _Symbol):
        return value.expr
    if isinstance(value, float):
        return ir.Const(value)
    raise HawkTypeError(f"a derivative rule combines its values and floats, not {value!r}")


def _given(value: ir.Expr) -> Callable[[], ir.Expr]:
    """A contribution for :meth:`Adjoint.give` that is already built."""
    return lambda: value


@dataclass(frozen=True)
class _ReverseLoop:
    """A reverse loop and the gradients it leaves: of the active carried values'
    initial values, and of the outer values its body reads."""

    loop: ir.Loop
    initial: dict[ir.Var, ir.Var]
    outer: dict[Key, ir.Var]
    needs: tuple[str, ...] = ()  # the carried values each reverse iteration reruns to


@dataclass(frozen=True)
class _LoopKinds:
    """Whether each gradient a reverse loop carries varies by lane: those of the
    active carried values, and those of the outer values its body reads."""

    carried: dict[ir.Var, bool]
    outer: dict[Key, bool]


class Adjoint(ir.Builder):
    """Emits the adjoint body: :meth:`forward` reruns primal statements (fresh
    variables, no stores or adds), :meth:`reverse` sweeps them backwards.

    ``env`` maps each primal variable in scope to its recomputed value;
    ``grads`` maps each primal variable (or lane plane / param) to the
    gradient accumulated for it so far.
    """

    def __init__(
        self,
        name: str,
        namer: GradientNamer,
        analysis: Activity,
        loads: dict[ir.Plane, ir.Plane],
        cotangent: dict[ir.Plane, ir.Plane],
        gradient: dict[ir.Plane, ir.Plane],
    ) -> None:
        super().__init__()
        self.name = name
        self.namer = namer
        self.analysis = analysis
        self.loads = loads
        self.cotangent = cotangent
        self.gradient = gradient
        # each loop whose reverse sweep reruns it, with the carried values it reruns to
        self.reruns: list[tuple[ir.Loop, tuple[str, ...]]] = []

    def let(self, base: str, value: ir.Expr) -> ir.Expr:
        if is_atom(value):
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
        return ir.map_children(node, lambda child: self.value(child, env))

    # -- forward -------------------------------------------------------------------------

    def forward(self, stmts: Iterable[ir.Stmt], env: dict[ir.Var, ir.Expr]) -> None:
        for stmt in stmts:
            _FORWARD(stmt)(self, stmt, env)

    @_FORWARD.rule(ir.Let)
    def forward_let(self, stmt: ir.Let, env: dict[ir.Var, ir.Expr]) -> None:
        var = self.namer.like(stmt.var)
        self.emit(ir.Let(var, self.value(stmt.value, env)))
        env[stmt.var] = ir.Ref(var)

    @_FORWARD.rule(ir.Loop)
    def forward_loop(self, stmt: ir.Loop, env: dict[ir.Var, ir.Expr]) -> None:
        index = self.namer.like(stmt.index)
        carries = {c.var: self.namer.like(c.var) for c in stmt.carries}
        inits = [self.value(c.init, env) for c in stmt.carries]
        inner = {**env, stmt.index: ir.Ref(index)}
        inner.update({old: ir.Ref(new) for old, new in carries.items()})
        with self.nested() as body:
            self.forward(stmt.body, inner)
        new_carries = tuple(
            ir.Carry(carries[c.var], init, self.value(c.update, inner))
            for c, init in zip(stmt.carries, inits, strict=True)
        )
        self.emit(ir.Loop(index, stmt.start, stmt.stop, stmt.step, new_carries, tuple(body)))
        env.update({old: ir.Ref(new) for old, new in carries.items()})

    @_FORWARD.rule(ir.If)
    def forward_if(self, stmt: ir.If, env: dict[ir.Var, ir.Expr]) -> None:
        cond = self.value(stmt.cond, env)
        then_env, else_env = dict(env), dict(env)
        with self.nested() as then:
            self.forward(stmt.then, then_env)
        with self.nested() as orelse:
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
        env.update({m.var: ir.Ref(new.var) for m, new in zip(stmt.merges, merges, strict=True)})

    @_FORWARD.rule(ir.Store, ir.Accumulate)
    def forward_effect(self, stmt: ir.Store | ir.Accumulate, env: dict[ir.Var, ir.Expr]) -> None:
        """The rerun makes no stores or adds (the reverse sweep reads their values)."""

    # -- reverse -------------------------------------------------------------------------

    def reverse(
        self, stmts: tuple[ir.Stmt, ...], env: dict[ir.Var, ir.Expr], grads: dict[Key, ir.Expr]
    ) -> None:
        for stmt in reversed(stmts):
            _REVERSE(stmt)(self, stmt, env, grads)

    @_REVERSE.rule(ir.Let)
    def reverse_let(
        self, stmt: ir.Let, env: dict[ir.Var, ir.Expr], grads: dict[Key, ir.Expr]
    ) -> None:
        bar = grads.pop(stmt.var, None)
        if bar is not None:
            self.backprop(stmt.value, bar, env, grads, result=env[stmt.var])

    @_REVERSE.rule(ir.Store)
    def reverse_store(
        self, stmt: ir.Store, env: dict[ir.Var, ir.Expr], grads: dict[Key, ir.Expr]
    ) -> None:
        bar = self.cotangent.get(stmt.plane)
        if bar is not None:  # (none: a zero cotangent, whose partials are never formed)
            self.backprop(stmt.value, ir.Load(bar), env, grads)

    @_REVERSE.rule(ir.Accumulate)
    def reverse_accumulate(
        self, stmt: ir.Accumulate, env: dict[ir.Var, ir.Expr], grads: dict[Key, ir.Expr]
    ) -> None:
        if stmt.plane in self.cotangent and self.analysis.is_active(stmt.value):
            self.check_address(stmt.plane, stmt.index, "add")
            index = tuple(self.value(i, env) for i in stmt.index)
            read = ir.Read(self.cotangent[stmt.plane], index)
            bar = self.let(stmt.plane.name + BAR, read)
            self.backprop(stmt.value, bar, env, grads)

    def add(self, key: Key, contribution: ir.Expr, grads: dict[Key, ir.Expr]) -> None:
        old = grads.get(key)
        if old is None and is_atom(contribution):
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
        grads: dict[Key, ir.Expr],
    ) -> None:
        """Add ``contribution()`` to the gradient of ``atom`` when it carries one."""
        if isinstance(atom, ir.Ref) and atom.var in self.analysis.active:
            self.add(atom.var, contribution(), grads)
        elif isinstance(atom, ir.Load) and atom.plane in self.gradient:
            self.add(atom.plane, contribution(), grads)

    def check_address(self, plane: ir.Plane, index: tuple[ir.Expr, ...], method: str) -> None:
        step = self.analysis.step_in(index)
        if step is None:
            return
        planes = sorted(set().union(*(self.analysis.planes_of(c) for c in step.children())))
        raise HawkError(
            f"kernel {self.name!r}: cannot differentiate {plane.name}.{method}(...) with respect "
            f"to {', '.join(planes)}: its address uses {step}, a step in that data, so it has no "
            "derivative through the address; take the gradient with respect to other planes "
            "(vjp(kernel, wrt=...)), read two neighbouring elements and interpolate, or make "
            "the address with hawk.math.floor, which declares it piecewise constant"
        )

    def backprop(
        self,
        node: ir.Expr,
        bar: ir.Expr,
        env: dict[ir.Var, ir.Expr],
        grads: dict[Key, ir.Expr],
        result: ir.Expr | None = None,
    ) -> None:
        """Send ``bar``, the gradient of ``node``'s value, to its operands (``result``:
        ``node``'s recomputed value, for an operation whose derivative reads it)."""
        rule = _BACKPROP(node)
        if node.type == Type.REAL:  # an int or a bool has no gradient
            rule(self, node, bar, env, grads, result)

    @_BACKPROP.rule(ir.Ref, ir.Load)
    def backprop_value(
        self,
        node: ir.Ref | ir.Load,
        bar: ir.Expr,
        env: dict[ir.Var, ir.Expr],
        grads: dict[Key, ir.Expr],
        result: ir.Expr | None,
    ) -> None:
        self.give(node, lambda: bar, grads)

    @_BACKPROP.rule(ir.Const, ir.Lane)
    def backprop_constant(
        self,
        node: ir.Const | ir.Lane,
        bar: ir.Expr,
        env: dict[ir.Var, ir.Expr],
        grads: dict[Key, ir.Expr],
        result: ir.Expr | None,
    ) -> None:
        """A constant (or the lane index) has no gradient."""

    @_BACKPROP.rule(ir.Read)
    def backprop_read(
        self,
        node: ir.Read,
        bar: ir.Expr,
        env: dict[ir.Var, ir.Expr],
        grads: dict[Key, ir.Expr],
        result: ir.Expr | None,
    ) -> None:
        self.check_address(node.plane, node.index, "at")
        if node.plane in self.gradient:
            index = tuple(self.value(i, env) for i in node.index)
            self.emit(ir.Accumulate(self.gradient[node.plane], index, bar))

    @_BACKPROP.rule(*ir.OPERATIONS)
    def backprop_operation(
        self,
        node: ir.Operation,
        bar: ir.Expr,
        env: dict[ir.Var, ir.Expr],
        grads: dict[Key, ir.Expr],
        result: ir.Expr | None,
    ) -> None:
        """The derivative rule of the operation's registry entry (none: no gradient)."""
        rule = node.builtin.derivative
        if rule is None:
            return
        assert result is not None, f"{node}: the flattened body binds every operation"
        args = [_Symbol(self.value(a, env)) for a in node.children()]
        contributions = rule(_Symbol(bar), _Symbol(result), *args)
        for arg, contribution in zip(node.children(), contributions, strict=True):
            if contribution is not None:
                self.give(arg, _given(contribution.expr), grads)

    # -- branches ------------------------------------------------------------------------

    @_REVERSE.rule(ir.If)
    def reverse_if(
        self, stmt: ir.If, env: dict[ir.Var, ir.Expr], grads: dict[Key, ir.Expr]
    ) -> None:
        bars = {m.var: grads.pop(m.var) for m in stmt.merges if m.var in grads}
        cond = self.value(stmt.cond, env)
        sides = []
        for block, pick in ((stmt.then, "then_value"), (stmt.orelse, "else_value")):
            side_env, side_grads = dict(env), dict(grads)
            with self.nested() as stmts:
                self.forward(block, side_env)
                for merge in stmt.merges:
                    if merge.var in bars:
                        self.give(getattr(merge, pick), _given(bars[merge.var]), side_grads)
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

    @_REVERSE.rule(ir.Loop)
    def reverse_loop(
        self, stmt: ir.Loop, env: dict[ir.Var, ir.Expr], grads: dict[Key, ir.Expr]
    ) -> None:
        active = [  # (a carry that reaches no store or add has no gradient: not swept)
            c
            for c in stmt.carries
            if c.var in self.analysis.active and c.var in self.analysis.useful
        ]
        bars = {c.var: grads.pop(c.var, _ZERO) for c in active}
        kinds = _LoopKinds({c.var: bars[c.var].varying for c in active}, {})
        while True:  # until the gradients it carries, and which of them vary, are known
            attempt = self.reverse_loop_once(stmt, env, grads, active, bars, kinds)
            if isinstance(attempt, _ReverseLoop):
                break
            kinds = attempt
        self.emit(attempt.loop)
        if attempt.needs:
            self.reruns.append((stmt, attempt.needs))
        grads.update({key: ir.Ref(var) for key, var in attempt.outer.items()})
        for carry in active:
            self.give(carry.init, _given(ir.Ref(attempt.initial[carry.var])), grads)

    def reverse_loop_once(
        self,
        stmt: ir.Loop,
        env: dict[ir.Var, ir.Expr],
        grads: dict[Key, ir.Expr],
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
        inner_grads: dict[Key, ir.Expr] = {key: ir.Ref(var) for key, var in outer.items()}
        with self.nested() as body:
            self.forward(stmt.body, inner_env)
            for carry in active:
                self.give(carry.update, _given(ir.Ref(carried[carry.var])), inner_grads)
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
        roots = set().union(*(refs(c.update) for c in carries))
        live = set(roots)
        pruned = prune(body, live)
        needs = tuple(base_name(old) for old, new in entry.items() if new in live)
        if needs:  # the gradient needs carried values
            with self.nested() as rerun:
                self.rerun_to(stmt, env, index, entry)
            pruned = prune((*rerun, *body), set(roots))
        last = stmt.start + (stmt.trip_count - 1) * stmt.step
        loop = ir.Loop(index, last, stmt.start - stmt.step, -stmt.step, tuple(carries), pruned)
        return _ReverseLoop(loop, carried, outer, needs)

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
        with self.nested() as then:
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
