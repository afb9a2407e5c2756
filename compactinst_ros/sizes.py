"""Image sizes on the command line: one ``HxW`` parser for every sub-command (no torch import).

Callers add their own limits (the model's stride, a renderer's minimum) after parsing, because
those belong to the model or tool, not to the notation.
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
