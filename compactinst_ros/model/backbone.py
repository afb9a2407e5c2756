"""ResNet-18/50 backbones in the torchvision layout (state-dict compatible), FrozenBatchNorm.

Returns ``res2``..``res5`` (strides 4, 8, 16, 32). No torchvision import, no weight download.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

NormLayer = Callable[[int], nn.Module]


class FrozenBatchNorm2d(nn.Module):
    """BatchNorm with fixed statistics and affine parameters (all buffers), as in detectron2."""

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(num_features))
        self.register_buffer("bias", torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # torchvision checkpoints carry num_batches_tracked, which a frozen norm does not need.
        state_dict.pop(prefix + "num_batches_tracked", None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Per-channel affine ``x * scale + shift`` (one fused op after export)."""
        scale = self.weight * (self.running_var + self.eps).rsqrt()
        shift = self.bias - self.running_mean * scale
        return x * scale[None, :, None, None] + shift[None, :, None, None]


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    """3x3 convolution with padding 1 and no bias."""
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    """1x1 convolution without bias."""
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs (ResNet-18/34)."""

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int, norm: NormLayer) -> None:
        super().__init__()
        self.conv1 = conv3x3(cin, planes, stride)
        self.bn1 = norm(planes)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(cin, planes * self.expansion, stride, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Residual block forward."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 -> 3x3 (stride here, torchvision layout) -> 1x1 x4 (ResNet-50/101)."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int, norm: NormLayer) -> None:
        super().__init__()
        self.conv1 = conv1x1(cin, planes)
        self.bn1 = norm(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn2 = norm(planes)
        self.conv3 = conv1x1(planes, planes * self.expansion)
        self.bn3 = norm(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(cin, planes * self.expansion, stride, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Residual block forward."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def _downsample(cin: int, cout: int, stride: int, norm: NormLayer) -> nn.Module | None:
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(conv1x1(cin, cout, stride), norm(cout))


class ResNet(nn.Module):
    """ResNet trunk without the classifier; ``forward`` returns ``{"res2": ..., "res5": ...}``."""

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        layers: tuple[int, int, int, int],
        width: int = 64,
        norm: NormLayer = FrozenBatchNorm2d,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = norm(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        cin = width
        self._out_channels: dict[str, int] = {}
        for i, blocks in enumerate(layers):
            planes = width * 2**i
            stride = 1 if i == 0 else 2
            stage = []
            for j in range(blocks):
                stage.append(block(cin, planes, stride if j == 0 else 1, norm))
                cin = planes * block.expansion
            self.add_module(f"layer{i + 1}", nn.Sequential(*stage))
            self._out_channels[f"res{i + 2}"] = cin
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def output_shape(self) -> dict[str, tuple[int, int]]:
        """``{name: (channels, stride)}`` of each returned feature map."""
        return {name: (c, 2 ** (i + 2)) for i, (name, c) in enumerate(self._out_channels.items())}

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """(B, 3, H, W) normalised image -> res2..res5 feature maps."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        res2 = self.layer1(x)
        res3 = self.layer2(res2)
        res4 = self.layer3(res3)
        res5 = self.layer4(res4)
        return {"res2": res2, "res3": res3, "res4": res4, "res5": res5}


def build_backbone(name: str, width: int = 64, norm: NormLayer = FrozenBatchNorm2d) -> ResNet:
    """``resnet18`` or ``resnet50`` (``width`` scales every stage; 64 = the standard nets)."""
    if name == "resnet18":
        return ResNet(BasicBlock, (2, 2, 2, 2), width, norm)
    if name == "resnet50":
        return ResNet(Bottleneck, (3, 4, 6, 3), width, norm)
    raise ValueError(f"unknown backbone {name!r}; use resnet18 or resnet50")
