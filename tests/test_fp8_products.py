"""fp8 products on the host, with cuBLASLt faked: the dtype rules, the mapping of eagle's
row-major ``out = op(a) @ op(b)`` onto cuBLASLt's one fp8 layout (TN), every refusal,
the descriptors and the algorithm eagle gives cuBLASLt, the scales, capture and lending,
``matmul_step`` on both sides and ``captured_calls``.

The stand-in cuBLASLt (:class:`FakeCublasLt`) takes nvmath's own enums and attribute
types, and computes what ``cublasLtMatmul`` computes, column-major, on host memory: it
is the reference the mapping is checked against, next to a float64 numpy product of the
dequantised, scaled inputs.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from eagle.cuda import CudaError
from eagle.gemm import (
    CaptureInProgress,
    CublasCaptureHandle,
    CublasUnavailable,
    GemmMappingUnavailable,
    GemmParams,
    LoweredPlan,
    MatmulUnavailable,
    NotCapturable,
    PlanUnavailable,
    WorkspaceSpec,
    _library,
    _scaled,
    captured_calls,
    gemm_params_for_arrays,
    lending,
    matmul_step,
)
from eagle.gemm._library import CheckedLibrary
from eagle.gemm.capture import WORKSPACE_BYTES
from eagle.gemm.dtypes import product_dtypes
from eagle.gemm.lending import record_lent
from tests._util import FakeCalls, rel_error
from tests.test_gemm_capture import FakeDevice, HostBackedDeviceArray

lt = pytest.importorskip("nvmath.bindings.cublasLt")

E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
PAIRS = [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3)]
OUTS = [BF16, F32]
T, N = 1, 0  # cublasOperation_t
CODES = {28: E4M3, 29: E5M2, 14: BF16, 0: F32}  # cudaDataType_t


def _memory(ptr: int, count: int, dtype: np.dtype) -> np.ndarray:
    """``count`` elements of ``dtype`` at host address ``ptr``, writable in place."""
    nbytes = count * dtype.itemsize
    return np.frombuffer((ctypes.c_byte * nbytes).from_address(ptr), dtype=dtype)


class FakeCublasLt:
    """``nvmath.bindings.cublasLt`` as eagle calls it, on host memory.

    Enums, attribute types and the heuristic result's layout are nvmath's own; the calls
    that need the library are done here as cuBLASLt does them: descriptors and layouts
    are records, the heuristic hands out numbered algorithms, and :meth:`matmul` computes
    ``D = alpha * scale_a * scale_b * op(A) @ op(B) + beta * C`` column-major, refusing
    fp8 factors in any layout but TN (as Hopper's cuBLASLt does).
    """

    MatmulDescAttribute = lt.MatmulDescAttribute
    MatmulPreferenceAttribute = lt.MatmulPreferenceAttribute
    MatmulHeuristicResult = lt.MatmulHeuristicResult
    matmul_heuristic_result_dtype = lt.matmul_heuristic_result_dtype
    get_matmul_desc_attribute_dtype = staticmethod(lt.get_matmul_desc_attribute_dtype)
    get_matmul_preference_attribute_dtype = staticmethod(lt.get_matmul_preference_attribute_dtype)
    cuBLASLtError = type("cuBLASLtError", (Exception,), {})

    def __init__(self) -> None:
        self.log: list[tuple] = []
        self.descs: dict[int, dict] = {}
        self.layouts: dict[int, tuple[int, int, int, int]] = {}
        self.preferences: dict[int, dict] = {}
        self.algorithms = 0
        self.live: set[int] = set()
        self._next = 100

    def _id(self) -> int:
        self._next += 1
        self.live.add(self._next)
        return self._next

    def create(self) -> int:
        self.log.append(("create",))
        return 0x17

    def destroy(self, handle: int) -> None:
        self.log.append(("destroy", handle))

    def matmul_desc_create(self, compute: int, scale_type: int) -> int:
        desc = self._id()
        self.descs[desc] = {"compute": compute, "scale_type": scale_type}
        return desc

    def matmul_desc_set_attribute(self, desc: int, attr: int, buf: int, size: int) -> None:
        dtype = np.dtype(lt.get_matmul_desc_attribute_dtype(attr))
        assert size == dtype.itemsize, f"{lt.MatmulDescAttribute(attr).name} given {size} bytes"
        self.descs[desc][lt.MatmulDescAttribute(attr).name] = _memory(buf, 1, dtype)[0].item()

    def matmul_desc_destroy(self, desc: int) -> None:
        self.live.remove(desc)

    def matrix_layout_create(self, kind: int, rows: int, cols: int, ld: int) -> int:
        assert ld >= max(1, rows), "cuBLASLt: ld < rows"
        layout = self._id()
        self.layouts[layout] = (kind, rows, cols, ld)
        return layout

    def matrix_layout_destroy(self, layout: int) -> None:
        self.live.remove(layout)

    def matmul_preference_create(self) -> int:
        preference = self._id()
        self.preferences[preference] = {}
        return preference

    def matmul_preference_set_attribute(self, pref: int, attr: int, buf: int, size: int) -> None:
        dtype = np.dtype(lt.get_matmul_preference_attribute_dtype(attr))
        assert size == dtype.itemsize
        name = lt.MatmulPreferenceAttribute(attr).name
        self.preferences[pref][name] = _memory(buf, 1, dtype)[0].item()

    def matmul_preference_destroy(self, pref: int) -> None:
        self.live.remove(pref)

    def matmul_algo_get_heuristic(
        self, handle, desc, a, b, c, d, pref, requested, results, count
    ) -> None:
        assert requested == 1 and self.preferences[pref]["MAX_WORKSPACE_BYTES"] > 0
        self.log.append(("heuristic", dict(self.preferences[pref])))
        self.algorithms += 1
        record = _memory(results, 1, np.dtype(lt.matmul_heuristic_result_dtype))
        record["algo"]["data_"][0, 0] = 0xA160 + self.algorithms
        record["workspace_size"][0] = 1024
        _memory(count, 1, np.dtype(np.int32))[0] = 1

    def matmul(
        self, handle, desc, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo,
        workspace, nbytes, stream,
    ) -> None:  # fmt: skip
        attrs = self.descs[desc]
        assert (attrs["compute"], attrs["scale_type"]) == (68, 0)  # COMPUTE_32F, CUDA_R_32F
        ta, tb = attrs.get("TRANSA", N), attrs.get("TRANSB", N)
        (a_kind, *a_shape), (b_kind, *b_shape) = self.layouts[adesc], self.layouts[bdesc]
        if CODES[a_kind].itemsize == 1 or CODES[b_kind].itemsize == 1:
            assert (ta, tb) == (T, N), "cuBLASLt takes fp8 factors in the TN layout only"
        assert self.layouts[cdesc] == self.layouts[ddesc] and c == d
        op_a, op_b = self._matrix(a, a_kind, *a_shape), self._matrix(b, b_kind, *b_shape)
        op_a, op_b = (op_a.T if ta == T else op_a), (op_b.T if tb == T else op_b)
        out_kind, rows, cols, ldc = self.layouts[ddesc]
        assert op_a.shape == (rows, op_b.shape[0]) and op_b.shape[1] == cols
        alpha_v, beta_v = _memory(alpha, 1, F32)[0], _memory(beta, 1, F32)[0]
        assert beta == alpha + 4
        scale = 1.0
        for name in ("A_SCALE_POINTER", "B_SCALE_POINTER"):
            if attrs.get(name):
                scale *= float(_memory(attrs[name], 1, F32)[0])
        flat = _memory(d, (cols - 1) * ldc + rows, CODES[out_kind])
        index = np.arange(rows)[:, None] + ldc * np.arange(cols)[None, :]
        old = flat[index].astype(np.float64)
        product = op_a.astype(np.float64) @ op_b.astype(np.float64)
        value = alpha_v * scale * product + (beta_v * old if beta_v else 0.0)
        flat[index] = value.astype(CODES[out_kind])
        algorithm = int(_memory(algo, 1, np.dtype(np.uint64))[0])
        self.log.append(("matmul", stream, workspace, nbytes, algorithm, dict(attrs)))

    def _matrix(self, ptr: int, kind: int, rows: int, cols: int, ld: int) -> np.ndarray:
        """The rows x cols column-major matrix at ``ptr`` with leading dimension ``ld``."""
        flat = _memory(ptr, (cols - 1) * ld + rows, CODES[kind])
        return flat[np.arange(rows)[:, None] + ld * np.arange(cols)[None, :]]


class Fp8Device(FakeDevice):
    """The fake CUDA side of eagle.gemm, with the fake cuBLASLt on a device of compute
    capability ``capability``."""

    def __init__(self, monkeypatch, capability=(9, 0)):
        super().__init__(monkeypatch)
        self.lt = FakeCublasLt()
        self.capability = capability
        attrs = {"cudaDevAttrComputeCapabilityMajor": 75, "cudaDevAttrComputeCapabilityMinor": 76}
        runtime = type("Runtime", (), {"cudaDeviceAttr": type("Attr", (), attrs)})

        def fake_call(name, *args):
            if name == "cudaDeviceGetAttribute":
                return self.capability[args[0] - 75]
            assert name == "cudaGetDeviceProperties"
            return type("Properties", (), {"name": b"NVIDIA Tesla V100\0\0"})

        checked = CheckedLibrary(self.lt, "cublasLt", (FakeCublasLt.cuBLASLtError,))
        monkeypatch.setattr(_library, "cublaslt", lambda: checked)
        monkeypatch.setattr(_scaled, "cudart", FakeCalls(fake_call))
        monkeypatch.setattr(_scaled, "runtime", lambda: runtime)

    def aligned(self, values: np.ndarray, pad: int = 2) -> tuple[np.ndarray, np.ndarray, Any]:
        """``values`` in a larger NaN-padded buffer (each row ``pad`` 16-byte groups
        longer, one row more): the buffer, the view of ``values`` in it, and that view as a
        device array, 16-byte aligned."""
        rows, cols = values.shape
        extra = pad * 16 // values.itemsize
        base = np.full((rows + 1, cols + extra), np.nan, np.float32).astype(values.dtype)
        where = (slice(1, None), slice(16 // values.itemsize, 16 // values.itemsize + cols))
        base[where] = values
        assert base[where].ctypes.data % 16 == 0
        return base, base[where], self.array(base)[where]

    def scale(self, value: float) -> HostBackedDeviceArray:
        return self.array(np.array([value], np.float32))


@pytest.fixture
def fp8(monkeypatch):
    return Fp8Device(monkeypatch)


def _fp8_case(rng, pair, m=32, n=48, k=64):
    """Fresh fp8 factors a (m, k) and b (n, k): the layout fp8 products take."""
    a = (rng.standard_normal((m, k)) * 2).astype(pair[0])
    b = (rng.standard_normal((n, k)) * 2).astype(pair[1])
    return a, b


def _reference(a, b, scale=1.0, transpose_out=False):
    """scale * a @ b.T of the dequantised factors, in float64."""
    product = scale * (a.astype(np.float64) @ b.astype(np.float64).T)
    return product.T if transpose_out else product


# -- dtypes --------------------------------------------------------------------------------


@pytest.mark.parametrize("pair", PAIRS, ids=str)
@pytest.mark.parametrize("out", OUTS, ids=str)
def test_fp8_pairs_write_bfloat16_or_float32(pair, out):
    assert product_dtypes(*pair, out) == (pair[0].name, out.name, "fp32")
    assert product_dtypes(*pair, out, "fast_accum")[2] == "fast_accum"


@pytest.mark.parametrize(
    ("dtypes", "math", "message"),
    [
        ((E5M2, E5M2, F32), None, "operands 'a' and 'b' are both float8_e5m2: cuBLASLt has no "
         r"float8_e5m2 x float8_e5m2 product \(nor does torch._scaled_mm\); make one factor "
         "float8_e4m3fn"),
        ((E4M3, F32, F32), None, "operand 'b' is float32 but operand 'a' is float8_e4m3fn; a "
         "float8_e4m3fn factor pairs with float8_e4m3fn or float8_e5m2"),
        ((F32, E4M3, F32), None, "operand 'b' is float8_e4m3fn but operand 'a' is float32; "
         "both factors have one dtype"),
        ((E4M3, E4M3, E4M3), None, "operand 'out' is float8_e4m3fn; a float8_e4m3fn x "
         "float8_e4m3fn product writes bfloat16 or float32"),
        ((E4M3, E5M2, np.float16), None, "operand 'out' is float16"),
        ((E4M3, E4M3, F32), "tf32", "math='tf32' does not apply to float8_e4m3fn factors: they "
         "sum in fp32; leave math unset .exact., or pass 'fast_accum'"),
        ((F32, F32, F32), "fast_accum", "math='fast_accum' does not apply to float32"),
        ((np.int8, np.int8, F32), None, "operand 'a' is int8; a product takes bfloat16, "
         r"float16, float32 or float64 factors, or fp8 ones \(float8_e4m3fn, float8_e5m2\)"),
    ],
)  # fmt: skip
def test_fp8_products_outside_the_rules_are_refused_by_name(dtypes, math, message):
    with pytest.raises(GemmMappingUnavailable, match=message):
        product_dtypes(*dtypes, math)


# -- the layout: eagle's row-major product onto cuBLASLt's TN --------------------------------

FLAGS = list(itertools.product([False, True], repeat=3))


def _flags(flags):
    return dict(zip(("transpose_a", "transpose_b", "transpose_out"), flags, strict=True))


@pytest.mark.parametrize("flags", FLAGS, ids=str)
def test_every_layout_maps_onto_tn_or_is_refused_saying_what_to_pass(fp8, rng, flags):
    """Exhaustively over the flags: the two that are TN (transpose_a=False,
    transpose_b=True, either transpose_out) compute op(a) @ op(b), checked against the
    stand-in cuBLASLt's column-major product and a float64 reference; every other is
    refused naming the operand and what to pass."""
    transpose_a, transpose_b, transpose_out = flags
    m, n, k = 32, 48, 64
    a = (rng.standard_normal((k, m) if transpose_a else (m, k))).astype(E4M3)
    b = (rng.standard_normal((n, k) if transpose_b else (k, n))).astype(E5M2)
    out = np.full((n, m) if transpose_out else (m, n), np.nan, np.float32)
    handle = CublasCaptureHandle(0)
    if transpose_a or not transpose_b:
        wrong = "a" if transpose_a else "b"
        what = {"a": r"pass a.T as a C-ordered copy, of shape \(M, K\), with transpose_a=False",
                "b": r"pass b transposed, a C-ordered copy of b.T of shape \(N, K\), with "
                     "transpose_b=True"}[wrong]  # fmt: skip
        with pytest.raises(GemmMappingUnavailable, match=rf"operand '{wrong}' .*{what}"):
            gemm_params_for_arrays(a, b, out, **_flags(flags))
        return
    params = gemm_params_for_arrays(a, b, out, **_flags(flags))
    assert (params.op_a, params.op_b) == ("T", "N")
    assert params.operands == (("a", "b") if transpose_out else ("b", "a"))
    operands = {"a": fp8.array(a), "b": fp8.array(b), "out": fp8.array(out)}
    handle.warm(params, operands)
    want = _reference(a, b, transpose_out=transpose_out)
    assert rel_error(out, want) < 1e-6
    (*_, attrs) = fp8.lt.log[-1]
    assert (attrs["TRANSA"], attrs["TRANSB"]) == (T, N)
    first = a if params.operands[0] == "a" else b
    assert fp8.lt.layouts[max(fp8.lt.layouts) - 2][0] == {E4M3: 28, E5M2: 29}[first.dtype]


@pytest.mark.parametrize("pair", PAIRS, ids=str)
@pytest.mark.parametrize("out_dtype", OUTS, ids=str)
@pytest.mark.parametrize("transpose_out", [False, True])
def test_views_scales_alpha_and_beta_compute_the_scaled_product(
    fp8, rng, pair, out_dtype, transpose_out
):
    """Factors and out as column slices of wider buffers (leading dimensions from the
    strides), the scales of a and b on the right operands of cuBLAS's (they swap when
    cuBLAS's first operand is b), alpha and beta: out = alpha * sa * sb * a @ b.T + beta *
    out, nothing written outside out's view."""
    a, b = _fp8_case(rng, pair)
    shape = (b.shape[0], a.shape[0]) if transpose_out else (a.shape[0], b.shape[0])
    old = rng.standard_normal(shape).astype(out_dtype)
    _, _, a_view = fp8.aligned(a)
    _, _, b_view = fp8.aligned(b, pad=3)
    out_base, got, out_view = fp8.aligned(old)
    sa, sb = fp8.scale(0.5), fp8.scale(3.0)
    handle = CublasCaptureHandle(0)
    params = gemm_params_for_arrays(
        a_view, b_view, out_view, transpose_b=True, transpose_out=transpose_out
    )
    assert (params.lda, params.ldb) == (
        (a_view.strides[0], b_view.strides[0])
        if transpose_out
        else (b_view.strides[0], a_view.strides[0])
    )
    operands = {"a": a_view, "b": b_view, "out": out_view, "a_scale": sa, "b_scale": sb}
    handle.gemm(params, operands, alpha=2.0, beta=0.5)
    want = 2.0 * _reference(a, b, 1.5, transpose_out) + 0.5 * old.astype(np.float64)
    assert rel_error(got, want) < (4e-3 if out_dtype == BF16 else 1e-6)
    written = np.isnan(out_base.astype(np.float32))
    assert written.sum() == out_base.size - got.size  # nothing outside out's view
    attrs = fp8.lt.log[-1][-1]
    first, second = (sb, sa) if params.operands == ("b", "a") else (sa, sb)
    assert (attrs["A_SCALE_POINTER"], attrs["B_SCALE_POINTER"]) == (first.ptr, second.ptr)


def test_a_scale_may_be_left_out_and_is_then_one(fp8, rng):
    a, b = _fp8_case(rng, (E4M3, E4M3))
    out = np.full((32, 48), np.nan, np.float32)
    params = gemm_params_for_arrays(a, b, out, transpose_b=True)
    operands = {"a": fp8.array(a), "b": fp8.array(b), "out": fp8.array(out)}
    CublasCaptureHandle(0).gemm(params, {**operands, "b_scale": fp8.scale(4.0)})
    assert rel_error(out, _reference(a, b, 4.0)) < 1e-6
    attrs = fp8.lt.log[-1][-1]
    assert "B_SCALE_POINTER" not in attrs and attrs["A_SCALE_POINTER"]  # b is cuBLAS's A


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        (((32, 40), (48, 40), (32, 48)), "the contracted extent K = 40 is not a multiple of 16"),
        (((32, 64), (40, 64), (32, 40)), "operand 'out' has 40 columns .its contiguous axis., "
         r"not a multiple of 16, which fp8 products need; pad b's rows \(N\)"),
        (((32, 0), (48, 0), (32, 48)), r"an fp8 product has an extent of 0 \(m=48, n=32, k=0"),
        (((32, 64), (0, 64), (32, 0)), r"an fp8 product has an extent of 0 \(m=0, n=32, k=64"),
    ],
)  # fmt: skip
def test_extents_that_are_not_multiples_of_16_are_refused(shapes, message):
    a, b, out = (
        np.zeros(shape, dtype) for shape, dtype in zip(shapes, (E4M3, E4M3, F32), strict=True)
    )
    with pytest.raises(GemmMappingUnavailable, match=message):
        gemm_params_for_arrays(a, b, out, transpose_b=True)


