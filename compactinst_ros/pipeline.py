"""Pipeline: camera frame -> backend (preprocess, encoder, decoder, postprocess) -> result.

The ROS node, the replay tool and the ``infer`` CLI all go through this one class. It is the one
owner of the overlay: ``OutputSet.overlay`` gets the same picture on every backend (the instance
blend from the TensorRT device or drawn here on the CPU, captions added here). It never imports
torch.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .backends import Backend, BackendOptions, create_backend
from .bundle import ModelBundle
from .image_formats import validate_image
from .overlay import overlay_bgr
from .structures import INFERENCE, FrameMeta, FrameResult, OutputSet, PostprocessOptions


class Pipeline:
    """One model, one backend, fixed options; call it once per frame from a single thread."""

    def __init__(
        self,
        bundle: ModelBundle | str | Path,
        backend: str = "auto",
        options: PostprocessOptions | None = None,
        backend_options: BackendOptions | None = None,
        **backend_overrides: Any,
    ) -> None:
        """Load ``bundle`` on ``backend``; ``backend_overrides`` replace backend option fields."""
        self.bundle = bundle if isinstance(bundle, ModelBundle) else ModelBundle.load(bundle)
        self.options = options or PostprocessOptions()
        self.backend: Backend = create_backend(
            backend, self.bundle, backend_options, **backend_overrides
        )

    @property
    def backend_name(self) -> str:
        """Name of the backend actually in use (``auto`` resolved)."""
        return self.backend.name

    def __call__(
        self, image: np.ndarray, encoding: str = "rgb8", outputs: OutputSet | None = None
    ) -> FrameResult:
        """Segment one HxWxC uint8 frame; InputError for frames that cannot be processed.

        The overlay's time counts as post-processing, as on the device where a kernel draws it.
        """
        start = time.perf_counter()
        image = validate_image(image, encoding)
        meta = FrameMeta.letterbox(
            image.shape[0], image.shape[1], self.bundle.input_h, self.bundle.input_w
        )
        outputs = outputs or OutputSet()
        if outputs.overlay:
            outputs = replace(outputs, instance=True)
        result = self.backend.infer(image, encoding, meta, self.options, outputs)
        if outputs.overlay:
            drawn = time.perf_counter()
            result.overlay = overlay_bgr(
                image, encoding, result, self.bundle.labels, self.options.overlay_alpha
            )
            result.timings_ms["postprocess"] += (time.perf_counter() - drawn) * 1e3
        result.timings_ms[INFERENCE] = (time.perf_counter() - start) * 1e3
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
