"""fp8 planes: a storage type for hawk reads and writes, computed in float32.

On the host they are ``ml_dtypes`` arrays (a load widens exactly, a store rounds to
nearest even); on the device hawk's own one-byte structs, whose conversions the emitted
CUDA C defines in integer arithmetic. Both sides round alike: the C conversions are
checked here against ``ml_dtypes`` bit for bit (compiled with the host's C compiler),
and every test kernel with fp8 planes compiles with NVRTC for sm_90. Adds into fp8
tables are refused, naming the plane.
"""

from __future__ import annotations

import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest

import eagle.plan
from eagle.cuda import compile_cuda
from hawk.emit import _cuda_helpers, compute_dtype, cuda, host
from hawk.errors import HawkError
from tests._hawk_kernels import CASES, contract, histogram, saxpy

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
FP8 = [E4M3, E5M2]
ADDS = {"histogram", "moments"}  # the test kernels that add into a table


def _bits(values: np.ndarray) -> np.ndarray:
    return values.view(np.uint8)


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_a_host_kernel_stores_its_float32_result_rounded_to_the_plane(rng, dtype):
    a = np.array([1.75], np.float32)
    x = (rng.standard_normal(1000) * 4).astype(dtype)
    y = (rng.standard_normal(1000) * 4).astype(dtype)
    want = (a[0] * x.astype(np.float32) + y.astype(np.float32)).astype(dtype)
    eagle.plan.auto(saxpy).run(a=a, x=x, y=y)
    assert np.array_equal(_bits(y), _bits(want))
    assert compute_dtype({"a": a.dtype, "x": dtype, "y": dtype}) == np.float32


def test_beside_a_float64_plane_fp8_planes_compute_in_float64_and_round_from_it(rng):
    a = np.array([1.0625 + 2.0**-40], np.float64)  # just past a tie of e4m3 (1 and 1.125)
    x = np.ones(64, E4M3)
    y = np.zeros(64, E4M3)
    eagle.plan.auto(saxpy).run(a=a, x=x, y=y)
    assert compute_dtype({"a": a.dtype, "x": E4M3, "y": E4M3}) == np.float64
    assert np.array_equal(_bits(y), _bits((a[0] * x.astype(np.float64)).astype(E4M3)))
    assert float(y[0]) == 1.125  # through float32 it would have been 1.0


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_tables_are_read_widened_into_a_float32_sum(rng, dtype):
    w = (rng.standard_normal((16, 8)) * 2).astype(dtype)
    f = (rng.standard_normal((16, 12)) * 2).astype(dtype)
    y = np.full(96, np.nan, np.float32)
    eagle.plan.auto(contract).run(w=w, f=f, y=y)
    want = (f.astype(np.float64).T @ w.astype(np.float64)).reshape(-1)
    # exact products of fp8 values, summed in float32
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_adds_into_an_fp8_table_are_refused_naming_the_plane(rng):
    case = next(c for c in CASES if c.name == "histogram")
    planes = case.make(rng, np.dtype(np.float32))
    planes["counts"] = planes["counts"].astype(E5M2)
    message = (
        "plane 'counts' is float8_e5m2, and kernel 'histogram' adds into it; float8_e5m2 "
        "planes are read and written but take no adds .*: make 'counts' float16, "
        "bfloat16, float32 or float64$"
    )
    with pytest.raises(HawkError, match=message):
        eagle.plan.auto(histogram).run(**planes)
    dtypes = {name: value.dtype for name, value in planes.items()}
    for emitter in (host, cuda):
        with pytest.raises(HawkError, match=message):
            emitter.emit(histogram.ir, dtypes)
    reads = {**dtypes, "counts": np.dtype(np.float32), "x": E5M2}  # reading fp8 is fine
    compile_cuda(cuda.emit(histogram.ir, reads).source, name="hawk_histogram", arch="sm_90")


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize(
    "case", [c for c in CASES if c.name not in ADDS], ids=lambda case: case.name
)
def test_every_kernel_over_fp8_planes_compiles_for_sm90(case, dtype):
    emitted = cuda.emit(case.kernel.ir, {p.name: dtype for p in case.kernel.planes})
    short = dtype.removeprefix("float8_").removesuffix("fn")
    assert f"struct __align__(1) hawk_{short} {{ unsigned char bits; }};" in emitted.source
    assert len(compile_cuda(emitted.source, name=emitted.name, arch="sm_90")) > 0


def test_planes_of_both_fp8_dtypes_share_one_rounding_helper():
    dtypes = {"w": "float8_e4m3fn", "f": "float8_e5m2", "y": "bfloat16"}
    source = cuda.emit(contract.ir, dtypes).source
    assert source.count("unsigned hawk_round_fp8(") == 1
    assert "hawk_widen(p_w[" in source and "hawk_widen(p_f[" in source
    assert source.index("struct __align__(2) hawk_bf16") < source.index("hawk_round_fp8(")
    compile_cuda(source, name="hawk_contract", arch="sm_90")
    stored = cuda.emit(saxpy.ir, {"a": "float32", "x": "float32", "y": "float8_e4m3fn"})
    assert "p_y[lane] = hawk_round_e4m3(" in stored.source


