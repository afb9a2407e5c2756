"""What a TensorRT builder made of a network, read from its per-layer log.

With ``ProfilingVerbosity.DETAILED`` and a VERBOSE logger, TensorRT's builder (TensorRT for
RTX's too, which builds on a CPU) logs one line per engine layer::

    Name: <layer>, LayerType: <type>, Inputs: [ { Name: .., Dimensions: [1,50,128], ..,
    Datatype: Half, Format: .. }, ..], Constants: [..], Outputs: [..], TacticName: <kernel>,
    StreamId: 0, Metadata: [ONNX Layer: <node>][ONNX Layer: <node>]

These lines are the only view of the engine that needs no GPU: which ONNX nodes one kernel
fuses, what types each kernel reads and writes, whether attention became one fused kernel
(``_gemm_mha_v2``), and from the tensor sizes a bytes-per-frame model of its memory traffic.
They are an unversioned log format, so the parser is strict about what it needs and names the
line it could not read.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

#: bytes per element of the datatypes the builder reports
DATATYPE_BYTES = {
    "Float": 4.0, "Half": 2.0, "BFloat16": 2.0, "Int8": 1.0, "UInt8": 1.0, "Int32": 4.0,
    "Int64": 8.0, "Bool": 1.0, "FP8": 1.0, "Int4": 0.5, "FP4": 0.5,
}  # fmt: skip
#: engine layers that only order streams (no kernel, no bytes)
SYNC_LAYER_TYPES = ("wait", "signal")
#: the tactic of the fused multi-head attention kernel (QK^T, softmax and AV in one)
FUSED_ATTENTION_TACTIC = "_gemm_mha"
#: engine layer types that run a convolution or a matrix product
PRODUCT_LAYER_TYPES = ("correlation", "convolution", "gemm", "runtime_fusion")

_LAYER = re.compile(r"^Name: (?P<name>.*?), LayerType: (?P<type>[\w]+), Inputs: \[")
_SECTION = re.compile(
    r"(Inputs|Constants|Outputs): \[(.*?)\](?=, (?:Constants|Outputs|TacticName))"
)
_TENSOR = re.compile(
    r"\{ Name: (?P<name>.*?), Dimensions: \[(?P<dims>[\d,\-]*)\].*?Datatype: (?P<type>\w+)"
)
_TACTIC = re.compile(r"TacticName: (?P<tactic>[^,]*),")
_ONNX = re.compile(r"\[ONNX Layer: ([^\]]*)\]")


@dataclass(frozen=True)
class EngineTensor:
    """One tensor an engine layer reads or writes: its dimensions and datatype."""

    name: str
    dims: tuple[int, ...]
    datatype: str

    @property
    def nbytes(self) -> float:
        """Size in bytes (a dynamic dimension counts as 1)."""
        count = 1
        for d in self.dims:
            count *= max(d, 1)
        return count * DATATYPE_BYTES.get(self.datatype, 4.0)


@dataclass(frozen=True)
class EngineLayer:
    """One layer (kernel) of a built engine and the ONNX nodes it runs."""

    name: str
    layer_type: str
    inputs: tuple[EngineTensor, ...]
    constants: tuple[EngineTensor, ...]
    outputs: tuple[EngineTensor, ...]
    tactic: str
    onnx_nodes: tuple[str, ...]

    @property
    def nbytes(self) -> float:
        """Bytes the layer moves once: what it reads, its constants and what it writes."""
        return sum(t.nbytes for t in (*self.inputs, *self.constants, *self.outputs))

    @property
    def fused_attention(self) -> bool:
        """Whether the layer is TensorRT's fused multi-head attention kernel."""
        return FUSED_ATTENTION_TACTIC in self.tactic or FUSED_ATTENTION_TACTIC in self.name

    @property
    def weights(self) -> tuple[EngineTensor, ...]:
        """Constants of rank >= 2 with more than one channel: weights, not scales or alphas."""
        return tuple(c for c in self.constants if sum(d > 1 for d in c.dims) >= 2)

    @property
    def reformat(self) -> bool:
        """A layer that only changes a tensor's layout or type."""
        return "reformat" in self.layer_type.lower() or self.name.startswith("Reformatting")

    def reads(self, datatype: str) -> bool:
        """Whether one of its inputs (not constants) has ``datatype``."""
        return any(t.datatype == datatype for t in self.inputs)


