"""NVIDIA's own ONNX parser and builder on any x86-64 host: TensorRT for RTX, CPU-only AOT.

TensorRT for RTX (``pip install tensorrt-rtx-cu13``, module ``tensorrt_rtx``) builds engines
without a GPU for chosen compute capabilities (SM75 ... SM121; no SM87 Orin), with the same
Builder / OnnxParser / IBuilderConfig API as TensorRT 10 and an ONNX parser from the same
onnx-tensorrt source. So every typed graph we ship can be judged by NVIDIA's parser, and its
engine layers (types, fusions, fused attention) read, on a CI machine: what a GPU will run,
shown before it runs. The builder code is ``trt_build.build_serialized``; this module adds the
module import, the compute capabilities, the layer log (``engine_layers``) and the engines a
bundle carries (``write_bundle_engines``, ``build-engine --rtx``). The JIT phase at first load
on an RTX GPU is not run here.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..bundle import ModelBundle, StageGraph, StageSpec
from ..errors import BackendError
from .base import BuildOptions
from .engine_layers import EngineLayer, parse_layers
from .trt_build import build_serialized, parser_bytes, parser_log

#: importable names of TensorRT for RTX: the metapackage's module, or the bindings alone
RTX_MODULES = ("tensorrt_rtx", "tensorrt_rtx_bindings")
RTX_INSTALL = "pip install tensorrt-rtx-cu13 (CUDA 13; tensorrt-rtx-cu12 for CUDA 12)"
#: compute capability -> the ComputeCapability member an AOT build targets (Linux x86-64)
COMPUTE_CAPABILITIES = {
    "7.5": "SM75", "8.0": "SM80", "8.6": "SM86", "8.9": "SM89", "12.0": "SM120", "12.1": "SM121",
}  # fmt: skip
#: the bundle's folder of engines built ahead of time
ENGINES_DIR = "engines"
MANIFEST = "manifest.json"
#: what a CPU-only build logs as an error although nothing is wrong: there is no GPU driver
NO_DRIVER_NOISE = ("cudaError 35", "CUDA driver version is insufficient")


def import_tensorrt_rtx(cpu_setting: str | None = None) -> Any:
    """The TensorRT for RTX module; BackendError naming the install command otherwise.
    ``cpu_setting``: how whoever runs the model chooses the CPU instead (None: building only)."""
    for name in RTX_MODULES:
        try:
            return __import__(name)
        except ImportError:
            continue
    cpu = f"; or run on the CPU with {cpu_setting}" if cpu_setting else ""
    raise BackendError(
        f"TensorRT for RTX is not importable (tried {', '.join(RTX_MODULES)}): {RTX_INSTALL}; "
        "it builds engines and checks graphs on any x86-64 machine, no GPU needed" + cpu
    )


def compute_capability(trt: Any, value: str) -> Any:
    """The ComputeCapability member of ``value`` ("8.6", "86" or "SM86"); BackendError listing
    the supported ones otherwise."""
    text = value.upper().removeprefix("SM").replace(".", "")
    for cc, member in COMPUTE_CAPABILITIES.items():
        if cc.replace(".", "") == text:
            return getattr(trt.ComputeCapability, member)
    raise BackendError(
        f"compute capability '{value}' cannot be built ahead of time; TensorRT for RTX builds "
        f"for {', '.join(COMPUTE_CAPABILITIES)} (no 8.7: Jetson Orin engines are built on the "
        "Jetson with TensorRT)"
    )


def layer_logger(trt: Any) -> Any:
    """An ILogger of ``trt`` that keeps every message (layer lines come at VERBOSE)."""

    class Log(trt.ILogger):
        """Messages by severity, in order."""

        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.messages: list[tuple[Any, str]] = []

        def log(self, severity: Any, msg: str) -> None:
            """Keep the message."""
            self.messages.append((severity, msg))

        def errors(self) -> list[str]:
            """The errors logged, without the no-GPU-driver noise of a CPU-only build."""
            bad = (trt.ILogger.Severity.ERROR, trt.ILogger.Severity.INTERNAL_ERROR)
            return [m for s, m in self.messages if s in bad and not _noise(m)]

        def warnings(self) -> list[str]:
            """The warnings logged."""
            return [m for s, m in self.messages if s == trt.ILogger.Severity.WARNING]

        def lines(self) -> Iterator[str]:
            """Every message's text."""
            return (m for _, m in self.messages)

    return Log()


def _noise(message: str) -> bool:
    return any(text in message for text in NO_DRIVER_NOISE)


