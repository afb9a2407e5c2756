#!/usr/bin/env python3
"""TensorRT's type rules per claimed version, read from upstream sources, written as test fixtures.

TensorRT runs nowhere in CI, so ``compactinst_ros.export.tensorrt_rules.type_issues`` and the
TensorRT stand-in (test/gpu/emu/tensorrt_emu.py) check every typed graph against these files:
test/fixtures/tensorrt_rules/<version>.json. Each records, from

* TensorRT's ``include/NvInfer.h`` of the version's release branch (github.com/NVIDIA/TensorRT):
  the input types IDequantizeLayer takes and the output types IQuantizeLayer makes, and whether
  INormalizationLayer::setComputePrecision exists and what a strongly typed network does with it;
* the onnx-tensorrt parser (github.com/onnx/onnx-tensorrt) that branch pins as its
  ``parsers/onnx`` submodule, else the newest parser branch the clone has (the file says which):
  per operator the types of ``docs/operators.md``'s support matrix, the types
  ``QuantDequantLinearHelper`` accepts, and whether the LayerNormalization importer calls
  setComputePrecision and whether a ``stronglyTyped`` test guards that call;

and the rules no source states, each as the conservative assumption with ``"assumed": true``.

    git clone --bare https://github.com/NVIDIA/TensorRT trt.git
    git clone --bare https://github.com/onnx/onnx-tensorrt onnx-trt.git
    python scripts/tensorrt_rules_fixture.py --tensorrt trt.git --parser onnx-trt.git \
        --out test/fixtures/tensorrt_rules
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

#: version -> (where it runs, TensorRT branch, whether only strongly typed networks exist)
VERSIONS = {
    "10.3": ("JetPack 6.1/6.2 (Orin)", "release/10.3", False),
    "10.16": ("JetPack 7.2 (Orin)", "release/10.16", False),
    "11": ("x86 pip wheels (11.x)", "release/11.1", True),
}
#: onnx-tensorrt branches to fall back on, newest first, when the pinned commit is not cloned
PARSER_FALLBACK = ("10.1-GA", "10.0-GA", "main")
#: NvInfer.h type names -> ONNX type names as the support matrix writes them
TRT_TYPES = {"FLOAT": "FP32", "HALF": "FP16", "BF16": "BF16", "INT8": "INT8", "FP8": "FP8",
             "INT4": "INT4", "FP4": "FP4", "INT32": "INT32", "INT64": "INT64", "BOOL": "BOOL",
             "UINT8": "UINT8"}  # fmt: skip
DTYPE = re.compile(r"DataType::k(\w+)")
#: the matrix's columns: operator, supported (Y/N), types, restrictions
MATRIX_ROW = re.compile(r"^\|\s*(\w+)\s*\|\s*(Y|N)\s*\|([^|]*)\|?([^|]*)")


def git(repo: Path, *args: str) -> str:
    """Output of a git command in ``repo`` (a bare clone is fine)."""
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def has_commit(repo: Path, commit: str) -> bool:
    """Whether ``repo`` holds ``commit``."""
    probe = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"],
                           capture_output=True)  # fmt: skip
    return probe.returncode == 0


def types_in(text: str) -> list[str]:
    """The DataType names in ``text`` as the support matrix spells them, in order, once each."""
    found = [TRT_TYPES.get(t, t) for t in DTYPE.findall(text)]
    return list(dict.fromkeys(found))


def header_rules(header: str) -> dict:
    """What NvInfer.h says about Q/DQ types and the normalisation layer's compute precision."""
    dq = re.search(r"IDequantizeLayer supports ([^\n]*)", header)
    q = re.search(r"IQuantizeLayer supports ([^\n]*) output", header)
    norm = header[header.index("\nclass INormalizationLayer ") + 1 :]  # the declaration
    norm = norm[: norm.index("\nclass ")]
    if "setComputePrecision" not in norm:
        precision = "absent"
    elif "Strongly typed network rejects calls to this method" in norm:
        precision = "rejected when strongly typed"
    else:
        precision = "accepted"
    return {
        "dequantize_input_types": types_in(dq.group(1)) if dq else [],
        "quantize_output_types": types_in(q.group(1)) if q else [],
        "normalization_set_compute_precision": precision,
    }


def importer(source: str, op: str) -> str:
    """The body of onnx-tensorrt's importer of ``op``."""
    start = source.index(f"DEFINE_BUILTIN_OP_IMPORTER({op})")
    end = source.find("DEFINE_BUILTIN_OP_IMPORTER(", start + 1)
    return source[start:end]


