"""``compactinst replay BAG``: accuracy and per-stage latency of a model on a recorded bag.

lockstep: every frame goes through the Pipeline in this process, one after the other
(deterministic; the accuracy numbers), with track ids as the node gives them (and their id
switches when the ground truth carries ``track_id``s). realtime: the bag is published at its
recorded rate (x ``--rate``) to a running ``compactinst_node`` over real ROS topics and what
comes back is recorded (latency and drops as on the vehicle); see ``realtime.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np

from ..backends import GPU_BACKENDS
from ..bundle import PRECISIONS, ModelBundle, model_caveat
from ..errors import ConfigError, InputError, InterruptedJobError
from ..image_formats import mono_note
from ..jit import cpu_loops
from ..progress import Progress
from ..resources import default_model
from ..ros.camera_info import StampMatcher
from ..structures import STAGES, OutputSet, PostprocessOptions
from . import bags
from .bags import BagFrame, BagWriter, ImageBag, bag_hash, open_output_bag
from .cameras import PACINGS, attach_ground_truth, cameras_bag_block, open_cameras, run_cameras
from .groundtruth import MATCH_MODES, GroundTruth
from .realtime import CAMERA_INFO_TOLERANCE_NS, check_3d_messages, run_realtime
from .report import (
    PARTIAL_NOTE,
    host_info,
    latency_stats,
    model_text,
    now_iso,
    summary_text,
    warmup_left_out,
    write_report,
)

if TYPE_CHECKING:
    from ..pipeline import Pipeline
    from ..structures import FrameResult

MODES = ("lockstep", "realtime", "both")


@dataclass(frozen=True)
class ReplayOptions:
    """One replay: input bag, model, modes, ground truth and outputs (``compactinst replay``
    builds it from its flags; the demo builds it directly)."""

    bag: Path
    model: Path
    backend: str = "auto"
    precision: str | None = None  # None: the backend's default (bundle.PRECISIONS)
    topic: str | None = None  # None: detected (raw Image preferred)
    cameras: str | None = None  # "all" or comma-separated topics: a multi-camera replay
    batched: bool = True  # multi-camera: one batched node (False: one node per camera)
    mode: str = "lockstep"
    rate: float = 1.0  # realtime playback rate factor
    domain_id: int | None = None  # realtime ROS domain; None: a private one, never the env's
    gt_instances: Path | None = None
    gt_panoptic: Path | None = None
    gt_panoptic_dir: Path | None = None
    gt_3d: Path | None = None  # objects3d.json: 3-D accuracy with the bag's depth (lockstep)
    match: str = "auto"
    out: Path = Path("out/replay")
    output_bag: Path | None = None  # None: no output bag
    score_threshold: float | None = None  # None: the pipeline's default
    min_area: int | None = None  # None: the pipeline's default (PostprocessOptions.min_area)
    max_frames: int | None = None
    warmup: int = 3  # frames excluded from the latency statistics
    #: realtime: the share of sent frames (percent) the node may refuse before the replay fails
    max_refused_pct: float = 10.0
    overlays: int = 3  # overlay images written
    plots: bool = True
    progress: bool = True
    command_line: str = ""  # recorded in the report

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"--mode {self.mode} is unknown; choose one of {', '.join(MODES)}")
        if self.match not in MATCH_MODES:
            raise ConfigError(f"--match {self.match} is unknown; choose one of {MATCH_MODES}")
        if self.rate <= 0:
            raise ConfigError(f"--rate {self.rate} must be positive (1.0 = recorded rate)")
        if self.min_area is not None and self.min_area < 0:
            raise ConfigError(f"--min-area {self.min_area} must be >= 0 (0 keeps every instance)")
        if self.max_frames is not None and self.max_frames < 1:
            raise ConfigError(
                f"--max-frames {self.max_frames} replays no frame; give N >= 1, or leave it out "
                "to replay every frame"
            )
        if self.warmup < 0 or self.overlays < 0:
            raise ConfigError("--warmup and --overlays must be >= 0")
        if not 0 <= self.max_refused_pct <= 100:
            raise ConfigError(f"--max-refused-pct {self.max_refused_pct} must be 0..100")
        if self.cameras is not None and self.topic is not None:
            raise ConfigError(
                "--topic picks one camera and --cameras several; give one of them"
            )
        if self.cameras is not None and self.precision is not None:
            raise ConfigError(
                f"--precision {self.precision} applies to the in-process lockstep of one "
                "camera; a multi-camera replay runs the node, whose precision is its "
                "'precision' parameter"
            )
        if self.precision is not None and self.mode != "lockstep":
            raise ConfigError(
                f"--precision {self.precision} applies to --mode lockstep; a realtime replay "
                "runs the node, whose precision is its 'precision' parameter"
            )

    def ignored_options(self) -> list[str]:
        """One warning per option set to a value that has no effect in this mode."""
        default = {f.name: f.default for f in fields(self)}
        notes = []
        if self.mode == "lockstep" and self.rate != default["rate"]:
            notes.append("--rate has no effect in --mode lockstep (it paces realtime playback)")
        if self.mode == "lockstep" and self.domain_id is not None and self.cameras is None:
            # with --cameras, lockstep also runs nodes, on that domain
            notes.append("--domain has no effect in --mode lockstep (no node is started)")
        if self.mode == "lockstep" and self.max_refused_pct != default["max_refused_pct"]:
            notes.append("--max-refused-pct has no effect in --mode lockstep (no node refuses; "
                         "lockstep skips a bad frame and exits 1)")  # fmt: skip
        if self.mode == "realtime" and self.overlays != default["overlays"]:
            notes.append("--overlays has no effect in --mode realtime (lockstep writes them)")
        if self.cameras is not None and self.overlays != default["overlays"]:
            notes.append("--overlays has no effect with --cameras (both modes run the node)")
        if self.cameras is None and not self.batched:
            notes.append("--per-camera-nodes has no effect without --cameras")
        if self.gt_instances is None and self.gt_panoptic is None and self.match != "auto":
            notes.append("--match has no effect without --gt-instances or --gt-panoptic")
        if self.gt_panoptic is None and self.gt_panoptic_dir is not None:
            notes.append("--gt-panoptic-dir has no effect without --gt-panoptic")
        return notes

    def load_ground_truth(self) -> GroundTruth | None:
        """The ground truth files loaded, or None when neither GT file is given."""
        if self.gt_instances is None and self.gt_panoptic is None:
            return None
        return GroundTruth(self.gt_instances, self.gt_panoptic, self.gt_panoptic_dir)


#: the output bag's folder under --out when --output-bag names no path
DEFAULT_OUTPUT_BAG = "output_bag"

#: JPEG quality of the overlay in output bags (the node's overlay_jpeg_quality default)
OVERLAY_JPEG_QUALITY = 80


def write_outputs(
    writer: BagWriter, frame: BagFrame, result: FrameResult, camera_info: bytes | None
) -> None:
    """One frame's outputs as the node publishes them, with the input's stamp and frame_id: the
    rasters, the overlay as JPEG, the instance table, the latency record and, where the bag has
    one, the frame's camera_info re-stamped (messages built by the node's own ``ros.convert``)."""
    from builtin_interfaces.msg import Time
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import CameraInfo
    from std_msgs.msg import Header

    from ..ros import convert

    sec, nanosec = divmod(frame.stamp_ns, 1_000_000_000)
    header = Header(stamp=Time(sec=sec, nanosec=nanosec), frame_id=frame.frame_id)
    messages: dict[str, tuple[str, object]] = {
        name: (bags.IMAGE, convert.image_msg(raster, header))
        for name, raster in convert.result_images(result).items()
        if raster is not None and name != "overlay"
    }
    if result.overlay is not None:
        jpeg = convert.jpeg_msg(result.overlay, header, OVERLAY_JPEG_QUALITY)
        messages["overlay/compressed"] = (bags.BAG_OUTPUTS["overlay/compressed"], jpeg)
    table = convert.instance_table_msg(header, result.instances)
    messages["instance_table"] = (bags.BAG_OUTPUTS["instance_table"], table)
    measured = [s for s in STAGES if s in result.timings_ms]  # lockstep has no queue, publish...
    record = convert.latency_record_msg(header, measured, result.timings_ms)
    messages["latency/frame"] = (bags.JOINT_STATE, record)
    if camera_info is not None:
        info = deserialize_message(camera_info, CameraInfo)
        info.header = header
        messages["camera_info"] = (bags.CAMERA_INFO, info)
    for name, (msgtype, msg) in messages.items():
        writer.write(f"{bags.OUTPUT_NS}/{name}", msgtype, frame.bag_time_ns, serialize_message(msg))


def pick_overlay_frames(count: int, n: int) -> set[int]:
    """``n`` frame indices spread evenly over ``count`` frames."""
    if n <= 0 or count <= 0:
        return set()
    return {int(i) for i in np.linspace(0, count - 1, min(n, count)).round()}


def run_lockstep(
    bag: ImageBag,
    pipeline: Pipeline | object,
    gt: GroundTruth | None = None,
    match: str = "auto",
    output_bag: Path | None = None,
    overlay_dir: Path | None = None,
    overlays: int = 0,
    max_frames: int | None = None,
    warmup: int = 3,
    progress: bool = True,
    statistics: bool = False,
    gt_3d: Path | None = None,
) -> dict:
    """Run every frame through ``pipeline`` (a Pipeline or any callable with its signature);
    ``statistics`` adds the evaluator's sufficient statistics (for merging, ``merge.py``);
    ``gt_3d`` (objects3d.json) adds the 3-D accuracy with the bag's depth (``depth3d.py``)."""
    from .depth3d import open_evaluator
    from .metrics import Evaluator

    total = bag.count if max_frames is None else min(bag.count, max_frames)
    if gt is not None:
        stamps = [f.stamp_ns for f, _ in zip(bag.frames(), range(total), strict=False)]
        gt.match(stamps, match)
    evaluator = Evaluator(gt) if gt is not None else None
    depth3d = open_evaluator(bag, gt_3d) if gt_3d is not None else None
    writer = open_output_bag(output_bag) if output_bag else None
    infos: StampMatcher[bytes] = StampMatcher(CAMERA_INFO_TOLERANCE_NS, max(1, bag.count))
    for stamp, raw in bag.camera_infos() if writer is not None else ():
        infos.add(stamp, raw)
    show = pick_overlay_frames(total, overlays) if overlay_dir else set()
    labels = getattr(getattr(pipeline, "bundle", None), "labels", None)
    samples: dict[str, list[float]] = defaultdict(list)
    bar = Progress(total, "lockstep", progress)
    overlay_files: list[str] = []
    skipped: list[dict] = []
    processed = evaluated = read = 0
    interrupted = False
    start = time.perf_counter()
    try:
        frames = bag.decoded_frames()
        while True:
            t0 = time.perf_counter()  # a video's decoding happens as its frames are read
            frame = next(frames, None)
            if frame is None:
                break
            if frame.index >= total:
                continue  # a B-frame stream hands frames out of index order
            read += 1
            try:
                image, encoding = frame.decode()
                decode_ms = (time.perf_counter() - t0) * 1e3
                result = pipeline(image, encoding, OutputSet(overlay=writer is not None))
            except InputError as exc:  # one bad frame (an undecodable picture included):
                skipped.append(skipped_frame(frame, exc))  # named, counted, the replay goes on
                continue
            result.timings_ms["decode"] = decode_ms
            for stage, ms in result.timings_ms.items():
                samples[stage].append(float(ms))
            processed += 1
            if evaluator is not None and evaluator.add(frame.index, result):
                evaluated += 1
            if depth3d is not None:
                depth3d.add(frame.stamp_ns, result)
            if writer is not None:
                writer.write(bag.topic, bag.msgtype, frame.bag_time_ns, frame.raw)
                info = infos.match(frame.stamp_ns)
                if info is not None:
                    writer.write(bag.camera_info_topic, bags.CAMERA_INFO, frame.bag_time_ns, info)
                write_outputs(writer, frame, result, info)
            if frame.index in show and labels is not None and overlay_dir is not None:
                name = overlay_dir / f"{frame.index:06d}.png"
                overlay_files.append(str(save_overlay(image, encoding, result, labels, name)))
            bar.update(processed, f"{result.timings_ms['inference']:.0f} ms/frame")
    except KeyboardInterrupt:  # Ctrl-C: the report of the frames done so far, marked partial
        interrupted = True
    finally:
        bar.close()
        if writer is not None:
            writer.close()
        if depth3d is not None:
            depth3d.close()
    wall = time.perf_counter() - start
    notes = [bag.damage] if bag.damage else []
    warm = warmup_left_out(warmup, processed, notes)
    notes += [bag.pick_note] if bag.pick_note else []
    if bag.stream is not None:
        notes.append(f"video decoded by {bag.stream.describe()}")
    if evaluator is not None and evaluated < len(gt.frame_to_image if gt else ()):
        notes.append(f"{len(gt.frame_to_image) - evaluated} matched GT frames were not replayed")
    if gt is not None and gt.unmatched_images:
        notes.append(
            f"{gt.unmatched_images} of {len(gt.images)} GT images match no replayed frame "
            "(stamps outside the replayed frames, or GT of another recording)"
        )
    frames = {"total": total, "processed": processed, "dropped": read - processed - len(skipped)}
    if skipped:
        frames["skipped"] = len(skipped)
        notes.append(f"{len(skipped)} frames skipped: " + "; ".join(
            f"{s['index']} ({s['reason']})" for s in skipped[:5]
        ) + (" ..." if len(skipped) > 5 else ""))  # fmt: skip
    if interrupted:  # the frame in flight when Ctrl-C came was read but not processed
        frames["dropped"] = 0
        frames["unread"] = total - processed
        notes.append(f"interrupted (Ctrl-C) after {processed} of {total} frames")
    elif read < total:  # the bag broke while being read
        frames["unread"] = total - read
    stats = evaluator.statistics() if evaluator is not None else None
    return {
        "accuracy": evaluator.result(stats) if evaluator is not None else None,
        "warmup_frames": warm,
        "latency": latency_stats(samples, warm),
        "frames": frames,
        "throughput": {
            "wall_s": round(wall, 3),
            "input_fps": round(processed / wall, 2) if wall > 0 else None,
            "output_fps": round(processed / wall, 2) if wall > 0 else None,
        },
        "samples": {k: [round(v, 4) for v in vals] for k, vals in samples.items()},
        "overlays": overlay_files,
        "notes": notes,
        **({"skipped_frames": skipped} if skipped else {}),
        **({"statistics": stats} if statistics and stats is not None else {}),
        **(depth3d.blocks() if depth3d is not None else {}),
        **({"partial": True} if interrupted else {}),
    }


