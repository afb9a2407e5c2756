"""``compactinst replay-fleet MANIFEST``: lockstep replay of many drives on Ray, merged exactly.

Each Ray actor loads one Pipeline and replays drive after drive with it (an actor per GPU where
the cluster has GPUs, else per ``--cpus-per-worker`` CPUs). A drive's result carries its
sufficient statistics, so the fleet figures are those of one replay over every frame
(``merge.py``). Finished drives are cached under ``OUT/drives`` keyed by bag, ground truth, model
and options: a rerun replays only the drives that are missing. Ray is optional (extra
``fleet``); nothing on the vehicle imports this module.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, DataError, InterruptedJobError
from .replay import ReplayOptions
from .replay import add_arguments as replay_arguments

if TYPE_CHECKING:
    from ..pipeline import Pipeline

#: replay flags that replay-fleet takes as they are (those replay has; all go into the cache key)
SHARED_FLAGS = (
    "backend", "precision", "match", "score_threshold", "min_area", "max_frames", "warmup"
)  # fmt: skip
#: ReplayOptions fields that do not change a drive's lockstep result (left out of the cache key)
UNKEYED = {"out", "output_bag", "overlays", "plots", "progress", "command_line", "mode", "rate"}
#: Ray retries of a lost worker: actor restarts, and re-runs of the drive it was replaying
MAX_RESTARTS = 2
MAX_TASK_RETRIES = 2
ADDRESS_HELP = "local (default: Ray on this machine), auto (the running cluster) or ray://HOST:PORT"


@dataclass(frozen=True)
class Drive:
    """One manifest entry: a bag, its image topic and ground truth, and free-form tags."""

    name: str
    bag: Path
    topic: str | None = None
    gt_instances: Path | None = None
    gt_panoptic: Path | None = None
    gt_panoptic_dir: Path | None = None
    gt_3d: Path | None = None
    tags: dict[str, str] = field(default_factory=dict)


_DRIVE_KEYS = {f.name for f in fields(Drive)}
_PATH_KEYS = ("bag", "gt_instances", "gt_panoptic", "gt_panoptic_dir", "gt_3d")


def load_manifest(path: str | Path) -> list[Drive]:
    """Drives of a YAML or JSON manifest (a list, or ``{drives: [...]}``); relative paths are
    relative to the manifest's folder. DataError names the entry and key that are wrong."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())  # JSON is YAML
    except FileNotFoundError:
        raise DataError(f"manifest '{path}' does not exist") from None
    except yaml.YAMLError as exc:
        raise DataError(f"manifest '{path}' is not valid YAML or JSON ({exc})") from None
    entries = data.get("drives") if isinstance(data, dict) else data
    if not isinstance(entries, list) or not entries:
        raise DataError(f"manifest '{path}' lists no drives; give a list of {{bag: PATH, ...}}")
    drives: list[Drive] = []
    for n, entry in enumerate(entries):
        if not isinstance(entry, dict) or "bag" not in entry:
            raise DataError(f"manifest '{path}' drive {n}: each drive needs at least 'bag: PATH'")
        unknown = set(entry) - _DRIVE_KEYS
        if unknown:
            raise DataError(
                f"manifest '{path}' drive {n}: unknown keys {sorted(unknown)}; "
                f"use {sorted(_DRIVE_KEYS)}"
            )
        values: dict[str, Any] = dict(entry)
        for key in _PATH_KEYS:
            if values.get(key) is not None:
                values[key] = path.parent / str(values[key])
        values.setdefault("name", values["bag"].name)
        values["tags"] = {str(k): str(v) for k, v in (values.get("tags") or {}).items()}
        drives.append(Drive(**values))
    names = [d.name for d in drives]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DataError(f"manifest '{path}': drive names {twice} repeat; give each a unique name")
    return drives


def drive_options(template: ReplayOptions, drive: Drive) -> ReplayOptions:
    """The lockstep ReplayOptions of one drive (``template``'s model and flags)."""
    return replace(
        template,
        bag=drive.bag,
        topic=drive.topic,
        gt_instances=drive.gt_instances,
        gt_panoptic=drive.gt_panoptic,
        gt_panoptic_dir=drive.gt_panoptic_dir,
        gt_3d=drive.gt_3d,
        mode="lockstep",
        output_bag=None,
        overlays=0,
        plots=False,
        progress=False,
    )


