"""Input/output QoS: depth-1 input whose reliability follows the image publishers."""

from __future__ import annotations

from collections.abc import Iterable

from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
)

from ..errors import ConfigError

#: parameter value -> policy; ``auto`` follows the publishers (see ``matched_reliability``)
RELIABILITY_CHOICES: dict[str, ReliabilityPolicy | None] = {
    "auto": None,
    "reliable": ReliabilityPolicy.RELIABLE,
    "best_effort": ReliabilityPolicy.BEST_EFFORT,
}


def parse_reliability(name: str, value: str, allow_auto: bool = True) -> ReliabilityPolicy | None:
    """Policy for a parameter value; ConfigError listing the choices otherwise."""
    choices = [c for c in RELIABILITY_CHOICES if allow_auto or c != "auto"]
    if value not in choices:
        raise ConfigError(f"parameter {name}='{value}' is invalid; choose one of {choices}")
    return RELIABILITY_CHOICES[value]


def reliability_name(policy: ReliabilityPolicy) -> str:
    """``reliable`` or ``best_effort`` for logs and diagnostics."""
    return "reliable" if policy == ReliabilityPolicy.RELIABLE else "best_effort"


def matched_reliability(publisher_infos: Iterable[object]) -> ReliabilityPolicy | None:
    """Reliability that receives from every publisher: best effort if any publisher is.

    A reliable subscription never matches a best-effort publisher, while a best-effort
    subscription matches both; reliable is preferred when possible because FastDDS without
    the shared-memory profile loses large best-effort images. None when there is no publisher.
    """
    policies = [info.qos_profile.reliability for info in publisher_infos]  # type: ignore[attr-defined]
    if not policies:
        return None
    if any(p == ReliabilityPolicy.BEST_EFFORT for p in policies):
        return ReliabilityPolicy.BEST_EFFORT
    return ReliabilityPolicy.RELIABLE


def frame_qos(reliability: ReliabilityPolicy) -> QoSProfile:
    """Keep-last(1), volatile, for input and output frames: the newest frame only, compatible
    with any durability; inputs follow the publishers' reliability, outputs are reliable unless
    configured otherwise so that any subscriber matches."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=1,
        reliability=reliability,
        durability=DurabilityPolicy.VOLATILE,
    )


#: packets a video input keeps while the callback is busy: each one is needed (a lost packet
#: costs every picture up to the next keyframe), one second at 30 Hz
STREAM_DEPTH = 30


def stream_qos(reliability: ReliabilityPolicy) -> QoSProfile:
    """``frame_qos`` for a video input (FFMPEGPacket, CompressedVideo): keep-last(STREAM_DEPTH),
    since a packet overwritten in the reader's history would break its stream's decoding."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=STREAM_DEPTH,
        reliability=reliability,
        durability=DurabilityPolicy.VOLATILE,
    )


def latched_qos() -> QoSProfile:
    """Transient-local depth 1 for label tables: late subscribers still get the last one."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=1,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL,
    )
