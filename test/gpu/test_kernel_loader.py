"""The runtime kernel loader (compactinst_ros/gpu/loader.py): which image it picks for a device,
where it finds nvcc when PATH lacks it, the private cache of nvcc-built cubins, and the error
that names the fix when nothing fits. Loading runs through the pycuda stand-in, which reads the
image handed to ``module_from_buffer`` (test/gpu/emu/pycuda_emu.py)."""

from __future__ import annotations

import copy
import re
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
CUDA_12_2, CUDA_12_6, CUDA_12_8, CUDA_12_9, CUDA_13_2 = 12020, 12060, 12080, 12090, 13020
JETPACK_NVCC = Path("/usr/local/cuda/bin/nvcc")
#: Every compute capability from Turing to Blackwell, with the oldest driver that runs it (the
#: CUDA release that added it): JetPack 6.1/6.2's 12.6, x86 12.8/12.9, JetPack 7.2's 13.2.
CAPABILITIES = {
    (7, 5): CUDA_12_2, (8, 0): CUDA_12_2, (8, 6): CUDA_12_2, (8, 7): CUDA_12_2,
    (8, 8): 13000, (8, 9): CUDA_12_2, (9, 0): CUDA_12_2, (10, 0): CUDA_12_8,
    (10, 3): CUDA_12_9, (11, 0): 13000, (12, 0): CUDA_12_8, (12, 1): CUDA_12_9,
}  # fmt: skip
#: Which shipped images load, in the loader's order, per compute capability: a cubin of the
#: same major and the same or a lower minor (the closest first), then the Turing PTX that the
#: driver JIT-compiles for any newer GPU; nvcc last. The same on a 12.6 and a 13.2 driver.
LOADS = {
    (7, 5): ["sm_75", "compute_75"],  # Turing (T4, RTX 20xx)
    (8, 0): ["sm_80", "compute_75"],  # A100
    (8, 6): ["sm_86", "sm_80", "compute_75"],  # RTX 30xx, RTX A4000
    (8, 7): ["sm_87", "sm_86", "sm_80", "compute_75"],  # Jetson Orin
    (8, 8): ["sm_87", "sm_86", "sm_80", "compute_75"],  # no own cubin: Orin's runs on it
    (8, 9): ["sm_89", "sm_87", "sm_86", "sm_80", "compute_75"],  # Ada (RTX 40xx, L4)
    (9, 0): ["sm_90", "compute_75"],  # Hopper
    (10, 0): ["compute_75"],  # Blackwell B200: no SASS from NVRTC 12.6, PTX JIT
    (10, 3): ["compute_75"],
    (11, 0): ["compute_75"],  # Jetson Thor
    (12, 0): ["compute_75"],  # RTX 50xx
    (12, 1): ["compute_75"],  # DGX Spark
}  # fmt: skip


@pytest.mark.parametrize(
    ("capability", "driver"),
    [(c, d) for c in sorted(CAPABILITIES) for d in (CUDA_12_6, CUDA_13_2) if d >= CAPABILITIES[c]],
)
def test_every_gpu_from_turing_on_loads_a_shipped_image(
    capability: tuple[int, int], driver: int
) -> None:
    """Every compute capability 7.5..12.x loads a shipped image without nvcc, under JetPack
    6.1/6.2's CUDA 12.6 driver (on the GPUs that driver runs) and JetPack 7.2's CUDA 13.2."""
    order, skipped = loader.plan(capability, driver, MANIFEST, "postprocess")
    assert order == [*LOADS[capability], "nvcc"]
    assert len(skipped) + len(order) - 1 == len(TARGETS)  # every left-out image says why


def test_docs_table_says_what_the_plan_loads() -> None:
    """docs/gpu.md's table of which image each GPU loads is LOADS, row for row."""
    text = (Path(loader.__file__).resolve().parents[2] / "docs" / "gpu.md").read_text()
    start = text.index("| compute capability | GPUs | first choice (then) |")
    documented = {}
    for row in text[start:].splitlines()[2:]:
        if not row.startswith("|"):
            break
        capabilities, _, images = (cell.strip() for cell in row.strip("|").split("|"))
        for capability in capabilities.split(", "):
            major, minor = capability.split(".")
            documented[(int(major), int(minor))] = re.findall(r"`(\w+)`", images)
    assert documented == LOADS


