"""Multi-camera replay: a bag with several camera topics through the batched node (one node for
every camera, ``image_topics``/``camera_names``) or one node per camera, over real ROS topics.

Each camera is published on ``/compactinst_replay/<camera>/image`` and its outputs come back on
``<namespace>/compactinst/<camera>/...`` (the batched node's ``~/<camera>/``; a per-camera node is
named ``<camera>`` in ``<namespace>/compactinst``, so both layouts are the same topics). Pacing:

* ``lockstep``: a round publishes frame i of every camera, then waits until each camera's
  latency record (and, with ground truth, its scored outputs) for that frame came back, matched by
  header stamp and camera, before the next round; a camera that does not answer within
  ``round_timeout`` s has that frame counted as dropped;
* ``realtime``: every camera's frames at their recorded log times / ``rate``, interleaved.

The report block gives the totals (accuracy merged exactly over every camera's frames, latency
over every camera's samples, frames and rates summed) and ``cameras``: one block per camera as
a single-camera realtime replay reports it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import dds_env
from ..errors import BackendError, ConfigError, DataError
from ..progress import Progress
from ..ros.diagnostics import batch_status_name
from .bags import (
    OUTPUT_NS,
    TRANSPORTS,
    BagFrame,
    ImageBag,
    bag_hash,
    camera_name,
    is_depth_topic,
    open_output_bag,
)
from .groundtruth import GroundTruth
from .merge import merge_latency
from .metrics import merge_statistics
from .realtime import (
    INPUT_ROOT,
    RASTERS,
    NodeProcess,
    Recorder,
    ThreeDFeed,
    ThreeDInputs,
    ThreeDScoring,
    accuracy_note,
    bundle_facts,
    log_ending,
    node_command,
    quiet_limit,
    replay_namespace,
    ros_environment,
    scored_statistics,
    summarise,
    three_d_inputs,
    three_d_scoring,
    use_in_this_process,
)

PACINGS = ("lockstep", "realtime")
#: where the player publishes camera ``{}``'s frames and camera_info
CAMERA_INPUT = "/compactinst_replay/{}/image"
CAMERA_INFO_INPUT = "/compactinst_replay/{}/camera_info"


@dataclass
class Camera:
    """One camera of the replay: its name, its bag topic (opened), frames and ground truth."""

    name: str
    bag: ImageBag
    frames: list[BagFrame]
    gt: GroundTruth | None = None


def open_cameras(
    path: str | Path, spec: str, max_frames: int | None = None
) -> list[Camera]:
    """The cameras of ``spec`` (``all``: every image topic of the bag; else comma-separated
    topics), each with its frames; DataError where names collide or the kinds are mixed."""
    with ImageBag(path) as probe:
        available = [t for t in probe.image_topics if not is_depth_topic(t)]  # not segmented
    topics = available if spec.strip() == "all" else [t.strip() for t in spec.split(",")]
    names = [camera_name(t) for t in topics]
    if len(set(names)) != len(names):
        pairs = ", ".join(f"{t} -> {n}" for t, n in zip(topics, names, strict=True))
        raise DataError(
            f"the camera topics give the same camera name twice ({pairs}); name each camera's "
            "topics in its own namespace (/<camera>/image_raw) or pick topics with --cameras"
        )
    cameras: list[Camera] = []
    try:
        for name, topic in zip(names, topics, strict=True):
            bag = ImageBag(path, topic)
            count = bag.count if max_frames is None else min(bag.count, max_frames)
            frames = [f for f, _ in zip(bag.frames(), range(count), strict=False)]
            cameras.append(Camera(name, bag, frames))
        kinds = {c.bag.msgtype for c in cameras}
        if len(kinds) > 1:
            raise DataError(
                f"the cameras mix {' and '.join(sorted(kinds))} topics; the node takes one "
                "input_transport for all cameras: replay the raw and the compressed ones apart"
            )
    except DataError:
        for camera in cameras:
            camera.bag.close()
        raise
    return cameras


def attach_ground_truth(cameras: Sequence[Camera], gt: GroundTruth, match: str) -> None:
    """Give every camera the GT images that name it, matched among its own frames; DataError
    when no camera has any."""
    for camera in cameras:
        view = gt.for_camera(camera.name, camera.bag.topic)
        if view.images:
            view.match([f.stamp_ns for f in camera.frames], match)
            camera.gt = view
    if all(c.gt is None for c in cameras):
        named = sorted({str(e.get("camera")) for e in gt.images.values()})
        raise DataError(
            f"no GT image names a camera of the replay (GT cameras: {', '.join(named)}; "
            f"cameras: {', '.join(f'{c.name} ({c.bag.topic})' for c in cameras)}); set each "
            'GT image\'s "camera" to the camera name or its image topic'
        )


def node_processes(
    cameras: Sequence[Camera],
    params: dict[str, Any],
    batched: bool,
    env: dict[str, str],
    namespace: str,
    log_dir: Path,
    three_d: dict[str, ThreeDInputs] | None = None,
) -> list[NodeProcess]:
    """The batched node for every camera, or one node per camera, all with ``params`` and the
    same output topics (``<namespace>/compactinst/<camera>/``); ``three_d``: each camera's 3-D
    inputs, as ``depth_topics``/``cloud_topics`` of the batched node or a per-camera node's
    ``depth_topic``/``cloud_topic``."""
    infos = {c.name: bool(c.bag.camera_info_topic) for c in cameras}
    own = {c.name: (three_d or {}).get(c.name, ThreeDInputs()).params for c in cameras}
    lists = {}
    for key in ("depth_topic", "cloud_topic"):
        if any(key in p for p in own.values()):
            lists[key + "s"] = [own[c.name].get(key, "") for c in cameras]
    transports = {p["depth_transport"] for p in own.values() if "depth_transport" in p}
    if transports:
        lists["depth_transport"] = sorted(transports)[0]  # one for every camera's depth
    if batched:
        node_params = {
            **params,
            **lists,
            "image_topics": [CAMERA_INPUT.format(c.name) for c in cameras],
            "camera_names": [c.name for c in cameras],
            **(
                {
                    "camera_info_topics": [
                        CAMERA_INFO_INPUT.format(c.name) if infos[c.name] else "" for c in cameras
                    ]
                }
                if any(infos.values())
                else {}
            ),
        }
        command = [*node_command(node_params), "-r", f"__ns:={namespace}"]
        return [NodeProcess(command, env, log_dir / "node_batched.log")]
    nodes = []
    for camera in cameras:
        node_params = {
            **params,
            **own[camera.name],
            "image_topic": CAMERA_INPUT.format(camera.name),
            **(
                {"camera_info_topic": CAMERA_INFO_INPUT.format(camera.name)}
                if infos[camera.name]
                else {}
            ),
        }
        command = [
            *node_command(node_params),
            "-r",
            f"__ns:={namespace}{OUTPUT_NS}",
            "-r",
            f"__node:={camera.name}",
        ]
        nodes.append(NodeProcess(command, env, log_dir / f"node_{camera.name}.log"))
    return nodes


def _alive(nodes: Sequence[NodeProcess], when: str) -> None:
    for node in nodes:
        if node.proc.poll() is not None:
            raise BackendError(
                f"compactinst_node exited with code {node.proc.returncode} {when}; its log "
                f"({node.log_path}) ends with:\n{node.tail()}"
            )


def answered(recorder: Recorder, stamp: int) -> bool:
    """Whether the frame sent with ``stamp`` is back: its latency record and, where the
    recorder keeps outputs for scoring, every kept output."""
    with recorder.lock:
        if stamp not in recorder.records:
            return False
        return recorder.kept_names <= set(recorder.kept.get(stamp, ()))


def send(recorder: Recorder, frame: BagFrame, feed: ThreeDFeed | None) -> int:
    """Publish ``frame`` stamped now, its camera's 3-D inputs first, moved by the same offset
    as the frame's stamp (so they pair with it in the node); returns the frame's stamp."""
    stamp = time.time_ns()
    if feed is not None:
        offset = stamp - frame.stamp_ns
        feed.send(recorder, frame, lambda recorded: recorded + offset)
    return recorder.publish(frame, stamp)


def _play_lockstep(
    cameras: Sequence[Camera],
    recorders: dict[str, Recorder],
    nodes: Sequence[NodeProcess],
    bar: Progress,
    round_timeout: float,
    feeds: dict[str, ThreeDFeed],
) -> int:
    """Round i: frame i of every camera, then wait for each camera's answer; returns the
    frames that timed out."""
    rounds = max(len(c.frames) for c in cameras)
    late = sent = 0
    for i in range(rounds):
        waiting = {
            c.name: send(recorders[c.name], c.frames[i], feeds.get(c.name))
            for c in cameras
            if i < len(c.frames)
        }
        sent += len(waiting)
        deadline = time.monotonic() + round_timeout
        while waiting and time.monotonic() < deadline:
            waiting = {n: s for n, s in waiting.items() if not answered(recorders[n], s)}
            if waiting:
                _alive(nodes, "during the replay")
                time.sleep(0.002)
        late += len(waiting)
        bar.update(sent, f"round {i + 1}/{rounds}")
    return late


def _play_realtime(
    cameras: Sequence[Camera],
    recorders: dict[str, Recorder],
    rate: float,
    bar: Progress,
    start: float,
    feeds: dict[str, ThreeDFeed],
) -> None:
    """Every camera's frames at their recorded log times / ``rate``, interleaved."""
    order = sorted(
        ((f.bag_time_ns, k, c.name, f) for k, c in enumerate(cameras) for f in c.frames),
        key=lambda item: item[:2],
    )
    first = order[0][0] if order else 0
    for sent, (t_ns, _, name, frame) in enumerate(order, start=1):
        delay = start + (t_ns - first) / 1e9 / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        send(recorders[name], frame, feeds.get(name))
        bar.update(sent)


