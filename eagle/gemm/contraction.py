"""The records of a recognised contraction, as
:func:`~eagle.gemm.plan.lower_dense_gemm` reads them.

They are defined on the producer's side, in :mod:`hawk.records` (plain frozen
dataclasses that import nothing beyond the standard library), and re-exported
here so that ``from eagle.gemm.contraction import RecognizedContraction`` works.
"""

from __future__ import annotations

from hawk.records import ContractionOperand, LaneLayout, RecognizedContraction

__all__ = ["ContractionOperand", "LaneLayout", "RecognizedContraction"]
