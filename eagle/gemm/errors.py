"""The refusal types of eagle.gemm: typed and loud, never a silent fallback."""

from __future__ import annotations

__all__ = [
    "GemmCaptureUnavailable",
    "GemmMappingUnavailable",
    "LoweringUnavailable",
    "MatmulUnavailable",
    "PlanUnavailable",
]


class GemmCaptureUnavailable(Exception):
    """A product cannot run as capture-legal cuBLAS work.

    Raised when there is no CUDA driver, no cuBLAS or no device, when a handle
    is used after :meth:`~eagle.gemm.CublasCaptureHandle.destroy`, or when a
    plan or buffer cannot be captured. The message says why.
    """


class GemmMappingUnavailable(GemmCaptureUnavailable):
    """One column-major Sgemm cannot compute this row-major product.

    The message names the operand (``'a'``, ``'b'`` or ``'out'``) and what is
    wrong with it: its dtype, its rank, its strides, or (for ``'out'``) the
    shape it must have.
    """


class LoweringUnavailable(Exception):
    """A contraction or plan step cannot be lowered to matrix products."""


class PlanUnavailable(LoweringUnavailable):
    """A plan cannot be built (refused at build time, with the reason)."""


class MatmulUnavailable(LoweringUnavailable):
    """A plan or step cannot run on the buffers it was given (refused at call time)."""
