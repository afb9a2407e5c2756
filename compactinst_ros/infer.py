"""``compactinst infer``: segment image files with a bundle; writes an overlay PNG and a JSON each.

For every IMAGE it writes ``<out>/<stem>_overlay.png`` and ``<out>/<stem>.json`` with the
instances (id, label, name, score, box, area), the panoptic segments and the stage timings;
inputs from several folders keep their folders below ``<out>`` so no result replaces another.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import cv2

from .errors import ConfigError, DataError, InputError
from .image_formats import read_image
from .labels import LabelSet
from .resources import default_model
from .structures import FrameResult, OutputSet, PostprocessOptions


def result_to_json(result: FrameResult, labels: LabelSet) -> dict:
    """JSON-able summary of a frame: instances, panoptic segments, timings (ms)."""
    names = dict(zip(labels.ids, labels.names, strict=True))
    inst, seg = result.instances, result.segments
    return {
        "height": result.meta.src_h,
        "width": result.meta.src_w,
        "instances": [
            {
                "id": int(inst.ids[i]),
                "label": int(inst.label_id[i]),
                "name": names.get(int(inst.label_id[i]), str(int(inst.label_id[i]))),
                "score": round(float(inst.score[i]), 6),
                "box": [round(float(v), 2) for v in inst.box[i]],
                "area": int(inst.area[i]),
            }
            for i in range(len(inst))
        ],
        "segments": [
            {
                "id": int(seg.ids[i]),
                "label": int(seg.label_id[i]),
                "name": names.get(int(seg.label_id[i]), str(int(seg.label_id[i]))),
                "isthing": bool(seg.isthing[i]),
                "score": round(float(seg.score[i]), 6),
                "area": int(seg.area[i]),
            }
            for i in range(len(seg))
        ],
        "timings_ms": {k: round(v, 3) for k, v in result.timings_ms.items()},
    }


#: the image files ``infer`` takes from a folder (and ``evaluate`` from a data set's)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


def image_files(folder: Path) -> list[Path]:
    """The image files directly in ``folder`` (``IMAGE_SUFFIXES``), sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """IMAGE arguments as image files: a folder stands for its image files (``image_files``);
    DataError for a folder that holds none."""
    files: list[str] = []
    for item in inputs:
        path = Path(item)
        if not path.is_dir():
            files.append(item)
            continue
        found = image_files(path)
        if not found:
            raise DataError(f"folder {path} holds no images ({', '.join(IMAGE_SUFFIXES)})")
        files += [str(p) for p in found]
    return files


def output_stems(paths: Sequence[str | Path]) -> list[Path]:
    """One output stem per input, relative to the output folder, never two alike: the inputs'
    folders are mirrored below their common folder (a/0.jpg, b/0.jpg -> a/0, b/0), and where
    stems still collide (0.png, 0.jpg) the extension is kept (0_png, 0_jpg)."""
    resolved = [Path(p).resolve() for p in paths]
    common = Path(os.path.commonpath([p.parent for p in resolved])) if resolved else Path()
    stems = [p.parent.relative_to(common) / p.stem for p in resolved]
    counts = Counter(stems)
    return [
        s.with_name(f"{s.name}_{p.suffix.lstrip('.')}") if counts[s] > 1 and p.suffix else s
        for s, p in zip(stems, resolved, strict=True)
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst infer``."""
    parser.add_argument(
        "images",
        nargs="+",
        metavar="IMAGE",
        help="image files (png, jpg, ...) or folders of them",
    )
    parser.add_argument(
        "--model", help="model bundle directory (default: the embedded models/default)"
    )
    parser.add_argument(
        "--backend", default="auto", help="auto, onnxruntime, tensorrt or openvino (default auto)"
    )
    parser.add_argument("--out", default="out/infer", help="output directory (default out/infer)")
    parser.add_argument("--threads", type=int, help="ONNX Runtime threads (default: all cores)")
    parser.add_argument("--score-threshold", type=float, default=0.3, help="instance score cut")
    parser.add_argument("--alpha", type=float, default=0.5, help="overlay opacity (0..1)")


def run(args: argparse.Namespace) -> int:
    """Segment each image; print one line per image and the files written. A file that cannot
    be read is reported and skipped; the exit status is 1 when any image failed."""
    from .backends import BackendOptions
    from .bundle import model_caveat
    from .cli import warn
    from .pipeline import Pipeline

    model = args.model or default_model()
    if model is None:
        raise ConfigError("no default model is installed; pass --model BUNDLE")
    out = Path(args.out)
    options = PostprocessOptions(score_threshold=args.score_threshold, overlay_alpha=args.alpha)
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads {args.threads} must be >= 1 (leave it out for all cores)")
    backend_options = BackendOptions(threads=args.threads)
    unique: dict[Path, str] = {}
    for p in expand_inputs(args.images):  # a file named twice is segmented once
        unique.setdefault(Path(p).resolve(), str(p))
    paths = list(unique.values())
    failed: list[str] = []
    with Pipeline(model, args.backend, options, backend_options) as pipeline:
        labels = pipeline.bundle.labels
        info = pipeline.describe()
        caveat = model_caveat(pipeline.bundle)
        print(f"model {info['model']} ({info['input_size']}) on {pipeline.backend_name}")
        if args.threads and pipeline.backend_name != "onnxruntime":
            warn("infer", f"--threads has no effect on {pipeline.backend_name} (ONNX Runtime only)")
        if caveat:
            print(f"note: {caveat}")
        for n, (path, stem) in enumerate(zip(paths, output_stems(paths), strict=True), 1):
            head = f"[{n}/{len(paths)}] {path}"
            try:
                result = pipeline(read_image(path), "bgr8", OutputSet(overlay=True))
            except InputError as exc:
                print(f"{head}: skipped: {exc}", file=sys.stderr)
                failed.append(path)
                continue
            overlay, record_path = out / f"{stem}_overlay.png", out / f"{stem}.json"
            overlay.parent.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(overlay), result.overlay)
            record = {"image": path, **info, **result_to_json(result, labels)}
            if caveat:
                record["model_caveat"] = caveat
            record_path.write_text(json.dumps(record, indent=2) + "\n")
            print(
                f"{head}: {len(result.instances)} instances, {len(result.segments)} segments, "
                f"{result.timings_ms.get('inference', 0.0):.1f} ms -> {record_path}, {overlay}"
            )
    if failed:
        print(
            f"compactinst infer: {len(failed)} of {len(paths)} images failed: " + ", ".join(failed),
            file=sys.stderr,
        )
        return 1
    return 0
