"""eagle.gemm — dense matrix products on the host and, capture-legal, on cuBLAS.

* :func:`~eagle.gemm.plan.matmul_step` — one product, run on the host (numpy)
  or the device (cuBLAS on eagle's current stream).
* :class:`CublasCaptureHandle` with :func:`sgemm_params_for_arrays` — a float32
  product recorded into a CUDA graph; with :func:`gemm_params_for_arrays` and
  ``handle.gemm``, a bfloat16, float16, float32 (exact or TF32), float64 or fp8
  one (fp8 on cuBLASLt, with per-tensor scales; the dtype rules are in
  :mod:`eagle.gemm.dtypes`).
* :func:`~eagle.gemm.plan.lower_dense_gemm` — a recognised contraction as a
  plan of products, forward or adjoint;
  :func:`~eagle.gemm.plan.captured_gemm_calls` (float32) and
  :func:`~eagle.gemm.plan.captured_calls` (any product dtype) bind it to your
  buffers for capture.

Refusals are typed (:class:`GemmCaptureUnavailable` with its kinds
:class:`CublasUnavailable`, :class:`HandleDestroyed`, :class:`CaptureInProgress`
and :class:`NotCapturable`; :class:`GemmMappingUnavailable`,
:class:`LoweringUnavailable`, :class:`PlanUnavailable`,
:class:`MatmulUnavailable`), all :class:`eagle.EagleError`; nothing falls back
silently. Importing eagle.gemm loads neither a CUDA driver nor cuBLAS.
"""

from __future__ import annotations

import importlib
from typing import Any

from eagle.gemm.contraction import ContractionOperand, RecognizedContraction
from eagle.gemm.errors import (
    CaptureInProgress,
    CublasUnavailable,
    GemmCaptureUnavailable,
    GemmMappingUnavailable,
    HandleDestroyed,
    LoweringUnavailable,
    MatmulUnavailable,
    NotCapturable,
    PlanUnavailable,
)
from eagle.gemm.params import (
    GemmParams,
    SgemmParams,
    gemm_params_for_arrays,
    product_shape,
    sgemm_params,
    sgemm_params_for_arrays,
)

# The plan and capture names pull in eagle.cuda's Python modules; they are
# resolved on first use, so importing eagle.gemm loads no CUDA module.
_LAZY = {
    "BoundGemm": "eagle.gemm.capture",
    "CapturedCall": "eagle.gemm.lowering",
    "CublasCaptureHandle": "eagle.gemm.capture",
    "CapturedGemmCall": "eagle.gemm.lowering",
    "LoweredPlan": "eagle.gemm.steps",
    "MatmulSpec": "eagle.gemm.steps",
    "PlanStep": "eagle.gemm.steps",
    "WorkspaceSpec": "eagle.gemm.steps",
    "assembly_step": "eagle.gemm.steps",
    "captured_calls": "eagle.gemm.lowering",
    "captured_gemm_calls": "eagle.gemm.lowering",
    "check_plan_capturable": "eagle.gemm.lowering",
    "lower_dense_gemm": "eagle.gemm.lowering",
    "matmul_step": "eagle.gemm.matmul",
    "release_handles": "eagle.gemm.handles",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'eagle.gemm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, the public submodules imported so far, and the module's own
    dunders (not its imports)."""
    own = [
        name
        for name, value in globals().items()
        if name.startswith("__")
        or (not name.startswith("_") and getattr(value, "__name__", "") == f"{__name__}.{name}")
    ]
    return sorted({*own, *__all__, *_LAZY})


__all__ = [
    "BoundGemm",
    "CaptureInProgress",
    "CapturedCall",
    "CapturedGemmCall",
    "ContractionOperand",
    "CublasCaptureHandle",
    "CublasUnavailable",
    "GemmCaptureUnavailable",
    "GemmMappingUnavailable",
    "GemmParams",
    "HandleDestroyed",
    "LoweredPlan",
    "LoweringUnavailable",
    "MatmulSpec",
    "MatmulUnavailable",
    "NotCapturable",
    "PlanStep",
    "PlanUnavailable",
    "RecognizedContraction",
    "SgemmParams",
    "WorkspaceSpec",
    "assembly_step",
    "captured_calls",
    "captured_gemm_calls",
    "check_plan_capturable",
    "gemm_params_for_arrays",
    "lower_dense_gemm",
    "matmul_step",
    "product_shape",
    "release_handles",
    "sgemm_params",
    "sgemm_params_for_arrays",
]
