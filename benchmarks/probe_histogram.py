"""Where bench_scatter's privatised histogram spends its time: hawk's kernel against
hand-written variants, each one change away from another.

    PYTHONPATH=. python benchmarks/probe_histogram.py    # needs a CUDA device

Issue #27 §3 asks for a histogram (10**8 float32 samples in [0, 1), 1,024 bins) at least
2x faster than ``torch.histc``. Every variant below runs the grid eagle's privatised
launch runs (blocks of 256 threads, at most 8 per multiprocessor and no more than the
device runs at once, the table's copy in shared memory) over the same data; each line
gives the median CUDA-event time of 20 launches (zeroing the counts included), the
registers ptxas gives it, its blocks and whether its counts equal ``numpy.bincount``'s:

* ``emitted, 32-bit counters``: hawk's kernel as ``eagle.plan.auto(histogram)`` launches
  it below 2**31 lanes (``narrow``: its lane loops count in 32 bits; 4 lanes from each
  16-byte load);
* ``emitted, 64-bit counters``: the same emitted without ``narrow``;
* ``by hand, C counters, N ahead``: the bin computed and checked in 32-bit ints (a NaN
  still fails), the loop counting in C bits, each pass loading the 16-byte groups of N
  passes before it adds the first (the compiler does not move a load above a
  shared-memory atomic on its own);
* ``read only``: the 4-ahead loop summing the samples instead of adding them into the
  table (the pace of the loads alone);
* ``torch.histc``.

Runs V and Y of benchmarks/RESULTS.md launched every variant on 8 blocks per
multiprocessor whatever its registers. A kernel that holds 5 or 6 blocks a multiprocessor
then ran a second, partial wave of blocks, and its figure was about 1.35x its own: hawk's
kernel took 0.199 ms there, where the plan's launch of it took 0.145.
"""

from __future__ import annotations

import functools
import sys

import numpy as np
import torch
from _timing import device_ms
from bench_scatter import BINS, SAMPLES, histogram
from probe_lane_unroll import registers

import eagle.cuda
from eagle import arrays
from eagle.cuda import module
from eagle.cuda.module import PackedArgs
from eagle.plan._cuda_backend import BLOCK_SIZE, PRIVATE_BLOCKS_PER_SM
from hawk.emit import cuda as emit_cuda
from hawk.emit import private

_HAND = r"""
extern "C" __global__ void hist_NAME(const float* __restrict__ p_x, float* __restrict__ p_counts,
                                      long long n, unsigned long long* __restrict__ rec)
{
    __shared__ unsigned int s_counts[1024];
    for (int c = threadIdx.x; c < 1024; c += blockDim.x) s_counts[c] = 0u;
    __syncthreads();
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long groups = n / 4;
    const float4* groups_x = reinterpret_cast<const float4*>(p_x);
    COUNTER group = first;
    for (; group + (AHEAD - 1) * stride < groups; group += AHEAD * stride) {
        float4 v[AHEAD];
#pragma unroll
        for (int u = 0; u < AHEAD; ++u) v[u] = groups_x[group + u * stride];
#pragma unroll
        for (int u = 0; u < AHEAD; ++u) {
            const float f[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float t = fminf(fmaxf(f[k] * 1024.0f, 0.0f), 1023.0f);
                if (t != t) {
                    hawk_fail(rec, 0LL, (group + u * stride) * 4 + k, 0LL, 0LL);
                    continue;
                }
                atomicAdd(&s_counts[(int)t], 1u);
            }
        }
    }
    for (; group < groups; group += stride) {
        const float4 w = groups_x[group];
        const float f[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const float t = fminf(fmaxf(f[k] * 1024.0f, 0.0f), 1023.0f);
            if (t != t) { hawk_fail(rec, 0LL, group * 4 + k, 0LL, 0LL); continue; }
            atomicAdd(&s_counts[(int)t], 1u);
        }
    }
    for (COUNTER at = groups * 4 + first; at < n; at += stride) {
        const float t = fminf(fmaxf(p_x[at] * 1024.0f, 0.0f), 1023.0f);
        if (t != t) { hawk_fail(rec, 0LL, at, 0LL, 0LL); continue; }
        atomicAdd(&s_counts[(int)t], 1u);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < 1024; c += blockDim.x) {
        const unsigned int count = s_counts[c];
        if (count != 0u) atomicAdd(&p_counts[c], (float)count);
    }
}
"""

