"""The one dtype table (hawk.dtypes): its rows agree with numpy, CUDA and DLPack, and
every layer reads it."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

import eagle.gemm.capture
import eagle.gemm.dtypes
import hawk.emit
from eagle.arrays import _dlpack
from eagle.arrays._args import check_dtype
from hawk import dtypes
from hawk.emit import _cuda_helpers as cuda_helpers

_DLPACK = {  # dlpack.h's DLDataTypeCode
    "kDLInt": 0, "kDLUInt": 1, "kDLFloat": 2, "kDLBfloat": 4, "kDLComplex": 5, "kDLBool": 6,
    "kDLFloat8_e4m3fn": 10, "kDLFloat8_e5m2": 12,
}  # fmt: skip


@pytest.mark.parametrize("row", dtypes.TABLE, ids=lambda row: row.name)
def test_each_row_agrees_with_numpy(row):
    if row.name == "float128" and np.dtype(np.longdouble).itemsize != 16:
        pytest.skip("this platform's long double is not 16 bytes")
    assert row.numpy.name == row.name and row.numpy.itemsize == row.itemsize
    assert dtypes.find(row.name) is row and dtypes.find(row.numpy) is row
    if row.dlpack is not None:
        assert dtypes.by_dlpack(*row.dlpack) is row and row.dlpack[1] == 8 * row.itemsize


def test_cuda_codes_are_the_bindings_cudaDataType():
    runtime = pytest.importorskip("cuda.bindings.runtime")
    names = {
        "int8": "CUDA_R_8I", "int16": "CUDA_R_16I", "int32": "CUDA_R_32I", "int64": "CUDA_R_64I",
        "uint8": "CUDA_R_8U", "uint16": "CUDA_R_16U", "uint32": "CUDA_R_32U",
        "uint64": "CUDA_R_64U", "float16": "CUDA_R_16F", "bfloat16": "CUDA_R_16BF",
        "float32": "CUDA_R_32F", "float64": "CUDA_R_64F", "complex64": "CUDA_C_32F",
        "complex128": "CUDA_C_64F", "float8_e4m3fn": "CUDA_R_8F_E4M3",
        "float8_e5m2": "CUDA_R_8F_E5M2",
    }  # fmt: skip
    coded = {row.name: row.cuda for row in dtypes.TABLE if row.cuda is not None}
    assert coded == {name: int(getattr(runtime.cudaDataType, code)) for name, code in names.items()}


def test_dlpack_codes_follow_the_header():
    assert dtypes.find("bfloat16").dlpack == (_DLPACK["kDLBfloat"], 16)
    assert dtypes.find("float8_e4m3fn").dlpack == (_DLPACK["kDLFloat8_e4m3fn"], 8)
    assert dtypes.find("float8_e5m2").dlpack == (_DLPACK["kDLFloat8_e5m2"], 8)
    assert dtypes.find("bool").dlpack == (_DLPACK["kDLBool"], 8)
    assert dtypes.find("complex64").dlpack == (_DLPACK["kDLComplex"], 64)
    assert dtypes.find("uint16").dlpack == (_DLPACK["kDLUInt"], 16)


def test_lookups_take_names_dtypes_and_types_and_know_what_is_not_a_row():
    assert dtypes.find(np.float32) is dtypes.find("f4") is dtypes.find("float32")
    assert dtypes.find(ml_dtypes.bfloat16).name == "bfloat16"
    assert dtypes.find("object") is None and dtypes.find("no such dtype") is None
    assert dtypes.numpy_dtype("bfloat16") == np.dtype(ml_dtypes.bfloat16)
    assert dtypes.find(np.dtype(">f4")) is dtypes.find("float32")  # the row of either order
    assert dtypes.plane_row(np.dtype(">f4")) is None  # a plane is native byte order
    assert dtypes.plane_row(np.dtype("float16")).plane.c_type == "hawk_f16"
    with pytest.raises(TypeError):
        dtypes.numpy_dtype("no such dtype")


def test_the_vocabularies_each_layer_reads_come_from_the_table():
    assert dtypes.PLANE_DTYPES == (
        "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2",
    )  # fmt: skip
    assert dtypes.PRODUCT_DTYPES == ("bfloat16", "float16", "float32", "float64")
    assert dtypes.SCALED_DTYPES == ("float8_e4m3fn", "float8_e5m2")
    assert [d.name for d in hawk.emit.DTYPES] == list(dtypes.PLANE_DTYPES)
    assert [d.name for d in hawk.emit.HALVES] == ["float16", "bfloat16"]
    through = [r.name for r in dtypes.TABLE if r.plane and r.plane.from_double != "once"]
    assert through == ["bfloat16"]  # the one row a float64 value rounds into through float32
    assert eagle.gemm.dtypes.HALVES == ("bfloat16", "float16")
    assert eagle.gemm.dtypes.PRODUCT_DTYPES == dtypes.PRODUCT_DTYPES
    assert eagle.gemm.dtypes.SCALED_DTYPES == dtypes.SCALED_DTYPES
    assert eagle.gemm.dtypes.OUT_DTYPES["bfloat16"] == ("bfloat16", "float32")
    assert eagle.gemm.dtypes.OUT_DTYPES["float8_e5m2"] == ("bfloat16", "float32")
    assert eagle.gemm.capture._DATA_TYPES == {
        "float16": 2, "bfloat16": 14, "float32": 0, "float64": 1,
        "float8_e4m3fn": 28, "float8_e5m2": 29,
    }  # fmt: skip
    assert cuda_helpers.C_TYPES == {
        "float16": "hawk_f16", "bfloat16": "hawk_bf16", "float32": "float", "float64": "double",
        "float8_e4m3fn": "hawk_e4m3", "float8_e5m2": "hawk_e5m2",
    }  # fmt: skip
    assert cuda_helpers.HALF_C_TYPES == ("hawk_bf16", "hawk_f16")
    assert cuda_helpers.FP8_C_TYPES == ("hawk_e4m3", "hawk_e5m2")


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_rows_are_arrays_storage_planes_without_adds_and_scaled_products(name):
    row = dtypes.find(name)
    assert row.array and row.storage_only and not row.interface
    assert row.plane is not None and not row.plane.adds
    assert row.product is not None and row.product.scaled
    assert row.product.out == ("bfloat16", "float32")
    assert row.product.math == ("fp32", "fast_accum")
    assert check_dtype(name) == row.numpy
    assert _dlpack._dtype(_dlpack._DataType(*row.dlpack, 1)) == row.numpy


def test_e5m2_pairs_only_with_e4m3_as_cublaslt_does():
    assert dtypes.find("float8_e4m3fn").product.partners("float8_e4m3fn") == (
        "float8_e4m3fn", "float8_e5m2",
    )  # fmt: skip
    assert dtypes.find("float8_e5m2").product.partners("float8_e5m2") == ("float8_e4m3fn",)
    assert dtypes.find("float32").product.partners("float32") == ("float32",)


def test_a_row_that_is_not_an_array_dtype_is_refused_with_its_note(monkeypatch):
    """The seam a dtype eagle cannot hold yet goes through (no row is such today)."""
    row = dataclasses.replace(dtypes.find("float8_e5m2"), array=False, note="not yet: convert it")
    monkeypatch.setitem(dtypes._BY_NAME, row.name, row)
    monkeypatch.setitem(dtypes._BY_DTYPE, row.numpy, row)
    monkeypatch.setitem(dtypes._BY_DLPACK, row.dlpack, row)
    with pytest.raises(TypeError, match="dtype float8_e5m2 is not an Array dtype yet: not yet"):
        check_dtype("float8_e5m2")
    with pytest.raises(BufferError, match="DLPack dtype float8_e5m2 is not an eagle Array"):
        _dlpack._dtype(_dlpack._DataType(*row.dlpack, 1))


def test_a_dlpack_code_outside_the_table_is_refused_by_code():
    with pytest.raises(BufferError, match="DLPack dtype code 0 with 128 bits has no numpy"):
        _dlpack._dtype(_dlpack._DataType(0, 128, 1))


def test_one_function_says_which_cublas_call_a_product_makes() -> None:
    entry = eagle.gemm.dtypes.cublas_entry
    assert entry("float64", "fp64") == "dgemm"
    assert entry("float32", "fp32") == entry("float32", "tf32", "tf32") == "sgemm"
    assert entry("float32", "tf32") == entry("float32", "fp32", "tf32") == "gemm_ex"
    assert entry("bfloat16", "fp32") == entry("float16", "fp32") == "gemm_ex"
    assert entry("float8_e4m3fn", "fast_accum") == entry("float8_e5m2", "fp32") == "lt_matmul"
    assert eagle.plan._route._cublas_call("float32", "tf32") == "cublasGemmEx"
