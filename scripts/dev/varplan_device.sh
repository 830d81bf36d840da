#!/bin/sh
# varplan_device.sh: one device call for GPU planning of variable block
# geometries (notes/varplan.md) against a build made elsewhere:
# tests/gpu_plan without its uniform timings (variable cases included),
# compute-sanitizer memcheck of its --quick subset, tests/request_time on
# the corpus given (phases of the host-planned request, upload, GPU
# planning), then scripts/dev/varplan_bench.py (request vs execution vs
# dense cuDNN).  Logs go to $OUT; prints a summary last.
#
#   scripts/dev/varplan_device.sh BUILDDIR CORPUS_DIR
set -u
b=${1:-build}
c=${2:-corpus}
out=${OUT:-device-logs}
mkdir -p "$out"
export TESSERA_BUNDLE="$b/bundle" TSR_TOP_BUILDDIR="$b" PYTHONUNBUFFERED=1 TESSERA_LIBRARY="$b/.libs/libtessera.so"
{ date -u '+%Y-%m-%d %H:%M:%S UTC'; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; } 2>&1 | tee "$out/device.txt"
t0=$(date +%s)
timeout "${GPU_PLAN_LIMIT:-100}" "$b/tests/gpu_plan" --seed "${SEED:-1}" ${GPU_PLAN_ARGS---no-timing} >"$out/gpu_plan.log" 2>&1
echo "gpu_plan exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$out/device.txt"
if command -v compute-sanitizer >/dev/null 2>&1; then
  t0=$(date +%s)
  timeout "${MEMCHECK_LIMIT:-70}" compute-sanitizer --tool memcheck --error-exitcode 3 "$b/tests/gpu_plan" --quick --seed 2 \
    >"$out/memcheck.log" 2>&1
  echo "memcheck exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$out/device.txt"
fi
t0=$(date +%s)
timeout 40 "$b/tests/request_time" "$c" 0 1 --reps 20 >"$out/request_time.log" 2>&1
echo "request_time exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$out/device.txt"
t0=$(date +%s)
timeout "${BENCH_LIMIT:-90}" python3 scripts/dev/varplan_bench.py "$c" >"$out/bench.log" 2>&1
echo "bench exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$out/device.txt"
grep -E "FAIL|var-|gpu_plan:|corpus:|TIMING" "$out/gpu_plan.log" | head -60
grep -E "ERROR SUMMARY|FAIL|gpu_plan:" "$out/memcheck.log" 2>/dev/null | head -5
cat "$out/request_time.log"
cat "$out/bench.log" | tail -20
