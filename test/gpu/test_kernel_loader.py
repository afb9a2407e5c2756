"""The runtime kernel loader (compactinst_ros/gpu/loader.py): which image it picks for a device,
where it finds nvcc when PATH lacks it, the private cache of nvcc-built cubins, and the error
that names the fix when nothing fits. Loading runs through the pycuda stand-in, which reads the
image handed to ``module_from_buffer`` (test/gpu/emu/pycuda_emu.py)."""

from __future__ import annotations

import copy
import shutil
import stat
from pathlib import Path

import pycuda_emu  # test/gpu/emu, put on sys.path by conftest.py
import pytest

from compactinst_ros.errors import BackendError
from compactinst_ros.gpu import loader
from compactinst_ros.gpu.constants import SIGNATURES
from compactinst_ros.gpu.images import TARGETS, load_manifest, param_layout, read_image

MANIFEST = load_manifest()
CUDA_12_6, CUDA_12_2 = 12060, 12020
JETPACK_NVCC = Path("/usr/local/cuda/bin/nvcc")


@pytest.mark.parametrize(
    ("capability", "driver", "order"),
    [
        ((8, 7), CUDA_12_6, ["sm_87", "compute_87", "nvcc"]),  # Jetson Orin, JetPack 6.1+
        ((8, 7), CUDA_12_2, ["sm_87", "nvcc"]),  # JetPack 6.0: its driver cannot JIT 12.6 PTX
        ((9, 0), CUDA_12_6, ["sm_90", "compute_87", "nvcc"]),  # Hopper
        ((8, 9), CUDA_12_6, ["compute_87", "nvcc"]),  # Ada: no cubin, PTX JIT
        ((12, 0), 12080, ["compute_87", "nvcc"]),  # Blackwell: PTX JIT
        ((8, 6), CUDA_12_6, ["nvcc"]),  # Ampere: older than every image
        ((7, 2), CUDA_12_2, ["nvcc"]),  # Xavier
    ],
)
def test_plan_prefers_exact_cubin_then_older_ptx_then_nvcc(
    capability: tuple[int, int], driver: int, order: list[str]
) -> None:
    got, skipped = loader.plan(capability, driver, MANIFEST, "postprocess")
    assert got == order
    assert len(skipped) == len(TARGETS) - (len(order) - 1)  # every left-out image says why


def test_plan_says_why_it_leaves_images_out() -> None:
    _, skipped = loader.plan((8, 7), CUDA_12_2, MANIFEST, "overlay")
    assert skipped == [
        "compute_87: the driver (12.2) is older than the CUDA 12.6 that wrote the PTX, "
        "so it cannot JIT it",
        "sm_90: another GPU",
    ]
    _, skipped = loader.plan((8, 6), CUDA_12_6, MANIFEST, "overlay")
    assert "compute_87: PTX for a newer GPU than compute capability 86" in skipped


def test_stale_images_are_not_used() -> None:
    """A source edited after ``make kernels`` (e.g. on the vehicle) is compiled, not replaced
    by an image of its old text."""
    manifest = copy.deepcopy(MANIFEST)
    manifest["sources"]["preprocess"]["digest"] = "0" * 64
    order, skipped = loader.plan((8, 7), CUDA_12_6, manifest, "preprocess")
    assert order == ["nvcc"]
    assert len(skipped) == len(TARGETS) and all("make kernels" in s for s in skipped)


