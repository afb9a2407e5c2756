"""The TensorRT overlay in track-id colours, on the stand-ins of emu/ (TensorRT on ONNX Runtime,
the real kernel sources on the CPU emulator): after a tracker reset the track ids are no longer
the per-frame ids, and the device-rendered overlay still equals the CPU overlay of the tracked
result (the colour table is remapped before the kernel runs)."""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pytest

from compactinst_ros.bundle import ModelBundle, default_bundle_path
from compactinst_ros.gpu.frames import smooth_rgb
from compactinst_ros.overlay import overlay_bgr
from compactinst_ros.pipeline import Pipeline
from compactinst_ros.structures import OutputSet

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")


def test_gpu_overlay_follows_track_ids(emulated_gpu) -> None:
    bundle = ModelBundle.load(default_bundle_path())
    frame = np.ascontiguousarray(smooth_rgb(120, 168, 5)[..., ::-1])
    asked = OutputSet(instance=True, panoptic=False, semantic=False, overlay=True)
    with Pipeline(bundle, backend="tensorrt", tracking=True) as pipe:
        first = pipe(frame, "bgr8", asked)
        pipe.tracker.reset()  # ids keep counting: the same objects get new track ids
        second = pipe(frame, "bgr8", asked)
    n = len(first.instances)
    assert n > 1
    assert sorted(first.instances.ids.tolist()) == list(range(1, n + 1))
    assert sorted(second.instances.ids.tolist()) == list(range(n + 1, 2 * n + 1))
    assert "ov_instance" in emulated_gpu.launches
    for result in (first, second):
        cpu = overlay_bgr(frame, "bgr8", replace(result, overlay=None), bundle.labels, 0.5)
        diff = np.abs(result.overlay.astype(int) - cpu.astype(int))
        assert diff.max() <= 1 and (diff > 0).mean() < 0.02  # rounding of the blend only
    fg = second.instance_raster > 0
    assert (np.abs(second.overlay.astype(int) - first.overlay.astype(int)).sum(-1)[fg] > 0).any()
