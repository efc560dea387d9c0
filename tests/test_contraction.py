"""hawk.contraction.recognize and lane_layout: the records of the contraction kernels."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hawk
from eagle.gemm import ContractionOperand, RecognizedContraction
from hawk.contraction import LaneLayout, lane_layout, recognize
from tests import _hawk_kernels
from tests import _route_kernels as k
from tests._route_kernels import B, R, U


def _operand(record: RecognizedContraction, name: str) -> ContractionOperand:
    (operand,) = [o for o in record.operands if o.name == name]
    return operand


def test_the_seed_kernel_is_a_dense_product_in_lane_order():
    record = recognize(k.contract)
    assert record == RecognizedContraction(
        carry="acc",
        reduce_var="r",
        reduce_extent=R,
        reduce_start=0,
        reduce_step=1,
        operands=(
            ContractionOperand(
                name="f",
                role="a",
                dims=(("row", R, B), ("sample", B, 1)),
                bound="sample",
                reads=((("row", "r"), ("sample", "sample")),),
                reduce_stride=B,
                reduce_dim=0,
                stride_labels=("declared", "declared"),
                dense=True,
                refusals=(),
            ),
            ContractionOperand(
                name="w",
                role="b",
                dims=(("row", R, U), ("unit", U, 1)),
                bound="unit",
                reads=((("row", "r"), ("unit", "unit")),),
                reduce_stride=U,
                reduce_dim=0,
                stride_labels=("declared", "declared"),
                dense=True,
                refusals=(),
            ),
        ),
        operand_class="gemm",
        term_form="product_of_reads",
        outputs=(("y", "mutable"),),
        dense=True,
        refusals=(),
        staged_fanin=True,
        fanin_source="acc",
        adjoint_accumulates=True,
    )
    # lane = sample * U + unit: f (addressed by lane // U) gives the product's rows
    assert lane_layout(k.contract) == LaneLayout(rows=B, cols=U)
    assert lane_layout(k.contract).lanes == B * U


def test_lanes_in_the_other_order_put_the_other_table_first():
    record = recognize(k.contract_other_order)
    assert record.operand_names == ("w", "f")
    assert [o.role for o in record.operands] == ["a", "b"]
    assert record.dense and record.term_form == "product_of_reads"
    assert lane_layout(k.contract_other_order) == LaneLayout(rows=U, cols=B)


def test_a_fold_into_the_output_itself_over_tables_declared_free_first():
    record = recognize(k.contract_direct)
    assert (record.carry, record.staged_fanin, record.fanin_source) == ("y", False, "y")
    assert record.operand_names == ("f", "w")
    f, w = record.operands
    assert f.dims == (("sample", B, R), ("row", R, 1))
    assert w.dims == (("unit", U, R), ("row", R, 1))
    assert (f.reduce_dim, f.reduce_stride, f.bound) == (1, 1, "sample")
    assert (w.reduce_dim, w.reduce_stride, w.bound) == (1, 1, "unit")
    assert record.dense and record.term_form == "product_of_reads"


def test_a_transformed_term():
    record = recognize(k.transformed)
    assert record.term_form == "transformed"
    assert record.operand_names == ("f", "w") and record.operand_class == "gemm"
    assert record.dense and all(o.dense for o in record.operands)


def test_two_outputs_are_listed():
    record = recognize(k.two_outputs)
    assert record.outputs == (("y", "mutable"), ("z", "mutable"))
    assert record.fanin_source == "acc" and record.dense


def test_a_gathered_index_is_not_dense():
    record = recognize(k.gathered)
    w, f = record.operands
    assert (w.name, f.name) == ("w", "f")
    assert not record.dense and not w.dense and f.dense
    assert (w.reduce_dim, w.reduce_stride) == (None, None)
    assert w.reads == ((("row", "int(order.at(row=r))"), ("unit", "unit")),)
    (reason,) = w.refusals
    assert "'w' along 'row'" in reason and "read from data" in reason
    assert record.refusals == (reason,)


def test_a_stride_built_from_a_bare_literal_is_not_dense():
    record = recognize(k.literal_stride)
    w = _operand(record, "w")
    assert w.dims == (("", None, 1),)
    assert w.stride_labels == ("literal",)
    assert (w.reduce_dim, w.reduce_stride, w.bound) == (0, U, "unit")
    assert w.reads == ((("", "r * 5 + unit"),),)
    assert not w.dense and "bare literal" in w.refusals[0]
    assert not record.dense and _operand(record, "f").dense


def test_three_operands_are_recognised_but_not_dense():
    record = recognize(k.three_operands)
    assert record.operand_names == ("w", "f", "s")
    assert [o.role for o in record.operands] == ["a", "b", "c"]
    assert record.term_form == "product_of_reads" and record.operand_count == 3
    assert _operand(record, "s").dims == (("row", R, 1),)
    assert not record.dense and "3 table reads" in record.refusals[0]
    assert lane_layout(k.three_operands).rows is None


def test_a_row_sum_is_one_operand():
    record = recognize(k.row_sum)
    (w,) = record.operands
    assert (record.operand_class, record.term_form) == ("gemv", "bare_read")
    assert (w.name, w.role, w.reduce_dim, w.bound) == ("w", "a", 0, "unit")
    assert record.dense
    assert lane_layout(k.row_sum) == LaneLayout(rows=U, cols=1)


def test_interleaved_lanes_are_not_the_product():
    record = recognize(k.interleaved_lanes)
    assert record.dense and record.operand_names == ("w", "f")  # the term's order
    layout = lane_layout(k.interleaved_lanes)
    assert layout.rows is None and layout.lanes is None
    assert "w.unit by lane % 5, f.sample by lane % 7" in layout.reason


@pytest.mark.parametrize(
    ("kernel", "says"),
    [
        (k.not_affine, "(r * r % 12) is not affine in the loop variable r"),
        (k.reversed_walk, "'w' is walked -1 elements along 'row'"),
        (k.offset_start, "starts from 1.0, not 0.0"),
    ],
    ids=["not_affine", "reversed_walk", "offset_start"],
)
def test_reads_that_are_no_matrix_operand_are_refused(kernel, says):
    record = recognize(kernel)
    assert not record.dense
    assert any(says in reason for reason in record.refusals), record.refusals


def test_a_partial_range_and_a_gram_product_are_dense_records():
    partial = recognize(k.partial_range)
    assert (partial.reduce_start, partial.reduce_extent, partial.reduce_step) == (1, R, 1)
    assert partial.dense
    gram = recognize(k.gram)
    assert gram.operand_names == ("w", "w") and gram.dense
    assert gram.operands[0].reads == gram.operands[1].reads  # both reads of the one table
    assert lane_layout(k.gram) == LaneLayout(rows=U, cols=U)


@pytest.mark.parametrize(
    "kernel",
    [
        k.max_fold,
        k.scaled_output,
        k.no_fold,
        k.fold_without_tables,
        *(case.kernel for case in _hawk_kernels.CASES if case.name != "contract"),
    ],
    ids=lambda kernel: kernel.name,
)
def test_kernels_outside_the_family_give_none(kernel):
    assert recognize(kernel) is None
    assert lane_layout(kernel) is None


def test_recognize_takes_a_kernel_or_its_ir_and_remembers():
    assert recognize(k.contract) is recognize(k.contract)
    assert recognize(k.contract.ir) == recognize(k.contract)
    with pytest.raises(TypeError, match="takes a @hawk.kernel function .*, not function"):
        recognize(k.contract.fn)


def test_importing_hawk_contraction_loads_no_cuda_bindings():
    script = textwrap.dedent(
        """
        import sys
        import hawk.contraction
        print([m for m in sys.modules if m.startswith("cuda")])
        sys.exit(1 if any(m.startswith("cuda") for m in sys.modules) else 0)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@settings(max_examples=30, deadline=None)
