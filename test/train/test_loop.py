"""Training on a tiny synthetic set: the loss goes down; checkpoints load and resume."""

from __future__ import annotations

import argparse

import torch

from compactinst_ros.model import build_model
from compactinst_ros.model.checkpoint import load_checkpoint
from compactinst_ros.train.criterion import SetCriterion
from compactinst_ros.train.dataset import collate, open_dataset
from compactinst_ros.train.loop import (
    TrainOptions,
    add_arguments,
    cpu_speed_hint,
    lr_factor,
    options_from_args,
    param_groups,
    train,
)
from compactinst_ros.train.matcher import HungarianMatcher
from compactinst_ros.train.synthetic import generate


def test_few_steps_reduce_loss(tmp_path, tiny):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    generate(tmp_path, 4, seed=0, height=96, width=128, progress=False)
    data = open_dataset(tmp_path, kind="panoptic")
    images, targets = collate([data[i] for i in range(4)])
    model = build_model("compactinst_demo", num_classes=8, **tiny).train()
    criterion = SetCriterion(8, HungarianMatcher(num_points=512), num_points=512)
    optimizer = torch.optim.AdamW(param_groups(model, 1e-3, 0.05, 1.0), lr=1e-3)
    losses = []
    for _ in range(8):
        out = model(images, targets, criterion.matcher)
        loss = criterion(out, targets)
        assert "loss_ce_guided0" not in loss and "loss_proposal" in loss
        optimizer.zero_grad()
        loss["loss"].backward()
        optimizer.step()
        losses.append(float(loss["loss"].detach()))
    assert sum(losses[-3:]) / 3 < 0.7 * losses[0], losses


def test_train_checkpoint_and_resume(tmp_path, tiny):
    generate(tmp_path / "data", 4, seed=1, height=96, width=128, progress=False)
    opts = TrainOptions(
        config="compactinst_demo",
        data=str(tmp_path / "data"),
        out=str(tmp_path / "run"),
        steps=2,
        batch_size=2,
        crop=(96, 128),
        scale=(0.9, 1.1),
        num_points=256,
        threads=1,
        checkpoint_every=1,
        log_every=1,
        model_overrides=tiny,
    )
    final = train(opts)
    record = load_checkpoint(final)
    assert record.step == 2 and record.config == "compactinst_demo"
    assert record.num_classes == 8 and record.labels.num_classes == 8
    assert record.optimizer is None
    last = load_checkpoint(tmp_path / "run" / "last.pt")
    assert last.optimizer is not None and last.step == 2
    opts.steps, opts.resume = 3, True
    train(opts)
    resumed = load_checkpoint(tmp_path / "run" / "last.pt")
    assert resumed.step == 3
    changed = [k for k in record.model if not torch.equal(record.model[k], resumed.model[k])]
    assert changed


def test_bad_crop_and_scale_name_the_form(tmp_path, capsys):
    from compactinst_ros.cli import main

    base = ["train", "compactinst_demo", "--data", str(tmp_path), "--out", str(tmp_path / "o")]
    assert main([*base, "--crop", "256"]) == 2  # usage
    assert "HxW" in capsys.readouterr().err
    assert main([*base, "--scale", "0.75x1.25"]) == 2
    assert "LOW,HIGH" in capsys.readouterr().err


def _options(tmp_path, *flags: str) -> TrainOptions:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["compactinst_demo", "--data", str(tmp_path), "--out", str(tmp_path / "o")]
    return options_from_args(parser.parse_args([*base, *flags]))


def test_a_short_run_leaves_its_warm_up(tmp_path, capsys):
    opts = _options(tmp_path, "--steps", "20")  # the default --warmup 100
    assert opts.warmup == 2
    assert "--warmup 100 would last past a tenth of --steps 20" in capsys.readouterr().err
    lrs = [lr_factor(step, opts.steps, opts.warmup) for step in range(opts.steps)]
    assert lrs[1] == 1.0 and lrs[-1] == 0.01  # full rate after the warm-up, then the decays
    assert _options(tmp_path, "--steps", "5000", "--warmup", "100").warmup == 100
    assert capsys.readouterr().err == ""
    assert _options(tmp_path, "--steps", "5").warmup == 0


def test_a_cpu_run_is_told_the_fast_flags(tmp_path):
    hint = cpu_speed_hint(_options(tmp_path))
    assert hint is not None
    for flag in ("--batch-size 4", "--num-points 1024", "--no-guided", "--bf16"):
        assert flag in hint
    fast = ["--batch-size", "4", "--num-points", "1024", "--no-guided", "--bf16"]
    assert cpu_speed_hint(_options(tmp_path, *fast)) is None


def test_a_new_run_does_not_overwrite_an_earlier_one(tmp_path, capsys):
    from compactinst_ros.cli import main

    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "last.pt").write_bytes(b"an earlier run")
    base = ["train", "compactinst_demo", "--data", str(tmp_path), "--out", str(tmp_path / "o")]
    assert main(base) == 2  # usage: --resume or another --out
    assert "last.pt exists: pass --resume" in capsys.readouterr().err
    assert (tmp_path / "o" / "last.pt").read_bytes() == b"an earlier run"
