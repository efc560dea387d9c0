"""The row-major -> column-major mapping, executed against a simulation of column-major Sgemm.

The simulation reads and writes flat buffers the way cuBLAS does: element (i, j)
of a column-major matrix with leading dimension ld lies at offset i + j*ld from
the operand's first element. Each operand is a view into a larger buffer, so a
wrong leading dimension or offset reads the wrong values or writes outside the
destination view.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eagle import arrays
from eagle.gemm import (
    GemmMappingUnavailable,
    SgemmParams,
    product_shape,
    sgemm_params,
    sgemm_params_for_arrays,
)
from tests.test_gemm_capture import FLAGS, _kwargs

SENTINEL = -12345.0
LAYOUTS = ("contiguous", "row_sliced", "column_sliced", "both_sliced")


def _carve(shape, layout, pad, start, dtype, fill):
    """A view of ``shape`` inside a larger base buffer, and that base."""
    rows, cols = shape
    extra_rows = pad if layout in ("row_sliced", "both_sliced") else 0
    extra_cols = pad if layout in ("column_sliced", "both_sliced") else 0
    base = fill((rows + extra_rows, cols + extra_cols)).astype(dtype)
    r0, c0 = min(start, extra_rows), min(start, extra_cols)
    return base, base[r0 : r0 + rows, c0 : c0 + cols]


def _offset(base, view):
    return (view.ctypes.data - base.ctypes.data) // base.itemsize


def _read(flat, offset, op, rows, cols, ld):
    """op(X) as a rows x cols matrix, X read column-major with leading dimension ld."""
    stored_rows = rows if op == "N" else cols
    assert ld >= max(1, stored_rows), "cuBLAS rejects a leading dimension below the row count"
    i, j = np.indices((rows, cols))
    return flat[offset + i + j * ld] if op == "N" else flat[offset + j + i * ld]


def _simulate_sgemm(params, flats, offsets):
    """Column-major C = op_a(first) @ op_b(second) on raw memory (beta = 0)."""
    first, second = params.operands
    a = _read(flats[first], offsets[first], params.op_a, params.m, params.k, params.lda)
    b = _read(flats[second], offsets[second], params.op_b, params.k, params.n, params.ldb)
    assert params.ldc >= max(1, params.m)
    i, j = np.indices((params.m, params.n))
    flats["out"][offsets["out"] + i + j * params.ldc] = a @ b


@st.composite
def products(draw):
    m, n = (draw(st.integers(1, 7)) for _ in range(2))
    k = draw(st.integers(0, 7))  # k = 0 is a product too: out = 0 (beta * out)
    flags = tuple(draw(st.booleans()) for _ in range(3))
    transpose_a, transpose_b, transpose_out = flags
    shapes = {
        "a": (k, m) if transpose_a else (m, k),
        "b": (n, k) if transpose_b else (k, n),
        "out": (n, m) if transpose_out else (m, n),
    }
    layouts = {name: draw(st.sampled_from(LAYOUTS)) for name in shapes}
    pads = {name: draw(st.integers(1, 4)) for name in shapes}
    starts = {name: draw(st.integers(0, 4)) for name in shapes}
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    seed = draw(st.integers(0, 2**32 - 1))
    return shapes, flags, layouts, pads, starts, dtype, seed


@settings(max_examples=300, deadline=None)
@given(products())
def test_mapping_computes_the_product_and_writes_only_the_destination(case):
    shapes, flags, layouts, pads, starts, dtype, seed = case
    rng = np.random.default_rng(seed)
    bases, views = {}, {}
    for name, shape in shapes.items():
        fill = (lambda s: np.full(s, SENTINEL)) if name == "out" else rng.standard_normal
        bases[name], views[name] = _carve(
            shape, layouts[name], pads[name], starts[name], dtype, fill
        )
    transpose_a, transpose_b, transpose_out = flags
    params = sgemm_params(
        views["a"].shape, views["a"].strides,
        views["b"].shape, views["b"].strides,
        views["out"].shape, views["out"].strides,
        np.dtype(dtype).itemsize,
        transpose_a=transpose_a, transpose_b=transpose_b, transpose_out=transpose_out,
    )  # fmt: skip
    assert params.transposes == flags
    assert hash(params) == hash(SgemmParams(*params))

    flats = {name: base.ravel().astype(np.float64) for name, base in bases.items()}
    offsets = {name: _offset(bases[name], views[name]) for name in bases}
    _simulate_sgemm(params, flats, offsets)

    written = flats["out"].reshape(bases["out"].shape)
    a, b = views["a"].astype(np.float64), views["b"].astype(np.float64)
    product = (a.T if transpose_a else a) @ (b.T if transpose_b else b)
    reference = product.T if transpose_out else product
    inside = np.zeros(bases["out"].shape, dtype=bool)
    r0, c0 = np.unravel_index(offsets["out"], bases["out"].shape)
    rows, cols = shapes["out"]
    inside[r0 : r0 + rows, c0 : c0 + cols] = True
    np.testing.assert_allclose(
        written[inside].reshape(rows, cols), reference, rtol=1e-12, atol=1e-12
    )
    assert np.all(written[~inside] == SENTINEL), "the mapping wrote outside the destination view"


@pytest.mark.parametrize("flags", FLAGS)
def test_operand_order_and_ops_follow_the_transpose_rules(flags):
    transpose_a, transpose_b, transpose_out = flags
    a = np.zeros((4, 3) if transpose_a else (3, 4), np.float32)
    b = np.zeros((5, 4) if transpose_b else (4, 5), np.float32)
    out = np.zeros((5, 3) if transpose_out else (3, 5), np.float32)
    params = sgemm_params_for_arrays(
        a, b, out, transpose_a=transpose_a, transpose_b=transpose_b, transpose_out=transpose_out
    )
    if transpose_out:
        expected = ("N" if transpose_a else "T", "N" if transpose_b else "T", 3, 5, 4)
        assert params.operands == ("a", "b")
        assert (params.lda, params.ldb) == (a.shape[1], b.shape[1])
    else:
        expected = ("T" if transpose_b else "N", "T" if transpose_a else "N", 5, 3, 4)
        assert params.operands == ("b", "a")
        assert (params.lda, params.ldb) == (b.shape[1], a.shape[1])
    assert params[:5] == expected
    assert params.ldc == out.shape[1]


def test_leading_dimensions_come_from_strides_not_shapes():
    big = np.zeros((10, 16), np.float32)
    a, b, out = big[2:5, 1:5], np.zeros((4, 6), np.float32), np.zeros((8, 9), np.float32)[:3, 2:8]
    params = sgemm_params_for_arrays(a, b, out)
    assert (params.lda, params.ldb, params.ldc) == (6, 16, 9)


def test_host_and_device_arrays_map_alike():
    a = arrays.asarray(np.ones((3, 4), np.float32))
    b = np.ones((4, 5), np.float32)
    out = arrays.zeros((3, 5), "float32")
    assert sgemm_params_for_arrays(a, b, out) == SgemmParams("N", "N", 5, 3, 4, 5, 4, 5, ("b", "a"))


def test_a_single_row_ignores_its_row_stride():
    row = np.lib.stride_tricks.as_strided(np.zeros(4, np.float32), (1, 4), (0, 4))
    params = sgemm_params_for_arrays(
        row, np.zeros((4, 2), np.float32), np.zeros((1, 2), np.float32)
    )
    assert params.ldb == 4


def _f32(shape):
    return np.zeros(shape, np.float32)


@pytest.mark.parametrize("name", ["a", "b", "out"])
def test_a_float64_operand_is_refused_by_name(name):
    operands = {"a": _f32((3, 4)), "b": _f32((4, 5)), "out": _f32((3, 5))}
    operands[name] = operands[name].astype(np.float64)
    with pytest.raises(GemmMappingUnavailable, match=f"operand '{name}' is float64"):
        sgemm_params_for_arrays(operands["a"], operands["b"], operands["out"])


@pytest.mark.parametrize(
    ("a", "b", "out", "message"),
    [
        (_f32(4), _f32((4, 5)), _f32((1, 5)), r"operand 'a' is 1-D \(shape \(4,\)\)"),
        (_f32((3, 4)), _f32((2, 4, 5)), _f32((3, 5)), "operand 'b' is 3-D"),
        (
            np.asfortranarray(_f32((3, 4))),
            _f32((4, 5)),
            _f32((3, 5)),
            "operand 'a' is not unit-stride along its last axis",
        ),
        (
            _f32((3, 4)),
            _f32((4, 10))[:, ::2],
            _f32((3, 5)),
            "operand 'b' is not unit-stride along its last axis",
        ),
        (
            _f32((3, 4)),
            np.broadcast_to(_f32((1, 5)), (4, 5)),
            _f32((3, 5)),
            "operand 'b' has a row stride of 0 elements, smaller than its width 5",
        ),
        (
            _f32((3, 4)),
            _f32((5, 6)),
            _f32((3, 6)),
            "operand 'b': contracted extent 5 disagrees with operand 'a''s 4",
        ),
        (
            _f32((3, 4)),
            _f32((4, 5)),
            _f32((3, 4)),
            r"operand 'out' has shape \(3, 4\); it must have shape \(3, 5\)",
        ),
        (
            _f32((3, 4)),
            _f32((4, 5)),
            _f32((5, 3))[::-1],
            "operand 'out' has a row stride of -3 elements",
        ),
    ],
)
def test_each_refusal_names_the_operand(a, b, out, message):
    with pytest.raises(GemmMappingUnavailable, match=message):
        sgemm_params_for_arrays(a, b, out, transpose_out=out.shape == (5, 3))


def test_destination_shape_refusal_names_the_transposed_shape():
    with pytest.raises(GemmMappingUnavailable, match=r"it must have shape \(5, 3\)"):
        sgemm_params_for_arrays(_f32((3, 4)), _f32((4, 5)), _f32((3, 5)), transpose_out=True)


def test_pure_mapping_refuses_misaligned_and_oversized_layouts():
    with pytest.raises(GemmMappingUnavailable, match="row stride of 10 bytes, not a multiple"):
        sgemm_params(
            (2, 2), (10, 4), (2, 2), (8, 4), (2, 2), (8, 4), 4,
            transpose_a=False, transpose_b=False, transpose_out=False,
        )  # fmt: skip
    with pytest.raises(GemmMappingUnavailable, match="beyond cuBLAS's 32-bit extents"):
        sgemm_params(
            (2**31, 2), (8, 4), (2, 2), (8, 4), (2**31, 2), (8, 4), 4,
            transpose_a=False, transpose_b=False, transpose_out=False,
        )  # fmt: skip
    with pytest.raises(GemmMappingUnavailable, match="give one stride per axis"):
        sgemm_params(
            (2, 2), (8,), (2, 2), (8, 4), (2, 2), (8, 4), 4,
            transpose_a=False, transpose_b=False, transpose_out=False,
        )  # fmt: skip


@pytest.mark.parametrize(("position", "argument"), [(0, "a_shape"), (5, "out_strides")])
@pytest.mark.parametrize("given", [None, "3x4", 3])
def test_a_shape_or_strides_that_is_no_sequence_is_named(position, argument, given):
    arguments = [(3, 4), (16, 4), (4, 5), (20, 4), (3, 5), (20, 4)]
    arguments[position] = given
    with pytest.raises(TypeError, match=f"{argument} must be a sequence of ints"):
        sgemm_params(*arguments, 4, transpose_a=False, transpose_b=False, transpose_out=False)


def test_an_operand_without_array_attributes_is_named():
    with pytest.raises(TypeError, match="operand 'b' must be an array with shape, strides"):
        sgemm_params_for_arrays(_f32((3, 4)), [[1.0] * 5] * 4, _f32((3, 5)))


def test_product_shape_gives_the_destination_shape():
    assert product_shape(
        (3, 4), (5, 4), transpose_a=False, transpose_b=True, transpose_out=False
    ) == (3, 5)
    assert product_shape(
        (4, 3), (4, 5), transpose_a=True, transpose_b=False, transpose_out=True
    ) == (5, 3)
    shape = product_shape([np.int64(3), 4], np.zeros((4, 5)).shape)  # flags default to False
    assert shape == (3, 5) and all(type(extent) is int for extent in shape)
    assert product_shape(np.array([3, 4]), (4, 5)) == (3, 5)


@pytest.mark.parametrize(
    ("a_shape", "message"),
    [(3, "its shape is 3, not a sequence of extents"), ((True, 4), "extent True along axis 0")],
)
def test_product_shape_refuses_what_is_no_shape_by_name(a_shape, message):
    with pytest.raises(GemmMappingUnavailable, match=f"operand 'a'.*{message}"):
        product_shape(a_shape, (4, 5))


@pytest.mark.parametrize("flags", FLAGS)
def test_a_k_0_product_maps_with_leading_dimensions_cublas_takes(flags):
    transpose_a, transpose_b, transpose_out = flags
    a = np.zeros((0, 3) if transpose_a else (3, 0), np.float32)  # numpy gives strides (0, 0)
    b = np.zeros((5, 0) if transpose_b else (0, 5), np.float32)
    out = np.zeros((5, 3) if transpose_out else (3, 5), np.float32)
    params = sgemm_params_for_arrays(a, b, out, **_kwargs(flags))
    assert params.k == 0 and params.transposes == flags
    assert params == SgemmParams(*params)  # a valid call: every ld >= max(1, its rows)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"m": -1}, r"SgemmParams: m = -1; extents are ints from 0"),
        ({"n": -3}, r"SgemmParams: n = -3"),
        ({"k": -1}, r"SgemmParams: k = -1"),
        ({"k": 2.0}, r"SgemmParams: k = 2.0"),
        ({"lda": 4}, r"SgemmParams: lda = 4; it must be an int from max\(1, rows\) = 5"),
        ({"ldc": 0, "m": 0}, r"SgemmParams: ldc = 0; it must be an int from max\(1, rows\) = 1"),
        ({"op_a": "C"}, r"SgemmParams: op_a must be 'N' or 'T', not 'C'"),
        ({"operands": ("a", "a")}, r"SgemmParams: operands must be \('b', 'a'\) or"),
    ],
)  # fmt: skip
def test_sgemm_params_refuse_what_cublas_would(fields, message):
    good = SgemmParams("N", "N", 5, 3, 4, 5, 4, 5, ("b", "a"))
    with pytest.raises(ValueError, match=message):
        SgemmParams(*good._replace(**fields))


def test_sgemm_params_refuse_negative_extents_by_operand():
    strides = (16, 4)
    with pytest.raises(
        ValueError, match=r"operand 'b' has shape \(4, -5\): extent -5 along axis 1"
    ):
        sgemm_params((3, 4), strides, (4, -5), strides, (3, 5), strides, 4,
                     transpose_a=False, transpose_b=False, transpose_out=False)  # fmt: skip
    with pytest.raises(GemmMappingUnavailable, match=r"operand 'a' has shape \(-3, 4\)"):
        product_shape((-3, 4), (4, 5), transpose_a=False, transpose_b=False, transpose_out=False)


def test_an_out_sharing_memory_with_an_operand_is_refused_by_name():
    big = np.zeros((4, 12), np.float32)
    square = np.zeros((4, 4), np.float32)
    with pytest.raises(
        GemmMappingUnavailable, match="operand 'out' shares memory with operand 'a'"
    ):
        sgemm_params_for_arrays(square, np.zeros((4, 4), np.float32), square)
    with pytest.raises(
        GemmMappingUnavailable, match="operand 'out' shares memory with operand 'b'"
    ):
        sgemm_params_for_arrays(square, big[:, :4], big[:, 3:7])  # one column in common
    device = arrays.Array(ptr=0x10000, shape=(4, 4), dtype=np.dtype(np.float32),
                          strides=(16, 4), device_index=0)  # fmt: skip
    with pytest.raises(GemmMappingUnavailable, match="with operand 'b'"):
        sgemm_params_for_arrays(square, device, device[:, :4])
    # column slices of one buffer that share no element map as before
    params = sgemm_params_for_arrays(big[:, :4], big[:, 4:8], big[:, 8:])
    assert (params.lda, params.ldb, params.ldc) == (12, 12, 12)
    assert sgemm_params_for_arrays(big[:1, :4], square, big[1:2, :4])  # adjacent rows


@pytest.mark.parametrize("flag", ["transpose_a", "transpose_b", "transpose_out"])
@pytest.mark.parametrize("value", ["False", 0, 1, None, np.float64(1.0)])
def test_a_transpose_flag_that_is_not_a_bool_is_refused_by_name(flag, value):
    from eagle.gemm import gemm_params_for_arrays, matmul_step

    message = f"{flag} must be True or False, not {value!r}"
    with pytest.raises(TypeError, match=re.escape(message)):
        matmul_step("c", a="a", b="b", out="c", **{flag: value})
    with pytest.raises(TypeError, match=re.escape(message)):
        gemm_params_for_arrays(_f32((3, 3)), _f32((3, 3)), _f32((3, 3)), **{flag: value})
    with pytest.raises(TypeError, match=re.escape(message)):
        sgemm_params_for_arrays(_f32((3, 3)), _f32((3, 3)), _f32((3, 3)), **{flag: value})
    with pytest.raises(TypeError, match=re.escape(message)):
        product_shape((3, 3), (3, 3), **{"transpose_a": False, "transpose_b": False,
                                         "transpose_out": False, flag: value})  # fmt: skip
    step = matmul_step("c", a="a", b="b", out="c", **{flag: np.bool_(True)})
    assert getattr(step.matmul, flag) is True