def test_every_capability_has_a_row_and_the_table_covers_every_target() -> None:
    """LOADS spans Turing to Blackwell, and every shipped image is some GPU's first choice."""
    assert set(LOADS) == set(CAPABILITIES)
    assert {order[0] for order in LOADS.values()} == set(TARGETS)


@pytest.mark.parametrize(
    ("capability", "driver", "order"),
    [
        ((8, 7), CUDA_12_2, ["sm_87", "sm_86", "sm_80", "nvcc"]),  # JetPack 6.0: no 12.6 PTX JIT
        ((7, 5), CUDA_12_2, ["sm_75", "nvcc"]),
        ((7, 2), CUDA_12_2, ["nvcc"]),  # Xavier: older than every image
        ((6, 1), CUDA_12_6, ["nvcc"]),  # Pascal
    ],
)
def test_old_drivers_and_old_gpus(capability: tuple[int, int], driver: int, order: list) -> None:
    got, skipped = loader.plan(capability, driver, MANIFEST, "postprocess")
    assert got == order
    assert len(skipped) == len(TARGETS) - (len(order) - 1)


def test_plan_says_why_it_leaves_images_out() -> None:
    _, skipped = loader.plan((8, 7), CUDA_12_2, MANIFEST, "overlay")
    assert skipped == [
        "sm_75: SASS of compute capability 7.x, not compute capability 8.7",
        "sm_89: SASS for a newer GPU than compute capability 8.7",
        "sm_90: SASS of compute capability 9.x, not compute capability 8.7",
        "compute_75: the driver (12.2) is older than the CUDA 12.6 that wrote the PTX, "
        "so it cannot JIT it",
    ]
    _, skipped = loader.plan((7, 2), CUDA_12_6, MANIFEST, "overlay")
    assert "compute_75: PTX for a newer GPU than compute capability 7.2" in skipped


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
    assert info.params == {
        name: param_layout(SIGNATURES[name]) for name in ("pre_letterbox", "pre_letterbox_half")
    }
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
    ptx = (loader.IMAGE_DIR / "overlay.compute_75.ptx").read_bytes()
    with pytest.raises(driver.LogicError, match="NUL"):
        driver.module_from_buffer(ptx)
    assert driver.module_from_buffer(ptx + b"\0").image.target == "compute_75"


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_device_choice_without_a_forced_target(emu_lib, monkeypatch) -> None:
    """Unforced, the loader asks the device: a Blackwell GPU (12.0) under a 13.2 driver gets
    the PTX, an RTX A4000 (8.6) its cubin, an Orin its own."""
    driver = pycuda_emu.install(monkeypatch, emu_lib)
    monkeypatch.delenv(loader.TARGET_ENV)
    monkeypatch.setattr(pycuda_emu.Device, "compute_capability", lambda self: (12, 0))
    monkeypatch.setattr(driver, "get_driver_version", lambda: CUDA_13_2)
    assert loader.load_module("overlay").image.target == "compute_75"
    assert loader.LOADED["overlay"] == "compute_75"  # what reports say was loaded
    monkeypatch.setattr(pycuda_emu.Device, "compute_capability", lambda self: (8, 6))
    assert loader.load_module("overlay").image.target == "sm_86"
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
    assert "sm_87: SASS of compute capability 8.x, not compute capability 0.0" in message
    assert "compute_75: PTX for a newer GPU" in message
    assert "nvcc: not found (PATH, $CUDA_HOME/bin, /nonexistent/cuda/bin)" in message
    assert "Fix: install the CUDA compiler" in message and "cuda-nvcc-12-6" in message


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_forced_target_must_be_known(emu_lib, monkeypatch) -> None:
    pycuda_emu.install(monkeypatch, emu_lib, "sm_72")
    with pytest.raises(BackendError, match="COMPACTINST_KERNEL_TARGET=sm_72 is not one of"):
        loader.load_module("overlay")