def _file_identity(path: Path) -> list:
    """[name, size, mtime_ns] of each file of ``path`` (file or folder): cheap on a TB archive."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    out = []
    for file in files:
        try:
            st = file.stat()
        except OSError:
            continue  # missing: the drive fails when replayed, and is not cached
        name = str(file.relative_to(path)) if path.is_dir() else file.name
        out.append([name, st.st_size, st.st_mtime_ns])
    return out


def cache_key(options: ReplayOptions, model_fingerprint: str) -> str:
    """Key of a drive's cached result: its files (size + mtime), the model and every option that
    changes the lockstep result."""
    keyed: dict[str, Any] = {"model": model_fingerprint}
    for f in fields(options):
        if f.name in UNKEYED or f.name == "model":
            continue
        value = getattr(options, f.name)
        keyed[f.name] = _file_identity(value) if isinstance(value, Path) else value
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:20]


def replay_drive(pipeline: Pipeline | object, drive: Drive, options: ReplayOptions) -> dict:
    """Replay one drive in lockstep with a loaded ``pipeline`` (tracks start afresh); any
    failure, such as a corrupt bag, is recorded in the result instead of raised."""
    from ..tracking import InstanceTracker
    from .bags import ImageBag
    from .replay import bag_block, run_lockstep

    result: dict[str, Any] = {"name": drive.name, "bag": str(drive.bag), "tags": drive.tags}
    start = time.perf_counter()
    try:
        tracker = getattr(pipeline, "tracker", None)
        if tracker is not None:
            pipeline.tracker = InstanceTracker(tracker.options, enabled=tracker.enabled)
        gt = options.load_ground_truth()
        with ImageBag(options.bag, options.topic) as bag:
            block = run_lockstep(
                bag,
                pipeline,
                gt.for_topic(bag.topic) if gt is not None else None,
                options.match,
                max_frames=options.max_frames,
                warmup=options.warmup,
                progress=False,
                statistics=True,
                gt_3d=options.gt_3d,
            )
            result["bag_info"] = bag_block(bag, options.bag)
    except Exception as exc:  # a drive's failure of any kind must not stop the fleet
        result.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    else:
        if block.get("partial"):  # Ctrl-C reached the worker: never cached as the drive's result
            result.update(status="failed", error="interrupted (Ctrl-C) while replaying")
        elif not block["frames"]["processed"]:
            why = "; ".join(block["notes"]) or "the bag has no frame"
            result.update(status="failed", error=f"no frame was processed: {why}")
        else:
            result.update(status="ok", lockstep=block)
    result["wall_s"] = round(time.perf_counter() - start, 3)
    result["worker"] = f"{os.uname().nodename}:{os.getpid()}"
    return result


class DriveWorker:
    """Ray actor body: one Pipeline loaded at start, reused for every drive sent to it."""

    def __init__(self, template: ReplayOptions, threads: int | None) -> None:
        from .replay import lockstep_pipeline

        overrides = {"threads": threads} if threads else {}
        self.pipeline = lockstep_pipeline(template, **overrides)

    def describe(self) -> dict:
        """The model and backend as the report records them."""
        return self.pipeline.describe()

    def replay(self, drive: Drive, options: ReplayOptions) -> dict:
        """Replay one drive (see ``replay_drive``)."""
        return replay_drive(self.pipeline, drive, options)


def import_ray() -> Any:
    """The ray module, or a ConfigError naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "replay-fleet runs on Ray, which is not installed; "
            "pip install 'compactinst_ros[fleet]' (or pip install ray)"
        ) from None
    return ray


def connect(ray: Any, address: str, quiet: bool = False) -> bool:
    """Join or start the Ray cluster at ``address``; True when this call started it. ``quiet``
    holds back what Ray's start prints (its token-authentication line comes from native code,
    on file descriptor 2), unless the start fails."""
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address == "local":
        options = {"include_dashboard": False, "_node_ip_address": "127.0.0.1"}
    elif address == "auto" or address.startswith("ray://"):
        options = {}
    else:
        raise ConfigError(f"--address {address} is unknown; use {ADDRESS_HELP}")
    with held_stderr(quiet):
        ray.init(address=address, log_to_driver=False, configure_logging=False, **options)
    return True


