"""``compactinst fp16-check``: the FP16-storage emulation, the per-layer range table, the FP32 pins
it derives (and that they remove the emulated overflow), on hand-made bundles whose overflow is
known, and the range table of the embedded default model."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typed_helpers import write_bundle_json

from compactinst_ros.backends.ort import create_session
from compactinst_ros.bundle import ModelBundle, default_bundle_path
from compactinst_ros.cli import main as cli_main
from compactinst_ros.export.precision import (
    FP16_MAX,
    HEADROOM_LIMIT,
    PRECISION_FILE,
    calibration_frames,
    check_bundle,
    emulate_fp16,
    node_name,
    to_fp16_storage,
    tracked_tensors,
    write_emulated_bundle,
)

SIZE = 32  # tiny bundles: 1x3x32x32 input, 2 queries, 1 thing class, masks at stride 8


def constant(name: str, value: float | list[int]) -> onnx.TensorProto:
    """A float scalar or an int64 vector initializer."""
    if isinstance(value, list):
        return numpy_helper.from_array(np.array(value, np.int64), name)
    return numpy_helper.from_array(np.array(value, np.float32), name)


def save_graph(path: Path, nodes: list, inputs: list, outputs: list, inits: list) -> None:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def tiny_bundle(root: Path, body: list, inits: list) -> ModelBundle:
    """encoder: e3 = image / 255; decoder: ``body`` turns e3 into 'out' (1, 3, 32, 32), then
    pred_masks = first 2 channels of an 8x8 max pool of out, pred_logits from their maxima."""
    root.mkdir(parents=True)
    image = helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, SIZE, SIZE])
    e3 = helper.make_tensor_value_info("e3", TensorProto.FLOAT, [1, 3, SIZE, SIZE])
    save_graph(
        root / "encoder.onnx",
        [helper.make_node("Mul", ["image", "inv255"], ["e3"], name="/enc/Mul")],
        [image],
        [e3],
        [constant("inv255", 1 / 255)],
    )
    head = [
        helper.make_node("MaxPool", ["out"], ["pooled"], name="/head/MaxPool",
                         kernel_shape=[8, 8], strides=[8, 8]),
        helper.make_node("Slice", ["pooled", "zero", "two", "one"], ["pred_masks"],
                         name="/head/Slice"),
        helper.make_node("ReduceMax", ["pred_masks"], ["peak"], name="/head/ReduceMax",
                         axes=[2, 3], keepdims=1),
        helper.make_node("Reshape", ["peak", "q1"], ["peak_q"], name="/head/Reshape"),
        helper.make_node("Concat", ["peak_q", "peak_q"], ["pred_logits"], name="/head/Concat",
                         axis=2),
    ]  # fmt: skip
    save_graph(
        root / "decoder.onnx", body + head, [e3],
        [helper.make_tensor_value_info("pred_logits", TensorProto.FLOAT, [1, 2, 2]),
         helper.make_tensor_value_info("pred_masks", TensorProto.FLOAT, [1, 2, 4, 4])],
        [*inits, constant("zero", [0]), constant("two", [2]), constant("one", [1]),
                 constant("q1", [1, 2, 1])],
    )  # fmt: skip

    write_bundle_json(
        root,
        {"name": "tiny", "mask_stride": 8},
        {"height": SIZE, "width": SIZE, "pad_value": [0, 0, 0]},
        [{"id": 1, "name": "thing", "isthing": True}],
        ("e3", [1, 3, SIZE, SIZE]),
        [("pred_logits", [1, 2, 2]), ("pred_masks", [1, 2, 4, 4])],
    )
    return ModelBundle.load(root)


def overflow_bundle(root: Path) -> ModelBundle:
    """'/big' reaches 255/255 * 300 * 300 = 90000 in FP32 (> 65504), then is scaled back."""
    body = [
        helper.make_node("Mul", ["e3", "g300"], ["h"], name="/h"),
        helper.make_node("Mul", ["h", "g300"], ["big"], name="/big"),
        helper.make_node("Mul", ["big", "g1e-3"], ["out"], name="/small"),
    ]
    return tiny_bundle(root, body, [constant("g300", 300.0), constant("g1e-3", 1e-3)])


def cancellation_bundle(root: Path) -> ModelBundle:
    """1 / ((e3 + 1.0002) - (e3 + 1)): 5000 in FP32 (33x headroom), but 1.0002 rounds to 1 in
    FP16 storage, so the difference is 0 and the division gives inf (a black frame has e3 = 0)."""
    body = [
        helper.make_node("Add", ["e3", "c1.0002"], ["a"], name="/a"),
        helper.make_node("Add", ["e3", "c1"], ["b"], name="/b"),
        helper.make_node("Sub", ["a", "b"], ["d"], name="/d"),
        helper.make_node("Div", ["c1", "d"], ["r"], name="/r"),
        helper.make_node("Mul", ["r", "g1e-3"], ["out"], name="/out"),
    ]
    inits = [constant("c1.0002", 1.0002), constant("c1", 1.0), constant("g1e-3", 1e-3)]
    return tiny_bundle(root, body, inits)


def run_graph(model: onnx.ModelProto, tmp_path: Path, feeds: dict) -> list[np.ndarray]:
    path = tmp_path / f"graph{len(list(tmp_path.glob('graph*')))}.onnx"
    onnx.save(model, str(path))
    return create_session(path, threads=1).run(None, feeds)


def test_fp16_storage_clamps_weights_like_tensorrt_and_keeps_infinities() -> None:
    values = np.array([1e6, -1e6, np.inf, -np.inf, 1.0002, 65519.0, 3e-8], np.float32)
    stored = to_fp16_storage(values)
    np.testing.assert_array_equal(
        stored, [FP16_MAX, -FP16_MAX, np.inf, -np.inf, 1.0, FP16_MAX, np.float16(3e-8)]
    )
    assert stored.dtype == np.float32


def test_emulation_rounds_stored_tensors_overflows_to_inf_and_pins_keep_fp32(tmp_path) -> None:
    decoder = onnx.load(str(overflow_bundle(tmp_path / "b").stage("decoder").path))
    e3 = np.full((1, 3, SIZE, SIZE), 1.0, np.float32)
    e3[0, 0, 0, :3] = [0.1, 1 / 3, 0.2002]
    fp32 = run_graph(decoder, tmp_path, {"e3": e3})
    fp16 = run_graph(emulate_fp16(decoder), tmp_path, {"e3": e3})
    assert np.isfinite(fp32[1]).all() and fp32[1].max() == pytest.approx(90.0, rel=1e-5)
    assert np.isposinf(fp16[1]).any()  # 90000 does not fit in half: inf, as a TensorRT FP16 layer
    pinned = run_graph(emulate_fp16(decoder, {"/big", "/small"}), tmp_path, {"e3": e3})
    assert np.isfinite(pinned[1]).all()
    # pinned /big and /small compute in FP32 from '/h' as half stored it; the unpinned pooling
    # reads their output rounded to half again
    h16 = (e3.astype(np.float16).astype(np.float32) * 300).astype(np.float16).astype(np.float32)
    expected = (h16 * 300 * np.float32(1e-3)).astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(pinned[1][0, 0, 0, 0], expected[0, 0, :8, :8].max(), rtol=1e-3)

    everything = {node_name(n) for n in decoder.graph.node}
    np.testing.assert_allclose(
        run_graph(emulate_fp16(decoder, everything), tmp_path, {"e3": e3})[1], fp32[1], rtol=1e-6
    )


def test_emulated_graph_keeps_its_io_and_runs_with_graph_optimisations(tmp_path) -> None:
    bundle = ModelBundle.load(default_bundle_path())
    emulated = write_emulated_bundle(bundle, {}, tmp_path / "fp16")
    assert ModelBundle.load(emulated.root, verify_hashes=True).stages[1].outputs == (
        bundle.stages[1].outputs
    )
    tensor = calibration_frames(bundle, 1)[0][1]
    reference = create_session(bundle.stage("encoder").path, 2).run(["e3", "e4"], {"image": tensor})
    for optimize in (True, False):
        session = create_session(emulated.stage("encoder").path, 2, optimize=optimize)
        for ref, half in zip(reference, session.run(["e3", "e4"], {"image": tensor}), strict=True):
            error = np.abs(half - ref).max() / np.abs(ref).max()
            assert 1e-5 < error < 1e-2  # rounded (not the FP32 graph), but only by half's ulps
            assert np.array_equal(half, half.astype(np.float16).astype(np.float32))


def test_range_table_flags_the_overflowing_layer_and_its_pins_remove_the_inf(tmp_path) -> None:
    bundle = overflow_bundle(tmp_path / "b")
    report = check_bundle(bundle, calibration_frames(bundle, 1), threads=1, log=lambda m: None)
    by_node = {r.tracked.node: r for r in report.rows}
    assert by_node["/big"].fp32_amax == pytest.approx(90000.0, rel=1e-5)
    assert by_node["/big"].headroom < 1 and by_node["/big"].flags == ["range"]
    assert by_node["/h"].headroom == pytest.approx(FP16_MAX / 300, rel=1e-5)
    assert not by_node["/h"].flags and not by_node["/h"].pinned  # 218x headroom
    assert report.pins == {"encoder": set(), "decoder": {"/big", "/small"}}  # + the reader
    assert report.rounds == 1 and report.residual_frames == 0
    assert report.sorted_rows()[0].tracked.node == "/big"
    assert by_node["/small"].fp16_amax == pytest.approx(90.0, rel=1e-3)


def test_an_inf_that_only_fp16_makes_is_traced_upstream_until_it_is_gone(tmp_path) -> None:
    bundle = cancellation_bundle(tmp_path / "b")
    report = check_bundle(bundle, calibration_frames(bundle, 0), threads=1, log=lambda m: None)
    by_node = {r.tracked.node: r for r in report.rows}
    assert by_node["/r"].headroom > HEADROOM_LIMIT and "range" not in by_node["/r"].flags
    assert by_node["/r"].flags == ["fp16-inf"] and by_node["/r"].fp16_origin > 0
    # round 1: /r is the origin; 2: pinned /r still divides by a rounded 0, so /d; 3: /a, /b
    assert report.pins["decoder"] == {"/r", "/d", "/a", "/b"}
    assert report.rounds == 4 and report.residual_frames == 0
    assert math.isfinite(by_node["/out"].fp16_amax)


def test_every_float_node_output_is_tracked_and_constants_are_not() -> None:
    decoder = onnx.load(str(ModelBundle.load(default_bundle_path()).stage("decoder").path))
    tracked = tracked_tensors(decoder, "decoder")
    ops = {t.op for t in tracked}
    assert {"LayerNormalization", "Softmax", "MatMul", "Conv", "input"} <= ops
    assert "Constant" not in ops and "Shape" not in ops and "ArgMax" not in ops  # not float
    assert len({t.tensor for t in tracked}) == len(tracked)


def test_default_model_has_fp16_headroom_everywhere() -> None:
    """The embedded model on one held-out scene and the adversarial frames: every stored tensor
    at least HEADROOM_LIMIT below 65504, no inf/NaN in the emulation, so no pins."""
    bundle = ModelBundle.load(default_bundle_path())
    frames = calibration_frames(bundle, 1)
    assert [name for name, _ in frames][1:] == [
        "black", "white", "stripes 1px", "stripes 8px", "checker 1px", "noise"
    ]  # fmt: skip
    report = check_bundle(bundle, frames, threads=2, log=lambda m: None)
    assert not [r for r in report.rows if r.flags]
    assert min(r.headroom for r in report.rows) > 100  # measured: 257 (the 0..255 input)
    assert report.pins == {"encoder": set(), "decoder": set()} and report.residual_frames == 0
    masked = {r.tracked.node for r in report.rows if r.fp32_nonfinite}  # -inf by design
    assert masked and all("/query_cross_attn/attn/" in node for node in masked)


def test_cli_prints_the_table_writes_csv_and_pins(tmp_path, capsys) -> None:
    bundle = overflow_bundle(tmp_path / "b")
    table = tmp_path / "ranges.csv"
    args = ["fp16-check", str(bundle.root), "--frames", "1", "--out", str(table), "--threads", "1"]
    assert cli_main([*args, "--write-pins"]) == 0
    out = capsys.readouterr().out
    assert "flagged tensors: 1; FP32 pins: encoder 0, decoder 2" in out
    assert "no inf/NaN beyond FP32's on any frame" in out
    first_row = out.splitlines()[2].split()
    assert first_row[0] == "decoder" and first_row[-2:] == ["range", "/big"]
    rows = list(csv.DictReader(table.open()))
    assert rows[0]["node"] == "/big" and rows[0]["pinned"] == "1"
    headrooms = [float(r["headroom"]) for r in rows[1:]]
    assert headrooms == sorted(headrooms)
    record = json.loads((bundle.root / PRECISION_FILE).read_text())
    assert {name: entry["fp32_layers"] for name, entry in record["stages"].items()} == {
        "encoder": [],
        "decoder": ["/big", "/small"],
    }
    assert record["flagged"] == {"encoder": [], "decoder": ["/big"]}
    assert cli_main(["fp16-check", str(bundle.root), "--frames", "-1"]) == 2
    assert "--frames -1" in capsys.readouterr().err