def skipped_frame(frame: BagFrame, error: Exception) -> dict:
    """The report's record of a frame that could not be decoded or was refused (index, stamp
    and why), also printed on stderr as it happens, so a long replay shows it at once."""
    record = {"index": frame.index, "stamp_ns": frame.stamp_ns, "reason": str(error)}
    seconds, nanoseconds = divmod(frame.stamp_ns, 10**9)
    print(f"replay: skipped frame {frame.index} (stamp {seconds}.{nanoseconds:09d}): {error}",
          file=sys.stderr)  # fmt: skip
    return record


def save_overlay(
    image: np.ndarray, encoding: str, result: FrameResult, labels: object, path: Path
) -> Path:
    """Write the frame with its instance/panoptic colours blended in (PNG)."""
    from ..image_formats import to_rgb
    from ..overlay import draw_overlay

    rgb = np.ascontiguousarray(to_rgb(image, encoding))
    bgr = draw_overlay(rgb, result, labels, bgr=False)[..., ::-1]  # type: ignore[arg-type]
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), bgr)
    return path


def bag_block(bag: ImageBag, path: str | Path) -> dict:
    """Bag metadata for the report."""
    return {
        "path": str(path),
        "hash": bag_hash(path),
        "topic": bag.topic,
        "msgtype": bag.msgtype,
        "image_topics": bag.image_topics,
        "frames": bag.count,
        "duration_s": round(bag.duration_s, 3),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst replay``."""
    parser.add_argument("bag", type=Path, help="rosbag2 folder (sqlite3 or mcap) or .mcap file")
    parser.add_argument(
        "--model", type=Path, help="model bundle folder (default: the embedded models/default)"
    )
    parser.add_argument(
        "--backend", default="auto", help="auto | onnxruntime | tensorrt | tensorrt_rtx | openvino"
    )
    parser.add_argument(
        "--precision", choices=PRECISIONS, help="graph precision (default: the backend's)"
    )
    parser.add_argument("--topic", help="image topic (default: detected; raw Image preferred)")
    parser.add_argument(
        "--cameras",
        metavar="all|TOPIC,TOPIC",
        help="replay several camera topics through the batched node, accuracy and latency per "
        "camera (default: one camera, --topic)",
    )
    parser.add_argument(
        "--per-camera-nodes",
        dest="batched",
        action="store_false",
        help="with --cameras: one node per camera instead of the batched node",
    )
    parser.add_argument("--mode", choices=MODES, default="lockstep", help="default: lockstep")
    parser.add_argument("--rate", type=float, default=1.0, help="realtime playback rate factor")
    parser.add_argument(
        "--domain",
        dest="domain_id",
        type=int,
        help="realtime ROS domain (default: a free private one in 1..101, not ROS_DOMAIN_ID)",
    )
    parser.add_argument(
        "--gt-instances", type=Path, help="COCO instance JSON (default: no mask AP)"
    )
    parser.add_argument("--gt-panoptic", type=Path, help="COCO panoptic JSON (default: no PQ)")
    parser.add_argument(
        "--gt-panoptic-dir",
        type=Path,
        help="folder of the panoptic PNGs (default: the JSON path without .json)",
    )
    parser.add_argument(
        "--gt-3d",
        type=Path,
        help="3-D ground truth (objects3d.json of 'synth --depth'): lift the instances with the "
        "bag's registered depth and report the centroid error (lockstep; default: no 3-D)",
    )
    parser.add_argument(
        "--match",
        choices=MATCH_MODES,
        default="auto",
        help="frame <-> GT image matching (auto: header stamp when the GT carries one)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("out/replay"), help="report folder (default out/replay)"
    )
    parser.add_argument(
        "--output-bag",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help=f"write the outputs to an mcap bag (default: none; PATH defaults to "
        f"OUT/{DEFAULT_OUTPUT_BAG})",
    )
    parser.add_argument(
        "--score-threshold",
        type=float,
        help="instance score threshold (default: the pipeline's 0.3; COCO AP favours low values)",
    )
    parser.add_argument(
        "--min-area",
        type=int,
        help=f"instances of fewer camera pixels are removed (default "
        f"{PostprocessOptions().min_area}; 0 keeps every one)",
    )
    parser.add_argument(
        "--max-frames", type=int, help="replay only the first N frames (default: all)"
    )
    parser.add_argument("--warmup", type=int, default=3, help="frames excluded from latency")
    parser.add_argument(
        "--max-refused-pct", type=float, default=10.0,
        help="realtime: fail (exit 1) when the node refuses more than this share of the sent "
        "frames, whose figures then measure only the rest",
    )  # fmt: skip
    parser.add_argument("--overlays", type=int, default=3, help="overlay images to write")
    parser.add_argument("--no-plots", action="store_true", help="skip the matplotlib plots")
    parser.add_argument("--quiet", action="store_true", help="no progress line")


def options_from_args(args: argparse.Namespace) -> ReplayOptions:
    """The ReplayOptions of parsed ``compactinst replay`` flags (defaults resolved here)."""
    model = args.model or default_model()
    if model is None:
        raise ConfigError("no default model is installed; pass --model BUNDLE")
    output_bag = None
    if args.output_bag is not None:
        output_bag = Path(args.output_bag) if args.output_bag else args.out / DEFAULT_OUTPUT_BAG
    flags = vars(args)
    same = {f.name: flags[f.name] for f in fields(ReplayOptions) if f.name in flags}
    return ReplayOptions(
        **{
            **same,
            "model": model,
            "output_bag": output_bag,
            "plots": not args.no_plots,
            "progress": not args.quiet,
            "command_line": "compactinst replay " + " ".join(sys.argv[2:]),
        }
    )


def lockstep_pipeline(options: ReplayOptions, **backend_overrides: object) -> Pipeline:
    """The tracking Pipeline of a lockstep replay with ``options``; ``backend_overrides``
    replace BackendOptions fields (a fleet worker's ``threads``)."""
    from ..pipeline import Pipeline

    given = postprocess_overrides(options)
    thresholds = PostprocessOptions(**given) if given else None
    return Pipeline(
        options.model,
        options.backend,
        thresholds,
        tracking=True,
        precision=options.precision,
        **backend_overrides,
    )


def starting_text(model: dict) -> str:
    """The line a lockstep replay prints as it starts: which model, backend and precision run,
    and what runs the CPU's per-pixel loops (numba, or the numpy fallback and how to leave it:
    said once, as the node says it)."""
    loops = "on the GPU" if model.get("backend") in GPU_BACKENDS else cpu_loops()
    return f"replay: {model_text(model)}; per-pixel loops: {loops}"


def replay(options: ReplayOptions) -> dict:
    """Run one replay; returns the report (also written under ``options.out``)."""
    gt = options.load_ground_truth()
    if options.cameras is not None:
        report = _replay_cameras(options, gt)
    else:
        report = _replay_camera(options, gt)
    caveat = model_caveat(ModelBundle.load(options.model, verify_hashes=False))
    if caveat:
        report["model"]["caveat"] = caveat
    report["host"] = host_info()
    report["modes"] = report.pop("modes")  # after the host, as the report has always listed it
    if any(block.get("partial") for block in report["modes"].values()):
        report["partial"] = True
    if options.output_bag is not None:
        report["output_bag"] = str(options.output_bag)
    if options.plots:
        from .depth3d import depth3d_plots
        from .plots import write_plots

        report["plots"] = write_plots(report, options.out)
        report["plots"] += depth3d_plots(report, options.out)
    write_report(report, options.out)
    return report


def _replay_camera(options: ReplayOptions, gt: GroundTruth | None) -> dict:
    """The one-camera replay's report: bag, model and modes."""
    modes: dict[str, dict] = {}
    with ImageBag(options.bag, options.topic) as bag:
        scope = []
        if gt is not None:
            cameras = gt.cameras
            gt = gt.for_topic(bag.topic)
            if len(cameras) > 1:
                scope.append(
                    f"scored against the GT of {bag.topic} only (the GT holds the cameras "
                    f"{', '.join(cameras)}; --cameras all replays and scores every camera)"
                )
        if bag.msgtype == bags.IMAGE:  # a mono camera: said once, before the figures it explains
            first = next(iter(bag.frames()), None)
            msg = first and bags.typestore().deserialize_cdr(first.raw, first.msgtype)
            note = mono_note(str(msg.encoding)) if msg else None
            scope += [note] if note else []
        report = {
            "created": now_iso(),
            "command": options.command_line,
            "bag": bag_block(bag, options.bag),
        }
        if options.mode in ("realtime", "both"):
            check_3d_messages(bag, options.output_bag, options.gt_3d)
        if options.mode in ("lockstep", "both"):
            with lockstep_pipeline(options) as pipeline:
                report["model"] = pipeline.describe()
                print(starting_text(report["model"]), file=sys.stderr, flush=True)
                modes["lockstep"] = run_lockstep(
                    bag,
                    pipeline,
                    gt,
                    options.match,
                    options.output_bag if options.mode == "lockstep" else None,
                    options.out / "overlays",
                    options.overlays,
                    options.max_frames,
                    options.warmup,
                    options.progress,
                    gt_3d=options.gt_3d,
                )
        if options.mode in ("realtime", "both") and not modes.get("lockstep", {}).get("partial"):
            block, model = run_realtime(
                bag,
                options.model,
                options.backend,
                rate=options.rate,
                domain_id=options.domain_id,
                output_bag=options.output_bag,
                max_frames=options.max_frames,
                warmup=options.warmup,
                progress=options.progress,
                gt=gt,
                match=options.match,
                node_params=node_parameters(options),
                gt_3d=options.gt_3d,
            )
            report.setdefault("model", model)
            if bag.damage:
                block["notes"].insert(0, bag.damage)
            modes["realtime"] = block
        if bag.damage:
            report["bag"]["damage"] = bag.damage
    for block in modes.values():
        block["notes"][:0] = scope
    report["warnings"] = scope
    report["modes"] = modes
    return report


def _replay_cameras(options: ReplayOptions, gt: GroundTruth | None) -> dict:
    """The multi-camera replay of ``options`` (its ``cameras``): bag, model and modes, each mode
    through fresh node(s); the output bag is written by the realtime mode."""
    cameras = open_cameras(options.bag, options.cameras or "all", options.max_frames)
    try:
        if gt is not None:
            attach_ground_truth(cameras, gt, options.match)
        report: dict = {
            "created": now_iso(),
            "command": options.command_line,
            "bag": cameras_bag_block(cameras, options.bag),
        }
        modes: dict[str, dict] = {}
        pacings = PACINGS if options.mode == "both" else (options.mode,)
        for pacing in pacings:
            block, facts = run_cameras(
                cameras,
                options.model,
                options.backend,
                pacing=pacing,
                rate=options.rate,
                batched=options.batched,
                output_bag=options.output_bag if pacing == pacings[-1] else None,
                warmup=options.warmup,
                progress=options.progress,
                domain_id=options.domain_id,
                node_params=node_parameters(options),
                match=options.match,
                gt_3d=options.gt_3d,
            )
            report.setdefault("model", facts)
            damage = [c.bag.damage for c in cameras if c.bag.damage]
            block["notes"][:0] = damage
            modes[pacing] = block
            if block.get("partial"):  # Ctrl-C: no further mode
                break
        if damage:
            report["bag"]["damage"] = "; ".join(damage)
    finally:
        for camera in cameras:
            camera.bag.close()
    report["modes"] = modes
    return report


def postprocess_overrides(options: ReplayOptions) -> dict[str, float | int]:
    """The PostprocessOptions fields a replay sets (``--score-threshold``, ``--min-area``)."""
    given = {"score_threshold": options.score_threshold, "min_area": options.min_area}
    return {name: value for name, value in given.items() if value is not None}


def node_parameters(options: ReplayOptions) -> dict[str, str] | None:
    """``postprocess_overrides`` as the node's parameters (None: all the defaults)."""
    return {k: repr(v) for k, v in postprocess_overrides(options).items()} or None


def run(args: argparse.Namespace) -> int:
    """CLI entry: replay, write the report, print the summary."""
    options = options_from_args(args)
    from ..cli import warn

    for note in options.ignored_options():
        warn("replay", note)
    if options.output_bag is not None and options.output_bag.exists():
        print(f"replacing the earlier output bag {options.output_bag}", file=sys.stderr)
    report = replay(options)
    print(summary_text(report))
    for warning in report.get("warnings", []):
        warn("replay", warning)
    if report["bag"].get("damage"):
        print(f"warning: {report['bag']['damage']}")
    print(f"report: {options.out / 'report.md'}, {options.out / 'report.json'}")
    for overlay in report["modes"].get("lockstep", {}).get("overlays", []):
        print(f"overlay: {overlay}")
    for plot in report.get("plots", []):
        print(f"plot: {options.out / plot}")
    if options.output_bag is not None:
        print(f"output bag: {options.output_bag}")
    if report.get("partial"):
        raise InterruptedJobError(f"{options.out / 'report.md'} is marked partial: {PARTIAL_NOTE}")
    return replay_status(report, options.max_refused_pct)


def replay_status(report: dict, max_refused_pct: float = 10.0) -> int:
    """The exit status of a finished replay: 1 (``EXIT_FAILED``) when a mode processed no
    frame, since no figure of it measures the model, or skipped a frame it could not decode
    or was refused (every good frame is still scored), or, in realtime, when the node refused
    more than ``max_refused_pct`` of the frames sent; the notes and warnings say why."""
    from ..cli import EXIT_FAILED, EXIT_OK, warn

    modes = report["modes"]
    empty = [mode for mode, block in modes.items() if block["frames"]["processed"] == 0]
    for mode in empty:
        reasons = "; ".join(modes[mode]["notes"]) or "no reason was reported"
        warn("replay", f"{mode}: no frame was processed, no figure measures the model: {reasons}")
    skipping = [mode for mode, block in modes.items() if block["frames"].get("skipped")]
    for mode in skipping:
        frames = [str(s["index"]) for s in modes[mode]["skipped_frames"]]
        warn("replay", f"{mode}: skipped frames {', '.join(frames)} (report.json "
                       "skipped_frames says why); every other frame was scored")  # fmt: skip
    refusing = []
    for mode, block in modes.items():
        refused, sent = block["frames"].get("node_refused", 0), block["frames"].get("sent", 0)
        if sent and 100.0 * refused / sent > max_refused_pct:
            refusing.append(mode)
            warn("replay", f"{mode}: the node refused {refused} of {sent} frames, over "
                           f"--max-refused-pct {max_refused_pct:g}: its figures measure only "
                           f"the {block['frames']['processed']} it answered; "
                           + "; ".join(block["notes"][:1]))  # fmt: skip
    return EXIT_FAILED if empty or skipping or refusing else EXIT_OK
