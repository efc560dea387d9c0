"""Random hawk kernels from the language's grammar, for the differential tests.

:func:`kernels` is a hypothesis strategy of :class:`GeneratedKernel`: Python
source for one module holding a ``@hawk.kernel`` function ``kernel`` and a
plain function ``per_lane`` with the same body followed by ``return`` of the
outputs. The grammar covers, in typed and bounded form:

* real arithmetic ``+ - * /`` (a divisor is a nonzero constant or a positive
  expression such as ``0.5 + e*e``), real ``//`` and ``%`` by a nonzero
  constant, unary minus, int/real mixing;
* int arithmetic ``+ - *``, ``//`` and ``%`` by a nonzero divisor of either
  sign (constant or ``abs(e) + 1``), ``int()`` of reals of either sign,
  products, ``int ** int`` powers and negations that leave int64 (hawk wraps them, two's
  complement), reduced modulo a power of two, which any multiple of 2**64 leaves alone,
  and comparisons with the least int64 written as a constant,
  ``float()``, ``hm.sample_index()`` and ``hm.split_index(n)``;
* every ``hawk.math`` function with its argument in its domain (``log`` and
  ``sqrt`` of ``c + e*e`` or ``c + abs(e)``, ``pow``/``**`` of a positive base);
* comparisons (chains too), ``and``/``or``/``not``, conditional expressions,
  ``if``/``elif``/``else`` statements (uniform and varying conditions);
* ``for i in range(...)`` with constant bounds and a step of either sign,
  zero-trip loops, nested loops, one or more carries (locals and outputs);
* params, several scalar inputs, one or two ``Mutable[Scalar]`` outputs that
  may be read before they are written, ``+=``-style updates and tuple
  assignments;
* flat tables read with ``t.at(i)`` and named tables read with every axis by
  keyword in a random order, always at an index inside the table: a clamped
  ``int(...)``, an ``i % extent`` (floor modulo keeps it in range) or a clamped
  int expression;
* zero to two accumulators, ``Mutable[Table]`` planes (flat of any length, or named
  ``"bin"`` with a second axis now and then) that start from random values, added into
  with ``h.add(bin=..., value=...)`` (flat: ``h.add(i, value=...)``) at any depth: at
  top level, in loops, in branches, and in loops without carries that only bind values
  and add (the host runs those a chunk of iterations at a time). The value is a bounded
  real (or int) expression; the index is one of the read indices above,
  ``(hm.sample_index() + e) % extent``, or exactly ``s`` or ``u`` of ``split_index``
  or ``hm.sample_index() // U`` or ``% U``, clamped (``minimum`` or ``%``) only where
  it could leave the range: an address shared by runs or strides of lanes, which the
  host sums per group before adding (for such kernels, lane counts of 32 or 64 and
  ``U`` of 16 or 32 now and then, where that summing applies).

Each kernel also draws a storage dtype per plane (:attr:`GeneratedKernel.storage`): all
float64 half of the time, else a mix of float32, float16 and bfloat16, float64 now and
then (the kernel computes in float64 when any plane is float64, else in float32; 16-bit
planes are read as float32 and rounded at each store and add).

Every real expression carries a bound on its magnitude; one that could grow
past :data:`REAL_LIMIT` is wrapped in ``hm.tanh`` or a ``minimum``/``maximum``
clamp, so no value overflows and carries keep a loop-invariant bound.

:func:`evaluate_per_lane` runs ``per_lane`` once per lane with Python and
numpy scalars, a per-lane stand-in for ``hawk.math``, table objects whose
``.at`` indexes numpy arrays and accumulator objects whose ``.add`` adds into a
float64 copy of the plane, recording what each lane added where; it is the
reference of the host program (:class:`LaneRun`).
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import importlib.util
import math
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

import eagle.plan
from hawk.dtypes import numpy_dtype

#: a real expression whose bound passes this is wrapped (tanh or a clamp)
REAL_LIMIT = 64.0
#: an int expression whose bound passes this is wrapped (clamp or modulo)
INT_LIMIT = 1000
#: the bound of the values in input planes, params and tables
INPUT_BOUND = 3.0

_AXIS_LABELS = ("row", "col", "bin", "unit")
_REAL_CONSTANTS = (0.5, 1.0, 2.0, 3.0, -1.0, -2.5, 0.25, 1.5, -0.75, 0.1)
_POSITIVE = (0.5, 1.0, 2.0)
_CLAMPS = (1.0, 4.0, 8.0, 16.0)
#: lane counts, now and then, of a kernel with accumulators, and the split_index sizes
#: they allow: the host sums runs of 16 or more lanes, and strides of 32 or more,
#: before adding them (``_add_groups`` of ``hawk/emit/_host_runtime.py``)
_WIDE_LANES = (32, 64)
_WIDE_SPLITS = (16, 32)
#: factors that take a product of ints past int64 (the first is 2**62), exponents that
#: take a power of 2..8 past it, and the powers of two the wrapped value is reduced by
_WRAPPING = (2**62, 3_037_000_507, -(2**61) - 5, 9_007_199_254_740_993)
_EXPONENTS = (0, 5, 31, 63, 64, 70)
_MODULI = (2, 16, 64, 512)
#: the storage dtypes a plane of a mixed kernel draws from (float64 once in a while)
_MIXED = ("float32", "float16", "bfloat16", "float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class PlaneSpec:
    """One plane of a generated kernel.

    Attributes:
        name: the parameter's name.
        kind: ``"table"``, ``"accumulator"`` (Mutable[Table]), ``"param"``,
            ``"input"`` (Scalar) or ``"output"`` (Mutable[Scalar]).
        shape: a table's or accumulator's shape (``()`` for the other kinds).
        axes: a named table's axis labels; None for a flat table and the rest.
    """

    name: str
    kind: str
    shape: tuple[int, ...] = ()
    axes: tuple[str, ...] | None = None

    def annotation(self) -> str:
        """The parameter's annotation in kernel source."""
        if self.kind == "param":
            return "hawk.Param"
        if self.kind == "input":
            return "hawk.Scalar"
        if self.kind == "output":
            return "hawk.Mutable[hawk.Scalar]"
        table = "hawk.Table"
        if self.axes is not None:
            axes = ", ".join(f'"{a}":{n}' for a, n in zip(self.axes, self.shape, strict=True))
            table = f"hawk.Table[{axes}]"
        return f"hawk.Mutable[{table}]" if self.kind == "accumulator" else table