def _drain(recorders: dict[str, Recorder], total: int, drain_s: float) -> None:
    """Wait until every sent frame is back or nothing came back for ``drain_s`` (before the
    first output: ``quiet_limit``'s longer wait for nodes still busy with their first frames)."""
    last, quiet_since = -1, time.monotonic()
    while time.monotonic() - quiet_since < quiet_limit(drain_s, last):
        done = sum(r.processed() for r in recorders.values())
        if done >= total:
            return
        if done != last:
            last, quiet_since = done, time.monotonic()
        time.sleep(0.05)


def batch_report(reports: Sequence[dict[str, str]]) -> dict | None:
    """The batched node's rounds over the replay from its batch status reports: totals of the
    last report, the mean frames per round over them all, and the window's wait (the mean of
    the periods' means, the largest maximum); None without reports."""
    periods = [r for r in reports if float(r.get("rounds_per_s", 0)) > 0]
    if not reports:
        return None
    last = reports[-1]
    rounds, frames = int(last["rounds"]), int(last["frames_batched"])
    return {
        "cameras": int(last["cameras"]),
        "rounds": rounds,
        "frames_batched": frames,
        "padded_slots": int(last["padded_slots"]),
        "frames_per_round_mean": round(frames / rounds, 3) if rounds else None,
        "window_wait_mean_ms": (
            round(sum(float(r["window_wait_mean_ms"]) for r in periods) / len(periods), 3)
            if periods
            else None
        ),
        "window_wait_max_ms": max((float(r["window_wait_max_ms"]) for r in periods), default=None),
    }


