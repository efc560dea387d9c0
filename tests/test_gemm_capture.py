"""Host tests of eagle.gemm's cuBLAS side: what happens where there is no driver, no
device or no cuBLAS; that the pure parts never load one; and the handle and the device
matmul path over a stand-in cuBLAS that computes on host memory (operand order, leading
dimensions, alpha/beta read from host memory, warm-up and capture rules, lifetimes)."""

from __future__ import annotations

import ctypes
import decimal
import gc
import itertools
import os
import subprocess
import sys
import textwrap
import weakref
from typing import ClassVar

import ml_dtypes
import numpy as np
import pytest

import eagle
from eagle.arrays import Array
from eagle.cuda import CudaError
from eagle.cuda import graph as eagle_graph
from eagle.errors import EagleTypeError
from eagle.gemm import (
    CublasCaptureHandle,
    GemmCaptureUnavailable,
    GemmMappingUnavailable,
    MatmulUnavailable,
    _library,
    gemm_params_for_arrays,
    matmul_step,
    sgemm_params_for_arrays,
)
from eagle.gemm import capture as capture_module
from eagle.gemm._library import CheckedLibrary
from eagle.gemm.capture import WORKSPACE_BYTES
from eagle.gemm.handles import release_handles
from tests._util import FakeCalls, forget_fake_leftovers


def _run(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )


