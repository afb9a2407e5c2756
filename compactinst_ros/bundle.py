"""Model bundle: a folder with one ONNX file per stage and ``bundle.json`` describing them.

The bundle is the only thing the runtime needs from training/export. Schema (format 1)::

    {
      "format": 1,
      "architecture": {"name": "compactinst_r18", "backbone": "resnet18", "decoder_layers": 3,
                       "pool_factor": 2, "mask_stride": 8, "num_queries": 100, "hidden_dim": 256},
      "input": {"height": 512, "width": 1024, "channel_order": "RGB", "layout": "NCHW",
                "dtype": "float32", "value_range": [0, 255],
                "pad_value": [123.675, 116.28, 103.53]},
      "labels": [{"id": 1, "name": "person", "isthing": true}, ...],
      "stages": [
        {"name": "encoder", "file": "encoder.onnx", "sha256": "...",
         "inputs":  [{"name": "image", "shape": ["batch", 3, 512, 1024], "dtype": "float32"}],
         "outputs": [{"name": "e3", "shape": [...], "dtype": "float32"}, ...]},
        {"name": "decoder", "file": "decoder.onnx", "sha256": "...",
         "inputs": [...], "outputs": [{"name": "pred_logits", ...}, {"name": "pred_masks", ...}]}
      ],
      "opset": 17,
      "source": {"checkpoint_sha256": "...", "config": "compactinst_r18", "created": "...",
                 "intended_use": "..."},
      "variants": {   # optional: the typed graphs, derived from the FP32 stages at load
        "fp16": {"derive": "fp16", "tools": {...},
                 "stages": {"encoder": {"fp32_islands": [...], "sha256": "..."}, ...}},
        "int8": {"derive": "qdq", "tools": {...}, "calibration": {"method": "minmax", ...},
                 "stages": {"encoder": {"ranges": "int8_ranges.encoder.json",
                                        "ranges_sha256": "...", "pre_process": true,
                                        "fp32_layers": [...],
                                        "sha256": {"tensorrt": "...", "cpu": "..."}}, ...}}
      }
    }

Normalisation happens inside the encoder graph, so the encoder input is RGB in 0..255 and the
letterbox padding is the mean colour (it normalises to 0, as detectron2's zero padding does).

What is loaded is what was exported: every stage ``file`` must resolve (symlinks included) to a
file inside the bundle folder, and its sha256 is checked at load by default. A bundle without
hashes still loads, with a warning naming ``compactinst bundle-hash DIR``, which records them.

Precision variants (``compactinst quantize``) are not stored as graphs: a load checks the
recipe files' sha256 (the INT8 calibration ranges), and ``stage_graph`` derives the typed graph
(``variants.py``, deterministic) and checks its sha256 against the recorded one, so the graph
that runs is the one that was evaluated.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import BundleError
from .labels import LabelSet
from .resources import METADATA_FILE, default_model

BUNDLE_FORMAT = 1
STAGE_ORDER = ("encoder", "decoder")
DECODER_OUTPUTS = ("pred_logits", "pred_masks")
#: name of the stage graphs' symbolic batch axis (dim 0 of every stage input and output)
BATCH_AXIS = "batch"
HASH_COMMAND = "compactinst bundle-hash"
#: the precisions a stage graph can be typed in; fp32 is the exported graph itself
PRECISIONS = ("fp32", "fp16", "int8")
#: golden inputs and the typed graphs' CPU outputs for them, the engines' acceptance check
GOLDEN_FILE = "golden.npz"
#: key of bundle.json's "source" that says what the model is for (see ``model_caveat``)
INTENDED_USE = "intended_use"
#: how each precision variant is derived from the FP32 stages (bundle.json "variants")
DERIVATIONS = {"fp16": "fp16", "int8": "qdq"}
#: the INT8 graphs: TensorRT's (symmetric s8) and the fastest CPU one (u8 activations)
INT8_GRAPHS = ("tensorrt", "cpu")
QUANTIZE_COMMAND = "compactinst quantize"
DERIVE_COMMAND = "compactinst derive"
#: folder of a bundle with derived graphs as files (named by sha256), for machines that cannot
#: derive them
TYPED_DIR = "typed"


@dataclass(frozen=True)
class TensorSpec:
    """Name, per-frame shape (batch 1) and dtype of one stage input or output.

    ``batched``: dim 0 is the graph's symbolic batch axis (``"batch"`` in bundle.json), so one
    run takes several frames (cameras); bundles exported before the axis existed are batch 1.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    batched: bool = False

    def batch_shape(self, batch: int) -> tuple[int, ...]:
        """The shape of ``batch`` frames; BundleError where the tensor has no batch axis."""
        if batch != 1 and not self.batched:
            raise BundleError(
                f"tensor '{self.name}' has a fixed batch of 1; re-export the bundle with "
                f"'compactinst export' (it writes a batch axis) to run {batch} frames at once"
            )
        return (batch, *self.shape[1:])

    def to_json(self) -> dict:
        """Serialise for bundle.json."""
        dims: list[int | str] = list(self.shape)
        if self.batched:
            dims[0] = BATCH_AXIS
        return {"name": self.name, "shape": dims, "dtype": self.dtype}