def test_the_rows_of_out_need_not_be_a_multiple_of_16():
    a, b, out = np.zeros((7, 32), E4M3), np.zeros((16, 32), E4M3), np.zeros((7, 16), BF16)
    assert gemm_params_for_arrays(a, b, out, transpose_b=True).n == 7
    a, out = np.zeros((0, 32), E4M3), np.zeros((0, 16), BF16)  # no rows: nothing to do
    assert gemm_params_for_arrays(a, b, out, transpose_b=True).n == 0


def test_leading_dimensions_that_are_not_16_bytes_are_refused():
    wide = np.zeros((32, 72), E4M3)
    with pytest.raises(GemmMappingUnavailable, match="operand 'a' has a row stride of 72 bytes"):
        gemm_params_for_arrays(wide[:, :64], np.zeros((16, 64), E4M3), np.zeros((32, 16), F32),
                               transpose_b=True)  # fmt: skip
    out = np.zeros((32, 20), BF16)[:, :16]
    with pytest.raises(GemmMappingUnavailable, match="operand 'out' has a row stride of 40 bytes"):
        gemm_params_for_arrays(np.zeros((32, 64), E4M3), np.zeros((16, 64), E4M3), out,
                               transpose_b=True)  # fmt: skip


def test_gemm_params_carry_b_dtype_and_refuse_an_fp8_layout_they_cannot_run():
    a, b, out = np.zeros((32, 64), E4M3), np.zeros((16, 64), E5M2), np.zeros((32, 16), F32)
    params = gemm_params_for_arrays(a, b, out, transpose_b=True, math="fast_accum")
    assert params[9:] == ("float8_e4m3fn", "float32", "fast_accum", "float8_e5m2")
    assert GemmParams(*params) == params and hash(params)
    assert GemmParams(*params[:9], "float32", "float32", "fp32").b_dtype == "float32"
    with pytest.raises(ValueError, match="GemmParams: operand 'b' is read as"):
        GemmParams("N", "N", *params[2:])
    with pytest.raises(ValueError, match="GemmParams: operands 'a' and 'b' are both float8_e5m2"):
        GemmParams(*params[:9], "float8_e5m2", "float32", "fp32", "float8_e5m2")


