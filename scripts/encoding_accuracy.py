#!/usr/bin/env python3
"""Accuracy of the demo bag recorded in each camera encoding, against the same frames as bgr8.

Writes the demo's 40 frames (``make demo``'s data, built if missing) once per encoding, as a
camera publishing that encoding sends them (``image_formats.encode_bgr8``: a bayer mosaic, 257 x
the values at 16 bits, grey for mono, BT.601 YUV), replays each bag lockstep with the demo's
ground truth, and prints mask AP and PQ per encoding beside bgr8's. Bayer and 4:2:0 YUV drop
detail before the model sees it; mono drops colour, which a colour model needs.

    .venv/bin/python scripts/encoding_accuracy.py [--model models/default] [--out out/encodings]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

from compactinst_ros.demo import build_demo_data
from compactinst_ros.eval.bags import IMAGE, BagWriter, ImageBag, _header, typestore
from compactinst_ros.eval.replay import ReplayOptions, replay
from compactinst_ros.image_formats import encode_bgr8

ENCODINGS = [
    "bgr8",
    *(f"bayer_{p}8" for p in ("rggb", "bggr", "gbrg", "grbg")),
    *(f"bayer_{p}16" for p in ("rggb", "bggr", "gbrg", "grbg")),
    "rgb16",
    "bgr16",
    "rgba16",
    "bgra16",
    "8UC3",
    "8UC4",
    "nv12",
    "nv21",
    "nv24",
    "mono8",
    "mono16",
    "8UC1",
]
TOPIC = "/camera/image_raw"


def write_bag(frames: list[tuple[int, np.ndarray]], encoding: str, path: Path) -> None:
    """The frames as sensor_msgs/Image in ``encoding`` (log time = header stamp)."""
    images = typestore().types[IMAGE]
    with BagWriter(path, "mcap") as writer:
        for stamp_ns, bgr in frames:
            data, step = encode_bgr8(bgr, encoding)
            h, w = bgr.shape[:2]
            msg = images(
                header=_header(stamp_ns, "camera"),
                height=h,
                width=w,
                encoding=encoding,
                is_bigendian=0,
                step=step,
                data=np.frombuffer(data, np.uint8),
            )
            writer.write(TOPIC, IMAGE, stamp_ns, msg)


def main(argv: list[str] | None = None) -> int:
    """Replay the demo bag in every encoding; print mask AP and PQ beside bgr8's."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="out/demo_data", help="demo data (built if missing)")
    parser.add_argument("--model", default="models/default", help="bundle to replay with")
    parser.add_argument("--out", default="out/encodings", help="bags and reports go here")
    parser.add_argument("--encodings", nargs="*", default=ENCODINGS, help="encodings to measure")
    args = parser.parse_args(argv)
    paths = build_demo_data(Path(args.data), 40, 1000, (256, 384), 10.0)
    with ImageBag(paths["bag"]) as bag:
        frames = [(f.stamp_ns, f.decode()[0].copy()) for f in bag.frames()]
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    rows = []
    for encoding in args.encodings:
        bag_path = out / encoding / "bag"
        write_bag(frames, encoding, bag_path)
        report = replay(
            ReplayOptions(
                bag=bag_path,
                model=Path(args.model),
                mode="lockstep",
                gt_instances=paths["gt_instances"],
                gt_panoptic=paths["gt_panoptic"],
                gt_panoptic_dir=paths["gt_panoptic_dir"],
                out=out / encoding / "report",
                overlays=0,
                plots=False,
                progress=False,
            )
        )
        accuracy = report["modes"]["lockstep"]["accuracy"]
        rows.append((encoding, accuracy["mask_ap"]["AP"], accuracy["panoptic"]["all"]["PQ"]))
    base = {e: (ap, pq) for e, ap, pq in rows}.get("bgr8")
    print("| encoding | mask AP | PQ |" + (" AP - bgr8's |" if base else ""))
    print("|---|---:|---:|" + ("---:|" if base else ""))
    for encoding, ap, pq in rows:
        delta = f" {ap - base[0]:+.1f} |" if base else ""
        print(f"| `{encoding}` | {ap:.1f} | {pq:.1f} |{delta}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