@contextlib.contextmanager
def held_stderr(hold: bool) -> Iterator[None]:
    """With ``hold``, what the block writes to file descriptor 2 (native code included) is
    dropped when it succeeds and written out when it raises; without, nothing changes."""
    if not hold:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            held.seek(0)
            sys.stderr.write(held.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class FleetProgress:
    """Drives done and frames/s on stderr: one redrawn line on a terminal, else a line a drive."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.enabled = total, enabled
        self.tty = enabled and sys.stderr.isatty()
        self.start = time.monotonic()
        self.done = self.frames = self.failed = 0

    def add(self, result: dict) -> None:
        """Count one finished drive and show the totals."""
        self.done += 1
        self.failed += result["status"] != "ok"
        self.frames += result.get("lockstep", {}).get("frames", {}).get("processed", 0)
        if not self.enabled:
            return
        rate = self.frames / max(time.monotonic() - self.start, 1e-9)
        line = (
            f"fleet: {self.done}/{self.total} drives ({self.failed} failed), {self.frames} frames, "
            f"{rate:.1f} frames/s; last {result['name']} {result['status']}"
        )
        print(f"\r{line}" if self.tty else line, end="" if self.tty else "\n", file=sys.stderr)

    def close(self) -> None:
        """End the redrawn line."""
        if self.tty:
            print(file=sys.stderr, flush=True)


@dataclass(frozen=True)
class FleetOptions:
    """One fleet replay: the manifest, a ReplayOptions template with the model and shared flags,
    where to write, the Ray address, worker sizing and the baseline comparison."""

    manifest: Path
    template: ReplayOptions
    out: Path = Path("out/fleet")
    address: str = "local"
    cpus_per_worker: int = 2
    baseline: Path | None = None
    regression_threshold: float = 1.0  # AP / PQ points
    fail_on_regression: bool = False
    plots: bool = True
    progress: bool = True
    command_line: str = ""

    def __post_init__(self) -> None:
        if self.cpus_per_worker < 1:
            raise ConfigError(f"--cpus-per-worker {self.cpus_per_worker} must be >= 1")
        if self.regression_threshold < 0:
            raise ConfigError("--regression-threshold must be >= 0 (AP/PQ points)")


def worker_plan(ray: Any, options: FleetOptions, drives: int) -> tuple[int, dict, int | None]:
    """(actors, their resource options, ORT threads) for the cluster: one actor per GPU where
    there are GPUs and the backend can use them, else one per ``cpus_per_worker`` CPUs."""
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    if gpus and options.template.backend != "onnxruntime":
        return min(gpus, drives), {"num_gpus": 1, "num_cpus": 1}, None
    cpus = options.cpus_per_worker
    count = max(1, int(resources.get("CPU", 1)) // cpus)
    return min(count, drives), {"num_cpus": cpus}, cpus


def _read_cache(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # a cache file cut by an interruption: replay the drive again


def _write_cache(path: Path, result: dict) -> None:
    """Write atomically, so an interrupted run never leaves a half-written result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path)


def replay_fleet(options: FleetOptions) -> dict:
    """Replay every drive of the manifest (cached drives are read back); returns the report."""
    from ..bundle import ModelBundle
    from .fleet_report import fleet_report

    ray = import_ray()
    drives = load_manifest(options.manifest)
    fingerprint = ModelBundle.load(options.template.model).fingerprint
    per_drive = [drive_options(options.template, d) for d in drives]
    paths = [options.out / "drives" / f"{cache_key(o, fingerprint)}.json" for o in per_drive]
    results: list[dict | None] = [_read_cache(p) for p in paths]
    for drive, result in zip(drives, results, strict=True):
        if result is not None:  # name and tags as the manifest gives them now
            result.update(name=drive.name, tags=drive.tags, source="cache")
    todo = [i for i, r in enumerate(results) if r is None]
    model: dict = next((r["model"] for r in results if r is not None), {})
    workers = 0
    interrupted = False
    start = time.perf_counter()
    if todo:
        started = connect(ray, options.address, quiet=not options.progress)
        try:
            workers, model = _run_on_ray(ray, options, drives, per_drive, todo, results, paths)
        except KeyboardInterrupt:  # Ctrl-C: the report of the drives done (they are cached)
            interrupted = True
            model = next((r["model"] for r in results if r is not None), model)
        finally:
            if started:
                ray.shutdown()
    wall = time.perf_counter() - start
    run: dict[str, Any] = {"replayed": len(todo), "cached": len(drives) - len(todo)}
    run.update(workers=workers, wall_s=round(wall, 3))
    if interrupted:
        missing = [d.name for d, r in zip(drives, results, strict=True) if r is None]
        if len(missing) == len(drives):
            raise InterruptedJobError("no drive had finished; nothing was written")
        run.update(partial=True, not_replayed=missing, replayed=len(todo) - len(missing))
    report = fleet_report(
        [r for r in results if r is not None],
        model,
        run,
        out=options.out,
        command=options.command_line,
        manifest=options.manifest,
        baseline=options.baseline,
        regression_threshold=options.regression_threshold,
        plots=options.plots,
    )
    return report


