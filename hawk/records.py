"""Plain records of a recognised contraction: what :func:`hawk.contraction.recognize` finds.

A producer (hawk, or any other) fills these; a consumer such as
:func:`eagle.gemm.plan.lower_dense_gemm` reads them by attribute. They are
frozen and import nothing beyond the standard library and hawk's error root, so
neither side depends on the other's runtime. ``eagle.gemm.contraction`` re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hawk.errors import HawkValueError

__all__ = ["ContractionOperand", "LaneLayout", "OperandClass", "RecognizedContraction", "TermForm"]

OperandClass = Literal["gemm", "gemv"]
"""How many tables a contraction's fold reads ("gemm" two, "gemv" one)."""

TermForm = Literal["product_of_reads", "bare_read", "transformed"]
"""What each term of a fold is (a product of two reads, one read, or anything else)."""


@dataclass(frozen=True)
class ContractionOperand:
    """One table read in a contraction's fold.

    Attributes:
        name: the table's plane name.
        role: ``"a"`` or ``"b"``, the factor of the product it is (operands are
            listed in that order; a one-operand record has only ``"a"``).
        dims: ``((label, size, stride), ...)`` in declared order: the axis
            label, its extent (an int, or None when not a constant) and its
            row-major stride in elements.
        bound: the lane index (from ``sample_index``/``split_index``) that
            addresses the free axis, e.g. ``"unit"``; None when none does.
        reads: each ``.at`` read of the table in the fold, as
            ``((label, index expression), ...)``.
        reduce_stride: elements the read address advances per step of the
            reduce variable (None when not a constant).
        reduce_dim: the axis the reduce variable walks, as its label in
            ``dims`` (``"row"``) or its position (``0``); None when it walks
            none. :attr:`reduce_axis` gives the position either way.
        stride_labels: per axis of ``dims``, where the address's stride along
            it came from: ``"declared"`` (the table's declared shape) or
            ``"literal"`` (a bare number in the address).
        dense: True when the read addresses the table affinely with declared
            strides.
        refusals: why it is not dense (empty when it is).

    Raises:
        ValueError: ``reduce_dim`` is a label that is not one of ``dims``, or
            a position outside them.
    """

    name: str
    role: str
    dims: tuple[tuple[str, int | None, int | None], ...]
    bound: str | None
    reads: tuple[tuple[tuple[str, str], ...], ...]
    reduce_stride: int | None
    reduce_dim: int | str | None
    stride_labels: tuple[str, ...]
    dense: bool
    refusals: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.reduce_axis  # noqa: B018 -- validates reduce_dim against dims

    @property
    def reduce_axis(self) -> int | None:
        """The position in ``dims`` of the walked axis (``reduce_dim`` resolved), or None."""
        dim = self.reduce_dim
        labels = [label for label, _, _ in self.dims]
        if dim is None:
            return None
        if isinstance(dim, str):
            if dim not in labels:
                raise HawkValueError(
                    f"operand {self.name!r}: reduce_dim {dim!r} is not one of its axes "
                    f"{labels}; pass one of those labels or an axis position"
                )
            return labels.index(dim)
        if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < len(labels):
            raise HawkValueError(
                f"operand {self.name!r}: reduce_dim {dim!r} is not an axis position of its "
                f"{len(labels)} axes {labels}; pass a label or a position in "
                f"0..{len(labels) - 1}"
            )
        return dim


@dataclass(frozen=True)
class RecognizedContraction:
    """One output that is one additive fold over one loop of table reads.

    Attributes:
        carry: the loop-carried accumulator variable, e.g. ``"acc"``.
        reduce_var: the loop variable, e.g. ``"r"``.
        reduce_extent: the loop's ``range`` stop (None when not a constant).
        reduce_start: the loop's ``range`` start.
        reduce_step: the loop's ``range`` step.
        operands: the tables read, as :class:`ContractionOperand`, ``a`` first.
        operand_class: ``"gemm"`` (two operands) or ``"gemv"`` (one).
        term_form: ``"product_of_reads"`` (``w.at(..) * f.at(..)``),
            ``"bare_read"`` (``w.at(..)``) or ``"transformed"`` (anything
            applied to the reads, e.g. ``exp(w.at(..)) * f.at(..)``).
        outputs: ``((name, kind), ...)`` of the kernel's outputs, e.g.
            ``(("y", "mutable"),)``.
        dense: True when every operand is dense and the fold is a product.
        refusals: why it is not dense (empty when it is).
        staged_fanin: True when the fold's result reaches the output through a
            local assigned after the loop (``y = acc``) rather than directly.
        fanin_source: the variable the output is assigned from (e.g. ``"acc"``).
        adjoint_accumulates: True when the adjoint adds into the gradient
            planes (issued with beta = 1) rather than overwriting them.
    """

    carry: str
    reduce_var: str
    reduce_extent: int | None
    reduce_start: int | None
    reduce_step: int | None
    operands: tuple[ContractionOperand, ...]
    operand_class: OperandClass
    term_form: TermForm
    outputs: tuple[tuple[str, str], ...]
    dense: bool
    refusals: tuple[str, ...] = ()
    staged_fanin: bool = False
    fanin_source: str | None = None
    adjoint_accumulates: bool = True

    @property
    def operand_count(self) -> int:
        """How many tables the fold reads."""
        return len(self.operands)

    @property
    def operand_names(self) -> tuple[str, ...]:
        """The operands' plane names, ``a`` first."""
        return tuple(operand.name for operand in self.operands)


@dataclass(frozen=True)
class LaneLayout:
    """How the lanes of a recognised contraction address the elements of its product.

    Attributes:
        rows: the product's row count (the free extent of operand ``a``), when
            lane ``i * cols + j`` addresses element ``(i, j)`` of
            ``op(a) @ op(b)``; None when the lanes are not the product in
            row-major order.
        cols: the product's column count (the free extent of operand ``b``;
            1 for a one-operand fold), or None as ``rows``.
        reason: why the lanes are not the product in row-major order (None
            when they are).
    """

    rows: int | None
    cols: int | None
    reason: str | None = None

    @property
    def lanes(self) -> int | None:
        """The lane count that covers the product once (``rows * cols``), or None."""
        return None if self.rows is None or self.cols is None else self.rows * self.cols