# -- the handle's cuBLASLt side ---------------------------------------------------------------


def _operands(fp8, rng, pair=(E4M3, E4M3), scales=True):
    a, b = _fp8_case(rng, pair)
    out = np.full((32, 48), np.nan, np.float32)
    operands = {"a": fp8.array(a), "b": fp8.array(b), "out": fp8.array(out)}
    if scales:
        operands.update(a_scale=fp8.scale(0.25), b_scale=fp8.scale(2.0))
    return gemm_params_for_arrays(a, b, out, transpose_b=True), operands, (a, b, out)


def test_the_algorithm_is_chosen_once_when_warmed_and_the_capture_only_enqueues(fp8, rng):
    handle = CublasCaptureHandle(fp8.STREAM)
    params, operands, (a, b, out) = _operands(fp8, rng)
    handle.warm(params, operands)
    log = [entry[0] for entry in fp8.lt.log]
    assert log == ["create", "heuristic", "matmul"] and fp8.synchronized == 1
    preference = fp8.lt.log[1][1]
    assert preference["MAX_WORKSPACE_BYTES"] == WORKSPACE_BYTES
    assert {preference[f"MIN_ALIGNMENT_{x}_BYTES"] for x in "ABCD"} == {16}
    fp8.capturing = True
    for _ in range(2):
        handle.gemm(params, operands)
    fresh = {**operands, "out": fp8.array(np.full((32, 48), np.nan, np.float32))}
    handle.gemm(params, fresh)  # new addresses, the same product: no heuristic
    assert [entry[0] for entry in fp8.lt.log].count("heuristic") == 1
    matmuls = [entry for entry in fp8.lt.log if entry[0] == "matmul"]
    assert len(matmuls) == 4 and len({entry[4] for entry in matmuls}) == 1  # one algorithm
    stream, workspace, nbytes = matmuls[-1][1:4]
    assert stream == fp8.STREAM and (workspace, nbytes) == handle._workspace
    assert rel_error(out, _reference(a, b, 0.5)) < 1e-6
    kept = [obj for used in fp8.used for obj in used]
    assert operands["a_scale"] in kept and operands["b_scale"] in kept  # a capture keeps them


