"""Reproduce the embedded default model (``models/default``) with one command.

``python -m compactinst_ros.train.make_default`` (or ``make default-model``):

1. synthetic scenes: 2000 training images (seed 0) and 200 held-out images (seed 1), 256x384;
2. trains ``compactinst_demo`` on CPU in learning-rate cycles at input 128x192 (warm restarts at
   the ends in ``CYCLES``), then fine-tunes it at 256x384 (``FINETUNE``: a 32x48 mask grid
   instead of 16x24); resumable: rerun the command to continue;
3. exports the bundle at 256x384 (the camera resolution: no letterboxing) into models/default
   and adds its FP16/INT8 variants and golden cases (``compactinst quantize``, calibrated on 32
   scenes of seed 2);
4. evaluates it through the runtime Pipeline (ONNX Runtime) on the held-out images and writes
   the numbers to ``WORK/metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from ..bundle import INTENDED_USE
from ..eval.evaluate import evaluate_bundle
from ..labels import SYNTHETIC_LABELS
from .loop import TrainOptions, train
from .synthetic import generate

BUNDLE_SIZE = (256, 384)
#: what the default model is for, recorded in its bundle.json and shown wherever it is used
DEMO_INTENDED_USE = (
    "demo model, trained on synthetic field/road scenes only; not a detector for real images "
    "(models/README.md)"
)
#: the FP16/INT8 variants: calibrated on 32 scenes of seed 2 (neither training nor held out)
CALIBRATION = ("data_calib", 2, 32)
QUANTIZE_FLAGS = ["--frames", "32", "--fp16-frames", "16", "--budget", "0.012",
                  "--max-fp32-layers", "8"]  # fmt: skip
#: stage 1 at 128x192: each cycle lr 2e-4, then x0.1 at 89 % and x0.01 at 96 % of its end step
CYCLES = (4000, 7000, 9500, 12000)
RECIPE = {
    "batch_size": 4,
    "crop": (128, 192),
    "scale": (0.4, 0.6),
    "lr": 2e-4,
    "warmup": 50,
    "backbone_lr_mult": 1.0,
    "num_points": 1024,
    "guided": False,
    "threads": 2,
    "checkpoint_every": 50,
    "cpu_bf16": True,
}
#: stage 2: fine-tune the stage-1 weights at the bundle size (same milestones, one cycle)
FINETUNE = {**RECIPE, "crop": BUNDLE_SIZE, "scale": (0.8, 1.2), "lr": 1e-4, "steps": 4400}


def main(argv: list[str] | None = None) -> int:
    """Data, training, export and evaluation of the default model."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="out/default_train", help="data and checkpoints")
    parser.add_argument("--out", default="models/default", help="bundle folder")
    parser.add_argument(
        "--steps", type=int, default=CYCLES[-1], help="end of the last 128x192 cycle"
    )
    parser.add_argument(
        "--finetune-steps",
        type=int,
        default=FINETUNE["steps"],
        help="steps at 256x384 (0: export the 128x192 stage at 128x192)",
    )
    parser.add_argument("--max-minutes", type=float, help="stop training early (resumable)")
    parser.add_argument("--eval-images", type=int, default=200)
    args = parser.parse_args(argv)

    import torch

    from ..export.onnx_export import build_for_export, export_bundle
    from ..model.checkpoint import load_checkpoint

    work = Path(args.work)
    start = time.perf_counter()
    for name, seed, num in (("data_train", 0, 2000), ("data_val", 1, 200)):
        if not (work / name / "panoptic.json").is_file():
            generate(work / name, num, seed, 256, 384)
    for end in [c for c in CYCLES if c < args.steps] + [args.steps]:
        opts = TrainOptions(
            config="compactinst_demo",
            data=str(work / "data_train"),
            out=str(work / "ckpt"),
            resume=True,
            max_minutes=args.max_minutes,
            steps=end,
            **RECIPE,
        )
        checkpoint = train(opts)
        if checkpoint.name != "model_final.pt":
            print(f"stopped before step {end}; rerun the same command to resume", file=sys.stderr)
            return 1
    size = RECIPE["crop"]
    if args.finetune_steps > 0:
        size = BUNDLE_SIZE
        opts = TrainOptions(
            config="compactinst_demo",
            data=str(work / "data_train"),
            out=str(work / "ckpt_ft"),
            resume=True,
            init=str(checkpoint),
            max_minutes=args.max_minutes,
            **{**FINETUNE, "steps": args.finetune_steps},
        )
        checkpoint = train(opts)
        if checkpoint.name != "model_final.pt":
            print(
                "stopped during the 256x384 fine-tune; rerun the same command to resume",
                file=sys.stderr,
            )
            return 1
    train_s = time.perf_counter() - start
    model, labels, source = build_for_export("compactinst_demo", SYNTHETIC_LABELS, checkpoint, 0)
    torch.set_num_threads(2)
    source[INTENDED_USE] = DEMO_INTENDED_USE
    export_bundle(model, "compactinst_demo", size, labels, args.out, source)
    calib, seed, num = CALIBRATION
    if not (work / calib / "panoptic.json").is_file():
        generate(work / calib, num, seed, *size)
    from ..cli import main as cli_main

    quantize = ["quantize", str(args.out), "--data", str(work / calib), *QUANTIZE_FLAGS]
    if cli_main([*quantize, "--out", str(work / "int8_layers.json")]) != 0:
        print("the INT8 graph is over its error budget (see above)", file=sys.stderr)
    metrics = evaluate_bundle(args.out, work / "data_val", limit=args.eval_images)
    size_mb = sum(f.stat().st_size for f in Path(args.out).iterdir()) / 1e6
    record = {
        "checkpoint": str(checkpoint),
        "step": load_checkpoint(checkpoint).step,
        "bundle_mb": round(size_mb, 2),
        "wall_minutes_this_run": round(train_s / 60, 1),
        "machine": f"{platform.machine()} {platform.processor() or ''} "
        f"{torch.get_num_threads()} threads",
        **metrics,
    }
    (work / "metrics.json").write_text(json.dumps(record, indent=2) + "\n")
    ap = metrics["mask_ap"] or {}
    pq = (metrics["panoptic"] or {}).get("all", {})
    print(
        f"default model: step {record['step']}, {size_mb:.1f} MB, mask AP {ap.get('AP')}, "
        f"PQ {pq.get('PQ')} on {metrics['images']} held-out images (seed 1)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
