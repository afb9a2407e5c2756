"""Report plots (matplotlib Agg): per-stage latency breakdown, latency CDF, accuracy by size."""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: stages drawn in the breakdown; the spans that contain them are drawn in the CDF
BREAKDOWN = (
    "queue", "decode", "preprocess", "encoder", "decoder", "postprocess", "messages", "publish"
)
#: spans drawn in the CDF: the Pipeline call, camera-to-output, and the player's round trip
CDF_SPANS = ("inference", "pipeline", "end_to_end")


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(plt: object, fig: object, path: Path) -> str:
    """Lay out, write (its folder made where missing) and close one figure; returns its path."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def write_plots(report: dict, out_dir: str | Path) -> list[str]:
    """Write the plots that the report has data for; returns their names relative to out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = []
    modes = report.get("modes", {})
    if any(block.get("latency") for block in modes.values()):
        names.append(latency_breakdown(modes, out / "latency_breakdown.png"))
        names.append(latency_cdf(modes, out / "latency_cdf.png"))
    accuracy = next((b["accuracy"] for b in modes.values() if b.get("accuracy")), None)
    if accuracy and (accuracy.get("mask_ap") or accuracy.get("panoptic")):
        names.append(accuracy_by_size(accuracy, out / "accuracy_by_size.png"))
    return [Path(n).name for n in names]


def latency_breakdown(
    modes: dict,
    path: Path,
    stats: tuple[str, str] = ("mean", "p90"),
    title: str = "Per-stage latency (warm-up excluded)",
) -> str:
    """Stacked bars of two statistics (``stats``) of the time per stage, one bar pair per mode."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.9 * len(modes)))
    colours = plt.get_cmap("tab10")
    labels, labelled = [], set()
    for row, (mode, block) in enumerate(modes.items()):
        for j, stat in enumerate(stats):
            y = row * 2.4 + j
            left = 0.0
            for k, stage in enumerate(BREAKDOWN):
                value = block["latency"].get(stage, {}).get(stat)
                if not value:
                    continue
                label = stage if stage not in labelled else None
                labelled.add(stage)
                ax.barh(y, value, left=left, color=colours(k), label=label)
                left += value
            labels.append((y, f"{mode} {stat}"))
    ax.set_yticks([y for y, _ in labels], [t for _, t in labels])
    ax.set_xlabel("ms per frame")
    ax.set_title(title)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    return save_figure(plt, fig, path)


def latency_cdf(modes: dict, path: Path) -> str:
    """Empirical CDF of the per-frame spans ``CDF_SPANS`` that the mode measured."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, block in modes.items():
        warm = block.get("warmup_frames", 0)
        for stage in CDF_SPANS:
            values = np.sort(np.asarray(block.get("samples", {}).get(stage, [])[warm:], float))
            if values.size:
                ax.step(
                    values,
                    np.arange(1, values.size + 1) / values.size,
                    where="post",
                    label=f"{mode} {stage}",
                )
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of frames")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Latency CDF")
    return save_figure(plt, fig, path)


def accuracy_by_size(accuracy: dict, path: Path) -> str:
    """Mask AP by object size (small/medium/large, all) and PQ of things/stuff."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names, values, colours = [], [], []
    ap = accuracy.get("mask_ap") or {}
    for key, name in (
        ("APs", "AP small"),
        ("APm", "AP medium"),
        ("APl", "AP large"),
        ("AP", "AP all"),
    ):
        if key in ap:
            names.append(name)
            values.append(ap[key])
            colours.append("#4c72b0")
    pan = accuracy.get("panoptic") or {}
    for part in ("things", "stuff", "all"):
        if part in pan:
            names.append(f"PQ {part}")
            values.append(pan[part]["PQ"])
            colours.append("#dd8452")
    heights = [v if v is not None else 0.0 for v in values]
    bars = ax.bar(names, heights, color=colours)
    for bar, value in zip(bars, values, strict=True):
        text = "n/a" if value is None else f"{value:.1f}"
        ax.text(
            bar.get_x() + bar.get_width() / 2, bar.get_height() + 1, text, ha="center", fontsize=8
        )
    ax.set_ylim(0, 105)
    ax.set_ylabel("%")
    ax.set_title(f"Accuracy by object size ({accuracy.get('frames_evaluated')} frames)")
    ax.tick_params(axis="x", labelsize=8)
    return save_figure(plt, fig, path)


def ap_by_tag(rows: list[dict], path: Path) -> str:
    """Bars of the merged mask AP and PQ of each tag value (``key=value``) of a fleet report."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * len(rows) + 2), 4))
    x = np.arange(len(rows))
    for offset, metric in ((-0.2, "AP"), (0.2, "PQ")):
        values = [np.nan if r.get(metric) is None else r[metric] for r in rows]
        ax.bar(x + offset, values, width=0.4, label=metric)
    ax.set_xticks(x, [f"{r['tag']}={r['value']}" for r in rows], rotation=30, ha="right")
    ax.set_ylabel("percent")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    ax.set_title("Accuracy by tag (merged over the tag's drives)")
    return save_figure(plt, fig, path)


def latency_cdf_by_tag(samples: dict[str, list[float]], span: str, path: Path) -> str:
    """Empirical CDF of one span's samples per tag value (``{"site=farm": [ms, ...]}``)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, raw in samples.items():
        values = np.sort(np.asarray(raw, float))
        if values.size:
            ax.step(values, np.arange(1, values.size + 1) / values.size, where="post", label=label)
    ax.set_xlabel(f"{span} latency (ms)")
    ax.set_ylabel("fraction of frames")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{span} latency CDF by tag")
    return save_figure(plt, fig, path)