def test_an_fp8_product_never_warmed_is_refused_in_a_capture(fp8, rng):
    handle = CublasCaptureHandle(fp8.STREAM)
    params, operands, _ = _operands(fp8, rng)
    fp8.capturing = True
    with pytest.raises(CaptureInProgress, match="this product was never warmed"):
        handle.gemm(params, operands)
    assert "matmul" not in [entry[0] for entry in fp8.lt.log]


def test_fast_accumulation_is_asked_of_cublaslt_by_math(fp8, rng):
    handle = CublasCaptureHandle(0)
    a, b = _fp8_case(rng, (E4M3, E5M2))
    out = np.zeros((32, 48), BF16)
    operands = {"a": fp8.array(a), "b": fp8.array(b), "out": fp8.array(out)}
    for math, fast in ((None, None), ("fast_accum", 1)):
        params = gemm_params_for_arrays(a, b, out, transpose_b=True, math=math)
        handle.gemm(params, operands)
        assert fp8.lt.log[-1][-1].get("FAST_ACCUM") == fast
    assert [entry[0] for entry in fp8.lt.log].count("heuristic") == 2  # two products


def test_a_bound_fp8_product_keeps_its_scales_and_rebinds_them(fp8, rng):
    handle = CublasCaptureHandle(0)
    params, operands, (a, b, out) = _operands(fp8, rng)
    bound = handle.bind(params, operands)
    bound()
    assert rel_error(out, _reference(a, b, 0.5)) < 1e-6
    other = np.full((32, 48), np.nan, np.float32)
    rebound = bound.rebound({**operands, "out": fp8.array(other), "b_scale": fp8.scale(8.0)})
    rebound()
    assert rel_error(other, _reference(a, b, 2.0)) < 1e-6
    with pytest.raises(GemmMappingUnavailable, match="operand 'out' starts 4 bytes past"):
        skewed = np.zeros(32 * 48 + 1, np.float32)[1:].reshape(32, 48)
        bound.rebound({**operands, "out": fp8.array(skewed)})


