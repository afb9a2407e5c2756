"""Analytical per-operator cost of a model at a given input size: MACs and minimal bytes.

The model is built on the ``meta`` device and run once under a ``TorchDispatchMode``, so every
ATen op is seen with its real shapes but nothing is computed (1024x2048 takes seconds). Each op
becomes an :class:`OpRecord` attributed to the innermost module that ran it.

MAC convention (fvcore's, where one multiply-add = one "flop", the convention of the FastInst and
CompactInst papers): counted are convolutions, ``mm``/``addmm``/``bmm`` (so Linear, einsum and
matmul), LayerNorm/GroupNorm (5 per element) and bilinear upsampling (4 per output element).
Not counted: the masked cross-attention's score product (``UNCOUNTED_MODULES``: the papers' code
ran it as a ``baddbmm``, for which fvcore has no handle; its MACs are still in ``OpRecord.macs``
with ``counted=False``), the frozen-BN affine, activations, softmax, residual adds, pooling,
top-k and gathers. Bytes are counted for all ops.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .compactinst import CompactInst, build_model
from .configs import ModelConfig

#: component -> True if it belongs to the "decoder" (everything after the pixel decoder).
COMPONENTS: dict[str, bool] = {
    "normalize": False,
    "backbone": False,
    "pixel_decoder": False,
    "proposal": True,
    "transformer": True,
    "heads": True,
    "refinement": True,
    "decoder_other": True,
}

_PREFIXES = (
    ("backbone", "backbone"),
    ("pixel_decoder", "pixel_decoder"),
    ("decoder.query_proposal", "proposal"),
    ("decoder.layers", "transformer"),
    ("decoder.heads", "heads"),
    ("decoder.token_pool", "refinement"),
    ("decoder.refinement", "refinement"),
    ("decoder", "decoder_other"),
)

#: modules (by attribute name) whose MACs the papers' figures leave out: the masked attention's
#: score product (``decoder.MaskedScores``), a ``baddbmm`` in the code they counted with fvcore
UNCOUNTED_MODULES = frozenset({"masked_scores"})

_METADATA_OPS = {
    "_unsafe_view",
    "lift_fresh",
    "detach",
    "alias",
    "empty",
    "zeros",
    "ones",
    "full",
    "arange",
    "linspace",
    "scalar_tensor",
    "_local_scalar_dense",
    "sym_size",
    "sym_stride",
    "sym_numel",
}


@dataclass(frozen=True)
class OpRecord:
    """One ATen op: where it ran, what it costs.

    ``bytes_read`` includes ``weight_bytes`` (parameters/buffers the op reads); floating tensors
    are sized at the requested element size, integer/bool tensors at their own.
    """

    name: str
    component: str
    kind: str
    macs: int
    bytes_read: int
    bytes_written: int
    weight_bytes: int
    counted: bool = True


def component_of(module_path: str) -> str:
    """Component name of a dotted module path (``""`` = the model itself -> normalize)."""
    for prefix, comp in _PREFIXES:
        if module_path == prefix or module_path.startswith(prefix + "."):
            return comp
    return "normalize"


def _macs(kind: str, args: list, out: list) -> tuple[int, bool]:
    """fvcore-style MACs of one op and whether fvcore counts it."""

    def shape(t: torch.Tensor) -> tuple[int, ...]:
        return tuple(int(s) for s in t.shape)

    if kind == "convolution":
        w = shape(args[1])
        return out[0].numel() * w[1] * math.prod(w[2:]), True
    if kind == "mm":
        (m, k), (_, n) = shape(args[0]), shape(args[1])
        return m * k * n, True
    if kind == "addmm":
        (m, k), (_, n) = shape(args[1]), shape(args[2])
        return m * k * n, True
    if kind == "bmm":
        (bs, m, k), (_, _, n) = shape(args[0]), shape(args[1])
        return bs * m * k * n, True
    if kind in ("native_layer_norm", "native_group_norm"):
        return 5 * args[0].numel(), True
    if kind == "upsample_bilinear2d":
        return 4 * out[0].numel(), True
    return 0, False


class _Recorder(TorchDispatchMode):
    """Records every non-view ATen op with the innermost module path on the stack."""

    def __init__(self, weights: set[int], elem_size: int) -> None:
        super().__init__()
        self.stack: list[str] = [""]
        self.weights = weights
        self.keep: list[torch.Tensor] = []  # keeps ids of weight views alive and unique
        self.elem_size = elem_size
        self.records: list[OpRecord] = []

    def _bytes(self, t: torch.Tensor) -> int:
        unique = math.prod(int(s) for s, st in zip(t.shape, t.stride(), strict=True) if st != 0)
        size = self.elem_size if t.is_floating_point() else t.element_size()
        return unique * size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        kind = func.overloadpacket.__name__
        ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        is_view = func.is_view or kind in _METADATA_OPS
        if is_view:
            if any(id(t) in self.weights for t in ins):
                for o in outs:
                    self.weights.add(id(o))
                    self.keep.append(o)
            return out
        seen: set[int] = set()
        read = weight = 0
        for t in ins:
            if id(t) in seen:
                continue
            seen.add(id(t))
            nbytes = self._bytes(t)
            read += nbytes
            weight += nbytes if id(t) in self.weights else 0
        written = sum(self._bytes(o) for o in outs)
        macs, counted = _macs(kind, list(args), outs)
        path = self.stack[-1]
        counted = counted and path.rsplit(".", 1)[-1] not in UNCOUNTED_MODULES
        self.records.append(
            OpRecord(
                f"{path or 'model'}:{kind}",
                component_of(path),
                kind,
                macs,
                read,
                written,
                weight,
                counted,
            )
        )
        return out


def count_ops(
    config: str | ModelConfig | CompactInst,
    size: tuple[int, int],
    elem_size: int = 2,
    batch: int = 1,
    **overrides: object,
) -> list[OpRecord]:
    """Per-op records of one inference forward at input ``size`` = (H, W) (no real compute).

    ``config`` may be a name/ModelConfig (built on the meta device with ``overrides``) or a
    model, which is run as is (on its own device) in eval mode.
    """
    if isinstance(config, CompactInst):
        model = config
    else:
        with torch.device("meta"):
            model = build_model(config, **overrides)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    weights = {id(t) for t in (*model.parameters(), *model.buffers())}
    rec = _Recorder(weights, elem_size)
    hooks = []
    for name, module in model.named_modules():
        hooks.append(module.register_forward_pre_hook(_push(rec, name)))
        hooks.append(module.register_forward_hook(_pop(rec)))
    image = torch.zeros(batch, 3, *size, device=device)
    try:
        with torch.no_grad(), rec:
            model(image)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    return rec.records


def _push(rec: _Recorder, name: str) -> Callable[[nn.Module, tuple], None]:
    def hook(module: nn.Module, args: tuple) -> None:
        rec.stack.append(name)

    return hook


def _pop(rec: _Recorder) -> Callable[[nn.Module, tuple, object], None]:
    def hook(module: nn.Module, args: tuple, output: object) -> None:
        rec.stack.pop()

    return hook


def macs_by_component(records: list[OpRecord]) -> dict[str, int]:
    """Counted MACs per component (every key of ``COMPONENTS`` present)."""
    totals: dict[str, int] = dict.fromkeys(COMPONENTS, 0)
    for r in records:
        if r.counted:
            totals[r.component] += r.macs
    return totals


def bytes_by_component(records: list[OpRecord]) -> dict[str, int]:
    """Bytes read + written per component, each op in isolation (no fusion, no cache reuse)."""
    totals: dict[str, int] = dict.fromkeys(COMPONENTS, 0)
    for r in records:
        totals[r.component] += r.bytes_read + r.bytes_written
    return totals


def params_by_component(model: nn.Module) -> dict[str, int]:
    """Trainable + frozen parameter counts per component (buffers such as FrozenBN excluded)."""
    totals: dict[str, int] = defaultdict(int)
    for name, p in model.named_parameters():
        totals[component_of(name.rsplit(".", 1)[0])] += p.numel()
    return {c: totals.get(c, 0) for c in COMPONENTS}


def decoder_total(per_component: dict[str, int]) -> int:
    """Sum over the decoder components (everything after the pixel decoder)."""
    return sum(v for c, v in per_component.items() if COMPONENTS[c])
