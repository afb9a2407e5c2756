"""ONNX Runtime CPU latency per stage for CompactInst-R18 vs FastInst-R18-D3 (random weights).

Exports each config once (static size, K classes) into a temporary folder, or into ``--bundles``
where a later run (or ``compactinst bench``, same layout) reuses it, checks the decoder
outputs against the bundle's shapes and for finiteness, then times the OrtBackend stages
(preprocess, encoder, decoder, postprocess) on a synthetic frame of the model's size, alternating
the configs run by run, and prints median and min side by side with the CompactInst/FastInst ratio.

    .venv/bin/python scripts/bench_ort_stages.py --size 512x1024 --runs 5 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from compactinst_ros.backends import BackendOptions
from compactinst_ros.backends.ort import OrtBackend
from compactinst_ros.bench.models import placeholder_labels, random_bundle
from compactinst_ros.preprocess import letterbox
from compactinst_ros.structures import BatchItem, FrameMeta, OutputSet, PostprocessOptions

STAGES = ("preprocess", "encoder", "decoder", "postprocess")
CONFIGS = ("compactinst_r18", "fastinst_r18_d3")


def prepare(config: str, size: tuple[int, int], k: int, threads: int, root: Path) -> OrtBackend:
    """Export a random-weight bundle of ``config`` and open it, after a shape/finiteness check."""
    bundle = random_bundle(config, size, placeholder_labels(k), root)
    backend = OrtBackend(bundle, BackendOptions(threads=threads))
    tensor = letterbox(_frame(size), "rgb8", FrameMeta.letterbox(*size, *size), bundle.pad_value)
    raw = backend.run_decoder(backend.run_encoder(tensor))[0]
    expected = [t.shape[1:] for t in bundle.stage("decoder").outputs]
    got = [raw.class_logits.shape, raw.mask_logits.shape]
    finite = np.isfinite(raw.class_logits).all() and np.isfinite(raw.mask_logits).all()
    if got != expected or not finite:
        raise SystemExit(f"{config}: decoder outputs {got} are not finite or not {expected}")
    return backend


def _frame(size: tuple[int, int]) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (*size, 3), dtype=np.uint8)


def time_interleaved(
    backends: dict[str, OrtBackend], size: tuple[int, int], runs: int
) -> dict[str, dict[str, list[float]]]:
    """ms per run per stage per config; configs alternate run by run so load hits both alike."""
    frame = _frame(size)
    meta = FrameMeta.letterbox(*size, *size)
    options = PostprocessOptions()
    times = {c: {s: [] for s in STAGES} for c in backends}
    for i in range(runs + 1):
        for config, backend in backends.items():
            result = backend.infer_batch([BatchItem(frame, "rgb8", meta, OutputSet())], options)[0]
            if i:  # run 0 warms up allocations
                for s in STAGES:
                    times[config][s].append(result.timings_ms[s])
            print(
                f"  run {i}/{runs} {config}: encoder {result.timings_ms['encoder']:.0f} ms, "
                f"decoder {result.timings_ms['decoder']:.0f} ms",
                file=sys.stderr,
                flush=True,
            )
    return times


def main() -> int:
    """Export, check and time both configs; print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="512x1024")
    parser.add_argument("--classes", type=int, default=8, help="K foreground classes")
    parser.add_argument("--runs", type=int, default=5, help="timed runs (after one warm-up)")
    parser.add_argument("--threads", type=int, default=2, help="ONNX Runtime intra-op threads")
    parser.add_argument(
        "--bundles", type=Path, default=None, help="folder of exported bundles to reuse"
    )
    args = parser.parse_args()

    import onnxruntime
    import torch

    from compactinst_ros.sizes import parse_size

    size = parse_size(args.size)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    with tempfile.TemporaryDirectory() as tmp:
        root = args.bundles or Path(tmp)
        backends = {c: prepare(c, size, args.classes, args.threads, root) for c in CONFIGS}
        times = time_interleaved(backends, size, args.runs)
    a, b = CONFIGS
    print(
        f"\nONNX Runtime {onnxruntime.__version__} CPU, {args.threads} threads, "
        f"{size[0]}x{size[1]}, K={args.classes}, random weights, {args.runs} runs (ms); "
        "min is the least disturbed by other load"
    )
    print(f"| stage | {a} median | {b} median | ratio | {a} min | {b} min | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for s in (*STAGES, "total"):
        cells = []
        for reduce in (statistics.median, min):
            va, vb = (
                reduce([sum(r) for r in zip(*times[c].values(), strict=True)])
                if s == "total"
                else reduce(times[c][s])
                for c in (a, b)
            )
            cells.append(f"{va:.1f} | {vb:.1f} | {va / vb:.2f}")
        print(f"| {s} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
