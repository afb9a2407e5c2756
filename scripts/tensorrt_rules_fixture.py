#!/usr/bin/env python3
"""TensorRT's type rules per claimed version, read from upstream sources, written as test fixtures.

TensorRT runs nowhere in CI, so ``compactinst_ros.export.tensorrt_rules.type_issues`` and the
TensorRT stand-in (test/gpu/emu/tensorrt_emu.py) check every typed graph against these files:
test/fixtures/tensorrt_rules/<version>.json. Each records, from

* TensorRT's ``include/NvInfer.h`` of the version's release branch (github.com/NVIDIA/TensorRT):
  the input types IDequantizeLayer takes and the output types IQuantizeLayer makes, and whether
  INormalizationLayer::setComputePrecision exists and what a strongly typed network does with it;
* the onnx-tensorrt parser (github.com/onnx/onnx-tensorrt) that branch pins as its
  ``parsers/onnx`` submodule, else the one the newest earlier release branch pins that the
  clone holds (the file says which, and marks what it carries over as assumed):
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
#: a type name as the support matrix writes one (FP32, INT8, BOOL)
TYPE_NAME = re.compile(r"[A-Z][A-Z0-9]*")
#: TensorRT's release branches, whose ``parsers/onnx`` pins are the fallbacks
RELEASE_BRANCH = re.compile(r"release/(\d+(?:\.\d+)*)")
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
            # type names only: a row may hold a sentence there instead ("Not supported. ...")
            types = [t.strip() for t in row.group(3).split(",") if TYPE_NAME.fullmatch(t.strip())]
            ops[row.group(1)] = {"supported": row.group(2) == "Y", "types": types,
                                 "restrictions": row.group(4).strip()}  # fmt: skip
    helper = importers[importers.index("QuantDequantLinearHelper(") :]
    # up to 10.3 an assertion on the chosen type; from 10.4 the zero point's type is tested
    # (other types become INT8 with a warning)
    allowed = re.search(r"ASSERT_NODE\(\s*\(chosenDataType == ([^;]*?)\),", helper, re.S)
    allowed = allowed or re.search(r"if \((zeroPointDataType == [^)]*)\)\s*\{", helper)
    layer_norm = importer(importers, "LayerNormalization")
    call = layer_norm.find("setComputePrecision")
    return {
        "ops": ops,
        "qdq_helper_types": types_in(allowed.group(1)) if allowed else [],
        "layer_norm_sets_compute_precision": call >= 0,
        "layer_norm_call_guarded": call >= 0 and "stronglyTyped" in layer_norm[:call],
    }


def pinned_parser(trt: Path, branch: str) -> str:
    """The onnx-tensorrt commit TensorRT's ``branch`` pins as its ``parsers/onnx``."""
    return git(trt, "ls-tree", branch, "parsers/onnx").split()[2]


def readable_parser(trt: Path, parser: Path, branch: str) -> tuple[str, str]:
    """(release branch, parser commit): ``branch``'s own pinned parser where the clone holds
    it, else the pin of the newest earlier release branch that it holds (the onnx-tensorrt
    clone may trail TensorRT's releases)."""
    own = RELEASE_BRANCH.fullmatch(branch)
    limit = tuple(int(p) for p in own.group(1).split(".")) if own else (10**6,)
    releases = []
    for ref in git(trt, "for-each-ref", "--format=%(refname:short)", "refs/heads").split():
        found = RELEASE_BRANCH.fullmatch(ref)
        key = tuple(int(p) for p in found.group(1).split(".")) if found else None
        if key is not None and key <= limit:
            releases.append((key, ref))
    for _, ref in sorted(releases, reverse=True):
        commit = pinned_parser(trt, ref)
        if has_commit(parser, commit):
            return ref, commit
    raise SystemExit(f"{parser} holds no parser that {branch} or an earlier release pins")


def fixture(version: str, trt: Path, parser: Path) -> dict:
    """The rules of one claimed version, with their sources."""
    platform, branch, strongly_typed_only = VERSIONS[version]
    trt_commit = git(trt, "rev-parse", branch).strip()
    pinned = pinned_parser(trt, branch)
    read_branch, parser_ref = readable_parser(trt, parser, branch)
    exact = parser_ref == pinned
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
        guarded = parsed["layer_norm_call_guarded"]
        layer_norm = {
            "calls": parsed["layer_norm_sets_compute_precision"],
            "guarded_by_strongly_typed": guarded,
            "assumed": True,
            "why": f"the parser {branch} pins ({pinned[:12]}) is not readable; the one "
            f"{read_branch} pins ({parser_ref[:12]}) calls it "
            f"{'guarded by a strongly typed test' if guarded else 'unguarded'}: assumed unchanged",
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
                "read": f"the pin of {read_branch}",
                "exact": exact,
                "read_commit": parser_ref,
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
