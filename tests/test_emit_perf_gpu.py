"""The CUDA emitter's fast paths on the device: the vectorised lane loop over every tail
length and plane alignment, and warp-summed table adds, against float64 references,
with the memory around each plane left as it was."""

from __future__ import annotations

import numpy as np
import pytest

import eagle.plan
from eagle import arrays, cuda
from eagle.cuda.module import PackedArgs
from eagle.plan._cuda_backend import BLOCK_SIZE
from eagle.plan._cuda_backend import grid as _grid
from hawk.diff import vjp
from hawk.emit import cuda as emit_cuda
from tests._emitperf_kernels import axpy, by_sample, contract32
from tests._util import rel_error

pytestmark = pytest.mark.gpu

GUARD = 8  # poisoned elements on each side of a plane
POISON = -777.0
TOLERANCE = {np.dtype(np.float32): 1e-6, np.dtype(np.float64): 1e-14}


def _guarded(values: np.ndarray, offset: int) -> tuple[arrays.Array, arrays.Array, np.ndarray]:
    """``values`` at element ``offset`` past a 16-byte-aligned device buffer's GUARD
    poisoned elements, with GUARD more after: (buffer, plane view, the buffer's values)."""
    size = values.size
    initial = np.full(size + 2 * GUARD + offset, POISON, values.dtype)
    initial[GUARD + offset : GUARD + offset + size] = values
    buffer = arrays.asarray(initial, device="cuda:0")
    return buffer, buffer[GUARD + offset : GUARD + offset + size], initial


def _outside_intact(buffer: arrays.Array, initial: np.ndarray, offset: int, size: int) -> bool:
    after = buffer.numpy()
    inside = slice(GUARD + offset, GUARD + offset + size)
    mask = np.ones(after.size, bool)
    mask[inside] = False
    return bool(np.array_equal(after[mask], initial[mask]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lanes", [1, 2, 3, 4, 5, 7, 8, 1027, 100_003, (1 << 20) + 5])
@pytest.mark.parametrize(("x_offset", "y_offset"), [(0, 0), (1, 1), (0, 1), (2, 0), (4, 4)])
def test_vectorised_lanes_tails_and_unaligned_planes(
    dtype: type, lanes: int, x_offset: int, y_offset: int, rng: np.random.Generator
) -> None:
    x = rng.standard_normal(lanes).astype(dtype)
    y = rng.standard_normal(lanes).astype(dtype)
    a = float(rng.uniform(0.5, 1.5))
    expected = np.float64(np.asarray(a, dtype)) * x.astype(np.float64) + y.astype(np.float64)
    x_buffer, x_plane, x_initial = _guarded(x, x_offset)
    y_buffer, y_plane, y_initial = _guarded(y, y_offset)
    eagle.plan.auto(axpy).run(a=a, x=x_plane, y=y_plane)
    assert rel_error(y_plane.numpy(), expected) < TOLERANCE[np.dtype(dtype)]
    assert _outside_intact(y_buffer, y_initial, y_offset, lanes)
    assert np.array_equal(x_buffer.numpy(), x_initial)


def _launch(source: emit_cuda.CudaSource, planes: list, lanes: int) -> None:
    kernel = cuda.load_kernel(source.source, source.name)
    record = arrays.zeros((8,), "int64", "cuda:0")  # no failing checks here: never written
    args = PackedArgs([*planes, np.int64(lanes), record])
    stream = cuda.current_stream()
    kernel.launch(_grid(lanes), BLOCK_SIZE, args, stream)
    stream.synchronize()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lanes", [5, 4099, (1 << 20) + 3])
def test_vectorised_and_scalar_loops_agree_exactly(
    dtype: type, lanes: int, rng: np.random.Generator
) -> None:
    signature = {p.name: dtype for p in axpy.planes}
    x = rng.standard_normal(lanes).astype(dtype)
    y = rng.standard_normal(lanes).astype(dtype)
    a = arrays.asarray(np.array([1.25], dtype), device="cuda:0")
    results = []
    for vector in (True, False):
        source = emit_cuda.emit(axpy.ir, signature, vector=vector)
        out = arrays.asarray(y, device="cuda:0")
        _launch(source, [a, arrays.asarray(x, device="cuda:0"), out], lanes)
        results.append(out.numpy())
    assert np.array_equal(results[0], results[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lanes", [64, 40 * 64, 40 * 64 - 5, 33 * 64 + 17])
def test_warp_summed_adds_equal_the_reference(
    dtype: type, lanes: int, rng: np.random.Generator
) -> None:
    t = rng.standard_normal((3, 40)).astype(dtype)
    x = rng.standard_normal(lanes).astype(dtype)
    g0 = rng.standard_normal((3, 40)).astype(dtype)
    expected = g0.astype(np.float64)
    sample = np.arange(lanes) // 64
    for r in range(3):
        np.add.at(expected[r], sample, x.astype(np.float64) * t[r, sample].astype(np.float64))
    buffer, g, initial = _guarded(g0.reshape(-1), 0)
    g_plane = g.reshape(3, 40)
    eagle.plan.auto(by_sample).run(
        t=arrays.asarray(t, device="cuda:0"), x=arrays.asarray(x, device="cuda:0"), g=g_plane
    )
    assert rel_error(g_plane.numpy(), expected) < 10 * TOLERANCE[np.dtype(dtype)]
    assert _outside_intact(buffer, initial, 0, g0.size)


@pytest.mark.parametrize("warp_adds", [True, False])
def test_contraction_adjoint_with_and_without_warp_sums(
    warp_adds: bool, rng: np.random.Generator
) -> None:
    adjoint = vjp(contract32)
    w = rng.standard_normal((4, 32)).astype(np.float32)
    f = rng.standard_normal((4, 6)).astype(np.float32)
    y_bar = rng.standard_normal(6 * 32).astype(np.float32)
    expected_w = f.astype(np.float64) @ y_bar.reshape(6, 32).astype(np.float64)
    expected_f = w.astype(np.float64) @ y_bar.reshape(6, 32).T.astype(np.float64)
    source = emit_cuda.emit(
        adjoint.ir, {p.name: "float32" for p in adjoint.planes}, warp_adds=warp_adds
    )
    planes = {
        "w": arrays.asarray(w, device="cuda:0"),
        "f": arrays.asarray(f, device="cuda:0"),
        "y_bar": arrays.asarray(y_bar, device="cuda:0"),
        "w_bar": arrays.zeros((4, 32), "float32", "cuda:0"),
        "f_bar": arrays.zeros((4, 6), "float32", "cuda:0"),
    }
    _launch(source, [planes[p.name] for p in adjoint.planes], 6 * 32)
    assert rel_error(planes["w_bar"].numpy(), expected_w) < 1e-6
    assert rel_error(planes["f_bar"].numpy(), expected_f) < 1e-6
