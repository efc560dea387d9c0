"""Which loops the numpy program runs a chunk of iterations at a time.

A qualifying loop's index becomes a column of ``C`` consecutive index values
(shape ``(C, 1)``), so every value computed from it gains a leading axis of
``C`` rows (``(C, n)`` when it also varies by lane), and one pass of numpy
work runs ``C`` iterations at once. A loop qualifies when:

* its body only binds values (``Let``) and adds into tables (``Accumulate``):
  no store, no ``if``, no inner loop;
* each carry is never changed by the loop, summed over it (``acc = acc +
  term`` or ``acc = acc - term``, a real) or set by it (``acc = term``: the
  last iteration's term is its value), every ``term`` independent of the
  carries the loop changes, so the iterations do not depend on each other, and
  adds into a table commute. An int carry is never summed a chunk at a time:
  each iteration's add wraps, or is checked, on its own;
* a uniform value computed from the index is only used by operations that run
  elementwise on arrays (arithmetic, comparisons, functions, conversion to a
  real, a table read), never by one that takes a Python branch on it.

The analysis is pure: :func:`batch` gives what the emitter needs, or None.
:func:`lane_group` finds the adds whose address is shared by whole groups of
lanes (``lane // U`` or ``lane % U``), which the program sums per group before
it adds: a ``Mutable[Table]`` gradient of a ``split_index`` kernel adds ``U``
times fewer values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hawk import ir
from hawk.kinds import Type

__all__ = ["Batch", "batch", "lane_group", "lane_uses"]

# uniform nodes that run elementwise on an array of index values
_ELEMENTWISE = (ir.Ref, ir.Const, ir.Unary, ir.Binary, ir.Compare, ir.Call, ir.Read)


@dataclass(frozen=True)
class Batch:
    """How one loop runs in chunks of iterations.

    Attributes:
        loop: the loop.
        rowed: the variables whose value depends on the loop index (the index
            included): each holds one row per iteration of the chunk.
        updates: the carries the loop changes, each with its term and how the term
            changes it: ``"+"`` (added), ``"-"`` (subtracted) or ``"="`` (set).
        body: the loop's body without the statements that only form those updates
            (``acc2 = acc + term`` where the carry's update is ``acc2``).
    """

    loop: ir.Loop
    rowed: frozenset[ir.Var]
    updates: tuple[tuple[ir.Carry, ir.Expr, str], ...]
    body: tuple[ir.Stmt, ...]

    @property
    def counted(self) -> bool:
        """True when the emitter needs the number of iterations in a chunk: the loop adds
        into a table (once per iteration, also what does not depend on it), or sums a
        term (one that depends on the iteration may take a side of a uniform condition
        that does not, at run time)."""
        adds = any(isinstance(stmt, ir.Accumulate) for stmt in self.body)
        return adds or any(how != "=" for _, _, how in self.updates)

    def rows(self, node: ir.Expr) -> bool:
        """True when ``node`` has one row per iteration (it depends on the index)."""
        return _mentions(node, self.rowed)


def batch(loop: ir.Loop) -> Batch | None:
    """The chunked form of ``loop``, or None when it must run one iteration at a time."""
    if loop.trip_count < 2:
        return None
    if not all(isinstance(stmt, ir.Let | ir.Accumulate) for stmt in loop.body):
        return None
    lets = {stmt.var: stmt.value for stmt in loop.body if isinstance(stmt, ir.Let)}
    updates, partial = [], set()
    for carry in loop.carries:
        update = carry.update
        if update == ir.Ref(carry.var):
            continue
        if isinstance(update, ir.Ref) and update.var in lets:  # acc2 = acc + term; acc = acc2
            partial.add(update.var)
            update = lets[update.var]
        term, how = _update(carry.var, update)
        if how != "=" and carry.var.type == Type.INT:
            return None  # (a chunk's sum would leave int64 unwrapped and unchecked)
        updates.append((carry, term, how))
    body = tuple(s for s in loop.body if not (isinstance(s, ir.Let) and s.var in partial))
    changed = {carry.var for carry, _, _ in updates} | partial
    rowed = {loop.index}
    for stmt in body:
        if isinstance(stmt, ir.Let) and _mentions(stmt.value, rowed):
            rowed.add(stmt.var)
    result = Batch(loop, frozenset(rowed), tuple(updates), body)
    values = [*_expressions(body), *(term for _, term, _ in updates)]
    if any(_mentions(value, changed) for value in values):
        return None  # an iteration would read what an earlier one changed
    for stmt in body:
        if isinstance(stmt, ir.Accumulate) and _uniform_rows(result, stmt.index):
            return None  # a uniform index per row: the emitter adds such indices unbatched
    if all(_elementwise(result, value) for value in values):
        return result
    return None


def _update(var: ir.Var, update: ir.Expr) -> tuple[ir.Expr, str]:
    """``(term, how)`` of a carry's ``update``: ``var + term`` or ``term + var`` (``"+"``),
    ``var - term`` (``"-"``), or any other value (``"="``: it sets the carry; a value
    that reads ``var`` then makes the loop run one iteration at a time)."""
    own = ir.Ref(var)
    if isinstance(update, ir.Binary) and update.op in ("+", "-"):
        if update.left == own:
            return update.right, update.op
        if update.right == own and update.op == "+":
            return update.left, "+"
    return update, "="


def _expressions(stmts: tuple[ir.Stmt, ...]) -> list[ir.Expr]:
    values: list[ir.Expr] = []
    for stmt in stmts:
        if isinstance(stmt, ir.Let):
            values.append(stmt.value)
        elif isinstance(stmt, ir.Accumulate):
            values.extend([*stmt.index, stmt.value])
    return values


def _mentions(node: ir.Expr, names: set[ir.Var] | frozenset[ir.Var]) -> bool:
    return any(isinstance(n, ir.Ref) and n.var in names for n in ir.walk(node))


def _uniform_rows(plan: Batch, index: tuple[ir.Expr, ...]) -> bool:
    return not any(i.varying for i in index) and any(plan.rows(i) for i in index)


def _elementwise(plan: Batch, value: ir.Expr) -> bool:
    """True when every uniform node of ``value`` that has rows runs elementwise, and no
    node branches in Python on such a value."""
    for node in ir.walk(value):
        if not isinstance(node, ir.Expr):
            continue
        uniform_rows = [c for c in node.children() if not c.varying and plan.rows(c)]
        if isinstance(node, ir.Select | ir.Logic | ir.Not) and uniform_rows:
            return False
        if node.varying or not plan.rows(node):
            continue
        if isinstance(node, ir.Cast):
            if node.to == Type.INT and node.operand.type == Type.REAL:
                return False
        elif not isinstance(node, _ELEMENTWISE):
            return False
    return True


def lane_group(
    nodes: tuple[ir.Expr, ...], lets: Mapping[ir.Var, ir.Expr]
) -> tuple[int, bool] | None:
    """``(U, runs)`` when ``nodes`` depend on the lane only through ``lane // U``
    (``runs``: each run of ``U`` consecutive lanes has one value) or only through
    ``lane % U`` (each lane has the value of the lane ``U`` before it), for one
    constant ``U > 1``; None otherwise. ``lets`` are the kernel's bound values.

    An add at such an index sums each group of lanes that shares an address first,
    then adds those sums (``_add_groups`` of ``hawk/emit/_host_runtime.py``).
    """
    uses: set[tuple[str, int]] = set()
    for node in nodes:
        found = lane_uses(node, lets)
        if found is None:
            return None
        uses |= found
    if len(uses) != 1:
        return None
    ((op, size),) = uses
    return size, op == "//"


def lane_uses(node: ir.Expr, lets: Mapping[ir.Var, ir.Expr]) -> set[tuple[str, int]] | None:
    """The ``(op, U)`` of every ``lane // U`` and ``lane % U`` in ``node``; None when the
    lane reaches it in any other way."""
    if isinstance(node, ir.Binary) and node.op in ("//", "%") and _is_lane(node.left, lets):
        right = node.right
        if isinstance(right, ir.Const) and right.type == Type.INT and right.value > 1:
            return {(node.op, int(right.value))}
        return None
    if isinstance(node, ir.Ref):
        if node.var in lets:
            return lane_uses(lets[node.var], lets)
        return None if node.var.varying else set()
    if isinstance(node, ir.Lane | ir.Load | ir.Read) and node.varying:
        return None
    uses: set[tuple[str, int]] = set()
    for child in node.children():
        found = lane_uses(child, lets)
        if found is None:
            return None
        uses |= found
    return uses


def _is_lane(node: ir.Expr, lets: Mapping[ir.Var, ir.Expr]) -> bool:
    while isinstance(node, ir.Ref) and node.var in lets:
        node = lets[node.var]
    return isinstance(node, ir.Lane)
