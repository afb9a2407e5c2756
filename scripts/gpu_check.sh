#!/usr/bin/env bash
# Everything to measure on a machine with an NVIDIA GPU (a Jetson Orin with stock JetPack
# included: no nvcc on PATH is needed), each step under a stated time limit:
#   bash scripts/gpu_check.sh [OUTDIR]        # default OUTDIR: out/gpu_check
# Needs pycuda; uses PyTorch (naive post-processing baseline and the model latency sweep),
# TensorRT (engine build, backend parity and latency) and Nsight Compute (decoder DRAM bytes)
# where they are installed. Run from anywhere; Python is $PYTHON (python3).
#   1. compactinst build-engine: FP16 engines of models/default at batch sizes 1-4 into
#      OUTDIR/engines (TensorRT only; a rerun finds them there and only checks them)
#      -> OUTDIR/build_engine.log
#   2. scripts/gpu_check.py: kernel parity vs the numpy twin, post-processing benchmark, TensorRT
#      backend on the engines of step 1 -> OUTDIR/gpu_check.log, OUTDIR/gpu_check.json
#   3. scripts/gpu_bench.py: PyTorch FP16 latency sweep, the decoder under Orin proxies (L2
#      flushed, 8 and 16 SMs) beside NVIDIA's builder's bytes per frame (ENGINE_REPORT: a
#      report.json of `compactinst engine-report models/default --paper`, which runs on any x86
#      CPU; the one kept in docs/engine_reports by default), ncu decoder bytes, TensorRT batch
#      sizes 1-4 and 1080p frames overlapped vs serialized (1 and 3 cameras) on the engines of
#      step 1 -> OUTDIR/bench/, OUTDIR/gpu_bench.log
# Time limits (seconds; override with the variables named): a Jetson builds an FP16 engine in
# minutes, so there the build gets 1200 s (GPU_CHECK_BUILD_S; an estimate, not yet measured on
# an Orin: the log says how long it took) and the other steps 300 s and 600 s; elsewhere 300,
# 210 and 260 s. At a limit a step gets SIGTERM, then SIGKILL 15 s later (GPU_CHECK_KILL_S;
# TensorRT's builder thread does not end on SIGTERM); gpu_check.py's JSON keeps every step
# finished by then.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(mkdir -p "${1:-$root/out/gpu_check}" && cd "${1:-$root/out/gpu_check}" && pwd)
python=${PYTHON:-python3}
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cd "$root"
if [[ -r /proc/device-tree/compatible ]] && grep -qa 'nvidia,tegra' /proc/device-tree/compatible; then
    jetson=1  # a Jetson (its model string need not say so: "NVIDIA Orin Nano Developer Kit")
else
    jetson=0
fi
build_s=${GPU_CHECK_BUILD_S:-$((jetson ? 1200 : 300))}
check_s=${GPU_CHECK_CHECK_S:-$((jetson ? 300 : 210))}
bench_s=${GPU_CHECK_BENCH_S:-$((jetson ? 600 : 260))}
kill_s=${GPU_CHECK_KILL_S:-15}
limit() {  # limit SECONDS CMD...: run CMD, SIGTERM at SECONDS, SIGKILL kill_s later
    timeout -k "$kill_s" "$@"
}
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
    if ((jetson)); then echo "device tree model: $(tr -d '\0' </proc/device-tree/model)"; fi
    echo "time limits: engine build ${build_s} s, gpu_check.py ${check_s} s, gpu_bench.py ${bench_s} s"
} | tee "$out/gpu.txt"
build=0
if "$python" -c 'import tensorrt' 2>/dev/null; then
    start=$SECONDS
    limit "$build_s" "$python" -m compactinst_ros.cli build-engine models/default \
        --cache-dir "$out/engines" --batch-sizes 1 2 3 4 2>&1 | tee "$out/build_engine.log"
    build=${PIPESTATUS[0]}
    echo "engine build step: exit $build after $((SECONDS - start)) s of ${build_s} s" \
        | tee -a "$out/build_engine.log"
else
    echo "no TensorRT: no engines built" | tee "$out/build_engine.log"
fi
: >"$out/gpu_check.log"
backend=(--bundle models/default --engine-cache "$out/engines")
if ((build != 0)); then
    backend=()  # building again inside gpu_check.py's limit would only lose its other rows
    echo "gpu_check.py runs without the TensorRT backend row: the engine build failed" \
        | tee "$out/gpu_check.log"
fi
limit "$check_s" "$python" scripts/gpu_check.py --reps 50 "${backend[@]}" --out "$out" 2>&1 \
    | tee -a "$out/gpu_check.log"
check=${PIPESTATUS[0]}
report=${ENGINE_REPORT:-$root/docs/engine_reports/paper-1024x2048-sm86.json}
limit "$bench_s" "$python" scripts/gpu_bench.py --out "$out/bench" --engine-cache "$out/engines" \
    --engine-report "$report" 2>&1 | tee "$out/gpu_bench.log"
bench=${PIPESTATUS[0]}
echo "build-engine exit $build, gpu_check.py exit $check, gpu_bench.py exit $bench" \
    "(124: stopped at its time limit, 137: killed ${kill_s} s after); logs in $out"
for status in "$build" "$check" "$bench"; do
    if ((status != 0)); then exit "$status"; fi
done
exit 0
