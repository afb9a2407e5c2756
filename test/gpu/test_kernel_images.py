"""The shipped kernel images (compactinst_ros/gpu/kernels/images): rebuilt here byte for byte
with NVRTC 12.6, JetPack 6.1/6.2's CUDA, so a source that this compiler rejects, or one edited
without ``make kernels``, fails CI; and read back from their bytes: each holds the architecture
its name promises in a form a CUDA 12 driver loads, and exactly the kernels of its source with
the parameter layout the host's prepare() strings pack."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compactinst_ros.gpu import build, nvrtc
from compactinst_ros.gpu.constants import SIGNATURES
from compactinst_ros.gpu.images import (
    COMPILE_OPTIONS,
    IMAGE_DIR,
    KERNEL_DIR,
    SOURCES,
    TARGETS,
    ImageError,
    image_path,
    kernel_registers,
    load_manifest,
    param_layout,
    read_image,
    source_digest,
)

#: What a CUDA 12.6 driver takes: cubins of the CUDA 12 ELF ABI, PTX up to ISA 8.5.
CUBIN_ABI = "ELF ABI 7"
PTX_ISA = "PTX ISA 8.5"
INCLUDE = f"-I{KERNEL_DIR}"


def kernels_of(source: str) -> set[str]:
    """The ``extern "C" __global__`` kernels defined in kernels/``source``.cu."""
    text = (KERNEL_DIR / f"{source}.cu").read_text()
    bounds = r"(?:__launch_bounds__\([^)]*\) )?"  # skipped where a kernel has them
    return set(re.findall(r'extern "C" __global__ void ' + bounds + r"(\w+)\(", text))


def test_every_source_and_kernel_is_shipped() -> None:
    assert {p.stem for p in KERNEL_DIR.glob("*.cu")} == set(SOURCES)
    assert set().union(*map(kernels_of, SOURCES)) == set(SIGNATURES)
    manifest = load_manifest()
    for source in SOURCES:
        assert set(manifest["sources"][source]["images"]) == set(TARGETS)
        assert image_path(source, "sm_87").name == f"{source}.sm_87.cubin"
        assert image_path(source, "compute_75").name == f"{source}.compute_75.ptx"


def test_manifest_digests_the_current_sources() -> None:
    """Fails, without NVRTC, as soon as a .cu or .cuh changes after ``make kernels``."""
    manifest = load_manifest()
    stale = [s for s in SOURCES if manifest["sources"][s]["digest"] != source_digest(s)]
    assert not stale, f"kernel images older than {stale}: run `make kernels` and commit them"


def test_source_digest_follows_included_headers(tmp_path: Path) -> None:
    for name in ("common.cuh", "preprocess.cu"):
        shutil.copy(KERNEL_DIR / name, tmp_path / name)
    before = source_digest("preprocess", tmp_path)
    assert before == source_digest("preprocess")
    (tmp_path / "common.cuh").write_text((KERNEL_DIR / "common.cuh").read_text() + "\n")
    assert source_digest("preprocess", tmp_path) != before


#: the images make test rebuilds: Jetson Orin's cubin and the PTX every newer GPU JITs
REBUILT_IN_MAKE_TEST = ("sm_87", "compute_75")


def test_the_orin_and_ptx_images_are_a_fresh_nvrtc_12_6_build() -> None:
    """Each source's sm_87 cubin and compute_75 PTX rebuild with NVRTC 12.6 into exactly the
    shipped bytes, and every shipped image is the one its manifest entry names (sha256); the
    other targets' rebuild, a minute of NVRTC, is make test-full's (below)."""
    assert nvrtc.version() == (12, 6), f"{nvrtc.library_path()} is not NVRTC 12.6"
    files, _ = build.build_all(REBUILT_IN_MAKE_TEST)
    stale = [n for n, data in files.items() if (IMAGE_DIR / n).read_bytes() != data]
    assert not stale, f"stale kernel images {stale}: run `make kernels`"
    for source, entry in load_manifest()["sources"].items():
        for target, image in entry["images"].items():
            data = image_path(source, target).read_bytes()
            assert hashlib.sha256(data).hexdigest() == image["sha256"], image["file"]


@pytest.mark.full
def test_shipped_images_are_a_fresh_nvrtc_12_6_build() -> None:
    """Every source compiles with NVRTC 12.6 for every target (sm_75..sm_90 cubins, compute_75
    PTX), without a warning, into exactly the committed bytes and manifest, and kernels/images
    holds no image of a dropped target."""
    assert nvrtc.version() == (12, 6), f"{nvrtc.library_path()} is not NVRTC 12.6"
    files, manifest = build.build_all()
    assert manifest["nvrtc_wheel"] == load_manifest()["nvrtc_wheel"], "reinstall: make venv"
    assert build.differences(files, manifest) == [], "stale kernel images: run `make kernels`"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("source", SOURCES)
def test_image_holds_its_architecture_and_the_host_signatures(source: str, target: str) -> None:
    info = read_image(image_path(source, target).read_bytes())
    assert info.target == target
    assert info.abi == (CUBIN_ABI if info.kind == "cubin" else PTX_ISA)
    assert set(info.params) == kernels_of(source)
    for name, params in info.params.items():
        assert params == param_layout(SIGNATURES[name]), name
    if info.kind == "ptx":
        assert info.types == {name: SIGNATURES[name] for name in info.params}


def test_an_image_of_a_dropped_target_is_found_and_removed(tmp_path: Path, monkeypatch) -> None:
    """`make kernels` deletes what it no longer builds, and the check names it."""
    monkeypatch.setattr(build, "MANIFEST", tmp_path / "manifest.json")
    (tmp_path / "overlay.compute_87.ptx").write_bytes(b"old")
    (tmp_path / "overlay.sm_75.cubin").write_bytes(b"new")
    assert build.leftovers({"overlay.sm_75.cubin": b"new"}) == ["overlay.compute_87.ptx"]
    found = build.differences({"overlay.sm_75.cubin": b"new"}, {})
    assert "overlay.compute_87.ptx: not a target any more" in found


def test_param_layout_is_pycudas_packing() -> None:
    """A double after an int is 8-aligned, as struct's native mode packs it."""
    assert param_layout("PPidP") == ((0, 8), (8, 8), (16, 4), (24, 8), (32, 8))


