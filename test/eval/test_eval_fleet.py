"""``compactinst replay-fleet`` on a local 2-CPU Ray cluster (started once for the module): three
tiny drives and a corrupt one, the merged figures against one single-process replay of all
their frames, the cache after an interrupted run, and the baseline comparison."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from eval_helpers import make_scenes, scene_bag, write_gt

from compactinst_ros.bundle import default_bundle_path
from compactinst_ros.cli import main
from compactinst_ros.eval.fleet import FleetOptions, worker_plan
from compactinst_ros.eval.replay import ReplayOptions, replay
from compactinst_ros.eval.report import latency_stats

pytest.importorskip("pycocotools")
pytest.importorskip("rosbags")
ray = pytest.importorskip("ray")

#: (name, frames, tags) of the good drives; each has its own scenes and stamps
DRIVES = (
    ("d0", 4, {"site": "farm", "weather": "sun"}),
    ("d1", 3, {"site": "farm", "weather": "rain"}),
    ("d2", 4, {"site": "road", "weather": "sun"}),
)
WARMUP = 1
#: The tests of whole fleet runs (two runs of the manifest with a worker killed, a baseline run,
#: a Ctrl-C run: 80-140 s of Ray workers on 2 cores) run in make test-full; make test keeps Ray's
#: worker plan and a run whose every drive fails, and test_eval_fleet_parts.py the merging.
FULL_FLEET = pytest.mark.full


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray instance on loopback for the module (its start is the slow part), with one
    logical GPU for the worker plan (the replays run on onnxruntime, which takes CPUs only)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    start = time.perf_counter()
    ray.init(
        num_cpus=2,
        num_gpus=1,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
    )
    print(f"ray start {time.perf_counter() - start:.1f} s")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def fleet_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Drive bags + GT, a corrupt bag, the manifests, and all good frames as one bag + GT."""
    root = tmp_path_factory.mktemp("fleet")
    entries, everything = [], []
    for k, (name, frames, tags) in enumerate(DRIVES):
        scenes = make_scenes(n=frames, seed=k)
        scenes = [replace(s, stamp_ns=s.stamp_ns + k * 10**10) for s in scenes]
        everything += scenes
        scene_bag(scenes, root / name / "bag", "mcap")
        write_gt(scenes, root / name / "gt")
        gt = {
            "gt_instances": f"{name}/gt/instances.json",
            "gt_panoptic": f"{name}/gt/panoptic.json",
            "gt_panoptic_dir": f"{name}/gt/pan",
        }
        entries.append({"name": name, "bag": f"{name}/bag", **gt, "tags": tags})
    (root / "broken").mkdir()
    (root / "broken" / "broken.mcap").write_bytes(b"\x89MCAP0\r\n" + b"\xff" * 600)
    entries.append({"name": "broken", "bag": "broken/broken.mcap", "tags": {"site": "road"}})
    (root / "manifest.json").write_text(json.dumps({"drives": entries}))
    (root / "first.yaml").write_text(json.dumps([entries[0], entries[3]]))  # JSON is YAML
    scene_bag(everything, root / "all" / "bag", "mcap")
    write_gt(everything, root / "all" / "gt")
    return root


def fleet(manifest: Path, out: Path, *extra: str) -> tuple[int, dict, str]:
    """(exit status, report.json, progress lines) of replay-fleet run through the CLI."""
    args = ["replay-fleet", str(manifest), "--model", str(default_bundle_path()), "--out", str(out)]
    args += ["--backend", "onnxruntime", "--cpus-per-worker", "1", "--warmup", str(WARMUP), *extra]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, json.loads((out / "report.json").read_text()), err.getvalue()