def test_lending_runs_fp8_products_on_the_lent_stream_and_workspace(fp8, rng, monkeypatch):
    handle = CublasCaptureHandle(fp8.STREAM)
    params, operands, _ = _operands(fp8, rng)
    handle.warm(params, operands)
    bound = handle.bind(params, operands)
    fp8.capturing = True
    lent: list[int] = []
    pool = type("Pool", (), {"scoped": lambda _, nbytes, stream: _Scoped(lent, nbytes)})
    monkeypatch.setattr(lending, "default_pool", lambda device: pool())
    monkeypatch.setattr(lending, "in_loop_body", lambda stream: False)
    monkeypatch.setattr(lending, "record_use", lambda *objs: fp8.used.append(objs))
    record_lent(handle, 0x22, [bound])
    stream, workspace, nbytes = fp8.lt.log[-1][1:4]
    assert (stream, workspace, nbytes) == (0x22, lent[0], WORKSPACE_BYTES)
    assert handle._scaled.target == (fp8.STREAM, *handle._workspace)  # pointed back
    assert operands["a_scale"] in fp8.used[-1]


class _Scoped:
    """A workspace allocated and freed in a capture, as MemoryPool.scoped gives one."""

    def __init__(self, lent, nbytes):
        self.values = np.empty(nbytes, np.uint8)
        lent.append(self.values.ctypes.data)

    def __enter__(self):
        return self.values.ctypes.data

    def __exit__(self, *exc):
        return False


