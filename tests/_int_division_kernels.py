"""Kernels of floor division and modulo on ints, shared by the host and device tests."""

# ruff: noqa: F841 - kernels assign to their output planes

import hawk


@hawk.kernel
def divide(
    x: hawk.Scalar,
    y: hawk.Scalar,
    by_seven: hawk.Mutable[hawk.Scalar],
    mod_seven: hawk.Mutable[hawk.Scalar],
    by_minus_three: hawk.Mutable[hawk.Scalar],
    by_y: hawk.Mutable[hawk.Scalar],
    mod_y: hawk.Mutable[hawk.Scalar],
):
    a = int(x)
    b = int(y)
    by_seven = float(a // 7)
    mod_seven = float(a % 7)
    by_minus_three = float(a // -3)
    by_y = float(a // b)
    mod_y = float(a % b)
