# ruff: noqa: F821, F841, UP037 - hawk annotations and output planes confuse these checks
"""``python -m eagle``: the demo.

On any machine: one matrix product through ``matmul_step`` on the host, and a
hawk contraction kernel run through ``eagle.plan.auto``. Where a CUDA device
is present: the same product captured into a CUDA graph and replayed, and the
kernel routed to one cuBLAS product and replayed from a graph.
"""

from __future__ import annotations

import sys

import numpy as np

import eagle.plan
import hawk
from eagle import arrays, cuda
from eagle.gemm import CublasCaptureHandle, sgemm_params_for_arrays
from eagle.gemm.plan import matmul_step
from hawk import math as hm
from hawk.emit import policy

R, U, B = 64, 32, 128


@hawk.kernel
def contract(
    w: hawk.Table["row":R, "unit":U],
    f: hawk.Table["row":R, "sample":B],
    y: hawk.Mutable[hawk.Scalar],
):
    sample, unit = hm.split_index(U)
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = acc


def _rel(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def host_demo(rng: np.random.Generator) -> None:
    a, b = rng.standard_normal((300, 200)), rng.standard_normal((200, 100))
    bufs = {"a": arrays.asarray(a), "b": arrays.asarray(b), "c": arrays.zeros((300, 100))}
    matmul_step("c", a="a", b="b", out="c").run(bufs, "host")
    err = _rel(np.asarray(bufs["c"]), a @ b)
    print(f"host  matmul_step 300x200 @ 200x100 (float64): rel. error {err:.1e}")

    w, f = rng.standard_normal((R, U)), rng.standard_normal((R, B))
    y = np.zeros(B * U)
    plan = eagle.plan.auto(contract)
    plan.run(w=w, f=f, y=y)
    ref = (f.T @ w).reshape(-1)
    print(
        f"host  hawk kernel 'contract' ({B * U} lanes, route {plan.route('host')!r}): "
        f"rel. error {_rel(y, ref):.1e}"
    )


def device_demo(rng: np.random.Generator) -> None:
    a = rng.standard_normal((1024, 512)).astype(np.float32)
    b = rng.standard_normal((512, 768)).astype(np.float32)
    da, db = arrays.asarray(a, device="cuda:0"), arrays.asarray(b, device="cuda:0")
    out = arrays.zeros((1024, 768), "float32", "cuda:0")
    operands = {"a": da, "b": db, "out": out}
    stream = cuda.Stream(non_blocking=True)
    handle = CublasCaptureHandle(stream.ptr())
    params = sgemm_params_for_arrays(da, db, out)
    try:
        handle.warm(params, operands)
        out.fill(np.nan, stream.ptr())
        with cuda.StreamCapturer(stream.ptr()) as cap:
            handle.sgemm(params, operands)
        assert cap.captured is not None  # set when the with block ended the capture
        graph = cuda.Graph.from_captured(cap.captured)
        launcher = graph.launcher()
        launcher.stream(stream.ptr())
        for _ in range(10):
            launcher.launch()
        launcher.synchronize()
        err = _rel(out.numpy(), a.astype(np.float64) @ b.astype(np.float64))
        print(f"cuda  captured sgemm 1024x512 @ 512x768, replayed 10x: rel. error {err:.1e}")
        graph.destroy()
    finally:
        handle.destroy()

    w = rng.standard_normal((R, U)).astype(np.float32)
    f = rng.standard_normal((R, B)).astype(np.float32)
    planes = {
        "w": arrays.asarray(w, device="cuda:0"),
        "f": arrays.asarray(f, device="cuda:0"),
        "y": arrays.full((B * U,), np.nan, "float32", "cuda:0"),
    }
    with policy.using(contraction="gemm"):
        plan = eagle.plan.auto(contract)
    bound = plan.bind(**planes)
    launcher = bound.capture(stream)
    launcher.launch()
    launcher.synchronize()
    ref = (f.T.astype(np.float64) @ w.astype(np.float64)).reshape(-1)
    print(
        f"cuda  hawk kernel 'contract' bound, captured, replayed (route "
        f"{plan.route('device')!r}): rel. error {_rel(planes['y'].numpy(), ref):.1e}"
    )


def main() -> int:
    rng = np.random.default_rng()
    host_demo(rng)
    if cuda.is_available():
        device_demo(rng)
    else:
        print("cuda  no CUDA device here: the captured product and the routed kernel are skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
