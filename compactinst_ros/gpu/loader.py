"""Loads a kernel module for the current CUDA device without needing nvcc on PATH.

Order of preference (``plan``), the CUDA driver's own rule for which image runs on a GPU: a
shipped cubin of the GPU's major architecture and the same or a lower minor (SASS of sm_XY runs
on compute capability X.Z for Z >= Y, never across majors), the closest first; else the shipped
PTX of an older architecture, which the driver JIT-compiles (needs a driver at least as new as
the CUDA that wrote it, 12.6); else nvcc, found on PATH, in ``$CUDA_HOME/bin`` or in JetPack's
``/usr/local/cuda/bin``, compiling a cubin into a private per-user cache; else a BackendError
that lists why each way failed and names the fix. ``$COMPACTINST_KERNEL_TARGET`` forces one
way (a shipped target such as ``compute_75``, or ``nvcc``), e.g. to check the PTX image on an
Orin.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ..errors import BackendError
from ..private_files import check_private_folder, default_cache_dir, read_private, write_private
from .images import COMPILE_OPTIONS, IMAGE_DIR, KERNEL_DIR, image_path, load_manifest, source_digest

#: Environment variable that forces one target instead of choosing by the device.
TARGET_ENV = "COMPACTINST_KERNEL_TARGET"
#: The plan's last resort: compile with a local nvcc.
NVCC = "nvcc"
#: Where nvcc is looked for after PATH: the CUDA home variables, then JetPack's install folder.
NVCC_HOMES = ("CUDA_HOME", "CUDA_PATH")
NVCC_DIRS = (Path("/usr/local/cuda/bin"),)
#: Kernel source -> the image this process loaded it from (a shipped target such as ``sm_87``,
#: or ``nvcc sm_XY``), so reports can say which way the plan took.
LOADED: dict[str, str] = {}

_FIX = (
    "install the CUDA compiler (JetPack 6.1/6.2: `sudo apt install nvidia-jetpack` or "
    "`cuda-nvcc-12-6`, which put nvcc in /usr/local/cuda/bin) or point CUDA_HOME at a CUDA "
    "toolkit; on a machine without a usable GPU run the onnxruntime backend"
)


def plan(
    capability: tuple[int, int], driver_version: int, manifest: dict, source: str
) -> tuple[list[str], list[str]]:
    """(targets to try in order, reasons for the shipped targets left out) for kernels/``source``
    on a device of ``capability`` under a driver of ``driver_version`` (e.g. 12020)."""
    shipped = list(manifest["sources"][source]["images"])
    stale = stale_reason(manifest, source)
    if stale:
        return [NVCC], [f"{target}: {stale}" for target in shipped]
    arch = capability[0] * 10 + capability[1]
    device = f"compute capability {capability[0]}.{capability[1]}"
    cubins, skipped = [], []
    for target in (t for t in shipped if t.startswith("sm_")):
        built = _arch(target)
        if built // 10 != capability[0]:
            skipped.append(f"{target}: SASS of compute capability {built // 10}.x, not {device}")
        elif built > arch:
            skipped.append(f"{target}: SASS for a newer GPU than {device}")
        else:
            cubins.append(target)
    order = sorted(cubins, key=_arch, reverse=True)
    built_by = manifest["cuda"][0] * 1000 + manifest["cuda"][1] * 10
    for target in sorted((t for t in shipped if t.startswith("compute_")), key=_arch, reverse=True):
        if _arch(target) > arch:
            skipped.append(f"{target}: PTX for a newer GPU than {device}")
        elif driver_version < built_by:
            skipped.append(
                f"{target}: the driver ({_version(driver_version)}) is older than the CUDA "
                f"{_version(built_by)} that wrote the PTX, so it cannot JIT it"
            )
        else:
            order.append(target)
    return [*order, NVCC], skipped


def _arch(target: str) -> int:
    """The architecture number of ``sm_XY`` / ``compute_XY``: 87, 120."""
    return int(target.split("_")[1])


def sm_arch(capability: tuple[int, int]) -> str:
    """``sm_XY`` of a compute capability (8, 7) -> ``sm_87``, (12, 0) -> ``sm_120``."""
    return f"sm_{capability[0] * 10 + capability[1]}"


def stale_reason(manifest: dict, source: str) -> str | None:
    """Why the shipped images of kernels/``source``.cu no longer match it, or None."""
    if manifest["sources"][source]["digest"] == source_digest(source):
        return None
    return f"kernels/{source}.cu changed after the images were built (`make kernels`)"


def _version(code: int) -> str:
    """The text ("12.6") of a CUDA version code such as 12060."""
    return f"{code // 1000}.{code % 1000 // 10}"


def find_nvcc() -> Path | None:
    """nvcc on PATH, else in ``$CUDA_HOME/bin`` / ``$CUDA_PATH/bin``, else in NVCC_DIRS."""
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    dirs = [Path(os.environ[v]) / "bin" for v in NVCC_HOMES if os.environ.get(v)]
    for folder in (*dirs, *NVCC_DIRS):
        if (folder / "nvcc").is_file() and os.access(folder / "nvcc", os.X_OK):
            return folder / "nvcc"
    return None


def cache_dir() -> Path:
    """The per-user folder of nvcc-built cubins: ``kernels`` in the engine cache, under the same
    privacy rules (a cubin, like an engine, is code this process runs)."""
    return default_cache_dir() / "kernels"


def compile_cached(source: str, arch: str, nvcc: Path, folder: Path | None = None) -> bytes:
    """Cubin of kernels/``source``.cu for ``arch`` (``sm_XY``) by ``nvcc``, from ``folder``
    (default ``cache_dir()``) when the same source, options and nvcc built it before."""
    folder = folder or cache_dir()
    check_private_folder(folder, create=True)
    version = _run([str(nvcc), "--version"], "nvcc --version")
    key = hashlib.sha256(
        "\0".join([source_digest(source), arch, *COMPILE_OPTIONS, version]).encode()
    ).hexdigest()[:24]
    path = folder / f"{source}-{arch}-{key}.cubin"
    if path.is_file():
        return read_private(path)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "k.cubin"
        cmd = [
            str(nvcc), "-cubin", f"-arch={arch}", *COMPILE_OPTIONS, f"-I{KERNEL_DIR}",
            "-o", str(out), str(KERNEL_DIR / f"{source}.cu"),
        ]  # fmt: skip
        _run(cmd, f"nvcc ({' '.join(cmd)})")
        data = out.read_bytes()
    write_private(path, data)
    return data


def _run(cmd: list[str], what: str) -> str:
    """stdout of ``cmd``; BackendError with its stderr when it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise BackendError(f"{what} failed:\n{proc.stderr.strip()}")
    return proc.stdout


