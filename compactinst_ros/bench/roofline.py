"""``compactinst roofline CSV``: per-kernel FP16 roofline of an Nsight Compute CSV (paper Table 1).

Kernels that issued any tensor-pipe instruction are "tensor-core" kernels, the rest "CUDA-core"
kernels; each class is plotted against its own ridge and summarised as shares of decoder time and
DRAM bytes. The CSV comes from (one line; ``NCU_METRICS`` below, see docs/benchmarks.md)::

    ncu --csv --print-units base --metrics <NCU_METRICS> --log-file decoder.csv \\
        python scripts/gpu_bench.py --ncu-target fastinst_r18_d3
"""

from __future__ import annotations

import argparse
import csv
import glob
import io
import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import DataError, InputError
from .devices import DEVICES, Device, get_device

TIME = "gpu__time_duration.sum"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
#: CUDA-core FP16/FP32 thread instructions; an FMA counts as two FLOPs (ncu's own convention).
CUDA_OPS = {
    f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum": (2 if op.endswith("fma") else 1)
    for op in ("hadd", "hmul", "hfma", "fadd", "fmul", "ffma")
}
#: Tensor math ops counted by the hardware (ncu 2022.2+ on Ampere and newer); preferred.
TENSOR_OPS = (
    "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
)
#: Tensor-pipe warp instructions: the classification signal, and the FLOP fallback.
TENSOR_INST = "sm__inst_executed_pipe_tensor.sum"
NCU_METRICS = ",".join([TIME, DRAM_READ, DRAM_WRITE, *CUDA_OPS, TENSOR_INST, *TENSOR_OPS])
#: Per kernel: warp instructions issued per SM sub-partition (the average over them) and SM
#: cycles elapsed, beside TIME: the issue-bound floor is the average instructions at one a cycle
#: (each sub-partition issues at most one warp instruction a cycle), at the clock cycles / time.
ISSUE_INST = "smsp__inst_executed.avg"
SM_CYCLES = "sm__cycles_elapsed.avg"
ISSUE_METRICS = ",".join([TIME, ISSUE_INST, SM_CYCLES])
#: FLOPs of one FP16 HMMA.16816 warp instruction (16x8x16 multiply-adds x 2).
HMMA_16816_FLOPS = 4096

_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TIME_UNIT = {
    "nsecond": 1e-9,
    "ns": 1e-9,
    "usecond": 1e-6,
    "us": 1e-6,
    "msecond": 1e-3,
    "ms": 1e-3,
    "second": 1.0,
    "s": 1.0,
}


@dataclass
class Kernel:
    """One profiled kernel launch: time (s), DRAM bytes and FLOPs by pipe."""

    id: int
    name: str
    time_s: float
    dram_bytes: float
    cuda_flops: float
    tensor_flops: float
    tensor_inst: float

    @property
    def is_tensor(self) -> bool:
        """True when the kernel used the tensor pipe at all (the paper's "TC" class)."""
        return self.tensor_inst > 0 or self.tensor_flops > 0

    @property
    def flops(self) -> float:
        """All FP16/FP32 FLOPs the kernel executed (tensor + CUDA-core)."""
        return self.cuda_flops + self.tensor_flops


def _number(text: str, unit: str, metric: str) -> float:
    """Parse one ncu value (thousands separators, ``n/a``) and scale it to base units."""
    text = text.strip().replace(",", "")
    if text in ("", "n/a"):
        return 0.0
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"metric {metric}: value '{text}' is not a number") from None
    unit = unit.strip()
    if unit in _TIME_UNIT:
        return value * _TIME_UNIT[unit]
    match = re.fullmatch(r"([KMGT]?)(byte|inst|warp|)", unit)
    if match is None:
        if unit in ("%", "none", "cycle", "hz"):
            return value
        raise InputError(
            f"metric {metric}: unknown unit '{unit}'; re-run ncu with --print-units base"
        )
    return value * _PREFIX[match.group(1)]


