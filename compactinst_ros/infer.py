"""``compactinst infer``: segment image files with a bundle; writes an overlay PNG and a JSON each.

For every IMAGE it writes ``<out>/<stem>_overlay.png`` and ``<out>/<stem>.json`` with the
instances (id, label, name, score, box, area), the panoptic segments and the stage timings.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np

from .errors import InputError
from .labels import LabelSet
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


def read_image(path: str | Path) -> np.ndarray:
    """HxWx3 uint8 BGR image from a file; InputError when it cannot be decoded."""
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise InputError(f"cannot read image {path}: missing file or unsupported format")
    return image


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst infer``."""
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="image files (png, jpg, ...)")
    parser.add_argument("--model", required=True, help="model bundle directory")
    parser.add_argument(
        "--backend", default="auto", help="auto, onnxruntime or tensorrt (default auto)"
    )
    parser.add_argument("--out", default="out/infer", help="output directory (default out/infer)")
    parser.add_argument("--threads", type=int, help="ONNX Runtime threads (default: all cores)")
    parser.add_argument("--score-threshold", type=float, default=0.3, help="instance score cut")
    parser.add_argument("--alpha", type=float, default=0.5, help="overlay opacity (0..1)")


def run(args: argparse.Namespace) -> int:
    """Segment each image; print one line per image with instance count and total time."""
    from .backends import BackendOptions
    from .pipeline import Pipeline

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    options = PostprocessOptions(score_threshold=args.score_threshold, overlay_alpha=args.alpha)
    backend_options = BackendOptions(threads=args.threads or None)
    with Pipeline(args.model, args.backend, options, backend_options) as pipeline:
        labels = pipeline.bundle.labels
        info = pipeline.describe()
        print(f"model {info['model']} ({info['input_size']}) on {pipeline.backend_name}")
        for n, path in enumerate(args.images, 1):
            image = read_image(path)
            result = pipeline(image, "bgr8", OutputSet(overlay=True))
            stem = Path(path).stem
            cv2.imwrite(str(out / f"{stem}_overlay.png"), result.overlay)
            record = {"image": str(path), **info, **result_to_json(result, labels)}
            (out / f"{stem}.json").write_text(json.dumps(record, indent=2) + "\n")
            print(
                f"[{n}/{len(args.images)}] {path}: {len(result.instances)} instances, "
                f"{len(result.segments)} segments, {result.timings_ms.get('inference', 0.0):.1f} ms"
            )
    return 0
