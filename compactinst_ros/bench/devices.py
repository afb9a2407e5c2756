"""Device presets for the cost model and the roofline: DRAM bandwidth and FP16 peak rates.

Every figure is a dense (no structured sparsity) peak. Where a vendor sheet only gives sparse
INT8 TOPS, the dense FP16 tensor rate is that figure / 4 (sparse -> dense halves it, INT8 -> FP16
halves it again on Ampere tensor cores). Sources are named per preset in ``source``.
"""

from __future__ import annotations

from dataclasses import dataclass

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
