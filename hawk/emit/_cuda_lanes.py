"""The lane loops of an emitted CUDA kernel: each plane's parameter (a pointer, or the
value of a Param passed by value), the loads of a lane's planes and the stores of its
results, the scalar grid-stride loop's and the vectorised loop's (:mod:`hawk.emit.cuda`
describes both)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hawk import ir
from hawk.emit import Names
from hawk.emit._cuda_helpers import C_TYPES, PLANE_FORMS
from hawk.kinds import PlaneKind

__all__ = ["LONG_BODY", "UNROLL", "VECTOR_BYTES", "Lanes", "vector_width"]

#: how many iterations of the grid-stride loop the compiler unrolls
UNROLL = 4

#: bytes a vectorised lane plane access moves at once
VECTOR_BYTES = 16

#: a lane body of more characters of C than this is emitted once per loop, neither
#: vectorised nor unrolled: each copy multiplies NVRTC's work, and such a body is bound
#: by its arithmetic, not by the loads the vectorised loop widens (a 2,000-term sum of
#: table reads, one line of 50 KB, took 49 s to compile in 16 copies)
LONG_BODY = 16_384


class Lanes:
    """What a kernel's lane loops load and store, and how.

    Attributes:
        kernel: the kernel's IR.
        dtypes: each plane's dtype, by name.
        real: the C type of the compute dtype.
        width: lanes per group of the vectorised loop (1: none, or a long body, see
            :meth:`fit`).
        values: the Params passed by value (in the compute type), by name.
        narrow: the lane loops count in 32 bits: fewer than 2**31 lanes, none of which
            runs a loop of its own (a looping lane keeps 64-bit counters: on the H200
            they were no slower, and 32-bit ones took more registers at 2048**3).
        together: the 32 threads of a warp run their passes of the scalar loop together,
            every one of them to the last (a lane past ``n`` runs none of the body), and
            ``hawk_lanes`` holds the warp's lanes that run the body.
        unroll: how many passes of a lane loop the compiler unrolls: :data:`UNROLL`, or 1
            when a lane runs a loop of its own or its body is long (:meth:`fit`).
        stored: each plane a lane stores, with the name of the value it stores
            (filled as the body is emitted).
    """

    def __init__(
        self,
        kernel: ir.KernelIR,
        dtypes: Mapping[str, np.dtype],
        real: str,
        width: int,
        values: frozenset[str] = frozenset(),
        narrow: bool = False,
        together: bool = False,
    ) -> None:
        self.kernel = kernel
        self.dtypes = dtypes
        self.real = real
        self.width = width
        self.values = values
        self.narrow = narrow and not kernel.loops()
        self.together = together
        # a lane that runs a loop of its own is not unrolled (its pass is long already, and
        # each unrolled copy of the inner loop costs registers: on the H200 the seed
        # contraction's adjoint at 2048**3 took 14.6 ms not unrolled against 17.8 unrolled)
        self.unroll = 1 if kernel.loops() else UNROLL
        self.stored: list[tuple[ir.Plane, str]] = []

    def fit(self, body: list[str]) -> None:
        """Emit a body of more than :data:`LONG_BODY` characters once per loop: no
        vectorised loop, no unrolling."""
        if sum(len(line) for line in body) > LONG_BODY:
            self.width, self.unroll = 1, 1

    def packed(self, body: list[str]) -> list[str]:
        """The vectorised lane loop: when every lane plane it loads or stores is aligned to
        :attr:`width` elements, each thread runs groups of that many consecutive lanes,
        loading and storing each plane's group as one vector; the lanes after the last whole
        group are left to the scalar loop, from ``start``."""
        width, counter = self.width, self.counter
        planes = self.planes()
        aligned = " | ".join(f"(unsigned long long){Names.plane(p.name)}" for p in planes)
        mask = width * max(self.dtypes[p.name].itemsize for p in planes) - 1
        lines = [
            f"    if ((({aligned}) & {mask}ULL) == 0) {{",
            f"        const long long groups = n / {width};",
            f"#pragma unroll {self.unroll}",
            f"        for ({counter} group = first; group < groups; group += stride) {{",
            f"            const {counter} base = group * {width};",
        ]
        stored = {plane for plane, _ in self.stored}
        loaded = set(self.loaded())
        for plane in planes:
            pack = self.pack(plane)
            if plane in loaded:
                lines.append(
                    f"            const {pack} {_group('i', plane)} = "
                    f"*reinterpret_cast<const {pack}*>({Names.plane(plane.name)} + base);"
                )
            if plane in stored:
                lines.append(f"            {pack} {_group('o', plane)};")
        lines += [
            "#pragma unroll",
            f"            for (int k = 0; k < {width}; ++k) {{",
            "                const long long lane = base + k;",
            *self.loads(4, packed=True),
            *("                " + line for line in body),
            *self.stores(4, packed=True),
            "            }",
        ]
        for plane in planes:
            if plane in stored:
                pack = self.pack(plane)
                lines.append(
                    f"            *reinterpret_cast<{pack}*>({Names.plane(plane.name)} + base) = "
                    f"{_group('o', plane)};"
                )
        lines += ["        }", f"        start = groups * {width};", "    }"]
        return lines

    def scalar(self, body: list[str]) -> list[str]:
        """The scalar lane loop: one lane per pass, from ``start`` (the lanes the vectorised
        loop left, when the kernel has one) or from the thread's first lane."""
        start = "start + first" if self.width > 1 else "first"
        if self.together:  # the warp's first lane, then each thread's own
            return [
                f"#pragma unroll {self.unroll}",
                f"    for ({self.counter} at = first - threadIdx.x % 32; at < n; at += stride) {{",
                "        const long long lane = at + threadIdx.x % 32;",
                "        const unsigned hawk_lanes = __ballot_sync(0xffffffffu, lane < n);",
                "        if (lane < n) {",
                *self.loads(3, packed=False),
                *("            " + line for line in body),
                *self.stores(3, packed=False),
                "        }",
                "    }",
            ]
        return [
            f"#pragma unroll {self.unroll}",
            f"    for ({self.counter} at = {start}; at < n; at += stride) {{",
            "        const long long lane = at;",
            *self.loads(2, packed=False),
            *("        " + line for line in body),
            *self.stores(2, packed=False),
            "    }",
        ]

    @property
    def counter(self) -> str:
        """The C type the lane loops count in: 32 bits when :attr:`narrow`."""
        return "unsigned int" if self.narrow else "long long"

    def pack(self, plane: ir.Plane) -> str:
        return f"hawk_pack<{C_TYPES[self.dtypes[plane.name].name]}, {self.width}>"

    def loaded(self) -> list[ir.Plane]:
        """The planes the kernel loads (lane planes and params), in declaration order."""
        used = {node.plane for node in ir.walk(self.kernel) if isinstance(node, ir.Load)}
        return [plane for plane in self.kernel.planes if plane in used]

    def planes(self) -> list[ir.Plane]:
        """The lane planes the kernel loads or stores, in declaration order."""
        used = set(self.loaded()) | {plane for plane, _ in self.stored}
        return [p for p in self.kernel.planes if p in used and p.is_lane]

    def loads(self, depth: int, *, packed: bool) -> list[str]:
        lines = []
        for plane in self.loaded():
            if plane.name in self.values:
                value = _value_name(plane.name)  # passed in the compute type
            else:
                if plane.kind == PlaneKind.PARAM:
                    element = f"{Names.plane(plane.name)}[0]"
                elif packed:
                    element = f"{_group('i', plane)}.v[k]"
                else:
                    element = f"{Names.plane(plane.name)}[lane]"
                value = self.convert(element, plane, to_real=True)
            lines.append("    " * depth + f"const {self.real} {Names.load(plane.name)} = {value};")
        return lines

    def stores(self, depth: int, *, packed: bool) -> list[str]:
        lines = []
        for plane, name in self.stored:
            target = f"{_group('o', plane)}.v[k]" if packed else f"{Names.plane(plane.name)}[lane]"
            value = self.convert(name, plane, to_real=False)
            lines.append("    " * depth + f"{target} = {value};")
        return lines

    def parameter(self, plane: ir.Plane) -> str:
        """The C parameter of ``plane``: a pointer to its elements, or for a Param passed
        by value its value in the compute type."""
        if plane.name in self.values:
            return f"const {self.real} {_value_name(plane.name)}"
        ctype = C_TYPES[self.dtypes[plane.name].name]
        if plane.kind in (PlaneKind.INPUT, PlaneKind.PARAM, PlaneKind.TABLE):
            return f"const {ctype}* __restrict__ {Names.plane(plane.name)}"
        return f"{ctype}* __restrict__ {Names.plane(plane.name)}"

    def convert(self, text: str, plane: ir.Plane, *, to_real: bool) -> str:
        """``text`` (an element of ``plane``) in the compute type, or ``text`` (a
        compute-type value) rounded to ``plane``'s type."""
        form = PLANE_FORMS[self.dtypes[plane.name].name]
        if form.c_type == self.real:
            return text
        if to_real:
            if form.load is None:
                return f"({self.real}){text}"
            widened = form.load.format(text)  # to float
            return widened if self.real == "float" else f"(double){widened}"
        return f"({form.c_type})({text})" if form.store is None else form.store.format(text)


