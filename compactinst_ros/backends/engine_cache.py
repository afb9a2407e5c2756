"""TensorRT engine cache: key, sidecar JSON and staleness rules (pure Python, no TensorRT).

An engine is only valid for the exact ONNX bytes, TensorRT version, GPU model and build options
that produced it. Each cache entry is ``<stage>-<digest>.engine`` plus ``<stage>-<digest>.json``
holding the full key and the engine's own sha256; the timing cache is shared per TensorRT and
CUDA version and GPU module (name, SM count and memory: CUDA names every Orin module "Orin").
``resolve`` loads a matching entry, rebuilds anything stale, foreign or corrupt (including an
engine that TensorRT refuses to deserialize) and stores a new engine only once it passes the
caller's acceptance check, or refuses with a message naming the fix when building is disabled.

Deserializing an engine runs code of whoever wrote it, so the cache reads and writes only
owner-only folders and files, by the rules of ``compactinst_ros/private_files.py``.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import TypeVar

from ..errors import BackendError
from ..private_files import check_private_folder, read_private, write_private

SIDECAR_FORMAT = 1

T = TypeVar("T")


@dataclass(frozen=True)
class DeviceInfo:
    """The GPU an engine is built for (engines do not move between GPU models)."""

    name: str
    compute_capability: str  # "8.7"
    sm_count: int
    memory_mib: int = 0  # total device memory: tells the Orin modules apart with the SM count
    cuda_driver: int = 0  # CUDA driver version, e.g. 12060 for 12.6


@dataclass(frozen=True)
class EngineKey:
    """Everything an engine depends on; two engines with equal keys are interchangeable."""

    stage: str
    onnx_sha256: str
    trt_version: str
    gpu_name: str
    compute_capability: str
    sm_count: int
    precision: str
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    options: dict[str, int | str] = field(default_factory=dict)
    gpu_memory_mib: int = 0
    cuda_driver: int = 0

    def to_json(self) -> dict:
        """Plain dict, stable field order (stored in the sidecar)."""
        return asdict(self)

    @property
    def digest(self) -> str:
        """16 hex chars of sha256 over the canonical JSON of the key."""
        blob = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class CacheStatus(Enum):
    """What the cache holds for a key."""

    HIT = "hit"
    MISSING = "missing"
    STALE = "stale"  # sidecar describes a different key (other TRT, GPU, ONNX or options)
    CORRUPT = "corrupt"  # sidecar unreadable or engine bytes do not match it


@dataclass(frozen=True)
class Lookup:
    """Result of ``EngineCache.lookup``: status, a human reason and the entry's paths."""

    status: CacheStatus
    reason: str
    engine_path: Path
    sidecar_path: Path