def test_pure_parts_run_without_loading_a_driver_or_cublas():
    result = _run(
        """
        import sys
        import numpy as np
        from eagle.gemm import matmul_step, sgemm_params_for_arrays
        a, b = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)
        out = np.zeros((3, 5), np.float32)
        sgemm_params_for_arrays(a, b, out)
        matmul_step("out", a="a", b="b", out="out").run({"a": a, "b": b, "out": out}, "host")
        assert (out == 4).all()
        maps = open("/proc/self/maps").read()
        loaded = [lib for lib in ("libcuda.so", "libcublas") if lib in maps]
        modules = [m for m in sys.modules if m.startswith(("nvmath", "cuda.bindings."))]
        print(loaded, modules)
        sys.exit(1 if loaded or modules else 0)
        """
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_device_is_gemm_capture_unavailable():
    result = _run(
        """
        from eagle.gemm import CublasCaptureHandle, GemmCaptureUnavailable
        try:
            CublasCaptureHandle(0)
        except GemmCaptureUnavailable as exc:
            print("refused:", exc)
        """,
        CUDA_VISIBLE_DEVICES="",
    )
    assert result.returncode == 0, result.stderr
    assert "refused: no CUDA driver or device: cudaGetDeviceCount failed" in result.stdout


def test_no_cublas_is_gemm_capture_unavailable():
    result = _run(
        """
        import sys
        sys.modules["nvmath"] = None  # as if nvmath-python were not installed
        from eagle.gemm import CublasCaptureHandle, GemmCaptureUnavailable
        try:
            CublasCaptureHandle(0)
        except GemmCaptureUnavailable as exc:
            print("refused:", exc)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "refused: cuBLAS is not reachable: nvmath-python is not installed" in result.stdout


def test_an_unknown_math_mode_is_refused_by_name():
    with pytest.raises(ValueError, match="math must be 'fp32' or 'tf32', not 'fp16'"):
        CublasCaptureHandle(0, math="fp16")


def test_a_stream_that_is_no_stream_is_refused_by_name_before_the_driver_is_asked():
    with pytest.raises(EagleTypeError, match=r"stream must be an eagle.cuda.Stream.*, not str$"):
        CublasCaptureHandle("stream")


# --- the handle's bookkeeping, over a stand-in cuBLAS that computes on host memory ----------


class _Enum:
    def __init__(self, **members):
        self.__dict__.update(members)


class FakeCublas:
    """nvmath.bindings.cublas's calls, done on host memory the way cuBLAS does them.

    Pointers are host addresses of numpy buffers; each access is checked to lie inside
    a buffer registered with :meth:`register`.
    """

    Operation = _Enum(N=0, T=1)
    PointerMode = _Enum(HOST=0, DEVICE=1)
    Math = _Enum(DEFAULT_MATH=0, TF32_TENSOR_OP_MATH=3)
    ComputeType = _Enum(COMPUTE_32F=68, COMPUTE_32F_FAST_TF32=77)
    GemmAlgo = _Enum(DEFAULT=-1)
    DATA_TYPES: ClassVar = {2: np.float16, 14: ml_dtypes.bfloat16, 0: np.float32, 1: np.float64}
    cuBLASError = type("cuBLASError", (Exception,), {})

    def __init__(self):
        self.log: list[tuple] = []
        self.ranges: list[tuple[int, int]] = []
        self.destinations: list[int] = []

    def register(self, array):
        self.ranges.append((array.ctypes.data, array.ctypes.data + array.nbytes))

    def create(self):
        self.log.append(("create",))
        return 0xC0B1A5

    def destroy(self, handle):
        self.log.append(("destroy", handle))

    def set_stream(self, handle, stream):
        self.log.append(("set_stream", stream))

    def set_workspace(self, handle, ptr, nbytes):
        self.log.append(("set_workspace", ptr, nbytes))

    def set_pointer_mode(self, handle, mode):
        self.log.append(("set_pointer_mode", mode))

    def set_math_mode(self, handle, mode):
        self.log.append(("set_math_mode", mode))

    def _matrix(self, ptr, op, rows, cols, ld, dtype):
        """op(X) as rows x cols, X column-major at ptr with leading dimension ld."""
        stored_rows, stored_cols = (rows, cols) if op == 0 else (cols, rows)
        assert ld >= max(1, stored_rows)
        if rows * cols == 0:  # cuBLAS reads nothing of an empty operand (k = 0)
            empty = np.zeros((rows, cols), dtype)
            return empty, empty.reshape(-1), np.zeros((rows, cols), np.intp)
        count = stored_rows + (stored_cols - 1) * ld
        nbytes = count * np.dtype(dtype).itemsize
        assert any(lo <= ptr and ptr + nbytes <= hi for lo, hi in self.ranges), "out of bounds"
        flat = np.frombuffer((ctypes.c_byte * nbytes).from_address(ptr), dtype=dtype)
        i, j = np.indices((stored_rows, stored_cols))
        stored = flat[i + j * ld]
        return (stored if op == 0 else stored.T), flat, (i + j * ld)

    def _gemm(self, dtype, handle, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
              out_dtype=None, compute=None):  # fmt: skip
        """out = alpha op(a) op(b) + beta out; factors of ``dtype`` summed in the scalars'
        type (float32 for 16-bit factors), ``out`` rounded once when stored."""
        out_dtype = dtype if out_dtype is None else out_dtype
        scalar = np.float64 if dtype == np.float64 else np.float32
        self.log.append(("gemm", np.dtype(dtype).name, ta, tb, m, n, k))
        if compute is not None:
            self.log[-1] += (np.dtype(out_dtype).name, compute)
        self.destinations.append(c)
        scalars = np.frombuffer((ctypes.c_byte * 16).from_address(alpha), dtype=scalar, count=2)
        assert beta == alpha + np.dtype(scalar).itemsize
        left, _, _ = self._matrix(a, ta, m, k, lda, dtype)
        right, _, _ = self._matrix(b, tb, k, n, ldb, dtype)
        old, flat, index = self._matrix(c, 0, m, n, ldc, out_dtype)
        product = left.astype(scalar) @ right.astype(scalar)
        value = scalars[0] * product + (scalars[1] * old.astype(scalar) if scalars[1] else 0)
        flat[index] = value.astype(out_dtype)

    def sgemm(self, *args):
        self._gemm(np.float32, *args)

    def dgemm(self, *args):
        self._gemm(np.float64, *args)

    def gemm_ex(self, handle, ta, tb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c,
                ctype, ldc, compute, algo):  # fmt: skip
        assert atype == btype and algo == -1
        dtype, out_dtype = self.DATA_TYPES[atype], self.DATA_TYPES[ctype]
        self._gemm(dtype, handle, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                   out_dtype, compute)  # fmt: skip


class HostBackedDeviceArray(Array):
    """Stands for a device Array: a numpy buffer seen through the device attributes (an
    eagle Array, so the handles' and the steps' fast paths take it as one)."""

    is_host = False
    device = "cuda:0"
    device_index = 0

    def __init__(self, values):
        super().__init__(
            ptr=values.ctypes.data,
            shape=values.shape,
            dtype=values.dtype,
            strides=values.strides,
            device_index=0,
        )
        self.values = values

    def __getitem__(self, key):
        return HostBackedDeviceArray(self.values[key])

    @property
    def _device_index(self):  # the slot the fast paths read, following device_index
        return self.device_index

    @_device_index.setter
    def _device_index(self, index):
        pass  # Array.__init__ sets it; device_index (a class or instance value) is read


class _PoolBuffer:
    def __init__(self, values, nbytes):
        self.values, self.ptr, self.nbytes = values, values.ctypes.data, nbytes


class FakeDevice:
    """Replaces the CUDA side of eagle.gemm with a recorder and host memory."""

    STREAM = 0x5EA

    def __init__(self, monkeypatch):
        from eagle.gemm import _bound_gemm, capture, handles, matmul

        self.cublas = FakeCublas()
        self.capturing = False
        self.used: list[tuple] = []
        self.synchronized = 0
        self.allocations: list[weakref.ref] = []

        def fake_call(name, *args):
            self.synchronized += name == "cudaStreamSynchronize"
            return {"cudaGetDeviceCount": 1, "cudaStreamGetDevice": 0}.get(name)

        pool = type("Pool", (), {"allocate": lambda _, nbytes, stream: self._workspace(nbytes)})
        stream = type("Stream", (), {"ptr": lambda _: self.STREAM})()
        checked = CheckedLibrary(self.cublas, "cublas", (FakeCublas.cuBLASError,))
        monkeypatch.setattr(_library, "cublas", lambda: checked)
        monkeypatch.setattr(capture, "cudart", FakeCalls(fake_call))
        monkeypatch.setattr(capture, "ensure_device", lambda device: None)
        for module in (capture, _bound_gemm):  # the handle, and the products it binds
            monkeypatch.setattr(module, "is_capturing", lambda stream: self.capturing)
            monkeypatch.setattr(module, "record_use", lambda *objs: self.used.append(objs))
        monkeypatch.setattr(capture, "default_pool", lambda device: pool())
        monkeypatch.setattr(handles, "_stream_handles", {})
        monkeypatch.setattr(matmul, "launch_stream", lambda values, device: stream.ptr())
        monkeypatch.setattr(matmul, "record_use", lambda *objs: self.used.append(objs))

    def _workspace(self, nbytes):
        """A pool allocation: registered host memory, weakly listed in ``allocations``."""
        buffer = _PoolBuffer(np.empty(max(nbytes, 1), np.uint8), nbytes)
        self.cublas.register(buffer.values)
        self.allocations.append(weakref.ref(buffer))
        return buffer

    def array(self, values):
        self.cublas.register(values)
        return HostBackedDeviceArray(values)

    def embedded(self, values, pad=(2, 3)):
        """``values`` as a view into a larger NaN-padded buffer, and that buffer."""
        rows, cols = values.shape
        base = np.full((rows + pad[0], cols + pad[1]), np.nan, values.dtype)
        base[1 : 1 + rows, 2 : 2 + cols] = values
        return base, self.array(base)[1 : 1 + rows, 2 : 2 + cols]


@pytest.fixture
def device(monkeypatch):
    yield FakeDevice(monkeypatch)
    gc.collect()  # handles the test dropped are freed while the fakes still stand in
    capture_module.free_retired()


FLAGS = list(itertools.product([False, True], repeat=3))


def _case(rng, flags, dtype, m=7, n=5, k=6):
    transpose_a, transpose_b, transpose_out = flags
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(dtype)
    product = (a.T if transpose_a else a).astype(np.float64) @ (b.T if transpose_b else b)
    return a, b, product.T if transpose_out else product


def _kwargs(flags):
    return dict(zip(("transpose_a", "transpose_b", "transpose_out"), flags, strict=True))


def test_handle_is_bound_then_given_its_workspace(device):
    handle = CublasCaptureHandle(FakeDevice.STREAM, math="tf32")
    assert device.cublas.log == [
        ("create",),
        ("set_stream", FakeDevice.STREAM),
        ("set_workspace", device.allocations[0]().ptr, WORKSPACE_BYTES),
        ("set_pointer_mode", 0),
        ("set_math_mode", 3),
    ]
    assert (handle.device, handle.stream_ptr, handle.alive) == (0, FakeDevice.STREAM, True)
    assert WORKSPACE_BYTES == 32 * 1024 * 1024


@pytest.mark.parametrize("flags", FLAGS)
def test_sgemm_computes_every_triple_on_views_with_alpha_and_beta(device, rng, flags):
    a, b, reference = _case(rng, flags, np.float32)
    _, a_view = device.embedded(a)
    _, b_view = device.embedded(b)
    out_base, out_view = device.embedded(np.ones(reference.shape, np.float32))
    operands = {"a": a_view, "b": b_view, "out": out_view}
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params = sgemm_params_for_arrays(a_view, b_view, out_view, **_kwargs(flags))
    handle.sgemm(params, operands, alpha=2.0, beta=0.5)
    rows, cols = reference.shape
    inside = np.zeros(out_base.shape, bool)
    inside[1 : 1 + rows, 2 : 2 + cols] = True
    np.testing.assert_allclose(
        out_base[inside].reshape(rows, cols), 2.0 * reference + 0.5, rtol=1e-5, atol=1e-5
    )
    assert np.isnan(out_base[~inside]).all()
    first, second = (operands[name] for name in params.operands)
    assert device.used == [(FakeDevice.STREAM, handle, first, second, out_view)]


def test_a_bound_product_runs_with_the_scalars_it_was_bound_with(device, rng):
    a, b, reference = _case(rng, (True, False, True), np.float64)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.ones(reference.shape, np.float64))}  # fmt: skip
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params = gemm_params_for_arrays(*operands.values(), **_kwargs((True, False, True)))
    bound = handle.bind(params, operands, alpha=2.0, beta=0.5)
    bound()
    np.testing.assert_allclose(operands["out"].values, 2.0 * reference + 0.5, rtol=1e-12)
    bound()
    np.testing.assert_allclose(
        operands["out"].values, 2.0 * reference + 0.5 * (2.0 * reference + 0.5), rtol=1e-12
    )


@pytest.mark.parametrize(
    ("alpha", "beta", "name"),
    [
        (0.5, None, "beta"),
        (1 + 2j, 0.0, "alpha"),
        (np.complex128(1 + 1j), 0.0, "alpha"),
        ("2", 0.0, "alpha"),
        (1.0, np.array([0.5]), "beta"),
        (1.0, np.array([0.5, 1.0]), "beta"),
        (1 + 0j, 0.0, "alpha"),  # equal to the alpha the call holds, and still refused
        ([1.0] * 100, 0.0, "alpha"),
    ],
)
def test_a_refused_alpha_or_beta_changes_nothing(device, rng, alpha, beta, name):
    """A scalar that is no real number is refused by name before the prepared call's
    scalars change: the next call runs with its own alpha and beta."""
    a, b, reference = _case(rng, (False, False, False), np.float32)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.ones(reference.shape, np.float32))}  # fmt: skip
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params = sgemm_params_for_arrays(*operands.values())
    handle.sgemm(params, operands)
    for call in (handle.sgemm, handle.bind):
        with pytest.raises(EagleTypeError, match=f"^{name} must be a real number"):
            call(params, operands, alpha=alpha, beta=beta)
    operands["out"].values[...] = np.nan
    handle.sgemm(params, operands)
    np.testing.assert_allclose(operands["out"].values, reference, rtol=1e-5, atol=1e-5)


def test_alpha_and_beta_take_any_one_real_number(device, rng):
    """A numpy scalar, a 0-d array, a Decimal or an int scale the product as floats; an int
    beyond any float is refused by name."""
    a, b, reference = _case(rng, (False, False, False), np.float32)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.ones(reference.shape, np.float32))}  # fmt: skip
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params = sgemm_params_for_arrays(*operands.values())
    for alpha in (np.float32(2.0), np.array(2.0), decimal.Decimal("2"), 2):
        operands["out"].values[...] = np.nan
        handle.sgemm(params, operands, alpha=alpha, beta=0)
        np.testing.assert_allclose(operands["out"].values, 2 * reference, rtol=1e-5, atol=1e-5)
    with pytest.raises(OverflowError, match="alpha is an int of 1329 bits, beyond any float"):
        handle.sgemm(params, operands, alpha=10**400)


def test_a_0d_alpha_changed_in_place_is_read_at_each_call(device, rng):
    a, b, reference = _case(rng, (False, False, False), np.float32)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.ones(reference.shape, np.float32))}  # fmt: skip
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params = sgemm_params_for_arrays(*operands.values())
    alpha = np.array(2.0)
    handle.sgemm(params, operands, alpha=alpha)
    alpha[...] = -3.0
    handle.sgemm(params, operands, alpha=alpha, beta=np.float32(0.0))
    np.testing.assert_allclose(operands["out"].values, -3.0 * reference, rtol=1e-5, atol=1e-5)


def test_warm_runs_each_product_once_and_waits(device, rng):
    a, b, reference = _case(rng, (False, False, False), np.float32)
    operands = {name: device.array(x) for name, x in (("a", a), ("b", b))}
    operands["out"] = device.array(np.full(reference.shape, np.nan, np.float32))
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    params = sgemm_params_for_arrays(*operands.values())
    handle.warm(params, operands)
    handle.warm(params, operands)
    assert [entry[0] for entry in device.cublas.log].count("gemm") == 1
    assert device.synchronized == 1
    np.testing.assert_allclose(operands["out"].values, reference, rtol=1e-5, atol=1e-5)


def test_capture_rules(device, rng):
    a, b, reference = _case(rng, (False, True, False), np.float32)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.zeros(reference.shape, np.float32))}  # fmt: skip
    params = sgemm_params_for_arrays(*operands.values(), transpose_b=True)
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    device.capturing = True
    with pytest.raises(GemmCaptureUnavailable, match="is being captured; make the Cublas"):
        CublasCaptureHandle(FakeDevice.STREAM)
    with pytest.raises(GemmCaptureUnavailable, match="never warmed"):
        handle.sgemm(params, operands)
    with pytest.raises(GemmCaptureUnavailable, match=r"warm\(\) runs the product"):
        handle.warm(params, operands)
    device.capturing = False
    handle.warm(params, operands)
    device.capturing = True
    handle.sgemm(params, operands, beta=1.0)
    handle.warm(params, operands)  # already warm: nothing to run
    np.testing.assert_allclose(operands["out"].values, 2 * reference, rtol=1e-5, atol=1e-5)


def test_warm_is_per_operand_alignment(device, rng):
    buffer = rng.standard_normal(40).astype(np.float32)
    device.cublas.register(buffer)
    aligned = HostBackedDeviceArray(buffer[:16].reshape(4, 4))
    shifted = HostBackedDeviceArray(buffer[1:17].reshape(4, 4))  # 4 bytes further on
    operands = {"a": aligned, "b": device.array(np.ones((4, 3), np.float32)),
                "out": device.array(np.zeros((4, 3), np.float32))}  # fmt: skip
    params = sgemm_params_for_arrays(*operands.values())
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    handle.warm(params, operands)
    device.capturing = True
    handle.sgemm(params, operands)
    with pytest.raises(
        GemmCaptureUnavailable, match=r"never warmed .*alignment: a \+4, b \+0, out \+0\)"
    ):
        handle.sgemm(params, {**operands, "a": shifted})


def test_operands_must_be_device_arrays_matching_the_params(device, rng):
    a, b, reference = _case(rng, (False, False, False), np.float32)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.zeros(reference.shape, np.float32))}  # fmt: skip
    params = sgemm_params_for_arrays(*operands.values())
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    with pytest.raises(GemmCaptureUnavailable, match="operand 'a' is not a device array"):
        handle.sgemm(params, {**operands, "a": a})
    other = HostBackedDeviceArray(np.zeros(reference.shape, np.float32))
    other.device_index, other.device = 1, "cuda:1"
    with pytest.raises(GemmCaptureUnavailable, match="operand 'out' is on cuda:1, but this"):
        handle.sgemm(params, {**operands, "out": other})
    with pytest.raises(GemmMappingUnavailable, match="do not describe these operands"):
        handle.sgemm(params._replace(ldc=11), operands)
    with pytest.raises(TypeError, match="params must be SgemmParams"):
        handle.sgemm(tuple(params), operands)
    with pytest.raises(TypeError, match=r"operands must be a mapping .*not list"):
        handle.warm(params, list(operands.values()))
    with pytest.raises(GemmCaptureUnavailable, match=r"operands lack \['out'\]"):
        handle.sgemm(params, {"a": operands["a"], "b": operands["b"]})
    assert [entry[0] for entry in device.cublas.log].count("gemm") == 0


def test_destroy_waits_for_live_graphs_before_freeing(device):
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    held = eagle_graph._Held([], [handle])  # what eagle.cuda does when a graph records it
    handle.destroy()
    assert not handle.alive and ("destroy", 0xC0B1A5) not in device.cublas.log
    assert "destroyed" in repr(handle)
    eagle_graph._release(held)  # the graph is destroyed
    assert device.cublas.log.count(("destroy", 0xC0B1A5)) == 1
    handle.destroy()
    assert device.cublas.log.count(("destroy", 0xC0B1A5)) == 1


def test_destroy_frees_the_workspace_after_the_handle(device):
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    (workspace,) = device.allocations
    handle.destroy()
    assert device.cublas.log[-1] == ("destroy", 0xC0B1A5) and workspace() is None
    with pytest.raises(GemmCaptureUnavailable, match="was destroyed; make a new"):
        handle.warm(None, {})


def test_a_collected_handle_is_freed_at_the_next_safe_point(device):
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    (workspace,) = device.allocations
    assert workspace() is not None
    del handle
    gc.collect()  # the collector may run inside someone's capture: nothing is freed yet
    assert ("destroy", 0xC0B1A5) not in device.cublas.log and workspace() is not None
    CublasCaptureHandle(FakeDevice.STREAM).destroy()  # making a handle frees it first
    assert device.cublas.log.count(("destroy", 0xC0B1A5)) == 2 and workspace() is None
    assert device.cublas.log.index(("destroy", 0xC0B1A5)) < device.cublas.log.index(("create",), 1)


def test_release_handles_and_clear_caches_free_collected_handles(device):
    forget_fake_leftovers()
    for free in (release_handles, eagle.clear_caches):
        CublasCaptureHandle(FakeDevice.STREAM)
        gc.collect()
        assert capture_module._retired
        free()
        assert not capture_module._retired


@pytest.mark.parametrize("failing", ["set_stream", "set_workspace", "set_math_mode"])
def test_a_handle_failing_half_way_frees_what_it_made(device, monkeypatch, failing):
    def refuse(*args):
        raise RuntimeError(f"{failing} refused")

    monkeypatch.setattr(device.cublas, failing, refuse)
    with pytest.raises(RuntimeError, match=f"{failing} refused"):
        CublasCaptureHandle(FakeDevice.STREAM)
    gc.collect()
    assert device.cublas.log.count(("destroy", 0xC0B1A5)) == 1
    assert all(buffer() is None for buffer in device.allocations)


def test_a_handle_cublas_cannot_make_frees_its_workspace(device, monkeypatch):
    def refuse():
        raise device.cublas.cuBLASError("CUBLAS_STATUS_NOT_INITIALIZED")

    monkeypatch.setattr(device.cublas, "create", refuse)
    with pytest.raises(GemmCaptureUnavailable, match="cuBLAS could not make a handle"):
        CublasCaptureHandle(FakeDevice.STREAM)
    gc.collect()
    assert all(buffer() is None for buffer in device.allocations)
    assert ("destroy", 0xC0B1A5) not in device.cublas.log


def _cublas_failure(*args):
    """cuBLAS failing as nvmath's binding reports it: its exception, with the status."""
    error = FakeCublas.cuBLASError("CUBLAS_STATUS_EXECUTION_FAILED")
    error.status = 13  # CUBLAS_STATUS_EXECUTION_FAILED
    raise error


@pytest.mark.parametrize("call", ["sgemm", "bound", "warm", "matmul_step"])
def test_a_failed_cublas_call_raises_cuda_error_naming_the_call_and_status(
    device, rng, monkeypatch, call
):
    """A status cuBLAS fails with reaches the user as eagle's CudaError (an EagleError),
    as every other CUDA call's does, never as nvmath's own exception."""
    a, b, _ = _case(rng, (False, False, False), np.float32)
    operands = {"a": device.array(a), "b": device.array(b),
                "out": device.array(np.zeros((a.shape[0], b.shape[1]), np.float32))}  # fmt: skip
    params = sgemm_params_for_arrays(*operands.values())
    monkeypatch.setattr(device.cublas, "sgemm", _cublas_failure)
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    runs = {
        "sgemm": lambda: handle.sgemm(params, operands),
        "bound": lambda: handle.bind(params, operands)(),
        "warm": lambda: handle.warm(params, operands),
        "matmul_step": lambda: matmul_step("out", a="a", b="b", out="out").run(operands, "device"),
    }
    with pytest.raises(
        CudaError, match=r"^cublas\.sgemm failed with CUBLAS_STATUS_EXECUTION_FAILED"
    ) as raised:
        runs[call]()
    assert isinstance(raised.value, eagle.EagleError)
    assert isinstance(raised.value.__cause__, FakeCublas.cuBLASError)


def test_a_handle_whose_stream_cublas_refuses_raises_cuda_error_and_frees_it(device, monkeypatch):
    monkeypatch.setattr(device.cublas, "set_stream", _cublas_failure)
    with pytest.raises(CudaError, match=r"^cublas\.set_stream failed with CUBLAS_STATUS_EXEC"):
        CublasCaptureHandle(FakeDevice.STREAM)
    gc.collect()
    assert device.cublas.log.count(("destroy", 0xC0B1A5)) == 1
    assert all(buffer() is None for buffer in device.allocations)


def test_the_handle_has_no_del_and_frees_nothing_at_interpreter_exit(device):
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    assert not hasattr(CublasCaptureHandle, "__del__")
    assert handle._release.alive and not handle._release.atexit


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_step_on_the_device_path(device, rng, flags, dtype):
    a, b, reference = _case(rng, flags, dtype)
    _, a_view = device.embedded(a)
    out_base, out_view = device.embedded(np.zeros(reference.shape, dtype))
    step = matmul_step("out", a="a", b="b", out="out", **_kwargs(flags))
    for _ in range(2):
        step.run({"a": a_view, "b": device.array(b), "out": out_view}, "device")
    rows, cols = reference.shape
    np.testing.assert_allclose(
        out_base[1 : 1 + rows, 2 : 2 + cols], reference, rtol=1e-5, atol=1e-5
    )
    log = [entry[0] for entry in device.cublas.log]
    assert log.count("create") == 1 and log.count("gemm") == 2  # one handle per stream
    assert ("gemm", np.dtype(dtype).name) == device.cublas.log[-1][:2]


def test_warm_keep_out_runs_into_scratch_aligned_as_out(device, rng):
    a, b, reference = _case(rng, (False, False, False), np.float32)
    base = np.full(reference.size + 1, np.nan, np.float32)
    device.cublas.register(base)
    out = HostBackedDeviceArray(base[1:].reshape(reference.shape))  # 4 bytes into its buffer
    operands = {"a": device.array(a), "b": device.array(b), "out": out}
    params = sgemm_params_for_arrays(*operands.values())
    handle = CublasCaptureHandle(FakeDevice.STREAM)
    handle.warm(params, operands, keep_out=True)
    assert np.isnan(base).all()  # out kept its values
    (scratch,) = device.cublas.destinations
    assert scratch != out.ptr and scratch % 16 == out.ptr % 16 == 4
    assert [entry[0] for entry in device.cublas.log].count("gemm") == 1
    assert device.synchronized == 1
    assert device.allocations[-1]() is None  # the scratch went back once the product ran
    device.capturing = True
    handle.warm(params, operands, keep_out=True)  # already warm: nothing to run or allocate
    handle.sgemm(params, operands)  # the warmed product is out's own, alignment included
    np.testing.assert_allclose(out.values, reference, rtol=1e-5, atol=1e-5)
    assert np.isnan(base[0])


@pytest.mark.parametrize("flags", FLAGS)
def test_a_k_0_product_on_the_device_path_is_beta_times_out(device, rng, flags):
    a, b, reference = _case(rng, flags, np.float32, k=0)
    out = device.array(np.full(reference.shape, np.nan, np.float32))
    step = matmul_step("out", a="a", b="b", out="out", **_kwargs(flags))
    step.run({"a": device.array(a), "b": device.array(b), "out": out}, "device")
    np.testing.assert_array_equal(out.values, np.zeros(reference.shape))
    out.values[...] = 3.0
    operands = {"a": device.array(a), "b": device.array(b), "out": out}
    params = sgemm_params_for_arrays(*operands.values(), **_kwargs(flags))
    CublasCaptureHandle(FakeDevice.STREAM).sgemm(params, operands, alpha=2.0, beta=0.5)
    np.testing.assert_array_equal(out.values, np.full(reference.shape, 1.5))


def test_the_device_step_refuses_an_out_sharing_memory_with_an_operand(device):
    base = np.zeros((4, 8), np.float32)
    device.cublas.register(base)
    whole = HostBackedDeviceArray(base)
    bufs = {"a": whole[:, :4], "b": device.array(np.ones((4, 4), np.float32)), "c": whole[:, 3:7]}
    step = matmul_step("c", a="a", b="b", out="c")
    with pytest.raises(
        MatmulUnavailable,
        match=r"matmul step 'c' \(a='a', b='b', out='c'\): operand 'out' shares memory with "
        r"operand 'a'",
    ):
        step.run(bufs, "device")
    step.run({**bufs, "c": whole[:, 4:]}, "device")  # a neighbouring column block is apart
    assert [entry[0] for entry in device.cublas.log].count("gemm") == 1
