"""Image sizes on the command line: one ``HxW`` parser for every sub-command (no torch import),
the named sizes and the padding to the model's stride that ``info``, ``bench`` and
``costmodel`` share.

Callers add their own limits (a renderer's minimum) after parsing, because those belong to the
model or tool, not to the notation.
"""

from __future__ import annotations

from .errors import ConfigError


def parse_size(text: str) -> tuple[int, int]:
    """``"512x1024"`` -> (512, 1024): height x width in pixels, both positive integers.

    Raises ConfigError naming the expected form for anything else.
    """
    try:
        height, width = (int(v) for v in text.strip().lower().split("x"))
    except ValueError:
        raise ConfigError(
            f"size {text!r} must be HxW (HEIGHTxWIDTH in pixels), e.g. 512x1024"
        ) from None
    if height <= 0 or width <= 0:
        raise ConfigError(f"size {text!r}: height and width must be positive, e.g. 512x1024")
    return height, width


#: The named resolutions (HxW before padding to /32), taken wherever a model size is.
NAMED_SIZES: dict[str, tuple[int, int]] = {
    "vga": (480, 640),
    "square640": (640, 640),
    "hd720": (720, 1280),
    "square1024": (1024, 1024),
    "fullhd": (1080, 1920),
    "cityscapes": (1024, 2048),
}
#: the model's size divisibility (the backbone's stride)
STRIDE = 32


def pad32(height: int, width: int) -> tuple[int, int]:
    """Round both sides up to the backbone stride 32 (the model's size divisibility)."""
    return -(-height // STRIDE) * STRIDE, -(-width // STRIDE) * STRIDE


def model_size(text: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(requested, padded) of a model size: a name of ``NAMED_SIZES`` or ``HxW``, padded to a
    multiple of 32 as the letterbox pads an image (1080x1920 -> 1088x1920)."""
    requested = NAMED_SIZES.get(text.strip()) or parse_size(text)
    return requested, pad32(*requested)
