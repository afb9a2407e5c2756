# Two commands do everything on a fresh machine: `make demo` and `make test`.
# The PyPI ROS 2 wheels used by the tests are built for CPython 3.11; the runtime itself needs 3.10+.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || echo python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# A folder of prebuilt launch/launch_ros wheels next to the checkout, where present: the launch
# tests run the launch files with them (they skip without it). --no-deps: the wheels require ROS
# package names; their PyPI needs are osrf-pycommon, pyyaml and lark (lark-parser provides it).
LAUNCH_WHEELS ?= $(or $(COMPACTINST_LAUNCH_WHEELS),../shared/ros-launch)

.PHONY: venv venv-jazzy jazzy-interfaces test test-suite test-jazzy test-full test-network test-py312 lint demo clean \
	default-model kernels

# The install goes through uv (from PyPI): it resolves the same versions as pip but downloads and
# unpacks in parallel, 20 s here against pip's 2 min 20 s for the dev extra. It leaves the
# bytecode to the first import (pip compiles all of torch, most of which no test imports). uv
# reads none of pip's settings, so pip's find-links (a local torch wheel, say) are passed on;
# where uv cannot be had or fails, pip does the install.
UV := $(VENV)/bin/uv
UV_FIND_LINKS_ARGS := $(foreach link,$(PIP_FIND_LINKS),--find-links $(link))
# $(call PIP_INSTALL,python,arguments)
PIP_INSTALL = { test -x $(UV) && $(UV) pip install -q --python $(1) $(UV_FIND_LINKS_ARGS) $(2); } || \
	$(1) -m pip install -q $(2)

$(STAMP): setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv || echo 'uv not installed: pip installs instead'
	$(call PIP_INSTALL,$(PY),-e '.[dev]')
	if [ -d '$(LAUNCH_WHEELS)' ]; then \
		$(call PIP_INSTALL,$(PY),--no-deps '$(LAUNCH_WHEELS)'/*.whl) && \
		$(call PIP_INSTALL,$(PY),osrf-pycommon pyyaml lark-parser); \
	fi
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/vermin -q --no-tips --violations -t=3.10- --eval-annotations --backport dataclasses compactinst_ros test scripts launch setup.py

# The suite runs in a private network namespace with only lo up where the machine allows one
# (scripts/private_net.sh), so no DDS traffic of a test can leave the host; the tests that need
# the package index (marker `network`, these files) run on the host network first.
NETWORK_TESTS := test/launch/test_vehicle_install.py

# `make test` leaves out the tests marked `full` (the soak, cross-checks of the larger model configs,
# whole fleet runs on Ray) to stay within 10 minutes on 2 cores; `make test-full` runs those too.
TEST_MARKS ?= not network and not full
# pytest-xdist workers: three on two cores, since the workers wait on nodes and DDS part of the
# time (two kept 1.7 of the 2 cores busy; three, 1.9: a make test 9:01 against ~10:30);
# loadfile keeps each file (and its module fixtures) on one worker, and --no-loadscope-reorder
# keeps the order test/conftest.py gives them (the slowest first). TEST_WORKERS=1 runs serially.
TEST_WORKERS ?= 3

# Python 3.12 (Jazzy's, the lowest Lyrical takes): the tests that need no ROS, torch or GPU
# stand-ins run again in a second venv holding the runtime dependencies alone (so numpy 2 and the
# newest opencv and onnxruntime), about 15 s; a file here must keep needing none of those.
# pyenv's own install first: its python3.12 shim on PATH fails unless 3.12 is a selected version
PYTHON312 ?= $(or $(lastword $(wildcard $(HOME)/.pyenv/versions/3.12.*/bin/python3.12)),$(shell command -v python3.12 2>/dev/null))
VENV312 := .venv312
STAMP312 := $(VENV312)/.installed
PY312_TESTS := test/test_image_formats.py test/test_depth_formats.py test/test_overlay.py \
	test/test_bundle.py test/test_dds_env.py test/test_sizes.py test/test_infer.py \
	test/postprocess/test_postprocess_geometry.py test/postprocess/test_postprocess_instance.py \
	test/postprocess/test_postprocess_semantic.py test/postprocess/test_postprocess_panoptic.py \
	test/test_raster_memory.py

