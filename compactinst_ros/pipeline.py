"""Pipeline: camera frame -> backend (preprocess, encoder, decoder, postprocess) -> result.

The ROS node, the replay tool and the ``infer`` CLI all go through this one class. It is the one
owner of the overlay: ``OutputSet.overlay`` gets the same picture on every backend (the instance
blend from the TensorRT device or drawn here on the CPU, captions added here). With ``tracking``
it also owns the instance tracker, so the node and replay see the same track ids: the instance
table, raster and overlay colours all follow them. ``lift_depth`` and ``lift_cloud`` lift a
frame's instances to 3-D where its raster is: on the TensorRT device, else on the host. It never
imports torch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .backends import Backend, BackendOptions, StagedBackend, create_backend
from .backends.base import DeviceLiftBackend
from .bundle import ModelBundle
from .image_formats import validate_image
from .overlay import overlay_bgr
from .palette import id_colours
from .spatial.lift import Instances3D, Intrinsics, LiftOptions, lift_cloud, lift_depth
from .structures import (
    INFERENCE,
    BatchItem,
    FrameMeta,
    FrameResult,
    OutputSet,
    PostprocessOptions,
)
from .tracking import InstanceTracker, TrackerOptions, remap_ids


@dataclass
class PendingBatch:
    """A batch between ``encode_batch`` and ``decode_batch``: its frames as given and as the
    backend runs them, the backend's half-done batch (None: not started), the options it was
    started with (a swap between the halves applies from the next batch) and the first half's
    time (ms)."""

    items: list[BatchItem]
    asked: list[BatchItem]
    encoded: Any
    options: PostprocessOptions
    encode_ms: float


class Pipeline:
    """One model, one backend; call it once per frame from a single thread (options may be
    replaced between frames, never during one). Where ``splits_stages``, ``encode_batch`` may
    run on one thread while ``decode_batch`` runs on another, each half in batch order."""

    def __init__(
        self,
        bundle: ModelBundle | str | Path,
        backend: str = "auto",
        options: PostprocessOptions | None = None,
        backend_options: BackendOptions | None = None,
        tracking: bool = False,
        tracker_options: TrackerOptions | None = None,
        **backend_overrides: Any,
    ) -> None:
        """Load ``bundle`` on ``backend``; ``backend_overrides`` replace backend option fields.

        ``tracking``: instance ids are track ids that persist across frames (a video stream:
        the node, replay); off, they are 1..N in score order per frame (single images).
        """
        self.bundle = bundle if isinstance(bundle, ModelBundle) else ModelBundle.load(bundle)
        self.options = options or PostprocessOptions()
        self.tracker = InstanceTracker(tracker_options, enabled=tracking)
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
        """Segment one HxWxC uint8 frame; InputError for frames that cannot be processed."""
        return self.infer_batch([self.prepare(image, encoding, outputs)], [self.tracker])[0]

    def prepare(
        self, image: np.ndarray, encoding: str = "rgb8", outputs: OutputSet | None = None
    ) -> BatchItem:
        """Validate one frame for a batch; InputError names what is wrong with it, so a bad
        frame fails alone and never the batch it would have joined."""
        image = validate_image(image, encoding)
        meta = FrameMeta.letterbox(
            image.shape[0], image.shape[1], self.bundle.input_h, self.bundle.input_w
        )
        outputs = outputs or OutputSet()
        return BatchItem(image, encoding, meta, outputs)

    def infer_batch(
        self, items: Sequence[BatchItem], trackers: Sequence[InstanceTracker]
    ) -> list[FrameResult]:
        """Segment prepared frames (one per camera) in one backend batch; ``trackers`` gives
        each frame its camera's tracker (``make_tracker``; ``__call__`` passes its own).

        The tracker and the overlay count as post-processing, as on the device where a kernel
        draws the overlay. A tracker sees only frames whose instances were computed (an
        instance output or the overlay asked for); frames it does not see are like dropped ones.
        """
        return self.decode_batch(self.encode_batch(items), trackers)

    @property
    def splits_stages(self) -> bool:
        """True where ``encode_batch`` of the next batch may run on one thread while
        ``decode_batch`` of this one runs on another (the backend is a ``StagedBackend``)."""
        return isinstance(self.backend, StagedBackend)

    def encode_batch(self, items: Sequence[BatchItem]) -> PendingBatch:
        """The first half of ``infer_batch``: preprocess and encoder where the backend splits
        its stages, nothing yet where it does not (``decode_batch`` then runs it all)."""
        start = time.perf_counter()
        asked = [
            replace(item, outputs=replace(item.outputs, instance=True))
            if item.outputs.overlay
            else item
            for item in items
        ]
        encoded = self.backend.encode_batch(asked) if self.splits_stages else None
        elapsed_ms = (time.perf_counter() - start) * 1e3
        return PendingBatch(list(items), asked, encoded, self.options, elapsed_ms)

    def decode_batch(
        self, pending: PendingBatch, trackers: Sequence[InstanceTracker]
    ) -> list[FrameResult]:
        """The second half of ``infer_batch`` on ``encode_batch``'s result: decoder,
        postprocess, then each frame's tracker and overlay (``trackers``: one per frame)."""
        start = time.perf_counter()
        items = pending.items
        if len(trackers) != len(items):
            raise ValueError(f"{len(items)} frames but {len(trackers)} trackers")
        if pending.encoded is None:
            results = self.backend.infer_batch(pending.asked, pending.options)
        else:
            results = self.backend.decode_batch(pending.encoded, pending.options)
        post = time.perf_counter()
        for index, (item, result, tracker) in enumerate(zip(items, results, trackers, strict=True)):
            if item.outputs.overlay or item.outputs.instance:
                self._track(index, item, result, tracker, pending.options.overlay_alpha)
        post_ms = (time.perf_counter() - post) * 1e3
        total_ms = pending.encode_ms + (time.perf_counter() - start) * 1e3
        for result in results:
            result.timings_ms["postprocess"] += post_ms
            result.timings_ms[INFERENCE] = total_ms
        return results

    def batch_slots(self, frames: int) -> int:
        """How many slots the backend runs ``frames`` frames in (the rest is padding)."""
        return self.backend.batch_slots(frames)

    def make_tracker(self) -> InstanceTracker:
        """A new tracker with this Pipeline's options (and on/off state): one per camera."""
        return InstanceTracker(self.tracker.options, enabled=self.tracker.enabled)

    def _track(
        self,
        index: int,
        item: BatchItem,
        result: FrameResult,
        tracker: InstanceTracker,
        alpha: float,
    ) -> None:
        """Track ids into the table, the overlay in their colours, the raster remapped if asked.

        The overlay is drawn from the backend's per-frame raster through a per-frame-id ->
        track-colour table (on the device with the TensorRT backend), so the full-resolution
        remap runs only when the instance raster itself is an output.
        """
        outputs = item.outputs
        raster = result.instance_raster
        frame_ids = result.instances.ids
        track_ids = tracker.associate(result.instances, raster)
        result.instances = replace(result.instances, ids=track_ids)
        if outputs.overlay:
            colours = id_colours(frame_ids, track_ids)
            result.overlay = self.backend.render_overlay(colours, alpha, index)
            result.overlay = overlay_bgr(
                item.image, item.encoding, result, self.bundle.labels, alpha, colours,
                captions=outputs.captions,
            )  # fmt: skip
        if not outputs.instance:
            result.instance_raster = None
        elif tracker.enabled:
            result.instance_raster = remap_ids(raster, frame_ids, track_ids)

    def lift_depth(
        self,
        result: FrameResult,
        depth_m: np.ndarray,
        colour: Intrinsics,
        depth: Intrinsics | None = None,
        options: LiftOptions | None = None,
    ) -> Instances3D:
        """``spatial.lift_depth`` of ``result``'s instances (rows and ids of
        ``result.instances``) with the registered depth image ``depth_m``; ``result`` needs its
        instance raster (``OutputSet.instance``).

        On the backend's device where it lifts there (``DeviceLiftBackend``: TensorRT, for a
        frame of its last batch, sizes as the camera_infos say); otherwise, and for every size
        mismatch (whose InputError the host's lift_depth words), on the host raster. The two
        agree but for the centroid's float32 rounding (kernels/lift.cu)."""
        raster, device = self._lifting(result, colour, "lift_depth")
        grid = depth or colour
        if device is not None and depth_m.shape == (grid.height, grid.width):
            lifted = device.lift_depth(result, depth_m, colour, depth, options)
            if lifted is not None:
                return lifted
        return lift_depth(raster, result.instances.ids, depth_m, colour, depth, options)

    def lift_cloud(
        self,
        result: FrameResult,
        xyz_camera: np.ndarray,
        colour: Intrinsics,
        options: LiftOptions | None = None,
    ) -> tuple[Instances3D, np.ndarray]:
        """``spatial.lift_cloud`` of ``result``'s instances with the (P, 3) points
        ``xyz_camera`` in the camera's optical frame (a LiDAR cloud transformed by the
        LiDAR-to-camera transform): the table and each point's instance id (0: in no mask).

        On the backend's device where it lifts there, as :meth:`lift_depth`; otherwise on the
        host raster. The two agree but for the centroid's float32 rounding."""
        raster, device = self._lifting(result, colour, "lift_cloud")
        if device is not None:
            lifted = device.lift_cloud(result, xyz_camera, colour, options)
            if lifted is not None:
                return lifted
        return lift_cloud(raster, result.instances.ids, xyz_camera, colour, options)

    def _lifting(
        self, result: FrameResult, colour: Intrinsics, caller: str
    ) -> tuple[np.ndarray, DeviceLiftBackend | None]:
        """(``result``'s host instance raster, the backend where it can also be lifted on the
        device: one that lifts there, the raster of the camera_info's size; else None);
        ValueError for a frame inferred without its raster."""
        raster = result.instance_raster
        if raster is None:
            raise ValueError(
                f"{caller} needs the frame's instance raster: infer it with "
                "OutputSet(instance=True)"
            )
        on_device = isinstance(self.backend, DeviceLiftBackend) and raster.shape == (
            colour.height,
            colour.width,
        )
        return raster, self.backend if on_device else None

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
