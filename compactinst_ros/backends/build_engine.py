"""``compactinst build-engine BUNDLE``: the bundle's TensorRT engines, built where they run or,
with ``--rtx``, ahead of time for RTX GPUs on any x86-64 machine.

Without ``--rtx`` the engines are built on CUDA device ``--device`` with the installed TensorRT
(JetPack's on a Jetson) into the engine cache, each checked against the bundle's golden cases
(``trt_build.ensure_engines``). With ``--rtx CC ...`` TensorRT for RTX builds them without a
GPU for those compute capabilities into ``BUNDLE/engines/`` with a manifest
(``rtx_build.write_bundle_engines``), so the bundle carries them to a car PC.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..bundle import PRECISIONS, ModelBundle
from ..errors import BackendError
from ..private_files import default_cache_dir
from .base import BuildOptions
from .engine_cache import EngineCache
from .rtx_build import COMPUTE_CAPABILITIES, write_bundle_engines
from .trt_build import (
    DEFAULT_PRECISION,
    current_device,
    device_info,
    engine_key,
    engine_precision,
    ensure_engines,
    import_pycuda,
    import_tensorrt,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``compactinst build-engine``."""
    parser.add_argument("bundle", help="model bundle folder (bundle.json + stage ONNX files)")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"engine cache folder (default ${'{'}COMPACTINST_ENGINE_CACHE{'}'} or "
        f"{default_cache_dir()})",
    )
    parser.add_argument("--device", type=int, default=0, help="CUDA device index")
    parser.add_argument(
        "--opt-level",
        type=int,
        default=3,
        choices=range(6),
        metavar="0-5",
        help="TensorRT builder optimization level: 0 builds fastest, 5 tries the most tactics",
    )
    parser.add_argument("--workspace-mib", type=int, default=1024, help="builder workspace cap")
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help=f"typed graphs to build (default {DEFAULT_PRECISION} where the bundle has them, "
        "else fp32; fp32 for parity checks)",
    )
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=[1],
        metavar="B",
        help="static-batch engines to build (sizes above 1 need a bundle with the batch axis; "
        "default [1]), e.g. 1 2 3 for a node batching 3 cameras",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument(
        "--rtx", nargs="+", choices=list(COMPUTE_CAPABILITIES), metavar="CC",
        help="instead: build TensorRT for RTX engines ahead of time for these compute "
        f"capabilities ({' '.join(COMPUTE_CAPABILITIES)}) into BUNDLE/engines/, on any x86-64 "
        "machine without a GPU (pip install tensorrt-rtx-cu13) (default: build on --device)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Build (or validate) the engines of a bundle on CUDA device ``--device`` (made current
    for the builder), one set per ``--batch-sizes`` size, and print where they are; with
    ``--rtx``, build TensorRT for RTX engines ahead of time instead (``run_rtx``)."""
    bundle = ModelBundle.load(args.bundle)
    if args.rtx:
        return run_rtx(args, bundle)
    cache = EngineCache(args.cache_dir or default_cache_dir())
    trt = import_tensorrt()
    cuda = import_pycuda()
    device = device_info(args.device)
    options = BuildOptions(opt_level=args.opt_level, workspace_mib=args.workspace_mib)
    precision = engine_precision(bundle, args.precision)
    sizes = sorted(set(args.batch_sizes))
    if sizes[0] < 1:
        raise BackendError(f"--batch-sizes {args.batch_sizes}: every size must be >= 1")
    keys = {
        (stage.name, batch): engine_key(
            bundle.stage_graph(stage.name, precision), stage, trt.__version__, device, options,
            batch,
        )
        for batch in sizes
        for stage in bundle.stages
    }
    if args.force:
        for key in keys.values():
            cache.discard(key)
    with current_device(cuda, args.device):
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        for batch in sizes:
            ensure_engines(
                bundle, cache, runtime.deserialize_cuda_engine, device, precision, True,
                options, batch=batch,
            )  # fmt: skip
    print(
        f"TensorRT {trt.__version__} on {device.name} (device {args.device}, sm "
        f"{device.compute_capability}), {precision} strongly typed:"
    )
    for (stage, batch), key in keys.items():
        path, _ = cache.paths(key)
        print(f"  {stage:8s} batch {batch}  {path}  {path.stat().st_size / 2**20:.1f} MiB")
    return 0


def run_rtx(args: argparse.Namespace, bundle: ModelBundle) -> int:
    """``--rtx``: TensorRT for RTX engines of every stage for each compute capability and
    batch size into the bundle (no GPU, no acceptance check: that runs where they load)."""
    from ..cli import warn

    for flag, unused in (("--cache-dir", args.cache_dir is not None), ("--device", args.device),
                         ("--force", args.force)):  # fmt: skip
        if unused:
            warn("build-engine", f"{flag} has no effect with --rtx (the engines go into the "
                                 "bundle and are built without a GPU)")  # fmt: skip
    sizes = sorted(set(args.batch_sizes))
    if sizes[0] < 1:
        raise BackendError(f"--batch-sizes {args.batch_sizes}: every size must be >= 1")
    precision = engine_precision(bundle, args.precision)
    options = BuildOptions(opt_level=args.opt_level, workspace_mib=args.workspace_mib)
    written = write_bundle_engines(bundle, args.rtx, precision, sizes, options)
    print(f"TensorRT for RTX engines, {precision} strongly typed, built ahead of time:")
    for path in written:
        print(f"  {path}  {path.stat().st_size / 2**20:.1f} MiB")
    return 0
