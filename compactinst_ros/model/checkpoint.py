"""Training checkpoints: one on-disk format for training, resume, import and export.

A checkpoint is a dict of tensors and primitives only (``config``, ``num_classes``, ``model``
state_dict, ``labels`` as LabelSet JSON, ``step``, optionally ``optimizer``), so it loads with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from ..errors import ConfigError
from ..labels import LabelSet


def save_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None,
                    config: str, labels: LabelSet, step: int, extra: dict | None = None) -> None:
    """Write a weights_only-loadable checkpoint atomically (temp file + rename)."""
    record = {
        "config": config,
        "num_classes": labels.num_classes,
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "labels": labels.to_json(),
        "step": int(step),
        **(extra or {}),
    }
    if optimizer is not None:
        record["optimizer"] = optimizer.state_dict()
    tmp = path.with_suffix(".tmp")
    torch.save(record, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str | Path) -> dict:
    """Read a checkpoint with ``weights_only=True``; ConfigError naming the file otherwise."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"checkpoint {path} does not exist")
    try:
        record = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for corrupt or unsafe pickles
        raise ConfigError(f"checkpoint {path} cannot be read (weights_only=True): {exc}") from None
    if not isinstance(record, dict) or "model" not in record or "config" not in record:
        raise ConfigError(
            f"checkpoint {path} must be a dict with 'config', 'model' (state_dict) and 'labels'; "
            "save it with 'compactinst train' or 'compactinst import-fastinst'"
        )
    return record