def test_destroy_closes_the_cublaslt_handle_and_descriptors_go_with_their_calls(fp8, rng):
    handle = CublasCaptureHandle(0)
    params, operands, _ = _operands(fp8, rng)
    handle.gemm(params, operands)
    handle.destroy()
    assert ("destroy", 0x17) in fp8.lt.log
    gc.collect()
    assert not fp8.lt.live  # every descriptor, layout and preference destroyed


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda fp8, ops: {**ops, "a_scale": fp8.array(np.ones(2, np.float32))}, NotCapturable,
         r"operand 'a_scale' is float32 of shape \(2,\); a scale is a one-element float32"),
        (lambda fp8, ops: {**ops, "b_scale": fp8.array(np.ones(1, np.float64))}, NotCapturable,
         "operand 'b_scale' is float64 of shape"),
        (lambda fp8, ops: {**ops, "a_scale": np.ones(1, np.float32)}, NotCapturable,
         "operand 'a_scale' is not a device array"),
    ],
)  # fmt: skip
def test_scales_that_are_not_one_float32_device_element_are_refused(fp8, rng, change, error,
                                                                    message):  # fmt: skip
    params, operands, _ = _operands(fp8, rng)
    with pytest.raises(error, match=message):
        CublasCaptureHandle(0).gemm(params, change(fp8, operands))


def test_scales_on_a_product_that_is_not_fp8_are_refused(fp8, rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 5)).astype(np.float32)
    out = np.zeros((4, 5), np.float32)
    operands = {"a": fp8.array(a), "b": fp8.array(b), "out": fp8.array(out)}
    params = gemm_params_for_arrays(a, b, out)
    with pytest.raises(NotCapturable, match=r"operands \['a_scale'\] are per-tensor scales, "):
        CublasCaptureHandle(0).gemm(params, {**operands, "a_scale": fp8.scale(2.0)})


def test_an_operand_off_16_byte_alignment_is_refused(fp8, rng):
    params, operands, (a, _, _) = _operands(fp8, rng)
    padded = np.zeros(a.size + 8, E4M3)
    padded[8:] = a.reshape(-1)
    skewed = fp8.array(padded[8:].reshape(a.shape))
    with pytest.raises(GemmMappingUnavailable, match="operand 'a' starts 8 bytes past a 16-byte"):
        CublasCaptureHandle(0).gemm(params, {**operands, "a": skewed})


def test_a_device_older_than_sm89_is_refused_naming_it(monkeypatch, rng):
    fp8 = Fp8Device(monkeypatch, capability=(7, 0))
    params, operands, _ = _operands(fp8, rng)
    handle = CublasCaptureHandle(0)
    message = (
        r"cuda:0 \(NVIDIA Tesla V100\) has compute capability 7.0; fp8 products need 8.9 or "
        "newer"
    )
    with pytest.raises(CublasUnavailable, match=message):
        handle.warm(params, operands)
    assert fp8.lt.log == []  # no cuBLASLt handle was made


# -- matmul_step and captured_calls ----------------------------------------------------------


