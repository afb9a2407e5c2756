"""``compactinst train``: AdamW training on COCO-format data; CPU or CUDA, one or N processes.

Recipe (architecture.md 8.1, scaled to the step budget): AdamW lr 1e-4, weight decay 0.05
(0 for norm layers and embeddings), backbone lr x0.1, step decay x0.1 at 89 % and 96 % of the
steps, a short linear warm-up, AMP on CUDA. Checkpoints are plain dicts of tensors and
primitives (``torch.load(weights_only=True)`` reads them); ``--resume`` continues from
``OUT/last.pt``. Under ``torchrun`` each process trains on its share of the data with
DistributedDataParallel (gloo on CPU, NCCL on CUDA).
"""

from __future__ import annotations

import argparse
import itertools
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from ..cli import warn
from ..errors import ConfigError, InterruptedJobError
from ..labels import SYNTHETIC_LABELS, LabelSet
from ..model.checkpoint import (
    capture_rng_state,
    checkpoint_record,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from ..sizes import parse_size
from .criterion import SetCriterion
from .dataset import collate, open_dataset
from .distributed import DistContext, init_distributed
from .matcher import HungarianMatcher
from .transforms import train_transforms

NORM_TYPES = (nn.GroupNorm, nn.LayerNorm, nn.BatchNorm2d, nn.SyncBatchNorm, nn.Embedding)


@dataclass
class TrainOptions:
    """Everything one training run needs; the CLI fills it from arguments."""

    config: str
    data: str
    out: str
    steps: int = 10000
    batch_size: int = 8
    lr: float = 1e-4
    weight_decay: float = 0.05
    backbone_lr_mult: float = 0.1
    warmup: int = 100
    crop: tuple[int, int] = (256, 384)
    scale: tuple[float, float] = (0.75, 1.25)
    num_points: int = 12544
    guided: bool = True
    workers: int = 0
    threads: int = 2
    device: str = "auto"
    amp: bool = True
    cpu_bf16: bool = False  # bfloat16 autocast on CPU (about 1.5x faster where AVX512-BF16 exists)
    clip: float = 0.0
    seed: int = 42
    checkpoint_every: int = 500
    log_every: int = 10
    resume: bool = False
    init: str | None = None
    max_minutes: float | None = None
    stop_at: int | None = None  # stop with a checkpoint after this step (same schedule on resume)
    kind: str = "auto"
    labels: str = "synthetic"
    model_overrides: dict | None = None  # ModelConfig fields (tests use tiny models)


def param_groups(model: nn.Module, lr: float, weight_decay: float, backbone_mult: float) -> list:
    """AdamW groups: backbone lr x ``backbone_mult``; no decay on norm layers and embeddings."""
    groups: dict[tuple[bool, bool], list] = {}
    seen: set[int] = set()
    for mod_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            full = f"{mod_name}.{name}" if mod_name else name
            is_backbone = full.startswith("backbone.")
            no_decay = isinstance(module, NORM_TYPES)
            groups.setdefault((is_backbone, no_decay), []).append(param)
    return [
        {
            "params": params,
            "lr": lr * (backbone_mult if bb else 1.0),
            "weight_decay": 0.0 if nd else weight_decay,
            "lr_scale": backbone_mult if bb else 1.0,
        }
        for (bb, nd), params in sorted(groups.items())
    ]


def lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warm-up, then x0.1 at 89 % and x0.01 at 96 % of ``total`` (FastInst's milestones)."""
    warm = min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
    decay = 1.0
    if step >= int(0.889 * total):
        decay = 0.1
    if step >= int(0.963 * total):
        decay = 0.01
    return warm * decay


def capped_warmup(steps: int, warmup: int) -> int:
    """The warm-up a run of ``steps`` gets: at most a tenth of it, so a short run leaves it."""
    return max(0, min(warmup, steps // 10))


#: the CPU recipe of models/README.md: 0.48 -> 5.9 it/s for compactinst_demo on 2 cores
CPU_RECIPE = {"batch_size": 4, "num_points": 1024, "guided": False}


def cpu_speed_hint(opts: TrainOptions) -> str | None:
    """The flags that would make a CPU run of ``opts`` about 12x faster; None where it uses them."""
    flags = []
    if opts.batch_size > CPU_RECIPE["batch_size"]:
        flags.append(f"--batch-size {CPU_RECIPE['batch_size']}")
    if opts.num_points > CPU_RECIPE["num_points"]:
        flags.append(f"--num-points {CPU_RECIPE['num_points']}")
    if opts.guided:
        flags.append("--no-guided")
    if not opts.cpu_bf16:
        flags.append("--bf16 (CPUs with AVX512-BF16)")
    if not flags:
        return None
    return (
        f"training on the CPU: {' '.join(flags)} run about 12x faster (0.48 -> 5.9 it/s for "
        "compactinst_demo on 2 idle AVX512-BF16 cores, models/README.md's recipe; the rate "
        "follows the machine's load, docs/training.md)"
    )


def resolve_labels(spec: str, dataset_labels: LabelSet | None = None) -> LabelSet:
    """``synthetic``, ``data`` (the data set's categories) or a bundle-style labels JSON file."""
    if spec == "synthetic":
        return SYNTHETIC_LABELS
    if spec == "data":
        if dataset_labels is None:
            raise ConfigError("--labels data needs a data set with categories")
        return dataset_labels
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"--labels {spec}: use synthetic, data or a labels JSON file")
    import json

    return LabelSet.from_json(json.loads(path.read_text()))


def _format_eta(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else f"{seconds // 60}m{seconds % 60:02d}s"
    )


class Progress:
    """One status line per ``every`` steps: loss terms, it/s, ETA (rank 0 only)."""

    def __init__(self, total: int, start_step: int, every: int, enabled: bool) -> None:
        self.total, self.every, self.enabled = total, every, enabled
        self.start_time, self.start_step = time.perf_counter(), start_step
        self.sums: dict[str, float] = {}
        self.count = 0

    def update(self, step: int, losses: dict[str, float], lr: float) -> None:
        """Accumulate ``losses``; print the running means every ``every`` steps."""
        for k, v in losses.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        self.count += 1
        done = step + 1
        if not self.enabled or (done % self.every and done != self.total):
            return
        rate = (done - self.start_step) / max(time.perf_counter() - self.start_time, 1e-9)
        mean = {k: v / self.count for k, v in self.sums.items()}
        parts = " ".join(
            f"{k[5:]}={v:.3f}"
            for k, v in mean.items()
            if k.startswith("loss_") and "_" not in k[5:]
        )
        print(
            f"step {done}/{self.total}  loss {mean['loss']:.3f} ({parts})  lr {lr:.2e}  "
            f"{rate:.2f} it/s  ETA {_format_eta((self.total - done) / max(rate, 1e-9))}",
            file=sys.stderr,
            flush=True,
        )
        self.sums, self.count = {}, 0


def _device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {spec}: CUDA is not available here; use --device cpu")
    return torch.device(spec)


def train(opts: TrainOptions) -> Path:
    """Run (or resume) training; returns the path of the final checkpoint."""
    from ..model import build_model

    ctx: DistContext = init_distributed(opts.device)
    device = ctx.device if ctx.world_size > 1 else _device(opts.device)
    if device.type == "cpu":
        torch.set_num_threads(max(1, opts.threads))
    torch.manual_seed(opts.seed)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)

    transforms = train_transforms(opts.crop, opts.scale)
    dataset = open_dataset(opts.data, None, transforms, kind=opts.kind, seed=opts.seed)
    labels = resolve_labels(opts.labels, dataset.labels)
    dataset.labels = labels
    dataset.index_of = {label_id: k for k, label_id in enumerate(labels.ids)}

    overrides = dict(opts.model_overrides or {})
    model = build_model(opts.config, num_classes=labels.num_classes, **overrides).to(device)
    start_step = 0
    last = out / "last.pt"
    record = None
    if opts.resume and last.is_file():
        record = load_checkpoint(last)
        model.load_state_dict(record.model)
        start_step = record.step
    elif opts.init:
        init = load_checkpoint(opts.init)
        ours = model.state_dict()
        # Class heads differ when the label set does: keep them new (e.g. COCO -> your classes).
        fitting = {
            k: v
            for k, v in init.model.items()
            if k in ours and tuple(v.shape) == tuple(ours[k].shape)
        }
        missing, _ = model.load_state_dict(fitting, strict=False)
        if ctx.rank == 0:
            print(
                f"init from {opts.init}: {len(fitting)} tensors loaded, {len(missing)} new "
                f"(e.g. {missing[:3]}), {len(init.model) - len(fitting)} unused",
                file=sys.stderr,
            )
    criterion = SetCriterion(
        labels.num_classes,
        HungarianMatcher(num_points=opts.num_points),
        num_points=opts.num_points,
    ).to(device)
    groups = param_groups(model, opts.lr, opts.weight_decay, opts.backbone_lr_mult)
    # The fused kernel (CPU and CUDA) is several times faster than the per-tensor loop.
    optimizer = torch.optim.AdamW(groups, lr=opts.lr, weight_decay=opts.weight_decay, fused=True)
    if record is not None and record.optimizer is not None:
        optimizer.load_state_dict(record.optimizer)
    net: nn.Module = model
    if ctx.world_size > 1:
        net = nn.parallel.DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=True,
        )
    use_amp = (opts.amp and device.type == "cuda") or (opts.cpu_bf16 and device.type == "cpu")
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp and device.type == "cuda")

    dist_sampler = None
    if ctx.world_size > 1:
        dist_sampler = torch.utils.data.DistributedSampler(
            dataset, ctx.world_size, ctx.rank, shuffle=True, seed=opts.seed
        )
    steps_per_epoch = (len(dist_sampler) if dist_sampler else len(dataset)) // opts.batch_size
    if steps_per_epoch == 0:
        raise ConfigError(
            f"{opts.data}: {len(dataset)} images is fewer than one batch of {opts.batch_size} "
            f"per process; lower --batch-size"
        )
    progress = Progress(opts.steps, start_step, opts.log_every, ctx.rank == 0)
    deadline = time.monotonic() + 60 * opts.max_minutes if opts.max_minutes else None
    if ctx.rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        print(
            f"train {opts.config}: {n_params / 1e6:.2f} M params, {len(dataset)} images, "
            f"world {ctx.world_size}, device {device}, steps {start_step}->{opts.steps}",
            file=sys.stderr,
            flush=True,
        )

    # Where the data stands (epoch, samples this process has taken from it) and, last of all
    # before the first step, the generator states: both as the checkpoint left them.
    epoch, seen = start_step // steps_per_epoch, start_step % steps_per_epoch * opts.batch_size
    if record is not None:
        epoch, seen = _restore_resume_state(record.resume, scaler, ctx, epoch, seen)
    step = start_step
    stop = out_of_time = interrupted = False
    model.train()
    with StopOnInterrupt() as ctrl_c:
        while step < opts.steps and not stop:
            dataset.set_epoch(epoch)
            if dist_sampler is not None:
                dist_sampler.set_epoch(epoch)
                order: torch.utils.data.Sampler = dist_sampler
            else:
                order = torch.utils.data.RandomSampler(
                    dataset, generator=torch.Generator().manual_seed(opts.seed + epoch)
                )
            # Resuming mid-epoch skips the samples already seen without loading them. The loader
            # gets its own generator: by default each new iterator draws from the global one.
            loader = torch.utils.data.DataLoader(
                dataset,
                batch_size=opts.batch_size,
                sampler=_Skip(order, seen),
                num_workers=opts.workers,
                collate_fn=collate,
                drop_last=True,
                generator=torch.Generator().manual_seed(opts.seed + epoch),
            )
            for images, targets in loader:
                losses = train_step(
                    net,
                    model,
                    criterion,
                    optimizer,
                    scaler,
                    images,
                    targets,
                    device,
                    opts,
                    step,
                    use_amp,
                )
                progress.update(step, losses, optimizer.param_groups[0]["lr"])
                step += 1
                seen += opts.batch_size
                out_of_time = _any_rank(deadline is not None and time.monotonic() > deadline, ctx)
                interrupted = _any_rank(ctrl_c.requested, ctx)
                stop = out_of_time or interrupted or step == opts.stop_at
                if step % opts.checkpoint_every == 0 or step == opts.steps or stop:
                    resume = _resume_state(epoch, seen, scaler, ctx)  # collective: every rank
                    if ctx.rank == 0:
                        saved = checkpoint_record(
                            model, opts.config, labels, step, optimizer, resume
                        )
                        save_checkpoint(last, saved)
                if step >= opts.steps or stop:
                    break
            else:
                epoch, seen = epoch + 1, 0
    if interrupted and step < opts.steps:
        ctx.barrier()
        raise InterruptedJobError(
            f"stopped at step {step} of {opts.steps} with its checkpoint {last}; rerun with "
            "--resume to continue"
        )
    if stop and step < opts.steps and ctx.rank == 0:
        why = f"--max-minutes {opts.max_minutes} reached" if out_of_time else "--stop-at"
        print(f"stopping at step {step}: {why}; rerun with --resume to continue", file=sys.stderr)
    final = out / "model_final.pt"
    if ctx.rank == 0 and step >= opts.steps:
        save_checkpoint(final, checkpoint_record(model, opts.config, labels, step))
    ctx.barrier()
    return final if step >= opts.steps else last


