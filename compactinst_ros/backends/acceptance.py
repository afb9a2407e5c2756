"""Acceptance of a newly built engine: its outputs on the bundle's golden inputs must agree with
the typed graph's CPU outputs (``ModelBundle.golden_cases``) within the tolerances.

The decoder is judged by the decisions the post-processing makes from it (docs/postprocess.md),
each golden query against its engine query (``nearest_queries``: near-tied proposals may swap
places): over the segments either side shows, a low percentile of their mask IoU, a high
percentile of their class probability difference and the score change of any segment only one
side shows; over all queries, the semantic class at mask resolution (``class_maps`` with its
void floor); and no inf or NaN (``frame_statistics``). The limits are derived from the measured
spread of healthy implementations and broken engines (``eval/acceptance_spread.py``, docs/gpu.md).
Any other output (the encoder's features, where the golden file holds them) is compared by its
largest error relative to the reference's range. Pure numpy: the TensorRT side (running the
engine) lives in trt_build.py.
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
from .base import BackendOptions

#: a golden query is compared with another engine query only where that one is this much nearer
#: than the query in its own place (``nearest_queries``): swapped near-ties are orders nearer
REMATCH_COST = 0.5
#: A query's mask counts for the IoU check when its golden or engine mask covers this many texels
#: (smaller masks flip on a single texel near logit 0).
MIN_MASK_TEXELS = 16


@dataclass(frozen=True)
class Tolerance:
    """How far an engine may be from its graph's CPU outputs on the golden inputs, in decisions
    the post-processing makes (``frame_statistics``)."""

    mask_iou: float  # lowest IoU percentile MASK_IOU_PERCENTILE over the shown segments
    score: float  # largest class probability difference percentile SCORE_PERCENTILE over them
    flip: float  # largest score change of a segment that one side shows and the other hides
    semantic: float  # lowest fraction of mask texels whose semantic class agrees
    relative: float  # largest error of any other output, relative to its reference's range


#: Derived from the measured spread of healthy implementations and broken engines on the
#: golden inputs (``python -m compactinst_ros.eval.acceptance_spread``; the measurement, the
#: margins and the derivation: docs/gpu.md, "Acceptance"): each limit lies halfway between the
#: worst healthy implementation and the best broken engine the statistic refuses. The decision
#: statistics are the same for every precision: what an engine must not change is what the
#: post-processing shows, and the FP32 and FP16 implementations measured here agree to the last
#: digit, which would set no limit another machine's kernels could be held to.
DECISION_TOLERANCE = Tolerance(
    mask_iou=0.855, score=0.136, flip=0.145, semantic=0.5, relative=0.1
)
#: the other outputs' (the encoder features') largest relative error, per precision
TOLERANCES: dict[str, Tolerance] = {
    precision: replace(DECISION_TOLERANCE, relative=relative)
    for precision, relative in (("fp32", 1e-3), ("fp16", 0.02), ("int8", 0.1))
}
#: the percentiles the mask IoU and class probability statistics take over a frame's shown
#: segments: one query's tail (a near-tied mask border) moves them little, a wrong layer a lot
MASK_IOU_PERCENTILE = 10
SCORE_PERCENTILE = 95


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


def mask_ious(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Per-query IoU of (…, Q, h, w) mask logits binarised at 0, over the queries whose union
    covers at least MIN_MASK_TEXELS texels."""
    a = want.reshape(-1, *want.shape[-2:]) > 0
    b = got.reshape(-1, *got.shape[-2:]) > 0
    inter = (a & b).sum(axis=(1, 2))
    union = (a | b).sum(axis=(1, 2))
    counted = union >= MIN_MASK_TEXELS
    return inter[counted] / union[counted]


def semantic_labels(class_logits: np.ndarray, mask_logits: np.ndarray) -> np.ndarray:
    """(h, w) semantic class index at mask resolution (-1 = void) of one frame's (Q, K+1) class
    and (Q, h, w) mask logits, by the semantic rule's class maps and void floor."""
    maps = class_maps(softmax(class_logits)[:, :-1], sigmoid(mask_logits.astype(np.float32)))
    best = maps.argmax(axis=0)
    return np.where(maps.max(axis=0) >= SEMANTIC_VOID_FLOOR, best, -1)


def segment_scores(class_logits: np.ndarray, mask_logits: np.ndarray) -> np.ndarray:
    """(Q,) score of each query of one frame as the instance rule computes it: its best class
    probability (void excluded) times its mask score (``mask_scores`` over the whole grid)."""
    from ..postprocess.instance import mask_scores

    masks = np.ascontiguousarray(mask_logits, np.float32)
    h, w = masks.shape[-2:]
    probs = softmax(class_logits.astype(np.float32))[:, :-1].max(axis=1)
    return probs * mask_scores(masks, sigmoid(masks), h, w, np.float32(0.0))


