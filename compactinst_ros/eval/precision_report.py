"""``compactinst precision-report BUNDLE --data DIR``: the bundle's precisions side by side on the
CPU: mask AP and PQ, per-stage time measured in one run (the precisions alternate frame by
frame, so machine load hits all alike), the 1080p end-to-end time, and the largest per-tensor
error of the decoder outputs against FP32; a table (text + JSON) and a plot. A row whose
backend refuses to open (its acceptance check) is named with the reason, and the rows that ran
are still reported."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from ..backends.acceptance import graph_outputs, matched
from ..bundle import DECODER_OUTPUTS, ModelBundle
from ..errors import BackendError, ConfigError
from .evaluate import data_images, encoder_inputs, evaluate_bundle

#: the 1080p camera of the end-to-end timing
CAMERA_1080P = (1080, 1920)


@dataclass(frozen=True)
class Variant:
    """One row of the report: a precision, for int8 which graph, and the backend that runs it."""

    precision: str
    int8_graph: str | None = None
    backend: str = "onnxruntime"

    @property
    def label(self) -> str:
        """``fp32``, ``fp16``, ``int8 cpu`` or ``int8 tensorrt`` on ONNX Runtime; ``openvino
        fp32`` or ``openvino int8`` (the TensorRT graph) on OpenVINO."""
        if self.backend != "onnxruntime":
            return f"{self.backend} {self.precision}"
        return f"{self.precision} {self.int8_graph}" if self.int8_graph else self.precision

    @property
    def overrides(self) -> dict:
        """Pipeline / BackendOptions overrides that run this row."""
        return {"precision": self.precision, "int8_graph": self.int8_graph}


#: backends the report can put side by side
REPORT_BACKENDS = ("onnxruntime", "openvino")


def bundle_variants(
    bundle: ModelBundle, backends: Sequence[str] = ("onnxruntime",)
) -> list[Variant]:
    """Every row the bundle can run on ``backends``: on ONNX Runtime its precisions, int8 as both
    of its graphs; on OpenVINO fp32 and int8 (the TensorRT graph, on its INT8 kernels)."""
    rows = []
    for backend in backends:
        if backend not in REPORT_BACKENDS:
            raise ConfigError(f"backend '{backend}': choose {', '.join(REPORT_BACKENDS)}")
        for precision in bundle.precisions:
            if backend == "openvino":
                if precision != "fp16":
                    rows.append(Variant(precision, backend=backend))
            elif precision == "int8":
                rows += [Variant("int8", "cpu"), Variant("int8", "tensorrt")]
            else:
                rows.append(Variant(precision))
    return rows


OUTPUT_ERROR_DOC = (
    "mean |typed - fp32| over the fp32 range, and max |d|, nearest-mask query matching"
)


def output_error(reference: Sequence[dict], result: Sequence[dict]) -> dict[str, float]:
    """Per decoder output: mean |result - reference| over the reference's value range, the
    largest over the frames. Each reference query is compared with the result query whose mask
    is nearest: the decoder's top-k proposal selection reorders near-tied queries, which moves
    no mask (and no AP) but would dominate an elementwise difference."""
    errors = dict.fromkeys(DECODER_OUTPUTS, 0.0)
    for ref, out in zip(reference, result, strict=True):
        nearest = matched(ref, out)
        for name in DECODER_OUTPUTS:
            span = float(ref[name].max() - ref[name].min()) or 1.0
            error = float(np.abs(nearest[name] - ref[name]).mean()) / span
            errors[name] = max(errors[name], error)
    return errors


def largest_error(reference: Sequence[dict], result: Sequence[dict]) -> dict[str, float]:
    """Per decoder output: the largest elementwise |result - reference| over the frames, with
    the queries paired as in ``output_error``."""
    pairs = [(ref, matched(ref, out)) for ref, out in zip(reference, result, strict=True)]
    return {
        name: max(float(np.abs(out[name] - ref[name]).max()) for ref, out in pairs)
        for name in DECODER_OUTPUTS
    }


def open_rows(
    bundle: ModelBundle, rows: Sequence[Variant], threads: int | None = None
) -> tuple[dict, dict[str, str]]:
    """A Pipeline per row that opens, and per row whose backend refuses (BackendError: e.g. its
    acceptance check) the reason."""
    from ..pipeline import Pipeline

    pipes, refused = {}, {}
    for row in rows:
        try:
            pipes[row.label] = Pipeline(bundle, row.backend, threads=threads, **row.overrides)
        except BackendError as exc:
            refused[row.label] = str(exc)
    return pipes, refused


def measure(
    bundle: ModelBundle,
    rows: Sequence[Variant],
    tensors: Sequence[np.ndarray],
    camera: np.ndarray,
    rounds: int,
    threads: int | None = None,
) -> tuple[dict[str, dict], dict[str, str]]:
    """Per row that opens: decoder-output errors against the first such row (FP32) on
    ``tensors``, and the per-stage CPU times (median and 10-90 % range, ms) over ``rounds``
    frames, the rows alternating frame by frame; and per refused row, the reason."""
    pipes, refused = open_rows(bundle, rows, threads)
    if not pipes:
        return {}, refused
    try:
        outputs = {
            label: [graph_outputs(pipe.backend.run_decoder(pipe.backend.run_encoder(t))[0])
                    for t in tensors]
            for label, pipe in pipes.items()
        }  # fmt: skip
        times: dict[str, dict[str, list[float]]] = {label: {} for label in pipes}
        for i in range(rounds + 1):  # the first round warms up
            for label, pipe in pipes.items():
                t0 = time.perf_counter()
                feats = pipe.backend.run_encoder(tensors[i % len(tensors)])
                t1 = time.perf_counter()
                pipe.backend.run_decoder(feats)
                t2 = time.perf_counter()
                pipe(camera, "bgr8")
                t3 = time.perf_counter()
                if i:
                    for stage, ms in (("encoder", t1 - t0), ("decoder", t2 - t1),
                                      ("end_to_end_1080p", t3 - t2)):  # fmt: skip
                        times[label].setdefault(stage, []).append(ms * 1e3)
        ref = next(iter(outputs.values()))
        out = {}
        for label, pipe in pipes.items():
            enc_dec = np.add(times[label]["encoder"], times[label]["decoder"])
            stats = {s: _stats(v) for s, v in {**times[label], "encoder+decoder": enc_dec}.items()}
            out[label] = {
                "describe": pipe.describe(),
                "time_ms": stats,
                "error": output_error(ref, outputs[label]),
                "largest_error": largest_error(ref, outputs[label]),
            }
        return out, refused
    finally:
        for pipe in pipes.values():
            pipe.close()


def _stats(values: Sequence[float]) -> dict[str, float]:
    v = np.asarray(values, np.float64)
    return {"median": float(np.median(v)), "p10": float(np.percentile(v, 10)),
            "p90": float(np.percentile(v, 90)), "count": int(v.size)}  # fmt: skip


def fp16_emulation_agreement(bundle: ModelBundle, tensors: Sequence[np.ndarray]) -> dict:
    """The FP16 typed graph on ONNX Runtime's CPU provider against the rounding emulation of the
    FP32 graph (``precision.emulate_fp16`` with the same islands): their decoder-output error,
    and the operators the CPU provider runs in FP16 (the rest it runs in FP32 between Casts)."""
    import onnx

    from ..backends.ort import create_session, image_feed
    from ..export.precision import emulate_fp16

    typed = {s.name: bundle.stage_graph(s.name, "fp16").model_bytes for s in bundle.stages}
    islands = {n: e.get("fp32_islands", []) for n, e in bundle.variants["fp16"]["stages"].items()}
    emulated = {
        s.name: emulate_fp16(onnx.load(str(s.path)), islands[s.name]).SerializeToString()
        for s in bundle.stages
    }
    results = {}
    for name, graphs in (("typed", typed), ("emulated", emulated)):
        enc, dec = create_session(graphs["encoder"]), create_session(graphs["decoder"])
        feats = [o.name for o in enc.get_outputs()]
        image = enc.get_inputs()[0].name
        results[name] = [
            dict(zip(DECODER_OUTPUTS, dec.run(list(DECODER_OUTPUTS),
                 dict(zip(feats, enc.run(feats, image_feed(enc, image, t)), strict=True))),
                 strict=True))
            for t in tensors
        ]  # fmt: skip
    return {
        "error": output_error(results["emulated"], results["typed"]),
        "fp16_ops": {name: ort_fp16_ops(graph) for name, graph in typed.items()},
    }


def ort_fp16_ops(graph: bytes) -> dict[str, int]:
    """Operator -> count of the nodes that ONNX Runtime's CPU provider runs with FP16 outputs
    after its optimisations (it wraps the others in Casts to FP32)."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        options.log_severity_level = 3  # its "hardware specific optimizations" warning
        ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        model = onnx.shape_inference.infer_shapes(onnx.load(options.optimized_model_filepath))
    half = {
        v.name
        for v in [*model.graph.value_info, *model.graph.output]
        if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    }
    counts: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type != "Cast" and any(o in half for o in node.output):
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def format_table(report: dict) -> str:
    """The report's rows as a text table."""
    lines = [
        f"{'precision':14s} {'mask AP':>7s} {'PQ':>6s} {'enc ms':>7s} {'dec ms':>7s} "
        f"{'enc+dec':>7s} {'speed-up':>8s} {'1080p ms':>8s} {'1080p FPS x':>11s} "
        f"{'err logits':>10s} {'err masks':>9s} {'max |d| masks':>13s}"
    ]
    rows = report["rows"]
    bases: dict[str, dict] = {}  # each backend's first row (fp32): its speed-ups' reference
    for row in rows.values():
        bases.setdefault(row["describe"]["backend"], row["time_ms"])
    for label, row in rows.items():
        t = row["time_ms"]
        base = bases[row["describe"]["backend"]]
        acc = row.get("accuracy")
        ap = f"{acc['mask_ap']['AP']:7.2f}" if acc else f"{'-':>7s}"
        pq = f"{acc['panoptic']['all']['PQ']:6.2f}" if acc else f"{'-':>6s}"
        speed = base["encoder+decoder"]["median"] / t["encoder+decoder"]["median"]
        fps = base["end_to_end_1080p"]["median"] / t["end_to_end_1080p"]["median"]
        lines.append(
            f"{label:14s} {ap} {pq} {t['encoder']['median']:7.1f} {t['decoder']['median']:7.1f} "
            f"{t['encoder+decoder']['median']:7.1f} {speed:7.2f}x "
            f"{t['end_to_end_1080p']['median']:8.1f} {fps:10.2f}x "
            f"{row['error']['pred_logits']:10.4f} {row['error']['pred_masks']:9.4f} "
            f"{row['largest_error']['pred_masks']:13.3f}"
        )
    if bases:
        count = next(iter(bases.values()))["encoder"]["count"]
        lines.append(f"times: medians of {count} alternating frames, speed-ups against the same "
                     f"backend's fp32; err: {OUTPUT_ERROR_DOC}")  # fmt: skip
    for label, reason in report.get("refused", {}).items():
        lines.append(f"{label}: refused, not measured: {reason}")
    return "\n".join(lines)