def load_module(source: str) -> Any:
    """pycuda module of kernels/``source``.cu for the current context's device (module doc)."""
    import pycuda.driver as cuda

    manifest = load_manifest()
    capability = cuda.Context.get_device().compute_capability()
    forced = os.environ.get(TARGET_ENV)
    if forced:
        known = [*manifest["sources"][source]["images"], NVCC]
        if forced not in known:
            raise BackendError(f"{TARGET_ENV}={forced} is not one of {known}; unset it or pick one")
        stale = stale_reason(manifest, source) if forced != NVCC else None
        order, reasons = ([], [f"{forced}: {stale}"]) if stale else ([forced], [])
        reasons.append(f"{TARGET_ENV}={forced} allows no other")
    else:
        order, reasons = plan(capability, cuda.get_driver_version(), manifest, source)
    for target in order:
        try:
            if target != NVCC:
                data = image_path(source, target).read_bytes()
                module = cuda.module_from_buffer(data if target.startswith("sm_") else data + b"\0")
                LOADED[source] = target
                return module
            nvcc = find_nvcc()
            if nvcc is None:
                places = ", ".join(["PATH", "$CUDA_HOME/bin", *map(str, NVCC_DIRS)])
                reasons.append(f"nvcc: not found ({places})")
                continue
            module = cuda.module_from_buffer(compile_cached(source, sm_arch(capability), nvcc))
            LOADED[source] = f"{NVCC} {sm_arch(capability)}"
            return module
        except (cuda.Error, BackendError, OSError) as exc:
            reasons.append(f"{target}: {exc}")
    raise BackendError(
        f"no kernel image of kernels/{source}.cu loads on this GPU (compute capability "
        f"{capability[0]}.{capability[1]}; images in {IMAGE_DIR}): "
        + "; ".join(reasons)
        + f". Fix: {_FIX}"
    )