def frame_statistics(
    want_logits: np.ndarray, want_masks: np.ndarray, got_logits: np.ndarray, got_masks: np.ndarray
) -> dict[str, float]:
    """The acceptance statistics of one frame: (Q, K+1) class and (Q, h, w) mask logits,
    ``got``'s queries already ``matched`` to ``want``'s.

    A segment is shown where its score (``segment_scores``) reaches the default score
    threshold, on either side; the others never become instances, and their masks, near logit
    0 almost everywhere, flip texels under any change of arithmetic. Over the shown segments:
    ``mask_iou``, the MASK_IOU_PERCENTILE of their mask IoU; ``score``, the SCORE_PERCENTILE of
    their largest class probability difference; ``flip``, the largest score change of a segment
    one side shows and the other hides (0 without one: a near-threshold segment that flips
    under a small change is no error). ``semantic``: the fraction of mask texels whose semantic
    class agrees, over all queries. ``shown``: how many segments were shown."""
    threshold = PostprocessOptions().score_threshold
    want_score = segment_scores(want_logits, want_masks)
    got_score = segment_scores(got_logits, got_masks)
    shown_want, shown_got = want_score >= threshold, got_score >= threshold
    shown = shown_want | shown_got
    ious = mask_ious(want_masks[shown], got_masks[shown])
    probs = np.abs(softmax(want_logits) - softmax(got_logits)).max(axis=-1)[shown]
    flipped = shown_want != shown_got
    labels = (semantic_labels(want_logits, want_masks), semantic_labels(got_logits, got_masks))
    return {
        "mask_iou": float(np.percentile(ious, MASK_IOU_PERCENTILE)) if ious.size else 1.0,
        "score": float(np.percentile(probs, SCORE_PERCENTILE)) if probs.size else 0.0,
        "flip": float(np.abs(want_score - got_score)[flipped].max(initial=0.0)),
        "semantic": float((labels[0] == labels[1]).mean()),
        "shown": float(shown.sum()),
    }


#: decoder statistic -> (what the finding calls it, the Tolerance field, higher is better)
DECISION_METRICS = {
    "mask_iou": (f"mask IoU, {MASK_IOU_PERCENTILE}th percentile of the shown segments",
                 "mask_iou", True),
    "score": (f"class probability error, {SCORE_PERCENTILE}th percentile of the shown segments",
              "score", False),
    "flip": ("score change of a segment shown on one side only", "flip", False),
    "semantic": ("semantic agreement", "semantic", True),
}  # fmt: skip
#: the tensor the decision findings name: they read both decoder outputs
DECISIONS = "pred_logits x pred_masks"


def compare(
    want: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], tol: Tolerance, case: int
) -> list[Finding]:
    """Findings for every golden tensor of one case that the engine also produced: non-finite
    decoder outputs, the decoder's ``frame_statistics`` (its queries ``matched`` to the golden
    ones) and any other output's error relative to its reference's range."""
    findings = []
    for name in sorted(set(want) & set(got)):
        if np.shape(want[name]) != np.shape(got[name]):
            raise BackendError(
                f"engine output '{name}' is {np.shape(got[name])}, the golden output "
                f"{np.shape(want[name])}; the golden file belongs to another export of this "
                "model: re-export the bundle"
            )
    decoder = all(n in want and n in got for n in DECODER_OUTPUTS)
    if decoder:
        bad = {n: int((~np.isfinite(np.asarray(got[n]))).sum()) for n in DECODER_OUTPUTS}
        findings += [Finding(n, "non-finite values", count, 0, False, case)
                     for n, count in bad.items()]  # fmt: skip
        if not any(bad.values()):
            paired = matched(want, got)
            frames = zip(*(np.asarray(d[n], np.float32).reshape(-1, *np.shape(d[n])[-2 - i:])
                           for d in (want, paired) for i, n in enumerate(DECODER_OUTPUTS)),
                         strict=True)  # fmt: skip
            for want_l, want_m, got_l, got_m in frames:
                stats = frame_statistics(want_l, want_m, got_l, got_m)
                findings += [
                    Finding(DECISIONS, metric, stats[key], getattr(tol, field), at_least, case)
                    for key, (metric, field, at_least) in DECISION_METRICS.items()
                ]
    for name in sorted(set(want) & set(got) - (set(DECODER_OUTPUTS) if decoder else set())):
        a, b = np.asarray(want[name], np.float32), np.asarray(got[name], np.float32)
        span = max(float(np.abs(a).max()), 1e-6)
        err = float(np.abs(a - b).max()) / span
        findings.append(Finding(name, "relative error", err, tol.relative, False, case))
    return findings


def tensorrt_remedy(options: BackendOptions | None = None) -> str:
    """What a failed TensorRT engine's error advises, its settings written as ``options``
    says (the command line's by default, the node's for the node)."""
    options = options or BackendOptions()
    return (
        "The engine was not cached. Rebuild with another TensorRT version or precision "
        f"({options.setting('precision', 'fp32')}), or re-export the typed graph and its "
        "golden outputs"
    )


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
    remedy: str | None = None,
) -> list[Finding]:
    """All findings of one stage's engine: ``outputs`` per run, slot s of run r (dim 0) holding
    case ``slots[r][s]`` (None: one run per case at batch 1). BackendError naming the stage,
    the batch size and the worst tensor when any is outside ``precision``'s tolerance;
    ``engine`` names what was checked, ``remedy`` what to do about it (None:
    ``tensorrt_remedy``'s, on the command line)."""
    tol = TOLERANCES[precision]
    remedy = tensorrt_remedy() if remedy is None else remedy
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

