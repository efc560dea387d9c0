"""A solve whose trip count the device decides: one graph launch vs a host-driven loop.

    python benchmarks/bench_loops.py [results.json]    (eagle installed, or PYTHONPATH=.)

Power iteration on a symmetric float32 matrix (N = 1024 and 4096, a clear spectral gap),
until the eigenvalue moves by less than 1e-5 relative. One pass is a cuBLAS product
(``w = A v``), a hawk kernel for ``|w|^2`` and ``v . w``, a hawk normalisation kernel and a
hawk convergence kernel that writes the flag. Every side starts from the same vector and
runs the same passes; each figure is the host wall-clock of a whole solve (from the reset
to the eigenvalue ready on the device), the median of several solves after a warm-up:

* device loop: one graph holding the reset and a ``while_loop`` around the pass, launched
  once and waited for once;
* host loop, graph: the reset, then one launch of a one-pass graph per pass, copying the
  flag back after each to decide whether to go on;
* host loop, eager: the same, with the pass's four launches enqueued one by one.

The table is printed; with a path, the figures are also written there as JSON.
"""

# ruff: noqa: F821, F841 - kernels assign their output planes and name table axes

import sys
import time
from typing import Any

import numpy as np
from _report import print_table, write_record
from _timing import device_ms, host_ms

import eagle.plan
import hawk
from eagle import arrays, cuda
from eagle.gemm import CublasCaptureHandle, sgemm_params_for_arrays
from hawk import math as hm

SIZES = (1024, 4096)
TOL = 1e-5
REPEAT = 20
MAX_PASSES = 1000


@hawk.kernel
def moments(v: hawk.Scalar, w: hawk.Scalar, sums: hawk.Mutable[hawk.Table["k":2]]):
    sums.add(k=0, value=w * w)
    sums.add(k=1, value=v * w)


@hawk.kernel
def normalise(w: hawk.Scalar, sums: hawk.Table["k":2], v: hawk.Mutable[hawk.Scalar]):
    v = w / hm.sqrt(sums.at(k=0))


@hawk.kernel
def converge(
    sums: hawk.Table["k":2],
    tol: hawk.Param,
    lam: hawk.Mutable[hawk.Scalar],
    flag: hawk.Mutable[hawk.Scalar],
    passes: hawk.Mutable[hawk.Table["k":1]],
):
    new = sums.at(k=1)
    flag = 1.0 if hm.abs(new - lam) > tol * hm.abs(new) else 0.0
    lam = new
    passes.add(k=0, value=1.0)


