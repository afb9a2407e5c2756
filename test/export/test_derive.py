"""``compactinst derive``: typed graphs written as files stand in for the derivation tools, which a
vehicle (TensorRT, no onnx or ONNX Runtime quantization) does not have."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from compactinst_ros.bundle import TYPED_DIR, ModelBundle
from compactinst_ros.cli import main
from compactinst_ros.errors import BundleError

#: what deriving imports: without them a machine cannot derive (as on a Jetson)
DERIVATION_MODULES = ("onnx", "compactinst_ros.variants")


def without_derivation_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in DERIVATION_MODULES:
        monkeypatch.setitem(sys.modules, name, None)


def test_derived_files_stand_in_for_missing_tools(
    typed_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    assert main(["derive", str(typed_copy)]) == 0
    written = sorted((typed_copy / TYPED_DIR).glob("*.onnx"))
    assert len(written) == 6  # fp16: 2 stages; int8: 2 stages x (tensorrt, cpu)
    assert all(str(p) in capsys.readouterr().out for p in written[:1])
    vehicle = Path(shutil.copytree(typed_copy, tmp_path / "on_vehicle"))
    bundle = ModelBundle.load(vehicle)
    without_derivation_tools(monkeypatch)
    for stage in ("encoder", "decoder"):
        graph = bundle.stage_graph(stage, "fp16")
        assert graph.sha256 == bundle.variants["fp16"]["stages"][stage]["sha256"]
        cpu = bundle.stage_graph(stage, "int8", target="cpu")
        assert cpu.sha256 == bundle.variants["int8"]["stages"][stage]["sha256"]["cpu"]


def test_without_tools_or_files_the_error_names_both_fixes(
    typed_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = ModelBundle.load(typed_copy)
    without_derivation_tools(monkeypatch)
    with pytest.raises(BundleError, match=r"precision\].*compactinst derive"):
        bundle.stage_graph("encoder", "fp16")


def test_a_changed_typed_file_is_refused(typed_copy: Path, tmp_path: Path) -> None:
    assert main(["derive", str(typed_copy), "--precision", "fp16"]) == 0
    vehicle = Path(shutil.copytree(typed_copy, tmp_path / "changed"))
    bundle = ModelBundle.load(vehicle)
    recorded = bundle.variants["fp16"]["stages"]["decoder"]["sha256"]
    stored = vehicle / TYPED_DIR / f"{recorded}.onnx"
    stored.write_bytes(stored.read_bytes()[:-1] + b"\x00")
    with pytest.raises(BundleError, match="does not match"):
        bundle.stage_graph("decoder", "fp16")


def test_fp16_stages_take_the_image_and_hand_their_features_on_in_half_with_the_same_numbers() -> (
    None
):
    """The FP16 graphs keep the decoder's outputs FP32 but take the image in FP16 (their first
    step cast it) and hand the encoder's features (e3, e4) on in FP16, with no Cast at either
    end: the encoder no longer writes a float copy for the decoder to cast back, and the
    preprocessing writes half the bytes. The casts were exact, so the outputs are the same as
    the float-I/O graphs', bit for bit, with the image rounded to half as the Cast did."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from compactinst_ros import variants
    from compactinst_ros.backends.ort import image_feed
    from compactinst_ros.bundle import default_bundle_path

    bundle = ModelBundle.load(default_bundle_path())
    assert bundle.boundary_tensors == {"e3", "e4"}
    half, wide = 10, 1  # TensorProto.FLOAT16, TensorProto.FLOAT
    sessions = {}
    for stage in bundle.stages:
        graph = onnx.load_from_string(bundle.stage_graph(stage.name, "fp16").model_bytes)
        values = [*graph.graph.input, *graph.graph.output]
        io = {v.name: v.type.tensor_type.elem_type for v in values}
        want = {"image": half, "e3": half, "e4": half, "pred_logits": wide, "pred_masks": wide}
        assert io == {k: v for k, v in want.items() if k in io}
        producers = {o: n.op_type for n in graph.graph.node for o in n.output}
        assert all(producers.get(n) != "Cast" for n in ("e3", "e4"))  # no float copy written
        readers = [n.op_type for n in graph.graph.node if "image" in n.input]
        assert ("image" in io) == bool(readers) and "Cast" not in readers  # read as given
        old = variants.fp16_graph(onnx.load(str(stage.path)))  # the float hand-off
        sessions[stage.name] = [
            ort.InferenceSession(g.SerializeToString(), providers=["CPUExecutionProvider"])
            for g in (graph, old)
        ]
    image = bundle.golden_cases("fp16")[0].image
    outputs = []
    for new_or_old in range(2):
        encoder, decoder = (sessions[s][new_or_old] for s in ("encoder", "decoder"))
        e3, e4 = encoder.run(["e3", "e4"], image_feed(encoder, "image", image))
        outputs.append(decoder.run(["pred_logits", "pred_masks"], {"e3": e3, "e4": e4}))
        assert e3.dtype == (np.float16 if new_or_old == 0 else np.float32)
    for new, old in zip(*outputs, strict=True):
        np.testing.assert_array_equal(new, old)


def test_an_image_an_fp32_island_reads_stays_float() -> None:
    """The image goes half only where every reader casts it to FP16 first: with the first Sub
    an FP32 island, half pixels would reach float arithmetic that had the exact ones, so the
    input stays float (and the half-image graph still computes what the float one does)."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from compactinst_ros import variants
    from compactinst_ros.backends.ort import image_feed

    mean = helper.make_tensor("mean", TensorProto.FLOAT, [1], [127.3])
    graph = helper.make_graph(
        [helper.make_node("Sub", ["image", "mean"], ["centred"], name="centre"),
         helper.make_node("Relu", ["centred"], ["out"], name="relu")],
        "g",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 4, 4])],
        [mean],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    kinds = {}
    for islands in ((), ("centre",)):
        typed = variants.fp16_graph(model, islands, (), "image")
        kinds[islands] = typed.graph.input[0].type.tensor_type.elem_type
        image = np.random.default_rng(0).uniform(0, 255, (1, 3, 4, 4)).astype(np.float32)
        session = ort.InferenceSession(
            typed.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        (got,) = session.run(["out"], image_feed(session, "image", image))
        assert got.dtype == np.float32 and np.isfinite(got).all()
    assert kinds == {(): TensorProto.FLOAT16, ("centre",): TensorProto.FLOAT}
    assert not variants.half_image_input(onnx.ModelProto(), "image")  # no such input
