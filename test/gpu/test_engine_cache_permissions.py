"""The engine cache is used only when nobody but this user can write to it (as ssh with keys):
unsafe folders and files are refused with the chmod/chown that fixes them."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from compactinst_ros.backends.engine_cache import CacheStatus, EngineCache, EngineKey
from compactinst_ros.errors import BackendError
from compactinst_ros.private_files import read_private

KEY = EngineKey(
    stage="encoder",
    onnx_sha256="ab" * 32,
    trt_version="10.3.0",
    gpu_name="Orin",
    compute_capability="8.7",
    sm_count=8,
    precision="fp16",
)


def build(key: EngineKey, timing: Path) -> bytes:
    """Stand-in for the TensorRT builder (the cache logic is pure Python)."""
    return b"ENGINE:" + key.digest.encode()


def deserialize(blob: bytes) -> bytes:
    """Stand-in for deserialize_cuda_engine: the engine is its bytes."""
    return blob


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loose_umask():
    """umask 002, the default of desktop Ubuntu users: files would be group-writable."""
    old = os.umask(0o002)
    yield
    os.umask(old)


def test_store_creates_private_folders_and_files(tmp_path: Path, loose_umask) -> None:
    cache = EngineCache(tmp_path / "home" / ".cache" / "engines")
    assert cache.resolve(KEY, deserialize, build).startswith(b"ENGINE")
    for folder in (tmp_path / "home", tmp_path / "home" / ".cache", cache.root):
        assert mode(folder) == 0o700, folder
    for path in cache.paths(KEY):
        assert mode(path) == 0o600, path
    assert cache.lookup(KEY).status is CacheStatus.HIT


@pytest.mark.parametrize("bits", [stat.S_IWGRP, stat.S_IWOTH])
def test_writable_cache_folder_is_refused(tmp_path: Path, bits: int) -> None:
    cache = EngineCache(tmp_path / "engines")
    cache.store(KEY, build(KEY, Path()))
    cache.root.chmod(0o700 | bits)
    fix = f"chmod 700 '{cache.root}'"
    with pytest.raises(BackendError, match=rf"group/world-writable.*{re.escape(fix)}"):
        cache.resolve(KEY, deserialize, build)
    with pytest.raises(BackendError, match="group/world-writable"):
        cache.store(KEY, b"ENGINE")
    os.system(fix)
    assert cache.lookup(KEY).status is CacheStatus.HIT


@pytest.mark.parametrize("entry", [0, 1], ids=["engine", "sidecar"])
def test_writable_engine_or_sidecar_is_refused(tmp_path: Path, entry: int) -> None:
    cache = EngineCache(tmp_path / "engines")
    cache.store(KEY, build(KEY, Path()))
    path = cache.paths(KEY)[entry]
    path.chmod(0o666)
    text = rf"{re.escape(path.name)} is group/world-writable.*chmod 600"
    with pytest.raises(BackendError, match=text):
        cache.resolve(KEY, deserialize, None)


def test_writable_timing_cache_is_refused(tmp_path: Path) -> None:
    timing = EngineCache(tmp_path).timing_cache_path(KEY)
    timing.write_bytes(b"timing")
    timing.chmod(0o620)
    with pytest.raises(BackendError, match=re.escape(f"chmod 600 '{timing}'")):
        read_private(timing)
    timing.chmod(0o600)
    assert read_private(timing) == b"timing"


def test_writable_folder_above_is_refused_unless_sticky(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    cache = EngineCache(shared / "engines")
    cache.store(KEY, build(KEY, Path()))
    shared.chmod(0o777)
    text = rf"{re.escape(str(shared))} is group/world-writable.*chmod go-w"
    with pytest.raises(BackendError, match=text):
        cache.lookup(KEY)
    shared.chmod(0o1777)  # sticky, as /tmp: others cannot rename or replace our folder
    assert cache.lookup(KEY).status is CacheStatus.HIT


def test_symlink_through_a_writable_folder_is_refused(tmp_path: Path) -> None:
    real = EngineCache(tmp_path / "private" / "engines")
    real.store(KEY, build(KEY, Path()))
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    (shared / "engines").symlink_to(real.root)
    shared.chmod(0o777)  # anyone could point the link elsewhere
    with pytest.raises(BackendError, match=re.escape(f"{shared} is group/world-writable")):
        EngineCache(shared / "engines").lookup(KEY)


def test_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        root = tmp_path / "theirs"
        EngineCache(root).store(KEY, build(KEY, Path()))
        os.chown(root, 65534, -1)
    else:
        root = Path("/")  # root's, and this test runs as someone else
    where = re.escape(str(root))
    text = rf"{where} is owned by uid \d+.*sudo chown \S+ '{where}'"
    with pytest.raises(BackendError, match=text):
        EngineCache(root).lookup(KEY)


def test_missing_cache_is_a_plain_miss(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path / "not-yet")
    assert cache.lookup(KEY).status is CacheStatus.MISSING
    assert not cache.root.exists()
