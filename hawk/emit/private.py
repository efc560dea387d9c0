"""Private tables: the adds into a small table that the CUDA kernel sums in shared memory.

Thousands of lanes adding into the same few cells of a table (a histogram's bins)
queue at those cells' global atomics. A table can instead be *privatised*: each block
of the launch keeps its own copy in shared memory, zeroes it, adds its lanes into it
with shared-memory atomics, waits for its threads (``__syncthreads()``) and then adds
each non-zero cell of its copy into the table with one global atomic. The launch then
runs a bounded grid (a few blocks per multiprocessor, and no more than
:func:`blocks_for` allows), whose grid-stride loop gives each block many lanes, so
those flushes are few.

A table can be privatised when the kernel adds into it (a ``Mutable[Table]``, which a
kernel never reads), its dtype is one of :data:`PRIVATE_DTYPES`, and the copies of
every privatised table fit in :data:`SHARED_BYTES` together (:func:`shared_bytes`;
each copy starts at a multiple of 16 bytes). A named table's size is its declared
shape; a flat table's is its length, known when the kernel is bound. :func:`choose`
decides by the policy's ``adds`` (:data:`hawk.emit.policy.TableAdds`):

* ``"global"``: none; every add is a global atomic.
* ``"shared"``: every table the kernel adds into at a lane-dependent address,
  refusing one that cannot be privatised (naming it and why).
* ``"auto"``: the tables that can be, in declaration order while their copies fit,
  when the lanes pay for it: when every multiprocessor can run a block whose lanes are
  at least :data:`LANES_PER_CELL` per cell of its copies.
* ``"deterministic"``: every table the kernel adds into, summed in an order that
  depends on the lane count alone, so a run gives the same bits each time. Each warp
  keeps its own copy (so the copies of a block must fit :data:`SHARED_BYTES` once per
  warp); the lanes of a warp that add at one address take turns by lane; a block sums
  its warps' copies in warp order into its row of a scratch buffer; the last block to
  finish sums the rows in block order and adds each non-zero sum into the table. The
  launch runs at most :data:`DETERMINISTIC_BLOCKS` blocks (and :func:`blocks_for`).
  Every lane of a warp must
  reach each add, so an add under an ``if`` whose condition depends on the lane is
  refused: add ``value if cond else 0.0`` instead.

A privatised sum adds each block's partial sum into the table, so its value differs
from a global atomic's only in the order of its float additions, which global atomics
do not fix either. Integer adds are exact in any order, and so are float counts: whole
numbers below 2**24 per cell in float32 (2**53 in float64).

A float table that every add of the kernel adds one constant into (a histogram's
``value=1.0``), outside any loop, is *counted* (``SharedTable.count``, not when
deterministic): its copy holds 32-bit unsigned counts of the adds, taken with the
shared-memory integer atomics (on an H200 a 10**8-sample histogram took 0.230 ms counted
against 0.314 summing floats), and the flush adds ``count * constant`` (the constant in
the compute type, as each add would have added it), rounded once to the table's dtype.
A launch counts only when its lanes times the table's adds stay below 2**32, so no count
wraps; each cell's block sum is then exact where the per-add sums were (whole numbers
below 2**24 in float32), and otherwise rounded once instead of once per add.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hawk import ir
from hawk.dtypes import TABLE, numpy_dtype
from hawk.emit.policy import TableAdds
from hawk.errors import HawkError
from hawk.kinds import check_option

__all__ = [
    "DETERMINISTIC_BLOCKS",
    "LANES_PER_CELL",
    "PRIVATE_DTYPES",
    "SHARED_BYTES",
    "SharedTable",
    "blocks_for",
    "choose",
    "counted",
    "reasons",
    "scratch_bytes",
    "shared_bytes",
]

#: bytes of shared memory a block's private copies may take together (32 KiB)
SHARED_BYTES = 32 * 1024

#: the table dtypes whose adds can be privatised, the plane dtypes arithmetic runs in (a
#: 16-bit table rounds each add, so it keeps its global adds)
PRIVATE_DTYPES = frozenset(row.name for row in TABLE if row.plane and not row.storage_only)

#: the fewest lanes a block of a privatised launch runs per cell of its copies (it zeroes
#: and flushes them once)
LANES_PER_CELL = 1

#: the most blocks a deterministic launch runs (the same on every device, so the order
#: of its sums depends on the lane count alone)
DETERMINISTIC_BLOCKS = 512

_ALIGN = 16  # bytes: where each copy, and each table's rows of partial sums, start
_TICKET = 16  # bytes at the start of the scratch buffer: the count of finished blocks


@dataclass(frozen=True)
class SharedTable:
    """One privatised table of an emitted kernel.

    Attributes:
        name: the plane's name.
        cells: its elements: a named table's size, or None for a flat table (its
            length, known when bound).
        itemsize: bytes per element of its copy.
        count: for a counted table, the constant each add adds (its copy then holds
            32-bit unsigned counts, see the module docstring); None otherwise.
    """

    name: str
    cells: int | None
    itemsize: int
    count: float | None = None

    def size(self, lengths: Mapping[str, int]) -> int:
        """Its elements, a flat table's from ``lengths`` (name -> length)."""
        return lengths[self.name] if self.cells is None else self.cells


