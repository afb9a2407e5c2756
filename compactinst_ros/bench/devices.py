"""Device presets for the cost model and the roofline: DRAM bandwidth and FP16 peak rates.

Every figure is a dense (no structured sparsity) peak. Where a vendor sheet only gives sparse
INT8 TOPS, the dense FP16 tensor rate is that figure / 4 (sparse -> dense halves it, INT8 -> FP16
halves it again on Ampere tensor cores). Sources are named per preset in ``source``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError


@dataclass(frozen=True)
class Device:
    """Peak DRAM bandwidth (GB/s) and FP16 rates (TFLOP/s) on tensor cores and on CUDA cores."""

    name: str
    bandwidth_gbs: float
    tensor_tflops: float
    cuda_tflops: float
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("bandwidth_gbs", "tensor_tflops", "cuda_tflops"):
            if not getattr(self, field) > 0:
                raise ConfigError(
                    f"device '{self.name}': {field} must be > 0, got {getattr(self, field)}"
                )

    @property
    def tensor_ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) above which a tensor-core op is compute-bound."""
        return self.tensor_tflops * 1e12 / (self.bandwidth_gbs * 1e9)

    @property
    def cuda_ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) above which a CUDA-core op is compute-bound."""
        return self.cuda_tflops * 1e12 / (self.bandwidth_gbs * 1e9)


#: name -> preset. Bandwidths are the ones the paper used; peaks from the vendor sheets
#: (``source``), derived as the comment above each preset says.
DEVICES: dict[str, Device] = {
    # 68 GB/s LPDDR5; 40 INT8 TOPS (sparse) -> 10 TFLOPS dense FP16 tensor; 1024 CUDA cores x 2
    # x 0.625 GHz = 1.28 TFLOPS (FP16 1:1 on GA10x)
    "orin-nano": Device(
        "Jetson Orin Nano 8GB (15 W, 625 MHz GPU)",
        68.0,
        10.0,
        1.28,
        "NVIDIA Jetson Orin Nano datasheet",
    ),
    # 204.8 GB/s; GPU 170 sparse INT8 TOPS -> 42.5 TFLOPS dense FP16 tensor; 2048 CUDA cores =
    # 5.3 FP32 TFLOPS
    "agx-orin": Device(
        "Jetson AGX Orin 64GB (MAXN)",
        204.8,
        42.5,
        5.3,
        "NVIDIA Jetson AGX Orin Series Technical Brief v1.2",
    ),
    # 448 GB/s GDDR6; tensor 153.4 TFLOPS (sparse) -> 76.7 dense FP16; single precision 19.2
    # TFLOPS (FP16 non-tensor 1:1 on GA104)
    "rtx-a4000": Device("NVIDIA RTX A4000", 448.0, 76.7, 19.2, "NVIDIA RTX A4000 datasheet"),
    # 4.8 TB/s HBM3e; FP16 tensor 1,979 TFLOPS (sparse) -> 989.5 dense; FP16 non-tensor 133.8
    # TFLOPS (GH100 SXM, same die as H100 SXM)
    "h200": Device("NVIDIA H200 SXM", 4800.0, 989.5, 133.8, "NVIDIA H200 product brief"),
}


def get_device(name: str) -> Device:
    """Preset ``name`` or a custom ``label:bandwidth_gbs:tensor_tflops[:cuda_tflops]`` spec."""
    if name in DEVICES:
        return DEVICES[name]
    parts = name.split(":")
    if len(parts) in (3, 4):
        try:
            values = [float(p) for p in parts[1:]]
        except ValueError:
            values = []
        if values:
            cuda = values[2] if len(values) == 3 else values[1] / 8.0
            return Device(parts[0], values[0], values[1], cuda, "custom")
    raise ConfigError(
        f"unknown device '{name}'; choose one of {', '.join(DEVICES)} or give a custom "
        "'label:bandwidth_GBps:tensor_TFLOPS[:cuda_TFLOPS]' (e.g. 'nx:102.4:25:3.8')"
    )


@dataclass(frozen=True)
class Identified:
    """The GPU a measurement ran on: its preset key (None when no preset fits, so no figure is
    computed from another device's peaks), what it is and how that was found."""

    preset: str | None
    module: str
    evidence: str

    def label(self) -> str:
        """One line for reports: ``preset orin-nano (Jetson Orin Nano 8GB; <evidence>)``."""
        return f"preset {self.preset or 'none'} ({self.module}; {self.evidence})"


#: Jetson Orin modules by the part number in the device tree's ``compatible`` list
#: (``nvidia,p3767-0005``), with their GPU's SM count (128 CUDA cores per SM) and the preset
#: of that GPU. From NVIDIA's Jetson module data sheets (AGX Orin 64GB 2048 cores, 32GB 1792;
#: Orin NX 16GB and 8GB 1024; Orin Nano 8GB 1024, 4GB 512); the part numbers are those of
#: L4T's device trees (tegra234-p3768-0000+p3767-0005 and so on).
JETSON_MODULES: dict[str, tuple[str, int, str | None]] = {
    "p3701-0000": ("Jetson AGX Orin (developer kit module)", 16, "agx-orin"),
    "p3701-0004": ("Jetson AGX Orin 32GB", 14, None),
    "p3701-0005": ("Jetson AGX Orin 64GB", 16, "agx-orin"),
    "p3767-0000": ("Jetson Orin NX 16GB", 8, None),
    "p3767-0001": ("Jetson Orin NX 8GB", 8, None),
    "p3767-0003": ("Jetson Orin Nano 8GB", 8, "orin-nano"),
    "p3767-0004": ("Jetson Orin Nano 4GB", 4, None),
    "p3767-0005": ("Jetson Orin Nano 8GB (developer kit)", 8, "orin-nano"),
}
#: Module family named in the device tree's ``model`` (``NVIDIA Jetson AGX Orin Developer Kit``,
#: ``NVIDIA Orin Nano Developer Kit``, ``NVIDIA Jetson Orin NX Engineering Reference Developer
#: Kit``): SM count -> (module, preset).
JETSON_FAMILIES: dict[str, dict[int, tuple[str, str | None]]] = {
    "AGX Orin": {
        16: ("Jetson AGX Orin, 2048-core GPU", "agx-orin"),
        14: ("Jetson AGX Orin 32GB", None),
    },
    "Orin NX": {8: ("Jetson Orin NX", None)},
    "Orin Nano": {8: ("Jetson Orin Nano 8GB", "orin-nano"), 4: ("Jetson Orin Nano 4GB", None)},
}
#: What CUDA alone tells of an Orin ("Orin" for every module): SM count -> (module, preset).
ORIN_BY_SMS: dict[int, tuple[str, str | None]] = {
    16: ("Jetson AGX Orin, 2048-core GPU", "agx-orin"),
    14: ("Jetson AGX Orin 32GB", None),
    8: ("Jetson Orin Nano 8GB or Orin NX (same SM count)", None),
    4: ("Jetson Orin Nano 4GB", None),
}


#: Where /proc is; tests pass a folder holding a fake proc/device-tree.
SYSTEM_ROOT = Path("/")


def _device_tree(root: Path, name: str) -> list[str]:
    """The NUL-separated strings of ``root``/proc/device-tree/``name`` ([] when absent)."""
    try:
        raw = (root / "proc" / "device-tree" / name).read_bytes()
    except OSError:
        return []
    return [s for s in raw.decode("ascii", "replace").split("\0") if s]


def identify_device(
    cuda_name: str, sm_count: int | None = None, root: Path = SYSTEM_ROOT
) -> Identified:
    """The preset for the GPU CUDA calls ``cuda_name`` with ``sm_count`` SMs. A Jetson (CUDA says
    "Orin" for every module) is told apart by ``root``/proc/device-tree: the part number in
    ``compatible``, else the family in ``model``, each checked against the SM count; else by the
    SM count alone. Other GPUs match a preset by name."""
    compatible = _device_tree(root, "compatible")
    model = " ".join(_device_tree(root, "model"))
    sms = f", {sm_count} SMs" if sm_count is not None else ""
    for entry in compatible:
        # "nvidia,p3768-0000+p3767-0005" (carrier + module) or "nvidia,p3767-0005"
        part = next((p for p in entry.split(",", 1)[-1].split("+") if p in JETSON_MODULES), None)
        if part:
            module, expected, preset = JETSON_MODULES[part]
            if sm_count is not None and sm_count != expected:
                module, preset = f"{module} with {sm_count} SMs, not {expected}", None
            return Identified(preset, module, f"device tree compatible {entry}{sms}")
    for family, by_sms in JETSON_FAMILIES.items():
        if family.lower() in model.lower():
            known = by_sms.get(sm_count) if sm_count is not None else None
            module, preset = known or (f"Jetson {family}", None)
            return Identified(preset, module, f"device tree model '{model}'{sms}")
    if "orin" in cuda_name.lower():
        module, preset = ORIN_BY_SMS.get(sm_count or 0, (f"Jetson Orin{sms}", None))
        return Identified(preset, module, f"CUDA name '{cuda_name}'{sms}, no device tree model")
    lowered = cuda_name.lower().replace(" ", "-")
    for key in DEVICES:
        if key.replace("rtx-", "") in lowered and key not in ("orin-nano", "agx-orin"):
            return Identified(key, DEVICES[key].name, f"CUDA name '{cuda_name}'")
    return Identified(None, cuda_name, "no preset for this GPU")
