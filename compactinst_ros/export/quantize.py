"""``compactinst quantize BUNDLE --data DIR``: the FP16 and INT8 variants of a bundle, a per-layer
INT8 sensitivity pass, and golden cases for every precision.

* FP16: the FP32 islands are the nodes the range analysis (``precision.check_bundle``) pins;
  the graph is derived at load (``variants.fp16_graph``).
* INT8: ONNX Runtime calibrates the Conv/MatMul/ReLU tensors on the user's images (a COCO
  folder, an image folder or a bag) once; the ranges are stored, and the TensorRT graph
  (symmetric s8) and the CPU graph (u8 activations) are derived from them. The sensitivity pass
  quantizes one layer at a time, reports the error each adds at the decoder outputs, and leaves
  the worst layers in FP32 until the whole graph's error is within ``--budget``. The encoder is
  quantized from its pre-processed graph (``--pre-process``), where the frozen BatchNorm is
  folded into the convs.
* Golden cases: the first calibration images with every precision's CPU decoder outputs (the
  engines' acceptance reference; int8 = the TensorRT graph).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from .. import variants
from ..backends.ort import create_session, image_feed
from ..bundle import (
    DECODER_OUTPUTS,
    INT8_GRAPHS,
    METADATA_FILE,
    GoldenCase,
    ModelBundle,
    sha256_file,
    write_golden,
)
from ..errors import ConfigError
from ..eval.evaluate import encoder_inputs
from ..eval.precision_report import output_error

CALIBRATION_METHODS = ("minmax", "entropy", "percentile")
#: default error budget of the INT8 graph: mean |int8 - fp32| of a decoder output over its range
DEFAULT_BUDGET = 0.01
GOLDEN_IMAGES = 3
#: stages whose INT8 graphs start from the pre-processed graph (``variants.pre_processed``): it
#: folds the encoder's frozen BatchNorm into its convs (faster); the decoder came out slower
PRE_PROCESSED = ("encoder",)
Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class _Feeds:
    """ONNX Runtime's CalibrationDataReader over a list of feed dicts."""

    def __init__(self, feeds: Sequence[dict[str, np.ndarray]]) -> None:
        self._feeds = list(feeds)
        self._next = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._next >= len(self._feeds):
            return None
        self._next += 1
        return self._feeds[self._next - 1]

    def __len__(self) -> int:
        return len(self._feeds)


class Chain:
    """Encoder then decoder from graph bytes on the CPU: decoder outputs of encoder inputs;
    ``fused=False`` runs the graphs as written (the TensorRT INT8 graph's exact arithmetic)."""

    def __init__(self, bundle: ModelBundle, graphs: dict[str, bytes], fused: bool = True) -> None:
        self.encoder = create_session(graphs["encoder"], optimize=fused)
        self.decoder = create_session(graphs["decoder"], optimize=fused)
        self.image = bundle.image_tensor
        self.features = [o.name for o in self.encoder.get_outputs()]

    def __call__(self, tensor: np.ndarray) -> dict[str, np.ndarray]:
        feats = self.encoder.run(self.features, image_feed(self.encoder, self.image, tensor))
        outs = self.decoder.run(list(DECODER_OUTPUTS), dict(zip(self.features, feats, strict=True)))
        return dict(zip(DECODER_OUTPUTS, outs, strict=True))


@dataclass
class Int8Result:
    """What the INT8 pass found: per-layer errors, the layers left in FP32 and the final error."""

    layer_error: dict[str, dict[str, float]]  # stage -> node -> error alone
    fp32_layers: dict[str, list[str]]
    error: dict[str, float]
    budget: float


def int8_sources(bundle: ModelBundle, pre_process: Sequence[str]) -> dict[str, onnx.ModelProto]:
    """Per stage, the graph its INT8 graphs are calibrated and quantized from
    (``variants.int8_source``: the stages in ``pre_process`` pre-processed)."""
    return {
        s.name: variants.int8_source(onnx.load(str(s.path)), s.name in pre_process)
        for s in bundle.stages
    }


