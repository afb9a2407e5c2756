"""The fleet report: merged summary, a row per drive and per tag value (worst drives first),
plots, and the drive-by-drive comparison with a baseline report that flags regressions."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .depth3d import merged_figures, summary_line
from .groundtruth import read_json_object
from .merge import merge_latency
from .metrics import merge_statistics
from .report import _fmt, accuracy_rows, host_info, latency_table, now_iso

#: the span of the rows' latency columns and of the CDF plot: the whole Pipeline call
SPAN = "inference"
ROW_PERCENTILES = ("p50", "p90", "p99")


def merged_block(results: Sequence[dict]) -> tuple[dict, dict[str, list[float]]]:
    """(figures, samples) of one replay over the drives' frames: accuracy from their sufficient
    statistics, latency from their samples, frame counts and id switches summed."""
    blocks = [r["lockstep"] for r in results if r["status"] == "ok"]
    stats = [b["statistics"] for b in blocks if b.get("statistics")]
    latency, samples = merge_latency(blocks)
    frames = {"processed": sum(b["frames"]["processed"] for b in blocks)}
    frames["dropped"] = sum(b["frames"]["dropped"] for b in blocks)
    block = {"accuracy": merge_statistics(stats) if stats else None, "latency": latency}
    block["frames"] = frames
    depth3d = merged_figures(blocks)
    if depth3d is not None:
        block["depth3d"] = depth3d
    baseline = merged_figures(blocks, "depth3d_uncompensated_statistics")
    if baseline is not None:
        block["depth3d_uncompensated"] = baseline
    return block, samples


def _figures(block: dict) -> dict:
    """AP, PQ, mIoU, id switches and the span's percentiles of a (drive or merged) block."""
    acc = block.get("accuracy") or {}
    span = block.get("latency", {}).get(SPAN, {})
    return {
        "AP": (acc.get("mask_ap") or {}).get("AP"),
        "PQ": (acc.get("panoptic") or {}).get("all", {}).get("PQ"),
        "mIoU": (acc.get("semantic") or {}).get("mIoU"),
        "id_switches": (acc.get("tracking") or {}).get("id_switches"),
        **{p: span.get(p) for p in ROW_PERCENTILES},
    }


def drive_row(result: dict) -> dict:
    """One drive's row: name, tags, status (and error), frames, figures, where it ran."""
    row = {"name": result["name"], "bag": result["bag"], "tags": result["tags"]}
    row.update(status=result["status"], source=result.get("source"))
    if result["status"] != "ok":
        return {**row, "error": result["error"]}
    block = result["lockstep"]
    row["frames"] = block["frames"]["processed"]
    row.update(_figures(block))
    row.update(worker=result.get("worker"), wall_s=result.get("wall_s"))
    if block.get("notes"):
        row["notes"] = block["notes"]
    return row


def _badness(row: dict) -> tuple:
    """Sort key, worst first: failed drives, then lowest AP (PQ where there is no AP)."""
    score = row.get("AP") if row.get("AP") is not None else row.get("PQ")
    return (row["status"] == "ok", float("inf") if score is None else score, row["name"])


def tag_rows(results: Sequence[dict]) -> tuple[list[dict], dict[str, list[float]]]:
    """A row per tag value, merged exactly over its drives, and the span's samples per value."""
    values = sorted({(k, v) for r in results for k, v in r["tags"].items()})
    rows, samples = [], {}
    for key, value in values:
        members = [r for r in results if r["tags"].get(key) == value]
        block, merged = merged_block(members)
        ok = sum(r["status"] == "ok" for r in members)
        rows.append({"tag": key, "value": value, "drives": len(members), "covered": ok})
        rows[-1].update(frames=block["frames"]["processed"], **_figures(block))
        samples[f"{key}={value}"] = merged.get(SPAN, [])
    return rows, samples