def total_block(blocks: dict[str, dict], statistics: list[dict] | None) -> dict:
    """The totals over the cameras' blocks: accuracy merged exactly (``statistics``), latency
    over every camera's samples after its warm-up, frame counts and rates summed."""
    latency, samples = merge_latency(list(blocks.values()))
    parts = list(blocks.values())
    frames: dict[str, Any] = {
        key: sum(b["frames"][key] for b in parts) for key in ("sent", "processed", "dropped")
    }
    frames["drop_pct"] = (
        round(100.0 * frames["dropped"] / frames["sent"], 2) if frames["sent"] else None
    )
    node_dropped = [b["frames"].get("node_dropped") for b in parts]
    frames["node_dropped"] = None if None in node_dropped else sum(node_dropped)

    def rate_sum(key: str) -> float | None:
        values = [b["throughput"].get(key) for b in parts]
        return None if None in values else round(sum(values), 2)

    return {
        "accuracy": merge_statistics(statistics) if statistics else None,
        "warmup_frames": max(b["warmup_frames"] for b in parts),
        "latency": latency,
        "frames": frames,
        "throughput": {
            "wall_s": max(b["throughput"]["wall_s"] for b in parts),
            "input_fps": rate_sum("input_fps"),
            "output_fps": rate_sum("output_fps"),
            "target_input_fps": rate_sum("target_input_fps"),
        },
        "samples": {k: [round(v, 4) for v in vals] for k, vals in samples.items()},
        "notes": [
            f"totals over {len(parts)} cameras ({', '.join(blocks)}): latency over every "
            "camera's frames, each camera's first frames excluded as warm-up; accuracy over "
            "every camera's matched frames"
        ],
        "cameras": blocks,
    }