def calibrate(
    bundle: ModelBundle,
    tensors: Sequence[np.ndarray],
    method: str,
    pre_process: Sequence[str] = (),
    log: Log = _stderr,
) -> dict[str, Path]:
    """ONNX Runtime calibration of every stage on ``tensors`` (of its ``int8_sources`` graph);
    the ranges files it writes into the bundle (ONNX Runtime's calibration cache format)."""
    if method not in CALIBRATION_METHODS:
        raise ConfigError(f"calibration '{method}': choose {', '.join(CALIBRATION_METHODS)}")
    fp32 = Chain(bundle, {s.name: s.path.read_bytes() for s in bundle.stages})
    feeds = {"encoder": [{fp32.image: t} for t in tensors]}
    feeds["decoder"] = [
        dict(zip(fp32.features, fp32.encoder.run(fp32.features, f), strict=True))
        for f in feeds["encoder"]
    ]
    paths = {}
    sources = int8_sources(bundle, pre_process)
    for stage in bundle.stages:
        path = bundle.root / f"int8_ranges.{stage.name}.json"
        path.unlink(missing_ok=True)
        start = time.perf_counter()
        variants.quantize(  # the calibration run: it writes the ranges file
            sources[stage.name],
            path,
            variants.CALIBRATION,
            (),
            reader=_Feeds(feeds[stage.name]),
            method=method,
        )
        # ONNX Runtime writes the tensors in set order, which changes from run to run: sorted,
        # the same calibration gives the same file (and sha256)
        path.write_text(json.dumps(json.loads(path.read_text()), sort_keys=True))
        path.chmod(0o644)  # ONNX Runtime writes it through mkstemp (0600); it ships with the bundle
        log(f"calibrated {stage.name} ({method}, {len(tensors)} frames) in "
            f"{time.perf_counter() - start:.1f} s")  # fmt: skip
        paths[stage.name] = path
    return paths


def sensitivity(
    bundle: ModelBundle,
    ranges: dict[str, Path],
    tensors: Sequence[np.ndarray],
    budget: float,
    max_layers: int = 8,
    layer_error: dict[str, dict[str, float]] | None = None,
    method: str = "minmax",
    pre_process: Sequence[str] = (),
    log: Log = _stderr,
    on_layers: Callable[[dict], None] | None = None,
    islands: dict[str, list[str]] | None = None,
) -> Int8Result:
    """Per-layer INT8 error at the decoder outputs (each layer quantized alone, the rest FP32;
    ``layer_error`` reuses an earlier pass's), then the most sensitive layers, worst first, left
    out of INT8 where that lowers the error, until it is <= ``budget`` or
    ``max_layers`` are left out (errors do not add up: a layer alone can cost more than it
    costs among the others). The errors are those of ``variants.SENSITIVITY``'s graph: every
    layer either INT8 graph may quantize, in the TensorRT graph's exact arithmetic. ``islands``:
    per stage, the FP16 graph's FP32 islands, which the TensorRT graph keeps too."""
    fp32_bytes = {s.name: s.path.read_bytes() for s in bundle.stages}
    models = int8_sources(bundle, pre_process)
    fused = variants.runs_fused("int8")
    reference = [Chain(bundle, fp32_bytes, fused)(t) for t in tensors]
    candidates = {n: variants.quantizable_nodes(m) for n, m in models.items()}

    def error_with(exclude: dict[str, list[str]], stages: Sequence[str]) -> dict[str, float]:
        graphs = dict(fp32_bytes)
        for name in stages:
            typed = variants.int8_graph(
                models[name], ranges[name], variants.SENSITIVITY, exclude[name], method,
                (islands or {}).get(name, ()),
            )  # fmt: skip
            graphs[name] = variants.serialize(typed)
        chain = Chain(bundle, graphs, fused)
        return output_error(reference, [chain(t) for t in tensors])

    total = sum(map(len, candidates.values()))
    if layer_error is None or {n: sorted(e) for n, e in layer_error.items()} != {
        n: sorted(c) for n, c in candidates.items()
    }:
        layer_error = {n: {} for n in models}
        done = 0
        for name, nodes in candidates.items():
            for node in nodes:
                others = {n: [x for x in candidates[n] if x != node] for n in models}
                layer_error[name][node] = max(error_with(others, [name]).values())
                done += 1
                if done % 10 == 0 or done == total:
                    log(f"sensitivity: {done}/{total} layers")
        if on_layers is not None:
            on_layers(layer_error)
    ranked = sorted(
        ((err, name, node) for name, errs in layer_error.items() for node, err in errs.items()),
        reverse=True,
    )
    excluded: dict[str, list[str]] = {n: [] for n in models}
    error = error_with(excluded, list(models))
    log(f"all {total} layers in INT8: error {max(error.values()):.4f} (budget {budget})")
    for err, name, node in ranked[: 3 * max_layers]:  # the most sensitive layers, worst first
        if max(error.values()) <= budget or sum(map(len, excluded.values())) == max_layers:
            break
        trial = {**excluded, name: [*excluded[name], node]}
        trial_error = error_with(trial, list(models))
        kept = max(trial_error.values()) < max(error.values())
        verdict = "left in FP32" if kept else "no better, stays INT8"
        log(f"{name} {node} (alone {err:.4f}) in FP32: error "
            f"{max(trial_error.values()):.4f}, {verdict}")  # fmt: skip
        if kept:
            excluded, error = trial, trial_error
    return Int8Result(layer_error, excluded, error, budget)


