"""Accuracy of a model bundle on a COCO-format folder (``compactinst synth`` layout), run through
the real runtime: ``Pipeline`` (ONNX Runtime) -> mask AP (pycocotools) and PQ (eval.metrics)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..errors import ConfigError
from ..image_formats import read_image
from ..progress import Progress
from ..structures import PostprocessOptions

#: AP needs low-scoring detections too (COCO ranks up to 100 per image); PQ uses the defaults.
AP_SCORE_THRESHOLD = 0.05


def evaluate_bundle(
    bundle: str | Path,
    data: str | Path,
    limit: int | None = None,
    backend: str = "onnxruntime",
    options: PostprocessOptions | None = None,
    progress: bool = True,
) -> dict:
    """Mask AP and PQ/SQ/RQ (percent) of ``bundle`` on the first ``limit`` images of ``data``."""
    from ..eval.groundtruth import GroundTruth
    from ..eval.metrics import Evaluator
    from ..pipeline import Pipeline

    root = Path(data)
    for name in ("instances.json", "panoptic.json", "panoptic", "images"):
        if not (root / name).exists():
            raise ConfigError(f"{root} lacks {name}; make it with 'compactinst synth --out {root}'")
    gt = GroundTruth(root / "instances.json", root / "panoptic.json", root / "panoptic")
    entries = sorted(gt.images.values(), key=lambda e: int(e["id"]))[:limit]
    gt.match(list(range(len(entries))), mode="index")
    base = options or PostprocessOptions()
    ap_eval, pq_eval = Evaluator(gt), Evaluator(gt)
    bar = Progress(len(entries), "eval", progress, unit="images", rate_unit="img/s")
    with (
        Pipeline(bundle, backend, replace(base, score_threshold=AP_SCORE_THRESHOLD)) as ap_pipe,
        Pipeline(bundle, backend, base) as pq_pipe,
    ):
        for i, entry in enumerate(entries):
            image = read_image(root / "images" / entry["file_name"])
            ap_eval.add(i, ap_pipe(image, "bgr8"))
            pq_eval.add(i, pq_pipe(image, "bgr8"))
            bar.update(i + 1)
    bar.close()
    ap = ap_eval.result()
    pq = pq_eval.result()
    return {
        "images": len(entries),
        "mask_ap": ap["mask_ap"],
        "panoptic": pq["panoptic"],
        "semantic": pq["semantic"],
    }
