"""``compactinst derive BUNDLE``: write a bundle's typed graphs as files, for machines without
the derivation tools.

The FP16 and INT8 graphs are derived from the FP32 stages at load (bundle.json ``variants``),
which needs onnx, onnxconverter-common and ONNX Runtime's quantization tools. A vehicle has
TensorRT but not those: derive here, then copy the bundle with its ``typed/`` folder, where each
graph is named by its sha256 and checked against bundle.json before it is used.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..bundle import INT8_GRAPHS, ModelBundle, write_typed_graph


def derive_all(bundle: ModelBundle, precisions: tuple[str, ...] | None = None) -> list[Path]:
    """Write every typed graph of ``precisions`` (default: all the bundle's but fp32)."""
    written = []
    for precision in precisions or tuple(p for p in bundle.precisions if p != "fp32"):
        targets = INT8_GRAPHS if precision == "int8" else ("tensorrt",)
        for stage in bundle.stages:
            for target in targets:
                written.append(write_typed_graph(bundle, stage.name, precision, target))
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst derive``."""
    parser.add_argument("bundle", type=Path, help="model bundle folder with precision variants")
    parser.add_argument(
        "--precision",
        action="append",
        choices=("fp16", "int8"),
        help="precision to write, repeatable (default: every variant the bundle has)",
    )


def run(args: argparse.Namespace) -> int:
    """Derive and write the typed graphs; print each file."""
    bundle = ModelBundle.load(args.bundle)
    written = derive_all(bundle, tuple(args.precision) if args.precision else None)
    if not written:
        print(f"bundle {args.bundle} has no FP16 or INT8 variants; nothing to write")
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0
