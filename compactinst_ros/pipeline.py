"""Pipeline: camera frame -> backend (preprocess, encoder, decoder, postprocess) -> result.

The ROS node, the replay tool and the ``infer`` CLI all go through this one class. It never
imports torch.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .backends import Backend, create_backend
from .bundle import ModelBundle
from .image_formats import validate_image
from .structures import FrameMeta, FrameResult, OutputSet, PostprocessOptions


class Pipeline:
    """One model, one backend, fixed thresholds; call it once per frame from a single thread."""

    def __init__(
        self,
        bundle: ModelBundle | str | Path,
        backend: str = "auto",
        options: PostprocessOptions | None = None,
        **backend_kwargs: object,
    ) -> None:
        self.bundle = bundle if isinstance(bundle, ModelBundle) else ModelBundle.load(bundle)
        self.options = options or PostprocessOptions()
        self.backend: Backend = create_backend(backend, self.bundle, **backend_kwargs)

    @property
    def backend_name(self) -> str:
        """Name of the backend actually in use (``auto`` resolved)."""
        return self.backend.name

    def __call__(
        self, image: np.ndarray, encoding: str = "rgb8", outputs: OutputSet | None = None
    ) -> FrameResult:
        """Segment one HxWxC uint8 frame; InputError for frames that cannot be processed."""
        start = time.perf_counter()
        image = validate_image(image, encoding)
        meta = FrameMeta.letterbox(
            image.shape[0], image.shape[1], self.bundle.input_h, self.bundle.input_w
        )
        result = self.backend.infer(image, encoding, meta, self.options, outputs or OutputSet())
        result.timings_ms["total"] = (time.perf_counter() - start) * 1e3
        return result

    def describe(self) -> dict:
        """Model and backend facts for logs, diagnostics and reports."""
        return {
            "model": self.bundle.name,
            "model_fingerprint": self.bundle.fingerprint,
            "input_size": f"{self.bundle.input_h}x{self.bundle.input_w}",
            **self.backend.describe(),
        }

    def close(self) -> None:
        """Release the backend."""
        self.backend.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
