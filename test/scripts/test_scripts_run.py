"""Every script in scripts/ that no other test runs, run as a subprocess with tiny arguments: the
test fails when a script stops running or stops printing its table (a benchmark that reads a
renamed latency name or calls a removed method otherwise breaks unnoticed). Timings are not
judged, only that each row is there with numbers in it. The ROS scripts get their own
ROS_DOMAIN_ID and the loopback environment of the ROS tests (test/ros/ros_harness.py)."""

from __future__ import annotations

import ast
import hashlib
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "test" / "ros"))

#: a decimal number as the scripts print it
NUMBER = r"-?\d+(?:\.\d+)?"


def run_script(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    """stdout of ``scripts/<name>`` run on this checkout; fails the test on a non-zero exit."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
    command = [sys.executable, str(REPO / "scripts" / name), *args]
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def table_rows(out: str, first_cell: str) -> list[list[str]]:
    """Cells of the Markdown table rows of ``out`` whose first cell is ``first_cell``."""
    rows = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("|")]
    return [[c.strip() for c in row] for row in rows if row[0].strip() == first_cell]


def printed_dict(out: str, prefix: str) -> dict:
    """The dict literal a script printed after ``prefix`` on one line."""
    line = next((line for line in out.splitlines() if line.startswith(prefix)), None)
    assert line is not None, f"no line starting {prefix!r} in:\n{out}"
    return ast.literal_eval(line.split(": ", 1)[1])


@pytest.fixture
def ros_script_env() -> dict[str, str]:
    """Environment of a ROS script: DDS on loopback, a ROS_DOMAIN_ID no other test uses."""
    pytest.importorskip("rclpy")
    from ros_domains import next_domain
    from ros_harness import ros_env

    return ros_env(next_domain())


def test_bench_cpu_prints_every_path_the_ratio_and_the_targets(tmp_path: Path) -> None:
    plot = tmp_path / "stages.png"
    paths = ("onnxruntime:fp32", "openvino:int8")
    out = run_script(
        "bench_cpu.py", "--sizes", "96x64", "1920x1080", "--frames", "2", "--scenes", "1",
        "--paths", *paths, "--plot", str(plot), "--report-only",
    )  # fmt: skip
    assert "all frames: post-processing bit-identical to the reference on every path" in out
    header = next(line for line in out.splitlines() if line.startswith("| camera | path"))
    assert "| messages | around | model | frame | around / model | FPS |" in header, header
    for size in ("96x64", "1920x1080"):
        rows = table_rows(out, size)
        assert [row[1] for row in rows] == list(paths), out
        for row in rows:
            spreads = [re.fullmatch(rf"({NUMBER}) \({NUMBER}-{NUMBER}\)", c) for c in row[2:10]]
            assert all(spreads), row
            stage = dict(zip(("preprocess", "encoder", "decoder", "postprocess", "messages"),
                             (float(m.group(1)) for m in spreads), strict=False))  # fmt: skip
            assert stage["messages"] > 0 and stage["postprocess"] > 0, row
            assert float(row[10]) > 0 and float(row[11]) > 0, row  # the ratio and FPS
    # 1080p rasters: uint16 instance, int32 panoptic and uint8 semantic ids, 7 bytes a pixel
    megabytes = re.search(r"1920x1080: \d+ instances a frame \(median\), ([\d.]+) MB", out)
    assert megabytes and float(megabytes.group(1)) >= round(1920 * 1080 * 7 / 1e6, 1), out
    ratio_row = table_rows(out, "1920x1080")[0]
    targets = out.split("targets at 1920x1080", 1)[1]
    assert re.search(
        rf"onnxruntime:fp32 around / model {ratio_row[10]} <= 0.35: (met|not met)", targets
    ), targets
    assert re.search(rf"openvino:int8 {NUMBER} FPS >= 20: (met|not met)", targets), targets
    assert f"plot: {plot}" in out and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_postprocess_loops_prints_every_variant_and_both_ratios() -> None:
    pytest.importorskip("numba")
    out = run_script(
        "bench_postprocess_loops.py", "--sizes", "96x64", "--rounds", "3", "--scenes", "1"
    )
    assert "every frame: every variant bit-identical to the reference" in out, out
    (row,) = table_rows(out, "96x64")
    assert all(re.fullmatch(rf"{NUMBER} \({NUMBER}-{NUMBER}\)", cell) for cell in row[1:4]), row
    assert all(re.fullmatch(rf"{NUMBER}x", cell) for cell in row[4:6]), row


def test_bench_postprocess_cpu_prints_every_output_per_size() -> None:
    out = run_script("bench_postprocess_cpu.py", "--sizes", "64x128", "96x160", "--repeats", "1")
    assert out.startswith("numpy ") and "median of 1 runs" in out.splitlines()[0]
    for size, masks in (("64x128", "8x16"), ("96x160", "12x20")):
        heading = f"\n{size}: Q=100, masks {masks}, "
        assert heading in out, out
        block = out.split(heading, 1)[1].split("\n\n", 1)[0]
        lines = block.splitlines()
        assert len(lines) == 6, block  # counts, the dense baseline, four outputs
        assert re.fullmatch(r"\d+ instances, \d+ panoptic segments", lines[0]), block
        assert re.fullmatch(
            rf"  dense: 100 masks \+ sigmoid  wall +{NUMBER} ms  cpu +{NUMBER} ms", lines[1]
        ), block
        for line, name in zip(
            lines[2:], ("instance", "panoptic", "semantic", "all three"), strict=True
        ):
            assert line.split("reference wall")[0].strip() == name, block
            assert re.search(rf"\|  fast wall +{NUMBER} ms cpu +{NUMBER} ms", line), line


@pytest.mark.full  # ~27 s of CPU at the paper configs; the other scripts' runs stay in make test
def test_bench_ort_stages_checks_both_configs_and_prints_their_ratio(paper_bundles) -> None:
    """On the session's exported bundles (the script's export is ``bench.models.random_bundle``,
    run by test_bench_latency); the script loads, checks and times them."""
    for config in ("compactinst_r18", "fastinst_r18_d3"):
        paper_bundles(config)
    height, width = paper_bundles.size
    out = run_script(
        "bench_ort_stages.py", "--size", f"{height}x{width}", "--classes",
        str(paper_bundles.num_classes), "--runs", "1", "--threads", "1", "--bundles",
        str(paper_bundles.root),
    )  # fmt: skip
    assert "exporting" not in out, out  # the session's bundles were found
    assert "| stage | compactinst_r18 median | fastinst_r18_d3 median | ratio |" in out
    for stage in ("preprocess", "encoder", "decoder", "postprocess", "total"):
        (row,) = table_rows(out, stage)
        assert len(row) == 7 and all(re.fullmatch(NUMBER, c) for c in row[1:]), row


def test_bench_colour_outputs_times_both_phases(ros_script_env: dict[str, str]) -> None:
    out = run_script(
        "bench_colour_outputs.py", "--size", "64x96", "--frames", "2", "--settle", "0.5",
        env=ros_script_env,
    )  # fmt: skip
    assert "64x96, median of 1 frames, node stages in ms" in out
    for phase in ("not subscribed", "subscribed"):
        pattern = rf"colour images {phase}: +publish {NUMBER}  inference {NUMBER}"
        assert re.search(pattern, out), out
    for render in ("panoptic_color", "semantic_color"):
        assert re.search(rf"{render} alone: {NUMBER} ms", out), out


def test_bench_idle_and_camera_info_measures_both(ros_script_env: dict[str, str]) -> None:
    out = run_script(
        "bench_idle_and_camera_info.py", "--size", "64x96", "--rate", "5", "--seconds", "0.5",
        "--settle", "0.5", env=ros_script_env,
    )  # fmt: skip
    idle = printed_dict(out, f"idle node ({REPO}), 64x96 bgr8 at 5 Hz")
    assert idle["frames"] >= 2 and idle["cpu_ms_per_frame"] >= 0.0, idle
    relay = printed_dict(out, "camera_info relay, median us per frame")
    cases = ("exact", "within_tolerance", "unmatched")
    assert set(relay) == {*cases, *(f"{case}, subscribed" for case in cases)}, relay
    assert all(us > 0.0 for us in relay.values()), relay


def test_bench_node_overhead_prints_a_row_per_size(ros_script_env: dict[str, str]) -> None:
    out = run_script(
        "bench_node_overhead.py", "--sizes", "64x96,96x128", "--frames", "1", "--warmup", "1",
        "--threads", "1", env=ros_script_env,
    )  # fmt: skip
    assert "node overhead vs bare rclpy, median of 1 frames" in out
    for size in ("  64x96 ", "  96x128"):
        row = next((line for line in out.splitlines() if line.startswith(size)), None)
        assert row is not None, out
        assert all(re.fullmatch(rf"{NUMBER}x?", c) for c in row.split()[1:]), row
    assert re.search(rf"target: ratio <= 1.5x -> (met|NOT met) \(worst {NUMBER}x\)", out), out


def test_api_names_lists_extension_and_python_names(tmp_path: Path) -> None:
    """A wheel-shaped zip: registered C strings of a shared object, names a Python file defines;
    C++ mangled symbols are left out."""
    wheel = tmp_path / "stand_in-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("stand_in/_bindings.so", b"\x7fELF\x00get_num_errors\x00_ZN2ns3fooEv\x00")
        archive.writestr("stand_in/__init__.py", "def build_engine(network):\n    cache = 1\n")
    out = run_script("api_names.py", str(wheel))
    header, *names = out.splitlines()
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert header == f"# {wheel.name} sha256 {digest}: {len(names)} names"
    assert names == sorted(names)
    assert {"get_num_errors", "build_engine", "network", "cache"} <= set(names)
    assert not any(name.startswith("_Z") for name in names), names


def test_bench_multicamera_arguments_memory_and_table() -> None:
    """The options, the RSS sum over a process tree and the table, without starting nodes
    (the multi-camera replay it drives is tested in test/eval/test_eval_cameras.py)."""
    import importlib.util

    path = REPO / "scripts" / "bench_multicamera.py"
    spec = importlib.util.spec_from_file_location("bench_multicamera", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = bench.parse_args(["--sizes", "64x96", "--runs", "2", "--configs", "batched"])
    assert (args.sizes, args.runs, args.configs, args.cameras) == (["64x96"], 2, ["batched"], 3)
    for bad in (["--sizes", "64"], ["--runs", "0"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)
    cores = bench.parse_args(["--threads", "4"])
    threads = {config: bench.node_threads(cores, config) for config in bench.CONFIGS}
    assert threads == {"batched": 2, "batched-one-thread": 4, "per-camera": 1}, threads
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        alone, tree = bench.tree_rss_mb([child.pid]), bench.tree_rss_mb([os.getpid()])
        assert 1.0 < alone < tree, "the child's RSS is counted with its parent's"
    finally:
        child.kill()
        child.wait()
    run = {
        "nodes": 1,
        "output_fps": 29.5,
        "dropped": 2,
        "sent": 60,
        "rss_mb": 700.0,
        "stages_p50": {stage: 50.0 for stage in bench.STAGES} | {"queue": 4.0},
        "batch": {
            "frames_per_round_mean": 2.5,
            "window_wait_mean_ms": 3.0,
            "window_wait_max_ms": 9.0,
            "padded_slots": 0,
        },
    }
    results = {
        ("64x96", "batched"): [
            {**run, "latency": {"cam0": (80.0, 120.0), "cam1": (90.0, 130.0)}},
            {**run, "output_fps": 27.5, "latency": {"cam0": (100.0, 140.0), "cam1": (70, 110)}},
        ]
    }
    header, _, row = bench.summary(results)
    assert header.startswith("| size | config | nodes | output fps |")
    assert row == (
        "| 64x96 | batched | 1 | 28.5 (27.5-29.5) | cam0 90 (80-100) / 130 (120-140); "
        "cam1 80 (70-90) / 120 (110-130) | 2 (2-2) | 60 (60-60) | 700 (700-700) |"
    )
    results[("64x96", "per-camera")] = [{**run, "batch": None}]
    *_, batched, alone = bench.batch_costs(results)
    stages = " | ".join(["4.0 (4.0-4.0)", *["50.0 (50.0-50.0)"] * (len(bench.STAGES) - 1)])
    assert (
        batched == f"| 64x96 | batched | {stages} | 2.50 (2.50-2.50) "
        "| 3.00 (3.00-3.00) / 9.0 (9.0-9.0) | 0 (0-0) |"
    )
    assert alone == "| 64x96 | per-camera | 4.0 | " + "50.0 | " * 6 + "– | – / – | – |"