class Solver:
    """The device state of one power iteration and the ways to run it."""

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        x = rng.standard_normal((n, n))
        u = rng.standard_normal(n)
        u /= np.linalg.norm(u)
        self.matrix = ((x + x.T) / np.sqrt(2 * n) + 6.0 * np.outer(u, u)).astype(np.float32)
        self.n = n
        self.stream = cuda.Stream(non_blocking=True)
        self.a = arrays.asarray(self.matrix, device="cuda:0")
        self.v = arrays.full((n,), np.nan, "float32", "cuda:0")
        self.w = arrays.full((n,), np.nan, "float32", "cuda:0")
        self.sums = arrays.full((2,), np.nan, "float32", "cuda:0")
        self.lam = arrays.full((1,), np.nan, "float32", "cuda:0")
        self.flag = arrays.full((1,), np.nan, "float32", "cuda:0")
        self.passes = arrays.full((1,), np.nan, "float32", "cuda:0")
        self.product = {"a": self.a, "b": self.v.reshape(n, 1), "out": self.w.reshape(n, 1)}
        self.params = sgemm_params_for_arrays(*self.product.values())
        self.handle = CublasCaptureHandle(self.stream)
        self.handle.warm(self.params, self.product)
        self.steps = [
            eagle.plan.auto(moments).bind(v=self.v, w=self.w, sums=self.sums),
            eagle.plan.auto(normalise).bind(w=self.w, sums=self.sums, v=self.v),
            eagle.plan.auto(converge).bind(
                sums=self.sums, tol=TOL, lam=self.lam, flag=self.flag, passes=self.passes
            ),
        ]
        with cuda.StreamCapturer(self.stream) as cap:
            self.reset()
            with cap.while_loop(self.flag, max_iterations=MAX_PASSES):
                self.one_pass()
        self.solve_graph = cuda.Graph.from_captured(cap.captured)
        self.solve = self.solve_graph.launcher().stream(self.stream)
        with cuda.StreamCapturer(self.stream) as cap:
            self.one_pass()
        self.pass_graph = cuda.Graph.from_captured(cap.captured)
        self.pass_launcher = self.pass_graph.launcher().stream(self.stream)

    def reset(self) -> None:
        """Enqueue the start: the same unit vector, no eigenvalue, no passes."""
        self.v.fill(1.0 / np.sqrt(self.n), self.stream)
        self.lam.fill(0.0, self.stream)
        self.passes.fill(0.0, self.stream)

    def one_pass(self) -> None:
        """Enqueue one pass of power iteration."""
        self.sums.fill(0.0, self.stream)
        self.handle.sgemm(self.params, self.product)
        for step in self.steps:
            step.launch(self.stream)

    def device_loop(self) -> None:
        self.solve.launch()
        self.solve.synchronize()

    def host_loop(self, graph: bool) -> None:
        self.reset()
        for _ in range(MAX_PASSES):
            if graph:
                self.pass_launcher.launch()
            else:
                self.one_pass()
            if self.flag.numpy()[0] == 0.0:  # waits for the stream, copies the flag back
                return

    def result(self) -> tuple[float, int]:
        """The eigenvalue and the pass count the last solve left on the device."""
        return float(self.lam.numpy()[0]), int(self.passes.numpy()[0])

    def destroy(self) -> None:
        self.solve_graph.destroy()
        self.pass_graph.destroy()
        self.handle.destroy()


def measure(n: int, rng: np.random.Generator) -> dict[str, Any]:
    solver = Solver(n, rng)
    top = float(np.linalg.eigvalsh(solver.matrix.astype(np.float64))[-1])
    row: dict[str, Any] = {"n": n, "ms": {}, "passes": {}, "rel_error": {}}
    with solver.stream:  # flag.numpy() waits for this stream
        sides = {
            "device_loop": solver.device_loop,
            "host_loop_graph": lambda: solver.host_loop(graph=True),
            "host_loop_eager": lambda: solver.host_loop(graph=False),
        }
        for name, solve in sides.items():
            row["ms"][name] = host_ms(solve, REPEAT)
            lam, passes = solver.result()
            row["passes"][name] = passes
            row["rel_error"][name] = abs(lam - top) / top
        row["pass_device_ms"] = device_ms(solver.pass_launcher.launch, solver.stream, REPEAT)
    solver.destroy()
    ms = row["ms"]
    row["speedup_vs_host_graph"] = ms["host_loop_graph"] / ms["device_loop"]
    row["speedup_vs_host_eager"] = ms["host_loop_eager"] / ms["device_loop"]
    return row


def report(rows: list[dict[str, Any]]) -> None:
    header = ("N", "passes", "device loop ms", "host loop (graph) ms",
              "host loop (eager) ms", "one pass on device ms", "vs host graph",
              "vs host eager", "eigenvalue rel err")  # fmt: skip
    table = [header]
    for row in rows:
        ms = row["ms"]
        table.append((
            str(row["n"]), str(row["passes"]["device_loop"]), f"{ms['device_loop']:.3f}",
            f"{ms['host_loop_graph']:.3f}", f"{ms['host_loop_eager']:.3f}",
            f"{row['pass_device_ms']:.3f}", f"{row['speedup_vs_host_graph']:.2f}x",
            f"{row['speedup_vs_host_eager']:.2f}x", f"{row['rel_error']['device_loop']:.1e}",
        ))  # fmt: skip
    print_table(table)


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(__doc__)
        return 2
    if not cuda.is_available():
        print("bench_loops needs a CUDA device; none is usable here")
        return 1
    began = time.perf_counter()
    rng = np.random.default_rng()
    rows = [measure(n, rng) for n in SIZES]
    report(rows)
    print(f"({time.perf_counter() - began:.0f} s)")
    if argv:
        write_record(argv[0], {"numpy": np.__version__, "repeat": REPEAT, "tol": TOL, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
