"""Decoder outputs of the ONNX Runtime backend without post-processing, for parity checks.

Imported by name (``ort_stages``): put ``test/backends`` on sys.path first when importing from
another test directory.
"""

from __future__ import annotations

import numpy as np

from compactinst_ros.backends.ort import OrtBackend
from compactinst_ros.preprocess import letterbox
from compactinst_ros.structures import FrameMeta, RawOutputs


def raw_outputs(
    backend: OrtBackend, image: np.ndarray, encoding: str, meta: FrameMeta
) -> RawOutputs:
    """Decoder outputs for one validated frame: the backend's letterbox, encoder and decoder."""
    tensor = letterbox(image, encoding, meta, backend.bundle.pad_value)
    return raw_outputs_of_input(backend, tensor)


def raw_outputs_of_input(backend: OrtBackend, tensor: np.ndarray) -> RawOutputs:
    """Decoder outputs for a ready (1, 3, H, W) encoder input, e.g. another backend's
    pre-processed frame (parity checks that isolate pre-processing)."""
    return backend.run_decoder(backend.run_encoder(tensor))[0]