def parse_layer(line: str) -> EngineLayer | None:
    """The engine layer a builder log line describes; None for any other line. ValueError for
    a layer line whose parts are not where the format puts them (the format changed)."""
    head = _LAYER.match(line)
    if head is None:
        return None
    sections = {kind: body for kind, body in _SECTION.findall(line)}
    tactic = _TACTIC.search(line)
    if set(sections) != {"Inputs", "Constants", "Outputs"} or tactic is None:
        raise ValueError(f"unreadable engine layer line (format changed?): {line[:200]}")

    def tensors(body: str) -> tuple[EngineTensor, ...]:
        return tuple(
            EngineTensor(m["name"], tuple(int(d) for d in m["dims"].split(",") if d), m["type"])
            for m in _TENSOR.finditer(body)
        )

    return EngineLayer(
        name=head["name"],
        layer_type=head["type"],
        inputs=tensors(sections["Inputs"]),
        constants=tensors(sections["Constants"]),
        outputs=tensors(sections["Outputs"]),
        tactic=tactic["tactic"].strip(),
        onnx_nodes=tuple(_ONNX.findall(line)),
    )


def parse_layers(lines: Iterable[str]) -> list[EngineLayer]:
    """Every engine layer in ``lines`` (a builder's log messages, each possibly several lines),
    stream waits and signals left out."""
    layers = []
    for message in lines:
        for line in message.splitlines():
            layer = parse_layer(line)
            if layer is not None and layer.layer_type not in SYNC_LAYER_TYPES:
                layers.append(layer)
    return layers


@dataclass(frozen=True)
class EngineSummary:
    """What one engine is made of: the figures the engine report and the tests compare."""

    layers: int
    layer_types: dict[str, int]
    #: layers by the datatypes they read (e.g. "Half", "Int8+Half")
    input_types: dict[str, int]
    fused_attention: int
    reformats: int
    bytes_per_frame: float
    #: bytes of float (FP32) tensors among them
    float_bytes: float
    int8_products: int
    products: int
    by_type_bytes: dict[str, float] = field(default_factory=dict)

    def row(self) -> dict[str, object]:
        """The summary as a flat table row (MB for bytes)."""
        return {
            "layers": self.layers,
            "products": self.products,
            "int8 products": self.int8_products,
            "fused attention": self.fused_attention,
            "reformats": self.reformats,
            "MB per frame": round(self.bytes_per_frame / 1e6, 2),
            "FP32 MB": round(self.float_bytes / 1e6, 2),
        }


def summarize(layers: Sequence[EngineLayer]) -> EngineSummary:
    """Counts, datatypes, fused attention, reformats and bytes per frame of an engine."""
    input_types: Counter[str] = Counter()
    by_type_bytes: Counter[str] = Counter()
    float_bytes = 0.0
    for layer in layers:
        input_types["+".join(sorted({t.datatype for t in layer.inputs})) or "-"] += 1
        for tensor in (*layer.inputs, *layer.constants, *layer.outputs):
            by_type_bytes[tensor.datatype] += tensor.nbytes
            if tensor.datatype == "Float":
                float_bytes += tensor.nbytes
    products = [layer for layer in layers if layer.layer_type in PRODUCT_LAYER_TYPES]
    return EngineSummary(
        layers=len(layers),
        layer_types=dict(Counter(layer.layer_type for layer in layers)),
        input_types=dict(input_types),
        fused_attention=sum(layer.fused_attention for layer in layers),
        reformats=sum(layer.reformat for layer in layers),
        bytes_per_frame=sum(layer.nbytes for layer in layers),
        float_bytes=float_bytes,
        int8_products=sum(layer.reads("Int8") for layer in products),
        products=len(products),
        by_type_bytes=dict(by_type_bytes),
    )


def layers_of_nodes(layers: Sequence[EngineLayer]) -> dict[str, list[EngineLayer]]:
    """ONNX node name -> the engine layers that run (part of) it, in engine order: the
    metadata's names. A node can span layers (an INT8 GEMM's product in one kernel, its
    dequantizing scale in the next)."""
    by_node: dict[str, list[EngineLayer]] = {}
    for layer in layers:
        for node in layer.onnx_nodes:
            by_node.setdefault(node, []).append(layer)
    return by_node