_READ = r"""
extern "C" __global__ void read_only(const float* __restrict__ p_x, float* __restrict__ p_counts,
                                     long long n, unsigned long long* __restrict__ rec)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long groups = n / 4;
    const float4* groups_x = reinterpret_cast<const float4*>(p_x);
    float sum = 0.0f;
    long long group = first;
    for (; group + 3 * stride < groups; group += 4 * stride) {
        float4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = groups_x[group + u * stride];
#pragma unroll
        for (int u = 0; u < 4; ++u) sum += v[u].x + v[u].y + v[u].z + v[u].w;
    }
    for (; group < groups; group += stride) {
        const float4 w = groups_x[group];
        sum += w.x + w.y + w.z + w.w;
    }
    if (sum == 12345.0f) p_counts[0] = sum;
}
"""


def _hand(counter: str, ahead: int) -> tuple[str, str]:
    """The hand-written kernel counting in ``counter`` with ``ahead`` groups a pass, and
    its name."""
    name = f"hist_{counter.replace(' ', '_')}_{ahead}"
    kernel = _HAND.replace("hist_NAME", name).replace("COUNTER", counter)
    return kernel.replace("AHEAD", str(ahead)), name


def main() -> int:
    if not eagle.cuda.is_available():
        print("probe_histogram needs a CUDA device; none is usable here")
        return 1
    dtypes = {"x": "float32", "counts": "float32"}
    sms = module.multiprocessors(0)
    shared = private.choose(
        histogram.ir, dtypes, {}, adds="auto", lanes=SAMPLES, blocks=lambda: sms, warps=8
    )
    narrow = emit_cuda.emit(histogram.ir, dtypes, shared=shared, narrow=True)
    wide = emit_cuda.emit(histogram.ir, dtypes, shared=shared)
    head = narrow.source.partition('extern "C"')[0]
    grid = PRIVATE_BLOCKS_PER_SM * sms
    shared_mem = private.shared_bytes(shared, {})
    rng = np.random.default_rng(3)
    x_host = rng.random(SAMPLES, dtype=np.float32)
    want = np.bincount(np.minimum((x_host * BINS).astype(np.int64), BINS - 1), minlength=BINS)
    x = arrays.asarray(x_host, device="cuda:0")
    counts = arrays.zeros((BINS,), "float32", "cuda:0")
    record = arrays.zeros((8,), "int64", "cuda:0")
    stream = eagle.cuda.Stream(non_blocking=True)
    args = PackedArgs([x, counts, np.int64(SAMPLES), record])
    variants = [
        ("emitted, 32-bit counters", narrow.source, narrow.name, shared_mem),
        ("emitted, 64-bit counters", wide.source, wide.name, shared_mem),
    ]
    for counter, bits in (("unsigned int", 32), ("long long", 64)):
        for ahead in (1, 4, 8):
            source, name = _hand(counter, ahead)
            variants.append((f"by hand, {bits}-bit, {ahead} ahead", head + source, name, 0))
    variants.append(("read only", head + _READ, "read_only", 0))
    print(f"{SAMPLES} float32 samples, {BINS} bins, {BLOCK_SIZE} threads a block")
    print(f"{'variant':24s} {'regs':>5s} {'blocks':>6s} {'ms':>8s}  counts")
    for label, source, name, smem in variants:
        loaded = eagle.cuda.load_kernel(source, name)
        # as eagle's privatised launch: no more blocks than run at once (a second, partial
        # wave of blocks would leave most of the device idle at the end)
        blocks = min(grid, loaded.resident_blocks(BLOCK_SIZE, smem))
        launch_kernel = functools.partial(loaded.launch, blocks, BLOCK_SIZE, args, stream, smem)

        def launch(launch_kernel=launch_kernel) -> None:
            counts.fill(0, stream)
            launch_kernel()

        ms = device_ms(launch, stream, 20)
        stream.synchronize()
        right = "-" if label == "read only" else bool(np.array_equal(counts.numpy(), want))
        print(f"{label:24s} {registers(source):5d} {blocks:6d} {ms:8.4f}  {right}", flush=True)
    xt = torch.from_numpy(x_host).cuda()
    torch_ms = device_ms(
        lambda: torch.histc(xt, BINS, 0.0, 1.0), torch.cuda.current_stream().cuda_stream, 20
    )
    print(f"{'torch.histc':24s} {'':5s} {'':6s} {torch_ms:8.4f}")
    print(f"HBM bound at 4.8 TB/s: {SAMPLES * 4 / 4.8e12 * 1e3:.4f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