class StopOnInterrupt:
    """Ctrl-C (SIGINT) during training asks the loop to stop after the step in flight, with a
    checkpoint, instead of losing every step since the last one; a second Ctrl-C stops at once.
    Only the main thread can take signals: elsewhere the handler is left as it is."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: object = None

    def __enter__(self) -> StopOnInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def _on_sigint(self, signum: int, frame: object) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(
            "compactinst train: Ctrl-C: stopping after this step with a checkpoint (again: "
            "stop at once)",
            file=sys.stderr,
            flush=True,
        )

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]
            self._previous = None


def _any_rank(flag: bool, ctx: DistContext) -> bool:
    """True on every process when ``flag`` is true on any (ranks must stop at the same step)."""
    if ctx.world_size == 1:
        return flag
    value = torch.tensor([float(flag)], device=ctx.device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def _resume_state(epoch: int, seen: int, scaler: torch.amp.GradScaler, ctx: DistContext) -> dict:
    """Data position, loss-scaler state and every process's generator states (rank order)."""
    rng = [capture_rng_state()]
    if ctx.world_size > 1:
        rng = [None] * ctx.world_size
        dist.all_gather_object(rng, capture_rng_state())
    return {
        "epoch": epoch,
        "samples_seen": seen,
        "world_size": ctx.world_size,
        "scaler": scaler.state_dict(),
        "rng": rng,
    }


