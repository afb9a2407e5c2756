"""``compactinst fp16-check BUNDLE``: per-layer activation ranges and an FP16 emulation on the CPU,
and the FP32 pins the TensorRT builder applies (``precision.json`` in the bundle).

Why: an FP16 TensorRT engine stores activations in half precision (max 65504); a layer whose
output exceeds that becomes inf and then NaN downstream. TensorRT runs only on the vehicle, so
the check runs the bundle's own ONNX graphs on ONNX Runtime:

* **FP32 ranges**: every float node output's largest absolute value over the frames (held-out
  synthetic scenes of a seed not used in training, plus adversarial frames: black, white,
  max-contrast stripes, noise).
* **FP16 emulation**: the same graph with every float tensor TensorRT would store in half
  (node outputs, graph inputs, weights and constants) rounded to float16 storage, while each
  operator still computes in float32 (``Cast`` to float16 and back after every node; weights
  rounded and, as TensorRT does, clamped to +-65504). Pinned nodes keep FP32 inputs and outputs.

A node is flagged when its FP32 range is within ``HEADROOM_LIMIT`` (2x) of 65504, or when its
output is the first inf/NaN of a frame in the emulation that FP32 does not have. Pins: a flagged
node, and for a range flag also every node reading its output (an FP16 reader would convert it
back to half). The emulation is re-run with the pins until no frame has such an inf/NaN (at most
``MAX_ROUNDS``); an origin that is already pinned pins the nearest unpinned nodes feeding it,
one step upstream per round (e.g. a difference that rounds to 0 in half before a division).

What this proves and does not (docs/gpu.md): storage overflow and the rounding of stored
tensors, per ONNX node; not the arithmetic inside a TensorRT kernel (FP16 accumulation in a
reduction or GEMM, intermediates inside a fused or normalisation layer), nor TensorRT's fusions.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..backends.ort import create_session
from ..bundle import STAGE_ORDER, ModelBundle, StageSpec, sha256_file
from ..errors import ConfigError
from ..preprocess import letterbox
from ..structures import FrameMeta

FP16_MAX = 65504.0
#: Flag a layer whose FP32 range comes within this factor of FP16_MAX.
HEADROOM_LIMIT = 2.0
#: Emulation passes that may add pins for new inf/NaN origins before the check gives up.
MAX_ROUNDS = 8
#: Held-out synthetic scenes: seed 0 trains the default model and seed 1 evaluates it.
DEFAULT_SEED = 2
AMAX, NANS, INFS, ZERO = "amax::", "nans::", "infs::", "::zero"


#: Sidecar that ``compactinst fp16-check --write-pins`` writes into a bundle. Strongly typed
#: builds take their FP32 islands from the typed graph itself, so the builder does not read it.
PRECISION_FILE = "precision.json"
PRECISION_FORMAT = 1


def save_fp32_layers(
    bundle: ModelBundle, layers: dict[str, Iterable[str]], provenance: dict
) -> Path:
    """Write the bundle's precision.json: per stage the ONNX file's sha256 and the sorted node
    names the range analysis found unsafe in FP16, plus ``provenance``; returns its path."""
    unknown = sorted(set(layers) - set(STAGE_ORDER))
    if unknown:
        raise ConfigError(f"no stage named {unknown} in a bundle (stages: {list(STAGE_ORDER)})")
    record = {
        "format": PRECISION_FORMAT,
        **provenance,
        "stages": {
            stage.name: {
                "onnx_sha256": sha256_file(stage.path),
                "fp32_layers": sorted(set(layers.get(stage.name, ()))),
            }
            for stage in bundle.stages
        },
    }
    path = bundle.root / PRECISION_FILE
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def node_name(node: onnx.NodeProto) -> str:
    """The name TensorRT's ONNX parser gives a node's layer: its name, else node_of_<output 0>."""
    return node.name or f"node_of_{node.output[0]}"


@dataclass(frozen=True)
class TrackedTensor:
    """A float tensor of a stage whose range is recorded: a node output or a graph input."""

    stage: str
    tensor: str
    node: str  # producing node ("" for a graph input)
    op: str  # producing operator ("input" for a graph input)


@dataclass
class LayerRange:
    """Ranges of one tracked tensor over all frames, FP32 and in the FP16 emulation. Ranges are
    over finite values: attention masks hold -inf on purpose, and FP16 represents infinities."""

    tracked: TrackedTensor
    fp32_amax: float = 0.0
    fp16_amax: float = 0.0
    fp32_nonfinite: int = 0  # frames with inf/NaN in FP32 (by design, e.g. masked attention)
    fp16_new_nonfinite: int = 0  # frames with NaN, or inf, in the emulation that FP32 lacks
    fp16_origin: int = 0  # frames where such a new inf/NaN first appeared here, over all rounds
    pinned: bool = False

    @property
    def headroom(self) -> float:
        """FP16_MAX / FP32 range of the finite values (inf for an all-zero tensor)."""
        return FP16_MAX / self.fp32_amax if self.fp32_amax > 0 else math.inf

    @property
    def flags(self) -> list[str]:
        """Why this tensor needs FP32: 'range' (headroom < 2x) and/or 'fp16-inf' (origin)."""
        out = []
        if self.headroom < HEADROOM_LIMIT:
            out.append("range")
        if self.fp16_origin:
            out.append("fp16-inf")
        return out


@dataclass
class Fp16Report:
    """The range table of a bundle, the pins it implies and what the emulation showed."""

    rows: list[LayerRange]
    pins: dict[str, set[str]]
    frames: list[str]
    rounds: int
    residual_frames: int  # frames whose emulation still has new inf/NaN with the final pins

    def sorted_rows(self) -> list[LayerRange]:
        """Rows by headroom, smallest first (flagged rows lead)."""
        return sorted(self.rows, key=lambda r: (not r.flags, r.headroom, r.tracked.tensor))


@dataclass(frozen=True)
class StageStats:
    """Per tracked tensor of one stage on one frame: max |finite value|, NaN and inf counts."""

    amax: np.ndarray
    nans: np.ndarray
    infs: np.ndarray

    def new_nonfinite(self, reference: StageStats) -> np.ndarray:
        """Tensors with more NaN than in ``reference`` (the FP32 run), or with inf where the
        reference has none: a tensor that holds -inf by design (an attention mask) only changes
        its count when a rounded value flips a mask decision, which is no overflow."""
        return (self.nans > reference.nans) | ((self.infs > 0) & (reference.infs == 0))


def float_tensors(model: onnx.ModelProto) -> set[str]:
    """Names of the float32 values of a graph (inputs, node outputs, initializers), from ONNX
    shape inference."""
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    values = [*graph.input, *graph.output, *graph.value_info]
    names = {v.name for v in values if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    names |= {i.name for i in graph.initializer if i.data_type == TensorProto.FLOAT}
    return names


def tracked_tensors(model: onnx.ModelProto, stage: str) -> list[TrackedTensor]:
    """Float graph inputs and float outputs of every non-Constant node, in graph order."""
    floats = float_tensors(model)
    graph = model.graph
    initialisers = {i.name for i in graph.initializer}
    tracked = [
        TrackedTensor(stage, v.name, "", "input")
        for v in graph.input
        if v.name in floats and v.name not in initialisers
    ]
    for node in graph.node:
        if node.op_type == "Constant":
            continue
        tracked += [
            TrackedTensor(stage, out, node_name(node), node.op_type)
            for out in node.output
            if out and out in floats
        ]
    return tracked


def to_fp16_storage(values: np.ndarray) -> np.ndarray:
    """float32 values as TensorRT stores FP16 weights: finite values clamped to +-65504, then
    rounded to float16 (infinities stay infinite)."""
    clamped = np.where(np.isfinite(values), np.clip(values, -FP16_MAX, FP16_MAX), values)
    return clamped.astype(np.float16).astype(np.float32)


def emulate_fp16(model: onnx.ModelProto, fp32_nodes: Iterable[str] = ()) -> onnx.ModelProto:
    """``model`` with FP16 storage emulated (see module docstring); same I/O names and types.

    Nodes named in ``fp32_nodes`` read unrounded graph inputs, weights and constants and write
    unrounded outputs, like a TensorRT layer pinned to FP32."""
    pinned = set(fp32_nodes)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    floats = float_tensors(model)
    rounded: dict[str, str] = {}  # graph input / weight / constant -> its FP16-storage copy
    new_initialisers = []
    for init in graph.initializer:
        if init.data_type == TensorProto.FLOAT:
            copy = numpy_helper.from_array(
                to_fp16_storage(numpy_helper.to_array(init)), f"{init.name}::fp16"
            )
            new_initialisers.append(copy)
            rounded[init.name] = copy.name
    graph.initializer.extend(new_initialisers)
    nodes: list[onnx.NodeProto] = []

    def round_trip(source: str, target: str) -> None:
        nodes.append(
            helper.make_node(
                "Cast",
                [source],
                [f"{target}::half"],
                name=f"{target}::to_fp16",
                to=TensorProto.FLOAT16,
            )
        )
        nodes.append(
            helper.make_node(
                "Cast",
                [f"{target}::half"],
                [target],
                name=f"{target}::to_fp32",
                to=TensorProto.FLOAT,
            )
        )

    initialisers = {i.name for i in graph.initializer}
    for value in graph.input:
        if value.name in floats and value.name not in initialisers:
            rounded[value.name] = f"{value.name}::fp16"
            round_trip(value.name, rounded[value.name])
    for node in graph.node:
        if node.op_type == "Constant":
            nodes.append(node)
            value = next((a for a in node.attribute if a.name == "value"), None)
            if value is not None and value.t.data_type == TensorProto.FLOAT:
                array = to_fp16_storage(numpy_helper.to_array(value.t))
                name = f"{node.output[0]}::fp16"
                nodes.append(
                    helper.make_node(
                        "Constant",
                        [],
                        [name],
                        name=f"{name}::node",
                        value=numpy_helper.from_array(array, name),
                    )
                )
                rounded[node.output[0]] = name
            continue
        if node_name(node) in pinned:  # FP32 outputs; an FP16 reader gets a rounded copy
            nodes.append(node)
            for out in node.output:
                if out and out in floats:
                    rounded[out] = f"{out}::fp16"
                    round_trip(out, rounded[out])
            continue
        node.input[:] = [rounded.get(i, i) for i in node.input]
        outputs = list(node.output)
        for index, out in enumerate(outputs):
            if out and out in floats:
                node.output[index] = f"{out}::fp32"
        nodes.append(node)
        for out in outputs:
            if out and out in floats:
                round_trip(f"{out}::fp32", out)
    used = {name for node in nodes for name in node.input} | {o.name for o in graph.output}
    nodes = [n for n in nodes if n.op_type != "Constant" or n.output[0] in used]
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return model


def with_range_outputs(model: onnx.ModelProto, tensors: Sequence[str]) -> onnx.ModelProto:
    """``model`` plus three scalar outputs per tensor T, computed inside the graph (no tensor
    leaves ONNX Runtime): ``amax::T`` max |finite value|, ``nan::T`` and ``inf::T`` counts."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    for t in tensors:
        graph.node.extend([
            helper.make_node("IsNaN", [t], [f"{t}::isnan"]),
            helper.make_node("IsInf", [t], [f"{t}::isinf"]),
            helper.make_node("Or", [f"{t}::isnan", f"{t}::isinf"], [f"{t}::bad"]),
            helper.make_node("Where", [f"{t}::bad", ZERO, t], [f"{t}::finite"]),
            helper.make_node("Abs", [f"{t}::finite"], [f"{t}::abs"]),
            helper.make_node("ReduceMax", [f"{t}::abs"], [f"{AMAX}{t}"], keepdims=0),
            helper.make_node("Cast", [f"{t}::isnan"], [f"{t}::nan_f"], to=TensorProto.FLOAT),
            helper.make_node("ReduceSum", [f"{t}::nan_f"], [f"{NANS}{t}"], keepdims=0),
            helper.make_node("Cast", [f"{t}::isinf"], [f"{t}::inf_f"], to=TensorProto.FLOAT),
            helper.make_node("ReduceSum", [f"{t}::inf_f"], [f"{INFS}{t}"], keepdims=0),
        ])  # fmt: skip
        graph.output.extend(
            helper.make_tensor_value_info(f"{prefix}{t}", TensorProto.FLOAT, [])
            for prefix in (AMAX, NANS, INFS)
        )
    graph.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), ZERO))
    return model


