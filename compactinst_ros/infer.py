"""``compactinst infer``: segment image files with a bundle; writes the masks, an overlay and a
JSON each, and the instances of all of them in COCO's results format.

For every IMAGE it writes ``<out>/<stem>_overlay.png``; ``<out>/<stem>_instances.png`` (16-bit:
each pixel its instance id, 0 background); ``<out>/<stem>_panoptic.png`` (COCO panoptic: segment
id = R + 256 G + 256^2 B, 0 void); and ``<out>/<stem>.json`` with the instances (id, label,
name, score, box, area, RLE mask), the panoptic segments and the stage timings. Inputs from
several folders keep their folders below ``<out>`` so no result replaces another.
``<out>/coco_results.json`` holds every instance as a COCO result (image_id: the input's number,
file_name beside it), which pycocotools' ``loadRes`` reads. A folder stands for every file in it
that OpenCV can decode (by content, not name: PNG, JPEG, TIFF, WebP, BMP, JPEG 2000, ...); the
files it cannot are named and skipped. A single-channel image is warned about, as the node and
replay do: the models are trained on colour.
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
import numpy as np

from .coco import encode_rle, id_to_rgb
from .errors import ConfigError, DataError, InputError
from .image_formats import mono_note, read_image
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
                **(
                    {"segmentation": encode_rle(result.instance_raster == inst.ids[i])}
                    if result.instance_raster is not None
                    else {}
                ),
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


def folder_images(folder: Path) -> tuple[list[Path], list[Path]]:
    """(the files directly in ``folder`` that OpenCV can decode, judged by their content, and
    the other files), each sorted by name."""
    files = sorted(p for p in folder.iterdir() if p.is_file())
    readable = [p for p in files if cv2.haveImageReader(str(p))]
    return readable, [p for p in files if p not in set(readable)]


def image_files(folder: Path) -> list[Path]:
    """The image files directly in ``folder`` (``folder_images``), sorted by name."""
    return folder_images(folder)[0]


def expand_inputs(inputs: Sequence[str]) -> tuple[list[str], list[str]]:
    """IMAGE arguments as image files, and the files of folders left out: a folder stands for
    the files in it that OpenCV decodes (``folder_images``); DataError for one with none."""
    files: list[str] = []
    skipped: list[str] = []
    for item in inputs:
        path = Path(item)
        if not path.is_dir():
            files.append(item)
            continue
        found, others = folder_images(path)
        if not found:
            raise DataError(f"folder {path} holds no image OpenCV can decode")
        files += [str(p) for p in found]
        skipped += [str(p) for p in others]
    return files, skipped


def single_channel(path: str | Path) -> str | None:
    """"mono8" or "mono16" for a greyscale image file, None for colour (decoded unchanged)."""
    data = np.fromfile(str(path), np.uint8)
    image = cv2.imdecode(data, cv2.IMREAD_UNCHANGED) if data.size else None
    if image is None or (image.ndim == 3 and image.shape[2] > 1):
        return None
    return "mono16" if image.dtype == np.uint16 else "mono8"


def write_masks(result: FrameResult, stem: Path) -> list[Path]:
    """``<stem>_instances.png`` (uint16 instance ids) and ``<stem>_panoptic.png`` (COCO
    panoptic colours) of ``result``; the files written."""
    written = []
    if result.instance_raster is not None:
        path = stem.with_name(f"{stem.name}_instances.png")
        cv2.imwrite(str(path), result.instance_raster.astype(np.uint16))
        written.append(path)
    if result.panoptic_raster is not None:
        path = stem.with_name(f"{stem.name}_panoptic.png")
        cv2.imwrite(str(path), id_to_rgb(result.panoptic_raster)[..., ::-1])  # RGB -> BGR file
        written.append(path)
    return written


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
        "--backend",
        default="auto",
        help="auto, onnxruntime, tensorrt, tensorrt_rtx or openvino (default auto)",
    )
    parser.add_argument("--out", default="out/infer", help="output directory (default out/infer)")
    parser.add_argument("--threads", type=int, help="ONNX Runtime threads (default: all cores)")
    parser.add_argument("--score-threshold", type=float, default=0.3, help="instance score cut")
    parser.add_argument(
        "--min-area",
        type=int,
        default=PostprocessOptions().min_area,
        help="instances of fewer camera pixels are removed (default %(default)s; 0 keeps all)",
    )
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
    options = PostprocessOptions(
        score_threshold=args.score_threshold, overlay_alpha=args.alpha, min_area=args.min_area
    )
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads {args.threads} must be >= 1 (leave it out for all cores)")
    backend_options = BackendOptions(threads=args.threads)
    unique: dict[Path, str] = {}
    inputs, left_out = expand_inputs(args.images)
    for p in inputs:  # a file named twice is segmented once
        unique.setdefault(Path(p).resolve(), str(p))
    paths = list(unique.values())
    if left_out:
        warn("infer", f"{len(left_out)} files in the folders are not images OpenCV can decode, "
                      "left out: " + ", ".join(left_out))  # fmt: skip
    failed: list[str] = []
    results: list[dict] = []
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
            mono = single_channel(path)
            if mono is not None:
                warn("infer", f"{path}: {mono_note(mono)}")
            overlay, record_path = out / f"{stem}_overlay.png", out / f"{stem}.json"
            overlay.parent.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(overlay), result.overlay)
            masks = write_masks(result, out / stem)
            record = {"image": path, "image_id": n, **info, **result_to_json(result, labels)}
            if caveat:
                record["model_caveat"] = caveat
            record_path.write_text(json.dumps(record, indent=2) + "\n")
            results += [
                {"image_id": n, "file_name": path, "category_id": i["label"],
                 "segmentation": i["segmentation"], "score": i["score"],
                 "bbox": [x0, y0, round(x1 - x0, 2), round(y1 - y0, 2)]}  # COCO: x, y, w, h
                for i in record["instances"] if "segmentation" in i
                for x0, y0, x1, y1 in [i["box"]]
            ]  # fmt: skip
            print(
                f"{head}: {len(result.instances)} instances, {len(result.segments)} segments, "
                f"{result.timings_ms.get('inference', 0.0):.1f} ms -> {record_path}, {overlay}, "
                + ", ".join(str(m) for m in masks)
            )
    if paths and len(failed) < len(paths):
        out.mkdir(parents=True, exist_ok=True)
        (out / "coco_results.json").write_text(json.dumps(results) + "\n")
        print(f"COCO results: {out / 'coco_results.json'} ({len(results)} instances)")
    if failed:
        print(
            f"compactinst infer: {len(failed)} of {len(paths)} images failed: " + ", ".join(failed),
            file=sys.stderr,
        )
        return 1
    return 0
