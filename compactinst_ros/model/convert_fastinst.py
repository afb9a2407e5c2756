"""Import official FastInst (detectron2) checkpoints into our FastInst / CompactInst modules.

Key mapping (official -> ours), from ``junjiehe96/FastInst`` and detectron2's ResNet:

* ``backbone.stem.conv1.{weight, norm.*}`` -> ``backbone.conv1.weight``, ``backbone.bn1.*``;
  ``backbone.res{2..5}.{i}.conv{j}.{weight, norm.*}`` -> ``backbone.layer{1..4}.{i}.conv{j}``,
  ``.bn{j}``; ``.shortcut.{weight, norm.*}`` -> ``.downsample.{0, 1}``.
* ``sem_seg_head.pixel_decoder.*`` -> ``pixel_decoder.*`` (same names: adapter_k, layer_k, ppm).
* ``sem_seg_head.predictor.*`` -> ``decoder.*``: ``transformer_{mask_cross_attention, mask_ffn,
  query_cross_attention, query_self_attention, query_ffn}_layers.{i}`` -> ``layers.{i}.
  {pixel_cross_attn, pixel_ffn, query_cross_attn, query_self_attn, query_ffn}``
  (``multihead_attn``/``self_attn`` -> ``attn``), ``{decoder_query_norm, class_embed, mask_embed,
  mask_features}_layers.{i}`` -> ``heads.{i}.{norm, class_embed, mask_embed, mask_features}``,
  ``query_proposal.conv_proposal_cls_logits.{0, 2}`` -> ``query_proposal.{conv, conv_cls}``.
* ``pixel_mean``, ``pixel_std`` and the loss's class-weight buffer ``criterion.empty_weight``
  (stored as ``sem_seg_head.predictor.criterion.empty_weight`` in the official checkpoints)
  carry no model weights and are dropped without being reported.

CompactInst initialised from FastInst keeps every shared tensor; its refinement head is new
(random init) and FastInst's last ``mask_features`` Linear, which CompactInst does not have, is
reported as unused.
"""

from __future__ import annotations

import argparse
import pickle
import re
from pathlib import Path
from typing import ClassVar

import torch

from ..errors import ConfigError, DataError
from ..labels import COCO_INSTANCE_LABELS, LabelSet
from .checkpoint import checkpoint_record, save_checkpoint

IGNORED = re.compile(
    r"^(pixel_mean|pixel_std|(sem_seg_head\.predictor\.)?criterion\.empty_weight"
    r"|.*\.num_batches_tracked)$"
)

_LAYER_BLOCKS = {
    "transformer_mask_cross_attention_layers": "pixel_cross_attn",
    "transformer_mask_ffn_layers": "pixel_ffn",
    "transformer_query_cross_attention_layers": "query_cross_attn",
    "transformer_query_self_attention_layers": "query_self_attn",
    "transformer_query_ffn_layers": "query_ffn",
}
_HEAD_PARTS = {
    "decoder_query_norm_layers": "norm",
    "class_embed_layers": "class_embed",
    "mask_embed_layers": "mask_embed",
    "mask_features_layers": "mask_features",
}


def _backbone_key(rest: str) -> str | None:
    m = re.fullmatch(r"stem\.conv1\.(weight|norm\.\w+)", rest)
    if m:
        return "backbone.conv1.weight" if m[1] == "weight" else f"backbone.bn1.{m[1][5:]}"
    m = re.fullmatch(r"res([2-5])\.(\d+)\.(conv[1-3]|shortcut)\.(weight|norm\.\w+)", rest)
    if not m:
        return None
    stage, block, conv, what = int(m[1]) - 1, m[2], m[3], m[4]
    prefix = f"backbone.layer{stage}.{block}"
    if conv == "shortcut":
        return (
            f"{prefix}.downsample.0.weight"
            if what == "weight"
            else f"{prefix}.downsample.1.{what[5:]}"
        )
    return f"{prefix}.{conv}.weight" if what == "weight" else f"{prefix}.bn{conv[4]}.{what[5:]}"


def _predictor_key(rest: str) -> str | None:
    m = re.fullmatch(r"(\w+_layers)\.(\d+)\.(.+)", rest)
    if m and m[1] in _LAYER_BLOCKS:
        tail = re.sub(r"^(multihead_attn|self_attn)\.", "attn.", m[3])
        return f"decoder.layers.{m[2]}.{_LAYER_BLOCKS[m[1]]}.{tail}"
    if m and m[1] in _HEAD_PARTS:
        return f"decoder.heads.{m[2]}.{_HEAD_PARTS[m[1]]}.{m[3]}"
    m = re.fullmatch(r"query_proposal\.conv_proposal_cls_logits\.([02])\.(weight|bias)", rest)
    if m:
        return f"decoder.query_proposal.{'conv' if m[1] == '0' else 'conv_cls'}.{m[2]}"
    if rest in ("meta_pos_embed", "empty_query_features.weight", "empty_query_pos_embed.weight"):
        return f"decoder.{rest}"
    return None