def fp16_islands(bundle: ModelBundle, frames: int, log: Log = _stderr) -> dict[str, list[str]]:
    """Per stage, the nodes the range analysis keeps in FP32 (its pins)."""
    from .precision import calibration_frames, check_bundle

    report = check_bundle(bundle, calibration_frames(bundle, frames), log=log)
    return {name: sorted(pins) for name, pins in report.pins.items()}


def golden_cases(
    bundle: ModelBundle, tensors: Sequence[np.ndarray]
) -> dict[str, list[GoldenCase]]:
    """Per precision of ``bundle``, the typed chain's CPU decoder outputs on ``tensors`` (int8:
    the TensorRT graph, which an engine is built from)."""
    cases = {}
    for precision in bundle.precisions:
        graphs = {s.name: bundle.stage_graph(s.name, precision).model_bytes for s in bundle.stages}
        chain = Chain(bundle, graphs, variants.runs_fused(precision))
        cases[precision] = [GoldenCase(t, chain(t)) for t in tensors]
    return cases


def write_variants(
    bundle: ModelBundle,
    islands: dict[str, list[str]] | None,
    int8: Int8Result | None,
    ranges: dict[str, Path],
    calibration: dict,
    pre_process: Sequence[str] = (),
) -> ModelBundle:
    """Record the variants in ``bundle.json`` (derived graph hashes included) and reload; the
    INT8 graphs of the stages in ``pre_process`` start from their pre-processed graph.
    ``bundle`` is as loaded before calibrating: its recorded ranges hashes are the old ones."""
    root = bundle.root
    meta = json.loads((root / METADATA_FILE).read_text())
    found: dict[str, dict] = {}
    tools = variants.tool_versions()
    sources = int8_sources(bundle, pre_process) if int8 is not None else {}
    for stage in bundle.stages:
        model = onnx.load(str(stage.path))
        if islands is not None:
            typed = variants.serialize(
                variants.fp16_graph(
                    model, islands[stage.name], bundle.boundary_tensors, bundle.image_tensor
                )
            )
            found.setdefault("fp16", {"derive": "fp16", "tools": tools, "stages": {}})
            found["fp16"]["stages"][stage.name] = {
                "fp32_islands": islands[stage.name],
                "sha256": _sha(typed),
            }
        if int8 is not None:
            layers = int8.fp32_layers[stage.name]
            found.setdefault("int8", {"derive": "qdq", "tools": tools, "stages": {},
                                      "calibration": calibration})  # fmt: skip
            method = calibration["method"]
            kept = islands[stage.name] if islands is not None else ()
            derived = {
                t: variants.serialize(variants.int8_graph(
                    sources[stage.name], ranges[stage.name], t, layers, method, kept
                ))
                for t in INT8_GRAPHS
            }  # fmt: skip
            found["int8"]["stages"][stage.name] = {
                "ranges": ranges[stage.name].name,
                "ranges_sha256": sha256_file(ranges[stage.name]),
                "pre_process": stage.name in pre_process,
                "fp32_layers": layers,
                "sha256": {t: _sha(data) for t, data in derived.items()},
            }
    meta["variants"] = {**meta.get("variants", {}), **found}
    (root / METADATA_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return ModelBundle.load(root)


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst quantize``."""
    parser.add_argument("bundle", type=Path, help="model bundle folder (changed in place)")
    parser.add_argument(
        "--data", required=True, help="calibration images: COCO folder, image folder or bag"
    )
    parser.add_argument(
        "--calibration",
        choices=CALIBRATION_METHODS,
        default="minmax",
        help="how activation ranges are taken from the calibration images",
    )
    parser.add_argument("--frames", type=int, default=32, help="calibration images (default 32)")
    parser.add_argument(
        "--sensitivity-frames", type=int, default=4, help="images the per-layer errors use"
    )
    parser.add_argument(
        "--budget", type=float, default=DEFAULT_BUDGET,
        help=f"INT8 error budget at the decoder outputs (default {DEFAULT_BUDGET})",
    )  # fmt: skip
    parser.add_argument(
        "--fp16-frames", type=int, default=16, help="synthetic scenes of the FP16 range analysis"
    )
    parser.add_argument(
        "--max-fp32-layers", type=int, default=8, help="most layers left out of INT8 (default 8)"
    )
    parser.add_argument(
        "--pre-process", nargs="*", default=list(PRE_PROCESSED), metavar="STAGE",
        help="stages quantized from ONNX Runtime's quant_pre_process graph (default: "
        f"{' '.join(PRE_PROCESSED)}; none: leave the list empty)",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, help="write the per-layer INT8 errors as JSON (default: not written)"
    )
    parser.add_argument(
        "--layer-errors", type=Path,
        help="reuse the per-layer errors of an earlier --out (same bundle and calibration; "
        "default: measure them)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Make the fp16 and int8 variants and the golden cases of a bundle."""
    bundle = ModelBundle.load(args.bundle, with_variants=False)  # they are being replaced
    if args.frames < 1 or args.sensitivity_frames < 1:
        raise ConfigError("--frames and --sensitivity-frames need at least 1 image")
    unknown = sorted(set(args.pre_process) - {s.name for s in bundle.stages})
    if unknown:
        raise ConfigError(
            f"--pre-process {' '.join(unknown)}: no such stage; the bundle's stages are "
            + ", ".join(s.name for s in bundle.stages)
        )
    tensors = encoder_inputs(bundle, args.data, args.frames)
    _stderr(f"{len(tensors)} calibration images from {args.data}")
    islands = fp16_islands(bundle, args.fp16_frames)
    _stderr(f"fp16 islands: {sum(map(len, islands.values()))} nodes kept in FP32")
    ranges = calibrate(bundle, tensors, args.calibration, args.pre_process)
    previous = None
    if args.layer_errors:
        previous = json.loads(args.layer_errors.read_text())["layer_error"]

    def save(layer_error: dict, **more: dict) -> None:
        if args.out:
            record = {"layer_error": layer_error, **more}
            args.out.write_text(json.dumps(record, indent=1) + "\n")

    result = sensitivity(
        bundle,
        ranges,
        tensors[: args.sensitivity_frames],
        args.budget,
        args.max_fp32_layers,
        previous,
        args.calibration,
        args.pre_process,
        on_layers=save,
        islands=islands,
    )
    calibration = {"method": args.calibration, "frames": len(tensors), "data": Path(args.data).name}
    bundle = write_variants(bundle, islands, result, ranges, calibration, args.pre_process)
    golden = write_golden(bundle.root, golden_cases(bundle, tensors[:GOLDEN_IMAGES]))
    print(f"{bundle.name}: variants {', '.join(bundle.precisions)}; golden cases {golden}")
    for name, layers in result.fp32_layers.items():
        print(f"int8 {name}: {len(layers)} layers left in FP32: {', '.join(layers) or '-'}")
    print("int8 error at the decoder outputs: "
          + ", ".join(f"{k} {v:.4f}" for k, v in result.error.items()))  # fmt: skip
    save(result.layer_error, fp32_layers=result.fp32_layers, error=result.error)
    return 0 if max(result.error.values()) <= args.budget else 1