@dataclass(frozen=True)
class StageSpec:
    """One ONNX stage of the model: its file, hash and I/O."""

    name: str
    path: Path
    sha256: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def to_json(self) -> dict:
        """Serialise for bundle.json (file name relative to the bundle)."""
        return {
            "name": self.name,
            "file": self.path.name,
            "sha256": self.sha256,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
        }


@dataclass(frozen=True)
class StageGraph:
    """One stage's ONNX graph in one precision: the bytes a backend loads and their sha256."""

    stage: str
    precision: str
    model_bytes: bytes
    sha256: str


@dataclass(frozen=True)
class GoldenCase:
    """A golden model input and one precision's CPU decoder outputs for it (the acceptance
    reference an engine built from that precision's graph must agree with)."""

    image: np.ndarray
    outputs: dict[str, np.ndarray]


def check_precision(precision: str) -> str:
    """``precision`` if it is one of PRECISIONS; BundleError naming the choices otherwise."""
    if precision not in PRECISIONS:
        raise BundleError(f"unknown precision '{precision}'; choose one of {', '.join(PRECISIONS)}")
    return precision


@dataclass(frozen=True)
class ModelBundle:
    """A validated bundle on disk."""

    root: Path
    architecture: dict
    input_h: int
    input_w: int
    pad_value: tuple[float, float, float]
    labels: LabelSet
    stages: tuple[StageSpec, ...]
    source: dict
    #: bundle.json "variants": precision -> how its graphs are derived (validated at load)
    variants: dict = field(default_factory=dict)
    #: precision -> why its variant cannot be derived from this copy (its recipe files are
    #: missing or changed): the other precisions still run; asking for this one gives the reason
    unavailable: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Architecture name, e.g. ``compactinst_r18``."""
        return str(self.architecture.get("name", "unknown"))

    @property
    def mask_stride(self) -> int:
        """Stride of the decoder's mask logits relative to the model input (8, or 4 for M 1/4)."""
        return int(self.architecture["mask_stride"])

    @property
    def boundary_tensors(self) -> frozenset[str]:
        """The tensors one stage hands the next (the encoder's features): FP16 at both ends of
        the FP16 graphs (``variants.fp16_graph``'s ``half_io``)."""
        produced = {t.name for s in self.stages for t in s.outputs}
        return frozenset(produced & {t.name for s in self.stages for t in s.inputs})

    @property
    def image_tensor(self) -> str:
        """The name of the first stage's input: the letterboxed image. The FP16 graphs take it
        in half where their first step casts it to FP16 (``variants.half_image_input``); INT8
        graphs, which the CPU backends run too, keep it FP32."""
        return self.stages[0].inputs[0].name

    def stage(self, name: str) -> StageSpec:
        """The stage called ``name``; BundleError if absent."""
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise BundleError(f"bundle {self.root} has no stage '{name}'")

    @property
    def batched(self) -> bool:
        """True when every stage tensor has the batch axis: one run can take several frames."""
        return all(t.batched for s in self.stages for t in (*s.inputs, *s.outputs))

    @property
    def precisions(self) -> tuple[str, ...]:
        """The precisions whose stage graphs this bundle carries (fp32 always)."""
        return tuple(
            p
            for p in PRECISIONS
            if p == "fp32" or (p in self.variants and p not in self.unavailable)
        )

    def stage_graph(
        self, stage: str, precision: str = "fp32", target: str = "tensorrt"
    ) -> StageGraph:
        """Stage ``stage``'s graph typed in ``precision``; BundleError where the bundle has no
        such variant (the message names the command that adds it) or where the derived graph
        is not the recorded one (its sha256). ``target`` picks one of INT8_GRAPHS for int8."""
        spec = self.stage(stage)
        if check_precision(precision) in self.unavailable:
            raise BundleError(self.unavailable[precision])
        if precision not in self.precisions:
            raise BundleError(
                f"bundle {self.root} has no {precision} graphs (it has "
                f"{', '.join(self.precisions)}); add them with '{QUANTIZE_COMMAND} "
                f"{self.root} --data DIR' or choose another precision"
            )
        if precision == "fp32":
            data = spec.path.read_bytes()
            digest = spec.sha256 or hashlib.sha256(data).hexdigest()
            return StageGraph(stage, precision, data, digest)
        if precision == "int8" and target not in INT8_GRAPHS:
            raise BundleError(f"unknown int8 graph '{target}'; choose {', '.join(INT8_GRAPHS)}")
        entry = self.variants[precision]["stages"][stage]
        recorded = entry["sha256"][target] if precision == "int8" else entry["sha256"]
        key = (spec.sha256, str(self.root), stage, precision, target, recorded)
        if key not in _DERIVED:
            stored = typed_graph_path(self.root, recorded)
            data = stored.read_bytes() if stored.is_file() else None
            if data is not None and hashlib.sha256(data).hexdigest() != recorded:
                raise BundleError(
                    f"bundle {self.root}: {stored} does not match the sha256 its name records "
                    f"(changed or corrupt); delete it and re-run '{DERIVE_COMMAND} {self.root}'"
                )
            if data is None:
                data = _derive(self, spec, precision, target, entry)
            digest = hashlib.sha256(data).hexdigest()
            if digest != recorded:
                raise BundleError(
                    f"bundle {self.root}: the {precision} {stage} graph derived here has sha256 "
                    f"{digest[:12]}, bundle.json records {recorded[:12]}: the derivation tools "
                    f"differ (recorded {self.variants[precision].get('tools')}) or the recipe "
                    f"was changed; re-run '{QUANTIZE_COMMAND} {self.root} --data DIR' here"
                )
            _DERIVED[key] = StageGraph(stage, precision, data, digest)
        return _DERIVED[key]

    def golden_cases(self, precision: str = "fp32") -> tuple[GoldenCase, ...]:
        """The bundle's golden inputs with ``precision``'s CPU outputs; () where it has none."""
        return read_golden(self.root, check_precision(precision))

    @property
    def fingerprint(self) -> str:
        """Short hash over the stage hashes: identifies the model in reports and caches."""
        joined = "".join(s.sha256 for s in self.stages)
        return hashlib.sha256(joined.encode()).hexdigest()[:16]

    @classmethod
    def load(
        cls, root: str | Path, verify_hashes: bool = True, with_variants: bool = True
    ) -> ModelBundle:
        """Read and validate ``root/bundle.json``; BundleError names what is wrong and the fix.

        ``verify_hashes`` checks each stage file against its recorded sha256 (20-40 ms for the
        20 MB default bundle); pass False only for files that are deliberately not the export's.
        ``with_variants`` False loads the FP32 stages alone, for the command that replaces the
        variants (a half-done run leaves ranges that no longer match their recorded sha256).
        """
        root = Path(root)
        meta_path = root / METADATA_FILE
        if not root.is_dir():
            raise BundleError(
                f"model bundle '{root}' does not exist; export one with "
                "'compactinst export CONFIG --out DIR' or use models/default"
            )
        if not meta_path.is_file():
            raise BundleError(
                f"'{root}' is not a model bundle: {METADATA_FILE} is missing "
                "(re-export it with 'compactinst export')"
            )
        meta = _read_metadata(root)
        if not with_variants:
            meta.pop("variants", None)
        return cls.from_json(root, meta, verify_hashes=verify_hashes)

    @classmethod
    def from_json(cls, root: Path, meta: dict, verify_hashes: bool = True) -> ModelBundle:
        """Validate parsed metadata (see module docstring for the schema)."""
        where = root / METADATA_FILE
        if not isinstance(meta, dict):
            raise BundleError(f"{where}: top level must be an object")
        if meta.get("format") != BUNDLE_FORMAT:
            raise BundleError(
                f"{where}: format {meta.get('format')!r} is not supported (expected "
                f"{BUNDLE_FORMAT}); re-export the bundle with this version"
            )
        for key in ("architecture", "input", "labels", "stages"):
            if key not in meta:
                raise BundleError(f"{where}: required key '{key}' is missing")
        arch = meta["architecture"]
        if not isinstance(arch, dict) or "mask_stride" not in arch:
            raise BundleError(f"{where}: architecture.mask_stride is missing")
        inp = meta["input"]
        try:
            input_h, input_w = int(inp["height"]), int(inp["width"])
            pad_value = tuple(float(v) for v in inp["pad_value"])
        except (KeyError, TypeError, ValueError) as exc:
            raise BundleError(
                f"{where}: input needs height, width and pad_value ({exc!r})"
            ) from None
        if input_h % 32 or input_w % 32 or input_h <= 0 or input_w <= 0:
            raise BundleError(
                f"{where}: input size {input_h}x{input_w} must be positive multiples of 32"
            )
        if len(pad_value) != 3:
            raise BundleError(f"{where}: input.pad_value must have 3 entries (RGB)")
        labels = LabelSet.from_json(meta["labels"])
        stages = tuple(_parse_stage(root, s, where, verify_hashes) for s in meta["stages"])
        unhashed = [s.name for s in stages if not s.sha256]
        if verify_hashes and unhashed:
            warnings.warn(
                f"bundle {root}: stages {unhashed} have no sha256 in {METADATA_FILE}, so their "
                f"files are loaded unverified; record the hashes with '{HASH_COMMAND} {root}'",
                stacklevel=3,
            )
        names = tuple(s.name for s in stages)
        if names != STAGE_ORDER:
            raise BundleError(f"{where}: stages must be {list(STAGE_ORDER)}, found {list(names)}")
        decoder_outputs = tuple(t.name for t in stages[1].outputs)
        if decoder_outputs[:2] != DECODER_OUTPUTS:
            raise BundleError(
                f"{where}: decoder outputs must start with {list(DECODER_OUTPUTS)}, "
                f"found {list(decoder_outputs)}"
            )
        k1 = stages[1].outputs[0].shape[-1]
        if k1 != labels.num_classes + 1:
            raise BundleError(
                f"{where}: pred_logits has {k1} classes but labels lists {labels.num_classes} "
                f"(+1 no-object expected); the labels do not belong to this model"
            )
        parsed, unavailable = _parse_variants(root, meta.get("variants", {}), where, verify_hashes)
        return cls(
            root=root,
            architecture=dict(arch),
            input_h=input_h,
            input_w=input_w,
            pad_value=pad_value,  # type: ignore[arg-type]
            labels=labels,
            stages=stages,
            source=dict(meta.get("source", {})),
            variants=parsed,
            unavailable=unavailable,
        )

    def to_json(self) -> dict:
        """Serialise back to the bundle.json object."""
        return {
            "format": BUNDLE_FORMAT,
            "architecture": self.architecture,
            "input": {
                "height": self.input_h,
                "width": self.input_w,
                "channel_order": "RGB",
                "layout": "NCHW",
                "dtype": "float32",
                "value_range": [0, 255],
                "pad_value": list(self.pad_value),
            },
            "labels": self.labels.to_json(),
            "stages": [s.to_json() for s in self.stages],
            "opset": 17,
            "source": self.source,
            **({"variants": self.variants} if self.variants else {}),
        }

    def save(self) -> Path:
        """Write bundle.json into ``root``; returns its path."""
        path = self.root / METADATA_FILE
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return path


