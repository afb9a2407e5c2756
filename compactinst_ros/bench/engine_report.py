"""``compactinst engine-report BUNDLE``: what a GPU will run, shown before it runs.

Each TensorRT-target typed graph of a bundle (FP16; INT8, the ``tensorrt`` graph) is parsed and
built by NVIDIA's own builder, TensorRT for RTX, ahead of time for the chosen compute
capabilities on this machine (no GPU needed; ``backends.rtx_build``), and the engine's layers
are read (``backends.engine_layers``): layers by type and datatype, fused attention, reformats,
bytes per frame (a layer model: what each kernel reads, holds constant and writes, once), FP32
bytes among them. Two checks follow the types through the engine: every quantized Conv and
weight GEMM of an INT8 engine reads Int8 (input and weights), and no normalisation computes in
half. ``--paper`` adds FastInst-D3 against CompactInst (random weights, FP16 decoders) at the
paper's 1024x2048, the decoder's bytes per frame under TensorRT's fusion: the paper measured
the decoder's DRAM traffic fall 64 % (5.74 -> 2.09 GB on an RTX A4000).

TensorRT for RTX is not the Jetson's TensorRT 10.3: its fusions can differ (docs/gpu.md, "What
the real builder shows"), which is why the report names the builder and its version.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends.engine_layers import EngineLayer, EngineSummary, layers_of_nodes, summarize
from ..backends.rtx_build import COMPUTE_CAPABILITIES
from ..bundle import ModelBundle, StageGraph, StageSpec

if TYPE_CHECKING:
    import onnx

#: the ONNX operators that normalise (a mean and variance over many values): FP32 in FP16 graphs
NORMALISING_OPS = ("ReduceMean", "LayerNormalization", "InstanceNormalization",
                   "GroupNormalization")  # fmt: skip
PRODUCT_OPS = ("Conv", "MatMul")
#: the paper's decoder comparison: configs, input size, the paper's DRAM traffic (GB per frame)
PAPER_CONFIGS = ("fastinst_r18_d3", "compactinst_r18")
PAPER_SIZE = (1024, 2048)
PAPER_DECODER_GB = {"fastinst_r18_d3": 5.74, "compactinst_r18": 2.09}
Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class StageReport:
    """One stage at one precision, built for one compute capability."""

    stage: str
    precision: str
    compute_capability: str
    summary: EngineSummary
    build_s: float
    #: what the type checks found (empty: every quantized product Int8, no half normalisation)
    issues: list[str] = field(default_factory=list)
    builder_errors: list[str] = field(default_factory=list)


def product_nodes(model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    """(quantized, unquantized) Conv and MatMul node names of a typed graph: quantized ones
    read DequantizeLinear outputs on both operands (an unquantized Conv can still read a
    dequantized activation that a quantized one shares)."""
    made_by = {o: n.op_type for n in model.graph.node for o in n.output}
    quantized, plain = [], []
    for node in model.graph.node:
        if node.op_type in PRODUCT_OPS:
            reads_dq = all(made_by.get(x) == "DequantizeLinear" for x in node.input[:2])
            (quantized if reads_dq else plain).append(node.name)
    return quantized, plain


def int8_product_issues(model: onnx.ModelProto, layers: Sequence[EngineLayer]) -> list[str]:
    """Quantized Convs and weight GEMMs of ``model`` whose engine layer does not read Int8
    activations and Int8 weights (the engine would run them in a float type)."""
    by_node = layers_of_nodes(layers)
    issues = []
    for name in product_nodes(model)[0]:
        found = by_node.get(name, [])
        if not found:
            issues.append(f"{name}: in no engine layer")
        elif not any(
            layer.reads("Int8") and any(w.datatype == "Int8" for w in layer.weights)
            for layer in found
        ):
            kinds = ", ".join(
                f"{layer.name} reads {sorted({t.datatype for t in layer.inputs})}"
                for layer in found
            )
            issues.append(f"{name}: no engine layer reads Int8 with Int8 weights ({kinds})")
    return issues


def half_normalisations(model: onnx.ModelProto, layers: Sequence[EngineLayer]) -> list[str]:
    """Normalisations that compute in half: the ONNX input is FP16, or it is an FP32 Cast
    that the engine does not run with the normalisation, and the kernel reads no Float (it
    would read half)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {
        v.name: v.type.tensor_type.elem_type
        for v in [*inferred.input, *inferred.value_info, *inferred.output]
    }
    made_by = {o: n for n in model.graph.node for o in n.output}
    casts_of: dict[tuple[str, ...], set[str]] = {}  # a tensor's Casts, by their inputs
    for cast_node in model.graph.node:
        if cast_node.op_type == "Cast":
            casts_of.setdefault(tuple(cast_node.input), set()).add(cast_node.name)
    by_node = layers_of_nodes(layers)
    issues = []
    for node in model.graph.node:
        if node.op_type not in NORMALISING_OPS:
            continue
        source = node.input[0]
        cast = made_by.get(source)
        is_cast = cast is not None and cast.op_type == "Cast"
        to = next((a.i for a in cast.attribute if a.name == "to"), 0) if is_cast else 0
        if (to or types.get(source)) == onnx.TensorProto.FLOAT16:
            issues.append(f"{node.name}: its ONNX input {source} is FP16")
            continue
        if not is_cast:
            continue
        # the builder merges equal casts of one tensor and keeps one of their names
        same = casts_of[tuple(cast.input)]
        for layer in by_node.get(node.name, []):
            if not same & set(layer.onnx_nodes) and not layer.reads("Float"):
                issues.append(
                    f"{node.name}: engine layer {layer.name} reads "
                    f"{sorted({t.datatype for t in layer.inputs})} without the Cast {cast.name}"
                )
    return issues


