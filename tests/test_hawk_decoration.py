# ruff: noqa: F841 - kernels assign to their output planes
"""Decoration-time behaviour: unreadable source, errors pointing at the source,
non-ASCII plane names, and the vocabulary enums."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.plan
import hawk
from eagle.cuda import compile_cuda
from hawk import ir
from hawk import math as hm
from hawk.emit import cuda
from hawk.kinds import PlaneKind, Type


def test_a_kernel_without_source_says_where_to_define_it() -> None:
    namespace: dict = {"hawk": hawk}
    code = "def k(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):\n    y = x\n"
    exec(compile(code, "<stdin>", "exec"), namespace)  # as a plain REPL or python -c does
    with pytest.raises(hawk.HawkError, match="define the kernel in a .py file or a notebook cell"):
        hawk.kernel(namespace["k"])


def test_an_error_shows_the_line_with_a_caret_under_the_column() -> None:
    with pytest.raises(hawk.HawkError) as caught:

        @hawk.kernel
        def k(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
            y = x + {1.0}

    error = caught.value
    first, line, caret = str(error).splitlines()
    assert first == error.message and first.startswith(f"kernel 'k', line {error.line}: ")
    assert line == "        y = x + {1.0}" and error.column == 12
    assert caret == "    " + " " * 12 + "^"


def test_an_ir_refusal_points_at_its_expression() -> None:
    with pytest.raises(hawk.HawkError, match="does not fit in 64 bits") as caught:

        @hawk.kernel
        def k(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
            y = x * float(2**64)

    assert caught.value.column == 18  # 2**64 in the dedented source, not the statement


def test_an_operation_of_constants_beyond_int64_is_refused_by_name() -> None:
    """A product or power of int constants is a constant its author wrote: it must fit
    (operations on run-time ints wrap instead)."""
    with pytest.raises(hawk.HawkError, match="does not fit in 64 bits") as caught:

        @hawk.kernel
        def k(y: hawk.Mutable[hawk.Scalar]):
            y = float(-7 * 4611686018427387904 + hm.sample_index())

    message = "the constant expression -7 * 4611686018427387904 is -32281802128991715328,"
    assert message in str(caught.value)
    with pytest.raises(hawk.HawkError, match=r"the constant expression 3 \*\* 70 is 2503"):

        @hawk.kernel
        def power(y: hawk.Mutable[hawk.Scalar]):
            y = float(3**70)

    @hawk.kernel
    def wraps(y: hawk.Mutable[hawk.Scalar]):
        y = float((hm.sample_index() - 7) * 4611686018427387904 % 512)

    y = np.zeros(3)
    eagle.plan.auto(wraps).run(y=y)
    assert list(y) == [(k - 7) * 4611686018427387904 % 512 for k in range(3)]


def test_a_non_ascii_plane_name_runs_on_host_and_compiles_for_the_device() -> None:
    @hawk.kernel
    def scale(größe: hawk.Scalar, ÿ: hawk.Mutable[hawk.Scalar]):
        ÿ = größe * 2.0

    x, y = np.arange(4.0), np.zeros(4)
    eagle.plan.auto(scale).run(größe=x, ÿ=y)
    np.testing.assert_array_equal(y, 2.0 * x)
    source = cuda.emit(scale.ir, {"größe": "float32", "ÿ": "float32"})
    assert "pu_c3bf" in source.source and source.source.split("{", 1)[1].isascii()
    compile_cuda(source.source, name=source.name, arch="sm_90")


def test_types_and_plane_kinds_are_enums_equal_to_their_strings() -> None:
    plane = ir.Plane("t", "table")
    assert plane.kind is PlaneKind.TABLE and plane.kind == "table"
    assert ir.Var("v", "int", False).type is Type.INT
    assert ir.Const(1.0).type is Type.REAL and ir.Const(True).type == "bool"
    assert {PlaneKind.TABLE: 1}["table"] == 1
    with pytest.raises(hawk.HawkError, match="kind must be one of"):
        ir.Plane("t", "matrix")


def test_constants_are_equal_only_when_one_may_stand_for_the_other() -> None:
    one, real_one, true = ir.Const(1), ir.Const(1.0), ir.Const(True)
    assert one != real_one and one != true and real_one != true
    assert len({one, real_one, true}) == 3  # hashing keeps them apart too
    assert ir.Const(1) == one and hash(ir.Const(1)) == hash(one)
    assert ir.Const(0.0) != ir.Const(-0.0)  # 1 / x tells them apart
    assert ir.Const(float("nan")) == ir.Const(float("nan"))
    x = ir.Load(ir.Plane("x", PlaneKind.INPUT))
    assert ir.Binary("*", x, ir.Const(2.0)) == ir.Binary("*", x, ir.Const(2.0))
    assert ir.Binary("*", x, ir.Const(2.0)) != ir.Binary("*", x, ir.Const(-2.0))
    lane = ir.Lane()
    assert ir.Compare("<", lane, ir.Const(1)) != ir.Compare("<", ir.Cast(Type.REAL, lane), real_one)


def test_map_children_and_builder() -> None:
    lane = ir.Lane()
    node = ir.Binary("+", lane, ir.Const(2))
    doubled = ir.map_children(node, lambda c: ir.Binary("*", c, ir.Const(2)))
    assert str(doubled) == "lane * 2 + 2 * 2"
    assert ir.map_children(lane, lambda c: c) is lane
    builder = ir.Builder()
    var = ir.Var("a", Type.INT, True)
    with builder.nested() as inner:
        builder.emit(ir.Let(var, lane))
    assert builder.out == [] and inner == [ir.Let(var, lane)]