class StageRunner:
    """One stage's graph on ONNX Runtime returning its outputs and its tracked tensors' stats."""

    def __init__(
        self, model: onnx.ModelProto, tracked: Sequence[TrackedTensor], threads: int | None = None
    ) -> None:
        self.outputs = [o.name for o in model.graph.output]
        self.tracked = list(tracked)
        self._stats = [f"{p}{t.tensor}" for p in (AMAX, NANS, INFS) for t in self.tracked]
        instrumented = with_range_outputs(model, [t.tensor for t in self.tracked])
        with tempfile.TemporaryDirectory() as tmp:  # ORT takes graphs over 2 GB only from files
            path = Path(tmp) / "stage.onnx"
            onnx.save(instrumented, str(path))
            self.session = create_session(path, threads)

    def run(self, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], StageStats]:
        """Stage outputs by name, and the stats of every tracked tensor."""
        results = self.session.run([*self.outputs, *self._stats], feeds)
        n, k = len(self.outputs), len(self.tracked)
        stats = np.array(results[n:], np.float64).reshape(3, k)
        return dict(zip(self.outputs, results[:n], strict=True)), StageStats(*stats)


def calibration_frames(
    bundle: ModelBundle, scenes: int, seed: int = DEFAULT_SEED
) -> list[tuple[str, np.ndarray]]:
    """Encoder inputs: ``scenes`` synthetic scenes of ``seed`` and adversarial frames (black,
    white, 1-pixel and 8-pixel max-contrast stripes, uniform noise), through the letterbox."""
    from ..train.synthetic import render_scene

    h, w = bundle.input_h, bundle.input_w
    meta = FrameMeta.letterbox(h, w, h, w)
    images = [(f"scene {seed}/{i}", render_scene(seed, i, h, w).image) for i in range(scenes)]
    columns = np.arange(w)[None, :, None]
    rows = np.arange(h)[:, None, None]
    stripes = {
        "stripes 1px": (columns % 2) * 255,
        "stripes 8px": ((rows // 8) % 2) * 255,
        "checker 1px": ((rows + columns) % 2) * 255,
    }
    images += [
        ("black", np.zeros((h, w, 3), np.uint8)),
        ("white", np.full((h, w, 3), 255, np.uint8)),
    ]
    images += [
        (name, np.broadcast_to(v, (h, w, 3)).astype(np.uint8)) for name, v in stripes.items()
    ]
    noise = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    images.append(("noise", noise))
    return [(name, letterbox(image, "rgb8", meta, bundle.pad_value)) for name, image in images]


def _origins(
    model: onnx.ModelProto, tracked: Sequence[TrackedTensor], bad: np.ndarray
) -> np.ndarray:
    """Per tracked tensor: bad here while every tracked input of its node is good."""
    index = {t.tensor: i for i, t in enumerate(tracked)}
    producers = {node_name(n): n for n in model.graph.node}
    origin = bad.copy()
    for i, t in enumerate(tracked):
        if bad[i] and t.node:
            inputs = [index[x] for x in producers[t.node].input if x in index]
            origin[i] = not bad[inputs].any()
    return origin


def _readers(model: onnx.ModelProto) -> dict[str, list[str]]:
    """tensor -> names of the nodes that read it."""
    readers: dict[str, list[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node_name(node))
    return readers


def _unpinned_feeders(model: onnx.ModelProto, nodes: set[str], pinned: set[str]) -> set[str]:
    """The nearest unpinned nodes upstream of ``nodes``, walking through pinned ones: what to
    pin next when a pinned node still produces a new inf/NaN from inputs rounded upstream."""
    made_by = {out: n for n in model.graph.node if n.op_type != "Constant" for out in n.output}
    by_name = {node_name(n): n for n in model.graph.node}
    found: set[str] = set()
    stack, seen = list(nodes), set(nodes)
    while stack:
        for tensor in by_name[stack.pop()].input:
            if tensor not in made_by or node_name(made_by[tensor]) in seen:
                continue
            feeder = node_name(made_by[tensor])
            seen.add(feeder)
            if feeder in pinned:
                stack.append(feeder)
            else:
                found.add(feeder)
    return found


def _run_chain(
    bundle: ModelBundle, runners: dict[str, StageRunner], tensor: np.ndarray
) -> dict[str, StageStats]:
    """Encoder then decoder on one encoder input; the stats of every stage."""
    values = {bundle.image_tensor: tensor}
    stats: dict[str, StageStats] = {}
    for stage in bundle.stages:
        outputs, stats[stage.name] = runners[stage.name].run(
            {t.name: values[t.name] for t in stage.inputs}
        )
        values.update(outputs)
    return stats


def check_bundle(
    bundle: ModelBundle,
    frames: Sequence[tuple[str, np.ndarray]],
    threads: int | None = None,
    log: Callable[[str], None] = print,
) -> Fp16Report:
    """Range table, pins and emulation verdict of ``bundle`` on encoder inputs ``frames``."""
    models = {s.name: onnx.load(str(s.path)) for s in bundle.stages}
    tracked = {name: tracked_tensors(m, name) for name, m in models.items()}
    rows = {name: [LayerRange(t) for t in ts] for name, ts in tracked.items()}
    fp32 = {n: StageRunner(models[n], tracked[n], threads) for n in models}
    reference = [_run_chain(bundle, fp32, tensor) for _, tensor in frames]
    for stats in reference:
        for name, stage_stats in stats.items():
            bad = (stage_stats.nans > 0) | (stage_stats.infs > 0)
            for row, amax, nonfinite in zip(rows[name], stage_stats.amax, bad, strict=True):
                row.fp32_amax = max(row.fp32_amax, float(amax))
                row.fp32_nonfinite += int(nonfinite)

    pins: dict[str, set[str]] = {n: set() for n in models}
    for name, model in models.items():
        readers = _readers(model)
        for row in rows[name]:
            if "range" in row.flags:
                pins[name].update([row.tracked.node] if row.tracked.node else [])
                pins[name].update(readers.get(row.tracked.tensor, []))
    rounds = 0
    while True:
        rounds += 1
        log(f"fp16 emulation, round {rounds}: {sum(map(len, pins.values()))} nodes pinned to FP32")
        fp16 = {
            n: StageRunner(emulate_fp16(models[n], pins[n]), tracked[n], threads) for n in models
        }
        for row in (r for stage_rows in rows.values() for r in stage_rows):
            row.fp16_amax, row.fp16_new_nonfinite = 0.0, 0
        residual, origins = 0, {n: set() for n in models}
        for (_, tensor), ref in zip(frames, reference, strict=True):
            stats = _run_chain(bundle, fp16, tensor)
            frame_bad = False
            for name, stage_stats in stats.items():
                bad = stage_stats.new_nonfinite(ref[name])
                frame_bad |= bool(bad.any())
                first = _origins(models[name], tracked[name], bad)
                for row, amax, new, origin in zip(
                    rows[name], stage_stats.amax, bad, first, strict=True
                ):
                    row.fp16_amax = max(row.fp16_amax, float(amax))
                    row.fp16_new_nonfinite += int(new)
                    if origin and row.tracked.node:
                        row.fp16_origin += 1
                        origins[name].add(row.tracked.node)
            residual += frame_bad
        added = {
            n: (origins[n] - pins[n]) | _unpinned_feeders(models[n], origins[n] & pins[n], pins[n])
            for n in models
        }
        if not residual or not any(added.values()) or rounds == MAX_ROUNDS:
            break
        for n in models:
            pins[n] |= added[n]
    for name in models:
        for row in rows[name]:
            row.pinned = row.tracked.node in pins[name]
    return Fp16Report(
        rows=[r for name in models for r in rows[name]],
        pins=pins,
        frames=[name for name, _ in frames],
        rounds=rounds,
        residual_frames=residual,
    )


def format_table(report: Fp16Report, top: int = 20) -> str:
    """The ``top`` rows with the least headroom (all flagged rows at least) as text."""
    ordered = report.sorted_rows()
    shown = ordered[: max(top, sum(1 for r in ordered if r.flags))]
    lines = [
        f"{'stage':8s} {'headroom':>9s} {'fp32 max':>11s} {'fp16 max':>11s} "
        f"{'op':22s} {'pin':3s} {'flag':14s} node"
    ]
    for r in shown:
        headroom = f"{r.headroom:9.1f}" if math.isfinite(r.headroom) else f"{'inf':>9s}"
        lines.append(
            f"{r.tracked.stage:8s} {headroom} {r.fp32_amax:11.4g} {r.fp16_amax:11.4g} "
            f"{r.tracked.op:22s} {'yes' if r.pinned else '':3s} {','.join(r.flags):14s} "
            f"{r.tracked.node or r.tracked.tensor}"
        )
    if len(ordered) > len(shown):
        lines.append(f"... {len(ordered) - len(shown)} more tensors with more headroom")
    return "\n".join(lines)


def write_csv(report: Fp16Report, path: str | Path) -> Path:
    """Every row, sorted by headroom, as CSV."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                "stage",
                "node",
                "op",
                "tensor",
                "fp32_amax",
                "fp16_amax",
                "headroom",
                "fp32_nonfinite_frames",
                "fp16_new_nonfinite_frames",
                "fp16_origin_frames",
                "pinned",
                "flags",
            ]
        )
        for r in report.sorted_rows():
            t = r.tracked
            writer.writerow(
                [
                    t.stage,
                    t.node,
                    t.op,
                    t.tensor,
                    f"{r.fp32_amax:.6g}",
                    f"{r.fp16_amax:.6g}",
                    f"{r.headroom:.6g}",
                    r.fp32_nonfinite,
                    r.fp16_new_nonfinite,
                    r.fp16_origin,
                    int(r.pinned),
                    " ".join(r.flags),
                ]
            )
    return path


def write_emulated_bundle(
    bundle: ModelBundle, pins: dict[str, set[str]], out: str | Path
) -> ModelBundle:
    """A runnable copy of ``bundle`` in ``out`` whose stages are FP16-emulated graphs (with the
    pins applied), e.g. to measure FP16 accuracy through the CPU runtime."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stages: list[StageSpec] = []
    for stage in bundle.stages:
        path = out / stage.path.name
        onnx.save(emulate_fp16(onnx.load(str(stage.path)), pins.get(stage.name, ())), str(path))
        stages.append(replace(stage, path=path, sha256=sha256_file(path)))
    emulated = replace(
        bundle,
        root=out,
        stages=tuple(stages),
        source={**bundle.source, "fp16_emulation_of": str(bundle.root)},
        variants={},  # they derive from the original stages, not from these
    )
    emulated.save()
    return emulated


def accuracy(
    bundle: ModelBundle, pins: dict[str, set[str]], data: str | Path, limit: int | None = None
) -> dict[str, dict]:
    """Mask AP and PQ of ``bundle`` in FP32 and in the FP16 emulation on a COCO folder."""
    from ..eval.evaluate import evaluate_bundle

    with tempfile.TemporaryDirectory() as tmp:
        emulated = write_emulated_bundle(bundle, pins, tmp)
        return {
            "fp32": evaluate_bundle(bundle.root, data, limit),
            "fp16": evaluate_bundle(emulated.root, data, limit),
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst fp16-check``."""
    parser.add_argument("bundle", help="model bundle folder (bundle.json + stage ONNX files)")
    parser.add_argument(
        "--frames",
        type=int,
        default=16,
        help="held-out synthetic scenes (6 adversarial frames are always added)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_SEED,
        help="seed of the scenes: one not used in training (default 2)",
    )
    parser.add_argument(
        "--out", type=Path, help="write the whole table as CSV (default: print only)"
    )
    parser.add_argument("--top", type=int, default=20, help="rows to print (flagged rows always)")
    parser.add_argument(
        "--write-pins",
        action="store_true",
        help=f"record the flagged nodes in BUNDLE/{PRECISION_FILE} (the strongly typed build "
        "takes its FP32 islands from the FP16 graph instead)",
    )
    parser.add_argument(
        "--eval",
        metavar="DATA",
        help="also compare mask AP / PQ, FP32 vs FP16 emulation, on a COCO folder "
        "('compactinst synth' layout; default: no accuracy comparison)",
    )
    parser.add_argument(
        "--eval-limit", type=int, help="evaluate only the first N images (default: all)"
    )
    parser.add_argument("--threads", type=int, help="ONNX Runtime threads (default: all cores)")


def run(args: argparse.Namespace) -> int:
    """Print the range table (and AP/PQ); exit 1 when inf/NaN remain in FP16 with the pins."""
    from ..cli import warn

    if args.frames < 0:
        raise ConfigError(f"--frames {args.frames}: need 0 or more scenes")
    if args.eval_limit is not None and args.eval is None:
        warn("fp16-check", "--eval-limit has no effect without --eval DATA")
    bundle = ModelBundle.load(args.bundle)
    frames = calibration_frames(bundle, args.frames, args.seed)
    start = time.perf_counter()
    report = check_bundle(bundle, frames, args.threads, log=lambda m: print(m, file=sys.stderr))
    print(
        f"{bundle.name} [{bundle.fingerprint}]: {len(report.rows)} float tensors, "
        f"{len(frames)} frames ({args.frames} scenes of seed {args.seed} + "
        f"{len(frames) - args.frames} adversarial), {time.perf_counter() - start:.0f} s"
    )
    print(format_table(report, args.top))
    flagged = [r for r in report.rows if r.flags]
    pinned = {n: sorted(p) for n, p in report.pins.items()}
    print(
        f"flagged tensors: {len(flagged)}; FP32 pins: "
        + ", ".join(f"{n} {len(p)}" for n, p in pinned.items())
    )
    if report.residual_frames:
        print(
            f"FP16 emulation: {report.residual_frames} frames still produce inf/NaN that FP32 "
            f"does not, after {report.rounds} rounds of pins"
        )
    else:
        print(f"FP16 emulation: no inf/NaN beyond FP32's on any frame ({report.rounds} rounds)")
    if args.out:
        print(f"table: {write_csv(report, args.out)}")
    if args.write_pins:
        provenance = {
            "tool": "compactinst fp16-check",
            "headroom_limit": HEADROOM_LIMIT,
            "frames": report.frames,
            "flagged": {
                n: sorted({r.tracked.node for r in flagged if r.tracked.stage == n})
                for n in report.pins
            },
        }
        print(f"pins: {save_fp32_layers(bundle, report.pins, provenance)}")
    if args.eval:
        result = accuracy(bundle, report.pins, args.eval, args.eval_limit)
        for name, metrics in result.items():
            print(
                f"{name}: mask AP {metrics['mask_ap']['AP']:.2f}, "
                f"PQ {metrics['panoptic']['all']['PQ']:.2f} on {metrics['images']} images"
            )
        fp16, fp32 = result["fp16"], result["fp32"]
        delta_ap = fp16["mask_ap"]["AP"] - fp32["mask_ap"]["AP"]
        delta_pq = fp16["panoptic"]["all"]["PQ"] - fp32["panoptic"]["all"]["PQ"]
        print(f"FP16 - FP32: mask AP {delta_ap:+.2f}, PQ {delta_pq:+.2f}")
        print(json.dumps(result, indent=1, default=float), file=sys.stderr)
    return 1 if report.residual_frames else 0
