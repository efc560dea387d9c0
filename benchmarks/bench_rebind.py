"""Pointing a captured graph at other planes: ``launcher.rebind`` vs capturing again.

    python benchmarks/bench_rebind.py [results.json]    (eagle installed, or PYTHONPATH=.)

Two kinds of graph, each a chain of N = 1, 10 and 200 bound launches captured on one
stream, where launch i reads plane ``a[i]`` and writes ``a[i + 1]``:

* hawk only: a one-line hawk kernel (``y = 0.5 x + 1`` over 4096 lanes), one kernel node
  per launch;
* with cuBLAS nodes: the seed's contraction routed to cuBLAS (R = U = B = 64,
  ``policy.using(contraction="gemm")``), every launch one product over the same ``w``,
  its ``f`` the previous launch's ``y``.

Each figure is the host wall-clock of one operation, the median of many after a warm-up:

* rebind one plane: ``launcher.rebind(a0=...)``, the first launch's input, alternating
  between two arrays (one node changes);
* rebind every plane: all N + 1 chain planes at once, alternating between two sets (for
  cuBLAS nodes the first one captures the products again over the new planes and learns
  where their kernels hold the planes' addresses; later ones patch those); "first rebind
  all" is the first one alone, timed once after a garbage collection;
* capture + instantiate: capturing the same bound launches (of a second, identical
  chain) again, instantiating the graph and destroying the one it replaces, which is what
  a rebind saves;
* node update (hawk only): the one ``cuGraphExecKernelNodeSetParams`` a one-plane rebind
  makes, alone, which splits "rebind one" into the driver's part and eagle's.

Rebinding every plane and capturing again take turns in 5 rounds, since both are host
time and a host's pace drifts within a run: each figure is the median of the rounds'
medians, and "vs all" the median of the rounds' ratios.

Targets: a hawk-only rebind of one plane takes at most 10 µs; at 200 nodes, a rebind of a
graph with cuBLAS nodes is at least 3x faster than capture + instantiate, for one plane
and for every plane (at most 1/3 of its time). Each graph is
replayed after its rebinds and checked against numpy. The table is printed last; with a
path, the figures are also written there as JSON.
"""

# ruff: noqa: F841 - a kernel assigns its output plane

import gc
import statistics
import sys
import time
from typing import Any

import numpy as np
from _kernels import contract
from _report import print_table, write_record
from _timing import host_ms

import eagle.plan
import hawk
from eagle import arrays, cuda
from hawk.emit import policy

SIZES = (1, 10, 200)
LANES = 4096
EXTENT = 64  # R = U = B of the routed contraction
REPEAT = {"rebind": 2001, "rebind_all": 41, "capture": 9}  # the last two: per round
ROUNDS = 5


