"""Matplotlib figures for the benches: latency and speed-up vs resolution, the cost model; the
roofline draws its own (``roofline.plot_roofline``) with the headless ``pyplot`` here."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType


def pyplot() -> ModuleType:
    """Headless pyplot (imported lazily: matplotlib is an ``eval`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_latency(rows: Sequence[dict], baseline: str, path: Path, title: str) -> None:
    """Two panels: median latency (ms) and speed-up vs ``baseline`` against megapixels.

    ``rows`` are bench records with keys ``config``, ``size`` ([H, W]), ``backend``, ``median_ms``
    and ``speedup``.
    """
    plt = pyplot()
    fig, (ax_l, ax_s) = plt.subplots(1, 2, figsize=(11, 4.2))
    series: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        series.setdefault((r["backend"], r["config"]), []).append(r)
    for (backend, config), pts in sorted(series.items()):
        pts = sorted(pts, key=lambda r: r["size"][0] * r["size"][1])
        mp = [r["size"][0] * r["size"][1] / 1e6 for r in pts]
        label = f"{config} [{backend}]"
        ax_l.plot(mp, [r["median_ms"] for r in pts], marker="o", label=label)
        if config != baseline:
            ax_s.plot(mp, [r["speedup"] for r in pts], marker="o", label=label)
    ax_l.set(xlabel="padded input (megapixels)", ylabel="median latency (ms)", title=title)
    ax_s.set(
        xlabel="padded input (megapixels)",
        ylabel=f"speed-up vs {baseline}",
        title="speed-up (higher is better)",
    )
    ax_s.axhline(1.0, color="grey", lw=0.8, ls="--")
    for ax in (ax_l, ax_s):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_costmodel(rows: Sequence[dict], path: Path) -> None:
    """Predicted decoder speed-up vs resolution, one line per device and config."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    series: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        series.setdefault((r["config"], r["device"]), []).append(r)
    configs = list(dict.fromkeys(c for c, _ in series))
    devices = list(dict.fromkeys(d for _, d in series))
    styles = ("-", "--", ":", "-.")
    for (config, device), pts in series.items():
        pts = sorted(pts, key=lambda r: r["size"][0] * r["size"][1])
        ax.plot(
            [r["size"][0] * r["size"][1] / 1e6 for r in pts],
            [r["decoder_speedup"] for r in pts],
            marker="o",
            color=f"C{configs.index(config) % 10}",
            ls=styles[devices.index(device) % len(styles)],
            label=f"{config} on {device}",
        )
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set(
        xlabel="padded input (megapixels)",
        ylabel="predicted decoder speed-up vs baseline",
        title="cost model (per-op roofline)",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