def vector_width(
    kernel: ir.KernelIR, dtypes: Mapping[str, np.dtype], private: frozenset[str] = frozenset()
) -> int:
    """Lanes per vector access of the vectorised lane loop (1: the kernel has none).

    A kernel gets one when it loads or stores a lane plane and reads no table and adds to
    no table at a lane-dependent address (a gather or scatter gains nothing from running
    consecutive lanes on one thread, and a warp's adds must keep their lanes, see
    ``hawk_add_warp``), except into the tables named in ``private``, whose adds go to the
    block's copy in shared memory (a histogram's thread then loads several lanes' inputs
    at once); the widest lane plane then moves :data:`VECTOR_BYTES` at once.
    """
    planes = set()
    for node in ir.walk(kernel):
        if isinstance(node, ir.Accumulate) and node.plane.name in private:
            continue
        if isinstance(node, ir.Read | ir.Accumulate) and any(i.varying for i in node.index):
            return 1
        if isinstance(node, ir.Load | ir.Store) and node.plane.is_lane:
            planes.add(node.plane.name)
    if not planes:
        return 1
    return max(1, VECTOR_BYTES // max(np.dtype(dtypes[name]).itemsize for name in planes))


def _value_name(name: str) -> str:
    """The identifier of a Param passed by value, ``v_<name>`` (``vu_<hex>`` for a name
    that is not ASCII, see :class:`~hawk.emit.Names`): never a variable's ``v<k>_...``."""
    return Names.plane(name).replace("p", "v", 1)


def _group(prefix: str, plane: ir.Plane) -> str:
    """The identifier of a plane's loaded (``i``) or stored (``o``) group of lanes."""
    return Names.plane(plane.name).replace("p", prefix, 1)