def _aligned(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


def shared_bytes(
    tables: tuple[SharedTable, ...], lengths: Mapping[str, int], copies: int = 1
) -> int:
    """The dynamic shared memory a block needs for ``copies`` copies (one, or one per
    warp) of each of ``tables``, the flat tables' lengths from ``lengths``."""
    return sum(_aligned(copies * t.size(lengths) * t.itemsize) for t in tables)


def blocks_for(tables: tuple[SharedTable, ...], lengths: Mapping[str, int], lanes: int) -> int:
    """The most blocks a launch over ``lanes`` lanes that privatises ``tables`` runs: each
    block runs at least :data:`LANES_PER_CELL` lanes per cell of its copies (one block
    at least)."""
    cells = sum(table.size(lengths) for table in tables)
    return max(1, lanes // max(1, LANES_PER_CELL * cells))


def scratch_bytes(tables: tuple[SharedTable, ...], lengths: Mapping[str, int], blocks: int) -> int:
    """The scratch buffer a deterministic launch of ``blocks`` blocks needs: 16 bytes
    counting the finished blocks (zero before the launch, and zero again after it),
    then each table's rows of partial sums, one row per block."""
    return _TICKET + sum(_aligned(blocks * t.size(lengths) * t.itemsize) for t in tables)


def reasons(
    kernel: ir.KernelIR,
    dtypes: Mapping[str, Any],
    lengths: Mapping[str, int],
    *,
    deterministic: bool = False,
    copies: int = 1,
    lanes: int | None = None,
) -> dict[str, str | None]:
    """For the tables ``kernel`` adds into at a lane-dependent address (every table it
    adds into, when ``deterministic``), in declaration order: why each cannot be
    privatised, or None when it can (alone).

    Args:
        kernel: the kernel's IR.
        dtypes: each plane's dtype (or its name), by name.
        lengths: each flat table's length, by name (a missing one cannot be privatised).
        deterministic: the copies are summed in a fixed order (see the module docstring).
        copies: the copies of each table a block keeps (one per warp when deterministic).
        lanes: the lanes of the launch, when known: a table it would count is sized by
            its counts (see :func:`counted`).
    """
    assessed = _assess(
        kernel, dtypes, lengths, deterministic=deterministic, copies=copies, lanes=lanes
    )
    return {name: reason for name, (_, reason) in assessed.items()}


def _assess(
    kernel: ir.KernelIR,
    dtypes: Mapping[str, Any],
    lengths: Mapping[str, int],
    *,
    deterministic: bool,
    copies: int,
    lanes: int | None,
) -> dict[str, tuple[SharedTable, str | None]]:
    """:func:`reasons`, each with the :class:`SharedTable` the table would be."""
    added = [node for node in ir.walk(kernel) if isinstance(node, ir.Accumulate)]
    adds = Counter(node.plane.name for node in added)
    wanted = {
        node.plane.name
        for node in added
        if deterministic or any(item.varying for item in node.index)
    }
    branched = {
        node.plane.name
        for stmt in ir.walk(kernel)
        if isinstance(stmt, ir.If) and stmt.cond.varying
        for node in ir.walk(stmt)
        if isinstance(node, ir.Accumulate)
    }
    found: dict[str, tuple[SharedTable, str | None]] = {}
    for plane in kernel.planes:
        if plane.name not in wanted:
            continue
        dtype = numpy_dtype(dtypes[plane.name])
        table = _shared_table(kernel, plane, dtypes, lanes, adds[plane.name], deterministic)
        reason: str | None = None
        if dtype.name not in PRIVATE_DTYPES:
            reason = f"it is {dtype.name} (privatised: {', '.join(sorted(PRIVATE_DTYPES))})"
        elif deterministic and plane.name in branched:
            reason = (
                "it is added into under an if whose condition depends on the lane (add "
                "`value if cond else 0.0` instead)"
            )
        elif table.cells is None and plane.name not in lengths:
            reason = "its length is not known"
        elif (size := shared_bytes((table,), lengths, copies)) > SHARED_BYTES:
            reason = (
                f"its {copies} cop{'y' if copies == 1 else 'ies'} take {size} bytes, over "
                f"the {SHARED_BYTES} bytes of shared memory a block's copies may take"
            )
        found[plane.name] = (table, reason)
    return found


def choose(
    kernel: ir.KernelIR,
    dtypes: Mapping[str, Any],
    lengths: Mapping[str, int],
    *,
    adds: TableAdds,
    lanes: int,
    blocks: Callable[[], int],
    warps: int,
) -> tuple[SharedTable, ...]:
    """The tables whose adds a launch of ``kernel`` over ``lanes`` lanes privatises (see
    the module docstring), in declaration order.

    Args:
        kernel: the kernel's IR.
        dtypes: each plane's dtype (or its name), by name.
        lengths: each flat table's length, by name.
        adds: the policy's ``"auto"``, ``"shared"``, ``"global"`` or ``"deterministic"``.
        lanes: the lanes of the launch.
        blocks: gives the blocks that fill the device, one per multiprocessor:
            ``"auto"`` privatises only when :func:`blocks_for` allows that many (it
            asks only when some table qualifies).
        warps: the warps of a block (a deterministic block keeps a copy per warp).

    Raises:
        HawkError: ``adds="shared"`` or ``"deterministic"`` and a table the kernel
            adds into cannot be privatised, or the copies do not fit together;
            ``adds`` is not one of the four.
    """
    check_option(adds, TableAdds, "adds")
    if adds == "global":
        return ()
    deterministic = adds == "deterministic"
    copies = warps if deterministic else 1
    chosen: list[SharedTable] = []
    found = _assess(
        kernel, dtypes, lengths, deterministic=deterministic, copies=copies, lanes=lanes
    )
    for name, (table, reason) in found.items():
        if reason is None:
            if shared_bytes((*chosen, table), lengths, copies) <= SHARED_BYTES:
                chosen.append(table)
                continue
            reason = (
                f"the copies of the tables privatised with it would exceed {SHARED_BYTES} bytes"
            )
        if adds != "auto":
            raise HawkError(
                f"kernel {kernel.name!r} cannot add into table {name!r} in shared memory "
                f"(adds={adds!r}): {reason}; build the plan with adds='auto' or adds='global'"
            )
    if adds == "auto" and chosen and blocks_for(tuple(chosen), lengths, lanes) < blocks():
        return ()
    return tuple(chosen)


def _shared_table(
    kernel: ir.KernelIR,
    plane: ir.Plane,
    dtypes: Mapping[str, Any],
    lanes: int | None,
    adds: int,
    deterministic: bool,
) -> SharedTable:
    """The :class:`SharedTable` of ``plane``, which the kernel adds into ``adds`` times:
    counted when :func:`counted` allows it, the launch is not deterministic and no count
    over ``lanes`` lanes can reach 2**32."""
    shape = plane.shape
    cells = None if shape is None else int(np.prod(shape))
    fits = not deterministic and lanes is not None and lanes * adds < 2**32
    value = counted(kernel, plane.name, dtypes) if fits else None
    if value is None:
        return SharedTable(plane.name, cells, numpy_dtype(dtypes[plane.name]).itemsize)
    return SharedTable(plane.name, cells, 4, value)


def counted(kernel: ir.KernelIR, name: str, dtypes: Mapping[str, Any]) -> float | None:
    """The constant every add of ``kernel`` into table ``name`` adds, when the table is a
    float table, the kernel adds into it outside any loop and always the same finite,
    non-zero constant (the adds can then be counted); else None."""
    if numpy_dtype(dtypes[name]).kind != "f":
        return None
    values = set()
    for node in ir.walk(kernel):
        if isinstance(node, ir.Loop) and any(
            isinstance(inner, ir.Accumulate) and inner.plane.name == name for inner in ir.walk(node)
        ):
            return None
        if isinstance(node, ir.Accumulate) and node.plane.name == name:
            if not isinstance(node.value, ir.Const):
                return None
            values.add(float(node.value.value))
    if len(values) != 1:
        return None
    (value,) = values
    return value if value != 0.0 and np.isfinite(value) else None
