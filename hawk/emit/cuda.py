"""hawk IR -> CUDA C: one ``extern "C" __global__`` function, one thread per lane.

The emitted function takes, in order: one parameter per plane in declaration
order, a pointer to its elements (a param given as an array is a pointer to
its one element, so a captured graph reads its current value; a param named
in ``emit(..., values=...)`` is passed by value instead, in the compute type,
as ``const float v_<name>`` or ``const double v_<name>``, so a launch carries
its number and a captured graph keeps the number it was captured with), then
the lane count ``n`` as ``long long``, then the
length of each flat table (``CudaSource.lengths``) as ``long long``, then
a pointer to the kernel's error record (``unsigned long long[8]``, zeroed,
see :mod:`hawk.emit.checks`). Lanes are 64-bit. Thread
``blockIdx.x * blockDim.x + threadIdx.x`` runs that lane and then every
``gridDim.x * blockDim.x``-th lane after it (a grid-stride loop, unrolled
:data:`UNROLL` times, or not at all when a lane runs a loop of its own): launch
``ceil(n / block)`` blocks for one lane per thread, or fewer so that each thread
keeps several independent loads in flight, which a memory-bound kernel over many lanes
needs (a vectorised kernel: at least ``CudaSource.width`` lanes per thread, see below).
Every pointer is ``__restrict__``: eagle.plan refuses a written plane that shares memory
with another.

A kernel that reads no table and adds to no table at a lane-dependent
address (an elementwise kernel; adds into a privatised table do not count, as they
go to the block's copy) first runs a vectorised loop when every lane
plane it loads or stores is aligned to a group of lanes (checked in the
kernel, from the pointers): each thread takes groups of consecutive lanes
(4 in float32, 2 when a plane is float64) and loads and stores each plane's
group as one 16-byte (or narrower) access; the lanes after the last whole group,
and every lane of planes that are not aligned, run the scalar loop. A kernel emitted
``narrow`` (eagle.plan's choice below 2**31 lanes, for lanes that run no loop of their
own) counts both loops in 32 bits, so the compiler knows every lane lies below 2**32:
integer division and modulo of lane-derived values then take the 32-bit path of
``hawk_floordiv`` / ``hawk_mod``.

``Mutable[Table]`` adds are ``atomicAdd``; an add whose address is the same
on every lane (a param's gradient) is summed across a full warp with
shuffles first, so it costs one atomic per warp, and so is one whose address
depends on the lane only through ``lane // K`` for a multiple ``K`` of 32 (the
32 lanes of a warp share it, e.g. a contraction adjoint's ``f_bar`` at
``sample``), after a run-time check that the warp's addresses agree.

A table named in ``emit(..., shared=...)`` is privatised (:mod:`hawk.emit.private`):
its copies live in dynamic shared memory (``extern __shared__``; the launch passes
:func:`~hawk.emit.private.shared_bytes` of them). The kernel zeroes them, runs its lanes
with their adds into the block's copy, waits for the block's threads and adds each
non-zero cell into the table (a counted table's copy counts its adds of one constant
in ``unsigned int`` cells, and the flush adds count times the constant). No lane leaves the
lane loop early, so every thread
reaches both barriers. With ``deterministic=True`` each warp keeps its own copy and
the scalar loop runs a warp's 32 threads together: a thread past ``n`` runs no lane
but keeps pace, so the warp's lanes can take turns at each add (``hawk_add_ordered``).
Such a kernel takes a scratch buffer after the error record's pointer.

Planes of 16-bit dtypes are ``hawk_f16`` / ``hawk_bf16`` (two-byte structs
the emitted code defines, laid out as IEEE binary16 and bfloat16) and need
no header: a load widens with ``cvt.f32.f16`` (bfloat16: a shift), a store
rounds to nearest even (``cvt.rn.f16``; bfloat16 rounds in integer
arithmetic, from float32, as ``ml_dtypes`` does on the host). An add into a
16-bit table goes to a scratch of its sums in the compute type
(``CudaSource.sums``), by the adds of a float table; the last block to finish
(counted in ``hawk_done``) takes each sum out, leaving 0, and rounds the
element plus a sum that is not 0 once. Planes of fp8 dtypes are
``hawk_e4m3`` / ``hawk_e5m2`` (one-byte structs): a load decodes the bits
exactly, a store rounds to nearest even in integer arithmetic (as ``ml_dtypes``
does, from the value itself), on any architecture; they take no adds.

Ints are ``long long``; an int operation that may leave int64 is written through the
unsigned helpers (C leaves a signed overflow undefined), so it wraps as on the host. In
a kernel emitted ``narrow``, an int the emitter proves to fit 32 bits, every int on the
way to it too (``hawk.emit.checks.Ranges.int32``: constants, loop indices, the lane, what
``//``, ``%``, ``minimum`` and ``maximum`` keep small), is an ``int`` computed in 32
bits, which gives the same value (a GPU does 64-bit integer arithmetic in several 32-bit
instructions); so is a variable bound to a clamp, as ``minimum(maximum(j, 0), N - 1)``,
whatever ``j``. An operation that mixes the two widths widens its 32-bit operands, and a
table offset is 32-bit when its indices are and the table holds fewer than 2**31
elements.

Every check of :mod:`hawk.emit.checks` is one unsigned compare per index
axis (or one compare of a divisor with zero); a failure calls a helper kept
out of line, ``hawk_fail``, which records the first failure (an ``atomicMax``
on a word of device memory picks it). A failing add is dropped and a division
by zero made by 1. A checked read never waits on that call: ``hawk_clamp``
gives each checked index, or 0 for a failing one (calling ``hawk_fail`` for
it), and the read loads at the clamped offset unconditionally (always inside a
named table, whose declared extents are positive; a flat table, whose length
may be 0, is loaded only when it is not empty), then selects 0 for a failing
lane, so no branch guards the load. A
read's index, clamp and load are declared before the statement that uses
them; a read on a side of ``x if c else y`` or on the right of ``and`` or
``or`` makes that expression an ``if`` block, so a lane checks (and reads)
only the side it takes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hawk import ir
from hawk.emit import Names, compute_dtype, plane_dtypes
from hawk.emit._cstyle import CStyle
from hawk.emit._cuda_helpers import (
    C_TYPES,
    CHECK_HELPERS,
    CLAMP_HELPER,
    HALF_C_TYPES,
    HELPERS,
    PACK,
    RESERVED,
    SUM_PREFIX,
    storage_types,
)
from hawk.emit._cuda_lanes import UNROLL, Lanes, vector_width
from hawk.emit.checks import (
    INT32_LANES,
    MAX_LANES,
    CheckSite,
    IntOverflow,
    LaneCheck,
    division_site,
    index_site,
)
from hawk.emit.private import SharedTable, reasons
from hawk.errors import HawkError
from hawk.kinds import PlaneKind, Type, check_option

__all__ = ["UNROLL", "CudaSource", "emit", "symbol"]


@dataclass(frozen=True)
class CudaSource:
    """One emitted kernel.

    Attributes:
        name: the ``extern "C"`` function's name.
        source: the CUDA C source.
        arguments: the plane names in argument order (``n`` follows them).
        lengths: the flat tables whose lengths follow ``n``, in order (the
            error record's pointer comes last).
        checks: its check sites (:mod:`hawk.emit.checks`); a record's site
            number indexes them.
        launch_checks: the checks the kernel leaves to its launch, of indices
            of the lane and loop indices (:class:`~hawk.emit.checks.LaneCheck`),
            in program order: whoever launches it makes them first, with
            :func:`~hawk.emit.checks.check_launch`.
        width: the lanes of one group of the vectorised lane loop (1: the kernel
            has none); a launch over many lanes gives each thread at least one
            group, as fewer threads than groups leave the rest idle.
        sums: the 16-bit tables the kernel adds into, in order: after the error
            record it takes, for each, a scratch array of its element count in the
            compute type, then one ``unsigned int`` counter, all zero before the
            first launch; each launch leaves them zero.
        shared: the tables whose adds each block sums in shared memory
            (:mod:`hawk.emit.private`): a launch passes
            :func:`~hawk.emit.private.shared_bytes` of them as its dynamic shared
            memory and runs a bounded grid.
        deterministic: the adds into the ``shared`` tables are summed in a fixed order
            (one copy per warp, a scratch buffer after the error record's pointer:
            :func:`~hawk.emit.private.scratch_bytes`).
    """

    name: str
    source: str
    arguments: tuple[str, ...]
    lengths: tuple[str, ...] = ()
    checks: tuple[CheckSite, ...] = ()
    launch_checks: tuple[LaneCheck, ...] = ()
    width: int = 1
    sums: tuple[str, ...] = ()
    shared: tuple[SharedTable, ...] = ()
    deterministic: bool = False


_BLOCK_SIZE_NOTE = "a grid-stride loop over lanes"


def symbol(name: str) -> str:
    """The ``extern "C"`` name of a kernel called ``name``: ``hawk_<name>``, or
    ``hawk_kernel_<name>`` where ``hawk_<name>`` is one of hawk's own identifiers
    (a kernel called ``pack`` or ``f16``), and ``hawk_kernel`` for a name that is not
    ASCII (NVRTC takes ASCII identifiers only)."""
    if not name.isascii():
        return "hawk_kernel"
    plain = "hawk_" + name
    reserved = plain in RESERVED or plain.startswith(SUM_PREFIX)
    return "hawk_kernel_" + name if reserved else plain


def emit(
    kernel: ir.KernelIR,
    dtypes: Mapping[str, Any],
    *,
    checks: bool = True,
    vector: bool = True,
    warp_adds: bool = True,
    values: frozenset[str] = frozenset(),
    narrow: bool = False,
    int_overflow: IntOverflow = "wrap",
    shared: tuple[SharedTable, ...] = (),
    deterministic: bool = False,
) -> CudaSource:
    """The CUDA C of ``kernel`` for the given plane dtypes.

    Args:
        kernel: the kernel's IR.
        dtypes: a dtype of :data:`hawk.emit.DTYPES` for every plane, by name.
        checks: False leaves out the checks of :mod:`hawk.emit.checks` (and
            ``int()`` of NaN is whatever the hardware gives): unsafe, as a bad
            index then reads or writes outside its table; for measuring their cost.
        vector: False leaves out the vectorised lane loop; for measuring it.
        warp_adds: False makes every table add at a lane-dependent address a
            per-lane ``atomicAdd``, even where a warp's lanes share it; for
            measuring the warp sums.
        values: the Params passed by value: each is a parameter of the compute
            type (``const float v_<name>``) holding the number itself, and its
            load is that value (its dtype in ``dtypes`` counts toward the compute
            type as any plane's). Every other Param is a pointer to its one element.
        narrow: the kernel is only launched over fewer than
            ``hawk.emit.checks.INT32_LANES`` (2**31) lanes, so the lane fits 32 bits: the
            int values proved to fit 32 bits with it are ``int`` (see the module
            docstring), and the lane loops of a kernel whose lanes run no loop of their
            own count in 32 bits.
        int_overflow: ``"wrap"`` (int64 values wrap, two's complement) or ``"check"``
            (the first lane whose int value leaves int64 is recorded, and raises
            ``HawkOverflowError``).
        shared: the tables whose adds each block sums in a copy in shared memory
            (from :func:`hawk.emit.private.choose`): the kernel zeroes the copies,
            runs its lanes, waits for the block's threads and adds each non-zero cell
            into the table.
        deterministic: sum the adds into the ``shared`` tables in an order fixed by the
            lane count (see :mod:`hawk.emit.private`): each warp adds into its own
            copies, its lanes in turn; each block writes its sums into its row of the
            scratch buffer (a parameter after the error record's pointer), and the
            last block to finish adds their sums, in block order, into the tables.

    Raises:
        HawkError: a plane without a dtype, an unknown plane or another dtype; a
            name in ``values`` that is not a Param of the kernel; a table in
            ``shared`` that cannot be privatised.
    """
    planes = plane_dtypes(kernel, dtypes)
    params = [p.name for p in kernel.planes if p.kind == PlaneKind.PARAM]
    for name in sorted(values):
        if name not in params:
            raise HawkError(
                f"cannot pass plane {name!r} of kernel {kernel.name!r} by value: only a Param "
                f"is (its Params: {', '.join(params) or 'none'})"
            )
    if shared:
        lengths = {t.name: t.cells or 0 for t in shared}
        possible = reasons(kernel, planes, lengths, deterministic=deterministic)
        for table in shared:
            reason = possible.get(table.name, "it takes no add at a lane-dependent address")
            if reason is not None:
                raise HawkError(
                    f"cannot privatise table {table.name!r} of kernel {kernel.name!r}: {reason}"
                )
    return _Cuda(
        kernel,
        planes,
        checks,
        vector=vector,
        warp_adds=warp_adds,
        values=frozenset(values),
        narrow=narrow,
        int_overflow=check_option(int_overflow, IntOverflow, "int_overflow"),
        shared=shared,
        deterministic=deterministic and bool(shared),
    ).source()


class _Cuda(CStyle):
    """The CUDA target of the C-family renderer: one ``__global__`` function whose
    threads run lanes, reads clamped and checked into the error record, adds atomic."""

    inline = "__device__ __forceinline__"

    def __init__(
        self,
        kernel: ir.KernelIR,
        dtypes: dict[str, np.dtype],
        checks: bool,
        *,
        vector: bool,
        warp_adds: bool,
        values: frozenset[str],
        narrow: bool,
        int_overflow: IntOverflow,
        shared: tuple[SharedTable, ...] = (),
        deterministic: bool = False,
    ) -> None:
        super().__init__(
            kernel,
            C_TYPES[compute_dtype(dtypes).name],
            checks=checks,
            int_overflow=int_overflow,
            lanes=INT32_LANES if narrow else MAX_LANES,
        )
        self.dtypes = dtypes
        self.clamps = False  # whether a read calls hawk_clamp
        self.lengths = tuple(p.name for p in kernel.planes if p.is_table and p.axes is None)
        self.lets = kernel.lets()
        self.warp_adds = warp_adds
        # the 16-bit tables added into: summed in the compute type, rounded once (_finish)
        self.sums = tuple(
            p.name
            for p in kernel.planes
            if p.kind == PlaneKind.ACCUMULATOR and C_TYPES[dtypes[p.name].name] in HALF_C_TYPES
        )
        # a deterministic kernel's warps run their lanes together (see copies)
        private = frozenset(table.name for table in shared)
        width = vector_width(kernel, dtypes, private) if vector and not deterministic else 1
        self.lanes = Lanes(kernel, dtypes, self.real, width, values, narrow, deterministic)
        self.shared = shared
        self.private = private
        self.counted = {table.name for table in shared if table.count is not None}
        self.deterministic = deterministic

    def source(self) -> CudaSource:
        name = symbol(self.kernel.name)
        params = [self.lanes.parameter(p) for p in self.kernel.planes] + ["long long n"]
        params += [f"long long {_length(name)}" for name in self.lengths]
        params.append("unsigned long long* __restrict__ hawk_rec")
        params += [f"{self.real}* __restrict__ {_sum(name)}" for name in self.sums]
        if self.sums:
            params.append("unsigned int* __restrict__ hawk_done")
        if self.deterministic:
            params.append("unsigned char* __restrict__ hawk_scratch")
        self.lines = []
        for stmt in self.kernel.body:
            self.statement(stmt, 0)
        body = self.lines
        self.lanes.fit(body)
        helpers = self.helpers()
        if self.clamps:
            helpers.insert(0, CLAMP_HELPER)
        if self.sites:
            helpers.insert(0, self.fill(CHECK_HELPERS))
        helpers[:0] = storage_types({C_TYPES[d.name] for d in self.dtypes.values()})
        names = ", ".join(p.name for p in self.kernel.planes)
        order = "one pointer each, declaration order"
        if self.lanes.values:
            by_value = ", ".join(p.name for p in self.kernel.planes if p.name in self.lanes.values)
            order += f"; {by_value} by value, as {self.real}"
        header = [
            f"// hawk kernel {self.kernel.name!r}, computing in {self.real} (generated).",
            f"// Arguments: {names} ({order}), then the lane count",
            "// n (long long), each flat table's length (long long), then the error record;",
            f"// one thread per lane, {_BLOCK_SIZE_NOTE}.",
        ]
        first = "(long long)blockIdx.x * blockDim.x + threadIdx.x"
        lanes = [
            "    const long long stride = (long long)gridDim.x * blockDim.x;",
            f"    const long long first = {first};",
        ]
        if self.lanes.width > 1:
            helpers.append(PACK)
            lanes += [
                "    long long start = 0;  // the first lane the scalar loop runs",
                *self.lanes.packed(body),
            ]
        lanes += self.lanes.scalar(body)
        if self.shared:
            tables = ", ".join(t.name for t in self.shared)
            if self.deterministic:
                header += [
                    f"// Adds into {tables} go to the warp's copy in shared memory, in lane order;",
                    "// each block's sums go to its row of hawk_scratch, summed in block "
                    "order by the last.",
                ]
            else:
                header.append(
                    f"// Adds into {tables} go to the block's copy in shared memory, flushed "
                    "after its lanes."
                )
            lanes = self.copies(lanes)
        lanes += self.finish()
        text = "\n".join(
            [
                *header,
                *helpers,
                f'extern "C" __global__ void {name}({", ".join(params)})',
                "{",
                *lanes,
                "}",
                "",
            ]
        )
        arguments = tuple(p.name for p in self.kernel.planes)
        return CudaSource(
            name,
            text,
            arguments,
            self.lengths,
            tuple(self.sites),
            self.ranges.launch_checks,
            self.lanes.width,
            self.sums,
            self.shared,
            self.deterministic,
        )

    def copies(self, lanes: list[str]) -> list[str]:
        """The lane loops ``lanes`` between the zeroing of the block's copies of the
        privatised tables and their flush into the tables, a barrier on each side (no
        lane leaves the loops early, so every thread reaches both)."""
        copies = "hawk_warps * " if self.deterministic else ""
        start = ["    extern __shared__ unsigned long long hawk_shared[];"]
        if self.deterministic:
            start.append("    const long long hawk_warps = blockDim.x / 32;")
        zero, flush = [], []
        offset = "0LL"
        for table in self.shared:
            ctype = C_TYPES[self.dtypes[table.name].name]
            counts = "unsigned int" if table.count is not None else ctype
            copy, cells = _copy(table.name), _cells(table.name)
            size = _length(table.name) if table.cells is None else f"{table.cells}LL"
            start += [
                f"    const long long {cells} = {size};",
                f"    {counts}* const {copy} = reinterpret_cast<{counts}*>(",
                f"        reinterpret_cast<char*>(hawk_shared) + {offset});",
            ]
            if self.deterministic:
                start.append(
                    f"    {ctype}* const {_warp_copy(table.name)} = {copy} + "
                    f"(long long)(threadIdx.x / 32) * {cells};"
                )
            offset = f"{offset} + ({copies}{cells} * {table.itemsize}LL + 15LL) / 16LL * 16LL"
            zero.append(
                f"    for (long long c = threadIdx.x; c < {copies}{cells}; c += blockDim.x) "
                f"{copy}[c] = ({counts})0;"
            )
            target = Names.plane(table.name)
            if table.count is not None:  # the block's count of adds, times their constant
                # the constant as the kernel computes it: rounded to float in float32
                value = table.count if self.real == "double" else float(np.float32(table.count))
                flush += [
                    f"    for (long long c = threadIdx.x; c < {cells}; c += blockDim.x) {{",
                    f"        const unsigned int count = {copy}[c];",
                    f"        if (count != 0u) atomicAdd(&{target}[c], "
                    f"({ctype})((double)count * {value!r}));",
                    "    }",
                ]
            elif not self.deterministic:
                flush += [
                    f"    for (long long c = threadIdx.x; c < {cells}; c += blockDim.x) {{",
                    f"        const {ctype} sum = {copy}[c];",
                    f"        if (sum != ({ctype})0) atomicAdd(&{target}[c], sum);",
                    "    }",
                ]
        if self.deterministic:
            flush = self.ordered_flush()
        return [*start, *zero, "    __syncthreads();", *lanes, "    __syncthreads();", *flush]

    def ordered_flush(self) -> list[str]:
        """A deterministic kernel's end: the block's sums of its warps' copies, in warp
        order, into its rows of the scratch buffer; then the last block to finish (the
        count of finished blocks, at the buffer's start, says which; it sets it back to
        zero) adds each table's rows, in block order, into the table."""
        rows, final = [], []
        offset = "16LL"
        for table in self.shared:
            ctype = C_TYPES[self.dtypes[table.name].name]
            copy, cells = _copy(table.name), _cells(table.name)
            row = _rows(table.name)
            rows += [
                f"    {ctype}* const {row} = reinterpret_cast<{ctype}*>(hawk_scratch + {offset});",
                f"    for (long long c = threadIdx.x; c < {cells}; c += blockDim.x) {{",
                f"        {ctype} sum = {copy}[c];",
                "        for (long long w = 1; w < hawk_warps; ++w)",
                f"            sum += {copy}[w * {cells} + c];",
                f"        {row}[blockIdx.x * {cells} + c] = sum;",
                "    }",
            ]
            offset = (
                f"{offset} + ((long long)gridDim.x * {cells} * {table.itemsize}LL + 15LL) "
                "/ 16LL * 16LL"
            )
            final += [
                f"        for (long long c = threadIdx.x; c < {cells}; c += blockDim.x) {{",
                f"            {ctype} sum = __ldcg(&{row}[c]);",
                "#pragma unroll 8",  # loads in flight; the adds stay in block order
                "            for (long long b = 1; b < gridDim.x; ++b)",
                f"                sum += __ldcg(&{row}[b * {cells} + c]);",
                f"            if (sum != ({ctype})0) {Names.plane(table.name)}[c] += sum;",
                "        }",
            ]
        return [
            *rows,
            "    __threadfence();",
            "    __syncthreads();",
            "    __shared__ bool hawk_last;",
            "    unsigned int* const hawk_ticket = reinterpret_cast<unsigned int*>(hawk_scratch);",
            "    if (threadIdx.x == 0) hawk_last = atomicAdd(hawk_ticket, 1u) == gridDim.x - 1;",
            "    __syncthreads();",
            "    if (hawk_last) {",
            "        __threadfence();",
            *final,
            "        if (threadIdx.x == 0) *hawk_ticket = 0u;",
            "    }",
        ]

    def finish(self) -> list[str]:
        """The end of a kernel that adds into 16-bit tables: the last block to finish
        (its ticket from ``hawk_done``) takes each element's sum out of the scratch
        (leaving 0) and, where it is not 0, rounds the element plus it once."""
        if not self.sums:
            return []
        take = (
            "atomicExch(&{s}[i], 0.0f)"
            if self.real == "float"
            else "__longlong_as_double((long long)atomicExch((unsigned long long*)&{s}[i], 0ULL))"
        )
        lines = [
            "    // 16-bit tables: this launch's sums, rounded into each element once",
            "    __shared__ bool hawk_last;",
            "    __threadfence();  // this thread's adds, before its block's ticket",
            "    __syncthreads();",
            "    if (threadIdx.x == 0) hawk_last = atomicAdd(hawk_done, 1u) == gridDim.x - 1u;",
            "    __syncthreads();",
            "    if (hawk_last) {",
        ]
        for name in self.sums:
            plane = next(p for p in self.kernel.planes if p.name == name)
            size = (
                _length(name) if plane.axes is None else f"{math.prod(e for _, e in plane.axes)}LL"
            )
            table, short = Names.plane(name), C_TYPES[self.dtypes[name].name].removeprefix("hawk_")
            lines += [
                f"        for (long long i = threadIdx.x; i < {size}; i += blockDim.x) {{",
                f"            const {self.real} s = {take.format(s=_sum(name))};",
                f"            if (s != ({self.real})0)",
                f"                {table}[i] = hawk_round_{short}(hawk_widen({table}[i]) + s);",
                "        }",
            ]
        lines += ["        if (threadIdx.x == 0) *hawk_done = 0u;", "    }"]
        return lines

    # -- what the C-family renderer leaves to its target ---------------------------------

    def nonfinite(self, value: float) -> str:
        bits = {
            ("float", "inf"): "__int_as_float(0x7f800000)",
            ("float", "-inf"): "__int_as_float(0xff800000)",
            ("float", "nan"): "__int_as_float(0x7fc00000)",
            ("double", "inf"): "__longlong_as_double(0x7ff0000000000000LL)",
            ("double", "-inf"): "__longlong_as_double(0xfff0000000000000LL)",
            ("double", "nan"): "__longlong_as_double(0x7ff8000000000000LL)",
        }
        return bits[(self.real, repr(float(value)))]

    def store(self, stmt: ir.Store, depth: int) -> None:
        """A named value, which the lane loops store (every store comes last, at the top
        level)."""
        name = self.names.fresh("store")
        self.emit(depth, f"const {self.real} {name} = {self.value(stmt.value, depth)};")
        self.lanes.stored.append((stmt.plane, name))

    def divisor(self, node: ir.Binary, text: str) -> str:
        site = len(self.sites)
        self.sites.append(division_site(node))
        return f"hawk_divisor({text}, hawk_rec, {site}LL, lane)"

    def accumulate(self, stmt: ir.Accumulate, depth: int) -> None:
        self.depth = depth  # where reads in the indices declare their loads
        declarations, indices, checks = self.indices(stmt)
        plane = stmt.plane.name
        base = Names.plane(plane)
        if plane in self.private:
            base = _warp_copy(plane) if self.deterministic else _copy(plane)
        offset = self.offset(stmt, indices, bool(checks))
        target = f"&{base}[{offset}]"
        varying = any(item.varying for item in stmt.index)
        if self.deterministic and plane in self.private:
            value = self.lanes.convert(self.value(stmt.value, depth), stmt.plane, to_real=False)
            self.helper(("add", "ordered"), HELPERS[("add", "ordered")])
            ok = checks or "true"
            self.emit(depth, "{")
            for line in declarations:
                self.emit(depth + 1, line)
            self.emit(depth + 1, f"hawk_add_ordered({target}, {value}, {ok}, hawk_lanes);")
            self.emit(depth, "}")
            return
        summed = stmt.plane.name in self.sums
        if summed:  # into its scratch sums, in the compute type (rounded by finish())
            target = f"&{_sum(stmt.plane.name)}[{offset}]"
        if plane in self.counted:  # one more add of the table's constant
            add = f"atomicAdd({target}, 1u);"
        elif summed and varying and not self.warp_adds:
            add = f"atomicAdd({target}, {self.value(stmt.value, depth)});"
        elif summed and not varying:
            self.helper(("add", "uniform"), HELPERS[("add", "uniform")])
            add = f"hawk_add_uniform({target}, {self.value(stmt.value, depth)});"
        elif summed and all(self.warp_same(item) for item in stmt.index):
            self.helper(("add", "warp"), HELPERS[("add", "warp")])
            add = f"hawk_add_warp({target}, {self.value(stmt.value, depth)});"
        elif summed:
            add = f"atomicAdd({target}, {self.value(stmt.value, depth)});"
        elif varying and self.warp_adds and all(self.warp_same(item) for item in stmt.index):
            value = self.lanes.convert(self.value(stmt.value, depth), stmt.plane, to_real=False)
            self.helper(("add", "warp"), HELPERS[("add", "warp")])
            add = f"hawk_add_warp({target}, {value});"
        elif varying:
            value = self.lanes.convert(self.value(stmt.value, depth), stmt.plane, to_real=False)
            add = f"atomicAdd({target}, {value});"
        else:  # the same address on every lane
            value = self.lanes.convert(self.value(stmt.value, depth), stmt.plane, to_real=False)
            self.helper(("add", "uniform"), HELPERS[("add", "uniform")])
            add = f"hawk_add_uniform({target}, {value});"
        if not checks:
            self.emit(depth, add)
            return
        self.emit(depth, "{")
        for line in declarations:
            self.emit(depth + 1, line)
        self.emit(depth + 1, f"if ({checks}) {add}")
        self.emit(depth, "}")

    def warp_same(self, node: ir.Expr) -> bool:
        """True when ``node`` is the same on the 32 consecutive lanes ``32q .. 32q + 31``
        that one warp of the scalar lane loop runs: it depends on the lane only through
        ``lane // K`` for a constant ``K`` that is a multiple of 32."""
        if not node.varying:
            return True
        if isinstance(node, ir.Ref):
            value = self.lets.get(node.var)
            return value is not None and self.warp_same(value)
        if isinstance(node, ir.Binary) and node.op == "//" and node.type == Type.INT:
            right = node.right
            lane = node.left
            while isinstance(lane, ir.Ref) and lane.var in self.lets:
                lane = self.lets[lane.var]
            if (
                isinstance(lane, ir.Lane)
                and isinstance(right, ir.Const)
                and right.value > 0
                and right.value % 32 == 0
            ):
                return True
        if isinstance(node, ir.Lane | ir.Load):
            return False
        children = node.children()
        return bool(children) and all(self.warp_same(child) for child in children)

    def indices(self, node: ir.Accumulate) -> tuple[list[str], list[str], str]:
        """An add's index declarations, index texts and check (empty: none)."""
        declarations, texts, checks = [], [], []
        for position, item in enumerate(node.index):
            text = self.expr(item)
            if self.ranges.axis_checked(node.plane, position, item):
                name = self.names.fresh("ix")
                declarations.append(f"const long long {name} = {text};")
                text = name
                site, extent = self.index_check(node, position)
                checks.append(f"hawk_in({name}, {extent}, hawk_rec, {site}LL, lane)")
            texts.append(text)
        return declarations, texts, " && ".join(checks)

    def index_check(self, node: ir.Read | ir.Accumulate, position: int) -> tuple[int, str]:
        """A new check site for axis ``position`` of a table access, and its extent's text."""
        site = index_site(node, position)
        self.sites.append(site)
        extent = _length(node.plane.name) if site.extent is None else f"{site.extent}LL"
        return len(self.sites) - 1, extent

    def read(self, node: ir.Read) -> str:
        """A table read; a checked one declares, in the current statement's place, each
        checked index clamped into its axis and the load at the clamped offset (always
        made, so no branch guards it), and gives that load's value, or 0 for a lane whose
        index failed its check."""
        plane = node.plane
        texts = [self.expr(item) for item in node.index]
        zero = f"({self.real})0"
        valid = []
        for position, item in enumerate(node.index):
            if not self.ranges.axis_checked(plane, position, item):
                continue
            text = texts[position]
            if not text.isidentifier():
                text = self.names.fresh("ix")
                self.emit(self.depth, f"const long long {text} = {texts[position]};")
            site, extent = self.index_check(node, position)
            texts[position] = self.names.fresh("cx")
            self.emit(
                self.depth,
                f"const long long {texts[position]} = "
                f"hawk_clamp({text}, {extent}, hawk_rec, {site}LL, lane);",
            )
            valid.append(f"{texts[position]} == {text}")
        element = f"{Names.plane(plane.name)}[{self.offset(node, texts, bool(valid))}]"
        value = self.lanes.convert(element, plane, to_real=True)
        if not valid:
            return value
        self.clamps = True
        if plane.axes is None:  # a flat table may be empty: index 0 is then no element
            value = f"{_length(plane.name)} > 0LL ? {value} : {zero}"
        loaded = self.names.fresh("rd")
        self.emit(self.depth, f"const {self.real} {loaded} = {value};")
        return f"(({' && '.join(valid)}) ? {loaded} : {zero})"


def _sum(name: str) -> str:
    """The identifier of a 16-bit table's scratch sums."""
    return SUM_PREFIX + Names.plane(name).removeprefix("p_")


def _length(name: str) -> str:
    """The identifier of a flat table's length parameter."""
    return Names.plane(name).replace("p", "n", 1)


def _copy(name: str) -> str:
    """The identifier of a privatised table's copy in shared memory."""
    return Names.plane(name).replace("p", "s", 1)


def _warp_copy(name: str) -> str:
    """The identifier of the warp's own copy of a privatised table (deterministic)."""
    return Names.plane(name).replace("p", "w", 1)


def _rows(name: str) -> str:
    """The identifier of a privatised table's rows of block sums in the scratch buffer."""
    return Names.plane(name).replace("p", "r", 1)


def _cells(name: str) -> str:
    """The identifier of a privatised table's element count."""
    return Names.plane(name).replace("p", "c", 1)
