"""``compactinst derive BUNDLE``: write a bundle's typed graphs as files, for machines without
the derivation tools.

The FP16 and INT8 graphs are derived from the FP32 stages at load (bundle.json ``variants``),
which needs onnx, onnxconverter-common and ONNX Runtime's quantization tools. A vehicle has
TensorRT but not those: derive here, then copy the bundle with its ``typed/`` folder, where each
graph is named by its sha256 and checked against bundle.json before it is used.

``--record`` re-derives the typed graphs from the recipe bundle.json keeps (FP32 islands, INT8
ranges, layers left in FP32), records their sha256 and re-writes the golden cases on the same
images: what a change of the derivation (variants.py) needs, without calibrating again.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
from pathlib import Path

from ..bundle import (
    INT8_GRAPHS,
    METADATA_FILE,
    ModelBundle,
    read_golden,
    write_golden,
    write_typed_graph,
)
from ..errors import BundleError


def derive_all(
    bundle: ModelBundle, precisions: tuple[str, ...] | None = None, workers: int | None = None
) -> list[Path]:
    """Write every typed graph of ``precisions`` (default: all the bundle's but fp32), on up to
    ``workers`` processes (default: one per core; 18 s for the default model's six graphs on
    one core of the development machine, most of it in the TensorRT INT8 encoder), then have
    NVIDIA's parser judge the TensorRT-target ones (``nvidia_parser_issues``): BundleError with
    its words for a graph it refuses."""
    jobs = []
    for precision in precisions or tuple(p for p in bundle.precisions if p != "fp32"):
        targets = INT8_GRAPHS if precision == "int8" else ("tensorrt",)
        jobs += [(stage.name, precision, target) for stage in bundle.stages for target in targets]
    workers = min(len(jobs), workers or os.cpu_count() or 1)
    if workers <= 1:
        written = [write_typed_graph(bundle, *job) for job in jobs]
    else:
        with concurrent.futures.ProcessPoolExecutor(workers) as pool:
            written = list(pool.map(_write_one, [(bundle.root, *job) for job in jobs]))
    graphs = [(job, path) for job, path in zip(jobs, written, strict=True) if job[2] == "tensorrt"]
    issues = nvidia_parser_issues(graphs)
    if issues:
        raise BundleError(
            f"bundle {bundle.root}: NVIDIA's ONNX parser (TensorRT for RTX) refuses "
            + "; ".join(issues)
        )
    return written


def nvidia_parser_issues(graphs: list[tuple[tuple[str, str, str], Path]]) -> list[str]:
    """What NVIDIA's ONNX parser refuses in each ((stage, precision, target), file), as
    ``rtx_build.parser_verdict`` words it; where TensorRT for RTX is not installed, a note on
    stderr naming the install and no verdict (the derivation does not need it)."""
    from ..backends.rtx_build import RTX_INSTALL, parser_verdict
    from ..errors import BackendError  # what a missing TensorRT for RTX raises

    issues = []
    for (stage, precision, _), path in graphs:
        try:
            errors = parser_verdict(path.read_bytes())
        except BackendError:
            print(f"derive: the typed graphs are not checked by NVIDIA's ONNX parser: "
                  f"{RTX_INSTALL}", file=sys.stderr)  # fmt: skip
            return []
        issues += [f"the {precision} {stage} graph ({path.name}): {e}" for e in errors]
    return issues


def _write_one(job: tuple[Path, str, str, str]) -> Path:
    """One typed graph of the bundle at ``job[0]``, in a worker process."""
    root, stage, precision, target = job
    return write_typed_graph(ModelBundle.load(root), stage, precision, target)


def record(root: Path) -> ModelBundle:
    """Re-derive the typed graphs of the bundle at ``root`` from its recorded recipe, record
    their sha256 and re-write its golden cases (same images); returns the reloaded bundle."""
    import json

    from .quantize import Int8Result, golden_cases, write_variants

    bundle = ModelBundle.load(root, with_variants=False)  # the recorded hashes are the old ones
    recipe = json.loads((bundle.root / METADATA_FILE).read_text()).get("variants", {})
    fp16, int8 = recipe.get("fp16"), recipe.get("int8")
    islands = {n: e["fp32_islands"] for n, e in fp16["stages"].items()} if fp16 else None
    result, ranges, calibration, pre_process = None, {}, {}, []
    if int8:
        stages = int8["stages"]
        result = Int8Result({}, {n: e["fp32_layers"] for n, e in stages.items()}, {}, 0.0)
        ranges = {n: bundle.root / e["ranges"] for n, e in stages.items()}
        calibration = int8["calibration"]
        pre_process = [n for n, e in stages.items() if e.get("pre_process")]
    bundle = write_variants(bundle, islands, result, ranges, calibration, pre_process)
    images = [case.image for case in read_golden(bundle.root, "fp32")]
    if images:
        write_golden(bundle.root, golden_cases(bundle, images))
    return bundle


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst derive``."""
    parser.add_argument("bundle", type=Path, help="model bundle folder with precision variants")
    parser.add_argument(
        "--precision",
        action="append",
        choices=("fp16", "int8"),
        help="precision to write, repeatable (default: every variant the bundle has)",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="re-derive from the recorded recipe, record the graphs' sha256 in bundle.json and "
        "re-write the golden cases (after the derivation changed; no files written to typed/)",
    )


def run(args: argparse.Namespace) -> int:
    """Derive and write the typed graphs; print each file (``--record``: re-record them)."""
    if args.record:
        bundle = record(args.bundle)
        for precision, variant in bundle.variants.items():
            for stage, entry in variant["stages"].items():
                print(f"{precision} {stage}: {entry['sha256']}")
        return 0
    bundle = ModelBundle.load(args.bundle)
    written = derive_all(bundle, tuple(args.precision) if args.precision else None)
    if not written:
        print(f"bundle {args.bundle} has no FP16 or INT8 variants; nothing to write")
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0