def parser_rules(importers: str, matrix: str) -> dict:
    """The support matrix's types per operator, the Q/DQ helper's types and what the
    LayerNormalization importer does with setComputePrecision."""
    ops = {}
    for line in matrix.splitlines():
        row = MATRIX_ROW.match(line)
        if row and row.group(1) != "Operator":
            types = [t.strip() for t in row.group(3).split(",") if t.strip()]
            ops[row.group(1)] = {"supported": row.group(2) == "Y", "types": types,
                                 "restrictions": row.group(4).strip()}  # fmt: skip
    helper = importers[importers.index("QuantDequantLinearHelper(") :]
    allowed = re.search(r"ASSERT_NODE\(\s*\(chosenDataType == ([^;]*?)\),", helper, re.S)
    layer_norm = importer(importers, "LayerNormalization")
    call = layer_norm.find("setComputePrecision")
    return {
        "ops": ops,
        "qdq_helper_types": types_in(allowed.group(1)) if allowed else [],
        "layer_norm_sets_compute_precision": call >= 0,
        "layer_norm_call_guarded": call >= 0 and "stronglyTyped" in layer_norm[:call],
    }


def fixture(version: str, trt: Path, parser: Path) -> dict:
    """The rules of one claimed version, with their sources."""
    platform, branch, strongly_typed_only = VERSIONS[version]
    trt_commit = git(trt, "rev-parse", branch).strip()
    pinned = git(trt, "ls-tree", branch, "parsers/onnx").split()[2]
    exact = has_commit(parser, pinned)
    parser_ref = pinned if exact else next(
        b for b in PARSER_FALLBACK if subprocess.run(
            ["git", "-C", str(parser), "rev-parse", "--verify", "-q", b], capture_output=True
        ).returncode == 0
    )  # fmt: skip
    header = header_rules(git(trt, "show", f"{branch}:include/NvInfer.h"))
    parsed = parser_rules(
        git(parser, "show", f"{parser_ref}:onnxOpImporters.cpp"),
        git(parser, "show", f"{parser_ref}:docs/operators.md"),
    )
    if exact:
        layer_norm = {
            "calls": parsed["layer_norm_sets_compute_precision"],
            "guarded_by_strongly_typed": parsed["layer_norm_call_guarded"],
            "assumed": False,
        }
    elif header["normalization_set_compute_precision"] == "absent":
        layer_norm = {
            "calls": False,
            "guarded_by_strongly_typed": None,
            "assumed": False,
            "why": "NvInfer.h has no INormalizationLayer::setComputePrecision to call",
        }
    else:
        layer_norm = {
            "calls": True,
            "guarded_by_strongly_typed": False,
            "assumed": True,
            "why": f"the parser {branch} pins ({pinned[:12]}) is not readable; {parser_ref} "
            f"calls it {'guarded' if parsed['layer_norm_call_guarded'] else 'unguarded'}: "
            "assume an unguarded call, which a strongly typed network rejects",
        }
    return {
        "version": version,
        "platform": platform,
        "strongly_typed_only": strongly_typed_only,
        "sources": {
            "tensorrt": {
                "repo": "NVIDIA/TensorRT",
                "branch": branch,
                "commit": trt_commit,
                "file": "include/NvInfer.h",
            },
            "parser": {
                "repo": "onnx/onnx-tensorrt",
                "pinned_commit": pinned,
                "read": parser_ref,
                "exact": exact,
                "read_commit": git(parser, "rev-parse", parser_ref).strip(),
                "files": ["onnxOpImporters.cpp", "docs/operators.md"],
            },
        },
        "dequantize_input_types": header["dequantize_input_types"],
        "quantize_output_types": header["quantize_output_types"],
        "qdq_parser_types": parsed["qdq_helper_types"],
        "normalization_set_compute_precision": header["normalization_set_compute_precision"],
        "layer_norm_importer_sets_compute_precision": layer_norm,
        "matmul_weight_scales": {
            "per_channel_axis": "output channels: B's last axis; A per tensor only",
            "assumed": True,
            "why": "no header or importer states it: an INT8 GEMM factors a scale out of its sums "
            "only along an axis it does not reduce, so scales on the reduction axis keep the "
            "MatMul out of INT8 (A's rows as output channels are not assumed either)",
        },
        "ops": parsed["ops"],
    }


def main(argv: list[str] | None = None) -> int:
    """Write one fixture per claimed version."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensorrt", type=Path, required=True, help="clone of NVIDIA/TensorRT")
    parser.add_argument("--parser", type=Path, required=True, help="clone of onnx/onnx-tensorrt")
    parser.add_argument("--out", type=Path, default=Path("test/fixtures/tensorrt_rules"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for version in VERSIONS:
        record = fixture(version, args.tensorrt, args.parser)
        path = args.out / f"{version}.json"
        path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path} (parser {record['sources']['parser']['read']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
