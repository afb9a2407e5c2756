"""A tiny hand-made bundle with Conv and MatMul layers, one made deliberately sensitive to INT8
(the typed-graph tests; conftest.py makes its variants once per session)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from compactinst_ros.bundle import ModelBundle, sha256_file
from compactinst_ros.labels import SYNTHETIC_LABELS

SIZE = 64  # input 1x3x64x64, features and masks 16x16 (stride 4), 2 queries, 8 classes
QUERIES, CLASSES = 2, len(SYNTHETIC_LABELS.to_json())
#: the layer whose input holds one huge value its weights ignore: FP32 is unaffected, but that
#: value sets the INT8 scale and every other input rounds to zero
SENSITIVE = "/dec/sensitive"


def _save(path: Path, nodes: list, inputs: list, outputs: list, inits: list) -> None:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _value(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def make_tiny_bundle(root: Path) -> ModelBundle:
    """encoder: Conv (stride 4), a frozen BatchNorm (Mul, Add), Relu; decoder: Conv, the
    sensitive Conv, a MatMul over the mask pixels, a bool -> float Cast (the graph shape that
    broke the FP16 conversion), class logits from a MatMul of the mask peaks."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True)
    f = SIZE // 4

    def init(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
        values = rng.standard_normal(shape) * scale
        return numpy_helper.from_array(values.astype(np.float32), name)

    _save(
        root / "encoder.onnx",
        [
            helper.make_node("Mul", ["image", "inv255"], ["x"], name="/enc/Mul"),
            helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="/enc/conv",
                             kernel_shape=[4, 4], strides=[4, 4]),
            helper.make_node("Mul", ["c1", "bn_scale"], ["c2"], name="/enc/bn/Mul"),
            helper.make_node("Add", ["c2", "bn_shift"], ["c3"], name="/enc/bn/Add"),
            helper.make_node("Relu", ["c3"], ["e3"], name="/enc/relu"),
        ],
        [_value("image", [1, 3, SIZE, SIZE])],
        [_value("e3", [1, 8, f, f])],
        [numpy_helper.from_array(np.array(1 / 255, np.float32), "inv255"),
         init("w1", 8, 3, 4, 4), init("b1", 8),
         numpy_helper.from_array(1 + 0.2 * rng.random((1, 8, 1, 1), np.float32), "bn_scale"),
         init("bn_shift", 1, 8, 1, 1, scale=0.1)],
    )  # fmt: skip
    spike = np.zeros((1, 8, f, f), np.float32)
    spike[0, 7, 0, 0] = 4000.0
    sensitive_w = rng.standard_normal((QUERIES, 8, 1, 1)).astype(np.float32) * 0.3
    sensitive_w[:, 7] = 0.0
    _save(
        root / "decoder.onnx",
        [
            helper.make_node("Conv", ["e3", "wd"], ["d1"], name="/dec/conv", kernel_shape=[1, 1]),
            helper.make_node("Add", ["d1", "spike"], ["d2"], name="/dec/spike"),
            helper.make_node("Conv", ["d2", "ws"], ["d3"], name=SENSITIVE, kernel_shape=[1, 1]),
            helper.make_node("Reshape", ["d3", "flat"], ["d4"], name="/dec/flatten"),
            helper.make_node("MatMul", ["d4", "wm"], ["d5"], name="/dec/matmul"),
            helper.make_node("Greater", ["d5", "zero"], ["pos"], name="/dec/Greater"),
            helper.make_node("Cast", ["pos"], ["posf"], name="/dec/Cast", to=TensorProto.FLOAT),
            helper.make_node("Add", ["d5", "posf"], ["d6"], name="/dec/AddCast"),
            helper.make_node("Reshape", ["d6", "grid"], ["pred_masks"], name="/dec/grid"),
            helper.make_node("ReduceMax", ["d6"], ["peak"], name="/dec/peak", axes=[2],
                             keepdims=1),
            helper.make_node("MatMul", ["peak", "wc"], ["pred_logits"], name="/dec/classes"),
        ],
        [_value("e3", [1, 8, f, f])],
        [_value("pred_logits", [1, QUERIES, CLASSES + 1]),
         _value("pred_masks", [1, QUERIES, f, f])],
        [init("wd", 8, 8, 1, 1), numpy_helper.from_array(spike, "spike"),
         numpy_helper.from_array(sensitive_w, "ws"),
         numpy_helper.from_array(np.array([1, QUERIES, f * f], np.int64), "flat"),
         init("wm", f * f, f * f, scale=0.1),
         numpy_helper.from_array(np.zeros((), np.float32), "zero"),
         numpy_helper.from_array(np.array([1, QUERIES, f, f], np.int64), "grid"),
         init("wc", 1, CLASSES + 1)],
    )  # fmt: skip

    write_bundle_json(
        root,
        {"name": "tiny_typed", "mask_stride": 4},
        {"height": SIZE, "width": SIZE, "pad_value": [123.675, 116.28, 103.53]},
        SYNTHETIC_LABELS.to_json(),
        ("e3", [1, 8, f, f]),
        [("pred_logits", [1, QUERIES, CLASSES + 1]), ("pred_masks", [1, QUERIES, f, f])],
    )
    return ModelBundle.load(root)


def write_bundle_json(
    root: Path, architecture: dict, inputs: dict, labels: list, feature: tuple, outputs: list
) -> None:
    """bundle.json of an encoder.onnx (image -> ``feature``) and a decoder.onnx (``feature`` ->
    ``outputs``) already in ``root``, with their sha256."""

    def stage(name: str, ins: list, outs: list) -> dict:
        return {
            "name": name,
            "file": f"{name}.onnx",
            "sha256": sha256_file(root / f"{name}.onnx"),
            "inputs": [{"name": n, "shape": s, "dtype": "float32"} for n, s in ins],
            "outputs": [{"name": n, "shape": s, "dtype": "float32"} for n, s in outs],
        }

    size = [1, 3, inputs["height"], inputs["width"]]
    meta = {
        "format": 1,
        "architecture": architecture,
        "input": inputs,
        "labels": labels,
        "stages": [stage("encoder", [("image", size)], [feature]),
                   stage("decoder", [feature], outputs)],
    }  # fmt: skip
    (root / "bundle.json").write_text(json.dumps(meta, indent=2) + "\n")
