"""Checkpoints: one on-disk format for training, resume, FastInst import and export.

A checkpoint is a dict of tensors and primitives only, so ``torch.load(weights_only=True)`` reads
it: ``config``, ``num_classes``, ``model`` (state_dict), ``labels`` (LabelSet JSON or None),
``step``, and while training also ``optimizer`` and ``resume`` (random-number generator states
and the data loader's position, see :func:`capture_rng_state`), which make a resumed run take
the same steps as an uninterrupted one.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError
from ..labels import LabelSet


@dataclass
class Checkpoint:
    """A checkpoint read back by :func:`load_checkpoint`."""

    path: Path
    config: str
    num_classes: int
    model: dict[str, torch.Tensor]
    labels: LabelSet | None
    step: int
    optimizer: dict | None
    resume: dict | None

    @property
    def sha256(self) -> str:
        """Hash of the file (recorded in exported bundles as their source)."""
        from ..bundle import sha256_file

        return sha256_file(self.path)


def checkpoint_record(
    model: nn.Module,
    config: str,
    labels: LabelSet | None,
    step: int,
    optimizer: torch.optim.Optimizer | None = None,
    resume: dict | None = None,
    **extra: object,
) -> dict:
    """The dict :func:`save_checkpoint` writes (weights on the CPU; ``extra`` primitives kept)."""
    record = {
        "config": config,
        "num_classes": int(model.cfg.num_classes),
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "labels": labels.to_json() if labels is not None else None,
        "step": int(step),
        **extra,
    }
    if optimizer is not None:
        record["optimizer"] = optimizer.state_dict()
    if resume is not None:
        record["resume"] = resume
    return record


def save_checkpoint(path: str | Path, record: dict) -> None:
    """Write a :func:`checkpoint_record` atomically (temp file + rename)."""
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    torch.save(record, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str | Path) -> Checkpoint:
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
    labels = record.get("labels")
    return Checkpoint(
        path=path,
        config=str(record["config"]),
        num_classes=int(record.get("num_classes", 0)),
        model=record["model"],
        labels=LabelSet.from_json(labels) if labels else None,
        step=int(record.get("step", 0)),
        optimizer=record.get("optimizer"),
        resume=record.get("resume"),
    )


def capture_rng_state() -> dict:
    """This process's generator states (torch CPU and CUDA, numpy, python) as tensors/primitives.

    Training draws random points from the global torch generator every step, so a resume that
    reseeded instead of restoring would sample different points than the uninterrupted run.
    """
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    py_version, py_internal, py_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": list(torch.cuda.get_rng_state_all()) if torch.cuda.is_available() else [],
        "numpy": {
            "kind": np_kind,
            "keys": torch.from_numpy(np_keys.astype(np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "python": {
            "version": py_version,
            "internal": torch.tensor(py_internal),
            "gauss_next": py_gauss,
        },
    }


def restore_rng_state(state: dict) -> None:
    """Put back what :func:`capture_rng_state` returned (CUDA only where the device count fits)."""
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all(cuda)
    npy = state["numpy"]
    np.random.set_state(
        (
            npy["kind"],
            npy["keys"].numpy().astype(np.uint32),
            npy["pos"],
            npy["has_gauss"],
            npy["cached_gaussian"],
        )
    )
    py = state["python"]
    random.setstate((py["version"], tuple(py["internal"].tolist()), py["gauss_next"]))
