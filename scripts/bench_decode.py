#!/usr/bin/env python3
"""How fast one core decodes a 1080p H.264 camera stream, beside the JPEG frames of the same
video, measured side by side in one run.

The video: synthetic 1080x1920 field scenes (seed 1000) panned a few pixels per frame, encoded
as a live camera encoder records them (libx264, no B-frames, a keyframe every ``--gop`` frames,
crf 23), and the same frames as JPEG (quality 90, what image_transport's compressed transport
sends). Pinned to one core (``sched_setaffinity``, FFmpeg and OpenCV on one thread), every round
times, in turn:

- ``h264 -> bgr8``: ``VideoStream.decode`` per packet, what the node and replay run;
- ``h264 only``: the same decoder without the conversion to bgr8 (the YUV pictures);
- ``jpeg -> bgr8``: ``image_formats.decode_compressed`` per frame (the JPEG transport's decode).

Prints frames per second per step (median and range over the rounds) and the ratio of each to
the JPEG decode per round (its median and range).

    .venv/bin/python scripts/bench_decode.py [--rounds 7] [--frames 60] [--core 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import av
import cv2
import numpy as np

from compactinst_ros.image_formats import decode_compressed
from compactinst_ros.train.synthetic import render_scene
from compactinst_ros.video import VideoPacket, VideoStream, encode, is_keyframe

H, W = 1080, 1920


def video_frames(count: int, step: int = 4) -> list[np.ndarray]:
    """``count`` bgr8 frames: two synthetic scenes side by side, panned ``step`` px per frame
    (a slowly moving camera: most blocks predict from the previous picture)."""
    wide = np.concatenate([render_scene(1000, i, H, W).image for i in range(2)], axis=1)
    return [np.ascontiguousarray(wide[:, i * step : i * step + W, ::-1]) for i in range(count)]


def timed(run: Callable[[], int]) -> float:
    """Frames per second of one call of ``run`` (which returns the frames it handled)."""
    start = time.perf_counter()
    frames = run()
    return frames / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--gop", type=int, default=30)
    parser.add_argument("--core", type=int, default=0, help="the CPU core to pin to")
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.core})
    cv2.setNumThreads(1)
    frames = video_frames(args.frames)
    packets = list(encode(frames, "libx264", args.gop))
    jpegs = [cv2.imencode(".jpg", f, [cv2.IMWRITE_JPEG_QUALITY, 90])[1] for f in frames]
    h264_mb = sum(len(d) for d, _, _ in packets) / 1e6
    jpeg_mb = sum(len(j) for j in jpegs) / 1e6
    print(
        f"{args.frames} frames {W}x{H}: h264 {h264_mb:.1f} MB (gop {args.gop}), "
        f"jpeg q90 {jpeg_mb:.1f} MB; core {args.core}, one thread; {args.rounds} rounds"
    )

    def h264_bgr() -> int:
        stream = VideoStream(hardware=False, threads=1)
        for index, (data, key, _) in enumerate(packets):
            stream.decode(VideoPacket(data, "h264", key, index))
        return len(packets)

    def h264_only() -> int:
        context = av.CodecContext.create("h264", "r")  # the software decoder VideoStream runs
        context.thread_count = 1
        for index, (data, _) in enumerate(packets):
            packet = av.Packet(data)
            packet.pts = index
            context.decode(packet)
        return len(packets)

    def jpeg_bgr() -> int:
        for data in jpegs:
            decode_compressed(data, "jpeg")
        return len(jpegs)

    assert is_keyframe(packets[0][0], "h264")
    steps = {"h264 -> bgr8": h264_bgr, "h264 only": h264_only, "jpeg -> bgr8": jpeg_bgr}
    fps: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, run in steps.items():
            fps[name].append(timed(run))
    print(f"{'step':<14}{'median fps':>11}{'min':>8}{'max':>8}{'x jpeg (median, range)':>26}")
    for name, values in fps.items():
        ratios = [v / j for v, j in zip(values, fps["jpeg -> bgr8"], strict=True)]
        print(
            f"{name:<14}{statistics.median(values):>11.1f}{min(values):>8.1f}{max(values):>8.1f}"
            f"{statistics.median(ratios):>12.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        )


if __name__ == "__main__":
    main()
