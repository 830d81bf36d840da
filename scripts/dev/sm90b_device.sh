#!/bin/sh
# One device call for the v5/v6 work (skipping consumers, two tasks a CTA):
# harness correctness cases, then timings at the Wan2.1-1.3B 480p size
# (64-token blocks: random and top-k; 128-token regression) and CogVideoX-5B
# (d64).  SM90_NCU=1 adds ncu counters of the 64x64 kernels.  Logs to $OUT.
cd "$(dirname "$0")/../.."
H=build-sm90/sm90_harness
export SM90_CUBINS=build-sm90 SM90_ORDER=2 SM90_SHUFFLE=0 SM90_GRID=flat
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/bench.log
timeout 90 $H check ${SEED:-5} > $OUT/check.log 2>&1
st=$?
grep -E "FAIL|all ok|FAILURES" $OUT/check.log
# a failed or hung check (exit 124) makes the timings meaningless: stop here
[ $st -eq 0 ] || { echo "harness check exit $st: timings skipped"; exit 1; }
b() { timeout 60 $H bench "$@" 2>&1 | grep bench | sed "s/^/${SM90_MASK:-random} /" | tee -a $OUT/bench.log; }
SM90_G3=1 SM90_MASK=random b 32760 12 128 64 64 3 1 64 0.1 0.25
SM90_G3=1 SM90_MASK=topk b 32760 12 128 64 64 3 1 64 0.1
SM90_G3=1 SM90_MASK=random b 32760 12 128 64 64 2 1 64 0.25
b 32760 12 128 128 128 2 0 128 0.1 0.25 0.5
b 17550 48 64 64 64 2 1 64 0.25
SM90_G3=1 b 17550 48 64 64 64 3 1 64 0.25
if [ -n "$SM90_NCU" ] && command -v ncu >/dev/null; then
  M=gpu__time_duration.sum,lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed
  SM90_G3=1 timeout 60 ncu --clock-control none --launch-skip 2 --launch-count 1 --metrics $M \
      $H bench 32760 12 128 64 64 3 1 64 0.25 > $OUT/ncu_g3.txt 2>&1
  grep -E "duration|lts__|gmma|xu" $OUT/ncu_g3.txt | sed "s/^/ncu g3 /" | tee -a $OUT/bench.log
fi
true