def model_caveat(bundle: ModelBundle) -> str | None:
    """What the model is for, where bundle.json's ``source.intended_use`` says (the demo model
    knows synthetic scenes only): one line for infer, replay reports and the node's log."""
    text = bundle.source.get(INTENDED_USE)
    return f"model {bundle.name}: {text}" if text else None


#: derived graphs of this process, by FP32 hash, bundle, stage, precision, target and recorded hash
_DERIVED: dict[tuple[str, ...], StageGraph] = {}


def typed_graph_path(root: str | Path, sha256: str) -> Path:
    """Where a bundle keeps a derived graph as a file: ``typed/<sha256>.onnx``."""
    return Path(root) / TYPED_DIR / f"{sha256}.onnx"


def write_typed_graph(bundle: ModelBundle, stage: str, precision: str, target: str) -> Path:
    """Write one typed graph of ``bundle`` into its ``typed/`` folder; returns the file.

    Written beside and renamed into place: a process loading the bundle meanwhile finds the
    whole graph or none (then derives it), never a part that fails its sha256 check."""
    graph = bundle.stage_graph(stage, precision, target)
    path = typed_graph_path(bundle.root, graph.sha256)
    path.parent.mkdir(exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_bytes(graph.model_bytes)
    os.replace(partial, path)
    return path


def _derive(
    bundle: ModelBundle, spec: StageSpec, precision: str, target: str, entry: dict
) -> bytes:
    """The bytes of one derived stage graph (variants.py does the rewriting)."""
    try:
        import onnx

        from . import variants
    except ImportError as exc:  # a vehicle: TensorRT, but not the derivation tools
        raise BundleError(
            f"bundle {bundle.root}: deriving its {precision} {spec.name} graph needs the "
            f"precision tools ({exc}): pip install 'compactinst_ros[precision]', or run "
            f"'{DERIVE_COMMAND} {bundle.root}' where they are installed and copy the bundle "
            f"with its {TYPED_DIR}/ folder"
        ) from None

    model = onnx.load(str(spec.path))
    if precision == "fp16":
        islands = entry.get("fp32_islands", ())
        typed = variants.fp16_graph(model, islands, bundle.boundary_tensors, bundle.image_tensor)
        return variants.serialize(typed)
    ranges = bundle.root / entry["ranges"]
    method = bundle.variants["int8"].get("calibration", {}).get("method", "minmax")
    exclude = entry.get("fp32_layers", ())
    islands = bundle.variants.get("fp16", {}).get("stages", {}).get(spec.name, {})
    source = variants.int8_source(model, entry.get("pre_process", False))
    typed = variants.int8_graph(
        source, ranges, target, exclude, method, islands.get("fp32_islands", ())
    )
    return variants.serialize(typed)


def _parse_variants(
    root: Path, variants: object, where: Path, verify: bool
) -> tuple[dict, dict[str, str]]:
    """bundle.json "variants", checked (known precisions, every stage, recorded graph hashes),
    and precision -> reason for each variant whose recipe files are missing from the bundle or
    (``verify``) do not match their sha256: a copy without its INT8 ranges still runs FP32."""
    if not isinstance(variants, dict):
        raise BundleError(f"{where}: 'variants' must be an object")
    fix = f"re-run '{QUANTIZE_COMMAND} {root} --data DIR'"
    unavailable: dict[str, str] = {}
    for precision, variant in variants.items():
        if precision not in DERIVATIONS:
            raise BundleError(
                f"{where}: variant '{precision}' is not one of {', '.join(DERIVATIONS)}; {fix}"
            )
        stages = variant.get("stages") if isinstance(variant, dict) else None
        if variant.get("derive") != DERIVATIONS[precision] or not isinstance(stages, dict):
            raise BundleError(
                f"{where}: variant '{precision}' needs derive '{DERIVATIONS[precision]}' and "
                f"'stages'; {fix}"
            )
        for stage in STAGE_ORDER:
            entry = stages.get(stage)
            hashes = entry.get("sha256") if isinstance(entry, dict) else None
            wanted = INT8_GRAPHS if precision == "int8" else ()
            if not hashes or (wanted and not all(hashes.get(t) for t in wanted)):
                raise BundleError(
                    f"{where}: variant '{precision}' stage '{stage}' has no recorded sha256 of "
                    f"its derived graph; {fix}"
                )
            if precision != "int8" or precision in unavailable:
                continue
            ranges = {"name": stage, "file": entry.get("ranges")}
            if not (root / str(ranges["file"])).is_file():
                unavailable[precision] = (
                    f"bundle {root}: {ranges['file']} (the int8 calibration ranges of {stage}) "
                    f"is missing, so it has no int8 graphs; copy it with the bundle or {fix}"
                )
                continue
            _, path = _stage_name_and_path(root, ranges, where)
            if verify and sha256_file(path) != entry.get("ranges_sha256"):
                unavailable[precision] = (
                    f"bundle {root}: {path.name} (the int8 calibration ranges of {stage}) does "
                    f"not match its sha256 in {METADATA_FILE} (file changed or corrupt), so it "
                    f"has no int8 graphs; {fix}"
                )
    return dict(variants), unavailable


def default_bundle_path() -> Path | None:
    """The embedded default model (models/default) of this checkout or installed package; None
    when there is none (see resources.py for where it is searched)."""
    return default_model()


def read_golden(root: str | Path, precision: str) -> tuple[GoldenCase, ...]:
    """The golden cases of ``precision`` stored in ``root/golden.npz``; () where there are none.

    Layout: ``image/<i>`` (1, 3, H, W) float32 and ``<precision>/<output>/<i>`` per case.
    """
    path = Path(root) / GOLDEN_FILE
    if not path.is_file():
        return ()
    with np.load(path) as data:
        keys = set(data.files)
        count = sum(1 for k in keys if k.startswith("image/"))
        cases = []
        for i in range(count):
            prefix = f"{precision}/"
            outputs = {
                k[len(prefix) :].rsplit("/", 1)[0]: data[k]
                for k in keys
                if k.startswith(prefix) and k.endswith(f"/{i}")
            }
            if outputs:
                cases.append(GoldenCase(image=data[f"image/{i}"], outputs=outputs))
    return tuple(cases)


def write_golden(root: str | Path, cases_by_precision: dict[str, Sequence[GoldenCase]]) -> Path:
    """Write ``root/golden.npz``: the cases of every precision, which share their images."""
    arrays: dict[str, np.ndarray] = {}
    for precision, cases in cases_by_precision.items():
        check_precision(precision)
        for i, case in enumerate(cases):
            image = np.ascontiguousarray(case.image, dtype=np.float32)
            if f"image/{i}" in arrays and not np.array_equal(arrays[f"image/{i}"], image):
                raise BundleError(f"golden case {i} has different images across precisions")
            arrays[f"image/{i}"] = image
            for name, value in case.outputs.items():
                arrays[f"{precision}/{name}/{i}"] = np.asarray(value)
    path = Path(root) / GOLDEN_FILE
    np.savez_compressed(path, **arrays)
    return path


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _parse_tensor(entry: dict, where: str) -> TensorSpec:
    try:
        dims = list(entry["shape"])
        batched = bool(dims) and dims[0] == BATCH_AXIS
        return TensorSpec(
            name=str(entry["name"]),
            shape=tuple(1 if batched and i == 0 else int(d) for i, d in enumerate(dims)),
            dtype=str(entry["dtype"]),
            batched=batched,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BundleError(
            f"{where}: tensor entries need name, shape (ints, dim 0 may be "
            f"\"{BATCH_AXIS}\"), dtype ({exc!r})"
        ) from None


def _read_metadata(root: Path) -> dict:
    """Parsed ``root/bundle.json``; BundleError when it is not JSON."""
    meta_path = root / METADATA_FILE
    try:
        return json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BundleError(f"{meta_path} is not valid JSON: {exc}") from None


def _stage_name_and_path(root: Path, entry: object, where: Path) -> tuple[str, Path]:
    """Name and file of a stage entry; BundleError unless the file resolves inside ``root``."""
    try:
        name, file = str(entry["name"]), str(entry["file"])  # type: ignore[index]
    except (KeyError, TypeError) as exc:
        raise BundleError(f"{where}: every stage needs 'name' and 'file' ({exc!r})") from None
    path = root / file
    target = path.resolve()
    if not target.is_relative_to(root.resolve()):
        raise BundleError(
            f"{where}: stage '{name}' file '{file}' resolves to {target}, outside the bundle "
            f"folder; stage files must be inside the bundle folder (a relative name without "
            "'..', no symlink leading out): copy the file into the bundle and name it there"
        )
    if not path.is_file():
        raise BundleError(
            f"bundle {root}: stage '{name}' file {file} is missing; re-export the bundle"
        )
    return name, path


def _parse_stage(root: Path, entry: dict, where: Path, verify: bool) -> StageSpec:
    name, path = _stage_name_and_path(root, entry, where)
    sha = str(entry.get("sha256") or "")
    if verify and sha and sha256_file(path) != sha:
        raise BundleError(
            f"bundle {root}: {entry['file']} does not match its sha256 in {METADATA_FILE} "
            f"(file changed or corrupt); re-export the bundle, or if you changed the file on "
            f"purpose and trust it, '{HASH_COMMAND} --update {root}'"
        )
    ctx = f"{where} stage '{name}'"
    return StageSpec(
        name=name,
        path=path,
        sha256=sha,
        inputs=tuple(_parse_tensor(t, ctx) for t in entry.get("inputs", [])),
        outputs=tuple(_parse_tensor(t, ctx) for t in entry.get("outputs", [])),
    )


def record_hashes(root: str | Path, update: bool = False) -> dict[str, str]:
    """Write each stage file's sha256 into ``root/bundle.json``; returns stage -> sha256.

    A recorded hash that does not match is an error unless ``update``: replacing it vouches for
    a file that is no longer the exported one. Other keys of bundle.json are kept as they are.
    """
    root = Path(root)
    ModelBundle.load(root, verify_hashes=False)  # a valid bundle apart from its hashes
    meta = _read_metadata(root)
    where = root / METADATA_FILE
    hashes: dict[str, str] = {}
    for entry in meta["stages"]:
        name, path = _stage_name_and_path(root, entry, where)
        sha = sha256_file(path)
        recorded = str(entry.get("sha256") or "")
        if recorded and recorded != sha and not update:
            raise BundleError(
                f"bundle {root}: {entry['file']} does not match its recorded sha256; re-export "
                f"the bundle, or pass --update to record the current file (only if you trust it)"
            )
        entry["sha256"] = hashes[name] = sha
    tmp = where.with_name(f".{METADATA_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, where)
    return hashes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst bundle-hash``."""
    parser.add_argument("bundle", type=Path, help="model bundle folder (bundle.json + ONNX files)")
    parser.add_argument(
        "--update",
        action="store_true",
        help="replace recorded hashes that do not match (the files were changed on purpose)",
    )


def run(args: argparse.Namespace) -> int:
    """Record the stage hashes of a bundle and print them."""
    for name, sha in record_hashes(args.bundle, update=args.update).items():
        print(f"{name:8s} {sha}")
    print(f"hashes recorded in {Path(args.bundle) / METADATA_FILE}")
    return 0
