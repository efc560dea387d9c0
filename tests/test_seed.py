"""The examples of the user's page (tests/data/eagle-gemm.txt), run exactly as written.

Each snippet below is checked to stand verbatim in the page, then executed;
later snippets run in the namespace the earlier ones left, as a reader would.
"""

from __future__ import annotations

import linecache
from pathlib import Path

import numpy as np
import pytest

PAGE = (Path(__file__).parent / "data" / "eagle-gemm.txt").read_text()

HOST_EXAMPLE = """\
import numpy as np
from eagle import arrays
from eagle.gemm.plan import matmul_step

a = np.random.default_rng(0).standard_normal((3, 4))
b = np.random.default_rng(1).standard_normal((4, 5))
bufs = {"a": arrays.asarray(a), "b": arrays.asarray(b), "c": arrays.zeros((3, 5), "float64")}

matmul_step("c", a="a", b="b", out="c").run(bufs, "host")
c = np.asarray(bufs["c"])           # equals a @ b
"""

CAPTURE_EXAMPLE = """\
from eagle import cuda
from eagle.gemm import CublasCaptureHandle, sgemm_params_for_arrays

a = arrays.asarray(a.astype("float32"), device="cuda:0")
b = arrays.asarray(b.astype("float32"), device="cuda:0")
out = arrays.zeros((3, 5), "float32", "cuda:0")
operands = {"a": a, "b": b, "out": out}

stream = cuda.Stream(non_blocking=True)
handle = CublasCaptureHandle(stream.ptr())
params = sgemm_params_for_arrays(a, b, out)
try:
    handle.warm(params, operands)            # once per shape, before the capture
    out.fill(0.0, stream.ptr())              # warm() wrote `out`: clear it
    cap = cuda.StreamCapturer(stream.ptr())
    cap.begin()
    try:
        handle.sgemm(params, operands)       # recorded, not run
    finally:
        captured = cap.end()
    launcher = cuda.Graph.from_captured(captured).launcher()
    launcher.stream(stream.ptr())
    launcher.launch()                        # replay as often as you like
    launcher.synchronize()
finally:
    handle.destroy()
"""

OPT_IN_EXAMPLE = """\
from hawk.emit import policy

with policy.using(contraction="gemm"):
    plan = eagle.plan.auto(contract)
plan.run(w=w, f=f, y=y)          # one GEMM, written straight into the lane plane y
"""

# The kernel of DESIGN.md §6, which the page's last example runs.
CONTRACT_KERNEL = """\
import eagle
import hawk
from hawk import math as hm

R, U, B = 64, 32, 128

@hawk.kernel
def contract(w: hawk.Table["row":R, "unit":U],
             f: hawk.Table["row":R, "sample":B],
             y: hawk.Mutable[hawk.Scalar]):
    sample, unit = hm.split_index(U)        # lane = sample * U + unit
    acc = 0.0
    for r in range(R):
        acc = acc + w.at(row=r, unit=unit) * f.at(row=r, sample=sample)
    y = acc
"""


def _define_contract(namespace: dict) -> None:
    """Run CONTRACT_KERNEL as if from a file, so hawk can read the kernel's source."""
    filename = "<design-contract-kernel>"
    lines = CONTRACT_KERNEL.splitlines(keepends=True)
    linecache.cache[filename] = (len(CONTRACT_KERNEL), None, lines, filename)
    exec(compile(CONTRACT_KERNEL, filename, "exec"), namespace)


@pytest.mark.parametrize("snippet", [HOST_EXAMPLE, CAPTURE_EXAMPLE, OPT_IN_EXAMPLE])
def test_snippet_stands_verbatim_in_the_page(snippet):
    assert snippet.rstrip("\n") in PAGE


def test_host_example_runs_as_written():
    namespace: dict = {}
    exec(HOST_EXAMPLE, namespace)
    np.testing.assert_allclose(namespace["c"], namespace["a"] @ namespace["b"], rtol=1e-12)


def test_opt_in_example_on_the_host_keeps_the_direct_kernel(rng):
    namespace: dict = {}
    _define_contract(namespace)
    w, f = rng.standard_normal((64, 32)), rng.standard_normal((64, 128))
    y = np.full(128 * 32, np.nan)
    namespace.update(w=w, f=f, y=y)
    exec(OPT_IN_EXAMPLE, namespace)
    np.testing.assert_allclose(y, (f.T @ w).reshape(-1), rtol=1e-12, atol=1e-12)
    assert namespace["plan"].route("host") == "loop"


@pytest.mark.gpu
def test_capture_example_runs_as_written_and_is_right():
    namespace: dict = {}
    exec(HOST_EXAMPLE, namespace)
    a64, b64 = namespace["a"], namespace["b"]
    exec(CAPTURE_EXAMPLE, namespace)
    out = namespace["out"].numpy()
    ref = a64 @ b64
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 4 * 4 * np.finfo(np.float32).eps


@pytest.mark.gpu
def test_opt_in_example_on_the_device_takes_one_gemm(rng):
    from eagle import arrays

    namespace: dict = {}
    _define_contract(namespace)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    f = rng.standard_normal((64, 128)).astype(np.float32)
    y = arrays.full((128 * 32,), np.nan, "float32", "cuda:0")
    namespace.update(
        w=arrays.asarray(w, device="cuda:0"), f=arrays.asarray(f, device="cuda:0"), y=y
    )
    exec(OPT_IN_EXAMPLE, namespace)
    ref = (f.T.astype(np.float64) @ w.astype(np.float64)).reshape(-1)
    assert np.linalg.norm(y.numpy() - ref) / np.linalg.norm(ref) < 64 * np.finfo(np.float32).eps
    assert namespace["plan"].route("device") == "gemm"