def _fp8_step(**names):
    return matmul_step("y", a="x", b="w", out="y", transpose_b=True, **names)


@pytest.mark.parametrize("pair", PAIRS, ids=str)
@pytest.mark.parametrize("out_dtype", OUTS, ids=str)
def test_an_fp8_matmul_step_on_the_host_is_the_scaled_product_in_float32(rng, pair, out_dtype):
    x, w = _fp8_case(rng, pair)
    y = np.full((32, 48), np.nan, out_dtype)
    step = _fp8_step(a_scale="sx", b_scale="sw")
    assert step.reads == ("x", "w", "sx", "sw")
    bufs = {"x": x, "w": w, "y": y, "sx": np.float32([0.5]), "sw": np.float32([3.0])}
    step.run(bufs, "host")
    wide = (x.astype(np.float32) @ w.astype(np.float32).T) * np.float32(1.5)
    assert np.array_equal(y.astype(np.float32), wide.astype(out_dtype).astype(np.float32))


def test_an_fp8_matmul_step_refuses_on_the_host_what_the_device_refuses(rng):
    x, w = _fp8_case(rng, (E4M3, E4M3))
    y = np.zeros((32, 48), np.float32)
    untransposed = matmul_step("y", a="x", b="w", out="y")
    with pytest.raises(MatmulUnavailable, match="matmul step 'y'.*operand 'b' is read as"):
        untransposed.run({"x": x, "w": np.ascontiguousarray(w.T), "y": y}, "host")
    with pytest.raises(
        MatmulUnavailable, match=r"a_scale 'sx' is float64 of shape \(1,\); a scale"
    ):
        _fp8_step(a_scale="sx").run({"x": x, "w": w, "y": y, "sx": np.ones(1)}, "host")
    halves = {"x": x.astype(BF16), "w": w.astype(BF16), "y": y, "sx": np.float32([2.0])}
    with pytest.raises(MatmulUnavailable, match="a_scale='sx' scale a bfloat16 product"):
        _fp8_step(a_scale="sx").run(halves, "host")
    with pytest.raises(PlanUnavailable, match="out 'y' is also an operand"):
        matmul_step("y", a="x", b="w", out="y", a_scale="y")


def test_an_fp8_matmul_step_on_the_device_runs_cublaslt_with_its_scales(fp8, rng):
    x, w = _fp8_case(rng, (E5M2, E4M3))
    y = np.full((32, 48), np.nan, BF16)
    sx, sw = fp8.scale(0.5), fp8.scale(0.25)
    bufs = {"x": fp8.array(x), "w": fp8.array(w), "y": fp8.array(y), "sx": sx, "sw": sw}
    step = _fp8_step(a_scale="sx", b_scale="sw")
    for _ in range(2):
        step.run(bufs, "device")
    assert rel_error(y, _reference(x, w, 0.125)) < 4e-3
    log = [entry[0] for entry in fp8.lt.log]
    assert log.count("matmul") == 2 and log.count("heuristic") == 1
    attrs = fp8.lt.log[-1][-1]
    assert (attrs["A_SCALE_POINTER"], attrs["B_SCALE_POINTER"]) == (sw.ptr, sx.ptr)
    other = fp8.scale(1.0)
    step.run({**bufs, "sw": other}, "device")  # another scale buffer: found by its address
    assert fp8.lt.log[-1][-1]["A_SCALE_POINTER"] == other.ptr
    skewed = np.zeros(32 * 48 + 1, BF16)[1:].reshape(32, 48)
    with pytest.raises(MatmulUnavailable, match="operand 'out' starts 2 bytes past"):
        step.run({**bufs, "y": fp8.array(skewed)}, "device")


def _fp8_plan(scales=True):
    names = {"a_scale": "sx", "b_scale": "sw"} if scales else {}
    inputs = [WorkspaceSpec("x", (32, 64), "float8_e4m3fn"),
              WorkspaceSpec("w", (48, 64), "float8_e5m2")]  # fmt: skip
    if scales:
        inputs += [WorkspaceSpec("sx", (1,), "float32"), WorkspaceSpec("sw", (1,), "float32")]
    outputs = (WorkspaceSpec("y", (32, 48), "float32"),)
    return LoweredPlan((_fp8_step(**names),), "gemm", "run_to_run", tuple(inputs), outputs)


def test_captured_calls_bind_an_fp8_plan_with_its_scales(fp8, rng):
    x, w = _fp8_case(rng, (E4M3, E5M2))
    y = np.full((32, 48), np.nan, np.float32)
    sx, sw = fp8.scale(2.0), fp8.scale(0.5)
    buffers = {"x": fp8.array(x), "w": fp8.array(w), "y": fp8.array(y), "sx": sx, "sw": sw}
    (call,) = captured_calls(_fp8_plan(), buffers, math="fast_accum")
    assert call.params.math == "fast_accum" and call.params.b_dtype == "float8_e5m2"
    assert call.operands["a_scale"] is sx and call.operands["b_scale"] is sw
    handle = CublasCaptureHandle(fp8.STREAM)
    handle.warm(call.params, call.operands)
    fp8.capturing = True
    handle.gemm(call.params, call.operands)
    assert rel_error(y, _reference(x, w)) < 1e-6


