"""Floor division and modulo of ints on the device, as Python defines them, on both
sides of the 32-bit fast path of ``hawk_floordiv`` / ``hawk_mod`` (non-negative values
below 2**32 divided by a positive divisor below 2**32): negative values and divisors,
values past 2**32 and 2**31, and divisors past 2**32."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.plan
from eagle import arrays
from tests._int_division_kernels import divide

pytestmark = pytest.mark.gpu

OUTPUTS = ("by_seven", "mod_seven", "by_minus_three", "by_y", "mod_y")


def test_floor_division_and_modulo_agree_with_python_across_the_fast_path(rng):
    edges = [0, 1, 6, 7, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 5, -1, -7, -(2**32) - 3]
    x = np.concatenate([edges, rng.integers(-(2**40), 2**40, 4000)]).astype(np.float64)
    divisors = [1, 7, -7, 2**32 - 1, 2**32, 2**33 + 1, -(2**32) - 1, 3]
    y = np.resize(np.concatenate([divisors, rng.integers(1, 2**34, 100)]), x.size)
    y = np.where(rng.random(x.size) < 0.3, -y, y).astype(np.float64)
    outputs = {name: np.full(x.size, np.nan) for name in OUTPUTS}
    device = {name: arrays.asarray(v, device="cuda:0") for name, v in outputs.items()}
    eagle.plan.auto(divide).run(
        x=arrays.asarray(x, device="cuda:0"), y=arrays.asarray(y, device="cuda:0"), **device
    )
    a, b = x.astype(np.int64), y.astype(np.int64)
    expected = {
        "by_seven": a // 7, "mod_seven": a % 7, "by_minus_three": a // -3,
        "by_y": a // b, "mod_y": a % b,
    }  # fmt: skip
    for name in OUTPUTS:
        np.testing.assert_array_equal(device[name].numpy(), expected[name].astype(np.float64))
    host = dict(outputs)
    eagle.plan.auto(divide).run(x=x, y=y, **host)
    for name in OUTPUTS:
        np.testing.assert_array_equal(host[name], expected[name].astype(np.float64))