def _run_on_ray(
    ray: Any,
    options: FleetOptions,
    drives: Sequence[Drive],
    per_drive: Sequence[ReplayOptions],
    todo: list[int],
    results: list[dict | None],
    paths: Sequence[Path],
) -> tuple[int, dict]:
    """Replay the ``todo`` drives on actors, the next drive going to the first idle actor;
    returns (actors, the model as they loaded it)."""
    count, resources, threads = worker_plan(ray, options, len(todo))
    actor = ray.remote(DriveWorker).options(
        max_restarts=MAX_RESTARTS, max_task_retries=MAX_TASK_RETRIES, **resources
    )
    actors = [actor.remote(options.template, threads) for _ in range(count)]
    model = ray.get(actors[0].describe.remote())
    queue, idle, pending = list(todo), list(actors), {}
    progress = FleetProgress(len(todo), options.progress)
    try:
        while queue or pending:
            while idle and queue:
                worker, i = idle.pop(), queue.pop(0)
                pending[worker.replay.remote(drives[i], per_drive[i])] = (i, worker)
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i, worker = pending.pop(ref)
                idle.append(worker)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as exc:  # Ray's retries spent: it kept dying
                    drive = drives[i]
                    result = {"name": drive.name, "bag": str(drive.bag), "tags": drive.tags}
                    result.update(status="failed", error=f"worker lost: {exc}")
                result["model"] = model
                if result["status"] == "ok":
                    _write_cache(paths[i], result)
                result["source"] = "replayed"
                results[i] = result
                progress.add(result)
    finally:
        progress.close()
    return count, model


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst replay-fleet`` (the shared replay flags copied from replay's)."""
    parser.add_argument("manifest", type=Path, help="YAML/JSON list of drives (bag, GT, tags)")
    parser.add_argument("--model", type=Path, help="model bundle folder (default: models/default)")
    parser.add_argument("--out", type=Path, default=Path("out/fleet"), help="report + cache folder")
    parser.add_argument("--address", default="local", help=ADDRESS_HELP)
    parser.add_argument(
        "--cpus-per-worker", type=int, default=2, help="CPUs per actor without GPUs (default 2)"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="an earlier fleet report.json to compare to (default: no comparison)",
    )
    parser.add_argument(
        "--regression-threshold",
        type=float,
        default=1.0,
        help="AP or PQ drop (points) that flags a drive as regressed (default 1.0)",
    )
    parser.add_argument(
        "--fail-on-regression", action="store_true", help="exit 3 when a drive regressed"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the matplotlib plots")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    replay_parser = argparse.ArgumentParser(add_help=False)
    replay_arguments(replay_parser)
    for action in replay_parser._actions:
        if action.dest in SHARED_FLAGS:
            parser._add_action(action)


def options_from_args(args: argparse.Namespace) -> FleetOptions:
    """The FleetOptions of parsed ``compactinst replay-fleet`` flags."""
    from .replay import options_from_args as replay_options

    # replay's own resolution of the shared flags (default model, validation) on a stand-in bag
    flags = {**vars(args), "bag": Path("."), "output_bag": None, "no_plots": True, "quiet": True}
    template = replay_options(argparse.Namespace(**flags))
    return FleetOptions(
        manifest=args.manifest,
        template=template,
        out=args.out,
        address=args.address,
        cpus_per_worker=args.cpus_per_worker,
        baseline=args.baseline,
        regression_threshold=args.regression_threshold,
        fail_on_regression=args.fail_on_regression,
        plots=not args.no_plots,
        progress=not args.quiet,
        command_line="compactinst replay-fleet " + " ".join(sys.argv[2:]),
    )


def run(args: argparse.Namespace) -> int:
    """CLI entry: replay the fleet, write the report, print the summary and every file written;
    exit 3 on a regression (``--fail-on-regression``), else 1 when a drive failed (named)."""
    from ..cli import EXIT_FAILED, EXIT_OK, EXIT_REGRESSION
    from .fleet_report import summary_text

    options = options_from_args(args)
    report = replay_fleet(options)
    print(summary_text(report))
    print(f"report: {options.out / 'report.md'}, {options.out / 'report.json'}")
    for plot in report.get("plots", []):
        print(f"plot: {options.out / plot}")
    print(f"drive cache: {options.out / 'drives'}")
    if report["run"].get("partial"):
        raise InterruptedJobError(
            f"{options.out / 'report.md'} is marked partial; the drives done are cached: rerun "
            "the same command to replay only the others"
        )
    if report.get("baseline", {}).get("regressed") and options.fail_on_regression:
        return EXIT_REGRESSION
    return EXIT_FAILED if report["summary"]["failed"] else EXIT_OK
