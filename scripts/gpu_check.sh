#!/usr/bin/env bash
# Everything to measure on a machine with an NVIDIA GPU, in under 8 minutes:
#   bash scripts/gpu_check.sh [OUTDIR]        # default OUTDIR: out/gpu_check
# Needs the CUDA toolkit (nvcc) and pycuda; uses PyTorch (naive post-processing baseline and the
# model latency sweep), TensorRT (engine build, backend parity and latency) and Nsight Compute
# (decoder DRAM bytes) where they are installed. Run from anywhere; Python is $PYTHON (python3).
#   1. scripts/gpu_check.py: kernel parity vs the numpy twin, post-processing benchmark, TensorRT
#      backend -> OUTDIR/gpu_check.log, OUTDIR/gpu_check.json
#   2. scripts/gpu_bench.py: PyTorch FP16 latency sweep, ncu decoder bytes -> OUTDIR/bench/,
#      OUTDIR/gpu_bench.log (given whatever is left of the 8 minutes)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(mkdir -p "${1:-$root/out/gpu_check}" && cd "${1:-$root/out/gpu_check}" && pwd)
python=${PYTHON:-python3}
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cd "$root"
budget=470  # seconds for both steps; the rest of 8 minutes is start-up and margin
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
    2>&1 | tee "$out/gpu.txt"
timeout 210 "$python" scripts/gpu_check.py --reps 50 --bundle models/default --out "$out" \
    2>&1 | tee "$out/gpu_check.log"
check=${PIPESTATUS[0]}
left=$((budget - (SECONDS - start)))
if ((left >= 60)); then
    timeout "$left" "$python" scripts/gpu_bench.py --out "$out/bench" 2>&1 \
        | tee "$out/gpu_bench.log"
    bench=${PIPESTATUS[0]}
else
    echo "gpu_bench.py not run: ${left} s left of the budget" | tee "$out/gpu_bench.log"
    bench=124
fi
echo "gpu_check.py exit $check, gpu_bench.py exit $bench (124: stopped at its time limit); logs in $out"
exit $(( check != 0 ? check : bench ))
