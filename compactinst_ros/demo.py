"""``make demo``: synthetic camera bag -> the real node (realtime) and the pipeline (lockstep).

Builds a deterministic demo bag from the synthetic scenes (cached under ``out/demo_data``),
replays it with the embedded default model (``models/default``; a random-weight bundle is
exported when it is absent), prints the accuracy and per-stage latency summary, and writes the
report, plots, overlay images and the node's output bag under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np

from .errors import CompactInstError, ConfigError
from .eval.bags import write_image_bag
from .resources import default_model

#: header stamp of the first demo frame (fixed, so the bag and its GT are reproducible)
T0_NS = 1_700_000_000 * 1_000_000_000
DATA_VERSION = 1


def random_bundle(cache: Path, size: tuple[int, int]) -> Path:
    """Export (once) a random-weight compactinst_demo bundle: runs the chain, learns nothing."""
    from .bench.models import random_bundle as export_random_bundle
    from .labels import SYNTHETIC_LABELS

    try:
        return export_random_bundle("compactinst_demo", size, SYNTHETIC_LABELS, cache).root
    except ImportError as exc:
        raise ConfigError(
            f"models/default is missing and a stand-in cannot be exported ({exc}); pass --model "
            "BUNDLE or install the train extra (pip install -e '.[dev]')"
        ) from None


def build_demo_data(data: Path, frames: int, seed: int, size: tuple[int, int], fps: float) -> dict:
    """Synthetic scenes + COCO GT with header stamps + a camera bag (mcap); cached by parameters."""
    from .train.synthetic import generate

    params = {
        "version": DATA_VERSION,
        "frames": frames,
        "seed": seed,
        "size": list(size),
        "fps": fps,
    }
    manifest = data / "manifest.json"
    paths = {
        "bag": data / "bag",
        "gt_instances": data / "gt_instances.json",
        "gt_panoptic": data / "gt_panoptic.json",
        "gt_panoptic_dir": data / "scenes" / "panoptic",
    }
    cached = manifest.is_file() and json.loads(manifest.read_text()) == params
    if cached and all(p.exists() for p in paths.values()):
        print(f"demo data: cached in {data}")
        return paths
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    print(f"demo data: generating {frames} synthetic scenes ({size[0]}x{size[1]}, seed {seed})")
    generate(data / "scenes", frames, seed, size[0], size[1])
    period_ns = round(1e9 / fps)
    stamps = [T0_NS + i * period_ns for i in range(frames)]
    for name, key in (("instances.json", "gt_instances"), ("panoptic.json", "gt_panoptic")):
        coco = json.loads((data / "scenes" / name).read_text())
        for entry in coco["images"]:
            entry["stamp_ns"] = stamps[int(entry["id"]) - 1]
        paths[key].write_text(json.dumps(coco))
    images = sorted((data / "scenes" / "images").glob("*.jpg"))

    def frames_iter() -> Iterator[tuple[int, np.ndarray]]:
        for stamp, path in zip(stamps, images, strict=True):
            yield stamp, cv2.imread(str(path), cv2.IMREAD_COLOR)

    write_image_bag(paths["bag"], frames_iter(), topic="/camera/image_raw", storage="mcap")
    manifest.write_text(json.dumps(params))
    print(f"demo data: wrote bag {paths['bag']} ({frames} frames at {fps:g} Hz)")
    return paths


def build_parser() -> argparse.ArgumentParser:
    """Command-line options of the demo."""
    from .cli import DefaultsHelpFormatter

    parser = argparse.ArgumentParser(
        prog="python -m compactinst_ros.demo",
        description=__doc__,
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--out", default="out/demo", help="report folder (default out/demo)")
    parser.add_argument("--data", default="out/demo_data", help="bag + GT cache folder")
    parser.add_argument("--model", help="bundle (default: models/default, else a random one)")
    parser.add_argument(
        "--backend", default="auto", help="auto | onnxruntime | tensorrt | tensorrt_rtx | openvino"
    )
    parser.add_argument("--frames", type=int, default=40, help="frames in the demo bag")
    parser.add_argument("--fps", type=float, default=10.0, help="recorded camera rate")
    parser.add_argument("--rate", type=float, default=1.0, help="realtime playback factor")
    parser.add_argument("--seed", type=int, default=1000, help="scene seed (held out)")
    parser.add_argument("--size", default="256x384", help="camera image size HxW")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Build the demo data if needed, replay lockstep + realtime, print the summary."""
    from .eval.replay import ReplayOptions, replay
    from .eval.report import summary_text

    args = build_parser().parse_args(argv)
    start = time.monotonic()
    try:
        h, w = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        print(f"demo: --size '{args.size}' is not HxW, e.g. 256x384", file=sys.stderr)
        return 2
    try:
        paths = build_demo_data(Path(args.data), args.frames, args.seed, (h, w), args.fps)
        model = Path(args.model) if args.model else default_model()
        if model is None:
            print(
                "demo: models/default is not there yet; exporting a RANDOM-weight bundle "
                "(accuracy will be ~0; the chain and latency are real)"
            )
            model = random_bundle(Path(args.data), (h, w))
        print(f"demo: model {model}")
        out = Path(args.out)
        shutil.rmtree(out, ignore_errors=True)
        options = ReplayOptions(
            bag=paths["bag"],
            model=model,
            backend=args.backend,
            mode="both",
            rate=args.rate,
            gt_instances=paths["gt_instances"],
            gt_panoptic=paths["gt_panoptic"],
            gt_panoptic_dir=paths["gt_panoptic_dir"],
            out=out,
            output_bag=out / "output_bag",
            overlays=4,
            progress=not args.quiet,
            command_line="python -m compactinst_ros.demo " + " ".join(argv or sys.argv[1:]),
        )
        report = replay(options)
    except CompactInstError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return 1
    print()
    print(summary_text(report))
    print()
    print(f"report:   {out / 'report.md'} (+ report.json)")
    print(f"plots:    {', '.join(str(out / p) for p in report.get('plots', []))}")
    print(f"overlays: {out / 'overlays'}")
    print(f"node outputs bag (for rviz): {out / 'output_bag'}")
    print(f"demo finished in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
