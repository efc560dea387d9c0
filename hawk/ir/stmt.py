"""IR statements (:class:`Stmt` nodes), a whole kernel (:class:`KernelIR`), and :func:`walk`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from hawk.errors import HawkError, HawkKeyError
from hawk.ir.expr import TEXT_FORMS, Expr, Var, _check_index
from hawk.ir.planes import Plane
from hawk.kinds import PlaneKind, Type

__all__ = [
    "STATEMENTS",
    "Accumulate",
    "Carry",
    "Debug",
    "If",
    "KernelIR",
    "Let",
    "Loop",
    "Merge",
    "Stmt",
    "Store",
    "walk",
    "without_debug",
]


class Stmt:
    """Base of statement nodes."""

    def children(self) -> tuple[Expr | Stmt, ...]:
        """Sub-expressions and nested statements, in program order."""
        return ()

    def __str__(self) -> str:
        return TEXT_FORMS[Stmt](self)


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
        if self.index.type != Type.INT or self.index.varying:
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
        if self.cond.type != Type.BOOL:
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
        if self.plane.kind != PlaneKind.OUTPUT:
            raise HawkError(f"Store writes a Mutable[Scalar], not {self.plane.declaration()}")
        if self.value.type != Type.REAL:
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
        if self.plane.kind != PlaneKind.ACCUMULATOR:
            raise HawkError(f"only a Mutable[Table] is added to, not {self.plane.declaration()}")
        _check_index(self.plane, self.index)
        if self.value.type != Type.REAL:
            raise HawkError(f"{self.plane.name}.add needs a real value, not {self.value}")

    def children(self) -> tuple[Expr | Stmt, ...]:
        return (*self.index, self.value)


@dataclass(frozen=True)
class Debug(Stmt):
    """A debugging call (``hm.debug_print``, ``hm.breakpoint``): an entry of
    :data:`hawk._registry.DEBUG_CALLS`, run per lane by the reference interpreter alone.

    Only a kernel's ``debug_ir`` holds it: its ``ir``, which every pass and emitter
    reads, leaves it out (:func:`without_debug`), so it is compiled out everywhere else.
    That is why it is not one of :data:`STATEMENTS`.

    Attributes:
        call: the entry's name.
        items: its arguments: a text, or a value to show.
        names: the kernel's names in scope at the call, and their values.
    """

    call: str
    items: tuple[str | Expr, ...]
    names: tuple[tuple[str, Expr], ...]

    def children(self) -> tuple[Expr | Stmt, ...]:
        return tuple(item for item in self.items if isinstance(item, Expr))


def without_debug(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """``body`` with every :class:`Debug` left out, in nested blocks too."""
    kept: list[Stmt] = []
    for stmt in body:
        if isinstance(stmt, Debug):
            continue
        if isinstance(stmt, Loop):
            stmt = replace(stmt, body=without_debug(stmt.body))
        elif isinstance(stmt, If):
            stmt = replace(stmt, then=without_debug(stmt.then), orelse=without_debug(stmt.orelse))
        kept.append(stmt)
    return tuple(kept)


#: every statement class a block holds: each pass and emitter has a rule for each
#: (:mod:`hawk.ir.rules`); a :class:`Carry` and a :class:`Merge` are parts of theirs
STATEMENTS: tuple[type[Stmt], ...] = (Let, Loop, If, Store, Accumulate)


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
        raise HawkKeyError(f"kernel {self.name!r} has no plane {name!r}")

    def loops(self) -> bool:
        """True when a lane runs a :class:`Loop` of its own, anywhere in the kernel."""
        return any(isinstance(node, Loop) for node in walk(self))

    def lets(self) -> dict[Var, Expr]:
        """The value of every variable a :class:`Let` binds, anywhere in the kernel."""
        return {node.var: node.value for node in walk(self) if isinstance(node, Let)}

    def __str__(self) -> str:
        return TEXT_FORMS[KernelIR](self)


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
