"""The pycuda launchers (compactinst_ros/gpu) and the GPU check script, run end to end on the
kernel emulator: buffer sizes, arena offsets, argument order and packing, launch shapes and the
host-side parsing of the tables are executed here, not only the kernels (test_kernel_emulation
drives the kernels from C++). What stays unverified without a GPU: the real driver, streams and
timing, and device ``expf`` rounding."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent / "emu"))
sys.path.insert(0, str(ROOT / "scripts"))

import pycuda_emu  # noqa: E402
import tensorrt_emu  # noqa: E402

from compactinst_ros.bundle import default_bundle_path  # noqa: E402
from compactinst_ros.gpu.constants import SIGNATURES, TABLES_DTYPE  # noqa: E402
from compactinst_ros.gpu.frames import OPTIONS, blob_frame  # noqa: E402
from compactinst_ros.gpu.twin import TwinFrame  # noqa: E402
from compactinst_ros.labels import SYNTHETIC_LABELS  # noqa: E402
from compactinst_ros.structures import FrameMeta, OutputSet  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
KERNELS = {
    "pp_stats", "pp_tiles", "pp_remap",
    "pre_letterbox", "pre_letterbox_half", "ov_instance", "ov_panoptic", "lift_clear",
    "lift_bounds", "lift_plan",
    "lift_classify", "lift_select", "lift_histogram", "lift_accumulate", "lift_cloud_classify",
    "lift_cloud_accumulate", "lift_cloud_labels",
}  # fmt: skip


def test_stand_in_fails_loudly_on_overflow_and_bad_packing(emu_lib, monkeypatch) -> None:
    """An output buffer too small for the kernel, a prepare string of the wrong length or
    layout, and an unknown kernel each raise instead of passing silently."""
    import struct

    from compactinst_ros.gpu.preprocess import GpuPreprocessor

    driver = pycuda_emu.install(monkeypatch, emu_lib)
    stream = driver.Stream()
    pre = GpuPreprocessor((0.0, 0.0, 0.0))
    meta = FrameMeta.letterbox(40, 60, 32, 64)
    image = np.zeros((40, 60, 3), np.uint8)
    small = driver.mem_alloc(4 * 3 * 32 * 64 - 4)
    pre.enqueue(stream, image, "rgb8", meta, int(small))
    with pytest.raises(RuntimeError, match="wrote past the end"):
        stream.synchronize()  # the stream runs the kernel when the host waits for it
    pre.kernel.arg_format = pre.kernel.arg_format[:-1]
    with pytest.raises(struct.error):
        pre.enqueue(stream, image, "rgb8", meta, int(driver.mem_alloc(4 * 3 * 32 * 64)))
    # the runner's own checks, below the image's: pp_tiles takes a double, not a float
    wrong = SIGNATURES["pp_tiles"].replace("d", "f")
    with pytest.raises(RuntimeError, match="status 2"):
        driver.launch("pp_tiles", (1, 1), (16, 16, 1), struct.pack(wrong, *[0] * len(wrong)))
    with pytest.raises(RuntimeError, match="status 1"):
        driver.launch("pp_missing", (1,), (1, 1, 1), struct.pack("i", 1))


def test_postprocessor_host_code_equals_twin_with_output_subsets(emu_lib, monkeypatch) -> None:
    """GpuPostprocessor.enqueue/collect for each output subset, reusing one geometry's arena:
    three launches a frame (two when only the semantic raster is asked for), and the block
    counters the last blocks use are back at 0 for the next frame."""
    from compactinst_ros.gpu.postprocess import GpuPostprocessor

    driver = pycuda_emu.install(monkeypatch, emu_lib)
    raw = blob_frame(7, q=24)
    q, h, w = raw.mask_logits.shape
    post = GpuPostprocessor(SYNTHETIC_LABELS, q, h, w, raw.mask_stride)
    d_cls, d_masks = driver.to_device(raw.class_logits), driver.to_device(raw.mask_logits)
    meta = FrameMeta.letterbox(110, 190, h * 8, w * 8)
    for outputs in (
        OutputSet(),
        OutputSet(instance=False),
        OutputSet(panoptic=False, semantic=False),
        OutputSet(instance=False, panoptic=False),
    ):
        before = len(driver.launches)
        stream = driver.Stream()
        post.enqueue(stream, int(d_cls), int(d_masks), meta, OPTIONS, outputs)
        remap = ["pp_remap"] if outputs.instance or outputs.panoptic else []
        assert driver.launches[before:] == ["pp_stats", "pp_tiles", *remap]
        stream.synchronize()
        got = post.collect(meta, outputs)
        tables = post.geometry(meta).host[: TABLES_DTYPE.itemsize].view(TABLES_DTYPE)[0]
        assert tables["stats_done"] == tables["tiles_done"] == 0
        twin = TwinFrame(raw, meta, SYNTHETIC_LABELS, OPTIONS, outputs).postprocess()
        for name in ("instance_raster", "panoptic_raster", "semantic_raster"):
            a, b = getattr(got, name), getattr(twin, name)
            assert (a is None) == (b is None), (outputs, name)
            if a is not None:
                np.testing.assert_array_equal(a, b)
        if outputs.instance:
            np.testing.assert_array_equal(got.instances.box, twin.instances.box)
            np.testing.assert_array_equal(got.instances.area, twin.instances.area)
        if outputs.panoptic:
            np.testing.assert_array_equal(got.segments.ids, twin.segments.ids)


@pytest.mark.full  # ~35 s: the whole GPU-machine script on the stand-ins; make test-full
def test_gpu_check_runs_every_step_through_the_real_host_code(
    emu_lib, monkeypatch, capsys, tmp_path
) -> None:
    """scripts/gpu_check.py, unchanged, as scripts/gpu_check.sh runs it on a GPU machine, with
    pycuda and TensorRT replaced by the stand-ins: environment, context, the seven kernel parity
    checks through GpuPreprocessor, GpuPostprocessor, GpuOverlay and GpuLift, the TensorRT
    backend vs onnxruntime (--bundle), labelled as the stand-in it is (ONNX Runtime on both
    sides, not FP16), a benchmark row (emulator times, meaningless as speed), the summary table
    last and the same in OUTDIR/gpu_check.json; the naive PyTorch column is n/a without CUDA."""
    import json

    import gpu_check

    monkeypatch.setenv("COMPACTINST_ENGINE_CACHE", str(tmp_path / "engines"))
    driver = pycuda_emu.install(monkeypatch, emu_lib)
    tensorrt_emu.install(monkeypatch)
    status = gpu_check.main(
        [
            "--quick", "--reps", "1", "--sizes", "512x1024", "--bundle", str(default_bundle_path()),
            "--out", str(tmp_path / "check"),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0, out
    assert "pycuda emulated" in out and "GPU: CPU kernel emulator" in out
    assert "checks: 11/11 passed" in out, out  # eight kernel checks, the backend, fp16 and int8
    assert "lift kernels vs twin: 8 scenes (3 clouds), exact fields equal" in out, out
    assert gpu_check.STAND_IN_ROW in out and gpu_check.TENSORRT_ROW not in out
    table = out[out.index("naive/fused") :].splitlines()
    assert len(table) == 4 and table[1].split()[0] == "512x1024", table
    assert table[1].split()[-1] == "100.000%", table
    assert table[2].split()[:2] == ["size", "graph"] and table[3].split()[0] == "512x1024", table
    assert set(driver.launches) == KERNELS  # the floor's idle launch is a shipped kernel too
    report = json.loads((tmp_path / "check" / "gpu_check.json").read_text())
    assert report["gpu"] == "CPU kernel emulator" and len(report["checks"]) == 11
    assert report["device_preset"] == "preset none (CPU kernel emulator; no preset for this GPU)"
    shipped = {source: "sm_87" for source in ("lift", "overlay", "postprocess", "preprocess")}
    assert report["kernel_images"] == shipped
    assert "kernel images: lift sm_87, overlay sm_87, postprocess sm_87, preprocess sm_87" in out
    (lift_row,) = [row for row in report["checks"] if row["name"] == "lift kernels vs twin"]
    assert lift_row["sum_rel"] <= 1e-12 and lift_row["centroid_m"] <= 1e-6
    assert all(row["ok"] for row in report["checks"])
    (trt_row,) = [row for row in report["checks"] if "tensorrt_stand_in" in row]
    assert trt_row["name"] == gpu_check.STAND_IN_ROW and trt_row["tensorrt_stand_in"] is True
    assert trt_row["build_s"] > 0 and trt_row["latency_ms"]["inference"] > 0
    assert trt_row["engines_built"] is True and "engines built in" in trt_row["detail"]
    (row,) = report["benchmark"]
    assert row["size"] == "512x1024" and row["parity"] == 1.0 and row["naive"] is None
    monkeypatch.delattr(sys.modules["tensorrt"], "__stand_in__")
    assert not gpu_check.tensorrt_is_stand_in()  # a real TensorRT gets the FP16 label


def test_the_floor_is_the_larger_of_bytes_and_issue_plus_three_launches(
    emu_lib, monkeypatch
) -> None:
    """bench_postprocess_gpu's floor on the stand-in (its times mean nothing here): bytes at the
    measured copy bandwidth plus the three idle launches, or, where the kernels' instructions
    at peak issue take longer, those instead; an unmeasured issue time (nan) leaves bytes."""
    import bench_postprocess_gpu as bench

    monkeypatch.setattr(bench, "COPY_BYTES", 1 << 20)
    cuda = pycuda_emu.install(monkeypatch, emu_lib)
    stream = cuda.Stream()
    buffers = bench.copy_buffers(cuda)
    bandwidth, launches, floor = bench.measure_floor(cuda, stream, 1 << 20, buffers)
    assert bandwidth > 0 and launches > 0
    assert floor == pytest.approx((1 << 20) / (bandwidth * 1e9) * 1e3 + launches, rel=1e-6)
    _, launches, floor = bench.measure_floor(cuda, stream, 1 << 20, buffers, issue_ms=1e6)
    assert floor == pytest.approx(1e6 + launches)