def write_plot(report: dict, path: Path) -> Path:
    """Accuracy bars and stacked per-stage medians, one group per precision."""
    from .plots import pyplot, save_figure

    plt = pyplot()
    rows = report["rows"]
    labels = list(rows)
    ticks = [label.replace(" ", "\n") for label in labels]  # two words stacked: six rows fit
    fig, (acc_ax, time_ax) = plt.subplots(1, 2, figsize=(11, 3.8))
    x = np.arange(len(labels))
    for k, (name, get) in enumerate((
        ("mask AP", lambda a: a["mask_ap"]["AP"]),
        ("PQ", lambda a: a["panoptic"]["all"]["PQ"]),
    )):  # fmt: skip
        values = [get(rows[label]["accuracy"]) if rows[label].get("accuracy") else 0.0
                  for label in labels]  # fmt: skip
        acc_ax.bar(x + (k - 0.5) * 0.38, values, 0.38, label=name)
    acc_ax.set_xticks(x, ticks)
    acc_ax.set_ylabel("percent")
    acc_ax.set_title("Accuracy")
    acc_ax.legend(loc="lower right")
    bottom = np.zeros(len(labels))
    for stage in ("encoder", "decoder"):
        values = np.array([rows[label]["time_ms"][stage]["median"] for label in labels])
        time_ax.bar(x, values, 0.6, bottom=bottom, label=stage)
        bottom += values
    time_ax.set_xticks(x, ticks)
    time_ax.set_ylabel("ms (median, CPU)")
    time_ax.set_title("Stage time, one alternating run")
    time_ax.legend()
    return Path(save_figure(plt, fig, path))


