"""DistributedDataParallel on the lazy device, next to eager DDP.

    torchrun --standalone --nproc_per_node 2 -m lazyfuse.ddp_demo

Each rank trains the same MLP with Adam twice, on its share of every batch:
once with eager DDP on the CPU, once with DDP on lazyfuse.lazy_device().
Both use the group torchrun sets up: Gloo on the CPU; NCCL when the lazy
device is backed by a GPU (LOCAL_RANK picks it). Rank 0 prints both losses
per step and the largest parameter difference at the end.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import lazyfuse

STEPS = 8
BATCH = 16


def main() -> None:
    lazy = lazyfuse.lazy_device()
    backend = "nccl" if lazyfuse.config.backing_device().type == "cuda" else "gloo"
    # Gloo serves the eager CPU model beside an NCCL-backed lazy one.
    dist.init_process_group("cpu:gloo,cuda:nccl" if backend == "nccl" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    eager_model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)
    )
    lazy_model = copy.deepcopy(eager_model).to(lazy)
    eager = DistributedDataParallel(eager_model)
    fused = DistributedDataParallel(lazy_model)
    eager_optimizer = torch.optim.Adam(eager.parameters(), lr=1e-2)
    lazy_optimizer = torch.optim.Adam(fused.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(1)
    share = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    for step in range(STEPS):
        x = torch.randn(BATCH, 32, generator=generator)[share]
        y = torch.randn(BATCH, 4, generator=generator)[share]
        losses = []
        for model, optimizer, device in (
            (eager, eager_optimizer, torch.device("cpu")),
            (fused, lazy_optimizer, lazy),
        ):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            lazyfuse.mark_step()
            losses.append(loss.item())
        if rank == 0:
            print(f"step {step}: eager DDP loss {losses[0]:.6f}, lazyfuse DDP loss {losses[1]:.6f}")
    difference = max(
        (p.detach().cpu() - q.detach()).abs().max().item()
        for p, q in zip(lazy_model.parameters(), eager_model.parameters(), strict=True)
    )
    if rank == 0:
        print(f"{world} ranks, largest parameter difference after {STEPS} steps: {difference:.2e}")
        print(f"eager fallbacks on the lazy device: {lazyfuse.metrics.fallback_counts() or 'none'}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