def _restore_resume_state(
    resume: dict | None, scaler: torch.amp.GradScaler, ctx: DistContext, epoch: int, seen: int
) -> tuple[int, int]:
    """Apply a checkpoint's ``resume`` entry; returns the data position (epoch, samples seen).

    Without the entry (older checkpoints) or with another world size, the position is derived
    from the step and the generators stay reseeded: the run continues, but its random draws
    differ from an uninterrupted run's, which the message says.
    """
    if resume is None or resume.get("world_size") != ctx.world_size:
        if ctx.rank == 0:
            print(
                "resume: the checkpoint holds no generator states for this world size; "
                "continuing with reseeded generators (not identical to an uninterrupted run)",
                file=sys.stderr,
            )
        return epoch, seen
    if scaler.is_enabled() and resume.get("scaler"):
        scaler.load_state_dict(resume["scaler"])
    restore_rng_state(resume["rng"][ctx.rank])
    return int(resume["epoch"]), int(resume["samples_seen"])


class _Skip(torch.utils.data.Sampler):
    """The indices of ``base`` after the first ``skip`` (same order as ``base``)."""

    def __init__(self, base: torch.utils.data.Sampler, skip: int) -> None:
        self.base, self.skip = base, skip

    def __iter__(self):
        return itertools.islice(iter(self.base), self.skip, None)

    def __len__(self) -> int:
        return max(len(self.base) - self.skip, 0)