def stage_report(
    graph: StageGraph, stage: StageSpec, cc: str, trt: Any = None
) -> StageReport:
    """Build ``graph`` for ``cc`` with TensorRT for RTX and check its engine layers."""
    import onnx

    from ..backends.rtx_build import aot_build
    from ..backends.trt_build import parser_bytes

    start = time.perf_counter()
    engine = aot_build(graph, stage, cc, trt=trt)
    seconds = time.perf_counter() - start
    model = onnx.load_from_string(parser_bytes(graph))
    issues = half_normalisations(model, engine.layers)
    if graph.precision == "int8":
        issues += int8_product_issues(model, engine.layers)
    return StageReport(
        stage.name, graph.precision, cc, summarize(engine.layers), seconds, issues, engine.errors
    )


def bundle_reports(
    bundle: ModelBundle,
    precisions: Sequence[str] = ("fp16", "int8"),
    ccs: Sequence[str] = ("8.6",),
    log: Log = _stderr,
) -> list[StageReport]:
    """A StageReport per stage, precision (of those the bundle has) and compute capability."""
    from ..backends.rtx_build import import_tensorrt_rtx

    trt = import_tensorrt_rtx()
    reports = []
    for precision in [p for p in precisions if p in bundle.precisions]:
        target = "tensorrt" if precision == "int8" else None
        for stage in bundle.stages:
            graph = bundle.stage_graph(stage.name, precision, target)
            for cc in ccs:
                report = stage_report(graph, stage, cc, trt)
                log(f"built {stage.name} {precision} for sm {cc} in {report.build_s:.1f} s")
                reports.append(report)
    return reports


def paper_decoders(
    root: Path, size: tuple[int, int] = PAPER_SIZE, cc: str = "8.6", log: Log = _stderr
) -> dict[str, StageReport]:
    """FastInst-D3 and CompactInst (R18, random weights) decoders as FP16 engines at ``size``:
    config -> report. Bundles are exported under ``root`` on first use."""
    import onnx

    from .. import variants
    from ..backends.rtx_build import import_tensorrt_rtx
    from .models import placeholder_labels, random_bundle

    trt = import_tensorrt_rtx()
    out = {}
    for config in PAPER_CONFIGS:
        bundle = random_bundle(config, size, placeholder_labels(80), root, progress=log)
        stage = bundle.stage("decoder")
        model = onnx.load(str(stage.path))
        typed = variants.fp16_graph(model, (), bundle.boundary_tensors, bundle.image_tensor)
        data = variants.serialize(typed)
        out[config] = stage_report(StageGraph("decoder", "fp16", data, ""), stage, cc, trt)
        log(f"built the {config} decoder at {size[0]}x{size[1]} for sm {cc}")
    return out


def table(reports: Sequence[StageReport]) -> str:
    """The reports as a text table, FP16 and INT8 side by side per stage."""
    head = (f"{'stage':8s} {'prec':5s} {'sm':5s} {'layers':>6s} {'int8/prod':>9s} "
            f"{'mha':>4s} {'reform':>6s} {'MB/frame':>9s} {'FP32 MB':>8s}  checks")  # fmt: skip
    lines = [head]
    for r in reports:
        s = r.summary
        checks = "ok" if not (r.issues or r.builder_errors) else (
            f"{len(r.issues) + len(r.builder_errors)} issues"
        )
        lines.append(
            f"{r.stage:8s} {r.precision:5s} {r.compute_capability:5s} {s.layers:6d} "
            f"{s.int8_products:4d}/{s.products:<4d} {s.fused_attention:4d} {s.reformats:6d} "
            f"{s.bytes_per_frame / 1e6:9.2f} {s.float_bytes / 1e6:8.2f}  {checks}"
        )
    return "\n".join(lines)