def slug(text: str) -> str:
    """``text`` as a file-name part: runs of anything but letters, digits, ``_.-`` as one ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class EngineCache:
    """A folder of serialized engines with sidecars; writes are atomic (temp file + rename)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def check_root(self, create: bool = False) -> None:
        """BackendError unless the cache folder and those above it are private (module doc);
        ``create`` makes missing folders 0700 first."""
        check_private_folder(self.root, create)

    def paths(self, key: EngineKey) -> tuple[Path, Path]:
        """Engine and sidecar paths of ``key``."""
        stem = f"{slug(key.stage)}-{key.digest}"
        return self.root / f"{stem}.engine", self.root / f"{stem}.json"

    def timing_cache_path(self, key: EngineKey) -> Path:
        """Timing cache shared by every engine built with this TensorRT and CUDA version on this
        GPU module (the name alone is "Orin" on every Orin module; SM count and memory differ)."""
        trt = slug(key.trt_version).replace(".", "")
        sm = key.compute_capability.replace(".", "")
        module = f"{key.sm_count}sm-{key.gpu_memory_mib}mib"
        return self.root / (
            f"timing-trt{trt}-cuda{key.cuda_driver}-{slug(key.gpu_name)}-sm{sm}-{module}.cache"
        )

    def lookup(self, key: EngineKey) -> Lookup:
        """Check the entry for ``key`` without reading the engine into TensorRT."""
        return self._load(key)[0]

    def _load(self, key: EngineKey) -> tuple[Lookup, bytes | None]:
        """The lookup and, for a hit, the engine bytes that were hashed (read once)."""
        self.check_root()
        engine, sidecar = self.paths(key)
        if not engine.is_file() or not sidecar.is_file():
            return Lookup(CacheStatus.MISSING, "no cached engine", engine, sidecar), None
        try:
            meta = json.loads(read_private(sidecar))
            stored_key = meta["key"]
            stored_sha = meta["engine_sha256"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            reason = f"sidecar {sidecar.name} unreadable ({exc})"
            return Lookup(CacheStatus.CORRUPT, reason, engine, sidecar), None
        wanted = key.to_json()
        if stored_key != wanted:
            diff = (
                sorted(k for k in wanted if stored_key.get(k) != wanted[k])
                if isinstance(stored_key, dict)
                else ["key"]
            )
            reason = f"built for a different {', '.join(diff)}"
            return Lookup(CacheStatus.STALE, reason, engine, sidecar), None
        blob = read_private(engine)
        if _sha256(blob) != stored_sha:
            reason = f"{engine.name} does not match its sidecar hash"
            return Lookup(CacheStatus.CORRUPT, reason, engine, sidecar), None
        return Lookup(CacheStatus.HIT, "cached engine matches", engine, sidecar), blob

    def store(self, key: EngineKey, blob: bytes, build_seconds: float = 0.0) -> Path:
        """Write the engine, then its sidecar (a reader never sees a sidecar without engine)."""
        self.check_root(create=True)
        engine, sidecar = self.paths(key)
        write_private(engine, blob)
        meta = {
            "format": SIDECAR_FORMAT,
            "key": key.to_json(),
            "engine_sha256": _sha256(blob),
            "engine_bytes": len(blob),
            "build_seconds": round(build_seconds, 1),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        write_private(sidecar, (json.dumps(meta, indent=2) + "\n").encode())
        return engine

    def resolve(
        self,
        key: EngineKey,
        deserialize: Callable[[bytes], T | None],
        build: Callable[[EngineKey, Path], bytes] | None,
        log: Callable[[str], None] = print,
        accept: Callable[[T], None] | None = None,
    ) -> T:
        """The deserialized engine for ``key``: cached if valid, else rebuilt when ``build``.

        ``deserialize`` returns None for an engine TensorRT rejects (version or device
        mismatch, truncated file); that counts as corrupt. ``build`` gets the key and the timing
        cache path and returns serialized engine bytes; None disables building. ``accept`` runs
        on a newly built engine before it is stored and raises to refuse it: a refused engine
        is not cached.
        """
        found, blob = self._load(key)
        if blob is not None:
            engine = deserialize(blob)
            if engine is not None:
                return engine
            found = Lookup(
                CacheStatus.CORRUPT,
                "TensorRT could not deserialize it",
                found.engine_path,
                found.sidecar_path,
            )
        if build is None:
            raise BackendError(
                f"no usable TensorRT engine for stage '{key.stage}' in {self.root} "
                f"({found.status.value}: {found.reason}) and building is disabled; run "
                f"'compactinst build-engine BUNDLE --cache-dir {self.root}' on this device "
                "(same GPU and TensorRT) or set allow_build"
            )
        log(
            f"no usable TensorRT engine for '{key.stage}' in the cache "
            f"({found.status.value}: {found.reason}); making one"
        )
        self.check_root(create=True)
        start = time.monotonic()
        blob = build(key, self.timing_cache_path(key))
        seconds = time.monotonic() - start
        engine = deserialize(blob)
        if engine is None:
            raise BackendError(
                f"TensorRT built an engine for stage '{key.stage}' but cannot deserialize it; "
                "check the TensorRT installation (library and Python bindings must match)"
            )
        if accept is not None:
            accept(engine)
        self.store(key, blob, seconds)
        return engine

    def discard(self, key: EngineKey) -> None:
        """Remove the entry of ``key`` (engine and sidecar), if there is one."""
        for path in self.paths(key):
            path.unlink(missing_ok=True)
