"""``compactinst costmodel``: MACs and minimal DRAM bytes per stage, and a per-op roofline time.

Built on the model's own per-ATen-op records (``compactinst_ros.model.flops.count_ops``): each op
reads its inputs (activations and weights) once and writes its outputs once, at FP16 by default,
i.e. no fusion and no cache reuse across ops. The predicted time of an op on a device is
``max(bytes / bandwidth, 2 * MACs / peak)``, with the tensor-core FP16 peak for convolutions and
matrix products and the CUDA-core FP16 peak for everything else; an op is *bandwidth-bound* when
the first term wins. Stage times are sums over ops (one kernel per op, no overlap);
``--op-overhead-us`` adds a fixed cost per op (launch and tail effects, which dilute the
speed-up at small inputs).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..sizes import NAMED_SIZES, pad32
from .devices import DEVICES, Device, get_device
from .latency import BASELINE, DEFAULT_CONFIGS, parse_sizes

if TYPE_CHECKING:
    from ..model.flops import OpRecord

STAGES = ("backbone", "pixel_decoder", "decoder")
#: ATen kinds that run on tensor cores in FP16 (convolutions and matrix products).
TENSOR_KINDS = frozenset({"convolution", "mm", "addmm", "bmm"})
DEFAULT_DEVICES = ("orin-nano", "agx-orin", "rtx-a4000", "h200")


def stage_of(component: str) -> str:
    """Map a flops component onto the three stages: backbone, pixel_decoder, decoder."""
    from ..model.flops import COMPONENTS

    if component not in COMPONENTS:
        raise ConfigError(f"unknown model component '{component}'; known: {', '.join(COMPONENTS)}")
    if COMPONENTS[component]:
        return "decoder"
    return "pixel_decoder" if component == "pixel_decoder" else "backbone"


def op_bytes(op: OpRecord) -> int:
    """Minimal DRAM bytes of one op: inputs incl. weights read once + outputs written once."""
    return op.bytes_read + op.bytes_written


def op_time(op: OpRecord, device: Device, overhead_s: float = 0.0) -> tuple[float, bool]:
    """Roofline time (s) of one op on ``device`` (+ a fixed per-kernel ``overhead_s``) and
    whether it is bandwidth-bound."""
    peak = device.tensor_tflops if op.kind in TENSOR_KINDS else device.cuda_tflops
    t_mem = op_bytes(op) / (device.bandwidth_gbs * 1e9)
    t_math = 2.0 * op.macs / (peak * 1e12)
    return max(t_mem, t_math) + overhead_s, t_mem >= t_math


@dataclass(frozen=True)
class StageCost:
    """Totals of one stage: work, traffic, and per-device predicted time."""

    ops: int
    macs: int
    fvcore_macs: int  # without the ops fvcore skips (the papers' FLOP convention)
    activation_bytes: int
    weight_bytes: int
    time_ms: dict[str, float]  # per device
    bw_bound_share: dict[str, float]  # per device: fraction of time_ms in bandwidth-bound ops

    @property
    def bytes(self) -> int:
        """Activation + weight bytes."""
        return self.activation_bytes + self.weight_bytes


def stage_costs(
    records: Iterable[OpRecord], devices: dict[str, Device], overhead_s: float = 0.0
) -> dict[str, StageCost]:
    """Sum op records into stages (plus ``total``) with predicted times per device."""
    records = list(records)
    groups = {s: [op for op in records if stage_of(op.component) == s] for s in STAGES}
    groups["total"] = records
    return {s: _stage_cost(ops, devices, overhead_s) for s, ops in groups.items()}


def _stage_cost(ops: list[OpRecord], devices: dict[str, Device], overhead_s: float) -> StageCost:
    """Totals and per-device roofline time of one group of ops."""
    time_ms, bw_bound_ms = dict.fromkeys(devices, 0.0), dict.fromkeys(devices, 0.0)
    for op in ops:
        for name, device in devices.items():
            t, bw_bound = op_time(op, device, overhead_s)
            time_ms[name] += t * 1e3
            bw_bound_ms[name] += t * 1e3 if bw_bound else 0.0
    return StageCost(
        ops=len(ops),
        macs=sum(op.macs for op in ops),
        fvcore_macs=sum(op.macs for op in ops if op.counted),
        activation_bytes=sum(op_bytes(op) - op.weight_bytes for op in ops),
        weight_bytes=sum(op.weight_bytes for op in ops),
        time_ms=time_ms,
        bw_bound_share={n: bw_bound_ms[n] / t if t else 0.0 for n, t in time_ms.items()},
    )


def top_decoder_kinds(
    records: Iterable[OpRecord], device: Device, n: int, overhead_s: float = 0.0
) -> list[dict]:
    """Decoder time on ``device`` grouped by op kind, largest first (where the time goes)."""
    groups: dict[str, dict] = {}
    for op in records:
        if stage_of(op.component) != "decoder":
            continue
        t, bw_bound = op_time(op, device, overhead_s)
        g = groups.setdefault(
            op.kind,
            {"kind": op.kind, "ops": 0, "time_ms": 0.0, "bytes": 0, "macs": 0, "bw_bound_ms": 0.0},
        )
        g["ops"] += 1
        g["time_ms"] += t * 1e3
        g["bw_bound_ms"] += t * 1e3 if bw_bound else 0.0
        g["bytes"] += op_bytes(op)
        g["macs"] += op.macs
    return sorted(groups.values(), key=lambda g: -g["time_ms"])[:n]


def analyze(
    configs: Sequence[str],
    sizes: Sequence[tuple[str, tuple[int, int]]],
    devices: dict[str, Device],
    elem_size: int = 2,
    num_classes: int | None = None,
    top: int = 8,
    overhead_us: float = 0.0,
    progress: Callable[[str], None] = print,
) -> dict:
    """Cost of every config at every (padded) size, and speed-ups vs the first config."""
    from ..model.flops import count_ops

    overrides = {"num_classes": num_classes} if num_classes else {}
    baseline = configs[0]
    rows = []
    for size_name, requested in sizes:
        size = pad32(*requested)
        per_config = {}
        for config in configs:
            progress(f"counting {config} at {size[0]}x{size[1]}")
            records = count_ops(config, size, elem_size=elem_size, **overrides)
            per_config[config] = (stage_costs(records, devices, overhead_us * 1e-6), records)
        base = per_config[baseline][0]
        for config, (costs, records) in per_config.items():
            for name, device in devices.items():
                dec, tot = costs["decoder"], costs["total"]
                rows.append(
                    {
                        "config": config,
                        "size_name": size_name,
                        "size": list(size),
                        "requested_size": list(requested),
                        "device": name,
                        "decoder_ms": dec.time_ms[name],
                        "model_ms": tot.time_ms[name],
                        "decoder_speedup": base["decoder"].time_ms[name] / dec.time_ms[name],
                        "model_speedup": base["total"].time_ms[name] / tot.time_ms[name],
                        "decoder_bw_bound_share": dec.bw_bound_share[name],
                        "stages": {s: asdict(c) | {"bytes": c.bytes} for s, c in costs.items()},
                        "decoder_top_kinds": top_decoder_kinds(
                            records, device, top, overhead_us * 1e-6
                        ),
                    }
                )
    return {
        "baseline": baseline,
        "elem_size": elem_size,
        "op_overhead_us": overhead_us,
        "devices": {n: asdict(d) for n, d in devices.items()},
        "rows": rows,
    }


def format_report(result: dict) -> str:
    """Per-stage table at the largest size, then predicted speed-ups by size and device."""
    rows = result["rows"]
    devices = list(result["devices"])
    configs = list(dict.fromkeys(r["config"] for r in rows))
    sizes = list(dict.fromkeys(tuple(r["size"]) for r in rows))
    big = max(sizes, key=lambda s: s[0] * s[1])
    first = devices[0]
    out = [
        f"per-stage cost at {big[0]}x{big[1]}, FP16 ({result['elem_size']} B/element); "
        f"predicted ms on {first} (share of that time in bandwidth-bound ops)"
    ]
    out.append(
        f"{'config':<22}{'stage':<15}{'GMAC':>9}{'act MB':>10}{'wt MB':>8}"
        f"{'ms':>10}{'bw-bound':>10}"
    )
    for r in rows:
        if tuple(r["size"]) != big or r["device"] != first:
            continue
        for stage in (*STAGES, "total"):
            s = r["stages"][stage]
            out.append(
                f"{r['config']:<22}{stage:<15}{s['macs'] / 1e9:>9.1f}"
                f"{s['activation_bytes'] / 1e6:>10.1f}{s['weight_bytes'] / 1e6:>8.1f}"
                f"{s['time_ms'][first]:>10.2f}{100 * s['bw_bound_share'][first]:>9.0f}%"
            )
    for label, key in (("decoder", "decoder_speedup"), ("model", "model_speedup")):
        out.append(f"\npredicted {label} speed-up vs {result['baseline']} (per-op roofline)")
        others = [c for c in configs if c != result["baseline"]]
        out.append(f"{'size':<11}{'device':<11}" + "".join(f"{c[-20:]:>21}" for c in others))
        for size in sizes:
            for device in devices:
                cells = {
                    r["config"]: r
                    for r in rows
                    if tuple(r["size"]) == size and r["device"] == device
                }
                out.append(
                    f"{size[0]:>4}x{size[1]:<6}{device:<11}"
                    + "".join(f"{cells[c][key]:>20.2f}x" for c in others)
                )
    base_big = next(
        r
        for r in rows
        if r["config"] == result["baseline"] and r["device"] == first and tuple(r["size"]) == big
    )
    out.append(
        f"\nwhere {result['baseline']}'s decoder time goes on {first} at "
        f"{big[0]}x{big[1]} (by op kind)"
    )
    for g in base_big["decoder_top_kinds"]:
        out.append(
            f"  {g['kind']:<24}{g['ops']:>4} ops {g['time_ms']:>9.2f} ms "
            f"{g['bytes'] / 1e6:>9.1f} MB {g['macs'] / 1e9:>7.1f} GMAC  "
            f"{100 * g['bw_bound_ms'] / g['time_ms'] if g['time_ms'] else 0:>4.0f}% "
            "bandwidth-bound"
        )
    return "\n".join(out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst costmodel``."""
    parser.add_argument(
        "--configs",
        default=",".join(DEFAULT_CONFIGS),
        help=f"comma-separated configs; the first is the baseline ({BASELINE})",
    )
    parser.add_argument(
        "--sizes",
        default=",".join(NAMED_SIZES),
        help="HxW list or names as for 'compactinst bench'; padded to /32",
    )
    parser.add_argument(
        "--devices",
        default=",".join(DEFAULT_DEVICES),
        help=f"presets ({', '.join(DEVICES)}) or custom 'label:GBps:tensor_TFLOPS[:cuda_TFLOPS]'",
    )
    parser.add_argument(
        "--bytes-per-element",
        type=int,
        default=2,
        choices=(1, 2, 4),
        help="activation/weight element size (2 = FP16)",
    )
    parser.add_argument(
        "--num-classes",
        type=int,
        default=8,
        help="K (default 8: the paper's Cityscapes latency models)",
    )
    parser.add_argument("--top", type=int, default=8, help="op kinds listed for the decoder")
    parser.add_argument(
        "--op-overhead-us",
        type=float,
        default=0.0,
        help="fixed time added per op (kernel launch/tail), e.g. 5; default 0 = pure roofline",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="directory for costmodel.json and costmodel.png (default: print only)",
    )


def run(args: argparse.Namespace) -> int:
    """Count, predict, print; write JSON and the speed-up figure when ``--out`` is given."""
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    if len(configs) < 2:
        raise ConfigError("--configs needs a baseline and at least one config to compare")
    devices = {}
    for spec in (d.strip() for d in args.devices.split(",") if d.strip()):
        device = get_device(spec)
        devices[spec if spec in DEVICES else device.name] = device
    result = analyze(
        configs,
        parse_sizes(args.sizes),
        devices,
        args.bytes_per_element,
        args.num_classes,
        args.top,
        args.op_overhead_us,
        lambda m: print(m, flush=True),
    )
    print()
    print(format_report(result))
    if args.out is not None:
        from .plots import plot_costmodel

        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "costmodel.json").write_text(json.dumps(result, indent=1))
        plot_costmodel(
            [r for r in result["rows"] if r["config"] != result["baseline"]],
            args.out / "costmodel.png",
        )
        print(f"\nwrote {args.out / 'costmodel.json'} and {args.out / 'costmodel.png'}")
    return 0
