"""lower_dense_gemm over hand-built RecognizedContraction records: flags, results, refusals."""

from __future__ import annotations

import ast
import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest

import eagle.gemm.contraction
import hawk.records
from eagle.gemm import (
    ContractionOperand,
    MatmulUnavailable,
    PlanUnavailable,
    RecognizedContraction,
    lower_dense_gemm,
)
from tests._util import rel_error

K = 6
FREE = {"w": 4, "f": 5}


def _operand(name, reduce_dim, role="a", **changes):
    """A dense two-axis table of (K, free) or (free, K), walked by r along reduce_dim."""
    free_label = "unit" if name == "w" else "sample"
    axes = [("row", K), (free_label, FREE[name])]
    if reduce_dim == 1:
        axes.reverse()
    dims = ((axes[0][0], axes[0][1], axes[1][1]), (axes[1][0], axes[1][1], 1))
    fields = {
        "name": name,
        "role": role,
        "dims": dims,
        "bound": free_label,
        "reads": (tuple((label, "r" if label == "row" else label) for label, _, _ in dims),),
        "reduce_stride": dims[reduce_dim][2],
        "reduce_dim": reduce_dim,
        "stride_labels": ("declared", "declared"),
        "dense": True,
        "refusals": (),
    }
    fields.update(changes)
    return ContractionOperand(**fields)


def _record(*operands, **changes):
    fields = {
        "carry": "acc",
        "reduce_var": "r",
        "reduce_extent": K,
        "reduce_start": 0,
        "reduce_step": 1,
        "operands": operands,
        "operand_class": "gemm" if len(operands) == 2 else "gemv",
        "term_form": "product_of_reads" if len(operands) == 2 else "bare_read",
        "outputs": (("y", "mutable"),),
        "dense": True,
        "refusals": (),
        "staged_fanin": True,
        "fanin_source": "acc",
        "adjoint_accumulates": True,
    }
    fields.update(changes)
    return RecognizedContraction(**fields)


def _gemm_record(reduce_a, reduce_b):
    return _record(_operand("w", reduce_a), _operand("f", reduce_b, role="b"))


def _as_free_by_k(table, reduce_dim):
    """The table as (free, K), whichever way it is declared."""
    return table.T if reduce_dim == 0 else table


def _flags(step):
    spec = step.matmul
    return (spec.transpose_a, spec.transpose_b, spec.transpose_out)


REDUCE_DIMS = list(itertools.product([0, 1], repeat=2))


