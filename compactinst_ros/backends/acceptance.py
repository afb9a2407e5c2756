"""Acceptance of a newly built engine: its outputs on the bundle's golden inputs must agree with
the typed graph's CPU outputs (``ModelBundle.golden_cases``) within the precision's tolerances.

The decoder is judged as the post-processing reads it (docs/postprocess.md), each golden query
against its engine query (``nearest_queries``: near-tied proposals may swap places): mask IoU
with the masks binarised at logit 0 and class probabilities (softmax over K+1, as instance
selection and the semantic rule take them), both over the queries the default post-processing
could show, and the semantic class at mask resolution over all queries (``class_maps`` with its
void floor). Any other output (the encoder's features, where the golden file holds them) is
compared by its largest error relative to the reference's range. Pure numpy: the TensorRT side
(running the engine) lives in trt_build.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..bundle import DECODER_OUTPUTS, GoldenCase
from ..errors import BackendError
from ..postprocess.resample import sigmoid, softmax
from ..postprocess.semantic import SEMANTIC_VOID_FLOOR, class_maps
from ..structures import PostprocessOptions, RawOutputs

#: a golden query is compared with another engine query only where that one is this much nearer
#: than the query in its own place (``nearest_queries``): swapped near-ties are orders nearer
REMATCH_COST = 0.5
#: what a failed TensorRT engine's error advises
TENSORRT_REMEDY = (
    "The engine was not cached. Rebuild with another TensorRT version or precision "
    "(--precision fp32), or re-export the typed graph and its golden outputs"
)
#: A query's mask counts for the IoU check when its golden or engine mask covers this many texels
#: (smaller masks flip on a single texel near logit 0).
MIN_MASK_TEXELS = 16


@dataclass(frozen=True)
class Tolerance:
    """How far an engine may be from its graph's CPU outputs on the golden inputs."""

    mask_iou: float  # lowest IoU of a query's mask, binarised at logit 0
    score: float  # largest absolute difference of a class probability
    semantic: float  # lowest fraction of mask texels whose semantic class agrees
    relative: float  # largest error of any other output, relative to its reference's range


#: Per precision. The reference is the same typed graph on the CPU, so what differs is TensorRT's
#: kernel choice and summation order: FP32 (TF32 off) agrees closely; FP16 and INT8 tensors
#: round at every layer, which moves masks at their borders and probabilities by a few percent.
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(mask_iou=0.99, score=1e-3, semantic=0.995, relative=1e-3),
    "fp16": Tolerance(mask_iou=0.95, score=0.02, semantic=0.98, relative=0.02),
    "int8": Tolerance(mask_iou=0.85, score=0.05, semantic=0.95, relative=0.1),
}


@dataclass(frozen=True)
class Finding:
    """One measured agreement: ``value`` against ``limit`` (higher is better when ``at_least``)."""

    tensor: str
    metric: str
    value: float
    limit: float
    at_least: bool
    case: int
    slot: int = 0  # the case's slot in the engine's batch

    @property
    def passed(self) -> bool:
        """Whether the value is within the limit."""
        return self.value >= self.limit if self.at_least else self.value <= self.limit

    @property
    def excess(self) -> float:
        """How far past the limit, relative to it (orders the failures: the worst is largest)."""
        if self.at_least:
            return (self.limit - self.value) / max(1.0 - self.limit, 1e-6)
        return (self.value - self.limit) / max(self.limit, 1e-12)


def nearest_queries(
    want_logits: np.ndarray, want_masks: np.ndarray, got_logits: np.ndarray, got_masks: np.ndarray
) -> np.ndarray:
    """For each query of one frame's (Q, K+1) class and (Q, h, w) mask logits ``want``, the
    index of the ``got`` query nearest in both (mean |difference| of each over its ``want``
    range, summed), where it is at most REMATCH_COST of the query in the same place; else that
    query. The decoder's top-k proposal selection reorders near-tied queries when the arithmetic
    changes in the last bits: that moves no mask and no result, but would fail a query-by-query
    comparison. A wrong engine, whose queries all differ from the golden ones, keeps its order,
    so the check blames the output that is wrong."""

    def cost(want: np.ndarray, got: np.ndarray) -> np.ndarray:
        flat_want, flat_got = want.reshape(len(want), -1), got.reshape(len(got), -1)
        span = float(flat_want.max() - flat_want.min()) or 1.0
        return np.stack([np.abs(flat_got - row).mean(axis=1) for row in flat_want]) / span

    costs = cost(want_logits, got_logits) + cost(want_masks, got_masks)
    nearest = costs.argmin(axis=1)
    queries = np.arange(len(costs))
    closer = costs[queries, nearest] <= REMATCH_COST * costs[queries, queries]
    return np.where(closer, nearest, queries)


