"""``python -m compactinst_ros.eval.acceptance_spread``: the evidence the acceptance limits are
derived from (docs/gpu.md, "Acceptance check after every build").

On the bundle's golden inputs it collects the decoder outputs of every implementation of each
precision's typed graph that runs on this host, and of deliberately broken engines, and records
per engine the acceptance statistics (``acceptance.frame_statistics``) against that precision's
golden outputs:

* healthy: ONNX Runtime as written and fused (``variants.runs_fused`` picks the golden one) and
  OpenVINO's CPU plugin under each ``ONEDNN_MAX_CPU_ISA`` the host has (``host_isas``), one
  subprocess each since oneDNN reads the variable once, at load;
* broken (``BROKEN``): edits of the typed graphs run on ONNX Runtime: a wrong scale on one
  layer, an RGB/BGR channel swap, an FP16 overflow, a dropped layer and a half-pixel resize
  error;
* the INT8 CPU graph, another quantisation of the model, to show where it falls.

With ``--data`` (a held-out COCO folder, ``compactinst synth``) it also measures each engine's
mask AP and PQ there, so that "healthy" and "broken" are accuracy, not assumption. Each limit is
derived halfway between the worst healthy engine and the best broken engine the statistic is
set to refuse (``REFUSES``). ``--out`` receives ``acceptance_spread.json``, a markdown table
and a plot; re-runnable on any bundle and host, and nothing in it is read at run time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backends import acceptance
from ..backends.base import BackendOptions
from ..backends.openvino import ISA_VARIABLE, host_isas
from ..backends.ort import OrtBackend, create_session
from ..bundle import DECODER_OUTPUTS, ModelBundle, default_bundle_path
from ..errors import ConfigError
from ..structures import PostprocessOptions

if TYPE_CHECKING:
    import onnx

#: this module, run as the OpenVINO worker
MODULE = "compactinst_ros.eval.acceptance_spread"


# ---- broken engines: edits of a typed stage graph -------------------------------------------


def _consumers(model: onnx.ModelProto, name: str, new: str) -> None:
    """Every node input reading ``name`` reads ``new`` instead (a graph output cannot)."""
    for node in model.graph.node:
        for i, x in enumerate(node.input):
            if x == name:
                node.input[i] = new
    for out in model.graph.output:
        if out.name == name:
            raise ConfigError(f"cannot rewire graph output {name}")


def _middle(items: list) -> Any:
    """The middle one of ``items``; ConfigError when there is none (another model's graph)."""
    if not items:
        raise ConfigError("the graph has no node this edit changes")
    return items[len(items) // 2]


#: the layer ``wrong_scale`` scales: the last convolution of the backbone's third stage. Its
#: scale carries on through the frozen BatchNorm, where a convolution before a GroupNorm (the
#: pixel decoder's) would be normalised back, and a scale at the middle layer by name
#: (layer4.0/conv1) moved no shown decision on the golden inputs
SCALED_LAYER = "/backbone/layer3/layer3.1/conv2/Conv"


def wrong_scale(model: onnx.ModelProto, factor: float = 4.0) -> onnx.ModelProto:
    """The weights of SCALED_LAYER (where the graph has none, its middle convolution by name: the
    same layer in every precision's graph) times ``factor`` (their dequantize scale where
    quantized): a layer whose scale the engine got wrong."""
    from onnx import numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    convs = sorted(_weighted(model, "Conv"), key=lambda n: n.name)
    conv = next((n for n in convs if n.name == SCALED_LAYER), None) or _middle(convs)
    weight = conv.input[1]
    source = producers.get(weight)
    while source is not None and source.op_type in ("Cast", "Identity"):
        weight = source.input[0]
        source = producers.get(weight)
    if source is not None and source.op_type == "DequantizeLinear":
        weight = source.input[1]  # the scale
    tensor = inits[weight]
    value = numpy_helper.to_array(tensor)
    tensor.CopyFrom(numpy_helper.from_array((value * factor).astype(value.dtype), weight))
    return model


def swapped_channels(model: onnx.ModelProto) -> onnx.ModelProto:
    """The image's channels reversed before the first layer: an RGB engine fed BGR."""
    import onnx
    from onnx import helper

    image = model.graph.input[0].name
    swapped = image + "_swapped"
    indices = image + "_bgr"
    model.graph.initializer.append(
        onnx.numpy_helper.from_array(np.array([2, 1, 0], np.int64), indices)
    )
    _consumers(model, image, swapped)
    model.graph.node.insert(0, helper.make_node("Gather", [image, indices], [swapped], axis=1))
    return model


def _weighted(model: onnx.ModelProto, op: str) -> list:
    """The ``op`` nodes whose second input is a constant weight (directly, or dequantized or
    cast from one): a model's layers, not the products of two activations."""
    inits = {t.name for t in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}

    def constant(name: str) -> bool:
        node = producers.get(name)
        if node is not None and node.op_type in ("DequantizeLinear", "Cast", "Identity"):
            return constant(node.input[0])
        return name in inits

    return [n for n in model.graph.node if n.op_type == op and constant(n.input[1])]


def fp16_overflow(model: onnx.ModelProto, reach: float = 0.5) -> onnx.ModelProto:
    """The stage's last output overflows: its values above ``reach`` of its largest magnitude
    (in that frame) become +-inf, as where a layer's range exceeds 65504 at the engine's
    scale. Placed on the decoder's output, it is the same edit in every precision's graph
    (inside an INT8 graph, or on the encoder's output, the next QuantizeLinear saturates it:
    measured harmless there)."""
    import onnx
    from onnx import TensorProto, helper

    name = model.graph.output[-1].name
    dtype = model.graph.output[-1].type.tensor_type.elem_type
    raw = name + "_before_overflow"
    for node in model.graph.node:
        node.output[:] = [raw if o == name else o for o in node.output]
        node.input[:] = [raw if i == name else i for i in node.input]
    t = {k: f"{name}_{k}" for k in ("x", "abs", "peak", "reach", "limit", "over", "inf", "big",
                                     "y")}  # fmt: skip
    model.graph.initializer.extend([
        onnx.numpy_helper.from_array(np.array(reach, np.float32), t["reach"]),
        onnx.numpy_helper.from_array(np.array(np.inf, np.float32), t["inf"]),
    ])  # fmt: skip
    model.graph.node.extend([
        helper.make_node("Cast", [raw], [t["x"]], to=TensorProto.FLOAT),
        helper.make_node("Abs", [t["x"]], [t["abs"]]),
        helper.make_node("ReduceMax", [t["abs"]], [t["peak"]], keepdims=1),
        helper.make_node("Mul", [t["peak"], t["reach"]], [t["limit"]]),
        helper.make_node("Greater", [t["abs"], t["limit"]], [t["over"]]),
        helper.make_node("Mul", [t["x"], t["inf"]], [t["big"]]),
        helper.make_node("Where", [t["over"], t["big"], t["x"]], [t["y"]]),
        helper.make_node("Cast", [t["y"]], [name], to=dtype),
    ])  # fmt: skip
    return model


def dropped_layer(model: onnx.ModelProto) -> onnx.ModelProto:
    """The middle residual addition passes its first input only: the branch it adds (a whole
    block's output) is dropped, as by a fusion that lost a layer."""
    initial = {t.name for t in model.graph.initializer}
    constants = {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    shapes = _shapes(model)
    adds = [
        n for n in model.graph.node
        if n.op_type == "Add" and len(n.input) == 2
        and not any(x in initial or x in constants for x in n.input)
        and shapes.get(n.input[0]) is not None and shapes.get(n.input[0]) == shapes.get(n.input[1])
    ]  # fmt: skip
    add = _middle(adds)
    _consumers(model, add.output[0], add.input[0])
    model.graph.node.remove(add)
    return model


def _shapes(model: onnx.ModelProto) -> dict[str, tuple]:
    """Tensor name -> inferred shape."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    return {
        v.name: tuple(d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim)
        for v in inferred.graph.value_info
    }


def half_pixel_resize(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every Resize samples at corner-aligned ("asymmetric") instead of half-pixel coordinates:
    the classic off-by-half-a-pixel of a resize implemented with the other convention."""
    found = False
    for node in model.graph.node:
        if node.op_type == "Resize":
            for attr in node.attribute:
                if attr.name == "coordinate_transformation_mode":
                    attr.s = b"asymmetric"
                    found = True
    if not found:
        raise ConfigError("the graph has no half-pixel Resize")
    return model


@dataclass(frozen=True)
class Break:
    """A deliberately broken engine: ``edit`` applied to the typed graphs of ``stages``."""

    edit: Callable
    stages: tuple[str, ...]


BROKEN: dict[str, Break] = {
    "wrong scale": Break(wrong_scale, ("encoder",)),
    "swapped channels": Break(swapped_channels, ("encoder",)),
    "fp16 overflow": Break(fp16_overflow, ("decoder",)),
    "dropped layer": Break(dropped_layer, ("decoder",)),
    "half-pixel resize": Break(half_pixel_resize, ("encoder", "decoder")),
}


class GraphBackend(OrtBackend):
    """ONNX Runtime on a precision's typed graphs, as written or fused, optionally edited
    (``Break``): a stand-in for an engine built from them."""

    def __init__(
        self,
        bundle: ModelBundle,
        options: BackendOptions,
        fused: bool | None = None,
        broken: Break | None = None,
    ) -> None:
        """``fused``: None = as the golden outputs were made (``variants.runs_fused``)."""
        self._fused = fused
        self._broken = broken
        self._stages = iter(s.name for s in bundle.stages)
        super().__init__(bundle, options)

    def _open_stage(self, graph: Path | bytes, options: BackendOptions, fused: bool) -> Any:
        """The stage's session, the edit applied where ``broken`` names the stage."""
        stage = next(self._stages)
        data = graph if isinstance(graph, bytes) else Path(graph).read_bytes()
        if self._broken is not None and stage in self._broken.stages:
            import onnx

            data = self._broken.edit(onnx.load_from_string(data)).SerializeToString()
        chosen = fused if self._fused is None else self._fused
        return create_session(data, options.threads, None, chosen)


def decoder_outputs(backend: OrtBackend, cases: Sequence) -> list[dict[str, np.ndarray]]:
    """The backend's decoder outputs on each golden case's image, as the golden file holds them."""
    return [
        acceptance.graph_outputs(backend.run_decoder(backend.run_encoder(case.image))[0])
        for case in cases
    ]


def accuracy(backend: OrtBackend, bundle: ModelBundle, data: Path, limit: int) -> dict:
    """Mask AP and PQ (percent) of ``backend`` on ``limit`` held-out images of ``data``, as
    ``compactinst evaluate`` measures them (its thresholds), with no acceptance check."""
    from ..image_formats import read_image
    from ..postprocess.fast import fast_postprocess
    from ..preprocess import letterbox
    from ..structures import FrameMeta, OutputSet
    from .evaluate import AP_SCORE_THRESHOLD
    from .groundtruth import GroundTruth
    from .metrics import Evaluator

    gt = GroundTruth(data / "instances.json", data / "panoptic.json", data / "panoptic")
    entries = sorted(gt.images.values(), key=lambda e: int(e["id"]))[:limit]
    gt.match(list(range(len(entries))), mode="index")
    ap_eval, pq_eval = Evaluator(gt), Evaluator(gt)
    base = PostprocessOptions()
    ap_options = replace(base, score_threshold=AP_SCORE_THRESHOLD)
    for i, entry in enumerate(entries):
        image = read_image(data / "images" / entry["file_name"])
        meta = FrameMeta.letterbox(*image.shape[:2], bundle.input_h, bundle.input_w)
        tensor = letterbox(image, "bgr8", meta, bundle.pad_value)[0][None]
        raw = backend.run_decoder(backend.run_encoder(tensor))[0]
        for evaluator, options in ((ap_eval, ap_options), (pq_eval, base)):
            evaluator.add(i, fast_postprocess(raw, meta, bundle.labels, options, OutputSet()))
    ap, pq = ap_eval.result(), pq_eval.result()
    return {"images": len(entries), "AP": ap["mask_ap"]["AP"], "PQ": pq["panoptic"]["all"]["PQ"]}


def case_statistics(cases: Sequence, outputs: Sequence[dict]) -> list[dict[str, float]]:
    """``acceptance.frame_statistics`` of each golden case against the row's outputs
    (``finite`` 0 and nothing else where an output holds inf or NaN: refused for that alone)."""
    stats = []
    for case, got in zip(cases, outputs, strict=True):
        if not all(np.isfinite(got[n]).all() for n in DECODER_OUTPUTS):
            stats.append({"finite": 0.0})
            continue
        paired = acceptance.matched(case.outputs, got)
        want_l, want_m = (np.asarray(case.outputs[n], np.float32)[0] for n in DECODER_OUTPUTS)
        got_l, got_m = (np.asarray(paired[n], np.float32)[0] for n in DECODER_OUTPUTS)
        stats.append({"finite": 1.0, **acceptance.frame_statistics(want_l, want_m, got_l, got_m)})
    return stats


def worst(row: dict, key: str) -> float | None:
    """The row's worst value of statistic ``key`` over its golden cases (None: not finite)."""
    at_least = acceptance.DECISION_METRICS[key][2]
    values = [c[key] for c in row["cases"] if key in c]
    if len(values) < len(row["cases"]):
        return None
    return min(values) if at_least else max(values)


#: decision statistic -> the broken engines it is set to refuse (``BROKEN`` names): masks move
#: under structural errors, probabilities and shown/hidden decisions under a wrong scale, and
#: a swapped input changes everything; an overflow is refused for its inf/NaN alone
REFUSES = {
    "mask_iou": ("dropped layer", "half-pixel resize", "swapped channels"),
    "score": ("wrong scale", "dropped layer", "swapped channels"),
    "flip": ("wrong scale", "dropped layer", "swapped channels"),
    "semantic": ("swapped channels",),
}


def derive(rows: dict[str, dict]) -> dict[str, dict]:
    """Per decision statistic: the worst healthy value, the best value of the broken engines
    it is set to refuse (REFUSES), the limit halfway between and its margin on each side."""
    derived = {}
    for key, (metric, _, at_least) in acceptance.DECISION_METRICS.items():
        healthy = [worst(r, key) for r in rows.values() if r["group"] == "healthy"]
        targets = [worst(r, key) for r in rows.values()
                   if r["group"] == "broken" and r["kind"] in REFUSES[key]]  # fmt: skip
        targets = [v for v in targets if v is not None]
        edge = min(healthy) if at_least else max(healthy)
        best = max(targets) if at_least else min(targets)
        derived[key] = {"metric": metric, "healthy_worst": edge, "refuses": REFUSES[key],
                        "broken_best": best, "limit": (edge + best) / 2,
                        "margin": abs(edge - best) / 2}  # fmt: skip
    return derived


def verdicts(rows: dict[str, dict]) -> dict[str, bool]:
    """Per row: whether ``acceptance.check`` with the recorded tolerances accepts its outputs
    (as recorded: ``finite`` and the decision statistics of every case)."""
    tol = acceptance.DECISION_TOLERANCE
    result = {}
    for name, row in rows.items():
        ok = all(c.get("finite", 1.0) for c in row["cases"])
        for key, (_, field, at_least) in acceptance.DECISION_METRICS.items():
            value, limit = worst(row, key), getattr(tol, field)
            ok = ok and value is not None and (value >= limit if at_least else value <= limit)
        result[name] = ok
    return result


def _openvino_worker(bundle: ModelBundle, out: Path, data: Path | None, limit: int) -> None:
    """In a subprocess with the ISA set: OpenVINO's fp32 and int8 outputs (and accuracy)."""
    from ..backends.openvino import PRECISIONS, OpenVinoBackend

    class Unchecked(OpenVinoBackend):
        def _accept(self, advice: str) -> None:  # the statistics are what is measured
            return None

    result = {}
    for precision in PRECISIONS:
        if precision not in bundle.precisions:
            continue
        backend = Unchecked(bundle, BackendOptions(precision=precision))
        cases = bundle.golden_cases(precision)
        result[precision] = {
            "outputs": [
                {k: v.tolist() for k, v in o.items()} for o in decoder_outputs(backend, cases)
            ],
            "accuracy": accuracy(backend, bundle, data, limit) if data else None,
        }
    out.write_text(json.dumps(result))


def collect(bundle_path: Path, data: Path | None, limit: int, isas: Sequence[str]) -> dict:
    """Every row's statistics (and accuracy with ``data``)."""
    bundle = ModelBundle.load(bundle_path)
    rows: dict[str, dict] = {}

    def add(name: str, group: str, precision: str, outputs: list, acc: dict | None,
            kind: str = "") -> None:
        cases = bundle.golden_cases(precision)
        rows[name] = {"group": group, "kind": kind, "precision": precision, "accuracy": acc,
                      "cases": case_statistics(cases, outputs)}  # fmt: skip
        print(f"{name:40s} {acc}", file=sys.stderr, flush=True)

    def run(name: str, group: str, precision: str, backend: OrtBackend, kind: str = "") -> None:
        cases = bundle.golden_cases(precision)
        acc = accuracy(backend, bundle, data, limit) if data else None
        add(name, group, precision, decoder_outputs(backend, cases), acc, kind)

    from ..variants import runs_fused

    for precision in bundle.precisions:
        options = BackendOptions(precision=precision, int8_graph="tensorrt")
        golden_fused = runs_fused(precision)
        for fused in (golden_fused, not golden_fused):
            how = "fused" if fused else "as written"
            run(f"onnxruntime {precision} {how}", "healthy", precision,
                GraphBackend(bundle, options, fused=fused))  # fmt: skip
        if precision == "int8":
            cpu = BackendOptions(precision="int8", int8_graph="cpu")
            # another quantisation of the same model, not an implementation of the graph the
            # golden outputs come from: recorded to show where it falls, not in either group
            run("onnxruntime int8 cpu graph", "other graph", precision, GraphBackend(bundle, cpu))
        for label, broken in BROKEN.items():
            run(f"broken {precision} {label}", "broken", precision,
                GraphBackend(bundle, options, broken=broken), label)  # fmt: skip
    for isa in ("default", *isas):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "openvino.json"
            env = dict(os.environ)
            env.pop(ISA_VARIABLE, None)
            if isa != "default":
                env[ISA_VARIABLE] = isa
            command = [sys.executable, "-m", MODULE, str(bundle_path), "--openvino-worker",
                       str(out), "--limit", str(limit), *(["--data", str(data)] if data else [])]
            if subprocess.run(command, env=env).returncode != 0:
                print(f"OpenVINO does not run under {isa} here (its error above): no rows",
                      file=sys.stderr)  # fmt: skip
                continue
            found = json.loads(out.read_text())
        for precision, row in found.items():
            outputs = [{k: np.asarray(v, np.float32) for k, v in o.items()}
                       for o in row["outputs"]]  # fmt: skip
            add(f"openvino {precision} {isa}", "healthy", precision, outputs, row["accuracy"])
    return {"bundle": bundle.fingerprint, "cpu_isas": list(isas), "rows": rows,
            "derived": derive(rows), "accepted": verdicts(rows)}  # fmt: skip


def pooled(report: dict, earlier: Sequence[dict]) -> dict:
    """``report`` with its limits derived from its rows and those of ``earlier`` reports
    together (``derive``): each measurement is one draw of the healthy and broken spread."""
    rows = dict(report["rows"])
    for i, other in enumerate(earlier):
        rows.update({f"earlier {i + 1}: {name}": row for name, row in other["rows"].items()})
    return {**report, "pooled": len(earlier), "derived": derive(rows)}


def format_table(report: dict) -> str:
    """Markdown: per row its group, worst case of each decision statistic, held-out accuracy and
    the recorded tolerances' verdict; then per statistic the derivation of its limit."""
    keys = list(acceptance.DECISION_METRICS)
    lines = ["| implementation | group | " + " | ".join(keys) + " | AP | PQ | accepted |",
             "|---" * (len(keys) + 5) + "|"]  # fmt: skip
    for name, row in report["rows"].items():
        values = [worst(row, k) for k in keys]
        cells = ["inf/NaN" if v is None else f"{v:.3f}" for v in values]
        acc = row.get("accuracy") or {}
        ap, pq = (f"{acc[k]:.1f}" if k in acc else "" for k in ("AP", "PQ"))
        verdict = "yes" if report["accepted"][name] else "**no**"
        lines.append(f"| {name} | {row['group']} | " + " | ".join(cells)
                     + f" | {ap} | {pq} | {verdict} |")  # fmt: skip
    lines += ["", f"Limits derived from these rows and {report.get('pooled', 0)} earlier "
              "measurement(s):", "",
              "| statistic | worst healthy | best broken it refuses | limit (midpoint) "
              "| margin | recorded |", "|---|---|---|---|---|---|"]  # fmt: skip
    for key, entry in report["derived"].items():
        recorded = getattr(acceptance.DECISION_TOLERANCE, acceptance.DECISION_METRICS[key][1])
        lines.append(f"| {entry['metric']} | {entry['healthy_worst']:.3f} | "
                     f"{entry['broken_best']:.3f} | {entry['limit']:.3f} | "
                     f"{entry['margin']:.3f} | {recorded:g} |")  # fmt: skip
    return "\n".join(lines)


def write_plot(report: dict, path: Path) -> Path:
    """One panel per decision statistic: each row's worst case, healthy and broken apart (filled:
    the broken engines the statistic is set to refuse), and the recorded limit."""
    from .plots import pyplot, save_figure

    plt = pyplot()
    keys = list(acceptance.DECISION_METRICS)
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3.6))
    colours = {"healthy": "tab:green", "broken": "tab:red", "other graph": "tab:gray"}
    for ax, key in zip(axes, keys, strict=True):
        for i, group in enumerate(colours):
            rows = [r for r in report["rows"].values()
                    if r["group"] == group and worst(r, key) is not None]  # fmt: skip
            jitter = np.linspace(-0.15, 0.15, len(rows)) if len(rows) > 1 else [0.0]
            filled = [group != "broken" or r["kind"] in REFUSES[key] for r in rows]
            ax.scatter(np.add(i, jitter), [worst(r, key) for r in rows], s=16, label=group,
                       color=[colours[group] if f else "none" for f in filled],
                       edgecolors=colours[group])  # fmt: skip
        limit = getattr(acceptance.DECISION_TOLERANCE, acceptance.DECISION_METRICS[key][1])
        ax.axhline(limit, color="black", linestyle="--", linewidth=1, label="limit")
        ax.set_xticks(range(len(colours)), [g.replace(" ", "\n") for g in colours])
        ax.set_title(key.replace("_", " "))
    axes[0].legend(fontsize=7, loc="center left")
    fig.suptitle("Acceptance statistics on the golden inputs, worst golden case per engine")
    return Path(save_figure(plt, fig, path))


def main(argv: Sequence[str] | None = None) -> int:
    """Collect, write ``acceptance_spread.json`` and print the per-row worst cases."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path, nargs="?", default=default_bundle_path())
    parser.add_argument("--data", type=Path, help="held-out COCO folder: measure AP and PQ too")
    parser.add_argument("--limit", type=int, default=24, help="held-out images (default 24)")
    parser.add_argument("--out", type=Path, default=Path("out/acceptance_spread"),
                        help="folder for acceptance_spread.json, .md and .png")  # fmt: skip
    parser.add_argument(
        "--pool", type=Path, nargs="*", default=[],
        help="earlier acceptance_spread.json files (e.g. of the bundle's earlier graphs) whose "
        "rows the limits are derived from too",
    )  # fmt: skip
    parser.add_argument("--openvino-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.openvino_worker:
        _openvino_worker(ModelBundle.load(args.bundle), args.openvino_worker, args.data,
                         args.limit)  # fmt: skip
        return 0
    report = pooled(collect(args.bundle, args.data, args.limit, host_isas()),
                    [json.loads(path.read_text()) for path in args.pool])  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "acceptance_spread.json").write_text(json.dumps(report, indent=1) + "\n")
    table = format_table(report)
    (args.out / "acceptance_spread.md").write_text(table + "\n")
    write_plot(report, args.out / "acceptance_spread.png")
    print(table)
    print(f"wrote {args.out}/acceptance_spread.json, .md, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
