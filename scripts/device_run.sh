#!/usr/bin/env bash
# Everything a GPU session should measure, in one call of the device tool (about 10 minutes):
#   ../shared/device/stage-wheels    # here, once: pycuda wheels into .device-wheels/
#   device run: bash scripts/device_run.sh   (carry: [".device-wheels"], timeout_s: 600)
# Kernel parity + post-processing benchmark (issue 5), then the PyTorch FP16 latency sweep and
# Nsight Compute decoder bytes (issue 7). Logs and JSON land in $OUT (the device tool's folder).
set -uo pipefail
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --target "$site" .device-wheels/*.whl \
    || echo "device_run: pycuda wheels missing; run ../shared/device/stage-wheels and carry .device-wheels"
export PYTHONPATH="$site:$PWD" PYTHONUNBUFFERED=1
out=${OUT:-out/device}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$out/gpu.txt"
timeout 240 python3 scripts/gpu_check.py --reps 50 --bundle models/default 2>&1 | tee "$out/gpu_check.log"
timeout 300 python3 scripts/gpu_bench.py --out "$out/bench" 2>&1 | tee "$out/gpu_bench.log"