@pytest.mark.skipif(not JETPACK_NVCC.is_file(), reason="no nvcc in /usr/local/cuda/bin")
def test_nvcc_is_found_in_jetpacks_folder_when_path_lacks_it(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert shutil.which("nvcc") is None
    assert loader.find_nvcc() == JETPACK_NVCC
    monkeypatch.setattr(loader, "NVCC_DIRS", ())
    assert loader.find_nvcc() is None
    monkeypatch.setenv("CUDA_HOME", str(JETPACK_NVCC.parents[1]))
    assert loader.find_nvcc() == JETPACK_NVCC


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_nvcc_build_is_cached_privately(tmp_path: Path) -> None:
    """The found-nvcc way, run for real: a cubin for the requested architecture with the host's
    parameter layout, kept in a 0700 folder as a 0600 file and reused on the next start."""
    nvcc = Path(shutil.which("nvcc") or "")
    folder = tmp_path / "cache" / "kernels"
    data = loader.compile_cached("preprocess", "sm_87", nvcc, folder)
    info = read_image(data)
    assert info.target == "sm_87"
    assert info.params == {"pre_letterbox": param_layout(SIGNATURES["pre_letterbox"])}
    (entry,) = folder.iterdir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    built = entry.stat().st_mtime_ns
    assert loader.compile_cached("preprocess", "sm_87", nvcc, folder) == data
    assert [p.stat().st_mtime_ns for p in folder.iterdir()] == [built]
    folder.chmod(0o777)
    with pytest.raises(BackendError, match="chmod 700"):
        loader.compile_cached("preprocess", "sm_87", nvcc, folder)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
@pytest.mark.parametrize("target", TARGETS)
def test_stand_in_gets_the_named_image_through_the_loader(emu_lib, monkeypatch, target) -> None:
    """What the emulation tests run: the loader reads the shipped image and the stand-in's
    ``module_from_buffer`` takes its bytes; its module has exactly the image's kernels."""
    driver = pycuda_emu.install(monkeypatch, emu_lib, target)
    module = loader.load_module("postprocess")
    assert module.image.target == target
    assert set(module.image.params) == {n for n in SIGNATURES if n.startswith("pp_")}
    with pytest.raises(driver.LogicError, match="named symbol not found"):
        module.get_function("pre_letterbox")
    with pytest.raises(driver.LogicError, match="invalid"):
        driver.module_from_buffer(b"not an image")


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_stand_in_refuses_ptx_without_its_nul(emu_lib, monkeypatch) -> None:
    """cuModuleLoadData reads PTX as a C string: the loader must append the NUL."""
    driver = pycuda_emu.install(monkeypatch, emu_lib)
    ptx = (loader.IMAGE_DIR / "overlay.compute_87.ptx").read_bytes()
    with pytest.raises(driver.LogicError, match="NUL"):
        driver.module_from_buffer(ptx)
    assert driver.module_from_buffer(ptx + b"\0").image.target == "compute_87"


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_device_choice_without_a_forced_target(emu_lib, monkeypatch) -> None:
    """Unforced, the loader asks the device: an Ada GPU (8.9) under a 12.6 driver gets the PTX."""
    driver = pycuda_emu.install(monkeypatch, emu_lib)
    monkeypatch.delenv(loader.TARGET_ENV)
    monkeypatch.setattr(pycuda_emu.Device, "compute_capability", lambda self: (8, 9))
    monkeypatch.setattr(driver, "get_driver_version", lambda: CUDA_12_6)
    assert loader.load_module("overlay").image.target == "compute_87"
    assert loader.LOADED["overlay"] == "compute_87"  # what reports say was loaded
    monkeypatch.setattr(pycuda_emu.Device, "compute_capability", lambda self: (8, 7))
    assert loader.load_module("overlay").image.target == "sm_87"
    assert loader.LOADED["overlay"] == "sm_87"


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_no_image_and_no_nvcc_names_the_fix(emu_lib, monkeypatch) -> None:
    """The emulated device (compute capability 0.0) fits no image; without nvcc anywhere the
    error lists why each way failed and how to get a compiler."""
    pycuda_emu.install(monkeypatch, emu_lib)
    monkeypatch.delenv(loader.TARGET_ENV)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(loader, "NVCC_DIRS", (Path("/nonexistent/cuda/bin"),))
    with pytest.raises(BackendError) as exc:
        loader.load_module("preprocess")
    message = str(exc.value)
    assert "compute capability 0.0" in message
    assert "sm_87: another GPU" in message and "compute_87: PTX for a newer GPU" in message
    assert "nvcc: not found (PATH, $CUDA_HOME/bin, /nonexistent/cuda/bin)" in message
    assert "Fix: install the CUDA compiler" in message and "cuda-nvcc-12-6" in message


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_forced_target_must_be_known(emu_lib, monkeypatch) -> None:
    pycuda_emu.install(monkeypatch, emu_lib, "sm_75")
    with pytest.raises(BackendError, match="COMPACTINST_KERNEL_TARGET=sm_75 is not one of"):
        loader.load_module("overlay")