@dataclass(frozen=True)
class GeneratedKernel:
    """A generated kernel and what it needs to run.

    Attributes:
        source: the module text (``kernel`` and ``per_lane``).
        planes: the planes in declaration order.
        lanes: the lane count to run it over.
        seed: the seed of its input data.
        storage: a storage dtype name per plane, in plane order
            (:meth:`make_planes` without a dtype).
    """

    source: str
    planes: tuple[PlaneSpec, ...]
    lanes: int
    seed: int
    storage: tuple[str, ...] = ()

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.planes if p.kind == "output")

    @property
    def accumulators(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.planes if p.kind == "accumulator")

    @property
    def mixed(self) -> bool:
        """True when its planes' storage dtypes are not all float64."""
        return any(dtype != "float64" for dtype in self.storage)

    def make_planes(self, dtype: Any = None) -> dict[str, np.ndarray]:
        """Fresh arrays for every plane (outputs hold their initial values),
        uniform in ``[-INPUT_BOUND, INPUT_BOUND]`` from this kernel's seed, of ``dtype``
        (None: each plane's :attr:`storage` dtype)."""
        rng = np.random.default_rng(self.seed)
        dtypes = [dtype] * len(self.planes) if dtype is not None else self.storage
        planes = {}
        for plane, plane_dtype in zip(self.planes, dtypes, strict=True):
            shape = {"table": plane.shape, "accumulator": plane.shape, "param": (1,)}.get(
                plane.kind, (self.lanes,)
            )
            values = rng.uniform(-INPUT_BOUND, INPUT_BOUND, shape)
            planes[plane.name] = values.astype(numpy_dtype(plane_dtype))
        return planes


# -- the grammar -----------------------------------------------------------------------


_BOOLEANS = st.booleans()


@functools.cache
def _below(n: int) -> st.SearchStrategy[int]:
    """Strategies are cheap to draw from but not to build: one per range, reused."""
    return st.integers(0, n - 1)


@dataclass
class _Var:
    type: str  # "real" or "int"
    bound: float  # |value| <= bound
    cap: float | None = None  # a carry's loop-invariant bound: assignments are clamped to it


@dataclass
class _Scope:
    env: dict[str, _Var]
    assignable: set[str]
    loops: int = 0
    ifs: int = 0
    lines: list[str] = field(default_factory=list)