@hawk.kernel
def affine(x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = 0.5 * x + 1.0


class Chain:
    """N bound launches in a chain, a graph of them, and two sets of planes."""

    def __init__(self, kind: str, n: int, rng: np.random.Generator) -> None:
        self.kind, self.n = kind, n
        self.stream = cuda.Stream(non_blocking=True)
        if kind == "hawk":
            self.plan = eagle.plan.auto(affine)
            size = LANES
        else:
            with policy.using(contraction="gemm"):
                self.plan = eagle.plan.auto(contract(EXTENT, EXTENT, EXTENT))
            size = EXTENT * EXTENT
            scale = np.float32(1 / np.sqrt(EXTENT))  # keeps the chain's values near 1
            self.w_host = rng.standard_normal((EXTENT, EXTENT)).astype(np.float32) * scale
            self.w = arrays.asarray(self.w_host, device="cuda:0")
        self.sets = [self.planes(rng.standard_normal(size).astype(np.float32)) for _ in range(2)]
        # swaps[turn]: every plane of the other set to sets[turn]'s, made once, not timed
        self.swaps = [
            dict(zip(self.sets[1 - turn], self.sets[turn], strict=True)) for turn in (0, 1)
        ]
        # the first launch's input: the graph reads firsts[0]; firsts[1] is the other one
        self.firsts = [self.sets[0][0], arrays.asarray(rng.standard_normal(size).astype(np.float32),
                                                       device="cuda:0")]  # fmt: skip
        with self.stream:
            self.bound = [self.bind(self.sets[0], i) for i in range(n)]
        assert {b.route for b in self.bound} == {"loop" if kind == "hawk" else "gemm"}
        self.graph = self.capture()
        self.launcher = self.graph.launcher().stream(self.stream)
        self.nodes = len(self.graph.node_types())
        self.turn = 0  # the graph works on sets[turn]

    def planes(self, first: np.ndarray) -> list[arrays.Array]:
        chain = [arrays.asarray(first, device="cuda:0")]
        chain += [arrays.full(first.shape, np.nan, "float32", "cuda:0") for _ in range(self.n)]
        return chain

    def bind(self, chain: list[arrays.Array], i: int) -> Any:
        if self.kind == "hawk":
            return self.plan.bind(x=chain[i], y=chain[i + 1])
        return self.plan.bind(w=self.w, f=chain[i], y=chain[i + 1])

    def capture(self) -> cuda.Graph:
        with cuda.StreamCapturer(self.stream) as cap:
            for bound in self.bound:
                bound.launch(self.stream)
        return cuda.Graph.from_captured(cap.captured)

    def recapture(self) -> None:
        graph = self.capture()
        self.graph.destroy()
        self.graph = graph

    def rebind_one(self) -> None:
        """Swap the first launch's input for the other one (sets[0] only)."""
        self.launcher.rebind({self.firsts[0]: self.firsts[1]})
        self.firsts.reverse()

    def rebind_all(self) -> None:
        """Swap every plane for the other set's (with the first input at sets[0][0])."""
        self.turn ^= 1
        self.launcher.rebind(self.swaps[self.turn])

    def check(self) -> float:
        """Replay over the planes bound now; the relative error of the last plane."""
        chain = self.sets[self.turn]
        first = self.firsts[0] if self.turn == 0 else chain[0]
        chain[-1].fill(np.nan, self.stream)
        self.launcher.launch()
        self.launcher.synchronize()
        value = first.numpy().astype(np.float64)
        for _ in range(self.n):
            if self.kind == "hawk":
                value = 0.5 * value + 1.0
            else:  # y[s*U + u] = sum_r w[r, u] f[r, s]
                value = (value.reshape(EXTENT, EXTENT).T @ self.w_host).reshape(-1)
        got = chain[-1].numpy()
        return float(np.linalg.norm(got - value) / np.linalg.norm(value))

    def destroy(self) -> None:
        self.graph.destroy()


def measure(kind: str, n: int, rng: np.random.Generator) -> dict[str, Any]:
    chain = Chain(kind, n, rng)
    row: dict[str, Any] = {"kind": kind, "launches": n, "nodes": chain.nodes, "us": {}}
    errors = [chain.check()]
    row["us"]["rebind_one"] = host_ms(chain.rebind_one, REPEAT["rebind"]) * 1e3
    if kind == "hawk":
        first = chain.graph._rebind_state.sites[0]  # the launch whose input was rebound
        row["us"]["node_update"] = host_ms(first.update, REPEAT["rebind"]) * 1e3
    errors.append(chain.check())
    if chain.firsts[0] is not chain.sets[0][0]:
        chain.rebind_one()  # back to sets[0] whole, for the swaps of every plane
    gc.collect()  # a single timing: no collection of earlier garbage inside it
    began = time.perf_counter()
    chain.rebind_all()  # the first move of every plane (cuBLAS nodes: captured again)
    row["us"]["first_rebind_all"] = (time.perf_counter() - began) * 1e6
    captured = Chain(kind, n, rng)  # captured again and again, in turns with the rebinds
    rounds = []
    for _ in range(ROUNDS):
        every = host_ms(chain.rebind_all, REPEAT["rebind_all"]) * 1e3
        rounds.append((every, host_ms(captured.recapture, REPEAT["capture"]) * 1e3))
    captured.launcher = captured.graph.launcher().stream(captured.stream)  # the last graph's
    errors += [chain.check(), captured.check()]
    row["rel_error"] = max(errors)
    chain.destroy()
    captured.destroy()
    us = row["us"]
    us["rebind_all"] = statistics.median(every for every, _ in rounds)
    us["capture_instantiate"] = statistics.median(capture for _, capture in rounds)
    row["all_share_rounds"] = [every / capture for every, capture in rounds]
    row["all_share"] = statistics.median(row["all_share_rounds"])
    row["speedup_one"] = us["capture_instantiate"] / us["rebind_one"]
    row["speedup_all"] = 1 / row["all_share"]
    return row


def report(rows: list[dict[str, Any]]) -> None:
    header = ("graph", "launches", "nodes", "rebind one µs", "rebind all µs",
              "capture+instantiate µs", "vs one", "vs all", "rel err")  # fmt: skip
    table = [header]
    for row in rows:
        us = row["us"]
        table.append((
            row["kind"], str(row["launches"]), str(row["nodes"]), f"{us['rebind_one']:.1f}",
            f"{us['rebind_all']:.1f}", f"{us['capture_instantiate']:.1f}",
            f"{row['speedup_one']:.1f}x", f"{row['speedup_all']:.1f}x", f"{row['rel_error']:.1e}",
        ))  # fmt: skip
    print_table(table)
    hawk_one = max(r["us"]["rebind_one"] for r in rows if r["kind"] == "hawk")
    cublas = [r for r in rows if r["kind"] == "cublas" and r["launches"] == max(SIZES)]
    print(f"target: hawk-only rebind of one plane <= 10 us: {hawk_one:.1f} us")
    for r in rows:
        if r["kind"] == "hawk":
            us = r["us"]
            print(
                f"hawk, {r['launches']} launches: rebind one {us['rebind_one']:.1f} us, of which "
                f"the node update {us['node_update']:.1f} us"
            )
    for r in cublas:
        us = r["us"]
        print(
            f"target: with cuBLAS nodes at {r['launches']} launches, >= 3x faster than capture "
            f"+ instantiate: {r['speedup_one']:.1f}x (one plane), {r['speedup_all']:.1f}x (all)"
        )
        print(
            f"target: every plane of {r['launches']} routed products <= 1/3 of capture + "
            f"instantiate: {us['rebind_all']:.1f} / {us['capture_instantiate']:.1f} us, "
            f"{r['all_share']:.3f} (rounds: "
            + ", ".join(f"{share:.3f}" for share in r["all_share_rounds"])
            + f"; the first one: {us['first_rebind_all']:.1f} us)"
        )


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print(__doc__)
        return 2
    if not cuda.is_available():
        print("bench_rebind needs a CUDA device; none is usable here")
        return 1
    began = time.perf_counter()
    rng = np.random.default_rng()
    rows = [measure(kind, n, rng) for kind in ("hawk", "cublas") for n in SIZES]
    print(f"({time.perf_counter() - began:.0f} s)")
    if argv:
        write_record(argv[0], {"numpy": np.__version__, "repeat": REPEAT, "rows": rows})
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