@given(
    extents=st.tuples(*(st.integers(1, 9) for _ in range(3))),
    w_reduce_first=st.booleans(),
    f_reduce_first=st.booleans(),
    sample_major=st.booleans(),
    w_first=st.booleans(),
)
def test_every_layout_of_a_product_is_recognised(
    extents, w_reduce_first, f_reduce_first, sample_major, w_first
):
    r, u, b = extents
    kernel = k.make_contract(
        r, u, b,
        w_reduce_first=w_reduce_first, f_reduce_first=f_reduce_first,
        sample_major=sample_major, w_first=w_first,
    )  # fmt: skip
    record = recognize(kernel)
    assert isinstance(kernel, hawk.Kernel)
    assert record.dense and record.term_form == "product_of_reads"
    assert record.operand_names == (("f", "w") if sample_major else ("w", "f"))
    w, f = _operand(record, "w"), _operand(record, "f")
    assert (w.reduce_dim, f.reduce_dim) == (int(not w_reduce_first), int(not f_reduce_first))
    assert w.reduce_stride == (u if w_reduce_first else 1)
    assert f.reduce_stride == (b if f_reduce_first else 1)
    assert (w.bound, f.bound) == ("unit", "sample")
    layout = lane_layout(kernel)
    assert (layout.rows, layout.cols) == ((b, u) if sample_major else (u, b))