def map_key(key: str) -> str | None:
    """Our key for an official FastInst key; None for keys that carry no model weights."""
    if IGNORED.match(key):
        return None
    if key.startswith("backbone."):
        return _backbone_key(key[len("backbone.") :])
    if key.startswith("sem_seg_head.pixel_decoder."):
        return "pixel_decoder." + key[len("sem_seg_head.pixel_decoder.") :]
    if key.startswith("sem_seg_head.predictor."):
        return _predictor_key(key[len("sem_seg_head.predictor.") :])
    return None


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickler for detectron2 ``.pkl`` weights: only numpy arrays, dicts and primitives."""

    ALLOWED: ClassVar[frozenset] = frozenset(
        {
            ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "_reconstruct"),
            ("numpy", "ndarray"),
            ("numpy", "dtype"),
            ("numpy.core.multiarray", "scalar"),
            ("numpy._core.multiarray", "scalar"),
            ("collections", "OrderedDict"),
        }
    )

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a .pkl")
        return super().find_class(module, name)


def load_official(path: str | Path) -> dict[str, torch.Tensor]:
    """Official FastInst weights as {key: tensor} from .pth/.pt (weights_only) or .pkl (numpy)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"FastInst checkpoint {path} does not exist")
    if path.suffix == ".pkl":
        try:
            with open(path, "rb") as fh:
                record = _NumpyOnlyUnpickler(fh, encoding="latin1").load()
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            raise ConfigError(
                f"{path}: not a plain detectron2 .pkl of numpy arrays ({exc}); convert it to a "
                ".pth state dict in a trusted environment first"
            ) from None
    else:
        try:
            record = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises several types for unsafe or corrupt pickles
            raise ConfigError(
                f"{path} cannot be read with torch.load(weights_only=True): {exc}. If it holds "
                "more than weights (e.g. a detectron2 trainer state), re-save only "
                "checkpoint['model'] in a trusted environment"
            ) from None
    if isinstance(record, dict) and isinstance(record.get("model"), dict):
        record = record["model"]
    if not isinstance(record, dict):
        raise ConfigError(f"{path}: expected a state dict (or {{'model': state_dict}})")
    return {k: torch.as_tensor(v) for k, v in record.items()}


def convert_state_dict(
    official: dict[str, torch.Tensor], model: torch.nn.Module
) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """Map ``official`` onto ``model``'s keys; returns (state, new keys, unused official keys).

    Shapes must agree for every mapped key (ConfigError names the first mismatch).
    """
    ours = model.state_dict()
    state: dict[str, torch.Tensor] = {}
    unused: list[str] = []
    for key, value in official.items():
        target = map_key(key)
        if target is None:
            if not IGNORED.match(key):
                unused.append(key)
            continue
        if target not in ours:
            unused.append(key)
            continue
        if tuple(ours[target].shape) != tuple(value.shape):
            raise ConfigError(
                f"{key} has shape {tuple(value.shape)} but {target} expects "
                f"{tuple(ours[target].shape)}; pick the config that matches the checkpoint "
                "(backbone, decoder layers, number of classes)"
            )
        state[target] = value.to(ours[target].dtype)
    new = [k for k in ours if k not in state]
    return state, new, unused


def num_classes_of(official: dict[str, torch.Tensor]) -> int:
    """K from the proposal classifier (K+1 outputs)."""
    key = "sem_seg_head.predictor.query_proposal.conv_proposal_cls_logits.2.bias"
    if key not in official:
        raise ConfigError(f"not a FastInst checkpoint: '{key}' is missing")
    return int(official[key].shape[0]) - 1


def import_fastinst(
    path: str | Path, config: str, labels: LabelSet | None = None
) -> tuple[dict, list[str], list[str]]:
    """Build ``config`` and load an official checkpoint into it; returns (record, new, unused)."""
    from . import build_model

    official = load_official(path)
    k = num_classes_of(official)
    if labels is None:
        labels = COCO_INSTANCE_LABELS if k == COCO_INSTANCE_LABELS.num_classes else None
    if labels is not None and labels.num_classes != k:
        raise ConfigError(f"labels have {labels.num_classes} classes, the checkpoint {k}")
    model = build_model(config, num_classes=k)
    state, _, unused = convert_state_dict(official, model)
    missing, _ = model.load_state_dict(state, strict=False)
    record = checkpoint_record(model, config, labels, step=0, source=str(path))
    return record, list(missing), unused


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst import-fastinst``."""
    parser.add_argument("checkpoint", help="official FastInst weights (.pth/.pt, or .pkl)")
    parser.add_argument(
        "--config",
        default="fastinst_r50_d3",
        help="target config: fastinst_* (all weights) or compactinst_* (refinement head new)",
    )
    parser.add_argument("--out", required=True, help="output checkpoint (.pt)")


def run(args: argparse.Namespace) -> int:
    """Convert and save a checkpoint usable by train --init and export --checkpoint."""
    record, new, unused = import_fastinst(args.checkpoint, args.config)
    save_checkpoint(args.out, record)
    print(
        f"wrote {args.out}: config {args.config}, {record['num_classes']} classes, "
        f"{len(record['model'])} tensors"
    )
    if new:
        print(
            f"  newly initialised ({len(new)}): {', '.join(new[:6])}"
            f"{' ...' if len(new) > 6 else ''}"
        )
    if unused:
        print(
            f"  unused from the checkpoint ({len(unused)}): {', '.join(unused[:6])}"
            f"{' ...' if len(unused) > 6 else ''}"
        )
    return 0