@dataclass
class AotEngine:
    """An engine built ahead of time for one compute capability, and what the builder said."""

    plan: bytes
    compute_capability: str
    layers: list[EngineLayer]
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def aot_build(
    graph: StageGraph,
    stage: StageSpec,
    cc: str = "8.6",
    batch: int = 1,
    options: BuildOptions | None = None,
    progress: bool = False,
    trt: Any = None,
) -> AotEngine:
    """Build ``graph`` with TensorRT for RTX for compute capability ``cc`` (static shapes at
    ``batch``, detailed profiling so the layers can be read) and return the plan with its
    engine layers. BackendError with the parser's words for a graph it refuses."""
    trt = trt or import_tensorrt_rtx()
    target = compute_capability(trt, cc)
    log = layer_logger(trt)

    def configure(config: Any) -> None:
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
        config.num_compute_capabilities = 1
        config.set_compute_capability(target, 0)

    plan = build_serialized(
        graph, stage, None, options or BuildOptions(), progress, batch,
        trt=trt, logger=log, configure=configure,
    )  # fmt: skip
    return AotEngine(plan, cc, parse_layers(log.lines()), log.errors(), log.warnings())


def parser_verdict(model_bytes: bytes, trt: Any = None) -> list[str]:
    """What NVIDIA's ONNX parser refuses in ``model_bytes`` as the builder gets them
    (``trt_build.parser_bytes``): the parser's own errors, node and operator named; empty when
    it imports the graph. Parsing builds nothing (~0.2 s)."""
    trt = trt or import_tensorrt_rtx()
    errors = parser_log(trt, parser_bytes(model_bytes), layer_logger(trt))
    return [_without_noise(e) for e in errors]


def _without_noise(error: str) -> str:
    return "\n".join(line for line in error.splitlines() if not _noise(line))


def engine_dir(root: Path, version: str, cc: str) -> Path:
    """Where a bundle keeps the engines of one TensorRT for RTX version and compute capability:
    ``<root>/engines/tensorrt_rtx-<version>/sm<cc>`` (an engine loads only on the version that
    built it, JIT-compiled there for the GPU at hand)."""
    return root / ENGINES_DIR / f"tensorrt_rtx-{version}" / f"sm{cc.replace('.', '')}"


def write_bundle_engines(
    bundle: ModelBundle,
    ccs: Sequence[str],
    precision: str,
    batch_sizes: Sequence[int] = (1,),
    options: BuildOptions | None = None,
    log: Callable[[str], None] = print,
) -> list[Path]:
    """Build every stage of ``bundle`` from its ``precision`` TensorRT-target graph for each
    compute capability in ``ccs`` and batch size, ahead of time, into ``engine_dir`` (the plan
    written beside and renamed into place), with a ``manifest.json`` there: the builder, and per
    engine its stage, precision, batch, the typed graph's sha256 (what it was built from) and
    the plan's. Returns the plans written."""
    trt = import_tensorrt_rtx()
    target = "tensorrt" if precision == "int8" else None
    written = []
    for cc in ccs:
        compute_capability(trt, cc)  # refused before any build
        folder = engine_dir(bundle.root, trt.__version__, cc)
        folder.mkdir(parents=True, exist_ok=True)
        entries = []
        for batch in batch_sizes:
            for stage in bundle.stages:
                graph = bundle.stage_graph(stage.name, precision, target)
                engine = aot_build(graph, stage, cc, batch, options, trt=trt)
                path = folder / f"{stage.name}.{precision}.b{batch}.plan"
                partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
                partial.write_bytes(engine.plan)
                os.replace(partial, path)
                entries.append({
                    "stage": stage.name, "precision": precision, "batch": batch,
                    "file": path.name, "onnx_sha256": graph.sha256,
                    "plan_sha256": hashlib.sha256(engine.plan).hexdigest(),
                })  # fmt: skip
                written.append(path)
                log(f"built {stage.name} {precision} batch {batch} for sm {cc}: {path}")
        manifest = {"builder": f"TensorRT for RTX {trt.__version__}", "compute_capability": cc,
                    "engines": entries}  # fmt: skip
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return written


def bundle_plan(
    bundle: ModelBundle, version: str, cc: str, graph: StageGraph, stage: StageSpec, batch: int
) -> tuple[bytes | None, str]:
    """The plan ``bundle`` carries for ``stage`` at ``batch``, built by TensorRT for RTX
    ``version`` for compute capability ``cc`` from exactly ``graph`` (its sha256 in the
    manifest, the plan's own sha256 checked), and where it came from; (None, why not) where
    there is none or it does not match, so that the caller builds one instead."""
    folder = engine_dir(bundle.root, version, cc)
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return None, f"the bundle has no engines for TensorRT for RTX {version}, sm {cc}"
    try:
        entries = json.loads(manifest.read_text())["engines"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"{manifest} is unreadable ({exc})"
    for entry in entries:
        wanted = (stage.name, graph.precision, batch)
        if (entry.get("stage"), entry.get("precision"), entry.get("batch")) != wanted:
            continue
        path = folder / str(entry.get("file"))
        if entry.get("onnx_sha256") != graph.sha256:
            return None, f"{path} was built from another {graph.precision} graph (stale)"
        try:
            plan = path.read_bytes()
        except OSError as exc:
            return None, f"{path} is unreadable ({exc})"
        if hashlib.sha256(plan).hexdigest() != entry.get("plan_sha256"):
            return None, f"{path} does not match its manifest's sha256 (corrupt)"
        return plan, str(path)
    return None, f"{manifest} lists no {stage.name} {graph.precision} engine at batch {batch}"
