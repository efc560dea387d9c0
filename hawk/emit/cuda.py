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
address (an elementwise kernel) first runs a vectorised loop when every lane
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

Planes of 16-bit dtypes are ``hawk_f16`` / ``hawk_bf16`` (two-byte structs
the emitted code defines, laid out as IEEE binary16 and bfloat16) and need
no header: a load widens with ``cvt.f32.f16`` (bfloat16: a shift), a store
rounds to nearest even (``cvt.rn.f16``; bfloat16 rounds in integer
arithmetic, from float32, as ``ml_dtypes`` does on the host), and an add is
the hardware's 16-bit atomic (``red.add.noftz.f16`` from sm_70,
``.bf16`` from sm_90; a compare-and-swap loop before), which rounds the
value and then the sum to the plane's dtype. Planes of fp8 dtypes are
``hawk_e4m3`` / ``hawk_e5m2`` (one-byte structs): a load decodes the bits
exactly, a store rounds to nearest even in integer arithmetic (as ``ml_dtypes``
does, from the value itself), on any architecture; they take no adds.

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
    storage_types,
)
from hawk.emit._cuda_lanes import UNROLL, Lanes, vector_width
from hawk.emit.checks import CheckSite, LaneCheck, division_site, index_site
from hawk.errors import HawkError
from hawk.kinds import PlaneKind, Type

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
    """

    name: str
    source: str
    arguments: tuple[str, ...]
    lengths: tuple[str, ...] = ()
    checks: tuple[CheckSite, ...] = ()
    launch_checks: tuple[LaneCheck, ...] = ()
    width: int = 1


_BLOCK_SIZE_NOTE = "a grid-stride loop over lanes"


def symbol(name: str) -> str:
    """The ``extern "C"`` name of a kernel called ``name``: ``hawk_<name>``, or
    ``hawk_kernel_<name>`` where ``hawk_<name>`` is one of hawk's own identifiers
    (a kernel called ``pack`` or ``f16``), and ``hawk_kernel`` for a name that is not
    ASCII (NVRTC takes ASCII identifiers only)."""
    if not name.isascii():
        return "hawk_kernel"
    plain = "hawk_" + name
    return "hawk_kernel_" + name if plain in RESERVED else plain


def emit(
    kernel: ir.KernelIR,
    dtypes: Mapping[str, Any],
    *,
    checks: bool = True,
    vector: bool = True,
    warp_adds: bool = True,
    values: frozenset[str] = frozenset(),
    narrow: bool = False,
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
        narrow: the kernel is only launched over fewer than 2**31 lanes, so its lane
            loops count in 32 bits; the lane is still a ``long long`` to the kernel's
            arithmetic, which the compiler then knows lies below 2**32 (integer
            division by a constant, for one, becomes a 32-bit multiply).

    Raises:
        HawkError: a plane without a dtype, an unknown plane or another dtype; a
            name in ``values`` that is not a Param of the kernel.
    """
    planes = plane_dtypes(kernel, dtypes)
    params = [p.name for p in kernel.planes if p.kind == PlaneKind.PARAM]
    for name in sorted(values):
        if name not in params:
            raise HawkError(
                f"cannot pass plane {name!r} of kernel {kernel.name!r} by value: only a Param "
                f"is (its Params: {', '.join(params) or 'none'})"
            )
    return _Cuda(
        kernel,
        planes,
        checks,
        vector=vector,
        warp_adds=warp_adds,
        values=frozenset(values),
        narrow=narrow,
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
    ) -> None:
        super().__init__(kernel, C_TYPES[compute_dtype(dtypes).name], checks=checks)
        self.dtypes = dtypes
        self.clamps = False  # whether a read calls hawk_clamp
        self.sites: list[CheckSite] = []
        self.lengths = tuple(p.name for p in kernel.planes if p.is_table and p.axes is None)
        self.lets = kernel.lets()
        self.warp_adds = warp_adds
        width = vector_width(kernel, dtypes) if vector else 1
        self.lanes = Lanes(kernel, dtypes, self.real, width, values, narrow)

    def source(self) -> CudaSource:
        name = symbol(self.kernel.name)
        params = [self.lanes.parameter(p) for p in self.kernel.planes] + ["long long n"]
        params += [f"long long {_length(name)}" for name in self.lengths]
        params.append("unsigned long long* __restrict__ hawk_rec")
        self.lines = []
        for stmt in self.kernel.body:
            self.statement(stmt, 0)
        body = self.lines
        helpers = self.helpers()
        if self.clamps:
            helpers.insert(0, CLAMP_HELPER)
        if self.sites or "hawk_to_int(" in "\n".join(body):
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
        )

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
        target = f"&{Names.plane(stmt.plane.name)}[{self.offset(stmt.plane, indices)}]"
        varying = any(item.varying for item in stmt.index)
        if C_TYPES[self.dtypes[stmt.plane.name].name] in HALF_C_TYPES:
            # summed in the compute type, rounded to the plane's type by the add itself
            value = self.value(stmt.value, depth)
            if varying:
                add = f"hawk_atomic_add({target}, {value});"
            else:
                self.helper(("add", "uniform16"), HELPERS[("add", "uniform16")])
                add = f"hawk_add_uniform16({target}, {value});"
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
        element = f"{Names.plane(plane.name)}[{self.offset(plane, texts)}]"
        value = self.lanes.convert(element, plane, to_real=True)
        if not valid:
            return value
        self.clamps = True
        if plane.axes is None:  # a flat table may be empty: index 0 is then no element
            value = f"{_length(plane.name)} > 0LL ? {value} : {zero}"
        loaded = self.names.fresh("rd")
        self.emit(self.depth, f"const {self.real} {loaded} = {value};")
        return f"(({' && '.join(valid)}) ? {loaded} : {zero})"


def _length(name: str) -> str:
    """The identifier of a flat table's length parameter."""
    return Names.plane(name).replace("p", "n", 1)
