"""Exit statuses of every command (cli.py): 0 done, 1 an input failed (named), 2 usage, 3 a
regression, 130 Ctrl-C after writing what was done. Each command meets a missing or mismatched
input; the long jobs (replay, train) are interrupted as a subprocess with SIGINT once working,
and must leave their partial report / checkpoint behind."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from compactinst_ros.cli import COMMANDS, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, main
from compactinst_ros.train.synthetic import generate_bag

#: (arguments after the command with {tmp} for a scratch folder, exit status, words of the
#: error) per command: a missing input is 1, a flag that cannot work is 2
MISMATCHED = {
    "info": (["nonesuch"], EXIT_USAGE, "unknown model config"),
    "export": (["compactinst_demo", "--size", "100x100", "--out", "{tmp}/e"], EXIT_USAGE, "32"),
    "bundle-hash": (["{tmp}/none"], EXIT_FAILED, "does not exist"),
    "infer": (["--model", "{tmp}/none", "{tmp}/x.png"], EXIT_FAILED, "does not exist"),
    "synth": (["--out", "{tmp}/s", "--num", "0"], EXIT_USAGE, "at least one image"),
    "train": (["compactinst_demo", "--data", "{tmp}", "--out", "{tmp}/o"], EXIT_FAILED, "synth"),
    "import-fastinst": (["{tmp}/none.pth", "--out", "{tmp}/f"], EXIT_FAILED, "does not exist"),
    "build-engine": (["{tmp}/none"], EXIT_FAILED, "does not exist"),
    "engine-report": (["{tmp}/none"], EXIT_FAILED, "does not exist"),
    "fp16-check": (["{tmp}/none"], EXIT_FAILED, "does not exist"),
    "quantize": (["{tmp}/none", "--data", "{tmp}"], EXIT_FAILED, "does not exist"),
    "derive": (["{tmp}/none"], EXIT_FAILED, "does not exist"),
    "evaluate": (["models/default", "--data", "{tmp}"], EXIT_FAILED, "lacks instances.json"),
    "precision-report": (["{tmp}/none", "--data", "{tmp}"], EXIT_FAILED, "does not exist"),
    "ros": (["--timeout", "0.5", "param-get", "/nobody", "x"], EXIT_FAILED, "no node answers"),
    "replay": (["{tmp}/missing"], EXIT_FAILED, "does not exist"),
    "replay-fleet": (["{tmp}/missing.yaml"], EXIT_FAILED, "does not exist"),
    "bench": (["--backends", "tpu"], EXIT_USAGE, "unknown backend"),
    "costmodel": (["--sizes", "tiny"], EXIT_USAGE, "must be HxW"),
    "roofline": (["{tmp}/none.csv"], EXIT_FAILED, "does not exist"),
}


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_every_command_is_covered() -> None:
    assert set(MISMATCHED) == set(COMMANDS)


@pytest.mark.parametrize("command", sorted(MISMATCHED))
def test_a_missing_or_mismatched_input_exits_1_and_a_bad_flag_2(command, tmp_path) -> None:
    if command == "ros":
        pytest.importorskip("rclpy")
        from ros_domains import next_domain

        extra = ["--domain-id", str(next_domain())]
    elif command == "replay-fleet":
        pytest.importorskip("ray")  # without it the command refuses (2) before reading
        extra = []
    else:
        extra = []
    args, expected, words = MISMATCHED[command]
    argv = [command, *extra, *(a.format(tmp=tmp_path) for a in args)]
    code, _, err = run_cli(argv)
    assert code == expected, err
    assert words in err and "Traceback" not in err, err


def test_argparse_usage_errors_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["replay"])  # no bag
    assert exc.value.code == EXIT_USAGE
    assert main([]) == EXIT_USAGE


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A three-camera synthetic bag (12 frames per camera) and its camera-named GT."""
    out = tmp_path_factory.mktemp("rig")
    generate_bag(out, 12, 0, 128, 192, ("cam0", "cam1", "cam2"), progress=False)
    return out


def test_one_camera_replay_of_a_rig_scores_against_its_own_camera_s_gt(rig, tmp_path) -> None:
    """All cameras share the stamps: without the GT's camera the frames of cam0 met the GT
    images of cam2 and scored AP 0.0."""
    argv = ["replay", str(rig / "bag"), "--gt-instances", str(rig / "instances.json")]
    argv += ["--out", str(tmp_path), "--max-frames", "3", "--quiet", "--no-plots"]
    code, out, err = run_cli(argv)
    assert code == 0, err
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["bag"]["topic"] == "/cam0/image_raw"
    assert report["modes"]["lockstep"]["accuracy"]["mask_ap"]["AP"] > 30, out
    assert "scored against the GT of /cam0/image_raw only" in err
    assert "--cameras all" in err


