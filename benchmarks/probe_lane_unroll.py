"""The seed kernel's forward loop and loop adjoint with their lane loops emitted four ways.

Usage: PYTHONPATH=. python benchmarks/probe_lane_unroll.py    # needs a CUDA device

At (R, U, B) = (256, 256, 4096) and 2048^3, float32, for the forward ``contract`` and its
vjp (both gradients), each emitted with 64- or 32-bit lane counters (``narrow``) and the
lane loop unrolled 4 times or not at all (``#pragma unroll 1``, what the emitter now does
for a lane that runs a loop of its own): the registers ptxas gives each (NVRTC's log, on
this machine's NVRTC) and the median CUDA-event time of a direct launch. The session-5
H200 run of it is in RESULTS.md ("Session 5"). Under a minute. Since session 18 a kernel
whose lanes run a loop keeps 64-bit lane counters even when emitted ``narrow``, which
writes its ints that fit 32 bits as ``int`` instead: here ``narrow`` compares those.
"""

from __future__ import annotations

import functools
import re
import sys

import numpy as np
from _kernels import contract
from _timing import device_ms
from cuda.bindings import nvrtc

import eagle.cuda
import hawk
import hawk.diff
from eagle import arrays
from eagle.cuda.module import PackedArgs
from eagle.plan._cuda_backend import BLOCK_SIZE
from eagle.plan._cuda_backend import grid as _grid
from hawk.emit import cuda as emit_cuda

SHAPES = ((256, 256, 4096), (2048, 2048, 2048))


def registers(source: str) -> int:
    """The registers per thread ptxas gives the kernel in ``source`` (sm_90)."""
    _, program = nvrtc.nvrtcCreateProgram(source.encode(), b"probe.cu", 0, [], [])
    options = [b"--gpu-architecture=sm_90", b"-Xptxas=-v", b"-std=c++17"]
    nvrtc.nvrtcCompileProgram(program, len(options), options)
    _, size = nvrtc.nvrtcGetProgramLogSize(program)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(program, log)
    nvrtc.nvrtcDestroyProgram(program)
    found = re.search(r"Used (\d+) registers", log.decode())
    return int(found.group(1)) if found else -1


def variants(kernel: hawk.Kernel) -> list[tuple[bool, int, str, str]]:
    """(narrow, unroll, source, name) of the four ways to emit ``kernel``'s lane loops."""
    dtypes = {p.name: "float32" for p in kernel.planes}
    out = []
    for narrow in (False, True):
        emitted = emit_cuda.emit(kernel.ir, dtypes, narrow=narrow)
        for unroll in (emit_cuda.UNROLL, 1):
            source = re.sub(r"#pragma unroll \d+\n", f"#pragma unroll {unroll}\n", emitted.source)
            out.append((narrow, unroll, source, emitted.name))
    return out


def main() -> int:
    if not eagle.cuda.is_available():
        print("probe_lane_unroll needs a CUDA device; none is usable here")
        return 1
    rng = np.random.default_rng()
    stream = eagle.cuda.Stream(non_blocking=True)
    ptr = stream.ptr()
    print("R, U, B         kernel   counters  unroll  registers     ms")
    for rows, units, samples in SHAPES:
        lanes = samples * units
        planes = {
            "w": arrays.asarray(rng.standard_normal((rows, units), np.float32), device="cuda:0"),
            "f": arrays.asarray(rng.standard_normal((rows, samples), np.float32), device="cuda:0"),
            "y_bar": arrays.asarray(rng.standard_normal(lanes, np.float32), device="cuda:0"),
            "y": arrays.zeros((lanes,), "float32", "cuda:0"),
            "w_bar": arrays.zeros((rows, units), "float32", "cuda:0"),
            "f_bar": arrays.zeros((rows, samples), "float32", "cuda:0"),
        }
        record = arrays.zeros((8,), "int64", "cuda:0")
        forward = contract(rows, units, samples)
        for what, kernel in (("forward", forward), ("adjoint", hawk.diff.vjp(forward))):
            args = PackedArgs([*(planes[p.name] for p in kernel.planes), np.int64(lanes), record])
            for narrow, unroll, source, name in variants(kernel):
                loaded = eagle.cuda.load_kernel(source, name)
                launch = functools.partial(loaded.launch, _grid(lanes), BLOCK_SIZE, args, ptr)
                ms = device_ms(launch, ptr, 10)
                print(
                    f"{rows},{units},{samples:<6} {what:8s} {'32-bit' if narrow else '64-bit':9s} "
                    f"{unroll:6d}  {registers(source):9d}  {ms:7.3f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
