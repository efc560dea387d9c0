# ruff: noqa: F821, F841, UP037
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["row":K], which pyflakes reads as forward references (F821, UP037).
"""The tiny kernel docs/_ext/facts.py asks its questions of: a two-table contraction, the
kind of kernel that may take the GEMM route. Extents of one letter keep its planes small."""

from __future__ import annotations

import hawk
from hawk import math as hm

K, M, N = 4, 3, 2


@hawk.kernel
def contraction(
    w: hawk.Table["row":K, "unit":M],
    f: hawk.Table["row":K, "sample":N],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(M)
    acc = 0.0
    for r in range(K):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = acc
