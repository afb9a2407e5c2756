"""PPM-FPN pixel decoder (FastInst ``PyramidPoolingModuleFPN``), export-friendly.

The PPM's adaptive average pooling is computed exactly as ``P_h @ X @ P_w^T`` with constant
pooling matrices, so the graph exports at any static size (e.g. a 32x64 map with 3x3/6x6 bins).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ConvNorm(nn.Conv2d):
    """Conv2d with optional norm and activation (detectron2 ``Conv2d`` layout: ``.norm``)."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        norm: nn.Module | None = None,
        relu: bool = False,
        bias: bool | None = None,
    ) -> None:
        super().__init__(
            cin, cout, kernel, padding=kernel // 2, bias=norm is None if bias is None else bias
        )
        self.norm = norm
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """conv -> norm -> ReLU (those configured)."""
        x = super().forward(x)
        if self.norm is not None:
            x = self.norm(x)
        return F.relu(x) if self.relu else x


def c2_xavier_fill(module: nn.Conv2d) -> None:
    """detectron2 ``c2_xavier_fill``: Kaiming-uniform (a=1) weights, zero bias."""
    nn.init.kaiming_uniform_(module.weight, a=1)
    if module.bias is not None:
        nn.init.zeros_(module.bias)


def adaptive_pool_matrix(n: int, bins: int) -> torch.Tensor:
    """(bins, n) matrix whose product with a length-n vector is ``adaptive_avg_pool1d``.

    Bin i averages [floor(i n / bins), ceil((i + 1) n / bins)), PyTorch's definition.
    """
    rows = []
    for i in range(bins):
        start, end = (i * n) // bins, -((-(i + 1) * n) // bins)
        rows.append([1.0 / (end - start) if start <= j < end else 0.0 for j in range(n)])
    return torch.tensor(rows, dtype=torch.float64)


class MatrixAdaptiveAvgPool2d(nn.Module):
    """Exact ``adaptive_avg_pool2d`` to (s, s) as two MatMuls with constant matrices."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        # Built once per (input size, device, dtype): a host-to-device copy in every forward
        # would block CUDA-graph capture and cost a transfer per frame.
        self._matrices: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, C, s, s)."""
        h, w = int(x.shape[-2]), int(x.shape[-1])
        key = (h, w, x.device, x.dtype)
        if key not in self._matrices:
            self._matrices[key] = (
                adaptive_pool_matrix(h, self.size).to(x),
                adaptive_pool_matrix(w, self.size).t().to(x),
            )
        ph, pwt = self._matrices[key]
        return torch.matmul(torch.matmul(ph, x), pwt)


class PyramidPoolingModule(nn.Module):
    """PSPNet pooling branches (bins 1, 2, 3, 6) concatenated with the input, then 1x1 conv."""

    def __init__(self, channels: int, branch_channels: int, bins: tuple[int, ...]) -> None:
        super().__init__()
        self.stages = nn.ModuleList(
            nn.Sequential(MatrixAdaptiveAvgPool2d(b), ConvNorm(channels, branch_channels, 1))
            for b in bins
        )
        self.bottleneck = ConvNorm(channels + len(bins) * branch_channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, h, w) -> (B, C, h, w)."""
        size = x.shape[-2:]
        priors = [
            F.interpolate(F.relu(stage(x)), size=size, mode="bilinear", align_corners=False)
            for stage in self.stages
        ]
        return F.relu(self.bottleneck(torch.cat([*priors, x], dim=1)))


class PPMFPN(nn.Module):
    """Top-down FPN over res3..res5 (optionally res2) with a PPM on the coarsest level.

    Module names follow FastInst (``adapter_1``/``layer_1`` = res3 ... ``_3`` = res5, ``ppm``);
    the optional res2 level is ``adapter_0``/``layer_0``.
    """

    def __init__(
        self,
        in_channels: dict[str, int],
        dim: int = 256,
        groups: int = 32,
        bins: tuple[int, ...] = (1, 2, 3, 6),
        use_res2: bool = False,
    ) -> None:
        super().__init__()
        self.in_features = (["res2"] if use_res2 else []) + ["res3", "res4", "res5"]
        for name in self.in_features:
            idx = int(name[-1]) - 2
            lateral = ConvNorm(in_channels[name], dim, 1, nn.GroupNorm(groups, dim))
            output = ConvNorm(dim, dim, 3, nn.GroupNorm(groups, dim), relu=True)
            c2_xavier_fill(lateral)
            c2_xavier_fill(output)
            self.add_module(f"adapter_{idx}", lateral)
            self.add_module(f"layer_{idx}", output)
        self.ppm = PyramidPoolingModule(dim, dim // 4, bins)

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """res* maps -> ``{"e5", "e4", "e3"[, "e2"]}`` each (B, dim, H/s, W/s)."""
        out: dict[str, torch.Tensor] = {}
        y = None
        for name in reversed(self.in_features):
            idx = int(name[-1]) - 2
            lateral = getattr(self, f"adapter_{idx}")(features[name])
            if y is None:
                y = self.ppm(lateral)
            else:
                y = lateral + F.interpolate(
                    y, size=lateral.shape[-2:], mode="bilinear", align_corners=False
                )
            y = getattr(self, f"layer_{idx}")(y)
            out[f"e{idx + 2}"] = y
        return out
