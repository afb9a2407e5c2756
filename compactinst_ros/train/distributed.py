"""torchrun integration: process group set-up from the environment, rank/world, barrier.

``torchrun --nproc-per-node N -m compactinst_ros.train.loop CONFIG ...`` sets RANK, WORLD_SIZE,
LOCAL_RANK and MASTER_ADDR/PORT; with WORLD_SIZE > 1 we join a process group (NCCL on CUDA,
gloo on CPU). A single process needs none of it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    """Rank, world size and the device this process trains on."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    def barrier(self) -> None:
        """Wait for every process (no-op when alone)."""
        if self.world_size > 1 and dist.is_initialized():
            dist.barrier()


def init_distributed(device: str = "auto") -> DistContext:
    """Join the torchrun process group when WORLD_SIZE > 1; otherwise a rank-0 context."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and device != "cpu"
    dev = torch.device(f"cuda:{local}") if use_cuda else torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        if use_cuda:
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return DistContext(rank, world, local, dev)


def cleanup() -> None:
    """Leave the process group (call once at the end of a distributed run)."""
    if dist.is_initialized():
        dist.destroy_process_group()
