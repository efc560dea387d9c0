"""Refusals that name what was wrong and say what to pass: one test per probe of a
message (kept together so a reworded or lost refusal shows up here)."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import eagle.diff
import eagle.plan
import hawk
import hawk.diff
import hawk.math
from eagle import arrays
from eagle.gemm import matmul_step
from hawk.contraction import lane_layout, recognize
from tests._generated import load
from tests._hawk_kernels import saxpy

_LOOP = """\
import hawk
{module}

@hawk.kernel
def shadowed(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    acc = 0.0
{local}    for i in range(2):
        acc = acc + x
    y = acc
"""


def test_a_shadowed_range_is_named(tmp_path: Path) -> None:
    with pytest.raises(hawk.HawkError, match="a variable called 'range', which hides Python's"):
        load(tmp_path, "local", _LOOP.format(module="", local="    range = 3\n"), "shadowed")
    with pytest.raises(hawk.HawkError, match="'range' in the kernel's module is not Python's"):
        load(tmp_path, "module", _LOOP.format(module="range = 3", local=""), "shadowed")


def test_lane_layout_names_itself() -> None:
    with pytest.raises(TypeError, match=r"^lane_layout takes a @hawk.kernel"):
        lane_layout(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^recognize takes a @hawk.kernel"):
        recognize(3)  # type: ignore[arg-type]


def test_a_host_product_has_no_32_bit_limit() -> None:
    # a (1, 2**31) view of 16 floats (stride 0): numpy sums it; cuBLAS could not
    ones = as_strided(np.ones(16, np.float64), shape=(1, 2**31), strides=(0, 0))
    out = np.zeros((1, 1))
    step = matmul_step("m", a="a", b="b", out="out", transpose_b=True)
    step.run({"a": ones, "b": ones, "out": out}, "host")
    assert out[0, 0] == 2.0**31


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: arrays.zeros(True), "shape must be non-negative ints .* not True"),
        (lambda: arrays.zeros(6).reshape("2", 3), r"reshape takes ints .* not \('2', 3\)"),
        (
            lambda: matmul_step("m", a="a", b="b", out="o", transpose_a="False"),
            "transpose_a must be True or False, not 'False'",
        ),
        (
            lambda: eagle.plan.auto(saxpy).run(a=True, x=np.ones(3), y=np.ones(3)),
            "plane 'a' is a Param, and True is not a number it takes; pass an int or a float",
        ),
        (
            lambda: eagle.plan.auto(saxpy).run(a=2.0, x=np.ones((2, 3)), y=np.ones((2, 3))),
            r"plane 'x' \(Scalar\) takes a 1-D array with one value per lane, not shape \(2, 3\)",
        ),
    ],
)
def test_coercions_are_refused_by_name(call, match) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        call()


def _plain(x, y):
    return None


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: eagle.plan.auto(_plain), "not function: '_plain' is a plain function; put @hawk"),
        (
            lambda: eagle.plan.auto(eagle.plan.auto(saxpy)),
            r"not AutoPlan: it is a plan; pass its kernel, eagle.plan.auto\(plan.kernel\)",
        ),
        (
            lambda: eagle.diff.reverse(saxpy),
            r"not Kernel; pass eagle.diff.reverse\(eagle.plan.auto\(saxpy\)\)",
        ),
        (
            lambda: hawk.diff.vjp(eagle.plan.auto(saxpy)),
            r"not AutoPlan: it is a plan; pass its kernel \(plan.kernel\)",
        ),
        (
            lambda: eagle.plan.auto(saxpy).run(a=2.0, x=np.ones(3)),
            r"missing plane\(s\) 'y' .*; pass every plane by name: a=\.\.\., x=\.\.\., y=",
        ),
        (
            lambda: eagle.plan.auto(saxpy).run(a=None, x=np.ones(3), y=np.ones(3)),
            "plane 'a' is a Param, and None is not a number it takes; pass an int or a float",
        ),
        (
            lambda: arrays.full(3, list(range(2000)), "float32"),
            r"^value an object of type list is not a number .*; a fill takes one number",
        ),
        (
            lambda: arrays.zeros([1.5] * 3000),
            r"^shape must be non-negative ints .*, not an object of type list$",
        ),
        (lambda: arrays.zeros(3, dtype="floot32"), r"not a numpy dtype; pass a name such as"),
        (lambda: arrays.asarray(None), r"^asarray takes numbers or bools, not None: pass a numpy"),
        (lambda: hawk.math.sin("a"), r"^hawk.math.sin takes numbers or numpy arrays of them"),
        (
            lambda: eagle.plan.auto(saxpy).route("cpu"),
            r"^side must be 'host' or 'device', not 'cpu' \(did you mean 'host'\?\)$",
        ),
        (
            lambda: eagle.plan.auto(saxpy, contraction="GEM"),
            r"^contraction must be 'loop' or 'gemm', not 'GEM' \(did you mean 'gemm'\?\)$",
        ),
        (lambda: eagle.plan.auto(saxpy, contraction="fast"), r"not 'fast'$"),
        (lambda: hawk.Scalar[4], r"hawk.Scalar takes no \[...\]: it is one value per lane; "),
        (lambda: hawk.Param[2], r"hawk.Param takes no \[...\]: it is one value for all lanes"),
        (
            lambda: matmul_step("c", a="a", b="b", out="c").run(
                {"a": np.ones((2, 3)), "b": np.ones((3, 4))}, "host"
            ),
            r"buffer 'c' is not bound \(bound: \['a', 'b'\]\); add 'c': <array> to the",
        ),
        (
            lambda: matmul_step("c", a="a", b="b", out="c").run(
                {"a": np.ones((2, 3)), "b": np.ones((5, 4)), "c": np.zeros((2, 4))}, "host"
            ),
            r"contracted extent 5 .*: op\(a\) has 3 columns, so op\(b\) needs 3 rows",
        ),
    ],
)
def test_a_refusal_says_how_to_get_what_it_takes(call, match) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        call()


_SLIPS = """\
import math
import numpy as np
import hawk
from hawk import math as hm


@hawk.kernel
def slip(
    x: hawk.Scalar,
    a: hawk.Param,
    t: hawk.Table["i":4],
    y: hawk.Mutable[hawk.Scalar],
):
    {body}
"""


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("y = np.sin(x)", r"unknown call np.sin\(...\): .*; inside a kernel, write hm.sin\("),
        ("y = max(x, 0.0)", r"unknown call max\(...\): .*write hm.maximum\("),
        ("y = a.at(i=0)", r"'a' is a Param, one value for all lanes: use a itself, or declare"),
        ("y = (x > 0.0) * x", r"not a comparison: .*; .* such as 1.0 if x > 0.0 else 0.0"),
        ("y = x > 0.0", r"'y' needs a real value, not bool .*; a comparison is not a number"),
        ("y = x @ x", r"operator in x @ x is not in hawk; kernels have \+ - \* /"),
        ("y = t.at(0)", r"t.at addresses axes by name: .*; write t.at\(i=\.\.\.\)"),
        ("y = x * w", r"name 'w' is not defined; .* add w as a parameter \(e.g. w: hawk.Param\)"),
        ("y = x if x in (1.0, 2.0) else 0.0", r"not in hawk; .* as x == 1.0 or x == 2.0"),
        (
            "for v in t:\n        y = v",
            r"to go through table t, write for k in range\(4\) and read",
        ),
        ("for i in range(a):\n        y = x", r"a loop bound must .*; the bound is fixed when the"),
    ],
)
def test_a_kernel_slip_is_refused_with_what_to_write(tmp_path: Path, body: str, match: str):
    with pytest.raises(hawk.HawkError, match=match):
        load(tmp_path, f"slip{abs(hash(body))}", _SLIPS.format(body=body), "slip")


def test_kernels_and_plans_pickle_and_bound_plans_refuse_by_name() -> None:
    plan = eagle.plan.auto(saxpy)
    for item in (saxpy, plan):
        assert repr(pickle.loads(pickle.dumps(item))) == repr(item)
        assert repr(copy.deepcopy(item)) == repr(item)
    bound = plan.bind(a=2.0, x=np.ones(3), y=np.ones(3))
    for duplicate in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="pickle or copy the plan and bind it again"):
            duplicate(bound)


def test_eagle_torch_refuses_what_plan_run_refuses() -> None:
    torch = pytest.importorskip("torch")
    import eagle.torch

    f = eagle.torch.function(saxpy)
    x, y = torch.arange(3.0, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    refusals = [
        ({"lanes": -1}, ValueError, "lanes must be a lane count, 0 or more, not -1"),
        ({"lanes": 2.5}, TypeError, r"lanes must be an int \(the lane count\), not 2.5"),
        ({"lanes": 7}, ValueError, "lanes=7, but plane 'x' has 3 values, one per lane"),
        ({"a": True}, TypeError, r"plane 'a' \(Param\) is a bool; pass a tensor or a number"),
        ({"a": 10**400}, OverflowError, "Param 'a' is an int of 1329 bits, too large"),
    ]
    for given, kind, match in refusals:
        planes = {"a": 2.0, "x": x, "y": y, **given}
        with pytest.raises(kind, match=match):
            f(**planes)
    flat = torch.ones(2, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"takes a 1-D tensor .* pass .reshape\(-1\)"):
        f(a=2.0, x=flat, y=torch.zeros(2, 3, dtype=torch.float64))
