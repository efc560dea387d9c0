"""hawk IR -> numpy: one Python function that runs every lane at once.

A varying value is a 1-D array with one element per lane; a uniform value a
numpy scalar (or a Python int). Loops iterate their range in Python, each
iteration whole-array work. An ``if`` on a varying condition runs both blocks
for every lane and selects with ``np.where``; table reads are clamped to the
table (``take(..., mode="clip")``) so the untaken side of an ``if`` cannot
fail, and ``Mutable[Table]`` adds apply only where their block was taken.
An ``if`` on a uniform condition is a Python ``if``.

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
from hawk.emit import Names, compute_dtype, plane_dtypes
from hawk.functions import FUNCTIONS
from hawk.kinds import PlaneKind, Type

__all__ = ["HostProgram", "emit"]


@dataclass(frozen=True)
class HostProgram:
    """One emitted kernel.

    Attributes:
        name: the function's name.
        source: its Python source.
        function: the function, ``function(*planes, n)``.
        arguments: the plane names in argument order (``n`` follows them).
    """

    name: str
    source: str
    function: Callable[..., None]
    arguments: tuple[str, ...]


def emit(kernel: ir.KernelIR, dtypes: Mapping[str, Any]) -> HostProgram:
    """The numpy program of ``kernel`` for the given plane dtypes.

    Args:
        kernel: the kernel's IR.
        dtypes: a dtype (float32 or float64) for every plane, by name.

    Raises:
        HawkError: a plane without a dtype, an unknown plane or another dtype.
    """
    planes = plane_dtypes(kernel, dtypes)
    return _Emitter(kernel, planes).program()


class _Emitter:
    def __init__(self, kernel: ir.KernelIR, dtypes: dict[str, np.dtype]) -> None:
        self.kernel = kernel
        self.dtypes = dtypes
        self.real = compute_dtype(dtypes)
        self.names = Names()
        self.constants: dict[str, Any] = {}
        self.lines: list[str] = []

    def program(self) -> HostProgram:
        name = "hawk_" + (self.kernel.name if self.kernel.name.isascii() else "kernel")
        arguments = tuple(p.name for p in self.kernel.planes)
        params = ", ".join([*(Names.plane(a) for a in arguments), "n"])
        self.emit(1, "with _np.errstate(all='ignore'):")
        if any(isinstance(node, ir.Lane) for node in ir.walk(self.kernel)):
            self.emit(2, "lane = _np.arange(n, dtype=_np.int64)")
        self.loads(2)
        self.block(self.kernel.body, 2, None)
        source = "\n".join([f"def {name}({params}):", *self.lines, ""])
        namespace: dict[str, Any] = {"_np": np, "_real": self.real.type, **self.constants}
        exec(compile(source, f"<hawk host kernel {self.kernel.name}>", "exec"), namespace)
        return HostProgram(name, source, namespace[name], arguments)

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

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
        if isinstance(stmt, ir.Let):
            self.emit(depth, f"{self.names.var(stmt.var)} = {self.expr(stmt.value)}")
        elif isinstance(stmt, ir.Loop):
            for carry in stmt.carries:
                self.emit(depth, f"{self.names.var(carry.var)} = {self.expr(carry.init)}")
            index = self.names.var(stmt.index)
            self.emit(depth, f"for {index} in range({stmt.start}, {stmt.stop}, {stmt.step}):")
            self.block(stmt.body, depth + 1, mask)
            if stmt.carries:
                targets = ", ".join(self.names.var(c.var) for c in stmt.carries)
                updates = ", ".join(self.expr(c.update) for c in stmt.carries)
                self.emit(depth + 1, f"{targets} = {updates}")
        elif isinstance(stmt, ir.If):
            self.branch(stmt, depth, mask)
        elif isinstance(stmt, ir.Store):
            self.emit(depth, f"{Names.plane(stmt.plane.name)}[...] = {self.expr(stmt.value)}")
        elif isinstance(stmt, ir.Accumulate):
            self.accumulate(stmt, depth, mask)
        else:
            raise TypeError(f"not a hawk statement: {stmt!r}")

    def branch(self, stmt: ir.If, depth: int, mask: str | None) -> None:
        if not stmt.cond.varying:
            self.emit(depth, f"if {self.expr(stmt.cond)}:")
            self.block(stmt.then, depth + 1, mask)
            for merge in stmt.merges:
                self.emit(depth + 1, f"{self.names.var(merge.var)} = {self.expr(merge.then_value)}")
            self.emit(depth, "else:")
            self.block(stmt.orelse, depth + 1, mask)
            for merge in stmt.merges:
                self.emit(depth + 1, f"{self.names.var(merge.var)} = {self.expr(merge.else_value)}")
            return
        cond = self.names.fresh("cond")
        self.emit(depth, f"{cond} = {self.expr(stmt.cond)}")
        then_mask = else_mask = mask
        if _has_accumulate(stmt.then):
            then_mask = self.names.fresh("mask")
            outer = f"{mask} & " if mask else ""
            self.emit(depth, f"{then_mask} = {outer}{cond}")
        if _has_accumulate(stmt.orelse):
            else_mask = self.names.fresh("mask")
            outer = f"{mask} & " if mask else ""
            self.emit(depth, f"{else_mask} = {outer}~{cond}")
        self.block_inline(stmt.then, depth, then_mask)
        then_values = [self.expr(m.then_value) for m in stmt.merges]
        self.block_inline(stmt.orelse, depth, else_mask)
        for merge, then_value in zip(stmt.merges, then_values, strict=True):
            else_value = self.expr(merge.else_value)
            self.emit(
                depth,
                f"{self.names.var(merge.var)} = _np.where({cond}, {then_value}, {else_value})",
            )

    def block_inline(self, stmts: tuple[ir.Stmt, ...], depth: int, mask: str | None) -> None:
        for stmt in stmts:
            self.statement(stmt, depth, mask)

    def accumulate(self, stmt: ir.Accumulate, depth: int, mask: str | None) -> None:
        target = Names.plane(stmt.plane.name)
        offset = self.offset(stmt.plane, stmt.index)
        value = self.expr(stmt.value)
        index_varying = any(i.varying for i in stmt.index)
        if not index_varying:
            if stmt.value.varying:
                total = f"_np.sum({value}[{mask}])" if mask else f"_np.sum({value})"
            else:
                count = f"_np.count_nonzero({mask})" if mask else "n"
                total = f"{value} * {count}"
            self.emit(depth, f"{target}[{offset}] += {total}")
            return
        if mask:
            offset = f"({offset})[{mask}]"
            if stmt.value.varying:
                value = f"({value})[{mask}]"
        self.emit(depth, f"_np.add.at({target}, {offset}, {value})")

    # -- expressions ---------------------------------------------------------------------

    def offset(self, plane: ir.Plane, index: tuple[ir.Expr, ...]) -> str:
        if plane.strides is None:
            return self.expr(index[0])
        terms = []
        for item, stride in zip(index, plane.strides, strict=True):
            text = self.expr(item)
            terms.append(text if stride == 1 else f"{text} * {stride}")
        return "(" + " + ".join(terms) + ")"

    def expr(self, node: ir.Expr) -> str:
        if isinstance(node, ir.Const):
            return self.const(node)
        if isinstance(node, ir.Lane):
            return "lane"
        if isinstance(node, ir.Ref):
            return self.names.var(node.var)
        if isinstance(node, ir.Load):
            return Names.load(node.plane.name)
        if isinstance(node, ir.Read):
            offset = self.offset(node.plane, node.index)
            text = f"{Names.plane(node.plane.name)}.take({offset}, mode='clip')"
            return text if self.dtypes[node.plane.name] == self.real else f"{text}.astype(_real)"
        if isinstance(node, ir.Unary):
            return f"({node.op}{self.expr(node.operand)})"
        if isinstance(node, ir.Binary | ir.Compare):
            return f"({self.expr(node.left)} {node.op} {self.expr(node.right)})"
        if isinstance(node, ir.Logic):
            left, right = self.expr(node.left), self.expr(node.right)
            if node.varying:
                return f"_np.logical_{node.op}({left}, {right})"
            return f"({left} {node.op} {right})"
        if isinstance(node, ir.Not):
            operand = self.expr(node.operand)
            return f"_np.logical_not({operand})" if node.varying else f"(not {operand})"
        if isinstance(node, ir.Call):
            return f"_np.{FUNCTIONS[node.fn].numpy}({', '.join(self.expr(a) for a in node.args)})"
        if isinstance(node, ir.Cast):
            operand = self.expr(node.operand)
            if node.varying:
                return f"{operand}.astype({'_real' if node.to == Type.REAL else '_np.int64'})"
            return f"{'_real' if node.to == Type.REAL else 'int'}({operand})"
        if isinstance(node, ir.Select):
            cond, a, b = (self.expr(c) for c in node.children())
            if node.cond.varying:
                return f"_np.where({cond}, {a}, {b})"
            return f"({a} if {cond} else {b})"
        raise TypeError(f"not a hawk expression: {node!r}")

    def const(self, node: ir.Const) -> str:
        if node.type != Type.REAL:
            return repr(node.value) if node.value >= 0 else f"({node.value!r})"
        name = f"_k{len(self.constants)}"
        self.constants[name] = self.real.type(node.value)
        return name


def _has_accumulate(stmts: tuple[ir.Stmt, ...]) -> bool:
    return any(isinstance(node, ir.Accumulate) for stmt in stmts for node in ir.walk(stmt))