def compare(rows: Sequence[dict], baseline: dict, threshold: float) -> dict:
    """Drive-by-drive deltas against a baseline fleet report; a drive regresses when its AP or
    PQ drops by more than ``threshold`` points, or when it fails where the baseline did not."""
    before = {r["name"]: r for r in baseline.get("drives", [])}
    out, regressed = [], []
    for row in rows:
        old = before.get(row["name"])
        if old is None:
            continue
        entry: dict = {"name": row["name"]}
        reasons = []
        for key in ("AP", "PQ", "p50"):
            a, b = old.get(key), row.get(key)
            entry[f"d{key}"] = None if a is None or b is None else round(b - a, 3)
        for key in ("AP", "PQ"):
            delta = entry[f"d{key}"]
            if delta is not None and -delta > threshold:
                reasons.append(f"{key} {delta:+.1f}")
        if row["status"] != "ok" and old.get("status") == "ok":
            reasons.append("failed")
        entry["regressed"] = bool(reasons)
        entry["why"] = ", ".join(reasons)
        out.append(entry)
        if reasons:
            regressed.append(row["name"])
    return {"threshold": threshold, "drives": out, "regressed": regressed}


def load_baseline(path: Path) -> dict:
    """A fleet report.json written by replay-fleet; DataError if it is not one."""
    return read_json_object(
        path, "baseline", ("drives", "summary"), "a replay-fleet report.json",
        "; pass an earlier report.json",
    )  # fmt: skip


def fleet_report(
    results: list[dict],
    model: dict,
    run: dict,
    *,
    out: Path,
    command: str,
    manifest: Path,
    baseline: Path | None = None,
    regression_threshold: float = 1.0,
    plots: bool = True,
) -> dict:
    """Build, write (report.json, report.md, plots under ``out``) and return the report;
    ``baseline``: an earlier report.json whose drives' AP/PQ drops by more than
    ``regression_threshold`` points are flagged."""
    from .plots import ap_by_tag, latency_cdf_by_tag
    from .report import write_report

    block, _ = merged_block(results)
    rows = sorted((drive_row(r) for r in results), key=_badness)
    tags, tag_samples = tag_rows(results)
    covered = sum(r["status"] == "ok" for r in results)
    summary = {"drives": len(results), "covered": covered, "failed": len(results) - covered}
    summary.update(frames=block["frames"]["processed"], **_figures(block))
    report: dict = {
        "kind": "fleet",
        "created": now_iso(),
        "command": command,
        "manifest": str(manifest),
        "model": model,
        "host": host_info(),
        "run": run,
        "summary": summary,
        "fleet": block,
        "tags": tags,
        "drives": rows,
    }
    if baseline is not None:
        earlier = load_baseline(baseline)
        comparison = compare(rows, earlier, regression_threshold)
        comparison["path"] = str(baseline)
        comparison["fleet"] = {
            f"d{k}": None
            if summary.get(k) is None or earlier["summary"].get(k) is None
            else round(summary[k] - earlier["summary"][k], 3)
            for k in ("AP", "PQ", "p50")
        }
        report["baseline"] = comparison
    if plots and covered:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        if tags:
            written.append(Path(ap_by_tag(tags, out / "ap_by_tag.png")).name)
            cdf = latency_cdf_by_tag(tag_samples, SPAN, out / "latency_cdf_by_tag.png")
            written.append(Path(cdf).name)
        report["plots"] = written
    write_report(report, out, markdown(report))
    return report


def _row_cells(row: dict) -> list[str]:
    return [_fmt(row.get(k)) for k in ("AP", "PQ", "mIoU")] + [
        _fmt(row.get(p), 2) for p in ROW_PERCENTILES
    ]


