#!/bin/sh
# gpuplan_device.sh: one device call for GPU planning against a build made
# elsewhere: tests/gpu_plan (device plans vs the host planner and the CPU
# reference, graph replay, capacity, timings of Wan2.1-1.3B 480p and 14B
# 720p), compute-sanitizer memcheck of its --quick subset, then
# scripts/bench-vs-torch on Wan2.1-1.3B (GPU-planned requests, graph replay;
# no FlexAttention compile).  Logs go to $OUT; prints a summary last.
#
#   scripts/dev/gpuplan_device.sh [BUILDDIR]     (default: build)
set -u
b=${1:-build}
out=${OUT:-device-logs}
mkdir -p "$out"
export TESSERA_BUNDLE="$b/bundle" TSR_TOP_BUILDDIR="$b" PYTHONUNBUFFERED=1
{ date -u '+%Y-%m-%d %H:%M:%S UTC'; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; } 2>&1 | tee "$out/device.txt"
t0=$(date +%s)
timeout "${GPU_PLAN_LIMIT:-110}" "$b/tests/gpu_plan" --seed "${SEED:-1}" >"$out/gpu_plan.log" 2>&1
echo "gpu_plan exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$out/device.txt"
if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null 2>&1; then
  t0=$(date +%s)
  timeout "${MEMCHECK_LIMIT:-60}" compute-sanitizer --tool memcheck --error-exitcode 3 "$b/tests/gpu_plan" --quick --seed 2 \
    >"$out/memcheck.log" 2>&1
  echo "memcheck exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$out/device.txt"
fi
if [ "${BENCH:-1}" = 1 ]; then
  t0=$(date +%s)
  TESSERA_LIBRARY="$b/.libs/libtessera.so" timeout "${BENCH_LIMIT:-90}" python3 scripts/bench-vs-torch \
    --quick --no-flex --json "$out/bench.json" >"$out/bench.log" 2>&1
  echo "bench exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$out/device.txt"
fi
grep -E "^FAIL|^TIMING|gpu_plan:" "$out/gpu_plan.log" | head -40
grep -E "ERROR SUMMARY|FAIL|gpu_plan:" "$out/memcheck.log" 2>/dev/null | head -5
tail -n 16 "$out/bench.log" 2>/dev/null
