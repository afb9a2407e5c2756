"""Plain numpy records that travel with a frame through the pipeline (no ROS, no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from .errors import ConfigError

#: numpy dtype -> sensor_msgs/Image encoding of the single-channel rasters of a FrameResult
RASTER_ENCODINGS = {
    np.dtype(np.uint8): "mono8",
    np.dtype(np.uint16): "mono16",
    np.dtype(np.int32): "32SC1",
}

#: Latency names in frame order, in milliseconds; one meaning each, wherever they appear (Pipeline
#: results, node topics, replay reports), defined in docs/ros.md. The first six are parts of a
#: frame's path; ``inference``, ``node`` and ``pipeline`` are spans that contain some of them.
STAGES = (
    "queue",
    "decode",
    "preprocess",
    "encoder",
    "decoder",
    "postprocess",
    "inference",  # Pipeline.__call__: validation, the backend's four stages and the overlay
    "publish",
    "node",  # callback receipt -> last output published, inside the node
    "pipeline",  # header.stamp -> last output published: camera-to-output, DDS transport included
)
#: the span the Pipeline itself measures (``FrameResult.timings_ms``)
INFERENCE = "inference"


@dataclass(frozen=True)
class FrameMeta:
    """Letterbox geometry linking camera pixels to model input pixels.

    The camera image (src_h x src_w) is resized by ``scale`` to (resized_h x resized_w), placed at
    the top-left of the model input (input_h x input_w), and the rest is padded (detectron2's
    bottom/right padding). Camera pixel centre x maps to input coordinate (x + 0.5) * scale - 0.5.
    """

    src_h: int
    src_w: int
    input_h: int
    input_w: int
    scale: float
    resized_h: int
    resized_w: int

    @classmethod
    def letterbox(cls, src_h: int, src_w: int, input_h: int, input_w: int) -> FrameMeta:
        """Largest aspect-preserving fit of a src_h x src_w frame into the model input."""
        scale = min(input_h / src_h, input_w / src_w)
        resized_h = min(input_h, max(1, round(src_h * scale)))
        resized_w = min(input_w, max(1, round(src_w * scale)))
        return cls(src_h, src_w, input_h, input_w, scale, resized_h, resized_w)


def _bounded(default: float, low: float, high: float, meaning: str) -> Any:
    """A PostprocessOptions field: its default and the closed range it must lie in (``meaning``
    says what the range protects)."""
    return field(default=default, metadata={"bounds": (low, high, meaning)})


@dataclass(frozen=True)
class PostprocessOptions:
    """Thresholds of the post-processing rules (see docs/postprocess.md) and the overlay weight.

    Each field is the one definition of its default and closed range; ``BOUNDS`` collects the
    ranges by name, and the node's parameter descriptors are built from it.
    """

    score_threshold: float = _bounded(0.3, 0.0, 1.0, "a probability")
    mask_threshold: float = _bounded(
        0.5, 0.01, 0.99, "a probability away from 0 and 1; 0.5 is the default"
    )
    object_mask_threshold: float = _bounded(0.8, 0.0, 1.0, "a probability")
    overlap_threshold: float = _bounded(0.8, 0.0, 1.0, "a fraction")
    max_instances: int = _bounded(100, 1, 65535, "uint16 raster ids")
    #: instances and panoptic things of fewer camera pixels are removed (specks); 0 and 1 keep
    #: every one with a pixel
    min_area: int = _bounded(20, 0, 1 << 24, "camera pixels")
    #: instances and panoptic things smaller than this many camera pixels are removed
    #: (postprocess/specks.py); 0 keeps every one
    min_area: int = _bounded(20, 0, 1 << 24, "camera pixels")
    overlay_alpha: float = _bounded(0.5, 0.0, 1.0, "colour weight")

    #: option -> (lowest, highest, what the range protects) for ``__post_init__`` and the node
    BOUNDS: ClassVar[dict[str, tuple[float, float, str]]]

    def __post_init__(self) -> None:
        for name, (low, high, meaning) in self.BOUNDS.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise ConfigError(f"{name}={value} must be in [{low:g}, {high:g}] ({meaning})")


PostprocessOptions.BOUNDS = {f.name: f.metadata["bounds"] for f in fields(PostprocessOptions)}


@dataclass(frozen=True)
class OutputSet:
    """Which outputs to compute; a node asks only for outputs that have subscribers.

    ``overlay`` makes the Pipeline fill ``FrameResult.overlay`` on every backend; it computes the
    instance raster the overlay needs even when ``instance`` is False. ``captions`` False leaves
    the overlay's captions to the caller (the node adds distances once a frame is in 3-D).
    """

    instance: bool = True
    panoptic: bool = True
    semantic: bool = True
    overlay: bool = False
    captions: bool = True


@dataclass(frozen=True)
class BatchItem:
    """One validated frame of a batch (a camera's frame in a round): what the backend runs."""

    image: np.ndarray  # HxWxC uint8, validated (image_formats.validate_image)
    encoding: str
    meta: FrameMeta
    outputs: OutputSet  # with overlay, instance too (the Pipeline sets both)


@dataclass
class RawOutputs:
    """Decoder outputs for one frame: class logits (Q, K+1) and mask logits (Q, h, w)."""

    class_logits: np.ndarray
    mask_logits: np.ndarray
    mask_stride: int


@dataclass
class Instances:
    """Per-instance table; row i is the pixel value ``ids[i]`` of the instance raster."""

    ids: np.ndarray  # (N,) uint16 > 0: 1..N in score order, or track ids (Pipeline tracking)
    class_index: np.ndarray  # (N,) int32, contiguous model class index
    label_id: np.ndarray  # (N,) int32, dataset label id
    score: np.ndarray  # (N,) float32, class prob x mask score
    box: np.ndarray  # (N, 4) float32, x0, y0, x1, y1 in camera pixels (x1, y1 exclusive)
    area: np.ndarray  # (N,) int64, pixels in the instance raster

    @classmethod
    def empty(cls) -> Instances:
        """A table with no rows."""
        return cls(
            ids=np.zeros(0, np.uint16),
            class_index=np.zeros(0, np.int32),
            label_id=np.zeros(0, np.int32),
            score=np.zeros(0, np.float32),
            box=np.zeros((0, 4), np.float32),
            area=np.zeros(0, np.int64),
        )

    def __len__(self) -> int:
        return int(self.ids.shape[0])


@dataclass
class Segments:
    """Panoptic segment table; row i describes pixels equal to ``ids[i]`` in the panoptic raster.

    Ids are self-describing: things ``label_id * 1000 + k`` (k = 1, 2, ... per label), stuff
    ``label_id``, 0 = void.
    """

    ids: np.ndarray  # (S,) int32
    label_id: np.ndarray  # (S,) int32
    isthing: np.ndarray  # (S,) bool
    score: np.ndarray  # (S,) float32
    area: np.ndarray  # (S,) int64

    @classmethod
    def empty(cls) -> Segments:
        """A table with no rows."""
        return cls(
            ids=np.zeros(0, np.int32),
            label_id=np.zeros(0, np.int32),
            isthing=np.zeros(0, bool),
            score=np.zeros(0, np.float32),
            area=np.zeros(0, np.int64),
        )

    def __len__(self) -> int:
        return int(self.ids.shape[0])


@dataclass
class FrameResult:
    """Everything the pipeline returns for one frame, at camera resolution."""

    meta: FrameMeta
    instances: Instances = field(default_factory=Instances.empty)
    instance_raster: np.ndarray | None = None  # (H, W) uint16, 0 = background
    segments: Segments = field(default_factory=Segments.empty)
    panoptic_raster: np.ndarray | None = None  # (H, W) int32, 0 = void
    semantic_raster: np.ndarray | None = None  # (H, W) uint8 or uint16 label ids, 0 = void
    # (H, W, 3) uint8 bgr8 instance colour blend, outlines and captions (OutputSet.overlay)
    overlay: np.ndarray | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