$(STAMP312): setup.py $(STAMP)
	test -x $(VENV312)/bin/python || $(PYTHON312) -m venv $(VENV312)
	$(call PIP_INSTALL,$(VENV312)/bin/python,-e . 'pytest>=7' 'pytest-timeout>=2.1')
	touch $(STAMP312)

# Without a python3.12 this step says so and passes, except in CI (CI=true), where it fails.
test-py312:
	@if [ -z '$(PYTHON312)' ] && [ '$(CI)' != true ]; then \
		echo 'test-py312: no python3.12 on PATH or in ~/.pyenv/versions: skipped'; \
	else \
		$(MAKE) --no-print-directory $(STAMP312) && \
		./scripts/private_net.sh $(VENV312)/bin/python -m pytest -q -p no:cacheprovider $(PY312_TESTS); \
	fi

test-network: $(STAMP)
	. ./scripts/ros_env.sh && $(VENV)/bin/python -m pytest -q -m network $(NETWORK_TESTS)

# Hosts that set PYTHONDONTWRITEBYTECODE make every test process recompile the package and every
# pytest worker rewrite every test module's asserts again; the suite starts ~200 processes.
unexport PYTHONDONTWRITEBYTECODE

# Lint, the network tests (mostly waiting on the package index) and the Python 3.12 step run
# beside the main suite rather than before it: together they took a minute and a half of wall
# time and little CPU. Their few lines of output come between the suite's progress lines (make's
# output sync would hold the suite's progress back until it ends); any of them failing fails
# make test.
#
# The Jazzy lane (test-jazzy, below) runs after the Kilted suite, not beside it: beside it (six
# pytest workers on two cores) the suite took 9:31 and the lane 6:48, each failing a realtime test
# on frames its loaded node dropped; one after the other they took about 7 and 3 minutes
# (2026-12-07). The lane's venv and interface builds go beside the suite (package unpacking, then
# compiling at the lowest priority). A failure in either part fails make test; both always run.
test: $(STAMP)
	status=0; \
	$(MAKE) --no-print-directory -j5 lint test-network test-py312 test-suite jazzy-interfaces \
		|| status=1; \
	$(MAKE) --no-print-directory test-jazzy || status=1; \
	exit $$status

# The default model's FP16 and INT8 graphs as files (models/default/typed/, ignored by git), each
# checked against the sha256 bundle.json records as it is written: the test processes that load
# them then read them instead of deriving each again (3-4 s a graph on 2 cores).
DERIVED := models/default/typed/.derived
$(DERIVED): $(STAMP) models/default/bundle.json models/default/encoder.onnx models/default/decoder.onnx
	$(PY) -m compactinst_ros.cli derive models/default
	touch $@

test-suite: $(STAMP) $(DERIVED)
	. ./scripts/ros_env.sh && \
		./scripts/private_net.sh $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile \
			--no-loadscope-reorder --durations=30 -m '$(TEST_MARKS)' test

