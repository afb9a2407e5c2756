"""TensorRT for RTX + pycuda backend: the TensorRT backend's frame path on an x86 PC's RTX GPU.

TensorRT for RTX (``pip install tensorrt-rtx-cu13``) runs engines on Ampere and later RTX GPUs
(an A4000 or RTX 4000 Ada in a car PC) with a lean library. Its engines are built ahead of time
for a compute capability (rtx_build.py; no GPU needed) and compiled for the exact GPU at first
load ("JIT"); the compiled kernels go into a runtime cache that this backend keeps on disk, so a
second start skips the compilation. Everything per frame (upload, preprocessing kernel, engines,
fused post-processing, lifting) is the TensorRT backend's (trt.py); this class changes only where
engines come from and how contexts are made:

- engines: the private engine cache (engine_cache.py, key version ``rtx-<version>``), else the
  plan the bundle carries for this GPU's compute capability (``build-engine --rtx``, checked
  against the typed graph's sha256), else an AOT build here; either of the last two is cached
  only after the bundle's acceptance check, as every new TensorRT engine is;
- contexts: each made from a runtime config that shares one runtime cache, loaded at start from
  ``<engine cache>/tensorrt_rtx-<version>/<gpu>-sm<cc>.runtime-cache`` and written back at close
  (TensorRT for RTX refuses a cache from another GPU, driver major or version, and then compiles
  afresh).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..bundle import ModelBundle, StageGraph, StageSpec
from ..errors import BackendError
from ..private_files import check_private_folder, read_private, write_private
from .base import BuildOptions
from .engine_cache import DeviceInfo, slug
from .rtx_build import COMPUTE_CAPABILITIES, aot_build, bundle_plan, import_tensorrt_rtx
from .trt import TensorRTBackend
from .trt_build import PlanBuilder


def runtime_cache_path(cache_root: Path, version: str, device: DeviceInfo) -> Path:
    """Where the runtime cache of TensorRT for RTX ``version`` on ``device`` is kept (one per GPU
    model and version: the compiled kernels are for that GPU)."""
    sm = device.compute_capability.replace(".", "")
    name = f"{slug(device.name)}-sm{sm}-{device.sm_count}sm.runtime-cache"
    return Path(cache_root) / f"tensorrt_rtx-{version}" / name


def load_runtime_cache(cache: Any, path: Path, log: Callable[[str], None] = print) -> bool:
    """Fill the IRuntimeCache ``cache`` from ``path``; False where there is no file or TensorRT
    for RTX finds it from another GPU, driver or version (then it compiles afresh and the file
    is rewritten at close). The file holds compiled kernels, so it is read only where nobody
    else can write it (private_files.py)."""
    if not path.is_file():
        return False
    check_private_folder(path.parent)
    if cache.deserialize(read_private(path)):
        return True
    log(
        f"runtime cache {path} is for another GPU, driver or TensorRT for RTX version; "
        "compiling the kernels afresh (it is rewritten at close)"
    )
    return False


def save_runtime_cache(cache: Any, path: Path) -> None:
    """Write the IRuntimeCache ``cache`` to ``path`` (owner-only folder and file, atomic)."""
    check_private_folder(path.parent, create=True)
    write_private(path, bytes(cache.serialize()))


def check_compute_capability(device: DeviceInfo) -> None:
    """BackendError where TensorRT for RTX cannot run on ``device``, naming the backend that can
    (a Jetson's 8.7, a Hopper's 9.0 and Thor's 11.0 are not RTX GPUs)."""
    if device.compute_capability not in COMPUTE_CAPABILITIES:
        raise BackendError(
            f"{device.name} (compute capability {device.compute_capability}) is not a GPU that "
            f"TensorRT for RTX runs on ({', '.join(COMPUTE_CAPABILITIES)}); use "
            "backend:=tensorrt (TensorRT itself) on it"
        )


def engine_builder(
    bundle: ModelBundle, device: DeviceInfo, trt: Any, log: Callable[[str], None] = print
) -> PlanBuilder:
    """``ensure_engines``' ``build_plan`` for TensorRT for RTX on ``device``: the bundle's plan
    for its compute capability where it matches the graph, else an AOT build here (seconds; the
    timing cache is TensorRT's and unused)."""
    cc = device.compute_capability

    def build(
        graph: StageGraph, stage: StageSpec, _timing: Path, options: BuildOptions, batch: int
    ) -> bytes:
        plan, source = bundle_plan(bundle, trt.__version__, cc, graph, stage, batch)
        if plan is not None:
            log(f"TensorRT for RTX engine for '{stage.name}' from the bundle: {source}")
            return plan
        log(f"building TensorRT for RTX engine for '{stage.name}' for sm {cc} ({source})")
        engine = aot_build(graph, stage, cc, batch, options, progress=True, trt=trt)
        return engine.plan

    return build


class TensorRTRtxBackend(TensorRTBackend):
    """Backend protocol implementation on TensorRT for RTX engines and pycuda (module doc)."""

    name = "tensorrt_rtx"

    def _import_runtime(self, cpu_setting: str) -> Any:
        return import_tensorrt_rtx(cpu_setting)

    def _engine_source(self) -> dict[str, Any]:
        check_compute_capability(self.info)
        trt = self._trt
        self._cache_file = runtime_cache_path(self.cache.root, trt.__version__, self.info)
        self._runtime_cache: Any = None
        self._runtime_cache_loaded = False
        return {"trt": trt, "build_plan": engine_builder(self.bundle, self.info, trt)}

    def _new_context(self, engine: Any) -> Any:
        trt = self._trt
        config = engine.create_runtime_config()
        config.set_execution_context_allocation_strategy(
            trt.ExecutionContextAllocationStrategy.USER_MANAGED
        )
        if self._runtime_cache is None:
            self._runtime_cache = config.create_runtime_cache()
            self._runtime_cache_loaded = self._load_runtime_cache()
        if not config.set_runtime_cache(self._runtime_cache):
            raise BackendError("TensorRT for RTX refused its runtime cache for a new context")
        return engine.create_execution_context(config)

    def _load_runtime_cache(self) -> bool:
        """Fill the runtime cache from its file (``load_runtime_cache``)."""
        return load_runtime_cache(self._runtime_cache, self._cache_file)

    def _before_teardown(self) -> None:
        """Write the runtime cache (the kernels compiled for this GPU) for the next start."""
        cache = getattr(self, "_runtime_cache", None)
        if cache is not None:
            save_runtime_cache(cache, self._cache_file)

    def describe(self) -> dict:
        """The TensorRT backend's description, with the runtime cache: where, and whether this
        start found it usable."""
        info = super().describe()
        info["tensorrt_rtx"] = info.pop("tensorrt")
        if hasattr(self, "_cache_file"):
            info["runtime_cache"] = str(self._cache_file)
            info["runtime_cache_loaded"] = self._runtime_cache_loaded
        return info
