"""eagle.gemm — dense matrix products on the host and, capture-legal, on cuBLAS.

* :func:`~eagle.gemm.plan.matmul_step` — one product, run on the host (numpy)
  or the device (cuBLAS on eagle's current stream).
* :class:`CublasCaptureHandle` with :func:`sgemm_params_for_arrays` — a float32
  product recorded into a CUDA graph.
* :func:`~eagle.gemm.plan.lower_dense_gemm` — a recognised contraction as a
  plan of products, forward or adjoint; :func:`captured_gemm_calls` binds it
  to your buffers for capture.

Refusals are typed (:class:`GemmCaptureUnavailable`,
:class:`GemmMappingUnavailable`, :class:`LoweringUnavailable`,
:class:`PlanUnavailable`, :class:`MatmulUnavailable`); nothing falls back
silently. Importing eagle.gemm loads neither a CUDA driver nor cuBLAS.
"""

from eagle.gemm.capture import WORKSPACE_BYTES, CublasCaptureHandle
from eagle.gemm.contraction import ContractionOperand, RecognizedContraction
from eagle.gemm.errors import (
    GemmCaptureUnavailable,
    GemmMappingUnavailable,
    LoweringUnavailable,
    MatmulUnavailable,
    PlanUnavailable,
)
from eagle.gemm.params import SgemmParams, product_shape, sgemm_params, sgemm_params_for_arrays
from eagle.gemm.plan import (
    CapturedGemmCall,
    LoweredPlan,
    MatmulSpec,
    PlanStep,
    WorkspaceSpec,
    assembly_step,
    captured_gemm_calls,
    check_plan_capturable,
    lower_dense_gemm,
    matmul_step,
)

__all__ = [
    "WORKSPACE_BYTES",
    "CapturedGemmCall",
    "ContractionOperand",
    "CublasCaptureHandle",
    "GemmCaptureUnavailable",
    "GemmMappingUnavailable",
    "LoweredPlan",
    "LoweringUnavailable",
    "MatmulSpec",
    "MatmulUnavailable",
    "PlanStep",
    "PlanUnavailable",
    "RecognizedContraction",
    "SgemmParams",
    "WorkspaceSpec",
    "assembly_step",
    "captured_gemm_calls",
    "check_plan_capturable",
    "lower_dense_gemm",
    "matmul_step",
    "product_shape",
    "sgemm_params",
    "sgemm_params_for_arrays",
]