class _Builder:
    """Draws one kernel body, tracking each name's type and bound."""

    def __init__(
        self,
        draw: Callable[[st.SearchStrategy[Any]], Any],
        planes: tuple[PlaneSpec, ...],
        lanes: int,
    ) -> None:
        self.draw = draw
        self.lanes = lanes
        self.tables = [p for p in planes if p.kind == "table"]
        self.accumulators = [p for p in planes if p.kind == "accumulator"]
        self.added: set[str] = set()  # the accumulators added into so far
        self.splits: list[tuple[str, int]] = []  # split_index's names and their bounds
        self.counter = 0
        env = {}
        for plane in planes:
            if plane.kind in ("param", "input", "output"):
                env[plane.name] = _Var("real", INPUT_BOUND)
        outputs = {p.name for p in planes if p.kind == "output"}
        self.outputs = sorted(outputs)
        self.scope = _Scope(env, set(outputs))

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def choice(self, options: list[Any]) -> Any:
        return options[self.integer(0, len(options) - 1)]

    def integer(self, low: int, high: int) -> int:
        return low + self.draw(_below(high - low + 1))

    def flip(self) -> bool:
        return self.draw(_BOOLEANS)

    def emit(self, depth: int, text: str) -> None:
        self.scope.lines.append("    " * depth + text)

    # -- bodies --------------------------------------------------------------------------

    def body(self) -> list[str]:
        if self.flip():
            wide = self.lanes >= _WIDE_LANES[0]
            n = self.choice(list(_WIDE_SPLITS)) if wide else self.integer(1, 5)
            s, u = self.fresh("s"), self.fresh("u")
            self.emit(1, f"{s}, {u} = hm.split_index({n})")
            self.scope.env[s] = _Var("int", (self.lanes - 1) // n)
            self.scope.env[u] = _Var("int", n - 1)
            self.splits = [(s, (self.lanes - 1) // n), (u, n - 1)]
        self.statements(1, self.integer(1, 5))
        for name in self.outputs:  # hawk refuses an output that is never assigned
            self.assign_to(1, name)
        for plane in self.accumulators:
            if plane.name not in self.added:
                self.add(1, plane)
        return self.scope.lines

    def statements(self, depth: int, count: int) -> None:
        for _ in range(count):
            self.statement(depth)

    def statement(self, depth: int) -> None:
        kinds = ["let", "let", "assign", "tuple"]
        if self.scope.loops < 2:
            kinds += ["loop", "loop"]
        if self.scope.ifs < 2:
            kinds += ["if", "if"]
        if self.accumulators:
            kinds += ["add", "add"] + (["scatter", "scatter"] if self.scope.loops < 2 else [])
        kind = self.choice(kinds)
        if kind == "let":
            name = self.fresh("v")
            text, var = self.value(self.choice(["real", "int"]), 3)
            self.emit(depth, f"{name} = {text}")
            self.bind(name, var)
        elif kind == "assign":
            targets = sorted(self.scope.assignable)
            if targets:
                self.assign_to(depth, self.choice(targets))
        elif kind == "tuple":
            self.tuple_assign(depth)
        elif kind == "loop":
            self.loop(depth)
        elif kind == "add":
            self.add(depth, self.choice(self.accumulators))
        elif kind == "scatter":
            self.scatter(depth)
        else:
            self.branch(depth)

    def bind(self, name: str, var: _Var) -> None:
        self.scope.env[name] = var
        self.scope.assignable.add(name)

    def value(self, type_: str, depth: int) -> tuple[str, _Var]:
        if type_ == "int":
            text, bound = self.int_expr(depth)
        else:
            text, bound = self.real_expr(depth)
        return text, _Var(type_, bound)

    def assign_to(self, depth: int, name: str) -> None:
        """``name = ...`` or ``name op= ...``, keeping its type (and a carry's cap)."""
        var = self.scope.env[name]
        augmented = self.flip()
        if var.type == "int":
            text, bound = self.int_expr(3)
        else:
            text, bound = self.real_expr(3) if self.integer(0, 3) else self.int_expr(2)
        limit = var.cap if var.cap is not None else (INT_LIMIT if var.type == "int" else REAL_LIMIT)
        if augmented and var.bound + bound <= limit:
            op = self.choice(["+=", "-="])
            self.emit(depth, f"{name} {op} {text}")
            new = var.bound + bound
        else:
            how = self.integer(0, 2)
            if how == 1:  # read-modify-write
                text, bound = f"({name} + {text})", var.bound + bound
            elif how == 2 and var.type == "real":  # a contracting update
                text, bound = f"({name} * 0.5 + {text})", var.bound * 0.5 + bound
            if bound > limit:
                text, bound = self.clamp(text, var.type, limit)
            self.emit(depth, f"{name} = {text}")
            new = bound
        self.scope.env[name] = replace(var, bound=var.cap if var.cap is not None else new)

    def add(self, depth: int, plane: PlaneSpec) -> None:
        """``h.add(bin=..., value=...)`` (flat: ``h.add(i, value=...)``) at an index
        inside the accumulator, of a bounded real (or now and then int) value."""
        if not self.scope.ifs:  # a branch may be dropped (a constant condition)
            self.added.add(plane.name)
        value, _ = self.real_expr(self.integer(0, 2)) if self.integer(0, 3) else self.int_expr(1)
        if plane.axes is None:
            address = self.add_index(plane.shape[0])
        else:
            order = self.draw(st.permutations(list(zip(plane.axes, plane.shape, strict=True))))
            address = ", ".join(f"{label}={self.add_index(extent)}" for label, extent in order)
        self.emit(depth, f"{plane.name}.add({address}, value={value})")

    def add_index(self, extent: int) -> str:
        """An index inside ``[0, extent)``: one of :meth:`index`, one that moves with the
        lane (``(hm.sample_index() + e) % extent``), or one that depends on the lane only
        through ``lane // U`` or ``lane % U`` (``s`` or ``u`` of ``split_index``,
        ``hm.sample_index() // U`` or ``% U``; the host adds those by groups of lanes),
        clamped only where it could leave the range."""
        kind = self.integer(0, 3)
        if kind == 0:
            return self.index(extent)
        if kind == 1:
            return f"((hm.sample_index() + {self.int_expr(1)[0]}) % {extent})"
        d = self.choice(list(_WIDE_SPLITS) if self.lanes >= _WIDE_LANES[0] else [2, 3, 4])
        lanes = [
            (f"hm.sample_index() // {d}", (self.lanes - 1) // d),
            (f"hm.sample_index() % {d}", d - 1),
        ]
        text, bound = self.choice(self.splits + self.splits + lanes)
        if bound < extent:
            return text
        if self.flip():
            return f"hm.minimum({text}, {extent - 1})"
        return f"({text} % {extent})"

    def tuple_assign(self, depth: int) -> None:
        a, b = self.fresh("v"), self.fresh("v")
        text_a, var_a = self.value(self.choice(["real", "int"]), 2)
        text_b, var_b = self.value(self.choice(["real", "int"]), 2)
        self.emit(depth, f"{a}, {b} = {text_a}, {text_b}")
        self.bind(a, var_a)
        self.bind(b, var_b)

    def clamp(self, text: str, type_: str, limit: float) -> tuple[str, float]:
        if type_ == "int":
            k = int(limit)
            if self.flip():
                return f"hm.minimum(hm.maximum({text}, {-k}), {k})", k
            return f"({text} % {k})", k
        return f"hm.minimum(hm.maximum({text}, {-limit!r}), {limit!r})", limit

    def loop_range(self) -> tuple[str, int]:
        """The arguments of a ``range`` with a step of either sign, and a bound on the
        magnitude of its index."""
        step = self.choice(["1", "1", "2", "-1", "-2", "3"])
        step_n = int(step)
        trips = self.integer(0, 5)
        start = self.integer(-3, 3) if step_n > 0 else self.integer(0, 6)
        short = self.integer(0, abs(step_n) - 1) if abs(step_n) > 1 else 0  # a partial last step
        stop = start + step_n * trips - (short if step_n > 0 else -short)
        if step_n == 1 and start == 0:
            bounds = f"{stop}"
        elif step_n == 1:
            bounds = f"{start}, {stop}"
        else:
            bounds = f"{start}, {stop}, {step}"
        return bounds, max(abs(start), abs(stop))

    def scatter(self, depth: int) -> None:
        """A loop without carries that only binds values and adds into accumulators (the
        host runs such a loop a chunk of iterations at a time)."""
        bounds, bound = self.loop_range()
        index = self.fresh("i")
        self.emit(depth, f"for {index} in range({bounds}):")
        outer = self.scope
        env = dict(outer.env)
        env[index] = _Var("int", bound)
        self.scope = _Scope(env, set(), outer.loops + 1, outer.ifs, outer.lines)
        for _ in range(self.integer(0, 1)):
            name = self.fresh("v")
            text, var = self.value(self.choice(["real", "int"]), 2)
            self.emit(depth + 1, f"{name} = {text}")
            self.scope.env[name] = var
        for _ in range(self.integer(1, 2)):
            self.add(depth + 1, self.choice(self.accumulators))
        self.scope = outer

    def loop(self, depth: int) -> None:
        bounds, bound = self.loop_range()
        # carries: a new accumulator, or variables assigned before the loop
        outer = self.scope
        candidates = sorted(outer.assignable)
        carries = (
            set(self.draw(st.lists(st.sampled_from(candidates), max_size=3, unique=True)))
            if candidates
            else set()
        )
        if not carries or self.flip():
            name = self.fresh("acc")
            type_ = self.choice(["real", "real", "int"])
            text, var = self.value(type_, 1)
            self.emit(depth, f"{name} = {text}")
            self.bind(name, var)
            carries.add(name)
        index = self.fresh("i")
        self.emit(depth, f"for {index} in range({bounds}):")
        env = dict(outer.env)
        for name in carries:
            var = env[name]
            cap = var.cap
            if cap is None:
                cap = max(var.bound, 16.0 if var.type == "real" else 100.0)
            env[name] = _Var(var.type, cap, cap)
        env[index] = _Var("int", bound)
        inner = _Scope(env, set(carries), outer.loops + 1, outer.ifs, outer.lines)
        self.scope = inner
        self.statements(depth + 1, self.integer(0, 2))
        for name in sorted(carries):
            self.assign_to(depth + 1, name)
        self.scope = outer
        for name in carries:  # a carry keeps its cap as its bound after the loop
            outer.env[name] = _Var(env[name].type, inner.env[name].bound, outer.env[name].cap)

    def branch(self, depth: int) -> None:
        """``if``/``elif``/``else``: new targets are assigned in every branch."""
        outer = self.scope
        targets = [
            (self.fresh("b"), self.choice(["real", "int"])) for _ in range(self.integer(0, 2))
        ]
        arms = self.integer(1, 3)  # if, if/else, if/elif/else
        heads = [f"if {self.condition(2)}:"]
        if arms == 3:
            heads.append(f"elif {self.condition(2)}:")
        if arms >= 2:
            heads.append("else:")
        scopes = []
        for head in heads:
            self.emit(depth, head)
            scope = _Scope(
                dict(outer.env), set(outer.assignable), outer.loops, outer.ifs + 1, outer.lines
            )
            self.scope = scope
            self.statements(depth + 1, self.integer(0, 2))
            for name, type_ in targets:
                text, var = self.value(type_, 2)
                self.emit(depth + 1, f"{name} = {text}")
                self.scope.env[name] = var
            if outer.lines[-1] == "    " * depth + head:  # an empty branch
                self.emit(depth + 1, "pass")
            scopes.append(scope)
            self.scope = outer
        if arms == 1:
            scopes.append(_Scope(dict(outer.env), set(), 0, 0))
            targets = []  # assigned in the one branch only: unusable after the if
        for name, var in list(outer.env.items()):
            outer.env[name] = replace(var, bound=max(s.env[name].bound for s in scopes))
        for name, type_ in targets:
            self.bind(name, _Var(type_, max(s.env[name].bound for s in scopes)))

    # -- expressions -----------------------------------------------------------------------

    def names(self, type_: str) -> list[str]:
        return sorted(n for n, v in self.scope.env.items() if v.type == type_)

    def real_expr(self, depth: int) -> tuple[str, float]:
        """A real expression and a bound on its magnitude."""
        if depth <= 0:
            return self.real_leaf()
        kind = self.choice(
            [
                "leaf",
                "arith",
                "arith",
                "mixed",
                "divide",
                "fmod",
                "call",
                "domain",
                "select",
                "neg",
                "float",
            ]
        )
        if kind == "leaf":
            return self.real_leaf()
        if kind == "arith":
            (a, ba), (b, bb) = self.real_expr(depth - 1), self.real_expr(depth - 1)
            return self.limit(*self.combine(a, ba, b, bb))
        if kind == "mixed":  # an int meeting a real
            (a, ba), (b, bb) = self.real_expr(depth - 1), self.int_expr(depth - 1)
            if self.flip():
                a, ba, b, bb = b, bb, a, ba
            return self.limit(*self.combine(a, ba, b, bb))
        if kind == "divide":
            a, ba = self.real_expr(depth - 1)
            how = self.choice(["const", "square", "abs", "int"])
            if how == "const":
                c = self.choice(["0.5", "2.0", "-4.0", "3", "-0.25", "-3"])
                return self.limit(f"({a} / {c})", ba / abs(float(c)))
            c = self.choice([repr(x) for x in _POSITIVE])
            d, _ = self.real_expr(depth - 1) if how != "int" else self.int_expr(depth - 1)
            if how == "square":
                return self.limit(f"({a} / ({c} + {d} * {d}))", ba / float(c))
            return self.limit(f"({a} / ({c} + hm.abs({d})))", ba / float(c))
        if kind == "fmod":
            a, ba = self.real_expr(depth - 1)
            c = self.choice(["1.5", "-2.0", "0.75", "3", "-2"])
            if self.flip():
                return f"({a} % {c})", abs(float(c))
            return self.limit(f"({a} // {c})", ba / abs(float(c)) + 1.0)
        if kind == "call":
            fn = self.choice(["sin", "cos", "tanh", "abs", "minimum", "maximum", "exp"])
            a, ba = self.real_expr(depth - 1)
            if fn in ("sin", "cos", "tanh"):
                return f"hm.{fn}({a})", 1.0
            if fn == "abs":
                return f"hm.abs({a})", ba
            if fn == "exp":
                if ba > 4.0:
                    a, ba = self.squash(a, 4.0)
                return self.limit(f"hm.exp({a})", math.exp(ba))
            b, bb = self.real_expr(depth - 1) if self.integer(0, 2) else self.int_expr(depth - 1)
            return f"hm.{fn}({a}, {b})", max(ba, bb)
        if kind == "domain":
            return self.domain_call(depth)
        if kind == "select":
            cond = self.condition(depth - 1)
            (a, ba), (b, bb) = self.real_expr(depth - 1), self.real_expr(depth - 1)
            if self.integer(0, 3) == 0:
                b, bb = self.int_expr(depth - 1)
            return f"({a} if {cond} else {b})", max(ba, bb)
        if kind == "neg":
            a, ba = self.real_expr(depth - 1)
            return f"(-{a})", ba
        a, ba = self.int_expr(depth - 1)
        return f"float({a})", ba

    def domain_call(self, depth: int) -> tuple[str, float]:
        """log, sqrt and pow with arguments inside their domains."""
        fn = self.choice(["log", "sqrt", "pow", "pow_op"])
        a, ba = self.real_expr(depth - 1)
        c = self.choice([repr(x) for x in _POSITIVE])
        if self.flip():
            arg, top = f"({c} + {a} * {a})", float(c) + ba * ba
        else:
            arg, top = f"({c} + hm.abs({a}))", float(c) + ba
        if fn == "log":
            return f"hm.log({arg})", max(abs(math.log(float(c))), math.log(top))
        if fn == "sqrt":
            return f"hm.sqrt({arg})", math.sqrt(top)
        e, be = self.real_expr(depth - 1)
        if be > 2.0:
            e, be = self.squash(e, 2.0)
        bound = max(top**be, float(c) ** -be)
        if fn == "pow":
            return self.limit(f"hm.pow({arg}, {e})", bound)
        return self.limit(f"({arg} ** {e})", bound)

    def combine(self, a: str, ba: float, b: str, bb: float) -> tuple[str, float]:
        op = self.choice(["+", "-", "*"])
        return f"({a} {op} {b})", (ba * bb if op == "*" else ba + bb)

    def squash(self, text: str, limit: float) -> tuple[str, float]:
        """``text`` brought inside ``[-limit, limit]``."""
        if self.flip():
            return f"(hm.tanh({text}) * {limit!r})", limit
        return f"hm.minimum(hm.maximum({text}, {-limit!r}), {limit!r})", limit

    def limit(self, text: str, bound: float) -> tuple[str, float]:
        if bound <= REAL_LIMIT:
            return text, bound
        if self.flip():
            return f"hm.tanh({text})", 1.0
        return self.squash(text, self.choice(list(_CLAMPS)))

    def real_leaf(self) -> tuple[str, float]:
        kinds = ["name", "name", "const"]
        if self.tables:
            kinds.append("table")
        kind = self.choice(kinds)
        names = self.names("real")
        if kind == "name" and names:
            name = self.choice(names)
            return name, self.scope.env[name].bound
        if kind == "table":
            return self.table_read(), INPUT_BOUND
        c = self.choice(list(_REAL_CONSTANTS))
        return (repr(c) if c >= 0 else f"({c!r})"), abs(c)

    def table_read(self) -> str:
        table = self.choice([t.name for t in self.tables])
        plane = next(t for t in self.tables if t.name == table)
        if plane.axes is None:
            return f"{table}.at({self.index(plane.shape[0])})"
        order = self.draw(st.permutations(list(zip(plane.axes, plane.shape, strict=True))))
        items = ", ".join(f"{label}={self.index(extent)}" for label, extent in order)
        return f"{table}.at({items})"

    def index(self, extent: int) -> str:
        """An int expression inside ``[0, extent)``."""
        kind = self.choice(["const", "real", "mod", "clamp", "abs"])
        if kind == "const":
            return str(self.integer(0, extent - 1))
        if kind == "real":
            a, _ = self.real_expr(1)
            return f"int(hm.minimum(hm.maximum({a}, 0.0), {float(extent - 1)!r}))"
        a, _ = self.int_expr(1)
        if kind == "mod":
            return f"({a} % {extent})"
        if kind == "abs":
            return f"(hm.abs({a}) % {extent})"
        return f"hm.minimum(hm.maximum({a}, 0), {extent - 1})"

    def int_expr(self, depth: int) -> tuple[str, float]:
        """An int expression and a bound on its magnitude."""
        if depth <= 0:
            return self.int_leaf()
        kinds = ["leaf", "arith", "arith", "div", "trunc", "call", "select", "neg", "wrap"]
        kind = self.choice(kinds)
        if kind == "leaf":
            return self.int_leaf()
        if kind == "wrap":
            return self.int_wrap(depth)
        if kind == "arith":
            (a, ba), (b, bb) = self.int_expr(depth - 1), self.int_expr(depth - 1)
            return self.int_limit(*self.combine(a, ba, b, bb))
        if kind == "div":
            a, ba = self.int_expr(depth - 1)
            how = self.choice(["const", "positive", "negative"])
            op = self.choice(["//", "%"])
            if how == "const":
                d = self.choice([-5, -3, -2, -1, 1, 2, 3, 7])
                divisor, bd = (str(d) if d > 0 else f"({d})"), abs(d)
            else:
                b, bb = self.int_expr(depth - 1)
                sign = "" if how == "positive" else "-"
                divisor, bd = f"({sign}hm.abs({b}) {'+' if sign == '' else '-'} 1)", bb + 1
            return f"({a} {op} {divisor})", (ba if op == "//" else bd)
        if kind == "trunc":  # int() truncates toward zero, negative values included
            a, ba = self.real_expr(depth - 1)
            return f"int({a})", math.floor(ba)
        if kind == "call":
            fn = self.choice(["abs", "minimum", "maximum"])
            a, ba = self.int_expr(depth - 1)
            if fn == "abs":
                return f"hm.abs({a})", ba
            b, bb = self.int_expr(depth - 1)
            return f"hm.{fn}({a}, {b})", max(ba, bb)
        if kind == "select":
            cond = self.condition(depth - 1)
            (a, ba), (b, bb) = self.int_expr(depth - 1), self.int_expr(depth - 1)
            return f"({a} if {cond} else {b})", max(ba, bb)
        a, ba = self.int_expr(depth - 1)
        return f"(-{a})", ba

    def int_wrap(self, depth: int) -> tuple[str, float]:
        """An int expression of the lane whose products or powers leave int64 (hawk wraps
        them, two's complement), reduced modulo a power of two: two's complement wrapping
        changes a value by a multiple of 2**64, which leaves its floor modulo 2**k alone,
        so the per-lane reference's unbounded Python ints give the same value."""
        a, _ = self.int_expr(depth - 1)
        # (the lane keeps the operand from being a constant: an expression of constants
        # beyond int64 is refused when the kernel is decorated)
        a = f"({a} + hm.sample_index())"
        form = self.choice(["product", "power", "negated", "least"])
        if form == "product":
            b, _ = self.int_expr(depth - 1)
            big = self.choice(_WRAPPING)
            inner = f"({a} * {big} + {b})" if big > 0 else f"({a} * ({big}) - {b})"
        elif form == "power":  # exact by squaring, wrapping past int64
            inner = f"((hm.abs({a}) % 7 + 2) ** {self.choice(_EXPONENTS)})"
        elif form == "negated":  # the most negative int64 and what - and abs make of it
            inner = f"(-(hm.abs({a}) * {_WRAPPING[0]} * 2 - {a}))"
        else:  # compared with the least int64 written as a constant (C reads -2**63 apart)
            inner = f"({a} if {a} > (-9223372036854775807 - 1) else 3)"
        modulus = self.choice(_MODULI)
        return f"({inner} % {modulus})", modulus - 1

    def int_limit(self, text: str, bound: float) -> tuple[str, float]:
        if bound <= INT_LIMIT:
            return text, bound
        return self.clamp(text, "int", self.choice([7, 50, 100]))

    def int_leaf(self) -> tuple[str, float]:
        names = self.names("int")
        if names and self.integer(0, 2):
            name = self.choice(names)
            return name, self.scope.env[name].bound
        if self.integer(0, 4) == 0:
            return "hm.sample_index()", self.lanes - 1
        c = self.integer(-7, 7)
        return (str(c) if c >= 0 else f"({c})"), abs(c)

    def condition(self, depth: int) -> str:
        kind = self.choice(["compare", "compare", "compare", "chain", "and", "or", "not"])
        if kind in ("and", "or") and depth > 0:
            return f"({self.condition(depth - 1)} {kind} {self.condition(depth - 1)})"
        if kind == "not" and depth > 0:
            return f"(not {self.condition(depth - 1)})"
        ops = ["<", "<=", ">", ">=", "==", "!="]
        terms = [self.number(max(depth, 0)) for _ in range(3 if kind == "chain" else 2)]
        text = terms[0]
        for term in terms[1:]:
            text += f" {self.choice(ops)} {term}"
        return f"({text})"

    def number(self, depth: int) -> str:
        return (self.int_expr(depth) if self.integer(0, 2) == 0 else self.real_expr(depth))[0]


@st.composite
def kernels(draw: Callable[[st.SearchStrategy[Any]], Any]) -> GeneratedKernel:
    """A random kernel of the hawk grammar (see the module's docstring)."""
    planes: list[PlaneSpec] = []
    for k in range(draw(st.integers(0, 2))):
        if draw(st.booleans()):
            planes.append(PlaneSpec(f"t{k}", "table", (draw(st.integers(1, 6)),)))
        else:
            count = draw(st.integers(1, 2))
            labels = tuple(draw(st.permutations(_AXIS_LABELS))[:count])
            shape = tuple(draw(st.integers(1, 5)) for _ in labels)
            planes.append(PlaneSpec(f"t{k}", "table", shape, labels))
    for k in range(draw(st.integers(0, 2))):
        if draw(st.booleans()):
            length = draw(st.integers(1, 8) if draw(st.booleans()) else st.integers(9, 40))
            planes.append(PlaneSpec(f"h{k}", "accumulator", (length,)))
        else:
            labels = ("bin",)
            if draw(st.booleans()):
                other = draw(st.sampled_from([a for a in _AXIS_LABELS if a != "bin"]))
                labels = tuple(draw(st.permutations(["bin", other])))
            shape = tuple(draw(st.integers(1, 6)) for _ in labels)
            planes.append(PlaneSpec(f"h{k}", "accumulator", shape, labels))
    planes += [PlaneSpec(f"p{k}", "param") for k in range(draw(st.integers(0, 2)))]
    planes += [PlaneSpec(f"x{k}", "input") for k in range(draw(st.integers(1, 3)))]
    planes += [PlaneSpec(f"y{k}", "output") for k in range(draw(st.integers(1, 2)))]
    planes = draw(st.permutations(planes))
    wide = any(p.kind == "accumulator" for p in planes) and draw(st.integers(0, 3)) == 0
    lanes = draw(st.sampled_from(_WIDE_LANES) if wide else st.integers(1, 24))
    builder = _Builder(draw, tuple(planes), lanes)
    body = builder.body()
    signature = ",\n".join(f"    {p.name}: {p.annotation()}" for p in planes)
    names = ", ".join(p.name for p in planes)
    outputs = ", ".join(p.name for p in planes if p.kind == "output")
    source = "\n".join(
        [
            "import hawk",
            "from hawk import math as hm",
            "",
            "",
            "@hawk.kernel",
            f"def kernel(\n{signature},\n):",
            *body,
            "",
            "",
            f"def per_lane({names}):",
            *body,
            f"    return ({outputs},)",
            "",
        ]
    )
    seed = draw(st.integers(0, 2**32 - 1))
    if draw(st.booleans()):
        storage = tuple("float64" for _ in planes)
    else:
        storage = tuple(draw(st.sampled_from(_MIXED)) for _ in planes)
    return GeneratedKernel(source, tuple(planes), lanes, seed, storage)


# -- loading and evaluating --------------------------------------------------------------


class KernelLoader:
    """Writes generated sources into ``directory`` and imports them, and makes their
    plans, once per source."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.modules: dict[str, types.ModuleType] = {}
        self.plans: dict[tuple[str, str | None], eagle.plan.AutoPlan] = {}

    def load(self, source: str) -> types.ModuleType:
        """The module of ``source`` (hawk reads the kernel's source from its file)."""
        module = self.modules.get(source)
        if module is None:
            name = "hawk_generated_" + hashlib.sha256(source.encode()).hexdigest()[:16]
            path = self.directory / f"{name}.py"
            path.write_text(source)
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self.modules[source] = module
        return module

    def plan(self, source: str, backend: str | None = None) -> eagle.plan.AutoPlan:
        """``eagle.plan.auto`` of the kernel of ``source`` on ``backend`` (None: by the
        planes; it compiles once per dtype)."""
        plan = self.plans.get((source, backend))
        if plan is None:
            kernel = self.load(source).kernel
            plan = self.plans[source, backend] = eagle.plan.auto(kernel, backend=backend)
        return plan


class _LaneTable:
    def __init__(self, values: np.ndarray, plane: PlaneSpec) -> None:
        self.values = values.reshape(plane.shape)
        self.plane = plane

    def at(self, *flat: int, **named: int) -> np.float64:
        index = flat if self.plane.axes is None else tuple(named[a] for a in self.plane.axes)
        for i, extent in zip(index, self.plane.shape, strict=True):
            if not (isinstance(i, int) and 0 <= i < extent):
                raise AssertionError(f"generator bug: index {i!r} of {self.plane.name}")
        return self.values[index]


_ROUNDED = frozenset({"exp", "log", "sqrt", "sin", "cos", "tanh", "pow"})


class _LaneMath:
    """``hawk.math`` for one lane: ints stay Python ints, reals are numpy float64.

    With ``noise``, each result of a rounded function (:data:`_ROUNDED`) is
    multiplied by ``1 + noise()``, as another math library might round it.
    """

    def __init__(self, lane: int, noise: Callable[[], float] | None = None) -> None:
        self.lane = lane
        self.noise = noise

    def sample_index(self) -> int:
        return self.lane

    def split_index(self, *extents: int) -> tuple[int, ...]:
        indices, rest = [], self.lane
        for n in reversed(extents):
            rest, index = divmod(rest, n)
            indices.append(index)
        return (rest, *reversed(indices))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        function = getattr(np, {"pow": "power"}.get(name, name))
        noise = self.noise if name in _ROUNDED else None

        def real(*args: Any) -> np.float64:
            value = function(*(np.float64(a) for a in args))
            return value * (1.0 + noise()) if noise else value

        if name == "abs":
            return lambda a: builtins.abs(a) if isinstance(a, int) else real(a)
        if name in ("minimum", "maximum"):
            pick = builtins.min if name == "minimum" else builtins.max
            return lambda a, b: (
                pick(a, b) if isinstance(a, int) and isinstance(b, int) else real(a, b)
            )
        return real


@dataclass
class LaneRun:
    """What :func:`evaluate_per_lane` computed, in float64.

    Attributes:
        outputs: each output plane after the run.
        accumulators: each accumulator plane after the run, in its shape.
        magnitudes: per accumulator, flat: ``|start|`` plus the sum of ``|value|`` of
            every add into each element (summed in another order, the element can
            differ by rounding relative to this).
        added: per accumulator, ``(lanes, size)``: the sum of what each lane added
            into each (flat) element.
        added_abs: as ``added``, of the values' magnitudes.
        adds: as ``added``, the number of adds.
    """

    outputs: dict[str, np.ndarray]
    accumulators: dict[str, np.ndarray]
    magnitudes: dict[str, np.ndarray]
    added: dict[str, np.ndarray]
    added_abs: dict[str, np.ndarray]
    adds: dict[str, np.ndarray]

    def comparable(self, name: str, stable: np.ndarray) -> np.ndarray:
        """The (flat) elements of accumulator ``name`` that no lane outside ``stable``
        (a bool per lane) added into."""
        return ~(self.adds[name][~stable] > 0).any(axis=0)


class _LaneAccumulator:
    """A ``Mutable[Table]`` for one lane: ``.add`` adds into the run's float64 plane and
    records the lane's contribution."""

    def __init__(self, run: LaneRun, plane: PlaneSpec, lane: int) -> None:
        self.run = run
        self.plane = plane
        self.lane = lane

    def add(self, *flat: int, value: float, **named: int) -> None:
        plane = self.plane
        index = flat if plane.axes is None else tuple(named[a] for a in plane.axes)
        for i, extent in zip(index, plane.shape, strict=True):
            if not (isinstance(i, int) and 0 <= i < extent):
                raise AssertionError(f"generator bug: index {i!r} of {plane.name}.add")
        element = int(np.ravel_multi_index(index, plane.shape))
        value = np.float64(value)
        self.run.accumulators[plane.name].reshape(-1)[element] += value
        self.run.magnitudes[plane.name][element] += abs(value)
        self.run.added[plane.name][self.lane, element] += value
        self.run.added_abs[plane.name][self.lane, element] += abs(value)
        self.run.adds[plane.name][self.lane, element] += 1


def evaluate_per_lane(
    module: types.ModuleType,
    kernel: GeneratedKernel,
    planes: dict[str, np.ndarray],
    noise: Callable[[], float] | None = None,
) -> LaneRun:
    """The outputs and accumulators of ``kernel`` computed lane by lane in Python
    (float64), adds in lane order.

    ``noise`` (a relative error per call) perturbs the rounded math functions.
    """
    code = module.per_lane.__code__
    arrays = {name: values.astype(np.float64) for name, values in planes.items()}
    sizes = {name: arrays[name].size for name in kernel.accumulators}
    run = LaneRun(
        outputs={name: arrays[name].copy() for name in kernel.outputs},
        accumulators={name: arrays[name].copy() for name in kernel.accumulators},
        magnitudes={name: np.abs(arrays[name]).reshape(-1) for name in kernel.accumulators},
        added={name: np.zeros((kernel.lanes, size)) for name, size in sizes.items()},
        added_abs={name: np.zeros((kernel.lanes, size)) for name, size in sizes.items()},
        adds={name: np.zeros((kernel.lanes, size), dtype=int) for name, size in sizes.items()},
    )
    with np.errstate(all="ignore"):
        for lane in range(kernel.lanes):
            args: dict[str, Any] = {}
            for plane in kernel.planes:
                values = arrays[plane.name]
                if plane.kind == "table":
                    args[plane.name] = _LaneTable(values, plane)
                elif plane.kind == "accumulator":
                    args[plane.name] = _LaneAccumulator(run, plane, lane)
                elif plane.kind == "param":
                    args[plane.name] = np.float64(values[0])
                else:
                    args[plane.name] = np.float64(values[lane])
            globals_ = {"hm": _LaneMath(lane, noise), "__builtins__": builtins}
            outputs = types.FunctionType(code, globals_)(**args)
            for name, value in zip(kernel.outputs, outputs, strict=True):
                run.outputs[name][lane] = float(value)
    return run


def _constant(value: float) -> Callable[[], float]:
    return lambda: value


def _uniform(rng: np.random.Generator, delta: float) -> Callable[[], float]:
    return lambda: delta * rng.uniform(-1.0, 1.0)


def stable_lanes(
    module: types.ModuleType,
    kernel: GeneratedKernel,
    planes: dict[str, np.ndarray],
    delta: float,
    rtol: float,
    atol: float,
    trials: int = 6,
    reference: LaneRun | None = None,
) -> np.ndarray:
    """The lanes whose outputs, and what they add into each accumulator element, stay
    within ``rtol``/``atol`` when every input value and every rounded math result is
    perturbed by a relative error of up to ``delta`` (a lane that adds a different
    number of times into an element is not stable). ``reference`` is the unperturbed
    :func:`evaluate_per_lane` of ``planes``, when the caller has it.

    Two correct programs that round differently (a device's math library and fused
    multiply-adds against numpy, or float32 against float64) can land on two sides of a
    discontinuity (``int()``, ``//``, ``%``, a comparison, ``tanh`` rounding to exactly
    1.0) or amplify rounding by cancellation; such a lane is not stable, and its values
    are not compared across implementations. The first two trials push every value up
    by ``delta``, then down; the others perturb at random.
    """
    if reference is None:
        reference = evaluate_per_lane(module, kernel, planes)
    rng = np.random.default_rng(kernel.seed)
    stable = np.ones(kernel.lanes, dtype=bool)
    for trial in range(trials):
        if trial < 2:
            shift = delta if trial == 0 else -delta
            perturbed = {name: values * (1.0 + shift) for name, values in planes.items()}
            noise = _constant(shift)
        else:
            perturbed = {
                name: values * (1.0 + delta * rng.uniform(-1.0, 1.0, values.shape))
                for name, values in planes.items()
            }
            noise = _uniform(rng, delta)
        noisy = evaluate_per_lane(module, kernel, perturbed, noise)
        for name in kernel.outputs:
            stable[disagreements(noisy.outputs[name], reference.outputs[name], rtol, atol)] = False
        for name in kernel.accumulators:
            moved = disagreements(
                noisy.added[name], reference.added[name], rtol, atol, reference.added_abs[name]
            )
            elsewhere = (noisy.adds[name] != reference.adds[name]).any(axis=1)
            stable[np.unique(moved // reference.added[name].shape[1])] = False
            stable[elsewhere] = False
    return stable


def disagreements(
    actual: np.ndarray,
    expected: np.ndarray,
    rtol: float,
    atol: float,
    magnitude: np.ndarray | None = None,
) -> np.ndarray:
    """The (flat) places where ``actual`` differs from ``expected``: NaN and inf must sit
    in the same places, finite values within ``atol + rtol * magnitude`` (by default
    ``|expected|``; for a sum, ``|start|`` plus the sum of the terms' magnitudes)."""
    actual = np.asarray(actual, dtype=np.float64).reshape(-1)
    expected = np.asarray(expected, dtype=np.float64).reshape(-1)
    scale = np.abs(expected) if magnitude is None else np.asarray(magnitude).reshape(-1)
    finite = np.isfinite(actual) & np.isfinite(expected)
    with np.errstate(invalid="ignore"):
        close = np.abs(actual - expected) <= atol + rtol * scale
        same_special = (np.isnan(actual) & np.isnan(expected)) | (
            np.isinf(actual) & (actual == expected)
        )
    return np.flatnonzero(~np.where(finite, close, same_special))
