"""Engine cache key, sidecar and staleness rules, with stand-in build/deserialize callables
(the cache logic is pure Python; TensorRT itself is exercised in scripts/gpu_check.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from compactinst_ros.backends.engine_cache import CacheStatus, EngineCache, EngineKey
from compactinst_ros.errors import BackendError


def make_key(**changes: object) -> EngineKey:
    key = EngineKey(
        stage="encoder",
        onnx_sha256="ab" * 32,
        trt_version="10.3.0",
        gpu_name="Orin",
        compute_capability="8.7",
        sm_count=8,
        precision="fp16",
        input_shapes={"image": [1, 3, 512, 1024]},
        options={"opt_level": 3, "workspace_mib": 1024},
        gpu_memory_mib=7620,
        cuda_driver=12060,
    )
    return dataclasses.replace(key, **changes)


class Recorder:
    """Counts builds; 'deserializes' any blob starting with ENGINE (None otherwise)."""

    def __init__(self) -> None:
        self.builds: list[tuple[EngineKey, Path]] = []

    def build(self, key: EngineKey, timing: Path) -> bytes:
        self.builds.append((key, timing))
        return b"ENGINE:" + key.digest.encode()

    @staticmethod
    def deserialize(blob: bytes) -> bytes | None:
        return blob if blob.startswith(b"ENGINE") else None


def test_digest_changes_with_every_field() -> None:
    base = make_key()
    variants = [
        make_key(onnx_sha256="cd" * 32),
        make_key(trt_version="10.4.0"),
        make_key(gpu_name="AGX Orin"),
        make_key(compute_capability="9.0"),
        make_key(sm_count=16),
        make_key(precision="fp32"),
        make_key(input_shapes={"image": [1, 3, 1024, 2048]}),
        make_key(options={"opt_level": 5, "workspace_mib": 1024}),
        make_key(gpu_memory_mib=15656),
        make_key(cuda_driver=12020),
    ]
    digests = {base.digest} | {v.digest for v in variants}
    assert len(digests) == len(variants) + 1
    assert base.digest == make_key().digest


def test_build_then_hit(tmp_path: Path) -> None:
    cache, rec = EngineCache(tmp_path), Recorder()
    first = cache.resolve(make_key(), rec.deserialize, rec.build, log=lambda _: None)
    second = cache.resolve(make_key(), rec.deserialize, rec.build, log=lambda _: None)
    assert first == second and len(rec.builds) == 1
    assert rec.builds[0][1].name == "timing-trt1030-cuda12060-Orin-sm87-8sm-7620mib.cache"
    engine, sidecar = cache.paths(make_key())
    meta = json.loads(sidecar.read_text())
    assert meta["key"] == make_key().to_json()
    assert meta["engine_bytes"] == engine.stat().st_size
    assert cache.lookup(make_key()).status is CacheStatus.HIT


def test_foreign_sidecar_is_stale_and_rebuilt(tmp_path: Path) -> None:
    cache, rec = EngineCache(tmp_path), Recorder()
    key = make_key()
    cache.resolve(key, rec.deserialize, rec.build, log=lambda _: None)
    _, sidecar = cache.paths(key)
    meta = json.loads(sidecar.read_text())
    meta["key"]["trt_version"] = "10.4.0"  # e.g. copied from another machine
    sidecar.write_text(json.dumps(meta))
    found = cache.lookup(key)
    assert found.status is CacheStatus.STALE and "trt_version" in found.reason
    cache.resolve(key, rec.deserialize, rec.build, log=lambda _: None)
    assert len(rec.builds) == 2
    assert cache.lookup(key).status is CacheStatus.HIT


@pytest.mark.parametrize("damage", ["engine_bytes", "sidecar_json"])
def test_corrupt_entry_is_rebuilt(tmp_path: Path, damage: str) -> None:
    cache, rec = EngineCache(tmp_path), Recorder()
    key = make_key()
    cache.resolve(key, rec.deserialize, rec.build, log=lambda _: None)
    engine, sidecar = cache.paths(key)
    if damage == "engine_bytes":
        engine.write_bytes(engine.read_bytes()[:-3])
    else:
        sidecar.write_text("{not json")
    assert cache.lookup(key).status is CacheStatus.CORRUPT
    cache.resolve(key, rec.deserialize, rec.build, log=lambda _: None)
    assert len(rec.builds) == 2


def test_engine_that_tensorrt_rejects_is_rebuilt(tmp_path: Path) -> None:
    """Sidecar and hash fine, but deserialize returns None (e.g. other TRT patch build)."""
    cache, rec = EngineCache(tmp_path), Recorder()
    key = make_key()
    cache.store(key, b"GARBAGE")
    assert cache.lookup(key).status is CacheStatus.HIT
    result = cache.resolve(key, rec.deserialize, rec.build, log=lambda _: None)
    assert result.startswith(b"ENGINE") and len(rec.builds) == 1


def test_refuses_clearly_when_building_disabled(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    with pytest.raises(BackendError, match=r"building is disabled.*build-engine"):
        cache.resolve(make_key(), Recorder.deserialize, None)
    cache.store(make_key(), b"GARBAGE")
    with pytest.raises(BackendError, match="corrupt: TensorRT could not deserialize"):
        cache.resolve(make_key(), Recorder.deserialize, None)


def test_no_temp_files_left(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path)
    cache.store(make_key(), b"ENGINE")
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".engine", ".json"]


def test_timing_cache_tells_the_orin_modules_apart(tmp_path: Path) -> None:
    """CUDA names every Orin module "Orin" with sm_87: SM count and memory tell Nano (8 SMs,
    8 GB), NX (8 SMs, 16 GB) and AGX (16 SMs) apart, and a CUDA upgrade starts a new cache."""
    cache = EngineCache(tmp_path)
    nano = make_key(sm_count=8, gpu_memory_mib=7620)
    modules = [nano, make_key(sm_count=8, gpu_memory_mib=15656), make_key(sm_count=16)]
    paths = {cache.timing_cache_path(k) for k in [*modules, make_key(cuda_driver=12020)]}
    assert len(paths) == 4
    assert cache.timing_cache_path(nano) == cache.timing_cache_path(make_key())


def test_a_refused_engine_is_not_stored(tmp_path: Path) -> None:
    cache, rec = EngineCache(tmp_path), Recorder()

    def refuse(engine: bytes) -> None:
        raise BackendError("engine disagrees with the golden outputs")

    with pytest.raises(BackendError, match="disagrees"):
        cache.resolve(make_key(), rec.deserialize, rec.build, lambda _: None, refuse)
    assert len(rec.builds) == 1 and list(tmp_path.iterdir()) == []
    accepted: list[bytes] = []
    cache.resolve(make_key(), rec.deserialize, rec.build, lambda _: None, accepted.append)
    assert accepted and cache.lookup(make_key()).status is CacheStatus.HIT
    cache.resolve(make_key(), rec.deserialize, rec.build, lambda _: None, refuse)  # a hit
    cache.discard(make_key())
    assert cache.lookup(make_key()).status is CacheStatus.MISSING