def markdown(report: dict) -> str:
    """The fleet report as Markdown: summary, merged accuracy and latency, tags, drives."""
    s, run, model = report["summary"], report["run"], report["model"]
    lines = [
        f"# Fleet replay: {Path(report['manifest']).name}",
        "",
        f"* created {report['created']} by `{report['command']}`",
        f"* model `{model.get('model')}` (fingerprint `{model.get('model_fingerprint')}`), "
        f"backend `{model.get('backend')}`",
        f"* covers {s['covered']} of {s['drives']} drives ({s['failed']} failed), "
        f"{s['frames']} frames; {run['replayed']} replayed on {run['workers']} workers, "
        f"{run['cached']} from the cache, {_fmt(run['wall_s'], 2)} s",
        *([f"* **partial**: {partial_text(run)}"] if run.get("partial") else []),
        "",
        "## Fleet (one replay over every frame of the covered drives)",
        "",
    ]
    fleet = report["fleet"]
    if fleet.get("accuracy"):
        lines += ["| metric | value |", "|---|---:|"]
        lines += [f"| {k} | {v} |" for k, v in accuracy_rows(fleet["accuracy"])] + [""]
    lines += ["Latency in ms, each drive's warm-up excluded:", "", *latency_table(fleet["latency"])]
    head = f"| AP | PQ | mIoU | {SPAN} p50 | p90 | p99 |"
    rule = "---:|" * 6
    if report["tags"]:
        lines += ["", "## By tag", "", f"| tag | drives | frames {head}", f"|---|---:|---:|{rule}"]
        for r in report["tags"]:
            cells = [f"{r['tag']}={r['value']}", f"{r['covered']}/{r['drives']}", str(r["frames"])]
            lines.append("| " + " | ".join(cells + _row_cells(r)) + " |")
    lines += ["", "## Drives, worst first", "", f"| drive | tags | frames {head}"]
    lines.append(f"|---|---|---:|{rule}")
    for r in report["drives"]:
        tags = ", ".join(f"{k}={v}" for k, v in r["tags"].items())
        if r["status"] != "ok":
            lines.append(f"| {r['name']} | {tags} | failed: {r['error']} |" + " |" * 6)
            continue
        lines.append("| " + " | ".join([r["name"], tags, str(r["frames"]), *_row_cells(r)]) + " |")
    comparison = report.get("baseline")
    if comparison:
        lines += [
            "",
            f"## Against the baseline `{comparison['path']}`",
            "",
            "Fleet: " + ", ".join(f"{k} {_fmt(v, 2)}" for k, v in comparison["fleet"].items()),
            f"Regressed (AP or PQ down by more than {comparison['threshold']} points, or failed): "
            f"{', '.join(comparison['regressed']) or 'none'}",
            "",
            "| drive | dAP | dPQ | dp50 (ms) | regressed |",
            "|---|---:|---:|---:|---|",
        ]
        for r in comparison["drives"]:
            cells = [_fmt(r[k], 2) for k in ("dAP", "dPQ", "dp50")]
            flag = f"**yes** ({r['why']})" if r["regressed"] else "no"
            lines.append(f"| {r['name']} | " + " | ".join(cells) + f" | {flag} |")
    if report.get("plots"):
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in report["plots"]]
    return "\n".join(lines) + "\n"


def partial_text(run: dict) -> str:
    """What an interrupted fleet run's report covers."""
    return (
        f"interrupted (Ctrl-C); the figures cover the drives done before it, not replayed: "
        f"{', '.join(run['not_replayed'])}"
    )


def summary_text(report: dict) -> str:
    """Short plain-text summary printed at the end of a fleet replay."""
    s, run = report["summary"], report["run"]
    lines = [
        f"fleet: covers {s['covered']} of {s['drives']} drives ({s['failed']} failed), "
        f"{s['frames']} frames; {run['replayed']} replayed, {run['cached']} cached",
        f"fleet: AP {_fmt(s['AP'])}, PQ {_fmt(s['PQ'])}, mIoU {_fmt(s['mIoU'])}, "
        f"{SPAN} p50/p90/p99 "
        + "/".join(_fmt(s[p], 2) for p in ROW_PERCENTILES)
        + " ms",
    ]
    if report["fleet"].get("depth3d"):
        lines.append(f"fleet: {summary_line(report['fleet']['depth3d'])}")
    if report["fleet"].get("depth3d_uncompensated"):
        baseline = summary_line(report["fleet"]["depth3d_uncompensated"]).removeprefix("3-D: ")
        lines.append(f"fleet: without motion compensation: {baseline}")
    lines += [f"failed: {r['name']}: {r['error']}" for r in report["drives"] if r["status"] != "ok"]
    if run.get("partial"):
        lines.append(f"PARTIAL: {partial_text(run)}")
    comparison = report.get("baseline")
    if comparison:
        names = ", ".join(comparison["regressed"]) or "none"
        lines.append(f"regressed vs {comparison['path']}: {names}")
    return "\n".join(lines)
