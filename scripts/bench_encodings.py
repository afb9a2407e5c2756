#!/usr/bin/env python3
"""Cost of reading a camera frame in each encoding to RGB, and of decoding compressedDepth.

Colour: one 1080p scene written as each encoding sends it (``image_formats.encode_bgr8``), then
what the node does before resizing: ``image_from_buffer`` (a view, or the conversion on arrival)
and ``to_rgb``. Depth: one synthetic depth image (a tilted plane with 2 % holes) as
compressedDepth png and rvl, through ``decode_compressed_depth``. The encodings are timed round
by round, interleaved, so that a busy machine slows them alike; it prints the median with the
10th-90th percentile and the ratio to bgr8's (to png's for depth).

    .venv/bin/python scripts/bench_encodings.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import sys
import time

import cv2
import numpy as np

from compactinst_ros.image_formats import (
    decode_compressed_depth,
    encode_bgr8,
    image_from_buffer,
    to_rgb,
)

COLOUR = ("bgr8", "rgb8", "mono8", "bayer_rggb8", "bayer_rggb16", "rgb16", "mono16", "nv12", "nv24")


def scene(h: int, w: int) -> np.ndarray:
    """A smooth bgr8 scene with edges (demosaicing and chroma cost do not depend on content)."""
    yy, xx = np.mgrid[0:h, 0:w]
    image = np.dstack([(xx * 255 // w), (yy * 255 // h), ((xx + yy) * 127 // (h + w))])
    image = image.astype(np.uint8)
    cv2.rectangle(image, (w // 4, h // 4), (w // 2, h // 2), (30, 200, 90), -1)
    return image


def rvl(samples: np.ndarray) -> bytes:
    """RVL stream of uint16 ``samples`` (compressed_depth_image_transport's algorithm), built
    with numpy: runs of zeros and nonzeros, zig-zag deltas, 3-bit groups in nibbles."""
    flat = samples.ravel().astype(np.int64)
    nonzero = flat != 0
    edges = np.flatnonzero(np.diff(np.concatenate(([False], nonzero, [False])).astype(np.int8)))
    starts, ends = edges[0::2], edges[1::2]  # nonzero runs [start, end)
    zeros = starts - np.concatenate(([0], ends[:-1]))
    values: list[int] = []
    previous = 0
    for z, s, e in zip(zeros.tolist(), starts.tolist(), ends.tolist(), strict=True):
        run = flat[s:e]
        deltas = np.diff(np.concatenate(([previous], run)))
        previous = int(run[-1])
        values += [z, e - s, *((deltas << 1) ^ (deltas >> 63)).tolist()]
    tail = flat.size - (int(ends[-1]) if ends.size else 0)
    if tail:
        values += [tail, 0]
    nibbles: list[int] = []
    for value in values:
        while True:
            nibble, value = value & 7, value >> 3
            nibbles.append(nibble | (8 if value else 0))
            if not value:
                break
    nibbles += [0] * (-len(nibbles) % 8)
    packed = np.asarray(nibbles, np.uint32).reshape(-1, 8) << np.arange(28, -4, -4, dtype=np.uint32)
    return packed.sum(axis=1, dtype=np.uint32).astype("<u4").tobytes()


def depth_payloads(h: int, w: int) -> dict[str, tuple[str, bytes]]:
    """compressedDepth png and rvl of one 16UC1 depth image (millimetres)."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:h, 0:w]
    mm = (800 + 6 * yy + xx // 3 + rng.integers(0, 3, (h, w))).astype(np.uint16)
    mm[rng.random((h, w)) < 0.02] = 0
    header = bytes(12)
    _, png = cv2.imencode(".png", mm, [cv2.IMWRITE_PNG_COMPRESSION, 1])
    size = np.array([w, h], "<u4").tobytes()
    return {
        "png": ("16UC1; compressedDepth png", header + png.tobytes()),
        "rvl": ("16UC1; compressedDepth rvl", header + size + rvl(mm)),
    }


def report(title: str, times: dict[str, list[float]], base: str) -> None:
    """Median, 10th-90th percentile and ratio to ``base`` of each entry, in ms."""
    reference = float(np.median(times[base]))
    print(f"\n{title}")
    print("| what | median ms | p10-p90 ms | x " + base + " |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        ms = np.asarray(values) * 1e3
        p10, p50, p90 = np.percentile(ms, [10, 50, 90])
        print(f"| `{name}` | {p50:.2f} | {p10:.2f}-{p90:.2f} | {p50 / (reference * 1e3):.1f} |")


def main(argv: list[str] | None = None) -> int:
    """Time every encoding and both depth codecs, interleaved; print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds (after one warm-up)")
    args = parser.parse_args(argv)
    h, w = 1080, 1920
    bgr = scene(h, w)
    frames = {e: encode_bgr8(bgr, e) for e in COLOUR}
    depth = {
        f"{k} {h2}p": v
        for h2, w2 in ((480, 640), (720, 1280))
        for k, v in depth_payloads(h2, w2).items()
    }
    colour_times: dict[str, list[float]] = {e: [] for e in COLOUR}
    depth_times: dict[str, list[float]] = {k: [] for k in depth}
    for round_ in range(args.rounds + 1):
        for encoding, (data, step) in frames.items():
            start = time.perf_counter()
            to_rgb(*image_from_buffer(data, h, w, step, encoding))
            if round_:
                colour_times[encoding].append(time.perf_counter() - start)
        for name, (fmt, data) in depth.items():
            start = time.perf_counter()
            decode_compressed_depth(fmt, data)
            if round_:
                depth_times[name].append(time.perf_counter() - start)
    report(f"1080p frame to RGB ({args.rounds} rounds)", colour_times, "bgr8")
    report(f"compressedDepth 16UC1 to metres ({args.rounds} rounds)", depth_times, "png 480p")
    return 0


if __name__ == "__main__":
    sys.exit(main())