def test_records_are_frozen_plain_records():
    record = _gemm_record(0, 0)
    assert record.operand_count == 2 and record.operand_names == ("w", "f")
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.dense = False
    assert eagle.gemm.contraction.RecognizedContraction is hawk.records.RecognizedContraction
    tree = ast.parse(Path(hawk.records.__file__).read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported <= {"__future__", "dataclasses", "typing", "hawk.errors"}  # errors: nothing


def test_the_design_example_flags():
    record = _gemm_record(0, 0)  # both operands declared (k, free)
    (forward,) = lower_dense_gemm(record).steps
    a_bar, b_bar = lower_dense_gemm(record, direction="adjoint").steps
    assert _flags(forward) == (True, False, False)
    assert _flags(a_bar) == (False, True, True)
    assert _flags(b_bar) == (True, True, True)


@pytest.mark.parametrize(("reduce_a", "reduce_b"), REDUCE_DIMS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_forward_lowering(rng, reduce_a, reduce_b, dtype):
    plan = lower_dense_gemm(_gemm_record(reduce_a, reduce_b), dtype=dtype)
    (step,) = plan.steps
    assert (step.name, step.kind, step.reads, step.writes) == ("y", "matmul", ("w", "f"), ("y",))
    assert _flags(step) == (reduce_a == 0, reduce_b == 1, False)
    assert (plan.mechanism, plan.determinism) == ("gemm", "run_to_run")
    w = rng.standard_normal((K, 4) if reduce_a == 0 else (4, K)).astype(dtype)
    f = rng.standard_normal((K, 5) if reduce_b == 0 else (5, K)).astype(dtype)
    assert [(s.name, s.shape, s.dtype) for s in plan.required.values()] == [
        ("w", w.shape, dtype),
        ("f", f.shape, dtype),
        ("y", (4, 5), dtype),
    ]
    y = np.full((4, 5), np.nan, dtype)
    plan("host", {"w": w, "f": f, "y": y})
    reference = _as_free_by_k(w, reduce_a) @ _as_free_by_k(f, reduce_b).T.astype(np.float64)
    assert rel_error(y, reference) < 10 * np.finfo(dtype).eps


@pytest.mark.parametrize(("reduce_a", "reduce_b"), REDUCE_DIMS)
def test_adjoint_lowering(rng, reduce_a, reduce_b):
    plan = lower_dense_gemm(_gemm_record(reduce_a, reduce_b), direction="adjoint")
    assert [step.name for step in plan.steps] == ["w_bar", "f_bar"]
    assert [s.name for s in plan.inputs] == ["w", "f", "y_bar"]
    assert [(s.name, s.shape) for s in plan.outputs] == [
        ("w_bar", (K, 4) if reduce_a == 0 else (4, K)),
        ("f_bar", (K, 5) if reduce_b == 0 else (5, K)),
    ]
    w = rng.standard_normal(plan.inputs[0].shape)
    f = rng.standard_normal(plan.inputs[1].shape)
    y_bar = rng.standard_normal((4, 5))
    w_bar, f_bar = (np.full(s.shape, np.nan) for s in plan.outputs)
    plan("host", {"w": w, "f": f, "y_bar": y_bar, "w_bar": w_bar, "f_bar": f_bar})
    # y = W F^T with W = w as (free, K), F = f as (free, K): dW = y_bar F, dF = y_bar^T W
    w_ref = y_bar @ _as_free_by_k(f, reduce_b)
    f_ref = y_bar.T @ _as_free_by_k(w, reduce_a)
    assert rel_error(w_bar, w_ref.T if reduce_a == 0 else w_ref) < 1e-14
    assert rel_error(f_bar, f_ref.T if reduce_b == 0 else f_ref) < 1e-14


def test_a_written_buffer_that_shares_memory_with_another_is_refused(rng):
    """f_bar over f: the w_bar step would read the f the f_bar step wrote. Refused by name
    before any step runs; buffers side by side in one array are fine."""
    plan = lower_dense_gemm(_gemm_record(0, 0), direction="adjoint")
    w, y_bar = rng.standard_normal(plan.inputs[0].shape), rng.standard_normal((4, 5))
    f = rng.standard_normal(plan.inputs[1].shape)
    w_bar = np.full(plan.outputs[0].shape, np.nan)
    kept = f.copy()
    with pytest.raises(MatmulUnavailable, match="buffers 'f_bar' and 'f' share memory"):
        plan("host", {"w": w, "f": f, "y_bar": y_bar, "w_bar": w_bar, "f_bar": f})
    assert np.array_equal(f, kept) and np.isnan(w_bar).all()
    both = np.full((2, *f.shape), np.nan)
    both[0] = f
    plan("host", {"w": w, "f": both[0], "y_bar": y_bar, "w_bar": w_bar, "f_bar": both[1]})
    assert rel_error(w_bar, (y_bar @ f.T).T) < 1e-14


@pytest.mark.parametrize(("reduce_a", "reduce_b"), REDUCE_DIMS)
def test_records_name_the_reduce_axis_by_label(rng, reduce_a, reduce_b):
    """A record that names the walked axis by label lowers and runs as by position."""
    by_position = _gemm_record(reduce_a, reduce_b)
    by_label = _record(*(dataclasses.replace(o, reduce_dim="row") for o in by_position.operands))
    assert [o.reduce_axis for o in by_label.operands] == [reduce_a, reduce_b]
    plan = lower_dense_gemm(by_label)
    assert plan.steps == lower_dense_gemm(by_position).steps
    w = rng.standard_normal(plan.inputs[0].shape)
    f = rng.standard_normal(plan.inputs[1].shape)
    y = np.full((4, 5), np.nan)
    plan("host", {"w": w, "f": f, "y": y})
    reference = _as_free_by_k(w, reduce_a) @ _as_free_by_k(f, reduce_b).T
    assert rel_error(y, reference) < 1e-14


@pytest.mark.parametrize("bad", ["col", 2, -1, True])
def test_an_unknown_reduce_axis_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=rf"operand 'w': reduce_dim {bad!r} is not"):
        dataclasses.replace(_operand("w", 0), reduce_dim=bad)


@pytest.mark.parametrize("reduce_dim", [0, 1])
def test_gemv_lowers_against_a_ones_vector(rng, reduce_dim):
    record = _record(_operand("w", reduce_dim))
    forward = lower_dense_gemm(record)
    assert forward.mechanism == "gemv"
    assert [(s.name, s.shape) for s in forward.required.values()] == [
        ("w", (K, 4) if reduce_dim == 0 else (4, K)),
        ("ones", (K, 1)),
        ("y", (4, 1)),
    ]
    w = rng.standard_normal(forward.inputs[0].shape)
    y = np.full(4, np.nan)  # the lane plane, one value per lane
    forward("host", {"w": w, "ones": np.ones(K), "y": y})
    assert rel_error(y, _as_free_by_k(w, reduce_dim).sum(axis=1)) < 1e-14

    adjoint = lower_dense_gemm(record, direction="adjoint")
    assert [s.name for s in adjoint.inputs] == ["ones", "y_bar"]
    y_bar = rng.standard_normal(4)
    w_bar = np.full(forward.inputs[0].shape, np.nan)
    adjoint("host", {"ones": np.ones(K), "y_bar": y_bar, "w_bar": w_bar})
    expected = np.outer(y_bar, np.ones(K))
    assert rel_error(w_bar, expected.T if reduce_dim == 0 else expected) < 1e-14


def _replace(record, **changes):
    return dataclasses.replace(record, **changes)


def _replace_operand(record, index, **changes):
    operands = list(record.operands)
    operands[index] = dataclasses.replace(operands[index], **changes)
    return dataclasses.replace(record, operands=tuple(operands))


DENSE = _gemm_record(0, 0)


@pytest.mark.parametrize(
    ("record", "direction", "message"),
    [
        (None, "forward", "no record: the kernel is not a recognised contraction"),
        (_replace(DENSE, dense=False, refusals=("an index read from data",)), "forward",
         "the contraction is not dense: an index read from data"),
        (_replace(DENSE, dense=False), "forward", "not dense: no reason given"),
        (_replace_operand(DENSE, 1, dense=False, refusals=("a stride built from a bare literal",)),
         "forward", "operand 'f' is not dense: a stride built from a bare literal"),
        (_replace(DENSE, term_form="transformed"), "forward", "the term is transformed"),
        (_replace(DENSE, reduce_start=1), "forward",
         r"the reduce over 'r' is not a full unit-step range: range\(1, 6, 1\)"),
        (_replace(DENSE, reduce_step=2), "adjoint",
         r"not a full unit-step range: range\(0, 6, 2\)"),
        (_replace(DENSE, reduce_extent=None), "forward",
         "the reduce extent of 'r' is not a constant"),
        (_replace_operand(DENSE, 0, dims=(("row", K, 4), ("unit", None, 1))), "forward",
         "operand 'w' has a non-constant extent along 'unit'"),
        (_replace_operand(DENSE, 0, dims=(("row", K, 8), ("unit", 4, 2), ("lane", 2, 1))),
         "forward", "operand 'w' has 3 axes; a matrix product takes tables of two axes"),
        (_replace_operand(DENSE, 1, dims=(("row", 8, 5), ("sample", 5, 1))), "forward",
         "operand 'f''s axis 'row' has extent 8, but the loop over 'r' runs 6 steps"),
        (_replace_operand(DENSE, 0, reduce_stride=8), "forward",
         "not a unit-step walk of operand 'w': its address advances 8 elements per step"),
        (_replace_operand(DENSE, 0, reduce_dim=None), "forward",
         "operand 'w' is not read along one of its axes by the loop variable 'r'"),
        (_replace(DENSE, operands=DENSE.operands[:1]), "forward",
         "a 'gemm' contraction is 2 operand.s. with a 'product_of_reads' term; this one has 1"),
        (_replace(DENSE, operand_class="gemv"), "forward",
         "a 'gemv' contraction is 1 operand.s. with a 'bare_read' term; this one has 2"),
        (_replace(DENSE, operand_class="ger"), "forward",
         "operand_class must be 'gemm' or 'gemv', not 'ger'"),
        (_replace(DENSE, outputs=(("y", "mutable"), ("z", "mutable"))), "forward",
         r"the contraction writes 2 outputs \['y', 'z'\]; a product writes one"),
        (_replace(DENSE, operands=(DENSE.operands[0], DENSE.operands[0])), "adjoint",
         "operand 'w' is both factors"),
    ],
)  # fmt: skip
def test_lowering_refusals(record, direction, message):
    with pytest.raises(PlanUnavailable, match=message):
        lower_dense_gemm(record, direction=direction)


def test_a_table_read_twice_lowers_forward(rng):
    w = _operand("w", 0)
    plan = lower_dense_gemm(_record(w, dataclasses.replace(w, role="b", reduce_stride=4)))
    assert [s.name for s in plan.inputs] == ["w"] and plan.steps[0].reads == ("w",)
    table = rng.standard_normal((K, 4))
    y = np.full((4, 4), np.nan)
    plan("host", {"w": table, "y": y})
    assert rel_error(y, table.T @ table) < 1e-14


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"direction": "backward"}, "direction must be 'forward' or 'adjoint', not 'backward'"),
        (
            {"dtype": "int32"},
            "dtype must be one of 'bfloat16', 'float16', 'float32', 'float64', not 'int32'",
        ),
        ({"dtype": "no-such-type"}, "dtype must be one of 'bfloat16'"),
    ],
)
def test_bad_arguments_are_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        lower_dense_gemm(DENSE, **kwargs)


@pytest.mark.parametrize("record", ["x", 3, DENSE.operands[0]], ids=["str", "int", "operand"])
def test_a_record_of_another_type_is_a_type_error(record):
    with pytest.raises(TypeError, match=r"record must be a RecognizedContraction .*not "):
        lower_dense_gemm(record)


# Every name eagle.gemm.plan had before it became the face of steps, matmul and lowering.
PLAN_NAMES = (
    "BACKENDS", "STEP_KINDS", "StepFn", "CapturedGemmCall", "LoweredPlan", "MatmulSpec",
    "PlanStep", "WorkspaceSpec", "assembly_step", "captured_gemm_calls",
    "check_plan_capturable", "lower_dense_gemm", "matmul_step",
)  # fmt: skip


def test_eagle_gemm_plan_still_exports_every_name():
    import eagle.gemm
    import eagle.gemm.plan

    for name in PLAN_NAMES:
        value = getattr(eagle.gemm.plan, name)
        if name in eagle.gemm.__all__:
            assert getattr(eagle.gemm, name) is value, name
