"""The CUDA emitter's fast paths, on the host: the vectorised lane loop and warp-summed
table adds are emitted where they apply, left out where they do not, and compile for sm_90."""

from __future__ import annotations

import pytest

import eagle.plan
from eagle.cuda import compile_cuda
from eagle.plan._backends import backend_named
from eagle.plan._cuda_backend import BLOCK_SIZE
from eagle.plan._cuda_backend import grid as _grid
from hawk.diff import vjp
from hawk.emit import cuda
from tests._emitperf_kernels import axpy, by_odd_sample, by_sample, contract32, two_out
from tests._hawk_kernels import contract, histogram


def _emit(kernel, dtype: str = "float32", **options) -> cuda.CudaSource:
    emitted = cuda.emit(kernel.ir, {p.name: dtype for p in kernel.planes}, **options)
    assert compile_cuda(emitted.source, name=emitted.name, arch="sm_90")
    return emitted


@pytest.mark.parametrize(("dtype", "width"), [("float32", 4), ("float64", 2)])
def test_lane_planes_move_16_bytes_at_once_when_aligned(dtype: str, width: int) -> None:
    source = _emit(axpy, dtype).source
    ctype = "float" if dtype == "float32" else "double"
    pack = f"hawk_pack<{ctype}, {width}>"
    assert "if ((((unsigned long long)p_x | (unsigned long long)p_y) & 15ULL) == 0) {" in source
    assert f"const long long groups = n / {width};" in source
    assert f"const {pack} i_x = *reinterpret_cast<const {pack}*>(p_x + base);" in source
    assert f"const {pack} i_y = *reinterpret_cast<const {pack}*>(p_y + base);" in source
    assert f"*reinterpret_cast<{pack}*>(p_y + base) = o_y;" in source
    assert "p_a[0]" in source and "i_a" not in source  # a param is not a lane plane
    # the lanes after the last whole group, and every lane of unaligned planes, run scalar
    assert f"start = groups * {width};" in source
    assert "for (long long at = start + first; at < n; at += stride)" in source
    assert "const long long lane = at;" in source


def test_a_narrow_kernel_counts_its_lanes_in_32_bits() -> None:
    """Below 2**31 lanes both loops count in 32 bits, the lane still a long long (so
    the compiler knows it is below 2**32); the arithmetic on it is unchanged."""
    wide, narrow = _emit(axpy).source, _emit(axpy, narrow=True).source
    assert "for (unsigned int group = first; group < groups; group += stride)" in narrow
    assert "const unsigned int base = group * 4;" in narrow
    assert "for (unsigned int at = start + first; at < n; at += stride)" in narrow
    assert "const long long lane = at;" in narrow
    body = slice(wide.index("#pragma unroll"), None)
    changed = {"for (long long group", "const long long base", "for (long long at"}
    kept = [line for line in wide[body].splitlines() if not line.strip().startswith(tuple(changed))]
    assert all(line in narrow for line in kept)


def test_a_lane_that_runs_a_loop_is_not_unrolled() -> None:
    """The lane loop of a kernel whose lanes run a loop of their own (the contraction and
    its adjoint) is not unrolled, and counts in 64 bits even below 2**31 lanes; a
    loop-free kernel's lane loops are unrolled, UNROLL times."""
    for kernel in (contract32, vjp(contract32)):
        source = _emit(kernel, narrow=True).source
        assert "#pragma unroll 1\n    for (long long at = first;" in source
        assert f"#pragma unroll {cuda.UNROLL}\n" not in source
    source = _emit(axpy).source
    assert source.count(f"#pragma unroll {cuda.UNROLL}\n") == 2  # the vectorised and scalar loops
    assert "#pragma unroll 1\n" not in source


def test_mixed_planes_group_by_the_widest() -> None:
    emitted = cuda.emit(
        two_out.ir, {"x": "float32", "z": "float64", "y": "float32", "w": "float64"}
    )
    source = emitted.source
    assert "const long long groups = n / 2;" in source
    assert "hawk_pack<float, 2> i_x" in source and "hawk_pack<double, 2> i_z" in source
    assert "hawk_pack<float, 2> o_y;" in source and "hawk_pack<double, 2> o_w;" in source
    assert "o_y.v[k] = (float)(" in source  # stored through the plane's conversion
    assert compile_cuda(source, name=emitted.name, arch="sm_90")


@pytest.mark.parametrize("kernel", [contract, histogram], ids=["gather", "scatter"])
def test_gathers_and_scatters_keep_one_lane_per_thread(kernel) -> None:
    emitted = _emit(kernel)
    assert "hawk_pack" not in emitted.source and emitted.width == 1


@pytest.mark.parametrize(
    ("dtype", "width"), [("float32", 4), ("float64", 2), ("bfloat16", 8), ("float16", 8)]
)
def test_a_wide_launch_gives_each_thread_at_least_one_group(dtype: str, width: int) -> None:
    emitted = _emit(axpy, dtype)
    assert emitted.width == width
    lanes = 1 << 24  # many lanes: UNROLL lanes per thread, or one whole group when wider
    per_thread = max(cuda.UNROLL, width)
    assert _grid(lanes, emitted.width) == lanes // (BLOCK_SIZE * per_thread)
    assert _grid(1000, emitted.width) == -(-1000 // BLOCK_SIZE)  # few lanes: one per thread


def test_the_vectorised_loop_can_be_left_out() -> None:
    source = _emit(axpy, vector=False).source
    assert "hawk_pack" not in source and "groups" not in source
    assert "for (long long at = first; at < n; at += stride)" in source


def test_adds_a_warp_shares_are_summed_per_warp() -> None:
    source = _emit(by_sample).source
    assert "hawk_add_warp(&p_g[" in source and "atomicAdd(&p_g[" not in source
    assert "__all_sync(" in source  # checked at run time too: any other warp adds per lane
    plain = _emit(by_sample, warp_adds=False).source
    assert "hawk_add_warp" not in plain and "atomicAdd(&p_g[" in plain


def test_adds_whose_address_may_change_inside_a_warp_stay_per_lane() -> None:
    source = _emit(by_odd_sample).source  # lane // 48: a warp may straddle two samples
    assert "hawk_add_warp" not in source and "atomicAdd(&p_g[" in source


def test_the_contraction_adjoint_sums_f_bar_per_warp_and_not_w_bar() -> None:
    source = _emit(vjp(contract32)).source
    f_bar = [line for line in source.splitlines() if "p_f_bar[" in line]
    w_bar = [line for line in source.splitlines() if "p_w_bar[" in line]
    assert f_bar and all("hawk_add_warp(&p_f_bar[" in line for line in f_bar)
    assert w_bar and all(
        "atomicAdd(&p_w_bar[" in line for line in w_bar
    )  # lane % U: every lane differs


def test_a_plan_emits_narrow_kernels_below_2_to_the_31_lanes() -> None:
    plan, backend = eagle.plan.auto(axpy), backend_named("cuda")
    signature = tuple("float32" for _ in axpy.planes)
    assert "for (unsigned int at" in backend.emit(axpy, signature, lanes=2**31 - 1).source
    assert "for (long long at" in backend.emit(axpy, signature, lanes=2**31).source
    assert "for (unsigned int at" in plan.source("device")  # what runs below 2**31 lanes
    # a kernel whose lanes run a loop keeps 64-bit counters at any lane count
    signature = tuple("float32" for _ in contract32.planes)
    assert "for (long long at" in backend.emit(contract32, signature, lanes=1024).source
