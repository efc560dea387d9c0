"""Two ranks of ``DistributedDataParallel`` over eagle.torch's contraction, on ONE device.

Run as a script, never imported for that: ``python tests/_ddp_gloo.py cpu|cuda FOLDER``
(with the repository root on ``PYTHONPATH``). ``torch.multiprocessing.spawn`` starts two
processes, which meet over the ``gloo`` backend (one GPU can host both ranks, which NCCL
refuses) through a file store in ``FOLDER``. Each rank trains its copy of
:func:`model` for :data:`STEPS` Adam steps on its own :func:`batch` and saves its
weights and last gradients to ``FOLDER/rank<r>.pt``. The functions live in this file,
not in a test or a docs page, because spawn pickles them by the module they are in.

:func:`reference` is the same training in one process, whose loss is the mean of both
ranks' losses: DDP averages the ranks' gradients, so the two must agree.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import eagle.torch
from tests import _torch_kernels as k

STEPS = 3
WORLD = 2
LR = 0.01


class Layer(torch.nn.Module):
    """``tanh(contract(w, features))`` squared and averaged: the routed op on a device."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(7)
        self.w = torch.nn.Parameter(torch.randn(k.R, k.U, generator=generator))
        self.layer = eagle.torch.function(k.contract, contraction="gemm")

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.layer(w=self.w, f=features)).square().mean()


def model(device: str) -> Layer:
    return Layer().to(device)


def batch(rank: int, device: str) -> torch.Tensor:
    """Rank ``rank``'s features, the same in every process."""
    generator = torch.Generator().manual_seed(100 + rank)
    return torch.randn(k.R, k.B, generator=generator).to(device)


def reference(device: str) -> Layer:
    """One process trained on the mean of both ranks' losses."""
    net = model(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=LR)
    batches = [batch(rank, device) for rank in range(WORLD)]
    for _ in range(STEPS):
        optimizer.zero_grad()
        (sum(net(features) for features in batches) / WORLD).backward()
        optimizer.step()
    return net


def _worker(rank: int, device: str, folder: str) -> None:
    store = Path(folder) / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        if device == "cuda":
            torch.cuda.set_device(0)  # both ranks on the one GPU
        net = model(device)
        ids = [0] if device == "cuda" else None
        parallel = torch.nn.parallel.DistributedDataParallel(net, device_ids=ids)
        optimizer = torch.optim.Adam(parallel.parameters(), lr=LR)
        features = batch(rank, device)
        for _ in range(STEPS):
            optimizer.zero_grad()
            parallel(features).backward()  # DDP averages the gradients over the ranks
            optimizer.step()
        assert net.w.grad is not None
        saved = {"w": net.w.detach().cpu(), "grad": net.w.grad.cpu()}
        torch.save(saved, Path(folder) / f"rank{rank}.pt")
        dist.barrier()  # neither rank tears gloo down while the other still talks to it
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    device, folder = sys.argv[1:]
    mp.spawn(_worker, args=(device, folder), nprocs=WORLD, join=True)
