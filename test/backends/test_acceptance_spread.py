"""Both sides of the acceptance check on the default bundle's golden inputs: every healthy
implementation of each precision's typed graph that runs here is accepted (ONNX Runtime as
written and fused; OpenVINO under each ISA in test_openvino.py), and every deliberately broken
engine (``acceptance_spread.BROKEN``: graph edits run on ONNX Runtime) is refused by a statistic
set to refuse it, or for its inf/NaN. No figure of one machine is compared here: the verdicts
are the check's own."""

from __future__ import annotations

import numpy as np
import pytest

from compactinst_ros.backends import BackendOptions, acceptance
from compactinst_ros.backends.openvino import ONEDNN_ISAS, host_isas
from compactinst_ros.bundle import PRECISIONS, ModelBundle, default_bundle_path
from compactinst_ros.errors import BackendError
from compactinst_ros.eval.acceptance_spread import (
    BROKEN,
    REFUSES,
    GraphBackend,
    decoder_outputs,
)
from compactinst_ros.variants import runs_fused


@pytest.fixture(scope="module")
def bundle() -> ModelBundle:
    return ModelBundle.load(default_bundle_path())


def _findings(bundle: ModelBundle, precision: str, **kwargs) -> list[acceptance.Finding]:
    """The acceptance findings of ONNX Runtime on ``precision``'s typed graphs (``kwargs``:
    GraphBackend's ``fused`` and ``broken``) on the golden cases; BackendError when refused."""
    backend = GraphBackend(
        bundle, BackendOptions(threads=1, precision=precision, int8_graph="tensorrt"), **kwargs
    )
    try:
        cases = bundle.golden_cases(precision)
        outputs = decoder_outputs(backend, cases)
    finally:
        backend.close()
    return acceptance.check("decoder", precision, cases, outputs)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_other_onnxruntime_mode_is_accepted(bundle: ModelBundle, precision: str) -> None:
    """The golden outputs come from one mode (``runs_fused``); the other mode's kernels (for
    int8: ONNX Runtime's fused integer kernels, which on a CPU without VNNI saturate 16-bit
    sums) are another healthy implementation of the same graph."""
    findings = _findings(bundle, precision, fused=not runs_fused(precision))
    assert findings and all(f.passed for f in findings)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("kind", list(BROKEN))
def test_every_broken_engine_is_refused(bundle: ModelBundle, kind: str, precision: str) -> None:
    with pytest.raises(BackendError, match="fails the acceptance check") as refused:
        _findings(bundle, precision, broken=BROKEN[kind])
    message = str(refused.value)
    expected = [acceptance.DECISION_METRICS[key][0] for key, kinds in REFUSES.items()
                if kind in kinds] or ["non-finite values"]  # fmt: skip
    assert any(metric in message for metric in expected), message


def test_statistics_of_identical_outputs_are_perfect(bundle: ModelBundle) -> None:
    case = bundle.golden_cases("fp32")[0]
    logits, masks = (case.outputs[n][0] for n in ("pred_logits", "pred_masks"))
    stats = acceptance.frame_statistics(logits, masks, logits, masks)
    assert stats["shown"] >= 1
    assert (stats["mask_iou"], stats["score"], stats["flip"], stats["semantic"]) == (1, 0, 0, 1)
    # one shown segment hidden: its mask off everywhere, so it flips and its score change counts
    shown = int(np.argmax(acceptance.segment_scores(logits, masks)))
    hidden = masks.copy()
    hidden[shown] = -10.0
    flipped = acceptance.frame_statistics(logits, masks, logits, hidden)
    assert flipped["flip"] > acceptance.DECISION_TOLERANCE.flip


def test_host_isas_follow_the_cpu_flags() -> None:
    assert host_isas(set()) == []
    assert host_isas({"sse4_1", "avx", "avx2", "fma"}) == ["AVX2"]
    vnni = {"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}
    assert host_isas(vnni) == ["AVX2", "AVX512_CORE", "AVX512_CORE_VNNI"]
    assert set(host_isas()) <= set(ONEDNN_ISAS)