def run_cameras(
    cameras: Sequence[Camera],
    model: str | Path,
    backend: str = "auto",
    pacing: str = "realtime",
    rate: float = 1.0,
    batched: bool = True,
    output_bag: Path | None = None,
    warmup: int = 3,
    progress: bool = True,
    domain_id: int | None = None,
    log_dir: Path | None = None,
    ready_timeout: float = 120.0,
    drain_s: float = 2.0,
    round_timeout: float = 30.0,
    node_params: dict[str, Any] | None = None,
    outputs: tuple[str, ...] = RASTERS,
    match: str = "auto",
    on_ready: Callable[[list[int]], None] | None = None,
    gt_3d: Path | None = None,
) -> tuple[dict, dict]:
    """Replay ``cameras`` to fresh node subprocesses; returns (report block, model facts).

    ``on_ready`` is called with the nodes' process ids once they subscribe (a benchmark samples
    their memory from then on). Cameras with ground truth (``attach_ground_truth``) are scored.
    Each camera's depth or LiDAR is sent to the node beside its frames (the bag's /tf and
    /tf_static with the first camera's); with ``gt_3d`` each camera's published 3-D is scored
    against objects3d.json, per camera and merged over all (``depth3d``).
    """
    if pacing not in PACINGS:
        raise ConfigError(f"pacing '{pacing}' is unknown; choose one of {', '.join(PACINGS)}")
    if rate <= 0:
        raise ConfigError(f"rate {rate} must be positive (1.0 = recorded rate)")
    if len(cameras) < 1 or not all(c.frames for c in cameras):
        raise DataError("every camera of a multi-camera replay needs at least one frame")
    # one camera is one node either way, and a one-camera node keeps the single-camera layout
    # (~/...); started as a per-camera node, its outputs are where every camera's are
    batched = batched and len(cameras) > 1
    domain_id = dds_env.private_domain() if domain_id is None else domain_id
    msgtype = cameras[0].bag.msgtype
    env = ros_environment(domain_id)
    use_in_this_process(env)
    params = {
        "model": str(Path(model).resolve()),
        "backend": backend,
        "input_transport": TRANSPORTS[msgtype],
        "input_reliability": "reliable",
        **(node_params or {}),
    }
    log_dir = log_dir or Path(os.environ.get("TMPDIR", "/tmp")) / f"compactinst_replay_{domain_id}"
    writer = open_output_bag(output_bag) if output_bag else None
    namespace = replay_namespace()
    three_d = {
        c.name: three_d_inputs(c.bag, f"{INPUT_ROOT}/{c.name}", transforms=c is cameras[0])
        if c.bag.camera_info_topic
        else ThreeDInputs()
        for c in cameras
    }
    scoring: dict[str, ThreeDScoring] = {}
    if gt_3d is not None:
        scoring = {c.name: three_d_scoring(c.bag, gt_3d) for c in cameras if three_d[c.name].routes}
        params = {**next(iter(scoring.values())).params, **params} if scoring else params
    feeds = {c.name: ThreeDFeed(c.bag, three_d[c.name]) for c in cameras if three_d[c.name].routes}
    nodes = node_processes(cameras, params, batched, env, namespace, log_dir, three_d)
    recorders: dict[str, Recorder] = {}
    lock = threading.Lock()
    keep = any(c.gt is not None for c in cameras)
    try:
        for camera in cameras:
            recorders[camera.name] = Recorder(
                domain_id,
                msgtype,
                writer,
                outputs,
                camera.bag.camera_infos(),
                node_name=f"{namespace}{OUTPUT_NS}/{camera.name}",
                keep=keep,
                input_topic=CAMERA_INPUT.format(camera.name),
                info_topic=CAMERA_INFO_INPUT.format(camera.name),
                bag_ns=f"{OUTPUT_NS}/{camera.name}",
                lock=lock,
                player=f"compactinst_replay_{camera.name}",
                bag_topics=(camera.bag.topic, camera.bag.camera_info_topic),
                three_d=three_d[camera.name],
                keep_3d=camera.name in scoring,
                extra_status=(
                    batch_status_name(f"{namespace}{OUTPUT_NS}")
                    if batched and camera is cameras[0]
                    else None
                ),
            )
        deadline = time.monotonic() + ready_timeout
        while not all(r.node_ready() for r in recorders.values()):
            _alive(nodes, "before it loaded the model and subscribed")
            if time.monotonic() > deadline:
                raise BackendError(
                    f"timed out after {ready_timeout:.0f} s waiting for the node(s) to subscribe "
                    f"to every camera; see the node logs in {log_dir}"
                )
            time.sleep(0.05)
        if on_ready is not None:
            on_ready([n.proc.pid for n in nodes])
        time.sleep(0.5)  # let the node see our output subscriptions too
        total = sum(len(c.frames) for c in cameras)
        bar = Progress(total, f"{pacing} {len(cameras)} cameras", progress)
        start = time.monotonic()
        late = 0
        interrupted = False
        try:
            if pacing == "lockstep":
                late = _play_lockstep(cameras, recorders, nodes, bar, round_timeout, feeds)
            else:
                _play_realtime(cameras, recorders, rate, bar, start, feeds)
        except KeyboardInterrupt:  # Ctrl-C: report what was sent so far, marked partial
            interrupted = True
        sent_at = time.monotonic()
        bar.close()
        if interrupted:  # a terminal's Ctrl-C reaches the nodes too: no more outputs to wait for
            drain_s = min(drain_s, 0.5)
        else:
            _alive(nodes, "during the replay")
        _drain(recorders, total, drain_s)
        if not interrupted:
            recorders[cameras[0].name].await_report()
        blocks: dict[str, dict] = {}
        statistics: list[dict] = []
        facts: dict = {}
        for camera in cameras:
            recorder = recorders[camera.name]
            block, found = summarise(recorder, camera.frames, start, sent_at, warmup, rate)
            facts = facts or found
            if pacing == "lockstep":
                block["notes"][0] = (
                    "lockstep: each round sent one frame per camera and waited for every "
                    f"camera's outputs of it (up to {round_timeout:g} s)"
                )
            if camera.gt is not None:
                stats = scored_statistics(recorder, camera.gt, camera.frames, match)
                statistics.append(stats)
                block["accuracy"] = merge_statistics([stats])
                block["notes"].append(accuracy_note(block))
            if camera.name in scoring:
                block.update(scoring[camera.name].blocks(recorder))
            blocks[camera.name] = {"topic": camera.bag.topic, **block}
    finally:
        batch = batch_report(recorders[cameras[0].name].extra) if recorders else None
        for recorder in recorders.values():
            recorder.close()
        codes = [node.stop() for node in nodes]
        if writer is not None:
            writer.close()
    result = total_block(blocks, statistics)
    parts = [b["depth3d_statistics"] for b in blocks.values() if b.get("depth3d_statistics")]
    if parts:  # every camera's pairs in one evaluation, as replay-fleet merges drives
        from .depth3d import merge
        from .depth3d import summarise as summarise_3d

        result["depth3d"] = summarise_3d(merge(parts))
    if result["accuracy"] is not None:
        result["notes"].append(accuracy_note(result))
    if not result["frames"]["processed"] and not interrupted:
        result["notes"] += [f"the node processed no frame; {log_ending(n)}" for n in nodes]
        result["notes"] += [n for b in blocks.values() for n in b["notes"] if "node refused" in n]
    if interrupted:
        result["partial"] = True
        result["notes"].append(
            f"interrupted (Ctrl-C) after {result['frames']['sent']} of {total} frames"
        )
    if late:
        result["notes"].append(f"{late} frames got no answer within {round_timeout:g} s")
    if batch is not None:
        result["batch"] = batch
    result.update(
        pacing=pacing,
        batched=batched,
        nodes=len(nodes),
        node_exit_codes=codes,
        node_logs=[str(n.log_path) for n in nodes],
    )
    if "model_fingerprint" not in facts:  # no /diagnostics came: describe from the bundle
        facts = bundle_facts(model, backend)
    return result, facts


def cameras_bag_block(cameras: Sequence[Camera], path: str | Path) -> dict:
    """The report's bag block of a multi-camera replay: the whole bag and each camera's topic."""
    return {
        "path": str(path),
        "hash": bag_hash(path),
        "topic": ", ".join(c.bag.topic for c in cameras),
        "msgtype": cameras[0].bag.msgtype,
        "image_topics": cameras[0].bag.image_topics,
        "frames": sum(c.bag.count for c in cameras),
        "duration_s": round(max(c.bag.duration_s for c in cameras), 3),
        "cameras": {c.name: {"topic": c.bag.topic, "frames": c.bag.count} for c in cameras},
    }