def precision_report(
    bundle_path: str | Path,
    data: str | Path,
    out: str | Path,
    limit: int | None = None,
    rounds: int = 20,
    threads: int | None = None,
    progress: bool = True,
    backends: Sequence[str] = ("onnxruntime",),
) -> dict:
    """Measure every precision of the bundle on ``backends``, write ``precision_report.json``,
    ``.txt`` and ``.png`` into ``out``; returns the report. A row whose backend refuses to open
    is left out of the measurements and named in ``report["refused"]`` with the reason."""
    bundle = ModelBundle.load(bundle_path)
    rows = bundle_variants(bundle, backends)
    if len(rows) == 1:
        raise ConfigError(
            f"bundle {bundle.root} has only fp32 graphs; add the others with "
            f"'compactinst quantize {bundle.root} --data DIR'"
        )
    tensors = encoder_inputs(bundle, data, 4)
    _, image, _ = next(data_images(data, 1))
    camera = cv2.resize(image, CAMERA_1080P[::-1], interpolation=cv2.INTER_LINEAR)
    measured, refused = measure(bundle, rows, tensors, camera, rounds, threads)
    if not measured:
        raise BackendError("no row of the report opened: " + "; ".join(
            f"{label}: {reason}" for label, reason in refused.items()))  # fmt: skip
    for row in rows:
        if row.label in refused:
            continue
        measured[row.label]["accuracy"] = evaluate_bundle(
            bundle.root, data, limit, row.backend, progress=progress, threads=threads,
            **row.overrides,
        )
    report = {
        "model": bundle.name,
        "fingerprint": bundle.fingerprint,
        "data": str(data),
        "rows": measured,
        "refused": refused,
    }
    if "fp16" in bundle.precisions:
        report["fp16_on_cpu"] = fp16_emulation_agreement(bundle, tensors)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "precision_report.json").write_text(json.dumps(report, indent=1, default=float) + "\n")
    (out / "precision_report.txt").write_text(format_table(report) + "\n")
    write_plot(report, out / "precision_report.png")
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst precision-report``."""
    parser.add_argument("bundle", type=Path, help="model bundle folder with variants")
    parser.add_argument("--data", required=True, type=Path, help="COCO folder (synth layout)")
    parser.add_argument(
        "--out", type=Path, default=Path("out/precision_report"), help="report folder"
    )
    parser.add_argument("--limit", type=int, help="evaluate only the first N images (default: all)")
    parser.add_argument("--rounds", type=int, default=20, help="timed frames per precision")
    parser.add_argument("--threads", type=int, help="runtime threads (default: all cores)")
    parser.add_argument(
        "--backends", nargs="+", choices=REPORT_BACKENDS, default=["onnxruntime"],
        help="backends side by side (default onnxruntime; openvino: fp32 and int8)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Print the side-by-side table and where the report and plot went."""
    if args.rounds < 1:
        raise ConfigError(f"--rounds {args.rounds}: need at least 1 timed frame")
    report = precision_report(
        args.bundle, args.data, args.out, args.limit, args.rounds, args.threads,
        backends=args.backends,
    )
    print(format_table(report))
    if "fp16_on_cpu" in report:
        agree = report["fp16_on_cpu"]
        print("fp16 typed graph on ONNX Runtime CPU vs the rounding emulation: "
              + ", ".join(f"{k} {v:.4f}" for k, v in agree["error"].items()))  # fmt: skip
        for stage, ops in agree["fp16_ops"].items():
            print(f"  ops ONNX Runtime's CPU provider runs in FP16 ({stage}): {ops or 'none'}")
    print(f"report: {Path(args.out) / 'precision_report.txt'}, .json, .png")
    if report["refused"]:
        print(f"incomplete: {len(report['refused'])} row(s) refused to open: "
              f"{', '.join(report['refused'])} (the reasons are in the table)", file=sys.stderr)
        return 1
    return 0
