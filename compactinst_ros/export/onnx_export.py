"""Stage-split ONNX export: a config (+ checkpoint) -> encoder.onnx, decoder.onnx, bundle.json.

The encoder takes the letterboxed RGB image in 0..255 (normalisation is inside the graph) and
returns the pixel-decoder maps named in ``model.encoder_outputs``; the decoder takes those maps by
name and returns ``pred_logits`` (1, Q, K+1) and ``pred_masks`` (1, Q, H/s, W/s). Both graphs use
the TorchScript exporter (dynamo=False), opset 17 and static shapes but for a symbolic batch axis
(dim 0, ``"batch"``: several cameras in one run), as the TensorRT builder wants.

Checkpoints are read with ``model.checkpoint.load_checkpoint`` (the training format).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..bundle import (
    BATCH_AXIS,
    DECODER_OUTPUTS,
    METADATA_FILE,
    ModelBundle,
    StageSpec,
    TensorSpec,
    sha256_file,
)
from ..errors import BundleError, ConfigError
from ..labels import (
    CITYSCAPES_INSTANCE_LABELS,
    COCO_INSTANCE_LABELS,
    SYNTHETIC_LABELS,
    LabelSet,
)
from ..sizes import parse_size
from .tensorrt_rules import file_issues

if TYPE_CHECKING:
    import torch

OPSET = 17
NAMED_LABELS: dict[str, LabelSet] = {
    "synthetic": SYNTHETIC_LABELS,
    "cityscapes": CITYSCAPES_INSTANCE_LABELS,
    "coco": COCO_INSTANCE_LABELS,
}
#: Seed of the random image the graphs are traced with (parity checks use a different input).
TRACE_SEED = 0


def resolve_labels(spec: str | None) -> LabelSet | None:
    """A label set from a name (synthetic, cityscapes, coco) or a JSON file; None for None."""
    if spec is None:
        return None
    if spec in NAMED_LABELS:
        return NAMED_LABELS[spec]
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(
            f"labels '{spec}' is neither one of {sorted(NAMED_LABELS)} nor an existing JSON file"
        )
    try:
        entries = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"labels file {path} is not valid JSON: {exc}") from None
    if isinstance(entries, dict):
        entries = entries.get("labels")
    if not isinstance(entries, list):
        raise ConfigError(
            f"labels file {path} must hold a list of {{id, name, isthing}} objects "
            "(or an object with such a 'labels' list)"
        )
    return LabelSet.from_json(entries)


def _stage_module(model: torch.nn.Module, forward: Callable[..., tuple]) -> torch.nn.Module:
    """A module holding ``model`` whose forward is ``forward`` (what torch.onnx.export traces)."""
    import torch

    class Stage(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model  # registers the weights, so they become graph initializers

        def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return forward(*inputs)

    return Stage().eval()


def wrap_encoder(model: torch.nn.Module) -> torch.nn.Module:
    """The encoder stage: image (1, 3, H, W) RGB 0..255 -> maps in ``encoder_outputs`` order."""
    names = tuple(model.encoder_outputs)

    def encode(image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        features = model.encode(image)
        return tuple(features[n] for n in names)

    return _stage_module(model, encode)


def wrap_decoder(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder stage: encoder maps (positional, model order) -> pred_logits, pred_masks."""
    names = tuple(model.encoder_outputs)

    def decode(*maps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = model.decode(dict(zip(names, maps, strict=True)))
        return out["pred_logits"], out["pred_masks"]

    return _stage_module(model, decode)


def random_image(height: int, width: int, seed: int) -> torch.Tensor:
    """A reproducible (1, 3, H, W) float32 image in 0..255 for tracing and parity checks."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.rand((1, 3, height, width), generator=gen) * 255.0


def _tensor_specs(values: list) -> tuple[TensorSpec, ...]:
    """TensorSpecs of ONNX graph inputs/outputs: static dims, except the batch axis (dim 0)."""
    import onnx

    specs = []
    for value in values:
        ttype = value.type.tensor_type
        dims, batched = [], False
        for axis, dim in enumerate(ttype.shape.dim):
            if dim.HasField("dim_value"):
                dims.append(int(dim.dim_value))
            elif axis == 0 and dim.dim_param == BATCH_AXIS:
                dims.append(1)
                batched = True
            else:
                raise BundleError(
                    f"ONNX tensor '{value.name}' has a dynamic dimension {axis}; export uses "
                    f"static shapes except the batch axis '{BATCH_AXIS}' (dim 0)"
                )
        dtype = onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type).name
        specs.append(TensorSpec(value.name, tuple(dims), dtype, batched))
    return tuple(specs)


def stage_spec(name: str, path: Path) -> StageSpec:
    """Check an ONNX file with onnx.checker and read its I/O names, shapes and dtypes."""
    import onnx

    onnx.checker.check_model(str(path))
    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    inputs = [v for v in graph.input if v.name not in initializers]
    return StageSpec(
        name=name,
        path=path,
        sha256=sha256_file(path),
        inputs=_tensor_specs(inputs),
        outputs=_tensor_specs(list(graph.output)),
    )


def architecture_of(model: torch.nn.Module, config_name: str) -> dict:
    """JSON-able architecture record: the model's config fields plus name and mask stride."""
    config = getattr(model, "cfg", None) or getattr(model, "config", None)
    arch: dict = {}
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        arch = {
            k: v
            for k, v in dataclasses.asdict(config).items()
            if isinstance(v, (str, int, float, bool, list, tuple))
        }
    arch["name"] = config_name
    arch["mask_stride"] = int(model.mask_stride)
    arch["encoder_outputs"] = list(model.encoder_outputs)
    return arch


def pad_value_of(model: torch.nn.Module) -> tuple[float, float, float]:
    """Letterbox colour = the model's pixel mean, which the encoder normalises to exactly 0."""
    mean = model.cfg.pixel_mean
    return (float(mean[0]), float(mean[1]), float(mean[2]))


def _export_stage(
    module: torch.nn.Module,
    args: tuple,
    path: Path,
    input_names: list[str],
    output_names: list[str],
) -> None:
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        # Static shapes are the point (the batch axis aside): Python ints taken from the spatial
        # shapes are meant to become constants.
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message="Constant folding - Only steps=1")
        warnings.filterwarnings("ignore", message="You are using the legacy TorchScript")
        torch.onnx.export(
            module,
            args,
            str(path),
            dynamo=False,
            opset_version=OPSET,
            input_names=input_names,
            output_names=output_names,
            do_constant_folding=True,
            dynamic_axes={name: {0: BATCH_AXIS} for name in (*input_names, *output_names)},
        )
        outputs = module(*args)
    _set_output_shapes(path, [tuple(t.shape) for t in outputs])


