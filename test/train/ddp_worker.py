"""Run by test_ddp.py under torchrun: one DDP training step per rank, then save the weights."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tiny_model import TINY
from torch import nn

from compactinst_ros.model import build_model
from compactinst_ros.train.criterion import SetCriterion
from compactinst_ros.train.dataset import collate, open_dataset
from compactinst_ros.train.distributed import cleanup, init_distributed
from compactinst_ros.train.loop import TrainOptions, param_groups, train_step
from compactinst_ros.train.matcher import HungarianMatcher


def main(data: str, out: str) -> None:
    """One step on this rank's own image; weights go to OUT/rank{r}.pt."""
    torch.set_num_threads(1)
    ctx = init_distributed("cpu")
    torch.manual_seed(0)  # identical init on every rank (DDP also broadcasts rank 0's)
    model = build_model("compactinst_demo", num_classes=8, **TINY)
    if ctx.rank == 1:  # prove the broadcast: rank 1 starts from different weights
        for p in model.parameters():
            p.data.add_(1.0)
    net = nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    criterion = SetCriterion(8, HungarianMatcher(num_points=256), num_points=256)
    optimizer = torch.optim.AdamW(param_groups(model, 1e-3, 0.05, 1.0), lr=1e-3, fused=True)
    dataset = open_dataset(data, kind="panoptic")
    images, targets = collate([dataset[ctx.rank]])
    opts = TrainOptions(
        config="compactinst_demo", data=data, out=out, steps=1, warmup=0, lr=1e-3, guided=True
    )
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    losses = train_step(
        net,
        model,
        criterion,
        optimizer,
        scaler,
        images,
        targets,
        torch.device("cpu"),
        opts,
        0,
        False,
    )
    torch.save(
        {"model": model.state_dict(), "loss": losses["loss"]}, Path(out) / f"rank{ctx.rank}.pt"
    )
    cleanup()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
