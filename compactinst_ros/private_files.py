"""Owner-only files for what this process later runs: TensorRT engines and nvcc-built kernel
cubins. Shared by the engine cache (backends/) and the kernel loader (gpu/), below both.

Loading an engine or a cubin runs code of whoever wrote it, so, as ssh does with keys, a cache
is only used when nobody else can write to it: the folder, every folder above it and every file
read must be owned by this user (folders above may also be root's) and not group/world-writable
(folders above may be if sticky, as /tmp is). Anything else is refused with the chmod/chown that
fixes it. Folders are created 0700 and files 0600.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import BackendError

#: Environment variable naming the cache folder (engines; kernel cubins in its ``kernels/``).
DEFAULT_CACHE_ENV = "COMPACTINST_ENGINE_CACHE"


def default_cache_dir() -> Path:
    """``$COMPACTINST_ENGINE_CACHE`` or ``~/.cache/compactinst_ros/engines``."""
    env = os.environ.get(DEFAULT_CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "compactinst_ros" / "engines"


def _owner_fix(path: Path) -> str:
    """The command that gives ``path`` to this user."""
    try:
        import pwd

        user = pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        user = str(os.geteuid())
    return f"sudo chown {user} '{path}'"


def check_private(path: Path, st: os.stat_result | None = None, parent: bool = False) -> None:
    """BackendError unless only this user (or root, for a ``parent`` folder) can change ``path``.

    ``parent`` folders (those above the cache) may also be root's, and group/world-writable when
    sticky, since then nobody else can rename or replace the entries in them.
    """
    st = st or os.stat(path)
    uid = os.geteuid()
    owners = (uid, 0) if parent else (uid,)
    if st.st_uid not in owners:
        raise BackendError(
            f"engine cache refused: {path} is owned by uid {st.st_uid}, not by this user "
            f"(uid {uid}), who would load engines anyone else put there; run {_owner_fix(path)} "
            f"or point {DEFAULT_CACHE_ENV} / engine_cache_dir at a folder of your own"
        )
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and not (parent and st.st_mode & stat.S_ISVTX):
        mode = "go-w" if parent else "700" if stat.S_ISDIR(st.st_mode) else "600"
        raise BackendError(
            f"engine cache refused: {path} is group/world-writable "
            f"(mode {stat.S_IMODE(st.st_mode):04o}), so others could hand this process an engine; "
            f"run chmod {mode} '{path}'"
        )


def read_private(path: Path) -> bytes:
    """Bytes of a cache file after ``check_private`` on the very file opened (no swap between)."""
    with open(path, "rb") as fh:
        check_private(path, os.fstat(fh.fileno()))
        return fh.read()


def write_private(path: Path, data: bytes) -> None:
    """Atomically replace ``path`` with ``data`` as a 0600 file (temp file + rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def check_private_folder(folder: str | Path, create: bool = False) -> None:
    """BackendError unless ``folder`` and those above it are private (module doc); ``create``
    makes missing folders 0700 first."""
    root = Path(folder).absolute()
    if create:
        for step in reversed((root, *root.parents)):
            if not step.exists():
                step.mkdir(mode=0o700, exist_ok=True)
    if not root.exists():
        return
    resolved = root.resolve()
    check_private(resolved)
    # both chains: a symlink on the way is only as safe as the folder holding it
    for above in dict.fromkeys((*resolved.parents, *root.parents)):
        check_private(above, parent=True)
