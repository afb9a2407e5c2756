"""``compactinst info CONFIG --size HxW``: parameters and GMACs per component vs the paper.

The paper column shows only figures the paper states; a relative claim ("about 7 % fewer") is
compared as a ratio, never turned into a number the paper does not give.
"""

from __future__ import annotations

import argparse

from ..sizes import NAMED_SIZES, model_size

_LABELS = {
    "normalize": "input normalisation",
    "backbone": "backbone",
    "pixel_decoder": "pixel decoder (PPM-FPN)",
    "proposal": "  query proposal",
    "transformer": "  transformer layers",
    "heads": "  prediction heads",
    "refinement": "  pooling + refinement",
    "decoder_other": "  pos. embed / attn masks",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst info``."""
    parser.add_argument("config", help="model config name, e.g. compactinst_r18")
    parser.add_argument(
        "--size",
        default="1024x2048",
        help=f"input HEIGHTxWIDTH or a name ({', '.join(NAMED_SIZES)}), padded to a multiple of "
        "32 as bench and costmodel do (default %(default)s)",
    )
    parser.add_argument(
        "--num-classes",
        type=int,
        default=None,
        help="override K (the config's default otherwise; 8 = Cityscapes)",
    )


def _paper(value: float | None, ours: float) -> str:
    if value is None:
        return ""
    return f"paper {value:7.1f}  ({100 * (ours - value) / value:+.1f} %)"


def report(config: str, size: tuple[int, int], num_classes: int | None = None) -> str:
    """The ``info`` table as text (params in M, MACs in G, paper figures where comparable)."""
    import torch

    from .compactinst import build_model
    from .flops import (
        COMPONENTS,
        bytes_by_component,
        count_ops,
        decoder_total,
        macs_by_component,
        params_by_component,
    )

    overrides = {} if num_classes is None else {"num_classes": num_classes}
    with torch.device("meta"):
        model = build_model(config, **overrides)
    model.check_input_size(*size)
    cfg = model.cfg
    records = count_ops(model, size, elem_size=2)
    macs, traffic = macs_by_component(records), bytes_by_component(records)
    params = params_by_component(model)
    paper = cfg.paper or {}
    same_setting = paper.get("size") == size and paper.get("num_classes") == cfg.num_classes
    lines = [
        f"{cfg.name} at {size[0]}x{size[1]}, K={cfg.num_classes} "
        f"(GMACs: 1 multiply-add = 1 FLOP, fvcore convention)",
        f"{'component':30s} {'params (M)':>10s} {'GMACs':>9s} {'GB fp16':>8s}",
    ]
    for comp in COMPONENTS:
        if comp == "proposal":
            dec_p, dec_m = decoder_total(params), decoder_total(macs)
            ref = paper.get("decoder_gmacs") if same_setting else None
            lines.append(
                f"{'decoder (after pixel decoder)':30s} {dec_p / 1e6:10.2f} "
                f"{dec_m / 1e9:9.2f} {decoder_total(traffic) / 1e9:8.2f}  "
                f"{_paper(ref, dec_m / 1e9)}"
            )
        if params[comp] or macs[comp]:
            lines.append(
                f"{_LABELS[comp]:30s} {params[comp] / 1e6:10.2f} "
                f"{macs[comp] / 1e9:9.2f} {traffic[comp] / 1e9:8.2f}"
            )
    total_p, total_m = sum(params.values()), sum(macs.values())
    ref_p = paper.get("params_m") if cfg.num_classes == 80 else None
    ref_m = paper.get("total_gmacs") if same_setting else None
    lines.append(
        f"{'total':30s} {total_p / 1e6:10.2f} {total_m / 1e9:9.2f} "
        f"{sum(traffic.values()) / 1e9:8.2f}  {_paper(ref_m, total_m / 1e9)}"
    )
    if ref_p is not None:
        lines.append(f"{'':30s} params {_paper(ref_p, total_p / 1e6)}")
    lines.append(
        "(GB fp16: bytes read + written per op in isolation, no fusion; see docs/model.md)"
    )
    if same_setting and "fewer_total_than" in paper:
        lines.append(_relative_claim(paper["fewer_total_than"], total_m, size, cfg.num_classes))
    if "size" in paper and not same_setting:
        h, w = paper["size"]
        lines.append(
            f"(paper GMACs are for {h}x{w}, K={paper['num_classes']}: "
            f"--size {h}x{w} --num-classes {paper['num_classes']})"
        )
    if "params_m" in paper and ref_p is None:
        lines.append("(paper parameter count is for K=80: omit --num-classes)")
    return "\n".join(line.rstrip() for line in lines)


def _relative_claim(
    claim: tuple[str, float], total_macs: int, size: tuple[int, int], num_classes: int
) -> str:
    """The paper's "about P % fewer than CONFIG" against ours, counted for both here."""
    from .flops import count_ops, macs_by_component

    other, percent = claim
    other_macs = sum(macs_by_component(count_ops(other, size, num_classes=num_classes)).values())
    ours = 100 * (1 - total_macs / other_macs)
    return (
        f"(paper: about {percent:g} % fewer GMACs than {other}, no absolute figure; "
        f"ours {ours:.1f} % fewer than {other}'s {other_macs / 1e9:.2f})"
    )


def run(args: argparse.Namespace) -> int:
    """Print the table for ``args.config``."""
    requested, size = model_size(args.size)
    if size != requested:
        print(f"input {requested[0]}x{requested[1]} padded to {size[0]}x{size[1]} (multiple of 32)")
    print(report(args.config, size, args.num_classes))
    return 0