def graph_outputs(raw: RawOutputs) -> dict[str, np.ndarray]:
    """One frame's decoder outputs as the decoder graph names and shapes them (batch of 1), the
    form golden outputs are stored and compared in."""
    return {DECODER_OUTPUTS[0]: raw.class_logits[None], DECODER_OUTPUTS[1]: raw.mask_logits[None]}


def matched(
    want: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """``got`` with each frame's decoder queries in the order of their nearest ``want`` queries
    (``nearest_queries``); the other tensors as they are."""
    if not all(n in want and n in got for n in DECODER_OUTPUTS):
        return dict(got)
    logits, masks = (np.asarray(got[n], np.float32) for n in DECODER_OUTPUTS)
    want_logits, want_masks = (np.asarray(want[n], np.float32) for n in DECODER_OUTPUTS)
    frames = masks.reshape(-1, *masks.shape[-3:])
    flat_logits = logits.reshape(-1, *logits.shape[-2:])
    order = [
        nearest_queries(wl, wm, gl, gm)
        for wl, wm, gl, gm in zip(want_logits.reshape(flat_logits.shape),
                                  want_masks.reshape(frames.shape), flat_logits, frames,
                                  strict=True)
    ]  # fmt: skip
    return {
        **got,
        DECODER_OUTPUTS[0]: np.stack([f[i] for f, i in zip(flat_logits, order, strict=True)])
        .reshape(logits.shape),
        DECODER_OUTPUTS[1]: np.stack([f[i] for f, i in zip(frames, order, strict=True)])
        .reshape(masks.shape),
    }  # fmt: skip


def mask_iou(want: np.ndarray, got: np.ndarray) -> float:
    """Lowest per-query IoU of (…, Q, h, w) mask logits binarised at 0, over the queries whose
    union covers at least MIN_MASK_TEXELS texels (1.0 when none does)."""
    a = want.reshape(-1, *want.shape[-2:]) > 0
    b = got.reshape(-1, *got.shape[-2:]) > 0
    inter = (a & b).sum(axis=(1, 2))
    union = (a | b).sum(axis=(1, 2))
    counted = union >= MIN_MASK_TEXELS
    if not counted.any():
        return 1.0
    return float((inter[counted] / union[counted]).min())


def semantic_labels(class_logits: np.ndarray, mask_logits: np.ndarray) -> np.ndarray:
    """(h, w) semantic class index at mask resolution (-1 = void) of one frame's (Q, K+1) class
    and (Q, h, w) mask logits, by the semantic rule's class maps and void floor."""
    maps = class_maps(softmax(class_logits)[:, :-1], sigmoid(mask_logits.astype(np.float32)))
    best = maps.argmax(axis=0)
    return np.where(maps.max(axis=0) >= SEMANTIC_VOID_FLOOR, best, -1)


def shown_queries(want: np.ndarray, got: np.ndarray, tol: Tolerance) -> np.ndarray:
    """(…, Q) bool of two (…, Q, K+1) class logits: the queries the default post-processing
    could show in either, their top object probability at least its score threshold less the
    precision's probability tolerance. The others never become instances, and their masks,
    near logit 0 almost everywhere, flip texels under any change of arithmetic (INT8 kernels
    other than the graph's as-written Q/DQ: mask IoU down to 0.24 at AP -0.08); the semantic
    check still reads every query."""
    floor = PostprocessOptions().score_threshold - tol.score

    def top(logits: np.ndarray) -> np.ndarray:
        return softmax(logits)[..., :-1].max(axis=-1)

    return (top(want) >= floor) | (top(got) >= floor)


def compare(
    want: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], tol: Tolerance, case: int
) -> list[Finding]:
    """Findings for every golden tensor of one case that the engine also produced, its decoder
    queries ``matched`` to the golden ones; class probabilities and masks are judged on the
    ``shown_queries``."""
    findings = []
    for name in sorted(set(want) & set(got)):
        if np.shape(want[name]) != np.shape(got[name]):
            raise BackendError(
                f"engine output '{name}' is {np.shape(got[name])}, the golden output "
                f"{np.shape(want[name])}; the golden file belongs to another export of this "
                "model: re-export the bundle"
            )
    got = matched(want, got)
    shown = None
    if all(n in want and n in got for n in DECODER_OUTPUTS):
        shown = shown_queries(*(np.asarray(d[DECODER_OUTPUTS[0]], np.float32) for d in (want, got)),
                              tol)  # fmt: skip
    for name in sorted(set(want) & set(got)):
        a, b = np.asarray(want[name], np.float32), np.asarray(got[name], np.float32)
        if name == DECODER_OUTPUTS[0]:
            diffs = np.abs(softmax(a) - softmax(b)).max(axis=-1)
            diff = float(diffs[shown].max(initial=0.0) if shown is not None else diffs.max())
            findings.append(Finding(name, "class probability error", diff, tol.score, False, case))
        elif name == DECODER_OUTPUTS[1]:
            iou = mask_iou(a[shown], b[shown]) if shown is not None else mask_iou(a, b)
            findings.append(Finding(name, "lowest mask IoU", iou, tol.mask_iou, True, case))
        else:
            span = max(float(np.abs(a).max()), 1e-6)
            err = float(np.abs(a - b).max()) / span
            findings.append(Finding(name, "relative error", err, tol.relative, False, case))
    if all(n in want and n in got for n in DECODER_OUTPUTS):
        logits, masks = (np.asarray(want[n], np.float32) for n in DECODER_OUTPUTS)
        g_logits, g_masks = (np.asarray(got[n], np.float32) for n in DECODER_OUTPUTS)
        frames = zip(logits.reshape(-1, *logits.shape[-2:]), masks.reshape(-1, *masks.shape[-3:]),
                     g_logits.reshape(-1, *g_logits.shape[-2:]),
                     g_masks.reshape(-1, *g_masks.shape[-3:]), strict=True)  # fmt: skip
        agree = min(
            float((semantic_labels(wl, wm) == semantic_labels(gl, gm)).mean())
            for wl, wm, gl, gm in frames
        )
        semantic = "pred_logits x pred_masks"
        findings.append(Finding(semantic, "semantic agreement", agree, tol.semantic, True, case))
    return findings


