"""The refusal types of eagle.gemm: typed and loud, never a silent fallback.

What each one says happened:

* :class:`GemmCaptureUnavailable` — the product cannot run as capture-legal
  cuBLAS work here: no driver, device or cuBLAS, a handle used after
  ``destroy()``, a stream being captured, a plan that is not captured.
* :class:`GemmMappingUnavailable` — the arrays you passed have a shape, dtype
  or layout one Sgemm cannot compute; it is both a
  :class:`GemmCaptureUnavailable` (as the user's page names it) and a
  :class:`ValueError`.
* :class:`LoweringUnavailable` — a record, plan or buffer you passed cannot
  be lowered to products or run as them. It is a :class:`ValueError`: every
  case is a value you passed (a contraction that is not dense, specs that
  disagree, a buffer of the wrong dtype, shape or side). Below it,
  :class:`PlanUnavailable` refuses at build time, :class:`MatmulUnavailable`
  at call time.

An argument of the wrong Python type (a string where a record goes, a list
where a mapping of buffers goes) raises :class:`TypeError`, naming the argument.
"""

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


class GemmMappingUnavailable(GemmCaptureUnavailable, ValueError):
    """One column-major Sgemm cannot compute this row-major product.

    The message names the operand (``'a'``, ``'b'`` or ``'out'``) and what is
    wrong with it: its dtype, its rank, its strides, its extents, or (for
    ``'out'``) the shape it must have or the operand whose memory it overlaps.
    A :class:`ValueError` too: the arrays passed are at fault.
    """


class LoweringUnavailable(ValueError):
    """A contraction or plan step cannot be lowered to matrix products (a ValueError)."""


class PlanUnavailable(LoweringUnavailable):
    """A plan cannot be built from what was passed (refused at build time, with the reason)."""


class MatmulUnavailable(LoweringUnavailable):
    """A plan or step cannot run on the buffers it was given (refused at call time)."""