def _table_lines(text: str) -> list[str]:
    """The CSV rows only: drop what ncu or the profiled program printed around the table."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith('"ID"'):
            return [row for row in lines[i:] if row.startswith('"')]
    raise InputError(
        'no Nsight Compute CSV header (a line starting with "ID") found; produce '
        "the file with 'ncu --csv ... --log-file FILE'"
    )


def find_ncu() -> str | None:
    """The Nsight Compute CLI on PATH or in the usual CUDA / Nsight install folders."""
    found = shutil.which("ncu")
    if found:
        return found
    candidates = sorted(
        glob.glob("/usr/local/cuda*/bin/ncu") + glob.glob("/opt/nvidia/nsight-compute/*/ncu")
    )
    return candidates[-1] if candidates else None


def metrics_by_launch(text: str) -> dict[int, tuple[str, dict[str, float]]]:
    """Launch id -> (kernel name, metric -> value) from a long (details) or wide (raw) CSV."""
    rows = list(csv.DictReader(io.StringIO("\n".join(_table_lines(text)))))
    launches: dict[int, tuple[str, dict[str, float]]] = {}
    if rows and "Metric Name" in rows[0]:
        for row in rows:
            key = int(row["ID"])
            _, metrics = launches.setdefault(key, (row["Kernel Name"], {}))
            metrics[row["Metric Name"]] = _number(
                row["Metric Value"], row["Metric Unit"], row["Metric Name"]
            )
        return launches
    units = rows[0] if rows and not rows[0]["ID"] else {}
    for row in rows:
        if not row["ID"]:
            continue
        metrics = {k: _number(v, units.get(k, ""), k) for k, v in row.items() if k and ("__" in k)}
        launches[int(row["ID"])] = (row["Kernel Name"], metrics)
    return launches


def issue_floor_s(text: str, kernel_prefix: str = "") -> dict[str, float]:
    """Kernel name -> seconds its instructions need at peak issue (``ISSUE_METRICS`` in an ncu
    CSV; launches of one name summed), for the kernels whose name starts with
    ``kernel_prefix``."""
    floors: dict[str, float] = {}
    for name, m in metrics_by_launch(text).values():
        if not name.startswith(kernel_prefix):
            continue
        missing = [k for k in (TIME, ISSUE_INST, SM_CYCLES) if not m.get(k)]
        if missing:
            raise DataError(f"kernel {name}: no {', '.join(missing)} in the CSV")
        floors[name] = floors.get(name, 0.0) + m[ISSUE_INST] * m[TIME] / m[SM_CYCLES]
    return floors


def parse_ncu_csv(text: str, flops_per_tensor_inst: float = HMMA_16816_FLOPS) -> list[Kernel]:
    """Kernels from Nsight Compute ``--csv`` output (details page or ``--page raw``)."""
    kernels = []
    for key, (name, m) in sorted(metrics_by_launch(text).items()):
        if TIME not in m or (DRAM_READ not in m and "dram__bytes.sum" not in m):
            raise InputError(
                f"kernel {key} ({name}) lacks {TIME} or DRAM bytes; profile with "
                f"--metrics {NCU_METRICS}"
            )
        dram = m.get(DRAM_READ, 0.0) + m.get(DRAM_WRITE, 0.0) or m.get("dram__bytes.sum", 0.0)
        cuda = sum(m.get(metric, 0.0) * factor for metric, factor in CUDA_OPS.items())
        inst = m.get(TENSOR_INST, 0.0) or m.get("sm__inst_executed_pipe_tensor_op_hmma.sum", 0.0)
        tensor = sum(m.get(metric, 0.0) for metric in TENSOR_OPS)
        if tensor == 0.0:
            tensor = inst * flops_per_tensor_inst
        kernels.append(Kernel(key, name, m[TIME], dram, cuda, tensor, inst))
    if not kernels:
        raise InputError("the Nsight Compute CSV holds no kernel rows")
    return kernels


def summarize(kernels: list[Kernel], device: Device) -> dict[str, dict[str, float]]:
    """Per class (tensor-core, CUDA-core, all): shares of time and bytes, AI and % of ridge."""
    total_t = sum(k.time_s for k in kernels) or 1.0
    total_b = sum(k.dram_bytes for k in kernels) or 1.0
    groups = {
        "tensor-core": ([k for k in kernels if k.is_tensor], device.tensor_ridge),
        "cuda-core": ([k for k in kernels if not k.is_tensor], device.cuda_ridge),
        "all": (kernels, device.tensor_ridge),
    }
    out = {}
    for label, (members, ridge) in groups.items():
        t = sum(k.time_s for k in members)
        b = sum(k.dram_bytes for k in members)
        f = sum(k.flops for k in members)
        ai = f / b if b else 0.0
        out[label] = {
            "kernels": len(members),
            "time_ms": t * 1e3,
            "time_share": t / total_t,
            "dram_gb": b / 1e9,
            "bytes_share": b / total_b,
            "gflop": f / 1e9,
            "intensity": ai,
            "ridge": ridge,
            "pct_of_ridge": 100.0 * ai / ridge,
            "achieved_gbs": b / t / 1e9 if t else 0.0,
            "pct_peak_bw": 100.0 * (b / t / 1e9) / device.bandwidth_gbs if t else 0.0,
        }
    return out


def format_table(summary: dict[str, dict[str, float]], device: Device) -> str:
    """The Table-1-style text block: class, kernels, time and byte shares, AI vs ridge."""
    lines = [
        f"device {device.name}: {device.bandwidth_gbs:g} GB/s, ridges tensor "
        f"{device.tensor_ridge:.0f} / CUDA {device.cuda_ridge:.1f} FLOP/B",
        f"{'class':<12} {'kernels':>7} {'time ms':>9} {'time %':>7} {'DRAM GB':>9} "
        f"{'bytes %':>8} {'FLOP/B':>8} {'% ridge':>8} {'% peak BW':>9}",
    ]
    for label, s in summary.items():
        lines.append(
            f"{label:<12} {s['kernels']:>7d} {s['time_ms']:>9.3f} {100 * s['time_share']:>6.1f}% "
            f"{s['dram_gb']:>9.4f} {100 * s['bytes_share']:>7.1f}% {s['intensity']:>8.2f} "
            f"{s['pct_of_ridge']:>7.1f}% {s['pct_peak_bw']:>8.1f}%"
        )
    return "\n".join(lines)


def plot_roofline(kernels: Sequence[Kernel], device: Device, path: Path) -> None:
    """Kernels as points (size ~ time) under the bandwidth slope and both FP16 ceilings."""
    from .plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    bw = device.bandwidth_gbs * 1e9
    xs = [10 ** (e / 10) for e in range(-30, 51)]
    for peak, ridge, label, colour in (
        (device.tensor_tflops * 1e12, device.tensor_ridge, "tensor-core FP16", "tab:orange"),
        (device.cuda_tflops * 1e12, device.cuda_ridge, "CUDA-core FP16", "tab:blue"),
    ):
        ax.plot(
            xs,
            [min(peak, bw * x) / 1e12 for x in xs],
            color=colour,
            label=f"{label} roof (ridge {ridge:.0f} FLOP/B)",
        )
    total = sum(k.time_s for k in kernels) or 1.0
    for is_tensor, colour, label in (
        (True, "tab:orange", "TC kernels"),
        (False, "tab:blue", "CUDA-only kernels"),
    ):
        pts = [k for k in kernels if k.is_tensor == is_tensor and k.dram_bytes > 0 and k.time_s]
        ax.scatter(
            [max(k.flops / k.dram_bytes, 1e-3) for k in pts],
            [max(k.flops / k.time_s / 1e12, 1e-6) for k in pts],
            s=[10 + 400 * k.time_s / total for k in pts],
            color=colour,
            alpha=0.6,
            edgecolors="k",
            linewidths=0.3,
            label=label,
        )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="arithmetic intensity (FLOP / DRAM byte)",
        ylabel="performance (TFLOP/s)",
        title=f"decoder roofline on {device.name}",
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst roofline``."""
    parser.add_argument("csv", type=Path, help="Nsight Compute CSV (ncu --csv --log-file ...)")
    parser.add_argument(
        "--device",
        default="rtx-a4000",
        help=f"ridges from a preset ({', '.join(DEVICES)}) or "
        "'label:GBps:tensor_TFLOPS:cuda_TFLOPS'",
    )
    parser.add_argument(
        "--flops-per-tensor-inst",
        type=float,
        default=HMMA_16816_FLOPS,
        help="FLOPs per tensor-pipe warp instruction when the CSV lacks "
        "sm__ops_path_tensor_* (default: HMMA.16816 = 4096)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="directory for roofline.json and roofline.png (default: print only)",
    )


def run(args: argparse.Namespace) -> int:
    """Parse, classify, print the table; write JSON and the plot when ``--out`` is given."""
    if not args.csv.is_file():
        raise DataError(f"{args.csv} does not exist; produce it with ncu (see --help)")
    device = get_device(args.device)
    kernels = parse_ncu_csv(args.csv.read_text(errors="replace"), args.flops_per_tensor_inst)
    summary = summarize(kernels, device)
    print(format_table(summary, device))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {
            "device": asdict(device),
            "summary": summary,
            "kernels": [asdict(k) | {"is_tensor": k.is_tensor} for k in kernels],
        }
        (args.out / "roofline.json").write_text(json.dumps(record, indent=1))
        plot_roofline(kernels, device, args.out / "roofline.png")
        print(f"wrote {args.out / 'roofline.json'} and {args.out / 'roofline.png'}")
    return 0
