"""replay-fleet against sequential replay on synthetic drives, side by side in one run.

Builds DRIVES synthetic videos (``compactinst synth --sequence``), one bag + ground truth per
drive and one bag + ground truth of all frames, then times (1) ``replay`` drive after drive,
(2) one ``replay`` over all frames (the single-process reference figures) and (3)
``replay-fleet`` on a local Ray cluster, and checks that the fleet's merged AP, PQ, mIoU and id
switches equal the single-process ones exactly. Overhead per drive: the wall time (x workers
for the fleet) not spent in the drives' frame loops, divided by the drives.

    python scripts/bench_fleet.py --drives 6 --frames 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import cv2

from compactinst_ros.bundle import default_bundle_path
from compactinst_ros.eval.bags import write_image_bag
from compactinst_ros.eval.fleet import FleetOptions, connect, import_ray, replay_fleet
from compactinst_ros.eval.replay import ReplayOptions, replay
from compactinst_ros.train.synthetic import generate

T0, PERIOD_NS = 1_700_000_000_000_000_000, 100_000_000


def write_gt(data: Path, out: Path, keep: set[int], stamps: dict[int, int]) -> None:
    """The synth GT restricted to image ids ``keep``, each image with its header stamp."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("instances.json", "panoptic.json"):
        gt = json.loads((data / name).read_text())
        gt["images"] = [{**e, "stamp_ns": stamps[e["id"]]} for e in gt["images"] if e["id"] in keep]
        gt["annotations"] = [a for a in gt["annotations"] if a["image_id"] in keep]
        (out / name).write_text(json.dumps(gt))


def make_drives(root: Path, drives: int, frames: int, size: tuple[int, int]) -> Path:
    """Bags + GT per drive, the all-frames bag + GT, and the manifest; returns the manifest."""
    data = root / "synth"
    generate(data, drives * frames, 0, size[0], size[1], progress=False, sequence=frames)
    images = json.loads((data / "panoptic.json").read_text())["images"]
    images.sort(key=lambda e: e["id"])
    stamps = {e["id"]: T0 + n * PERIOD_NS for n, e in enumerate(images)}
    pixels = {e["id"]: cv2.imread(str(data / "images" / e["file_name"])) for e in images}
    entries = []
    groups = [images[k * frames : (k + 1) * frames] for k in range(drives)]
    for k, group in enumerate([*groups, images]):
        name = f"drive{k}" if k < drives else "all"
        ids = {e["id"] for e in group}
        write_image_bag(root / name / "bag", [(stamps[i], pixels[i]) for i in sorted(ids)])
        write_gt(data, root / name / "gt", ids, stamps)
        gt = {f"gt_{kind}": f"{name}/gt/{kind}.json" for kind in ("instances", "panoptic")}
        tags = {"site": ("farm", "road", "yard")[k % 3], "weather": ("sun", "rain")[k % 2]}
        entry = {"name": name, "bag": f"{name}/bag", **gt, "gt_panoptic_dir": "synth/panoptic"}
        entries.append({**entry, "tags": tags})
    manifest = root / "manifest.yaml"
    manifest.write_text(json.dumps({"drives": entries[:drives]}))
    return manifest


def figures(accuracy: dict) -> dict:
    """The compared figures: AP (all six), PQ/SQ/RQ blocks, mIoU, CLEAR-MOT counts."""
    return {k: accuracy.get(k) for k in ("mask_ap", "panoptic", "semantic", "tracking")}


def main() -> None:
    """Build the drives, run the three ways, print the table and the equality check."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drives", type=int, default=6)
    parser.add_argument("--frames", type=int, default=10, help="frames per drive")
    parser.add_argument("--size", default="192x256", help="frame HxW")
    parser.add_argument("--cpus-per-worker", type=int, default=1)
    parser.add_argument("--model", type=Path, default=None, help="bundle (default: the shipped)")
    parser.add_argument("--keep", type=Path, help="work folder to keep (default: a temporary one)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench_fleet_"))
    model = args.model or default_bundle_path()
    h, w = (int(v) for v in args.size.split("x"))
    manifest = make_drives(root, args.drives, args.frames, (h, w))
    drives = json.loads(manifest.read_text())["drives"]

    def options(entry: dict, out: Path) -> ReplayOptions:
        paths = {k: root / v for k, v in entry.items() if k.startswith(("bag", "gt_"))}
        return ReplayOptions(model=model, backend="onnxruntime", out=out, overlays=0, plots=False,
                             progress=False, **paths)  # fmt: skip

    start = time.perf_counter()
    loops = [replay(options(d, root / "seq" / d["name"]))["modes"]["lockstep"] for d in drives]
    sequential = time.perf_counter() - start
    seq_loops = sum(b["throughput"]["wall_s"] for b in loops)
    start = time.perf_counter()
    single = replay(options({"bag": "all/bag", "gt_instances": "all/gt/instances.json",
                             "gt_panoptic": "all/gt/panoptic.json",
                             "gt_panoptic_dir": "synth/panoptic"}, root / "single"))  # fmt: skip
    one_process = time.perf_counter() - start
    single_acc = single["modes"]["lockstep"]["accuracy"]

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = import_ray()
    start = time.perf_counter()
    connect(ray, "local")
    ray_start = time.perf_counter() - start
    template = options(drives[0], root / "fleet")
    fleet_options = FleetOptions(manifest=manifest, template=template, out=root / "fleet",
                                 cpus_per_worker=args.cpus_per_worker, progress=False)  # fmt: skip
    start = time.perf_counter()
    report = replay_fleet(fleet_options)
    fleet_wall = time.perf_counter() - start
    ray.shutdown()
    workers = report["run"]["workers"]
    fleet_loops = 0.0
    for file in (root / "fleet" / "drives").glob("*.json"):
        fleet_loops += json.loads(file.read_text())["lockstep"]["throughput"]["wall_s"]

    frames = args.drives * args.frames
    print(f"{args.drives} drives x {args.frames} frames of {h}x{w}, model {model.name}, "
          f"{os.cpu_count()} CPUs; Ray start {ray_start:.1f} s (not in the fleet's wall)")
    print("| run | workers | wall s | frames/s | overhead per drive s |")
    print("|---|---:|---:|---:|---:|")
    rows = [
        ("replay, drive after drive", 1, sequential, (sequential - seq_loops) / args.drives),
        ("replay, one bag of all frames", 1, one_process, None),
        ("replay-fleet", workers, fleet_wall, (fleet_wall * workers - fleet_loops) / args.drives),
    ]
    for name, n, wall, overhead in rows:
        cell = "–" if overhead is None else f"{overhead:.2f}"
        print(f"| {name} | {n} | {wall:.2f} | {frames / wall:.2f} | {cell} |")
    merged = report["fleet"]["accuracy"]
    equal = figures(merged) == figures(single_acc)
    summary = report["summary"]
    print(f"fleet: AP {summary['AP']}, PQ {summary['PQ']}, mIoU {summary['mIoU']}, "
          f"id switches {summary['id_switches']}")  # fmt: skip
    print(f"merged == single-process (AP, PQ, mIoU, tracking): {equal}")
    if not equal:
        raise SystemExit(f"fleet {figures(merged)}\n!= single {figures(single_acc)}")
    if args.keep is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
