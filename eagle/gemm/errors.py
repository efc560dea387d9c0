"""The refusal types of eagle.gemm: typed and loud, never a silent fallback.

Every one is an :class:`eagle.EagleError`. What each one says happened:

* :class:`GemmCaptureUnavailable` — the product cannot run as capture-legal
  cuBLAS work here. It is raised as one of four kinds, each its own class
  (an ``except GemmCaptureUnavailable`` catches them all):

  - :class:`CublasUnavailable` — no driver, device or cuBLAS, or cuBLAS could
    not make a handle, or an fp8 product on a device older than sm_89, which has
    no fp8 tensor cores (a ``RuntimeError`` too);
  - :class:`HandleDestroyed` — a handle used after ``destroy()`` (an
    :class:`eagle.cuda.LifetimeError` too);
  - :class:`CaptureInProgress` — a call that must come before the capture
    begins (making a handle, warming a product, a product never warmed)
    came while the stream is captured (a ``RuntimeError`` too);
  - :class:`NotCapturable` — a plan, step, operand or buffer that cannot be
    captured as cuBLAS work: a ``"gemv"`` plan, a step that is not a matmul,
    an operand that is not a device array on the handle's device, a buffer
    missing or of the wrong dtype (a ``ValueError`` too).

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

from eagle.errors import EagleError, EagleRuntimeError, EagleValueError, LifetimeError

__all__ = [
    "CaptureInProgress",
    "CublasUnavailable",
    "GemmCaptureUnavailable",
    "GemmMappingUnavailable",
    "HandleDestroyed",
    "LoweringUnavailable",
    "MatmulUnavailable",
    "NotCapturable",
    "PlanUnavailable",
]


class GemmCaptureUnavailable(EagleError):
    """A product cannot run as capture-legal cuBLAS work.

    Raised as one of its kinds: :class:`CublasUnavailable` (no CUDA driver,
    no cuBLAS or no device), :class:`HandleDestroyed` (a handle used after
    :meth:`~eagle.gemm.CublasCaptureHandle.destroy`), :class:`CaptureInProgress`
    (a call that must come before the capture) or :class:`NotCapturable` (a
    plan or buffer that cannot be captured). The message says why.
    """


class CublasUnavailable(GemmCaptureUnavailable, EagleRuntimeError):
    """No CUDA driver, device or cuBLAS is usable, cuBLAS could not make a handle, or the
    device cannot run the product (fp8 below sm_89: the message names the device and its
    compute capability)."""


class HandleDestroyed(GemmCaptureUnavailable, LifetimeError):
    """A cuBLAS handle was used after :meth:`~eagle.gemm.CublasCaptureHandle.destroy`."""


class CaptureInProgress(GemmCaptureUnavailable, EagleRuntimeError):
    """A call that must come before the capture begins came while the stream is captured:
    making a handle, warming a product, or a product that was never warmed."""


class NotCapturable(GemmCaptureUnavailable, EagleValueError):
    """A plan, step, operand or buffer cannot be captured as cuBLAS work (a ValueError):
    the message names it and says what to pass instead."""


class GemmMappingUnavailable(GemmCaptureUnavailable, EagleValueError):
    """One column-major Sgemm cannot compute this row-major product.

    The message names the operand (``'a'``, ``'b'`` or ``'out'``) and what is
    wrong with it: its dtype, its rank, its strides, its extents, or (for
    ``'out'``) the shape it must have or the operand whose memory it overlaps.
    A :class:`ValueError` too: the arrays passed are at fault.
    """


class LoweringUnavailable(EagleValueError):
    """A contraction or plan step cannot be lowered to matrix products (a ValueError)."""


class PlanUnavailable(LoweringUnavailable):
    """A plan cannot be built from what was passed (refused at build time, with the reason)."""


class MatmulUnavailable(LoweringUnavailable):
    """A plan or step cannot run on the buffers it was given (refused at call time)."""