def ratios(reports: Sequence[StageReport]) -> dict[str, dict[str, float]]:
    """Per stage and compute capability, INT8 against FP16: layers, fused attention and bytes
    per frame (``layers`` <= 1, ``bytes`` <= 0.75 are what an INT8 engine that fuses gives)."""
    by_key = {(r.stage, r.compute_capability, r.precision): r.summary for r in reports}
    out = {}
    for (stage, cc, precision), int8 in by_key.items():
        fp16 = by_key.get((stage, cc, "fp16"))
        if precision != "int8" or fp16 is None:
            continue
        out[f"{stage} sm {cc}"] = {
            "layers": int8.layers / fp16.layers,
            "fused_attention": int8.fused_attention - fp16.fused_attention,
            "bytes": int8.bytes_per_frame / fp16.bytes_per_frame,
        }
    return out


def plot(reports: Sequence[StageReport], path: Path, title: str) -> Path:
    """Bytes per frame by datatype and layer counts per stage and precision, as a PNG."""
    from ..eval.plots import pyplot, save_figure

    plt = pyplot()

    shown = [r for r in reports if r.compute_capability == reports[0].compute_capability]
    labels = [f"{r.stage}\n{r.precision}" for r in shown]
    kinds = sorted({k for r in shown for k in r.summary.by_type_bytes})
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    bottom = [0.0] * len(shown)
    for kind in kinds:
        values = [r.summary.by_type_bytes.get(kind, 0.0) / 1e6 for r in shown]
        left.bar(labels, values, bottom=bottom, label=kind)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    left.set_ylabel("MB per frame (layer model)")
    left.set_title("bytes by datatype")
    left.legend(fontsize=8)
    right.bar(labels, [r.summary.layers for r in shown], color="#888", label="layers")
    right.bar(labels, [r.summary.fused_attention for r in shown], color="#d62", label="fused MHA")
    right.set_title("engine layers")
    right.legend(fontsize=8)
    fig.suptitle(f"{title} (TensorRT for RTX, sm {shown[0].compute_capability})")
    save_figure(plt, fig, path)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst engine-report``."""
    parser.add_argument("bundle", type=Path, help="model bundle folder with typed variants")
    parser.add_argument(
        "--cc", nargs="+", default=["8.6"], choices=list(COMPUTE_CAPABILITIES), metavar="X.Y",
        help="compute capabilities to build for (TensorRT for RTX: "
        f"{' '.join(COMPUTE_CAPABILITIES)})",
    )  # fmt: skip
    parser.add_argument(
        "--precision", nargs="+", choices=("fp16", "int8"), default=["fp16", "int8"],
        help="typed graphs to build (int8: the TensorRT graph)",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=Path("out/engine_report"),
        help="folder for report.json and engine_report.png",
    )  # fmt: skip
    parser.add_argument(
        "--paper", action="store_true",
        help="also build FastInst-D3 and CompactInst R18 decoders (random weights, FP16) at "
        "1024x2048 and compare their bytes per frame with the paper's -64 %%",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Build, check and report; exit 1 when a check or the builder found a problem."""
    from ..backends.rtx_build import import_tensorrt_rtx

    trt = import_tensorrt_rtx()
    bundle = ModelBundle.load(args.bundle)
    reports = bundle_reports(bundle, args.precision, args.cc)
    print(f"{bundle.name}: TensorRT for RTX {trt.__version__}, AOT, batch 1")
    print(table(reports))
    for key, ratio in ratios(reports).items():
        print(f"int8 / fp16, {key}: layers {ratio['layers']:.2f}x, fused attention "
              f"{ratio['fused_attention']:+d}, bytes per frame {ratio['bytes']:.2f}x")  # fmt: skip
    record: dict[str, Any] = {
        "builder": f"TensorRT for RTX {trt.__version__}",
        "stages": [asdict(r) for r in reports],
        "ratios": ratios(reports),
    }
    if args.paper:
        decoders = paper_decoders(args.out / "bundles")
        fast, compact = (decoders[c].summary.bytes_per_frame for c in PAPER_CONFIGS)
        paper = 1 - PAPER_DECODER_GB["compactinst_r18"] / PAPER_DECODER_GB["fastinst_r18_d3"]
        print(f"decoder at {PAPER_SIZE[0]}x{PAPER_SIZE[1]}, FP16: FastInst-D3 {fast / 1e6:.0f} MB,"
              f" CompactInst {compact / 1e6:.0f} MB per frame: {compact / fast - 1:+.0%} "
              f"(the paper, DRAM traffic on an RTX A4000: {-paper:+.0%})")  # fmt: skip
        record["paper"] = {c: asdict(r) for c, r in decoders.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(record, indent=1) + "\n")
    picture = plot(reports, args.out / "engine_report.png", bundle.name)
    print(f"wrote {args.out / 'report.json'} and {picture}")
    problems = [i for r in reports for i in (*r.issues, *r.builder_errors)]
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems else 0