def test_signature_check_catches_a_changed_parameter() -> None:
    """The layout and type checks can fail: a kernel whose float ``scale_y`` became a double
    no longer matches its prepare() string, in the cubin and in the PTX."""
    source = (KERNEL_DIR / "preprocess.cu").read_text()
    head, kernel = source.split('extern "C" __global__ void pre_letterbox(', 1)
    kernel = kernel.replace("float scale_y,", "double scale_y,", 1)
    changed = f'{head}extern "C" __global__ void pre_letterbox({kernel}'
    assert changed != source
    options = [*COMPILE_OPTIONS, INCLUDE]
    cubin = read_image(nvrtc.compile_source(changed, "preprocess.cu", "sm_87", options))
    ptx = read_image(nvrtc.compile_source(changed, "preprocess.cu", "compute_87", options))
    assert cubin.params["pre_letterbox"] != param_layout(SIGNATURES["pre_letterbox"])
    assert ptx.types["pre_letterbox"] == "PiiiiiidffffiiP"
    assert ptx.types["pre_letterbox"] != SIGNATURES["pre_letterbox"]


def test_nvrtc_refuses_errors_and_warnings() -> None:
    """What CI's NVRTC build rejects: a type error, and (NVRTC having no -Werror) a warning."""
    kernel = '#include "common.cuh"\nextern "C" __global__ void k(int* p) {{ {} }}\n'
    with pytest.raises(nvrtc.NvrtcError, match="NVRTC_ERROR_COMPILATION"):
        nvrtc.compile_source(kernel.format("p = 1.5f;"), "bad.cu", "sm_87", [INCLUDE])
    with pytest.raises(nvrtc.NvrtcError, match="never referenced"):
        nvrtc.compile_source(kernel.format("int unused = 3;"), "warn.cu", "sm_87", [INCLUDE])


