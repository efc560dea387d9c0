"""The run-time checks of emitted kernels: where they are and what they raise.

Every table access (``t.at(...)`` and ``t.add(...)``) checks each index against
its axis's extent (a flat table: against its length), and every integer ``//``
and ``%`` checks its divisor, on the host and the device alike; an access or a
division that fails its check is not made. ``int()`` of NaN, of +-inf or of a
real beyond the int64 range raises (``HawkValueError`` for NaN,
``HawkOverflowError`` for the others), and so does an int ``**`` with a
negative exponent (``HawkValueError``). With
``int_overflow="check"`` (``IntOverflow``), an int ``+``, ``-``, ``*``,
unary ``-``, ``**`` or ``//`` whose value leaves int64 raises
``HawkOverflowError`` too; by default such a value wraps (two's complement).

An emitter lists its *check sites* (``CheckSite``), one per checked axis
of an access and one per checked divisor; a check that holds for every lane
(a constant, a loop index whose range fits the axis, ``x % K``) is proved when
the kernel is emitted and not made. An index every lane computes that is a
part depending on the lane alone, never decreasing as the lane grows
(``lane // U``, ``2 * lane + 1``), plus a part depending on the indices of
the loops around it alone (``i * NB + k`` with ``k`` a loop index:
``LaneCheck``) is checked once per launch instead, on the host, before the
kernel runs: every lane runs every iteration of those loops, so its lanes are
all in range when the first at the smallest loop part and the last at the
largest are, and the first that is not is found by bisection. The emitters
list these as *launch checks* and make no check of their own for them; the
runtime (``eagle.plan``) makes them with ``check_launch`` when it binds a
launch.

Every other check is made as the kernel runs. The host program raises at
once; the device kernel writes the first failure it meets into its error
record and skips the access (a read gives 0, an add is dropped);
``record_error`` turns a record into the same error.

A device error record is ``RECORD_WORDS`` int64 words, ``[failed, site,
lane, value, extent, epoch, claim, -]``, provided by the runtime (eagle maps
it from pinned host memory): ``failed`` is 0 until a check fails, ``epoch`` is
at least 1 and ``claim`` the address of a word of device memory that starts
below it. The first failing thread of an epoch raises that word to ``epoch``
with ``atomicMax``, writes ``site`` (an index into the kernel's check sites),
``lane``, ``value`` (the index; the bits of the real, as a double, for
``int()``) and ``extent``, then sets ``failed`` to 1. The
runtime clears a failure it has read by zeroing ``failed`` and increasing
``epoch``, without a device call.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np

from hawk import ir
from hawk._passes import in_source_names
from hawk.emit._index_math import (
    LoopRange,
    Sum,
    above,
    below,
    evaluate,
    lane_loop_sums,
    loop_grid,
    loop_values,
    substitute,
)
from hawk.errors import (
    HawkOverflowError,
    HawkValueError,
    HawkZeroDivisionError,
    PlaneIndexError,
)
from hawk.ir.expr import INT_MAX, INT_MIN
from hawk.ir.printing import format_access
from hawk.kinds import Type

__all__ = [
    "INT_INVALID",
    "MAX_ITERATIONS",
    "MAX_LANES",
    "RECORD_WORDS",
    "CheckSite",
    "IntOverflow",
    "LaneCheck",
    "Ranges",
    "check_launch",
    "division_site",
    "index_site",
    "operation_site",
    "record_error",
]

#: what ``int()`` gives for NaN, +-inf or a real beyond the int64 range where the checks
#: are left out (``checks=False``), and after its check failed on the device
INT_INVALID = -(2**63)

IntOverflow = Literal["wrap", "check"]
"""What an int value that leaves int64 does: ``"wrap"`` (two's complement, the default)
or ``"check"`` (the kernel raises ``HawkOverflowError`` naming the expression)."""

#: the lanes a launch may run at most (eagle refuses more; no array holds as many
#: elements), so the emitters prove ``lane * 4 + k`` and the like stay in int64
MAX_LANES = 2**48

#: the most lanes a launch may run for :meth:`Ranges.int32` to find ints that fit 32 bits
INT32_LANES = 2**31

#: the check sites of operations (their ``kind``), by what they check
_OPERATION_KINDS = ("overflow", "int", "exponent")

#: int64 words in a device error record
RECORD_WORDS = 8


@dataclass(frozen=True)
class CheckSite:
    """One checked index axis of a table access, or one checked integer divisor.

    Attributes:
        kind: ``"index"``, ``"zero-division"``, ``"overflow"`` (an int value leaving
            int64), ``"int"`` (``int()`` of a real) or ``"exponent"`` (an int ``**``).
        plane: the table's name (None for an operation).
        axis: the axis label, ``"index"`` for a flat table, or the operator
            (``"//"``, ``"%"``, ``"*"``, ``"int"``, ...) of an operation.
        extent: the axis's declared extent; None for a flat table (its length
            is known at run time) and for an operation.
        access: the access or operation as hawk source, e.g. ``t.at(row=r, col=1)``.
    """

    kind: str
    plane: str | None
    axis: str
    extent: int | None
    access: str

    def error(self, lane: int, value: int, extent: int | None = None) -> Exception:
        """The error for ``lane`` failing this check with ``value``.

        Args:
            lane: the lane that failed.
            value: the offending index; the wrapped value of an overflow; the bits of
                the real (as a double) of ``int()``; the exponent of ``**``; unused for
                a division.
            extent: a flat table's length (declared extents are known).
        """
        if self.kind == "zero-division":
            return HawkZeroDivisionError(
                f"integer {self.axis} by zero at lane {lane}, in {self.access}; guard the "
                "divisor, e.g. `b if b != 0 else 1`"
            )
        if self.kind == "overflow":
            return HawkOverflowError(
                f"int64 overflow at lane {lane}, in {self.access} (it wraps to {value}); "
                "compute in reals, or build the plan with int_overflow='wrap' to wrap"
            )
        if self.kind == "int":
            real = struct.unpack("<d", struct.pack("<q", value))[0]
            kind = HawkValueError if math.isnan(real) else HawkOverflowError
            call = "int" if self.axis == "int" else f"hm.{self.axis}"
            return kind(
                f"{call}() of {real!r} at lane {lane}, in {self.access}: an int is finite "
                f"and within int64; guard the real first, e.g. `{call}(x) if hm.abs(x) < 1e18 "
                "else 0`"
            )
        if self.kind == "exponent":
            return HawkValueError(
                f"negative exponent {value} of an int ** at lane {lane}, in {self.access}; "
                "an int ** a negative int is a real: write float(x) ** y"
            )
        size = self.extent if self.extent is not None else extent
        assert self.plane is not None and size is not None
        shown = value
        where = (
            f" (length {size})" if self.axis == "index" else f", axis {self.axis!r} (extent {size})"
        )
        return PlaneIndexError(
            f"table {self.plane!r}{where}: index {shown} is out of range at lane "
            f"{lane}, in {self.access}",
            plane=self.plane,
            axis=self.axis,
            index=value,
            extent=size,
            lane=lane,
        )


def record_error(sites: Sequence[CheckSite], record: Sequence[int]) -> Exception | None:
    """The error a device error record holds, or None when no check failed.

    Args:
        sites: the kernel's check sites, as its emitter listed them.
        record: the record's words (at least the first five).
    """
    if not record[0]:
        return None
    return sites[int(record[1])].error(int(record[2]), int(record[3]), int(record[4]))


#: the most iterations of the loops around an access whose index a launch check covers
MAX_ITERATIONS = 2**20


@dataclass(frozen=True)
class LaneCheck:
    """A checked index axis whose index depends on the lane and loop indices only, checked
    once per launch.

    Its index is a sum, through ``+`` and ``-`` of a term free of the lane, of
    *lane parts* and of terms free of the lane. A lane part is built from the
    lane, int constants, ``+``, ``-`` a constant, ``*`` a constant >= 0 and
    ``//`` a constant > 0, so it never decreases as the lane grows (nor does
    any value computed on the way). A term free of the lane is built from the
    indices of ``loops`` and int constants with ``+``, ``-``, ``*`` and ``%`` a
    constant > 0, and fits int64 on every iteration. Every lane runs every
    iteration of ``loops``, so lanes ``0 .. n - 1`` are all in range when lane
    0 at the smallest sum of the terms free of the lane and lane ``n - 1`` at
    the largest are. A lane at which a value on the way overflows int64 fails
    too, naming the index the kernel would compute (wrapped).

    Attributes:
        site: the access's check site; its error is the one the kernel's check
            would raise.
        index: the index, with every variable but the loop indices replaced by
            its value.
        loops: the loops whose indices ``index`` uses, outermost first, each
            index with its range (at most ``MAX_ITERATIONS`` iterations in all).
    """

    site: CheckSite
    index: ir.Expr
    loops: tuple[LoopRange, ...] = ()

    def first_failure(self, lanes: int, length: int | None = None) -> tuple[int, int] | None:
        """The first of lanes ``0 .. lanes - 1`` out of range, and its index at the first
        iteration (in loop order) out of range, or None.

        Args:
            lanes: the launch's lane count.
            length: the table's length, for a flat table (declared extents are known).

        Raises:
            ValueError: a flat table's check without ``length``.
        """
        extent = self.site.extent if self.site.extent is not None else length
        if extent is None:
            raise HawkValueError(
                f"the check of {self.site.access} needs the length of flat table "
                f"{self.site.plane!r}: pass the length of the array bound to it"
            )
        if lanes <= 0:
            return None
        if not self.loops and isinstance(self.index, ir.Const):  # every lane alike
            index = int(self.index.value)
            return None if 0 <= index < extent else (0, index)
        if self._fails(0, extent):
            return 0, self._first_index(0, extent)
        if not self._fails(lanes - 1, extent):
            return None
        good, bad = 0, lanes - 1  # _fails(good) is False and _fails(bad) True
        while bad - good > 1:
            middle = (good + bad) // 2
            if self._fails(middle, extent):
                bad = middle
            else:
                good = middle
        return bad, self._first_index(bad, extent)

    def error(self, lanes: int, length: int | None = None) -> Exception | None:
        """The error of the first lane out of range (as :meth:`first_failure`), or None."""
        failure = self.first_failure(lanes, length)
        return None if failure is None else self.site.error(*failure, length)

    @cached_property
    def _spans(self) -> tuple[tuple[Sum, int, int, bool], ...]:
        """Each sum of :func:`lane_loop_sums` with the smallest and largest value of its loop part,
        and whether it is the index."""
        grid, size = loop_grid(self.loops)
        sums = lane_loop_sums(self.index)
        assert sums, f"{self.index} is not a sum of lane and loop parts"
        spans = []
        for total in sums:
            values = loop_values(total.loop, grid, size)
            spans.append((total, int(values.min()), int(values.max()), total is sums[-1]))
        return tuple(spans)

    def _fails(self, lane: int, extent: int) -> bool:
        """True when some iteration of ``lane`` is out of range or overflows (once this
        does not hold for lane 0, it never holds for a lane but not for the next)."""
        for total, low, high, is_index in self._spans:
            least, most, fits = _loop_limits(total, lane, extent, is_index)
            if not fits or low < least or high > most:
                return True
        return False

    def _first_index(self, lane: int, extent: int) -> int:
        """The index (wrapped to int64) at the first iteration, in loop order, at which a
        failing ``lane`` is out of range or overflows."""
        grid, size = loop_grid(self.loops)
        bad = np.zeros(size, bool)
        for total, _, _, is_index in self._spans:
            least, most, fits = _loop_limits(total, lane, extent, is_index)
            values = loop_values(total.loop, grid, size)
            bad |= below(values, least) | above(values, most) | (not fits)
        first = int(bad.argmax())
        loops = {var: int(grid[var][first]) for var, _ in self.loops}
        return evaluate(self.index, lane, loops)[0]


def _loop_limits(total: Sum, lane: int, extent: int, is_index: bool) -> tuple[int, int, bool]:
    """The least and most the loop part of ``total`` may be at ``lane`` (the index in
    ``0 .. extent - 1``, a value on the way to it in int64), and whether its lane parts fit
    int64."""
    shift, fits = total.shift(lane)
    least, most = (0, extent - 1) if is_index else (INT_MIN, INT_MAX)
    return least - shift, most - shift, fits


def check_launch(checks: Sequence[LaneCheck], lanes: int, lengths: Mapping[str, int]) -> None:
    """Make a launch's :class:`LaneCheck` checks, in order, before it runs.

    Args:
        checks: the launch checks of the emitted kernel.
        lanes: the launch's lane count.
        lengths: the length of each flat table, by plane name.

    Raises:
        PlaneIndexError: the first check that fails, naming its first lane out of range.
    """
    for check in checks:
        plane = check.site.plane
        length = lengths.get(plane) if plane is not None and check.site.extent is None else None
        error = check.error(lanes, length)
        if error is not None:
            raise error


_EVERY_LANE: ir.Rules[Callable[..., None]] = ir.Rules("launch checks", ir.Stmt)
_EVALUATED: ir.Rules[Callable[..., None]] = ir.Rules("launch checks", ir.Expr)


class Ranges:
    """What an emitter can prove about a kernel's int values, to skip checks.

    A value's range is known for constants, loop indices, ``x % K`` for a
    constant ``K > 0``, sums, differences and products of known ranges, their
    ``// K`` for a constant ``K > 0``, int
    ``minimum`` and ``maximum`` (a clamp, ``minimum(maximum(i, 0), N - 1)``,
    is in ``0 .. N - 1`` whatever ``i``), and variables bound to such values.
    An index on an access every lane makes (not inside an ``if``, a side of
    ``x if c else y`` or the right of ``and`` / ``or``, nor a loop that never
    runs) that depends on the lane (never decreasing) and the indices of the
    loops around it, as a :class:`LaneCheck` describes, is left to a launch
    check (:attr:`launch_checks`), and so is the same index on the same axis
    anywhere else. Made with ``enabled=False`` it
    proves every check (an emitter then makes none).

    Made with ``lanes`` (the most lanes a launch runs), it knows the lane is below it; at
    most :data:`INT32_LANES`, it says which ints fit 32 bits (:meth:`int32`,
    :meth:`int32_var`), for an emitter to write them in 32-bit arithmetic.

    It also says which int operations may leave int64 (:meth:`wraps`: the emitters
    then wrap them explicitly, as C leaves a signed overflow undefined and Python's
    ints never overflow) and which operations make a check of their own
    (:meth:`operation_checks`: ``int()`` of a real, an int ``**`` whose exponent may
    be negative and, with ``int_overflow="check"``, an operation that may overflow).

    Attributes:
        launch_checks: the kernel's launch checks, one per table, axis and
            index, in program order.
    """

    def __init__(
        self,
        kernel: ir.KernelIR,
        *,
        enabled: bool = True,
        int_overflow: IntOverflow = "wrap",
        lanes: int = MAX_LANES,
    ) -> None:
        self.enabled = enabled
        self.int_overflow = int_overflow
        self.lanes = lanes
        self._spans: dict[ir.Expr, tuple[int, int] | None] = {}
        self._int32: dict[ir.Expr, bool] = {}
        self._lets = kernel.lets()
        self._loops = {
            node.index: range(node.start, node.stop, node.step)
            for node in ir.walk(kernel)
            if isinstance(node, ir.Loop)
        }
        self._launch: dict[tuple[ir.Plane, int, ir.Expr], LaneCheck] = {}
        if enabled:
            self._every_lane(kernel.body)
        self.launch_checks = tuple(self._launch.values())

    def _every_lane(self, stmts: Sequence[ir.Stmt], loops: tuple[LoopRange, ...] = ()) -> None:
        """Note the launch checks of the accesses every lane makes in ``stmts``, inside
        ``loops`` (outermost first)."""
        for stmt in stmts:
            _EVERY_LANE(stmt)(self, stmt, loops)

    @_EVERY_LANE.rule(ir.Let, ir.Store)
    def _value(self, stmt: ir.Let | ir.Store, loops: tuple[LoopRange, ...]) -> None:
        self._evaluated(stmt.value, loops)

    @_EVERY_LANE.rule(ir.Accumulate)
    def _add(self, stmt: ir.Accumulate, loops: tuple[LoopRange, ...]) -> None:
        for item in stmt.index:
            self._evaluated(item, loops)
        self._access(stmt, loops)
        self._evaluated(stmt.value, loops)

    @_EVERY_LANE.rule(ir.Loop)
    def _loop(self, stmt: ir.Loop, loops: tuple[LoopRange, ...]) -> None:
        for carry in stmt.carries:
            self._evaluated(carry.init, loops)
        if stmt.trip_count:
            inner = (*loops, (stmt.index, range(stmt.start, stmt.stop, stmt.step)))
            self._every_lane(stmt.body, inner)
            for carry in stmt.carries:
                self._evaluated(carry.update, inner)

    @_EVERY_LANE.rule(ir.If)
    def _branch(self, stmt: ir.If, loops: tuple[LoopRange, ...]) -> None:
        self._evaluated(stmt.cond, loops)  # each block runs on some lanes only

    def _evaluated(self, node: ir.Expr, loops: tuple[LoopRange, ...]) -> None:
        """Note the launch checks of the accesses every lane that evaluates ``node`` makes."""
        _EVALUATED(node)(self, node, loops)

    @_EVALUATED.rule(ir.Const, ir.Lane, ir.Ref, ir.Load)
    def _atom(self, node: ir.Expr, loops: tuple[LoopRange, ...]) -> None:
        """An atom makes no access."""

    @_EVALUATED.rule(ir.Read)
    def _read(self, node: ir.Read, loops: tuple[LoopRange, ...]) -> None:
        for item in node.index:
            self._evaluated(item, loops)
        self._access(node, loops)

    @_EVALUATED.rule(*ir.OPERATIONS)
    def _operation(self, node: ir.Operation, loops: tuple[LoopRange, ...]) -> None:
        """The operands the operation always evaluates (not the sides of a select, nor
        the right of ``and``/``or``: its registry entry's ``lazy``)."""
        lazy = node.builtin.lazy
        for position, child in enumerate(node.children()):
            if position not in lazy:
                self._evaluated(child, loops)

    def _access(self, node: ir.Read | ir.Accumulate, loops: tuple[LoopRange, ...]) -> None:
        for position, item in enumerate(node.index):
            if not self.axis_checked(node.plane, position, item):
                continue
            check = self._launch_check(item, loops)
            if check is not None:
                self._launch[(node.plane, position, item)] = LaneCheck(
                    index_site(node, position), *check
                )

    def _launch_check(
        self, item: ir.Expr, loops: tuple[LoopRange, ...]
    ) -> tuple[ir.Expr, tuple[LoopRange, ...]] | None:
        """The index and loops of a :class:`LaneCheck` of ``item`` inside ``loops``, or None
        when ``item`` cannot have one (or depends on neither the lane nor a loop index)."""
        index = substitute(item, self._lets, dict(loops))
        if index is None:
            return None
        used = {node.var for node in ir.walk(index) if isinstance(node, ir.Ref)}
        nest = tuple((var, steps) for var, steps in loops if var in used)
        constant = isinstance(index, ir.Const)  # a flat table's length is known at launch
        if (
            not (index.varying or nest or constant)
            or math.prod(len(s) for _, s in nest) > MAX_ITERATIONS
        ):
            return None
        sums = lane_loop_sums(index)
        if not sums or not all(self._fits(total.loop) and self._stays(total) for total in sums):
            return None
        return index, nest

    def _stays(self, total: Sum) -> bool:
        """True when ``total`` stays in int64 on every lane below ``lanes`` and every
        iteration (a wrapping index is checked in the kernel, which wraps as it does)."""
        loop = self.bounds(total.loop)
        low, low_fits = total.shift(0)  # lane parts never decrease as the lane grows
        high, high_fits = total.shift(self.lanes - 1)
        return (
            loop is not None
            and low_fits
            and high_fits
            and low + loop[0] >= INT_MIN
            and high + loop[1] <= INT_MAX
        )

    def _fits(self, node: ir.Expr) -> bool:
        """True when every value computed on the way to ``node`` is known to fit int64."""
        for item in ir.walk(node):
            bounds = self.bounds(item) if isinstance(item, ir.Expr) else None
            if bounds is None or bounds[0] < INT_MIN or bounds[1] > INT_MAX:
                return False
        return True

    def within(self, node: ir.Expr, extent: int | None) -> bool:
        """True when ``node`` is in ``0 .. extent - 1`` on every lane (False when unknown,
        or when an int operation on the way may leave int64 and wrap: :meth:`span`)."""
        if extent is None:
            return False
        span = self.span(node)
        return span is not None and span[0] >= 0 and span[1] < extent

    def nonzero(self, node: ir.Expr) -> bool:
        """True when ``node`` is never zero (as :meth:`within`, proved through :meth:`span`)."""
        span = self.span(node)
        return span is not None and (span[0] > 0 or span[1] < 0)

    def bounds(self, node: ir.Expr) -> tuple[int, int] | None:
        """The smallest and largest value of an int ``node``, or None when unknown."""
        if isinstance(node, ir.Const) and node.type == Type.INT:
            return int(node.value), int(node.value)
        if isinstance(node, ir.Ref):
            if node.var in self._loops:
                steps = self._loops[node.var]
                return (min(steps), max(steps)) if steps else None
            value = self._lets.get(node.var)
            return None if value is None else self.bounds(value)
        if isinstance(node, ir.Binary) and node.type == Type.INT:
            return self._binary(node)
        if isinstance(node, ir.Call) and node.type == Type.INT and node.builtin.bounds:
            # an argument of unknown range may be any int64
            args = [self.bounds(arg) or (INT_MIN, INT_MAX) for arg in node.args]
            return node.builtin.bounds(*args)
        return None

    def _binary(self, node: ir.Binary) -> tuple[int, int] | None:
        right = self.bounds(node.right)
        if node.op == "%" and right is not None and right[0] == right[1] and right[0] > 0:
            return 0, right[0] - 1
        left = self.bounds(node.left)
        if left is None or right is None:
            return None
        if node.op == "+":
            return left[0] + right[0], left[1] + right[1]
        if node.op == "-":
            return left[0] - right[1], left[1] - right[0]
        if node.op == "*":
            products = [a * b for a in left for b in right]
            return min(products), max(products)
        if node.op == "//" and right[0] == right[1] and right[0] > 0:  # floor: monotone
            return left[0] // right[0], left[1] // right[0]
        return None

    def sites(self, node: ir.Expr | ir.Stmt) -> bool:
        """True when running ``node`` makes a check (a read, a division or another
        operation to check)."""
        for item in ir.walk(node):
            if isinstance(item, ir.Read) and self.read_checked(item):
                return True
            if self.divides(item):
                return True
            if isinstance(item, ir.Expr) and self.operation_checks(item):
                return True
        return False

    def span(self, node: ir.Expr) -> tuple[int, int] | None:
        """The smallest and largest value of an int ``node`` when every int operation on
        the way to it is proved to stay in int64 (the lane below :data:`MAX_LANES`), or
        None."""
        if node not in self._spans:
            self._spans[node] = self._span(node)
        return self._spans[node]

    def _span(self, node: ir.Expr) -> tuple[int, int] | None:
        if node.type != Type.INT:
            return None
        found: tuple[int, int] | None = None
        if isinstance(node, ir.Lane):
            found = 0, self.lanes - 1
        elif isinstance(node, ir.Ref | ir.Const):
            found = self.bounds(node) if not isinstance(node, ir.Ref) else self._ref(node)
        elif isinstance(node, ir.Unary):
            inner = self.span(node.operand)
            found = inner if inner is None or node.op == "+" else (-inner[1], -inner[0])
        elif isinstance(node, ir.Binary):
            found = _arithmetic(node.op, self.span(node.left), self.span(node.right))
        elif isinstance(node, ir.Call) and node.fn == "pow":
            found = _power(self.span(node.args[0]), self.span(node.args[1]))
        elif isinstance(node, ir.Call) and node.builtin.bounds:
            # minimum and maximum never leave int64: an argument of unknown span is any int64
            spans = (self.span(arg) or (INT_MIN, INT_MAX) for arg in node.args)
            found = node.builtin.bounds(*spans)
        elif isinstance(node, ir.Select):
            sides = self.span(node.if_true), self.span(node.if_false)
            if sides[0] is not None and sides[1] is not None:
                found = min(sides[0][0], sides[1][0]), max(sides[0][1], sides[1][1])
        if found is None or found[0] < INT_MIN or found[1] > INT_MAX:
            return None
        return found

    def _ref(self, node: ir.Ref) -> tuple[int, int] | None:
        if node.var in self._loops:
            return self.bounds(node)
        value = self._lets.get(node.var)
        return None if value is None else self.span(value)

    def int32(self, node: ir.Expr) -> bool:
        """True when the int ``node`` can be computed in 32 bits with the value int64
        arithmetic gives, in a launch of at most :data:`INT32_LANES` lanes (a larger one
        keeps every int 64-bit: its lane-derived ints are, and mixing widths in an address
        costs more than 32-bit arithmetic saves): it is a constant, the lane, a variable
        of :meth:`int32_var`, or an int ``+``, ``-``, ``*``, ``//``, ``%``, unary ``-``,
        ``minimum``, ``maximum`` or select whose int operands are all such and whose
        value lies within 32 bits (a ``//`` or ``%`` by a positive divisor)."""
        if node not in self._int32:
            self._int32[node] = (
                self.lanes <= INT32_LANES and node.type == Type.INT and self._computes32(node)
            )
        return self._int32[node]

    def _computes32(self, node: ir.Expr) -> bool:
        if isinstance(node, ir.Const | ir.Lane):
            return _fits32(self.span(node))
        if isinstance(node, ir.Ref):
            return self.int32_var(node.var)
        if isinstance(node, ir.Unary | ir.Binary | ir.Select) or (
            isinstance(node, ir.Call) and node.builtin.bounds
        ):
            operands = [child for child in node.children() if child.type == Type.INT]
            return (
                all(self.int32(child) for child in operands)
                and _fits32(self.span(node))
                and not self.divides(node)  # a checked divisor is a 64-bit helper's value
            )
        return False

    def int32_var(self, var: ir.Var) -> bool:
        """True when the int variable ``var`` can be held in 32 bits: a loop index whose
        every value, and the one past its last, fits, or a variable bound once to a value
        of known span within 32 bits (a clamp, ``minimum(maximum(j, 0), N - 1)``, is one
        whatever ``j``)."""
        if var.type != Type.INT or self.lanes > INT32_LANES:
            return False
        if var in self._loops:
            steps = self._loops[var]
            if not steps:
                return False
            past = steps[-1] + steps.step  # the index's value when the loop ends
            return _fits32((min(steps.start, past), max(steps.start, past)))
        value = self._lets.get(var)
        return value is not None and _fits32(self.span(value))

    def wraps(self, node: ir.Expr) -> bool:
        """True when ``node`` is an int ``+``, ``-``, ``*``, ``//``, unary ``-``, ``**`` or
        ``abs`` whose value may leave int64 (it then wraps, or is checked)."""
        if node.type != Type.INT:
            return False
        if isinstance(node, ir.Call) and node.fn == "abs":  # only abs(-2**63) leaves
            operand = self.span(node.args[0])
            return operand is None or operand[0] == INT_MIN
        kind = (
            (isinstance(node, ir.Binary) and node.op in ("+", "-", "*", "//"))
            or (isinstance(node, ir.Unary) and node.op == "-")
            or (isinstance(node, ir.Call) and node.fn == "pow")
        )
        return kind and self.span(node) is None

    def operation_checks(self, node: ir.Expr) -> tuple[str, ...]:
        """The kinds of the checks an operation makes itself (:class:`CheckSite`),
        in the order its helper takes their sites: ``"int"`` for ``int()`` of a
        real; ``"exponent"`` for an int ``**`` whose exponent may be negative;
        ``"overflow"`` for an operation that may leave int64, with
        ``int_overflow="check"``."""
        if not self.enabled:
            return ()
        if _real_to_int(node):
            return ("int",)
        kinds: tuple[str, ...] = ()
        if isinstance(node, ir.Call) and node.fn == "pow" and node.type == Type.INT:
            exponent = self.span(node.args[1])
            if exponent is None or exponent[0] < 0:
                kinds = ("exponent",)
        if self.int_overflow == "check" and self.wraps(node):
            kinds += ("overflow",)
        return kinds

    def read_checked(self, node: ir.Read | ir.Accumulate) -> bool:
        """True when some axis of a table access needs a check."""
        return any(self.axis_checked(node.plane, k, i) for k, i in enumerate(node.index))

    def axis_checked(self, plane: ir.Plane, position: int, index: ir.Expr) -> bool:
        """True when axis ``position`` of an access of ``plane`` by ``index`` needs a check
        in the kernel (False when it is proved, or left to a launch check)."""
        extent = None if plane.axes is None else plane.axes[position][1]
        return (
            self.enabled
            and not self.within(index, extent)
            and (plane, position, index) not in self._launch
        )

    def divides(self, node: ir.Expr | ir.Stmt) -> bool:
        """True when ``node`` is an integer ``//`` or ``%`` whose divisor needs a check."""
        return (
            self.enabled
            and isinstance(node, ir.Binary)
            and node.op in ("//", "%")
            and node.type == Type.INT
            and not self.nonzero(node.right)
        )


def _arithmetic(
    op: str, left: tuple[int, int] | None, right: tuple[int, int] | None
) -> tuple[int, int] | None:
    """The span of ``left op right`` from its operands' spans, or None."""
    if right is not None and op == "%" and right[0] > 0:
        return 0, right[1] - 1
    if left is None or right is None:
        return None
    if op == "+":
        return left[0] + right[0], left[1] + right[1]
    if op == "-":
        return left[0] - right[1], left[1] - right[0]
    if op == "*":
        products = [a * b for a in left for b in right]
        return min(products), max(products)
    if op == "//" and right[0] > 0:
        quotients = [a // b for a in left for b in right]
        return min(quotients), max(quotients)
    return None


def _fits32(span: tuple[int, int] | None) -> bool:
    """True when ``span`` is known and within a 32-bit int."""
    return span is not None and span[0] >= -(2**31) and span[1] < 2**31


def _power(
    base: tuple[int, int] | None, exponent: tuple[int, int] | None
) -> tuple[int, int] | None:
    """The span of an int ``base ** exponent`` for one small exponent >= 0, or None."""
    if base is None or exponent is None or exponent[0] != exponent[1]:
        return None
    power = exponent[0]
    if not 0 <= power <= 64 or max(abs(base[0]), abs(base[1])) > 2**32:
        return None
    values = [base[0] ** power, base[1] ** power]
    if base[0] <= 0 <= base[1]:
        values.append(0)
    return min(values), max(values)


def _real_to_int(node: ir.Expr) -> bool:
    """True when ``node`` makes an int of a real: ``int()`` or ``hm.floor`` of a real."""
    if isinstance(node, ir.Cast):
        return node.to == Type.INT and node.operand.type == Type.REAL
    return isinstance(node, ir.Call) and node.fn == "floor"  # (hm.floor of an int is the int)


def operation_site(node: ir.Expr, kind: str) -> CheckSite:
    """The check site of kind ``kind`` (``"overflow"``, ``"int"``, ``"exponent"``) of an
    operation."""
    assert kind in _OPERATION_KINDS, kind
    if isinstance(node, ir.Cast):
        spelling = "int"
    elif isinstance(node, ir.Call) and node.fn != "pow":
        spelling = node.fn
    else:
        spelling = getattr(node, "op", None) or "**"
    return CheckSite(kind, None, spelling, None, in_source_names(str(node)))


def index_site(node: ir.Read | ir.Accumulate, position: int) -> CheckSite:
    """The check site of axis ``position`` of a table access."""
    plane = node.plane
    access = str(node)
    if isinstance(node, ir.Accumulate):
        access = format_access(plane, node.index, "add", node.value)
    access = in_source_names(access)  # an adjoint's copy of `j` (`j.d7`) reads `j`
    if plane.axes is None:
        return CheckSite("index", plane.name, "index", None, access)
    label, extent = plane.axes[position]
    return CheckSite("index", plane.name, label, extent, access)


def division_site(node: ir.Binary) -> CheckSite:
    """The check site of an integer ``//`` or ``%``."""
    return CheckSite("zero-division", None, node.op, None, str(node))
