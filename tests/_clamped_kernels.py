# ruff: noqa: F821, F841, UP037
# Kernels assign to their output planes (F841) and name table axes with string slices,
# Table["row":4], which pyflakes reads as forward references (F821, UP037).
"""Kernels for the tests of checked table reads (a clamped index and an unconditional
load), shared by the host and GPU tests."""

from __future__ import annotations

import hawk


@hawk.kernel
def scaled(t: hawk.Table["row":4], k: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    # a read at a uniform index in an elementwise kernel: the vectorised loop has it too
    y = x * t.at(row=int(k))


@hawk.kernel
def nested(t: hawk.Table["row":4], u: hawk.Table, i: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    # reads on the sides of nested selects, in a loop: a lane reads only the side it takes
    k = int(i)
    acc = 0.0
    for r in range(2):
        near = u.at(k - 4) if k >= 4 and k < 6 else -1.0
        acc = acc + (t.at(row=k) if k >= 0 and k < 4 else near) * (r + 1)
    y = acc


@hawk.kernel
def cond_read(t: hawk.Table["row":4], i: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    # a read in a select's condition is made by every lane
    y = 1.0 if t.at(row=int(i)) > 0.0 else 2.0