def kill_a_replaying_worker(killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the first Ray worker seen replaying a drive (Ray titles the process by its task),
    as a lost node would; its pid goes into ``killed``."""
    while not stop.is_set() and not killed:
        for proc in Path("/proc").iterdir():
            try:
                title = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if proc.name.isdigit() and title.startswith(b"ray::DriveWorker.replay"):
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
                return
        stop.wait(0.02)


@pytest.fixture(scope="module")
def runs(ray_cluster, fleet_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """An interrupted run (only d0 and the corrupt drive), then the whole manifest, same OUT,
    with one worker killed while it replays a drive."""
    out = tmp_path_factory.mktemp("fleet_out")
    start = time.perf_counter()
    one_actor = ("--cpus-per-worker", "2")  # the threads are not part of the cache key
    rc_first, first, _ = fleet(fleet_data / "first.yaml", out, "--no-plots", *one_actor)
    (cached,) = (out / "drives").iterdir()
    mtime = cached.stat().st_mtime_ns
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=kill_a_replaying_worker, args=(killed, stop))
    killer.start()
    try:
        rc, full, progress = fleet(fleet_data / "manifest.json", out)
    finally:
        stop.set()
        killer.join()
    print(f"two fleet runs {time.perf_counter() - start:.1f} s, killed {killed}")
    return {"out": out, "first": first, "full": full, "rc": (rc_first, rc), "progress": progress,
            "cached": (cached, mtime), "killed": killed}  # fmt: skip


@FULL_FLEET
def test_rerun_after_an_interruption_replays_only_the_missing_drives(runs) -> None:
    assert runs["rc"] == (1, 1)  # the corrupt drive failed in both: exit 1, named
    assert runs["first"]["run"] == {**runs["first"]["run"], "replayed": 2, "cached": 0}
    full = runs["full"]
    assert full["run"]["replayed"] == 3 and full["run"]["cached"] == 1  # d1, d2, broken; d0
    source = {row["name"]: row["source"] for row in full["drives"]}
    assert source == {"d0": "cache", "d1": "replayed", "d2": "replayed", "broken": "replayed"}
    cached, mtime = runs["cached"]
    assert cached.stat().st_mtime_ns == mtime  # d0's result was read back, not rewritten
    assert len(list((runs["out"] / "drives").glob("*.json"))) == 3  # failures are not cached
    lines = runs["progress"].splitlines()
    assert lines[-1].startswith("fleet: 3/3 drives (1 failed), 7 frames,"), lines
    assert "frames/s" in lines[-1]


@FULL_FLEET
def test_a_lost_worker_s_drive_is_retried_by_ray(runs) -> None:
    (pid,) = runs["killed"]
    rows = {row["name"]: row for row in runs["full"]["drives"]}
    assert all(rows[name]["status"] == "ok" for name in ("d0", "d1", "d2"))
    workers = {rows[name]["worker"] for name in ("d1", "d2")}
    assert all(not w.endswith(f":{pid}") for w in workers)  # finished by a restarted actor


@FULL_FLEET
def test_a_corrupt_bag_fails_only_its_drive(runs) -> None:
    full = runs["full"]
    assert full["summary"] | {"drives": 4, "covered": 3, "failed": 1} == full["summary"]
    worst = full["drives"][0]
    assert worst["name"] == "broken" and worst["status"] == "failed"
    assert "DataError" in worst["error"] and "broken.mcap" in worst["error"]
    ok = full["drives"][1:]
    assert [r["AP"] for r in ok] == sorted(r["AP"] for r in ok)  # worst drives first
    road = next(t for t in full["tags"] if (t["tag"], t["value"]) == ("site", "road"))
    d2 = next(r for r in ok if r["name"] == "d2")
    assert (road["drives"], road["covered"], road["AP"], road["PQ"]) == (2, 1, d2["AP"], d2["PQ"])
    md = (runs["out"] / "report.md").read_text()
    assert "covers 3 of 4 drives (1 failed)" in md and "| broken | site=road | failed: " in md
    assert sorted(full["plots"]) == ["ap_by_tag.png", "latency_cdf_by_tag.png"]
    assert all((runs["out"] / p).read_bytes()[:4] == b"\x89PNG" for p in full["plots"])


@FULL_FLEET
def test_fleet_figures_equal_one_replay_over_all_frames(runs, fleet_data, tmp_path) -> None:
    gt = fleet_data / "all" / "gt"
    options = ReplayOptions(
        bag=fleet_data / "all" / "bag",
        model=default_bundle_path(),
        backend="onnxruntime",
        gt_instances=gt / "instances.json",
        gt_panoptic=gt / "panoptic.json",
        gt_panoptic_dir=gt / "pan",
        out=tmp_path,
        warmup=WARMUP,
        overlays=0,
        plots=False,
        progress=False,
    )
    single = replay(options)["modes"]["lockstep"]["accuracy"]
    merged = runs["full"]["fleet"]["accuracy"]
    assert merged["frames_evaluated"] == single["frames_evaluated"] == 11
    assert merged["mask_ap"]["AP"] > 5  # a real model: the figures are not all zero
    for key in ("mask_ap", "panoptic", "semantic"):
        assert merged[key] == single[key], key  # exactly, not approximately


@FULL_FLEET
def test_fleet_latency_is_over_the_merged_samples(runs) -> None:
    # in the manifest's order, as the fleet merges them: a mean over the same samples in
    # another order can differ in its last bit, and so in its third decimal
    cached = [json.loads(f.read_text()) for f in (runs["out"] / "drives").glob("*.json")]
    by_name = {result["name"]: result for result in cached}
    samples: dict[str, list[float]] = {}
    for name in (name for name, _, _ in DRIVES if name in by_name):
        block = by_name[name]["lockstep"]
        for stage, values in block["samples"].items():
            samples.setdefault(stage, []).extend(values[WARMUP:])
    latency = runs["full"]["fleet"]["latency"]
    assert latency == latency_stats(samples, 0)
    assert latency["inference"]["count"] == 11 - 3 * WARMUP
    p99 = float(np.percentile(samples["inference"], 99))
    assert runs["full"]["summary"]["p99"] == round(p99, 3)


@FULL_FLEET
def test_baseline_flags_a_worse_model(runs, fleet_data, tmp_path) -> None:
    baseline = runs["out"] / "report.json"
    good = fleet_data / "good.json"  # the good drives alone: all cached, so no actor starts
    good.write_text(
        json.dumps(json.loads((fleet_data / "manifest.json").read_text())["drives"][:3])
    )
    same = ("--baseline", str(baseline), "--fail-on-regression", "--quiet", "--no-plots")
    rc, report, _ = fleet(good, runs["out"], *same)  # the same figures
    assert rc == 0 and report["run"] == {**report["run"], "cached": 3, "replayed": 0}
    assert report["baseline"]["regressed"] == []
    assert {r["dAP"] for r in report["baseline"]["drives"]} == {0.0}
    # a worse model on d0 and the corrupt drive: no d0 detection scores above 0.99
    worse = ("--score-threshold", "0.99", "--cpus-per-worker", "2", *same)  # one actor
    rc, report, _ = fleet(fleet_data / "first.yaml", tmp_path / "worse", *worse)
    assert rc == 3
    assert report["baseline"]["regressed"] == ["d0"]  # broken failed in the baseline too
    (d0,) = (r for r in report["baseline"]["drives"] if r["name"] == "d0")
    assert d0["dAP"] < -5 and d0["why"].startswith("AP -")
    assert "| d0 | " in (tmp_path / "worse" / "report.md").read_text()
    assert "**yes** (AP -" in (tmp_path / "worse" / "report.md").read_text()


def test_without_ray_the_command_names_the_extra(fleet_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    args = ["replay-fleet", str(fleet_data / "manifest.json"), "--out", str(tmp_path)]
    assert main([*args, "--model", str(default_bundle_path())]) == 2
    assert "pip install 'compactinst_ros[fleet]'" in capsys.readouterr().err


def test_an_actor_per_gpu_else_one_per_cpus_per_worker(ray_cluster, fleet_data) -> None:
    template = ReplayOptions(bag=Path("."), model=default_bundle_path())  # backend auto
    options = FleetOptions(fleet_data / "manifest.json", template, cpus_per_worker=1)
    assert worker_plan(ray, options, 5) == (1, {"num_gpus": 1, "num_cpus": 1}, None)
    cpu = replace(options, template=replace(template, backend="onnxruntime"))
    assert worker_plan(ray, cpu, 5) == (2, {"num_cpus": 1}, 1)
    assert worker_plan(ray, cpu, 1) == (1, {"num_cpus": 1}, 1)  # never more than drives
    assert worker_plan(ray, replace(cpu, cpus_per_worker=2), 5) == (1, {"num_cpus": 2}, 2)


def test_a_fleet_whose_every_drive_failed_exits_1_naming_them(ray_cluster, fleet_data, tmp_path):
    only_broken = fleet_data / "broken.json"
    entries = json.loads((fleet_data / "manifest.json").read_text())["drives"]
    other_gt = {**entries[0], "name": "d1_with_d0_gt", "bag": entries[1]["bag"]}  # stamps differ
    only_broken.write_text(json.dumps([entries[3], other_gt]))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc, report, _ = fleet(only_broken, tmp_path, "--quiet", "--no-plots")
    assert rc == 1 and report["summary"] | {"covered": 0, "failed": 2} == report["summary"]
    printed = out.getvalue()
    assert "failed: broken: DataError" in printed and "failed: d1_with_d0_gt: " in printed
    assert "ground truth matches no frame" in printed
    for written in ("report.md", "report.json", "drives"):
        assert str(tmp_path / written) in printed, printed


class InterruptOn(io.StringIO):
    """stderr that presses Ctrl-C (KeyboardInterrupt in the main thread) once ``marker`` is
    written: the job is interrupted exactly when it has done that much."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    def write(self, text: str) -> int:
        written = super().write(text)
        if self.marker and self.marker in self.getvalue():
            self.marker = ""
            import _thread

            _thread.interrupt_main()
        return written


@FULL_FLEET
def test_ctrl_c_writes_a_partial_report_of_the_drives_done_and_exits_130(
    ray_cluster, fleet_data, tmp_path
) -> None:
    args = ["replay-fleet", str(fleet_data / "manifest.json"), "--model",
            str(default_bundle_path()), "--out", str(tmp_path), "--backend", "onnxruntime",
            "--cpus-per-worker", "2", "--no-plots"]  # fmt: skip
    err = InterruptOn("fleet: 1/4 drives")
    with contextlib.redirect_stderr(err):
        rc = main(args)
    assert rc == 130, err.getvalue()
    assert "interrupted: " in err.getvalue() and "rerun the same command" in err.getvalue()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["run"]["partial"] is True and report["summary"]["drives"] >= 1
    assert len(report["run"]["not_replayed"]) + report["summary"]["drives"] == 4
    assert report["run"]["not_replayed"], "interrupted after the first of four drives"
    assert "**partial**" in (tmp_path / "report.md").read_text()