# The Jazzy lane: the tests that start ROS (or import rclpy) run again on Jazzy's own wheels from
# PyPI (rclpy 7, rcl 9, Fast DDS 2.14, its rosidl), in a venv of their own (.venv-jazzy: both
# distributions' wheels install the same distribution names, ros-rclpy and so on, so one venv holds
# one of them). Everything else the tests import comes from the same extra as the Kilted lane's
# (setup.py TEST_DEPS); uv's cache makes the second torch and friends an unpack (~35 s here).
# ROS_DISTRO=jazzy makes compactinst_ros/dds_env.py set the profile variable Fast DDS 2.x reads.
# test/eval/test_eval_fleet.py is not on the lane: it starts no node (its replays run the Pipeline
# on Ray workers, rclpy only imported with the replay module, as on the lane's other replay
# tests), and its Ray cluster and two fleet runs were the lane's longest file, 88 s.
VENV_JAZZY := .venv-jazzy
STAMP_JAZZY := $(VENV_JAZZY)/.installed
JAZZY_TESTS := test/ros test/eval/test_eval_cameras.py test/eval/test_eval_demo.py \
	test/eval/test_eval_metrics.py test/eval/test_eval_output_bag.py \
	test/eval/test_eval_realtime.py test/eval/test_eval_resources.py \
	test/eval/test_eval_truncated.py test/scripts/test_scripts_run.py test/test_dds_env.py \
	test/test_exit_codes.py test/test_no_torch.py
# Tests of those files that start no node, left out of the lane: training, and the CPU benchmark
# (its messages are built by the same code as every node test's on the lane); 37 s of its 3 min.
JAZZY_DESELECT := test/test_exit_codes.py::test_interrupted_train_saves_its_last_state_and_exits_130 \
	test/scripts/test_scripts_run.py::test_bench_cpu_prints_every_path_the_ratio_and_the_targets

$(STAMP_JAZZY): setup.py $(STAMP)
	test -x $(VENV_JAZZY)/bin/python || $(PYTHON) -m venv $(VENV_JAZZY)
	$(call PIP_INSTALL,$(VENV_JAZZY)/bin/python,-e '.[dev-jazzy]')
	if [ -d '$(LAUNCH_WHEELS)' ]; then \
		$(call PIP_INSTALL,$(VENV_JAZZY)/bin/python,--no-deps '$(LAUNCH_WHEELS)'/*.whl) && \
		$(call PIP_INSTALL,$(VENV_JAZZY)/bin/python,osrf-pycommon pyyaml lark-parser); \
	fi
	touch $(STAMP_JAZZY)

venv-jazzy: $(STAMP_JAZZY)

# The interface packages the Jazzy lane's tests build (vision_msgs, tf2_msgs and the test-only
# ones: a minute and a half of compiling on a fresh clone, cached after), built beside the Kilted
# lane at the lowest priority, in the CPU time its workers leave idle while they wait on nodes.
jazzy-interfaces: $(STAMP_JAZZY)
	nice -n 19 $(VENV_JAZZY)/bin/python test/ros/interface_build.py

# Four workers: the lane's tests wait on nodes and DDS more than the suite's (three kept 1.3 of
# the 2 cores busy, four 1.6: 181 s against 166 s of pytest here, 2026-12-07).
JAZZY_WORKERS ?= 4

test-jazzy: $(STAMP_JAZZY) $(DERIVED)
	export ROS_DISTRO=jazzy && . ./scripts/ros_env.sh && \
		./scripts/private_net.sh $(VENV_JAZZY)/bin/python -m pytest -q -n $(JAZZY_WORKERS) \
			--dist loadfile --no-loadscope-reorder --durations=15 -m '$(TEST_MARKS)' $(JAZZY_TESTS) \
			$(foreach test,$(JAZZY_DESELECT),--deselect $(test))

test-full:
	$(MAKE) test TEST_MARKS='not network'

demo: $(STAMP)
	. ./scripts/ros_env.sh && $(PY) -m compactinst_ros.demo --out out/demo

# Rebuilds the shipped kernel images (gpu/kernels/images) with NVRTC 12.6, JetPack 6.1/6.2's CUDA;
# commit them with the sources (test/gpu/test_kernel_images.py fails on stale images).
kernels: $(STAMP)
	$(PY) -m compactinst_ros.gpu.build

# Regenerates models/default (synthetic data, CPU training, export, held-out accuracy); resumable.
default-model: $(STAMP)
	$(PY) -m compactinst_ros.train.make_default

clean:
	rm -rf $(VENV) $(VENV312) $(VENV_JAZZY) build install log out
