"""Replay reports: latency statistics, JSON + Markdown files, the printed summary, progress."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..structures import STAGES

#: percentiles reported per stage
PERCENTILES = (50, 90, 95, 99)


def warmup_left_out(warmup: int, processed: int, notes: list[str]) -> int:
    """The frames the latency statistics leave out: ``warmup``, but never the last frame; where
    that cuts ``warmup``, a note says so and how few frames the figures rest on."""
    warm = min(warmup, max(processed - 1, 0))
    if warm < warmup and processed:
        notes.append(
            f"--warmup {warmup} is not below the {processed} frames processed: {warm} left out, "
            f"so the latency figures rest on {processed - warm} frame(s); give a smaller "
            "--warmup or a longer bag"
        )
    return warm


def latency_stats(samples: dict[str, list[float]], warmup: int) -> dict:
    """Per-stage count/mean/std/p50/p90/p95/p99/max in ms, the first ``warmup`` frames excluded."""
    out = {}
    order = [s for s in (*STAGES, "end_to_end") if s in samples]
    order += sorted(s for s in samples if s not in order)
    for stage in order:
        values = np.asarray(samples[stage][warmup:], np.float64)
        values = values[np.isfinite(values)]
        if values.size == 0:
            continue
        row = {"count": int(values.size), "mean": float(values.mean()), "std": float(values.std())}
        row.update({f"p{p}": float(np.percentile(values, p)) for p in PERCENTILES})
        row["max"] = float(values.max())
        out[stage] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}
    return out


def git_sha(root: Path | None = None) -> str | None:
    """Commit of the checkout the package runs from (None outside git)."""
    root = root or Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def host_info() -> dict:
    """Machine and library versions for the report's metadata."""
    info = {
        "hostname": platform.node(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "git": git_sha(),
        "rmw": os.environ.get("RMW_IMPLEMENTATION"),
    }
    for module in ("onnxruntime", "rosbags", "tensorrt", "rclpy"):
        mod = sys.modules.get(module)
        version = getattr(mod, "__version__", None) if mod else None
        if version:
            info[module] = version
    return info


def now_iso() -> str:
    """Current UTC time, ISO 8601."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


#: what a report written after Ctrl-C says of its figures
PARTIAL_NOTE = "interrupted (Ctrl-C); the figures cover only the frames replayed before it"


def write_report(report: dict, out_dir: str | Path, text: str | None = None) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.md`` (``text``, default the replay's Markdown) into
    ``out_dir``; returns both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "report.json"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    md_path = out / "report.md"
    md_path.write_text(markdown(report) if text is None else text)
    return json_path, md_path


def _fmt(value: object, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def accuracy_rows(accuracy: dict | None) -> list[tuple[str, str]]:
    """(metric, value) pairs of the accuracy block, in report order."""
    if not accuracy:
        return []
    rows = []
    ap = accuracy.get("mask_ap")
    if ap:
        rows += [(f"mask {k}", _fmt(v)) for k, v in ap.items()]
    pan = accuracy.get("panoptic")
    if pan:
        for part in ("all", "things", "stuff"):
            suffix = "" if part == "all" else f" ({part})"
            rows += [(f"{k}{suffix}", _fmt(pan[part][k])) for k in ("PQ", "SQ", "RQ")]
    sem = accuracy.get("semantic")
    if sem:
        rows.append(("mIoU", _fmt(sem["mIoU"])))
    track = accuracy.get("tracking")
    if track:
        rows.append(("id switches", str(track["id_switches"])))
        rows.append(("tracked GT objects", f"{track['matches']}/{track['gt_objects']}"))
    return rows


def latency_table(stats: dict) -> list[str]:
    """Markdown table rows for per-stage latency statistics."""
    lines = [
        "| stage | n | mean | p50 | p90 | p99 | max |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for stage, row in stats.items():
        cells = [_fmt(row[k], 2) for k in ("mean", "p50", "p90", "p99", "max")]
        lines.append(f"| {stage} | {row['count']} | " + " | ".join(cells) + " |")
    return lines


def markdown(report: dict) -> str:
    """The report as Markdown: metadata, accuracy table, latency table, frame counts."""
    bag, model = report["bag"], report["model"]
    lines = [
        f"# Replay report: {Path(bag['path']).name}",
        "",
        f"* created {report['created']} by `{report['command']}`",
        f"* bag `{bag['path']}` (hash `{bag['hash']}`), topic `{bag['topic']}` "
        f"({bag['msgtype']}), {bag['frames']} frames over {_fmt(bag['duration_s'], 2)} s",
        f"* model `{model.get('model')}` (fingerprint `{model.get('model_fingerprint')}`), "
        f"backend `{model.get('backend')}`, device `{model.get('device', 'cpu')}`, "
        f"precision `{precision_text(model)}`, input {model.get('input_size')}",
        *([f"* note: {model['caveat']}"] if model.get("caveat") else []),
        *([f"* **partial**: {PARTIAL_NOTE}"] if report.get("partial") else []),
        *[f"* **warning**: {w}" for w in report.get("warnings", [])],
        f"* host {report['host'].get('hostname')} ({report['host'].get('cpu_count')} CPUs), "
        f"git `{report['host'].get('git')}`",
        "",
    ]
    for mode, block in report["modes"].items():
        lines += [f"## {mode}", ""]
        if block.get("accuracy"):
            lines += [
                f"Accuracy over {block['accuracy']['frames_evaluated']} frames with ground truth:",
                "",
                "| metric | value |",
                "|---|---:|",
            ]
            lines += [f"| {k} | {v} |" for k, v in accuracy_rows(block["accuracy"])]
            lines.append("")
        lines += [
            f"Latency in ms, first {block['warmup_frames']} frames excluded as warm-up:",
            "",
            *latency_table(block["latency"]),
            "",
        ]
        frames, tput = block["frames"], block["throughput"]
        lines.append(
            "Frames: "
            + ", ".join(f"{k} {v}" for k, v in frames.items())
            + f". Throughput: input {_fmt(tput.get('input_fps'))} fps, "
            f"output {_fmt(tput.get('output_fps'))} fps over {_fmt(tput.get('wall_s'), 2)} s"
            + (
                f", output jitter {_fmt(tput['jitter_ms'], 2)} ms."
                if tput.get("jitter_ms")
                else "."
            )
        )
        if block.get("notes"):
            lines += ["", *[f"* {n}" for n in block["notes"]]]
        lines.append("")
        if block.get("batch"):
            lines += [batch_line(block["batch"]) + ".", ""]
        lines += camera_sections(block.get("cameras", {}))
    if report.get("plots"):
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in report["plots"]] + [""]
    return "\n".join(lines)


#: the per-camera summary columns: latency span and statistics
CAMERA_SPAN = ("pipeline", "end_to_end")


def camera_headline(block: dict) -> str:
    """One camera's figures in a line: AP, PQ, frames, pipeline and end-to-end p50/p90."""
    acc = block.get("accuracy") or {}
    ap = (acc.get("mask_ap") or {}).get("AP")
    pq = ((acc.get("panoptic") or {}).get("all") or {}).get("PQ")
    frames = block["frames"]
    spans = [
        f"{span} p50 {_fmt(row['p50'], 2)} p90 {_fmt(row['p90'], 2)} ms"
        for span in CAMERA_SPAN
        if (row := block["latency"].get(span))
    ]
    return ", ".join(
        [
            *([f"mask AP {_fmt(ap)}"] if ap is not None else []),
            *([f"PQ {_fmt(pq)}"] if pq is not None else []),
            f"sent {frames['sent']}, processed {frames['processed']}, dropped {frames['dropped']}",
            f"output {_fmt(block['throughput'].get('output_fps'))} fps",
            *spans,
        ]
    )


def batch_line(batch: dict) -> str:
    """The batched node's rounds in a line (``cameras.batch_report``)."""
    return (
        f"batch: {batch['rounds']} rounds, {_fmt(batch['frames_per_round_mean'], 2)} of "
        f"{batch['cameras']} cameras per round, {batch['padded_slots']} padded slots, window "
        f"wait mean {_fmt(batch['window_wait_mean_ms'], 2)} ms, max "
        f"{_fmt(batch['window_wait_max_ms'], 2)} ms"
    )


def camera_sections(cameras: dict) -> list[str]:
    """Markdown of a multi-camera mode's cameras: each camera's figures and latency table."""
    lines: list[str] = []
    for name, block in cameras.items():
        lines += [f"### camera {name} (`{block['topic']}`)", "", camera_headline(block) + ".", ""]
        if block.get("accuracy"):
            rows = accuracy_rows(block["accuracy"])
            lines += ["| metric | value |", "|---|---:|", *[f"| {k} | {v} |" for k, v in rows], ""]
        lines += [*latency_table(block["latency"]), ""]
    return lines


def precision_text(model: dict) -> str:
    """The precision that ran, from a backend's describe(): e.g. ``fp32`` or ``int8 (cpu)``."""
    graph = f" ({model['int8_graph']})" if model.get("int8_graph") else ""
    return f"{model.get('precision', 'unknown')}{graph}"


def model_text(model: dict) -> str:
    """Which model ran where, from a Pipeline's describe(): model, fingerprint, backend, device
    and precision (printed when a replay starts and in its summary)."""
    return (
        f"model {model.get('model')} [{model.get('model_fingerprint')}] on "
        f"{model.get('backend')} ({model.get('device', 'cpu')}, {precision_text(model)})"
    )


def summary_text(report: dict) -> str:
    """Short plain-text summary printed at the end of a replay."""
    bag, model = report["bag"], report["model"]
    lines = [
        f"bag {bag['path']} [{bag['hash']}] topic {bag['topic']}: {bag['frames']} frames",
        model_text(model),
        *([f"note: {model['caveat']}"] if model.get("caveat") else []),
        *([f"PARTIAL: {PARTIAL_NOTE}"] if report.get("partial") else []),
    ]
    for mode, block in report["modes"].items():
        lines.append(f"--- {mode} ---")
        acc = accuracy_rows(block.get("accuracy"))
        if acc:
            lines.append("accuracy: " + ", ".join(f"{k} {v}" for k, v in acc))
        if block.get("depth3d"):
            from .depth3d import summary_line

            lines.append(summary_line(block["depth3d"]))
            if block.get("depth3d_uncompensated"):
                baseline = summary_line(block["depth3d_uncompensated"])
                lines.append(f"  without motion compensation: {baseline.removeprefix('3-D: ')}")
        lines.append(f"latency ms (warm-up {block['warmup_frames']} excluded):")
        lines.append(f"  {'stage':<12}{'mean':>9}{'p50':>9}{'p90':>9}{'p99':>9}")
        for stage, row in block["latency"].items():
            lines.append(
                f"  {stage:<12}" + "".join(f"{row[k]:>9.2f}" for k in ("mean", "p50", "p90", "p99"))
            )
        frames, tput = block["frames"], block["throughput"]
        lines.append("frames: " + ", ".join(f"{k} {v}" for k, v in frames.items()))
        lines.append(
            f"throughput: input {_fmt(tput.get('input_fps'))} fps, "
            f"output {_fmt(tput.get('output_fps'))} fps"
        )
        if block.get("batch"):
            lines.append(batch_line(block["batch"]))
        for name, camera in block.get("cameras", {}).items():
            lines.append(f"camera {name} ({camera['topic']}): {camera_headline(camera)}")
            if camera.get("depth3d"):
                from .depth3d import summary_line

                lines.append(f"camera {name} {summary_line(camera['depth3d'])}")
    return "\n".join(lines)
