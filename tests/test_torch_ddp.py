"""DistributedDataParallel over eagle.torch's op with two ranks on ONE device over gloo:
the ranks' weights and gradients after a few Adam steps equal one process trained on the
mean of both ranks' losses. On CPU tensors here (the host path), on one GPU where there is
one (the routed op), and the docs' one-GPU example run as the script it is. The ranks run
from a file in a subprocess, as ``torch.multiprocessing.spawn`` pickles functions by
their module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from tests import _ddp_gloo  # noqa: E402
from tests.test_docs import examples  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="torch without gloo"
)


def _relative_error(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm())


def _run(script: Path, *args: str, cwd: Path) -> None:
    """Run ``script`` with this interpreter and the checkout importable; fail with its output."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    result = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _two_ranks_match_one_process(device: str, folder: Path) -> None:
    _run(Path(_ddp_gloo.__file__), device, str(folder), cwd=folder)
    ranks = [torch.load(folder / f"rank{rank}.pt") for rank in range(_ddp_gloo.WORLD)]
    one = _ddp_gloo.reference(device)
    for saved in ranks:
        assert _relative_error(saved["grad"], one.w.grad.cpu()) < 1e-6
        assert _relative_error(saved["w"], one.w.detach().cpu()) < 1e-6
    start = _ddp_gloo.model("cpu").w.detach()
    assert _relative_error(ranks[0]["w"], start) > 1e-4  # the steps did move the weights


def test_two_ranks_on_cpu_tensors_over_gloo_match_one_process(tmp_path):
    _two_ranks_match_one_process("cpu", tmp_path)


@pytest.mark.gpu
def test_two_ranks_on_one_gpu_over_gloo_match_one_process(tmp_path):
    _two_ranks_match_one_process("cuda", tmp_path)


@pytest.mark.gpu
def test_the_docs_one_gpu_example_runs_as_a_script(tmp_path):
    (example,) = [e for e in examples(ROOT / "docs" / "torch.md") if "mp.spawn" in e.source]
    assert example.gpu and 'if __name__ == "__main__":' in example.source
    script = tmp_path / "ddp_one_gpu.py"
    script.write_text(example.source)
    _run(script, cwd=tmp_path)