def test_gt_of_several_cameras_without_their_names_is_refused(rig, tmp_path) -> None:
    gt = json.loads((rig / "instances.json").read_text())
    for entry in gt["images"]:
        del entry["camera"]
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    argv = ["replay", str(rig / "bag"), "--gt-instances", str(tmp_path / "gt.json")]
    code, _, err = run_cli([*argv, "--out", str(tmp_path / "o"), "--quiet", "--no-plots"])
    assert code == EXIT_FAILED
    assert "GT images share the stamps of 12 frames" in err and "--cameras" in err


def test_gt_of_another_drive_matches_no_frame(tmp_path) -> None:
    """synth --bag starts each seed's bag at its own time, so one drive's GT cannot score
    another drive's frames."""
    for seed in (0, 1):
        generate_bag(tmp_path / f"drive{seed}", 2, seed, 128, 192, progress=False)
    argv = ["replay", str(tmp_path / "drive1" / "bag"), "--out", str(tmp_path / "o"), "--quiet"]
    code, _, err = run_cli([*argv, "--gt-instances", str(tmp_path / "drive0" / "instances.json")])
    assert code == EXIT_FAILED
    assert "ground truth matches no frame of the bag" in err and "belongs to" in err


def test_replay_of_no_frames_is_a_usage_error(rig, tmp_path) -> None:
    code, _, err = run_cli(["replay", str(rig / "bag"), "--max-frames", "0"])
    assert code == EXIT_USAGE and "--max-frames 0 replays no frame" in err


def interrupt(argv: list[str], working: str, timeout: float = 120) -> tuple[int, str]:
    """Run ``compactinst argv`` as a subprocess, send SIGINT once its stderr shows ``working``
    (it has started working), and return (exit status, its stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "compactinst_ros.cli", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    timer = threading.Timer(timeout, proc.kill)  # a hang fails the test, never the suite
    timer.start()
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if working in line:
                proc.send_signal(signal.SIGINT)
                break
        lines += proc.stderr.readlines()
        code = proc.wait()
    finally:
        timer.cancel()
    return code, "".join(lines)


def test_interrupted_replay_writes_a_partial_report_and_exits_130(rig, tmp_path) -> None:
    out = tmp_path / "out"
    argv = ["replay", str(rig / "bag"), "--gt-instances", str(rig / "instances.json")]
    code, err = interrupt([*argv, "--out", str(out), "--no-plots"], "lockstep: 1/12")
    assert code == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "interrupted" in err
    report = json.loads((out / "report.json").read_text())
    frames = report["modes"]["lockstep"]["frames"]
    assert report["partial"] is True and 1 <= frames["processed"] < 12, frames
    assert frames["unread"] == 12 - frames["processed"]
    assert "**partial**" in (out / "report.md").read_text()


def test_interrupted_train_saves_its_last_state_and_exits_130(tmp_path) -> None:
    from compactinst_ros.model.checkpoint import load_checkpoint
    from compactinst_ros.train.synthetic import generate

    generate(tmp_path / "data", 4, seed=0, height=128, width=160, progress=False)
    run = tmp_path / "run"
    argv = ["train", "compactinst_demo", "--data", str(tmp_path / "data"), "--out", str(run)]
    argv += ["--steps", "500", "--batch-size", "2", "--crop", "128x160", "--threads", "1"]
    argv += ["--num-points", "256", "--log-every", "1"]  # a checkpoint only every 500 steps
    started = time.monotonic()
    code, err = interrupt(argv, "step 1/500")
    assert code == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "rerun with --resume" in err
    saved = load_checkpoint(run / "last.pt")
    assert 1 <= saved.step < 500 and saved.optimizer is not None
    assert time.monotonic() - started < 120


def test_a_replay_mode_that_processed_no_frame_exits_1_with_its_reasons(capsys) -> None:
    from compactinst_ros.eval.replay import replay_status

    refused = "the node refused 30 frame(s) (not the queue's drops): encoding 'yuv9' unknown"
    block = {"frames": {"sent": 30, "processed": 0}, "notes": [refused]}
    assert replay_status({"modes": {"realtime": block}}) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "realtime: no frame was processed" in err and "encoding 'yuv9' unknown" in err
    block["frames"]["processed"] = 1
    assert replay_status({"modes": {"realtime": block}}) == 0


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["infer", "--threads", "-3", "x.png"], "--threads -3 must be >= 1"),
        (["infer", "--min-area", "-1", "x.png"], "min_area=-1 must be in [0, "),
        (["replay", "x.mcap", "--min-area", "-5"], "--min-area -5 must be >= 0"),
        (["train", "compactinst_demo", "--data", "{tmp}", "--out", "{tmp}/o", "--lr", "-1"],
         "--lr -1.0 must be > 0"),
    ],
)  # fmt: skip
def test_a_value_out_of_range_is_a_usage_error(argv, words, tmp_path) -> None:
    code, _, err = run_cli([a.format(tmp=tmp_path) for a in argv])
    assert code == EXIT_USAGE, err
    assert words in err and "Traceback" not in err, err
