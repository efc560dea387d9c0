"""The kernel the benchmarks share: the seed's contraction, at any extents."""

# ruff: noqa: F821, F841 - hawk's axis annotations and output planes confuse these checks
# No ``from __future__ import annotations`` here: the table extents come from the factory's
# arguments, and hawk evaluates annotations in the kernel's module, where those are not.

import hawk
from hawk import math as hm


def contract(R: int, U: int, B: int) -> hawk.Kernel:
    """``y[sample * U + unit] = sum_r w[r, unit] * f[r, sample]`` (DESIGN.md section 6)."""

    @hawk.kernel
    def contract(
        w: hawk.Table["row":R, "unit":U],
        f: hawk.Table["row":R, "sample":B],
        y: hawk.Mutable[hawk.Scalar],
    ):
        sample, unit = hm.split_index(U)
        acc = 0.0
        for r in range(R):
            acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
        y = acc

    return contract
