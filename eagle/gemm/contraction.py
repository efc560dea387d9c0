"""Plain records of a recognised contraction, as a producer (hawk) hands them over.

A producer fills these; :func:`eagle.gemm.plan.lower_dense_gemm` reads them by
attribute. They are frozen and import nothing beyond the standard library, so
a producer depends on no part of eagle's runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ContractionOperand", "RecognizedContraction"]


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
        reduce_dim: the position in ``dims`` of the axis the reduce variable
            walks (None when it walks none).
        stride_labels: per axis of ``dims``, where the address's stride along
            it came from: ``"declared"`` (the table's declared shape) or
            ``"literal"`` (a bare number in the address).
        dense: True when the read addresses the table affinely with declared
            strides.
        refusals: why it is not dense (empty when it is).
    """

    name: str
    role: str
    dims: tuple[tuple[str, int | None, int | None], ...]
    bound: str | None
    reads: tuple[tuple[tuple[str, str], ...], ...]
    reduce_stride: int | None
    reduce_dim: int | None
    stride_labels: tuple[str, ...]
    dense: bool
    refusals: tuple[str, ...] = ()


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
    operand_class: str
    term_form: str
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
