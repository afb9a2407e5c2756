"""``compactinst evaluate BUNDLE --data DIR``: accuracy of one precision of a model bundle on a
COCO-format folder (``compactinst synth`` layout), run through the real runtime: ``Pipeline``
(ONNX Runtime) -> mask AP (pycocotools) and PQ (eval.metrics). Also the image readers that
calibration and the precision report share (a COCO folder, an image folder or a bag)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..backends import BACKENDS
from ..bundle import PRECISIONS
from ..errors import ConfigError, DataError
from ..image_formats import read_image
from ..infer import image_files
from ..preprocess import letterbox
from ..progress import Progress
from ..structures import FrameMeta, PostprocessOptions

if TYPE_CHECKING:
    from ..bundle import ModelBundle

#: AP needs low-scoring detections too (COCO ranks up to 100 per image); PQ uses the defaults.
AP_SCORE_THRESHOLD = 0.05


def evaluate_bundle(
    bundle: str | Path,
    data: str | Path,
    limit: int | None = None,
    backend: str = "onnxruntime",
    options: PostprocessOptions | None = None,
    progress: bool = True,
    precision: str | None = None,
    int8_graph: str | None = None,
    threads: int | None = None,
) -> dict:
    """Mask AP and PQ/SQ/RQ (percent) of ``bundle`` in ``precision`` (None: the backend's
    default) on the first ``limit`` images of ``data``; ``describe`` says what ran."""
    from ..eval.groundtruth import GroundTruth
    from ..eval.metrics import Evaluator
    from ..pipeline import Pipeline

    root = Path(data)
    for name in ("instances.json", "panoptic.json", "panoptic", "images"):
        if not (root / name).exists():
            raise DataError(f"{root} lacks {name}; make it with 'compactinst synth --out {root}'")
    gt = GroundTruth(root / "instances.json", root / "panoptic.json", root / "panoptic")
    entries = sorted(gt.images.values(), key=lambda e: int(e["id"]))[:limit]
    gt.match(list(range(len(entries))), mode="index")
    base = options or PostprocessOptions()
    ap_eval, pq_eval = Evaluator(gt), Evaluator(gt)
    bar = Progress(len(entries), "eval", progress, unit="images", rate_unit="img/s")
    chosen = {"precision": precision, "int8_graph": int8_graph, "threads": threads}
    ap_options = replace(base, score_threshold=AP_SCORE_THRESHOLD)
    with (
        Pipeline(bundle, backend, ap_options, **chosen) as ap_pipe,
        Pipeline(ap_pipe.bundle, backend, base, **chosen) as pq_pipe,
    ):
        for i, entry in enumerate(entries):
            image = read_image(root / "images" / entry["file_name"])
            ap_eval.add(i, ap_pipe(image, "bgr8"))
            pq_eval.add(i, pq_pipe(image, "bgr8"))
            bar.update(i + 1)
        described = pq_pipe.describe()
    bar.close()
    ap = ap_eval.result()
    pq = pq_eval.result()
    return {
        "images": len(entries),
        "mask_ap": ap["mask_ap"],
        "panoptic": pq["panoptic"],
        "semantic": pq["semantic"],
        "describe": described,
    }


def data_images(data: str | Path, limit: int) -> Iterator[tuple[str, np.ndarray, str]]:
    """Up to ``limit`` (name, image, encoding) from a COCO folder (``images/``), an image folder
    or a rosbag2 (a folder with metadata.yaml, or an .mcap file)."""
    root = Path(data)
    if not root.exists():
        raise ConfigError(
            f"image data {root} does not exist; give a COCO folder, an image folder or a bag"
        )
    if root.suffix == ".mcap" or (root / "metadata.yaml").is_file():
        from .bags import ImageBag

        with ImageBag(root) as bag:
            for i, frame in enumerate(bag.decoded_frames()):
                if i >= limit:
                    return
                image, encoding = frame.decode()
                yield f"{root.name}#{i}", image, encoding
        return
    folder = root / "images" if (root / "images").is_dir() else root
    files = image_files(folder)
    if not files:
        raise ConfigError(f"{folder} holds no image OpenCV can decode")
    for path in files[:limit]:
        yield path.name, read_image(path), "bgr8"


def encoder_inputs(bundle: ModelBundle, data: str | Path, limit: int) -> list[np.ndarray]:
    """The letterboxed encoder inputs of the first ``limit`` images of ``data``."""
    out = []
    for _, image, encoding in data_images(data, limit):
        meta = FrameMeta.letterbox(image.shape[0], image.shape[1], bundle.input_h, bundle.input_w)
        out.append(letterbox(image, encoding, meta, bundle.pad_value))
    return out


def summary(metrics: dict) -> str:
    """One line: mask AP and PQ, the precision and graph that ran, the image count."""
    ran = metrics.get("describe", {})
    graph = f" ({ran['int8_graph']} graph)" if ran.get("int8_graph") else ""
    return (
        f"{ran.get('precision', 'fp32')}{graph}: mask AP {metrics['mask_ap']['AP']:.2f}, "
        f"PQ {metrics['panoptic']['all']['PQ']:.2f} on {metrics['images']} images"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst evaluate``."""
    parser.add_argument("bundle", type=Path, help="model bundle folder")
    parser.add_argument("--data", required=True, type=Path, help="COCO folder (synth layout)")
    parser.add_argument("--precision", choices=PRECISIONS, help="graph precision (default fp32)")
    parser.add_argument(
        "--int8-graph", choices=("cpu", "tensorrt"),
        help="int8: which graph (default: the backend's, onnxruntime cpu, openvino tensorrt)",
    )  # fmt: skip
    parser.add_argument(
        "--backend", default="onnxruntime", choices=tuple(BACKENDS),
        help="what runs the graphs (default onnxruntime)",
    )  # fmt: skip
    parser.add_argument("--limit", type=int, help="evaluate only the first N images (default: all)")
    parser.add_argument("--threads", type=int, help="runtime threads (default: all cores)")
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON")


def run(args: argparse.Namespace) -> int:
    """Print mask AP and PQ of one precision (and the whole result with --json)."""
    metrics = evaluate_bundle(
        args.bundle,
        args.data,
        args.limit,
        args.backend,
        precision=args.precision,
        int8_graph=args.int8_graph,
        threads=args.threads,
    )
    print(json.dumps(metrics, indent=1, default=float) if args.json else summary(metrics))
    return 0