# -- the device conversions, compiled for the host ---------------------------------------------

_SHIMS = r"""
#include <stdio.h>
#include <string.h>
#define __device__
#define __forceinline__ static inline
#define __align__(n) __attribute__((aligned(n)))
static long long __double_as_longlong(double d) { long long x; memcpy(&x, &d, 8); return x; }
static float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
"""

_MAIN = r"""
int main(int argc, char** argv)
{
    /* w: widen each code of both types; f: round float32s from stdin; d: round doubles */
    if (argv[1][0] == 'w') {
        for (int i = 0; i < 256; i++) {
            hawk_e4m3 a; a.bits = i; hawk_e5m2 b; b.bits = i;
            float x[2] = {widen_e4m3(a), widen_e5m2(b)};
            fwrite(x, 4, 2, stdout);
        }
        return 0;
    }
    if (argv[1][0] == 'f') {
        float v;
        while (fread(&v, 4, 1, stdin) == 1) {
            unsigned char o[2] = {round_e4m3_f(v).bits, round_e5m2_f(v).bits};
            fwrite(o, 1, 2, stdout);
        }
        return 0;
    }
    double v;
    while (fread(&v, 8, 1, stdin) == 1) {
        unsigned char o[2] = {hawk_round_e4m3(v).bits, hawk_round_e5m2(v).bits};
        fwrite(o, 1, 2, stdout);
    }
    return 0;
}
"""


def _c_program(tmp_path) -> str:
    """The emitted fp8 conversions as a C program (C has no overloads: the float
    overloads and the two widenings are renamed), built with the host's compiler."""
    code = _cuda_helpers.storage_types({"hawk_e4m3", "hawk_e5m2"})
    text = "\n".join(code)
    for short in ("e4m3", "e5m2"):
        text = text.replace(
            f"struct __align__(1) hawk_{short} {{ unsigned char bits; }};",
            f"typedef struct __align__(1) {{ unsigned char bits; }} hawk_{short};",
        )
        text = text.replace(
            f"float hawk_widen(hawk_{short} x)", f"float widen_{short}(hawk_{short} x)"
        )
        text = text.replace(
            f"hawk_{short} hawk_round_{short}(float v)", f"hawk_{short} round_{short}_f(float v)"
        )
    source, binary = tmp_path / "fp8.c", tmp_path / "fp8"
    source.write_text(_SHIMS + text + _MAIN)
    compiler = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([compiler, "-O1", "-o", str(binary), str(source)], check=True)
    return str(binary)


def _run(binary: str, mode: str, values: np.ndarray) -> bytes:
    return subprocess.run([binary, mode], input=values.tobytes(), capture_output=True).stdout


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no cc")
def test_the_emitted_conversions_are_ml_dtypes_bit_for_bit(tmp_path, rng):
    binary = _c_program(tmp_path)
    widened = np.frombuffer(_run(binary, "w", np.zeros(0)), np.float32).reshape(256, 2)
    codes = np.arange(256, dtype=np.uint8)
    for column, dtype in enumerate(FP8):
        want, got = codes.view(dtype).astype(np.float32), widened[:, column]
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), codes[~same]
    # every float32 whose low 12 bits are one of these (ties, their neighbours, ...)
    high = np.arange(1 << 20, dtype=np.uint32) << 12
    low = np.array([0, 1, 0x400, 0x7FF, 0x800, 0x801, 0xC00, 0xFFF], np.uint32)
    floats = (high[:, None] | low[None, :]).reshape(-1).view(np.float32)
    # doubles: random magnitudes, every midpoint of each format and its two neighbours
    doubles = [rng.standard_normal(200_000) * 10.0 ** rng.integers(-12, 8, 200_000)]
    for dtype in FP8:
        finite = np.unique(codes.view(dtype).astype(np.float64))
        finite = finite[np.isfinite(finite)]
        middle = (finite[1:] + finite[:-1]) / 2
        doubles += [middle, np.nextafter(middle, np.inf), np.nextafter(middle, -np.inf)]
    doubles += [np.array([1e300, -1e300, 5e-324, np.inf, -np.inf, np.nan, -np.nan, -0.0])]
    for mode, values in (("f", floats), ("d", np.concatenate(doubles))):
        got = np.frombuffer(_run(binary, mode, values), np.uint8).reshape(-1, 2)
        with np.errstate(over="ignore"):
            for column, dtype in enumerate(FP8):
                want = _bits(values.astype(dtype))
                wrong = np.nonzero(got[:, column] != want)[0]
                assert wrong.size == 0, (mode, dtype, values[wrong[:5]], got[wrong[:5], column])