def _set_output_shapes(path: Path, shapes: list[tuple[int, ...]]) -> None:
    """Write the traced per-frame output shapes (batch axis symbolic) into the graph outputs.

    With a symbolic batch the exporter's shape inference loses the spatial dims behind a
    Resize to a computed size; the bundle records static per-frame shapes, so they come from
    the trace itself.
    """
    import onnx

    model = onnx.load(str(path))
    for value, shape in zip(model.graph.output, shapes, strict=True):
        dims = value.type.tensor_type.shape.dim
        del dims[:]
        dims.add().dim_param = BATCH_AXIS
        for size in shape[1:]:
            dims.add().dim_value = int(size)
    onnx.save(model, str(path))


def export_bundle(
    model: torch.nn.Module,
    config_name: str,
    size: tuple[int, int],
    labels: LabelSet,
    out_dir: str | Path,
    source: dict,
    progress: Callable[[str], None] = print,
) -> ModelBundle:
    """Export ``model`` at ``size`` into ``out_dir`` (encoder.onnx, decoder.onnx, bundle.json)."""
    import torch

    height, width = size
    model.check_input_size(height, width)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = model.eval()
    names = list(model.encoder_outputs)
    image = random_image(height, width, TRACE_SEED)

    start = time.perf_counter()
    progress(f"[1/4] exporting encoder ({config_name}, {height}x{width}) ...")
    encoder_path = out / "encoder.onnx"
    _export_stage(wrap_encoder(model), (image,), encoder_path, ["image"], names)
    with torch.no_grad():
        features = model.encode(image)
    progress(f"[2/4] exporting decoder (inputs {', '.join(names)}) ...")
    decoder_path = out / "decoder.onnx"
    _export_stage(
        wrap_decoder(model),
        tuple(features[n] for n in names),
        decoder_path,
        names,
        list(DECODER_OUTPUTS),
    )
    progress("[3/4] checking ONNX graphs and reading stage I/O ...")
    stages = (stage_spec("encoder", encoder_path), stage_spec("decoder", decoder_path))
    for stage in stages:
        for issue in file_issues(stage.path):
            progress(f"      warning: {stage.path.name}: {issue} (TensorRT may reject it)")
    bundle = ModelBundle(
        root=out,
        architecture=architecture_of(model, config_name),
        input_h=height,
        input_w=width,
        pad_value=pad_value_of(model),
        labels=labels,
        stages=stages,
        source={
            **source,
            "config": config_name,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__,
        },
    )
    bundle.save()
    elapsed = time.perf_counter() - start
    progress(f"[4/4] wrote {encoder_path}, {decoder_path}, {out / METADATA_FILE} ({elapsed:.1f} s)")
    return ModelBundle.load(out, verify_hashes=True)