def test_a_plan_declares_its_scales_as_one_float32_element_of_an_fp8_product():
    assert _fp8_plan().required["sx"].shape == (1,)
    bad = WorkspaceSpec("sx", (2,), "float32")
    with pytest.raises(PlanUnavailable, match=r"a_scale 'sx' is declared float32 of shape \(2,\)"):
        LoweredPlan((_fp8_step(a_scale="sx"),), "gemm", "run_to_run",
                    (*_fp8_plan(False).inputs, bad), _fp8_plan().outputs)  # fmt: skip
    halves = (WorkspaceSpec("x", (32, 64), "bfloat16"), WorkspaceSpec("w", (48, 64), "bfloat16"),
              WorkspaceSpec("sx", (1,), "float32"))  # fmt: skip
    with pytest.raises(PlanUnavailable, match="a_scale 'sx' scales a bfloat16 product"):
        LoweredPlan((_fp8_step(a_scale="sx"),), "gemm", "run_to_run", halves,
                    _fp8_plan().outputs)  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"transpose_b": False}, r"'b' is read as \(K, N\) \(transpose_b=False\)"),
        ({"transpose_a": True}, r"'a' is read transposed"),
    ],
)
def test_an_fp8_step_of_a_layout_its_products_refuse_is_refused_when_the_plan_is_built(
    change, message
):
    """The plan refuses it before any run, so no step writes before a later one refuses."""
    good = matmul_step("y1", a="x", b="w", out="y1", transpose_b=True)
    shape = (64, 32) if change.get("transpose_a") else (32, 64)
    bad = matmul_step("y2", a="x2", b="v", out="y2", **{"transpose_b": True, **change})
    v_shape = (64, 48) if not change.get("transpose_b", True) else (48, 64)
    inputs = (WorkspaceSpec("x", (32, 64), "float8_e4m3fn"),
              WorkspaceSpec("w", (48, 64), "float8_e4m3fn"),
              WorkspaceSpec("x2", shape, "float8_e4m3fn"),
              WorkspaceSpec("v", v_shape, "float8_e4m3fn"))  # fmt: skip
    outputs = (WorkspaceSpec("y1", (32, 48), "float32"), WorkspaceSpec("y2", (32, 48), "float32"))
    with pytest.raises(PlanUnavailable, match=rf"matmul step 'y2' \(a='x2'.*{message}"):
        LoweredPlan((good, bad), "gemm", "run_to_run", inputs, outputs)
    odd = (*inputs[:2], WorkspaceSpec("x2", (32, 40), "float8_e4m3fn"),
           WorkspaceSpec("v", (48, 40), "float8_e4m3fn"))  # fmt: skip
    bad = matmul_step("y2", a="x2", b="v", out="y2", transpose_b=True)
    with pytest.raises(PlanUnavailable, match="K = 40 is not a multiple of 16"):
        LoweredPlan((good, bad), "gemm", "run_to_run", odd, outputs)


def _lt_failure(*args):
    """cuBLASLt failing as nvmath's binding reports it: its exception, with the status."""
    error = FakeCublasLt.cuBLASLtError("CUBLAS_STATUS_NOT_SUPPORTED")
    error.status = 15  # CUBLAS_STATUS_NOT_SUPPORTED
    raise error


def test_a_failed_cublaslt_matmul_raises_cuda_error_naming_the_call_and_status(
    fp8, rng, monkeypatch
):
    monkeypatch.setattr(fp8.lt, "matmul", _lt_failure)
    params, operands, _ = _operands(fp8, rng)
    with pytest.raises(
        CudaError, match=r"^cublasLt\.matmul failed with CUBLAS_STATUS_NOT_SUPPORTED"
    ) as raised:
        CublasCaptureHandle(fp8.STREAM).gemm(params, operands)
    assert isinstance(raised.value.__cause__, FakeCublasLt.cuBLASLtError)


def test_a_product_cublaslt_fails_to_find_an_algorithm_for_is_refused(fp8, rng, monkeypatch):
    monkeypatch.setattr(fp8.lt, "matmul_algo_get_heuristic", _lt_failure)
    params, operands, _ = _operands(fp8, rng)
    with pytest.raises(NotCapturable, match="cuBLASLt has no algorithm for GemmParams.*NOT_SUPP"):
        CublasCaptureHandle(0).gemm(params, operands)
    assert "matmul" not in [entry[0] for entry in fp8.lt.log]


def test_a_product_cublaslt_has_no_algorithm_for_is_refused(fp8, rng, monkeypatch):
    def none_found(handle, desc, a, b, c, d, pref, requested, results, count):
        _memory(count, 1, np.dtype(np.int32))[0] = 0

    monkeypatch.setattr(fp8.lt, "matmul_algo_get_heuristic", none_found)
    params, operands, _ = _operands(fp8, rng)
    with pytest.raises(NotCapturable, match="cuBLASLt has no algorithm for GemmParams"):
        CublasCaptureHandle(0).gemm(params, operands)
    assert "matmul" not in [entry[0] for entry in fp8.lt.log]