def slot_cases(count: int, batch: int) -> list[list[int]]:
    """Golden case index in each slot of each acceptance run at ``batch``: every one of the
    ``count`` cases once, cycled to fill the last run's spare slots; [] without cases."""
    runs = -(-count // batch)
    return [[(run * batch + slot) % count for slot in range(batch)] for run in range(runs)]


def check(
    stage: str,
    precision: str,
    cases: Sequence[GoldenCase],
    outputs: Sequence[Mapping[str, np.ndarray]],
    slots: Sequence[Sequence[int]] | None = None,
    engine: str = "TensorRT engine",
    remedy: str = TENSORRT_REMEDY,
) -> list[Finding]:
    """All findings of one stage's engine: ``outputs`` per run, slot s of run r (dim 0) holding
    case ``slots[r][s]`` (None: one run per case at batch 1). BackendError naming the stage,
    the batch size and the worst tensor when any is outside ``precision``'s tolerance;
    ``engine`` names what was checked, ``remedy`` what to do about it."""
    tol = TOLERANCES[precision]
    slots = [[i] for i in range(len(cases))] if slots is None else slots
    findings = [
        replace(f, slot=slot)
        for run, got in zip(slots, outputs, strict=True)
        for slot, case in enumerate(run)
        for f in compare(
            cases[case].outputs, {n: v[slot : slot + 1] for n, v in got.items()}, tol, case
        )
    ]
    batch = len(slots[0]) if slots else 1
    failed = [f for f in findings if not f.passed]
    if failed:
        worst = max(failed, key=lambda f: f.excess)
        bound = "at least" if worst.at_least else "at most"
        raise BackendError(
            f"the {precision} {engine} of stage '{stage}' at batch {batch} fails the "
            f"acceptance check on the bundle's golden inputs: worst tensor '{worst.tensor}', "
            f"{worst.metric} {worst.value:.4g} on golden case {worst.case} in slot {worst.slot} "
            f"({bound} {worst.limit:g} for {precision}; {len(failed)} of {len(findings)} checks "
            f"failed). {remedy}"
        )
    return findings