def build_for_export(
    config: str, labels: LabelSet | None, checkpoint: str | Path | None, seed: int
) -> tuple[torch.nn.Module, LabelSet, dict]:
    """Build the model (random init with ``seed``, or a checkpoint's weights) and its labels."""
    import torch

    from ..model import build_model
    from ..model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(checkpoint) if checkpoint is not None else None
    if ckpt is not None and ckpt.config != config:
        raise ConfigError(
            f"checkpoint {checkpoint} was trained with config '{ckpt.config}', not '{config}'; "
            f"run 'compactinst export {ckpt.config} ...'"
        )
    if labels is None:
        labels = ckpt.labels if ckpt is not None and ckpt.labels else SYNTHETIC_LABELS
    torch.manual_seed(seed)
    model = build_model(config, num_classes=labels.num_classes)
    if ckpt is not None:
        try:
            model.load_state_dict(ckpt.model)
        except RuntimeError as exc:
            raise ConfigError(
                f"checkpoint {checkpoint} does not fit config '{config}' with "
                f"{labels.num_classes} classes: {exc}"
            ) from None
        source = {"checkpoint_sha256": ckpt.sha256, "checkpoint": str(checkpoint)}
    else:
        source = {"checkpoint_sha256": "random-init", "seed": seed}
    return model.eval(), labels, source


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst export``."""
    parser.add_argument("config", help="model config name, e.g. compactinst_r18")
    parser.add_argument(
        "--size", default="512x1024", help="static input size HxW (default 512x1024)"
    )
    parser.add_argument(
        "--checkpoint", help="training checkpoint (.pt) (default: none, random init)"
    )
    parser.add_argument(
        "--labels",
        help="synthetic | cityscapes | coco | FILE.json (default: checkpoint's, else synthetic)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random init")
    parser.add_argument("--out", required=True, help="bundle directory to write")
    parser.add_argument(
        "--check", action="store_true", help="verify ONNX Runtime vs PyTorch parity afterwards"
    )


def run(args: argparse.Namespace) -> int:
    """Export one bundle; with --check, fail (exit 1) unless parity holds."""
    import torch

    from ..cli import warn
    from .parity import check_parity, verdict_lines

    torch.set_num_threads(min(2, torch.get_num_threads()))
    size = parse_size(args.size)
    labels = resolve_labels(args.labels)
    if args.checkpoint and args.seed != 0:
        warn("export", "--seed has no effect with --checkpoint (it seeds the random init)")
    model, labels, source = build_for_export(args.config, labels, args.checkpoint, args.seed)
    bundle = export_bundle(model, args.config, size, labels, args.out, source)
    if not args.check:
        return 0
    print("parity: ONNX Runtime vs PyTorch fp32 on an input unlike the trace input ...")
    results = check_parity(model, bundle)
    for r in results:
        print(f"  {r}")
    for line in verdict_lines(results):
        print(line)
    return 0 if all(r.ok for r in results) else 1
