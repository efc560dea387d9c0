"""Host costs of this tree against another checkout of eagle, in alternating processes.

Usage: python benchmarks/compare_trees.py OTHER_TREE results.json [rounds]

Issue #24 asks that the redesign keep ``bench_launch``, ``bench_torch`` and the
``plan.run`` / ``handle.sgemm`` host costs within 5% of the commit before it. A host's
speed drifts between processes by more than 5%, so two trees are compared here in turns:
each round starts one process per tree (this tree first on even rounds, the other first on
odd ones), and each process times, on the same shapes, in one loop of turns:

* ``torch eager``: ``0.5 * x + z`` on 1,000 float32 CUDA lanes (the yardstick);
* ``eagle.torch forward``: the same kernel as ``eagle.torch.function``;
* ``eagle.torch fwd+bwd`` and ``torch fwd+bwd``: ``f(...).sum().backward()``;
* ``plan.run torch``, ``plan.run Arrays``: a reused plan of ``y = a * x + y`` over torch
  tensors and over eagle Arrays, ``a`` a number;
* ``BoundPlan.launch``: that binding's launch alone;
* ``handle.sgemm``: a 64^3 float32 product with its params made once;
* in this tree only, ``plan.run torch`` again with the version bump of the written tensor
  taken out (a cost later issues asked for: autograd must see eagle's writes).

Each figure is a median of host microseconds per call (the calls only enqueue; the device
drains between batches). A tree's figure is the median over rounds of its ratio to the
same process's torch eager figure, so the drift between processes cancels; the table gives
both trees' ratios and this tree's over the other's (at most 1.05 is the target).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

#: the timing run in each process, against whichever eagle PYTHONPATH names
PROBE = r"""
import json, statistics, time
import numpy as np
import torch
import eagle.plan, eagle.torch, hawk
from eagle import arrays, cuda
from eagle.gemm import CublasCaptureHandle, sgemm_params_for_arrays

@hawk.kernel
def scale_add(x: hawk.Scalar, z: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = 0.5 * x + z

@hawk.kernel
def axpy(a: hawk.Param, x: hawk.Scalar, y: hawk.Mutable[hawk.Scalar]):
    y = a * x + y

def median_us(fn, repeat=2000):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6

n = 1000
x = torch.randn(n, device="cuda")
z = torch.randn(n, device="cuda")
xg = x.clone().requires_grad_(True)
f = eagle.torch.function(scale_add)
def eagle_fb():
    f(x=xg, z=z).sum().backward()
def torch_fb():
    (0.5 * xg + z).sum().backward()
plan = eagle.plan.auto(axpy)
ty = torch.randn(n, device="cuda")
ax = arrays.asarray(np.random.rand(n).astype(np.float32), device="cuda:0")
ay = arrays.asarray(np.random.rand(n).astype(np.float32), device="cuda:0")
bound = plan.bind(a=0.5, x=ax, y=ay)
rng = np.random.default_rng(0)
operands = {k: arrays.asarray(rng.random(s).astype(np.float32), device="cuda:0")
            for k, s in (("a", (64, 64)), ("b", (64, 64)), ("out", (64, 64)))}
stream = cuda.Stream(non_blocking=True)
handle = CublasCaptureHandle(stream.ptr())
params = sgemm_params_for_arrays(operands["a"], operands["b"], operands["out"])
handle.warm(params, operands)
sides = {
    "torch eager": lambda: 0.5 * x + z,
    "eagle.torch forward": lambda: f(x=x, z=z),
    "torch fwd+bwd": torch_fb,
    "eagle.torch fwd+bwd": eagle_fb,
    "plan.run torch": lambda: plan.run(a=0.5, x=x, y=ty),
    "plan.run Arrays": lambda: plan.run(a=0.5, x=ax, y=ay),
    "BoundPlan.launch": bound.launch,
    "handle.sgemm": lambda: handle.sgemm(params, operands),
}
figures = {name: [] for name in sides}
for _ in range(3):
    for name, fn in sides.items():
        figures[name].append(median_us(fn, 500 if "bwd" in name else 2000))
        stream.synchronize()
handle.destroy()
result = {name: statistics.median(v) for name, v in figures.items()}
try:  # this tree only: the same run with the version bump of written tensors taken out
    from eagle.plan._planes import ForeignPlanes
except ImportError:
    pass
else:
    ForeignPlanes.bump = lambda self, planes: None
    result["plan.run torch, no bump"] = statistics.median(
        median_us(lambda: plan.run(a=0.5, x=x, y=ty)) for _ in range(3)
    )
print(json.dumps(result))
"""


def _run(tree: Path, probe: Path) -> dict[str, float]:
    paths = [str(tree), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, str(probe)], env=env, cwd=tree, capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"the probe failed in {tree}:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    other = Path(argv[1]).resolve()
    rounds = int(argv[3]) if len(argv) > 3 else 5
    trees = {"this": HERE, "other": other}
    runs: dict[str, list[dict[str, float]]] = {"this": [], "other": []}
    with tempfile.TemporaryDirectory() as folder:
        probe = Path(folder) / "host_probe.py"  # hawk reads kernel sources from a file
        probe.write_text(PROBE)
        for turn in range(rounds):
            order = ("this", "other") if turn % 2 == 0 else ("other", "this")
            for which in order:
                runs[which].append(_run(trees[which], probe))
    names = [name for name in runs["this"][0] if name in runs["other"][0]]
    table = {}
    print(f"host µs per call, {rounds} alternating rounds (this: {HERE}, other: {other})")
    print(f"{'side':<22}{'this µs':>10}{'other µs':>10}{'this/eager':>12}"
          f"{'other/eager':>13}{'this/other':>12}")  # fmt: skip
    for name in names:
        row = {}
        for which in trees:
            values = [run[name] for run in runs[which]]
            ratios = [run[name] / run["torch eager"] for run in runs[which]]
            row[which] = {"us": statistics.median(values), "to_eager": statistics.median(ratios)}
        row["this_over_other"] = row["this"]["to_eager"] / row["other"]["to_eager"]
        table[name] = row
        print(f"{name:<22}{row['this']['us']:>10.1f}{row['other']['us']:>10.1f}"
              f"{row['this']['to_eager']:>12.3f}{row['other']['to_eager']:>13.3f}"
              f"{row['this_over_other']:>12.3f}")  # fmt: skip
    if "plan.run torch, no bump" in runs["this"][0]:
        ratios = [run["plan.run torch, no bump"] / run["torch eager"] for run in runs["this"]]
        bare = statistics.median(ratios) / table["plan.run torch"]["other"]["to_eager"]
        table["plan.run torch, no bump"] = {"this_over_other": bare}
        print(f"plan.run torch without the version bump (this tree only): {bare:.3f} of other")
    with open(argv[2], "w") as out:
        json.dump({"rounds": rounds, "table": table, "runs": runs}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
