"""Plans of matrix products, and lowering a recognised contraction to one.

A :class:`LoweredPlan` is an ordered list of :class:`PlanStep` over named
buffers, each declared by a :class:`WorkspaceSpec`. A matmul step
(:func:`matmul_step`) computes ``out = op(a) @ op(b)`` on the host with numpy
or on the device with cuBLAS on eagle's current stream. :func:`lower_dense_gemm`
turns a :class:`~eagle.gemm.contraction.RecognizedContraction` into such a
plan, forward or adjoint; :func:`captured_gemm_calls` binds a plan's products
to your buffers for :meth:`~eagle.gemm.CublasCaptureHandle.sgemm`
(:func:`captured_calls` for :meth:`~eagle.gemm.CublasCaptureHandle.gemm`).

This module is the public face of three that each do one job:
``eagle.gemm.steps`` (the plan records, validation and binding),
``eagle.gemm.matmul`` (the matmul step's host and device runs) and
``eagle.gemm.lowering`` (records to plans, plans to captured calls).
"""

from __future__ import annotations

from eagle.gemm.lowering import (
    CapturedCall,
    CapturedGemmCall,
    Direction,
    captured_calls,
    captured_gemm_calls,
    check_plan_capturable,
    lower_dense_gemm,
)
from eagle.gemm.matmul import matmul_step
from eagle.gemm.steps import (
    BACKENDS,
    STEP_KINDS,
    LoweredPlan,
    MatmulSpec,
    PlanStep,
    Side,
    StepKind,
    WorkspaceSpec,
    assembly_step,
)
from eagle.gemm.steps import (
    StepFn as StepFn,
)

__all__ = [
    "BACKENDS",
    "STEP_KINDS",
    "CapturedCall",
    "CapturedGemmCall",
    "Direction",
    "LoweredPlan",
    "MatmulSpec",
    "PlanStep",
    "Side",
    "StepKind",
    "WorkspaceSpec",
    "assembly_step",
    "captured_calls",
    "captured_gemm_calls",
    "check_plan_capturable",
    "lower_dense_gemm",
    "matmul_step",
]