def test_read_image_rejects_what_is_no_kernel_image() -> None:
    with pytest.raises(ImageError, match="not a CUDA cubin"):
        read_image(Path(sys.executable).resolve().read_bytes()[:4096])  # an x86/Arm ELF
    with pytest.raises(ImageError, match="PTX without"):
        read_image(b"// no PTX here\n")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_a_cuda_13_cubin_reads_as_the_abi_a_cuda_12_driver_refuses(tmp_path: Path) -> None:
    """The ABI check can fail: nvcc 13 (this CI's toolkit) writes a cubin of ELF ABI 8."""
    version = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    if "release 13." not in version:
        pytest.skip("nvcc is not CUDA 13")
    out = tmp_path / "k.cubin"
    cmd = ["nvcc", "-cubin", "-arch=sm_87", *COMPILE_OPTIONS, INCLUDE, "-o", str(out)]
    subprocess.run([*cmd, str(KERNEL_DIR / "preprocess.cu")], check=True, timeout=300)
    info = read_image(out.read_bytes())
    assert info.target == "sm_87" and info.abi == "ELF ABI 8" != CUBIN_ABI
    assert info.params["pre_letterbox"] == param_layout(SIGNATURES["pre_letterbox"])


def test_package_build_ships_the_images(tmp_path: Path) -> None:
    """setup.py's package_data carries every image and the manifest into an install, so a
    vehicle needs no compiler."""
    root = KERNEL_DIR.parents[2]
    cmd = [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)]
    subprocess.run(cmd, cwd=root, check=True, capture_output=True, timeout=300)
    built = tmp_path / IMAGE_DIR.relative_to(root)
    assert sorted(p.name for p in built.iterdir()) == sorted(p.name for p in IMAGE_DIR.iterdir())
    assert len(list(built.iterdir())) == len(SOURCES) * len(TARGETS) + 1


#: The post-processing kernels' registers per thread at most, in every shipped cubin. A block is
#: 256 threads and an SM holds 65536 registers, allocated 8 a thread at a time: pp_tiles at 48
#: keeps five tile blocks on an SM, pp_stats at 64 four, pp_remap at 32 eight. NVRTC 12.6 gives
#: pp_tiles 42-46 (its launch bounds ask for five blocks an SM; without them the warp votes took
#: it to 50-52, and an unrolled block_scan to 54), pp_stats 60-62, pp_remap 20-24; the six
#: launches they replaced had pp_fused at 44-48, pp_semantic_low at 62.
POSTPROCESS_REGISTERS = {"pp_stats": 64, "pp_tiles": 48, "pp_remap": 32}


@pytest.mark.parametrize("target", [t for t in TARGETS if t.startswith("sm_")])
def test_post_processing_kernels_stay_in_their_register_budget(target: str) -> None:
    found = kernel_registers(image_path("postprocess", target).read_bytes())
    assert set(found) == set(POSTPROCESS_REGISTERS), found
    over = {k: n for k, n in found.items() if n > POSTPROCESS_REGISTERS[k]}
    assert not over, f"postprocess.{target}.cubin: registers {over} over {POSTPROCESS_REGISTERS}"


def test_register_counts_are_read_from_the_cubin_and_refused_for_ptx() -> None:
    # the same source compiled to keep more live values gives more registers: the reading moves
    source = """extern "C" __global__ void k(float* o, const float* a) {
      float v[REGS];
      for (int i = 0; i < REGS; ++i) v[i] = a[i * 1024 + threadIdx.x];
      float s = 0.0f;
      for (int i = 0; i < REGS; ++i) s += v[i] * v[(i * 7) % REGS];
      o[threadIdx.x] = s;
    }"""
    counts = [
        kernel_registers(
            nvrtc.compile_source(source.replace("REGS", str(n)), "k.cu", "sm_87", [INCLUDE])
        )["k"]
        for n in (4, 48)
    ]
    assert 0 < counts[0] < counts[1] <= 255, counts
    with pytest.raises(ImageError, match="cubins only"):
        kernel_registers(image_path("postprocess", TARGETS[-1]).read_bytes())
