"""hawk IR -> numpy: one Python function that runs every lane at once.

A varying value is a 1-D array with one element per lane; a uniform value a
numpy scalar (or a Python int). Loops iterate their range in Python, each
iteration whole-array work; a loop whose iterations do not depend on each other
(its carries are summed or set, its body has no store, ``if`` or inner loop) runs a chunk
of iterations per pass instead, its index a column of index values
(``hawk/emit/_batch.py``); a carry it sums takes a chunk's terms summed, or one at a
time, as the kernel adds them, where their sum could overflow (``_carry_rows``). An add
whose address is shared by whole groups of lanes (``lane // U``, ``lane % U``) sums each
group before it adds.

A chunked loop that reads ``lane // U`` and ``lane % U`` also has a factored
form (``hawk/emit/_factor.py``), run when ``n`` is a multiple of ``U``: its
lanes laid out as ``(groups, units)``, each value shaped by what it depends on
(a read at ``r * U + lane % U`` gathers one row of ``U`` per iteration), and
each add or summed carry whose value is a product a matrix product of its
factors, summed over what its address does not depend on. The program holds
both forms and picks by ``n``; the factored one makes the same checks, which
report the same lane.

An ``if`` on a varying condition runs both blocks for every lane and selects
with ``np.where``; each block runs under the mask of the lanes that take it, so
``Mutable[Table]`` adds apply and checks fail only where their block was taken
(and only on the side of ``x if c else y``, ``a and b``, ``a or b`` that a lane
evaluates). An ``if`` on a uniform condition is a Python ``if``.

The checks of :mod:`hawk.emit.checks` are vectorised: one comparison per
checked axis and one ``any`` per access site, the details computed only on
failure. A failed check raises :class:`~hawk.errors.PlaneIndexError` or
``ZeroDivisionError`` naming the first lane that failed (adds made before it
stay made: ``eagle.plan`` restores the planes of a run that raises).

Ints are numpy int64, which wraps; a uniform int that may leave int64 (a Python int) is
brought back into it, modulo 2**64. Adds into a 16-bit table go to its
sums in the compute type, rounded into the table once at the end (as on the device).

The emitted function takes one flat numpy array per plane in declaration
order (a param as a one-element array), then the lane count ``n``; it writes
outputs and accumulators in place and returns None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hawk import ir
from hawk.dtypes import through_float32
from hawk.emit import Names, compute_dtype, plane_dtypes
from hawk.emit._batch import Batch, batch, lane_group
from hawk.emit._factor import GROUP, LANES, UNIT, Factoring, factor
from hawk.emit._host_runtime import RUNTIME
from hawk.emit.checks import (
    CheckSite,
    IntOverflow,
    LaneCheck,
    Ranges,
    division_site,
    index_site,
    operation_site,
)
from hawk.kinds import PlaneKind, Type, check_option

__all__ = ["HostProgram", "emit"]

#: lanes x iterations a chunked loop (``hawk/emit/_batch.py``) computes in one pass;
#: small enough that its temporaries stay in a processor's cache
_CHUNK_ELEMENTS = 1 << 14
#: the elements of the widest value with one row per iteration that a pass of a factored
#: loop forms (``hawk/emit/_factor.py``) where none varies by group and unit: the values
#: a matrix product reads
_FACTORED_ELEMENTS = 1 << 18


@dataclass(frozen=True)
class HostProgram:
    """One emitted kernel.

    Attributes:
        name: the function's name.
        source: its Python source.
        function: the function, ``function(*planes, n)``.
        arguments: the plane names in argument order (``n`` follows them).
        checks: its check sites (:mod:`hawk.emit.checks`), in program order.
        launch_checks: the checks the function leaves to its caller, of indices
            of the lane and loop indices (:class:`~hawk.emit.checks.LaneCheck`),
            in program order: make them first, with
            :func:`~hawk.emit.checks.check_launch`.
    """

    name: str
    source: str
    function: Callable[..., None]
    arguments: tuple[str, ...]
    checks: tuple[CheckSite, ...] = ()
    launch_checks: tuple[LaneCheck, ...] = ()


def emit(
    kernel: ir.KernelIR,
    dtypes: Mapping[str, Any],
    *,
    checks: bool = True,
    int_overflow: IntOverflow = "wrap",
) -> HostProgram:
    """The numpy program of ``kernel`` for the given plane dtypes.

    Args:
        kernel: the kernel's IR.
        dtypes: a dtype of :data:`hawk.emit.DTYPES` for every plane, by name (a
            16-bit plane is loaded as float32 and each store or add into it
            rounds to its dtype, as on the device).
        checks: False leaves out the checks of :mod:`hawk.emit.checks` (and
            ``int()`` of NaN is whatever the hardware gives): unsafe, as a bad
            index then reads or writes outside its table; for measuring their cost.
        int_overflow: ``"wrap"`` (int64 values wrap, two's complement) or ``"check"``
            (the first lane whose int value leaves int64 raises ``HawkOverflowError``).

    Raises:
        HawkError: a plane without a dtype, an unknown plane or another dtype.
    """
    check_option(int_overflow, IntOverflow, "int_overflow")
    planes = plane_dtypes(kernel, dtypes)
    return _Emitter(kernel, planes, checks, int_overflow).program()


#: the keys of an operation's check sites by kind (:meth:`_Emitter.site`; -1 a division)
_OPERATION_AXES = {"overflow": -2, "int": -3, "exponent": -4}

_STATEMENTS: ir.Rules[Callable[..., None]] = ir.Rules("host emitter", ir.Stmt)
_EXPRESSIONS: ir.Rules[Callable[..., str]] = ir.Rules("host emitter", ir.Expr)


class _Emitter:
    """Writes one kernel's numpy program; an operation's text is its registry entry's
    host printer (the emitter is the printer's ``out``: :class:`~hawk._registry.entry.HostOut`)."""

    def __init__(
        self,
        kernel: ir.KernelIR,
        dtypes: dict[str, np.dtype],
        checks: bool,
        int_overflow: IntOverflow = "wrap",
    ) -> None:
        self.kernel = kernel
        self.dtypes = dtypes
        self.real = compute_dtype(dtypes)
        self.names = Names()
        self.constants: dict[str, Any] = {}
        self.lines: list[str] = []
        self.ranges = Ranges(kernel, enabled=checks, int_overflow=int_overflow)
        self.lets = kernel.lets()
        self.sites: list[CheckSite] = []
        self.index_checks = 0  # calls of _check_index emitted
        self.depth = 0  # where an expression's own statements go
        self.mask: str | None = None  # the lanes that evaluate it (None: every lane)
        # the loop whose chunk of iterations runs now, and the name of their count
        self.chunk: tuple[Batch, str] | None = None
        # on factored lanes (hawk/emit/_factor.py): U and the names of values from outside
        # the loop in their factored shape
        self.unit = 0
        self.aliases: dict[ir.Var | ir.Plane, str] = {}
        self.lane_shape = "n"  # the shape of a lane value (for a uniform one made varying)
        # the 16-bit tables added into, each with the name of its sums in the compute type
        self.sums = {
            p.name: f"s_{p.name}"
            for p in kernel.planes
            if p.kind == PlaneKind.ACCUMULATOR and dtypes[p.name].itemsize == 2
        }
        # the names of the check sites emitted, by access (id) and axis (-1: a division),
        # so that the two forms of a chunked loop share theirs
        self.site_names: dict[tuple[int, int], str] = {}

    def program(self) -> HostProgram:
        name = "hawk_" + (self.kernel.name if self.kernel.name.isascii() else "kernel")
        arguments = tuple(p.name for p in self.kernel.planes)
        params = ", ".join([*(Names.plane(a) for a in arguments), "n"])
        self.emit(1, "with _np.errstate(all='ignore'):")
        # no lane: nothing is read, checked, added or written (one line, always run)
        self.emit(2, "if not n: return")
        if any(isinstance(node, ir.Lane) for node in ir.walk(self.kernel)):
            self.emit(2, "lane = _np.arange(n, dtype=_np.int64)")
        self.loads(2)
        for table, sums in self.sums.items():
            self.emit(2, f"{sums} = _np.zeros({Names.plane(table)}.shape, _real)")
        self.block(self.kernel.body, 2, None)
        for table, sums in self.sums.items():
            self.emit(2, f"_round_sums({Names.plane(table)}, {sums})")
        if self.index_checks:
            self.lines.insert(1, "    " * 2 + f"_last = [None] * {self.index_checks}")
        source = "\n".join([f"def {name}({params}):", *self.lines, ""])
        namespace: dict[str, Any] = {
            "_np": np,
            "_real": self.real.type,
            **RUNTIME,
            **self.constants,
        }
        exec(compile(source, f"<hawk host kernel {self.kernel.name}>", "exec"), namespace)
        return HostProgram(
            name, source, namespace[name], arguments, tuple(self.sites), self.ranges.launch_checks
        )

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def add_target(self, plane: ir.Plane) -> str:
        """The array an add into ``plane`` goes to: a 16-bit table's sums in the compute
        type (rounded into it once, at the end), else the table itself."""
        return self.sums.get(plane.name) or Names.plane(plane.name)

    def at(self, depth: int, mask: str | None) -> None:
        """Expressions emitted next evaluate at ``depth``, for the lanes of ``mask``."""
        self.depth, self.mask = depth, mask

    def loads(self, depth: int) -> None:
        used = {node.plane for node in ir.walk(self.kernel) if isinstance(node, ir.Load)}
        for plane in self.kernel.planes:
            if plane in used:
                source = Names.plane(plane.name)
                if plane.kind == PlaneKind.PARAM:
                    value = f"_real({source}[0])"
                elif plane.kind == PlaneKind.OUTPUT or self.dtypes[plane.name] != self.real:
                    value = f"{source}.astype(_real)"  # a copy: stores must not change it
                else:
                    value = source
                self.emit(depth, f"{Names.load(plane.name)} = {value}")

    # -- statements ----------------------------------------------------------------------

    def block(self, stmts: tuple[ir.Stmt, ...], depth: int, mask: str | None) -> None:
        start = len(self.lines)
        for stmt in stmts:
            self.statement(stmt, depth, mask)
        if len(self.lines) == start:
            self.emit(depth, "pass")

    def statement(self, stmt: ir.Stmt, depth: int, mask: str | None) -> None:
        rule = _STATEMENTS(stmt)
        self.at(depth, mask)
        rule(self, stmt, depth, mask)

    @_STATEMENTS.rule(ir.Let)
    def let(self, stmt: ir.Let, depth: int, mask: str | None) -> None:
        value = self.expr(stmt.value)
        self.emit(depth, f"{self.names.var(stmt.var)} = {value}")

    @_STATEMENTS.rule(ir.Loop)
    def loop(self, stmt: ir.Loop, depth: int, mask: str | None) -> None:
        chunked = batch(stmt) if mask is None else None
        if chunked is not None:
            self.batched(chunked, depth)
            return
        for carry in stmt.carries:
            value = self.expr(carry.init)
            self.emit(depth, f"{self.names.var(carry.var)} = {value}")
        index = self.names.var(stmt.index)
        self.emit(depth, f"for {index} in range({stmt.start}, {stmt.stop}, {stmt.step}):")
        self.block(stmt.body, depth + 1, mask)
        if stmt.carries:
            self.at(depth + 1, mask)
            targets = ", ".join(self.names.var(c.var) for c in stmt.carries)
            updates = ", ".join(self.expr(c.update) for c in stmt.carries)
            self.emit(depth + 1, f"{targets} = {updates}")

    @_STATEMENTS.rule(ir.Store)
    def store(self, stmt: ir.Store, depth: int, mask: str | None) -> None:
        value = self.expr(stmt.value)
        dtype = np.dtype(self.dtypes[stmt.plane.name])
        if self.real == np.float64 and through_float32(dtype):  # as the device rounds
            value = f"_storable({value}, {Names.plane(stmt.plane.name)}.dtype)"
        self.emit(depth, f"{Names.plane(stmt.plane.name)}[...] = {value}")

    def batched(self, plan: Batch, depth: int) -> None:
        """A loop run a chunk of iterations per pass (``hawk/emit/_batch.py``), on lanes
        or, where it has a factored form and ``n`` allows it, on factored lanes."""
        loop = plan.loop
        for carry in loop.carries:
            self.emit(depth, f"{self.names.var(carry.var)} = {self.expr(carry.init)}")
        rows = f"_rows{len(self.constants)}"
        self.constants[rows] = np.arange(loop.start, loop.stop, loop.step)
        layout = factor(plan, self.lets, self.ranges.sites)
        if layout is None:
            self.chunked(plan, depth, rows)
            return
        self.emit(depth, f"if n % {layout.unit} or n < {layout.unit}:")
        self.chunked(plan, depth + 1, rows)
        self.emit(depth, "else:")
        self.factored(plan, layout, depth + 1, rows)

    def chunked(self, plan: Batch, depth: int, rows: str) -> None:
        """A chunked loop on lanes, about :data:`_CHUNK_ELEMENTS` lanes times iterations
        per pass (``rows``: the name of its index values)."""
        loop = plan.loop
        chunk, first = self.names.fresh("chunk"), self.names.fresh("first")
        count, index = self.names.fresh("count"), self.names.var(loop.index)
        total = len(self.constants[rows])
        self.emit(depth, f"{chunk} = max(1, {_CHUNK_ELEMENTS} // max(n, 1))")
        self.emit(depth, f"for {first} in range(0, {total}, {chunk}):")
        # one iteration per pass (many lanes) keeps the index a number: 1-D lane arrays
        self.emit(
            depth + 1,
            f"{index} = {rows}[{first}:{first} + {chunk}, None] if {chunk} > 1 "
            f"else {loop.start} + {first} * {loop.step}",
        )
        if plan.counted:
            self.emit(depth + 1, f"{count} = min({chunk}, {total} - {first})")
        outer, self.chunk = self.chunk, (plan, count)
        self.block_inline(plan.body, depth + 1, None)
        self.at(depth + 1, None)
        for carry, term, how in plan.updates:
            text, name = self.expr(term), self.names.var(carry.var)
            if how == "=":  # the last iteration's term
                value = f"_last_row({text}, {not term.varying})" if plan.rows(term) else text
                self.emit(depth + 1, f"{name} = {value}")
                continue
            self.emit(depth + 1, f"{name} = _carry_rows({name}, {how!r}, {text}, {count})")
        self.chunk = outer

    def factored(self, plan: Batch, layout: Factoring, depth: int, rows: str) -> None:
        """A chunked loop on factored lanes (``hawk/emit/_factor.py``), ``n`` a multiple
        of its ``U``; its index a ``(C, 1, 1)`` column of the values of ``rows``."""
        loop, unit = plan.loop, layout.unit
        groups, sizes = self.names.fresh("groups"), self.names.fresh("sizes")
        self.emit(depth, f"{groups} = n // {unit}")
        outer: list[tuple[ir.Var | ir.Plane, int]] = [
            *layout.outer.items(),
            *((plane, LANES) for plane in layout.planes),
        ]
        if layout.lane:
            self.emit(depth, f"lanes = _factored(lane, {groups}, {unit}, {LANES})")
        for key, axes in outer:
            name = self.names.fresh("f")
            value = self.names.var(key) if isinstance(key, ir.Var) else Names.load(key.name)
            self.emit(depth, f"{name} = _factored({value}, {groups}, {unit}, {axes})")
            self.aliases[key] = name
        chunk, first = self.names.fresh("chunk"), self.names.fresh("first")
        count, index = self.names.fresh("count"), self.names.var(loop.index)
        total = len(self.constants[rows])
        self.emit(depth, f"{chunk} = {self.factored_chunk(layout, groups, total)}")
        self.emit(depth, f"for {first} in range(0, {total}, {chunk}):")
        depth += 1
        self.emit(depth, f"{index} = {rows}[{first}:{first} + {chunk}, None, None]")
        self.emit(depth, f"{count} = min({chunk}, {total} - {first})")
        self.emit(depth, f"{sizes} = ({count}, {groups}, {unit})")
        self.unit, self.lane_shape = unit, f"(1, {groups}, {unit})"
        for stmt in plan.body:
            self.at(depth, None)
            if isinstance(stmt, ir.Accumulate):
                self.add_product(stmt, layout, sizes, depth)
            elif isinstance(stmt, ir.Let) and stmt.var not in layout.fused:
                self.statement(stmt, depth, None)
        self.at(depth, None)
        for carry, term, how in plan.updates:
            name = self.names.var(carry.var)
            factors = ", ".join(self.expr(f) for f in layout.factors(term))
            grouping = layout.grouping(term)
            self.emit(
                depth,
                f"{name} = _carry_product({name}, {how!r}, {carry.var.varying}, {sizes}, "
                f"{grouping!r}, {factors})",
            )
        self.unit, self.lane_shape, self.aliases = 0, "n", {}

    def factored_chunk(self, layout: Factoring, groups: str, total: int) -> str:
        """The iterations a pass of a factored loop runs: about :data:`_CHUNK_ELEMENTS`
        elements of a value with one row per iteration that varies by group and unit,
        else :data:`_FACTORED_ELEMENTS` of the widest such value."""
        if LANES in layout.widths:
            return f"max(1, {_CHUNK_ELEMENTS} // n)"
        width = {GROUP: groups, UNIT: str(layout.unit)}
        terms = [width[axes] for axes in sorted(layout.widths) if axes in width]
        if not terms:
            return str(total)
        widest = terms[0] if len(terms) == 1 else f"max({', '.join(terms)})"
        return f"max(1, {_FACTORED_ELEMENTS} // {widest})"

    def add_product(self, stmt: ir.Accumulate, layout: Factoring, sizes: str, depth: int) -> None:
        """An add on factored lanes: its value's factors, summed over what its address does
        not depend on, added with ``_add_product``."""
        target = self.add_target(stmt.plane)
        offset = self.offset(stmt.plane, self.indices(stmt))
        factors = ", ".join(self.expr(f) for f in layout.factors(stmt.value))
        grouping = layout.grouping(stmt.value)
        self.emit(depth, f"_add_product({target}, {offset}, {sizes}, {grouping!r}, {factors})")

    @_STATEMENTS.rule(ir.If)
    def branch(self, stmt: ir.If, depth: int, mask: str | None) -> None:
        if not stmt.cond.varying:
            cond = self.expr(stmt.cond)
            self.emit(depth, f"if {cond}:")
            self.block(stmt.then, depth + 1, mask)
            self.merge_values(stmt, "then_value", depth + 1, mask)
            self.emit(depth, "else:")
            self.block(stmt.orelse, depth + 1, mask)
            self.merge_values(stmt, "else_value", depth + 1, mask)
            return
        cond = self.names.fresh("cond")
        self.emit(depth, f"{cond} = {self.expr(stmt.cond)}")
        then_values = [m.then_value for m in stmt.merges]
        else_values = [m.else_value for m in stmt.merges]
        then_mask = self.sub_mask(mask, cond, self.effects(stmt.then, then_values), depth)
        else_mask = self.sub_mask(
            mask, f"_np.logical_not({cond})", self.effects(stmt.orelse, else_values), depth
        )
        self.block_inline(stmt.then, depth, then_mask)
        self.at(depth, then_mask)
        then_texts = [self.expr(value) for value in then_values]
        self.block_inline(stmt.orelse, depth, else_mask)
        self.at(depth, else_mask)
        for merge, then_text in zip(stmt.merges, then_texts, strict=True):
            else_text = self.expr(merge.else_value)
            self.emit(
                depth, f"{self.names.var(merge.var)} = _np.where({cond}, {then_text}, {else_text})"
            )

    def merge_values(self, stmt: ir.If, side: str, depth: int, mask: str | None) -> None:
        self.at(depth, mask)
        for merge in stmt.merges:
            value = self.expr(getattr(merge, side))
            self.emit(depth, f"{self.names.var(merge.var)} = {value}")

    def effects(self, stmts: tuple[ir.Stmt, ...], values: list[ir.Expr]) -> bool:
        """True when a block (and its merge values) adds into a table or makes a check."""
        if any(isinstance(node, ir.Accumulate) for stmt in stmts for node in ir.walk(stmt)):
            return True
        return any(map(self.ranges.sites, stmts)) or any(map(self.ranges.sites, values))

    def sub_mask(self, mask: str | None, cond: str, needed: bool, depth: int) -> str | None:
        """A mask for the lanes of ``mask`` where ``cond`` holds, made when ``needed``."""
        if not needed:
            return mask
        name = self.names.fresh("mask")
        if mask:
            self.emit(depth, f"{name} = {mask} & {cond}")
        else:  # (a varying condition may be one number at run time)
            self.emit(depth, f"{name} = _as_mask({cond}, {self.lane_shape})")
        return name

    def block_inline(self, stmts: tuple[ir.Stmt, ...], depth: int, mask: str | None) -> None:
        for stmt in stmts:
            self.statement(stmt, depth, mask)

    @_STATEMENTS.rule(ir.Accumulate)
    def accumulate(self, stmt: ir.Accumulate, depth: int, mask: str | None) -> None:
        target = self.add_target(stmt.plane)
        offset = self.offset(stmt.plane, self.indices(stmt))
        value = self.expr(stmt.value)
        index_varying = any(i.varying for i in stmt.index)
        if not index_varying:
            if self.chunk is not None:  # added once per lane and iteration of the chunk
                total = f"_np.sum(_np.broadcast_to({value}, ({self.chunk[1]}, n)))"
            elif stmt.value.varying:  # (a number at run time too: _lane_sum, _masked)
                total = f"_np.sum(_masked({value}, {mask}))" if mask else f"_lane_sum({value}, n)"
            else:
                count = f"_np.count_nonzero({mask})" if mask else "n"
                total = f"{value} * {count}"
            if mask:  # no lane of the mask adds: nothing is added (not value * 0, NaN for
                # an infinite value), nor at an address no lane made
                self.emit(depth, f"if {mask}.any():")
                depth += 1
            self.emit(depth, f"{target}[{offset}] += {total}")
            return
        # a chunk's adds repeat for each of its iterations, also where nothing they use does
        rows = f", {self.chunk[1]}" if self.chunk is not None else ""
        group = lane_group(stmt.index, self.lets) if mask is None else None
        if group is not None:
            size, runs = group
            self.emit(depth, f"_add_groups({target}, {offset}, {value}, n, {size}, {runs}{rows})")
            return
        if self.chunk is not None:
            self.emit(depth, f"_add_rows({target}, {offset}, {value}{rows}, n)")
            return
        if not mask:  # (an index that is one number at run time still adds per lane)
            self.emit(depth, f"_add_rows({target}, {offset}, {value}, 1, n)")
            return
        offset = f"_masked({offset}, {mask})"
        if stmt.value.varying:
            value = f"_masked({value}, {mask})"
        self.emit(depth, f"_np.add.at({target}, {offset}, {value})")

    # -- expressions ---------------------------------------------------------------------

    def temp(self, prefix: str, text: str) -> str:
        """``text`` evaluated once, into a new name."""
        name = self.names.fresh(prefix)
        self.emit(self.depth, f"{name} = {text}")
        return name

    def site(self, site: CheckSite, node: ir.Expr | ir.Accumulate, axis: int) -> str:
        """The name of ``site`` in the emitted code: the check of ``node`` on ``axis``
        (-1: a division), one name for both forms of a chunked loop."""
        key = (id(node), axis)
        if self.unit and key in self.site_names:
            return self.site_names[key]
        self.sites.append(site)
        name = f"_site{len(self.sites) - 1}"
        self.constants[name] = site
        self.site_names[key] = name
        return name

    def indices(self, node: ir.Read | ir.Accumulate) -> list[str]:
        """The index texts of a table access, each computed once and checked. A checked
        uniform index is clamped into its axis for the offset: a lane that uses it out of
        range raises, and one far out of range would make an offset beyond int64."""
        plane = node.plane
        texts, sites, checked, extents = [], [], [], []
        for position, item in enumerate(node.index):
            text = self.expr(item)
            if self.ranges.axis_checked(plane, position, item):
                if not text.isidentifier():
                    text = self.temp("ix", text)
                site = index_site(node, position)
                sites.append(self.site(site, node, position))
                checked.append(text)
                flat = site.extent is None  # checked against the table's length
                extents.append(f"len({Names.plane(plane.name)})" if flat else str(site.extent))
                if not item.varying:
                    texts.append(f"_clamped({text}, {extents[-1]})")
                    continue
            texts.append(text)
        if sites:
            self.emit(
                self.depth,
                f"_check_index(({', '.join(sites)},), ({', '.join(checked)},), "
                f"({', '.join(extents)},), {self.mask}, n, _last, {self.index_checks}"
                + (f", {self.unit})" if self.unit else ")"),
            )
            self.index_checks += 1
        return texts

    def offset(self, plane: ir.Plane, texts: list[str]) -> str:
        if plane.strides is None:
            return texts[0]
        terms = [
            text if stride == 1 else f"{text} * {stride}"
            for text, stride in zip(texts, plane.strides, strict=True)
        ]
        return "(" + " + ".join(terms) + ")"

    def expr(self, node: ir.Expr) -> str:
        return _EXPRESSIONS(node)(self, node)

    @_EXPRESSIONS.rule(ir.Const)
    def const(self, node: ir.Const) -> str:
        if node.type != Type.REAL:
            return repr(node.value) if node.value >= 0 else f"({node.value!r})"
        name = f"_k{len(self.constants)}"
        self.constants[name] = self.real.type(node.value)
        return name

    @_EXPRESSIONS.rule(ir.Lane)
    def lane(self, node: ir.Lane) -> str:
        return "lanes" if self.unit else "lane"

    @_EXPRESSIONS.rule(ir.Ref)
    def ref(self, node: ir.Ref) -> str:
        return self.aliases.get(node.var) or self.names.var(node.var)

    @_EXPRESSIONS.rule(ir.Load)
    def load(self, node: ir.Load) -> str:
        return self.aliases.get(node.plane) or Names.load(node.plane.name)

    @_EXPRESSIONS.rule(ir.Read)
    def read(self, node: ir.Read) -> str:
        offset = self.offset(node.plane, self.indices(node))
        # every index a lane uses is checked; the others' offsets are clipped
        table = Names.plane(node.plane.name)
        if node.plane.axes is None:  # a flat table may be empty
            text = f"_take_flat({table}, {offset})"
        else:
            text = f"{table}.take({offset}, mode='clip')"
        return text if self.dtypes[node.plane.name] == self.real else f"{text}.astype(_real)"

    @_EXPRESSIONS.rule(ir.Unary, ir.Compare, ir.Not, ir.Call, ir.Cast)
    def operation(self, node: ir.Operation) -> str:
        """Its registry entry's numpy text, over its operands' texts."""
        return node.builtin.host(self, node, *(self.expr(child) for child in node.children()))

    @_EXPRESSIONS.rule(ir.Binary)
    def binary(self, node: ir.Binary) -> str:
        """As :meth:`operation`, the divisor of an integer ``//`` or ``%`` checked first."""
        left, right = self.expr(node.left), self.expr(node.right)
        if self.ranges.divides(node):
            site = self.site(division_site(node), node, -1)
            unit = f", {self.unit}" if self.unit else ""
            right = self.temp("d", f"_check_divisor({site}, {right}, {self.mask}, n{unit})")
        return node.builtin.host(self, node, left, right)

    @property
    def checks(self) -> bool:
        """True when the program makes the checks of :mod:`hawk.emit.checks`."""
        return self.ranges.enabled

    def wraps(self, node: ir.Expr) -> bool:
        """True when the int operation ``node`` may leave int64."""
        return self.ranges.wraps(node)

    def check_site(self, node: ir.Expr, kind: str) -> str | None:
        """The name of the check site of kind ``kind`` that operation ``node`` makes, or
        None when it makes none."""
        if kind not in self.ranges.operation_checks(node):
            return None
        return self.site(operation_site(node, kind), node, _OPERATION_AXES[kind])

    def lanes(self) -> str:
        """The arguments naming the lanes a check sees: the mask, ``n`` and, on factored
        lanes, the unit."""
        return f"{self.mask}, n" + (f", {self.unit}" if self.unit else "")

    def define(self, name: str, value: object) -> str:
        """Bind ``name`` to ``value`` in the program's namespace (a registry entry's own
        function); gives ``name``."""
        self.constants[name] = value
        return name

    @_EXPRESSIONS.rule(ir.Select)
    def select(self, node: ir.Select) -> str:
        """As :meth:`operation`; with a checked side, each side evaluated only for the
        lanes that take it."""
        if not (self.ranges.sites(node.if_true) or self.ranges.sites(node.if_false)):
            return self.operation(node)
        cond = self.temp("cond", self.expr(node.cond))
        if node.cond.varying:  # each side checked only on the lanes that take it
            depth, mask = self.depth, self.mask
            a = self.masked(node.if_true, self.sub_mask(mask, cond, True, depth))
            b = self.masked(
                node.if_false, self.sub_mask(mask, f"_np.logical_not({cond})", True, depth)
            )
            return f"_np.where({cond}, {a}, {b})"
        result = self.names.fresh("sel")
        self.emit(self.depth, f"if {cond}:")
        self.nested(node.if_true, result)
        self.emit(self.depth, "else:")
        self.nested(node.if_false, result)
        return result

    @_EXPRESSIONS.rule(ir.Logic)
    def logic(self, node: ir.Logic) -> str:
        """As :meth:`operation`; with a checked right side, that side evaluated only
        where it decides the result."""
        if not self.ranges.sites(node.right):
            return self.operation(node)
        left = self.expr(node.left)
        if node.varying:  # the right side is checked only where it decides the result
            if not node.left.varying:
                left = f"_np.full({self.lane_shape}, {left})"
            left = self.temp("lhs", left)
            taken = left if node.op == "and" else f"_np.logical_not({left})"
            right = self.masked(node.right, self.sub_mask(self.mask, taken, True, self.depth))
            return f"_np.logical_{node.op}({left}, {right})"
        left = self.temp("lhs", left)
        self.emit(self.depth, f"if {left}:" if node.op == "and" else f"if not {left}:")
        self.nested(node.right, left)
        return left

    def masked(self, node: ir.Expr, mask: str | None) -> str:
        """``node`` evaluated for the lanes of ``mask`` (its text)."""
        saved = self.mask
        self.mask = mask
        try:
            return self.expr(node)
        finally:
            self.mask = saved

    def nested(self, node: ir.Expr, target: str) -> None:
        """``target = node`` one level deeper (inside an ``if`` just emitted)."""
        self.depth += 1
        try:
            self.emit(self.depth, f"{target} = {self.expr(node)}")
        finally:
            self.depth -= 1