def train_step(
    net: nn.Module,
    model: nn.Module,
    criterion: SetCriterion,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    images: torch.Tensor,
    targets: list[dict],
    device: torch.device,
    opts: TrainOptions,
    step: int,
    use_amp: bool,
) -> dict[str, float]:
    """One optimisation step; returns the loss terms as floats."""
    factor = lr_factor(step, opts.steps, opts.warmup)
    for group in optimizer.param_groups:
        group["lr"] = opts.lr * group.get("lr_scale", 1.0) * factor
    images = images.to(device, non_blocking=True)
    targets = [{k: v.to(device, non_blocking=True) for k, v in t.items()} for t in targets]
    dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    with torch.autocast(device.type, dtype=dtype, enabled=use_amp):
        outputs = net(images, targets, criterion.matcher) if opts.guided else net(images)
    losses = criterion(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(losses["loss"]).backward()
    if opts.clip > 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), opts.clip)
    scaler.step(optimizer)
    scaler.update()
    return {k: float(v.detach()) for k, v in losses.items()}


def _scale_range(text: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(f"--scale {text!r} must be LOW,HIGH, e.g. 0.75,1.25") from None
    return low, high


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst train``."""
    parser.add_argument("config", help="model config, e.g. compactinst_demo, compactinst_r50")
    parser.add_argument(
        "--data",
        required=True,
        help="folder with images/ and panoptic.json + panoptic/ or instances.json",
    )
    parser.add_argument(
        "--kind",
        default="auto",
        choices=("auto", "panoptic", "instance"),
        help="annotation kind (auto: panoptic.json when present, else instances.json)",
    )
    parser.add_argument(
        "--labels",
        default="synthetic",
        help="synthetic | data (the data set's categories) | labels JSON",
    )
    parser.add_argument("--out", required=True, help="checkpoint folder (last.pt, model_final.pt)")
    parser.add_argument("--steps", type=int, default=10000, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=8, help="images per process")
    parser.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate")
    parser.add_argument("--weight-decay", type=float, default=0.05, help="AdamW weight decay")
    parser.add_argument(
        "--backbone-lr-mult",
        type=float,
        default=0.1,
        help="backbone lr factor (0.1 for pretrained, 1.0 from scratch)",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=100,
        help="linear lr warm-up steps (capped at a tenth of --steps, with a warning)",
    )
    parser.add_argument("--crop", default="256x384", help="training crop HxW")
    parser.add_argument("--scale", default="0.75,1.25", help="scale jitter range")
    parser.add_argument("--num-points", type=int, default=12544, help="points per mask loss")
    parser.add_argument("--no-guided", action="store_true", help="skip the GT-mask-guided stream")
    parser.add_argument("--workers", type=int, default=0, help="data loader processes")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (torch)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--no-amp", action="store_true", help="fp32 on CUDA")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast on CPU")
    parser.add_argument("--clip", type=float, default=0.0, help="gradient norm clip (0 = off)")
    parser.add_argument("--seed", type=int, default=42, help="seed of data order and init")
    parser.add_argument(
        "--checkpoint-every", type=int, default=500, help="steps between OUT/last.pt saves"
    )
    parser.add_argument("--log-every", type=int, default=10, help="steps between log lines")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    parser.add_argument(
        "--init",
        help="initial weights, e.g. from 'compactinst import-fastinst' (default: random init)",
    )
    parser.add_argument(
        "--max-minutes", type=float, help="stop (with a checkpoint) after this (default: no limit)"
    )
    parser.add_argument(
        "--stop-at",
        type=int,
        help="stop (with a checkpoint) after this step; --resume continues on "
        "the schedule of --steps (default: run to --steps)",
    )


def options_from_args(args: argparse.Namespace) -> TrainOptions:
    """TrainOptions from parsed CLI arguments."""
    if args.steps < 1 or args.batch_size < 1:
        raise ConfigError("--steps and --batch-size must be >= 1")
    if args.warmup < 0:
        raise ConfigError(f"--warmup {args.warmup} must be >= 0")
    if not args.lr > 0:
        raise ConfigError(f"--lr {args.lr} must be > 0 (AdamW's step size; default 1e-4)")
    warmup = capped_warmup(args.steps, args.warmup)
    if warmup != args.warmup:
        warn(
            "train",
            f"--warmup {args.warmup} would last past a tenth of --steps {args.steps}; "
            f"warming up for {warmup} steps",
        )
    return TrainOptions(
        config=args.config,
        data=args.data,
        out=args.out,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        backbone_lr_mult=args.backbone_lr_mult,
        warmup=warmup,
        crop=parse_size(args.crop),
        scale=_scale_range(args.scale),
        num_points=args.num_points,
        guided=not args.no_guided,
        workers=args.workers,
        threads=args.threads,
        device=args.device,
        amp=not args.no_amp,
        cpu_bf16=args.bf16,
        clip=args.clip,
        seed=args.seed,
        checkpoint_every=args.checkpoint_every,
        log_every=args.log_every,
        resume=args.resume,
        init=args.init,
        max_minutes=args.max_minutes,
        stop_at=args.stop_at,
        kind=args.kind,
        labels=args.labels,
    )


def run(args: argparse.Namespace) -> int:
    """Train and print where the checkpoint went (and how to go faster on a CPU)."""
    opts = options_from_args(args)
    last = Path(opts.out) / "last.pt"
    if last.is_file() and not opts.resume:
        raise ConfigError(
            f"{last} exists: pass --resume to continue that run, or another --out for a new one"
        )
    device = _device(opts.device).type
    hint = cpu_speed_hint(opts) if device == "cpu" else None
    if hint:
        print(f"compactinst train: note: {hint}", file=sys.stderr)
    if device == "cpu" and not opts.amp:
        warn("train", "--no-amp has no effect on the CPU (fp32 unless --bf16)")
    if device != "cpu" and opts.cpu_bf16:
        warn("train", f"--bf16 has no effect on {device} (mixed precision there: see --no-amp)")
    path = train(opts)
    print(f"checkpoint: {path}")
    if path != last and last.is_file():
        print(f"checkpoint: {last} (to resume from)")
    return 0


if __name__ == "__main__":
    from ..cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
