"""Resume really resumes: N steps, a stop, --resume and M more steps equal N + M steps at once."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch

from compactinst_ros.model.checkpoint import (
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from compactinst_ros.train.loop import TrainOptions, train
from compactinst_ros.train.synthetic import generate

#: 5 images in batches of 2: 2 steps per epoch (one image left over), so the stop at step 3
#: falls mid-epoch and the run crosses two epoch boundaries.
STEPS, STOP_AT = 5, 3


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("resume_data")
    generate(root, 5, seed=2, height=96, width=128, progress=False)
    return root


def _options(data, out, tiny: dict, **changes) -> TrainOptions:
    opts = TrainOptions(
        config="compactinst_demo",
        data=str(data),
        out=str(out),
        steps=STEPS,
        batch_size=2,
        crop=(96, 128),
        scale=(0.8, 1.2),
        num_points=256,
        guided=True,
        warmup=2,
        lr=1e-3,
        backbone_lr_mult=1.0,
        threads=1,
        checkpoint_every=100,
        log_every=100,
        model_overrides=tiny,
    )
    return dataclasses.replace(opts, **changes)


def _weights(path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path).model


def _differing(a: dict, b: dict) -> list[str]:
    return [k for k in a if not torch.equal(a[k], b[k])]


def test_stop_resume_equals_uninterrupted_bit_for_bit(data, tmp_path, tiny) -> None:
    straight = _weights(train(_options(data, tmp_path / "straight", tiny)))

    interrupted = _options(data, tmp_path / "resumed", tiny, stop_at=STOP_AT)
    assert train(interrupted).name == "last.pt"
    last = load_checkpoint(tmp_path / "resumed" / "last.pt")
    assert last.step == STOP_AT and last.resume["epoch"] == 1
    assert last.resume["samples_seen"] == 2
    resumed = _weights(train(dataclasses.replace(interrupted, resume=True, stop_at=None)))

    assert not _differing(straight, resumed)


def test_reseeding_instead_of_restoring_changes_the_weights(data, tmp_path, tiny) -> None:
    """The control: the same resume without the saved generator states does not match."""
    straight = _weights(train(_options(data, tmp_path / "straight", tiny)))
    interrupted = _options(data, tmp_path / "reseeded", tiny, stop_at=STOP_AT)
    train(interrupted)
    path = tmp_path / "reseeded" / "last.pt"
    record = torch.load(path, weights_only=True)
    del record["resume"]
    save_checkpoint(path, record)
    reseeded = _weights(train(dataclasses.replace(interrupted, resume=True, stop_at=None)))
    assert _differing(straight, reseeded)


def test_rng_state_round_trips_through_a_checkpoint(tmp_path) -> None:
    torch.manual_seed(5)
    np.random.seed(5)
    random.seed(5)
    state = capture_rng_state()
    expected = (torch.rand(3), np.random.rand(3), random.random())
    path = tmp_path / "rng.pt"
    torch.save(state, path)
    restore_rng_state(torch.load(path, weights_only=True))
    assert torch.equal(torch.rand(3), expected[0])
    assert np.array_equal(np.random.rand(3), expected[1])
    assert random.random() == expected[2]
