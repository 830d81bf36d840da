#!/bin/sh
# One device call: correctness cases, then timings (Wan2.1-1.3B size), then
# dense SDPA on the same card.  Logs go to $OUT.  Run from the worktree copy.
cd "$(dirname "$0")/../.."
H=build-sm90/sm90_harness
export SM90_CUBINS=build-sm90
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 120 $H check ${SEED:-1} 2>&1 | tee $OUT/check.log
for v in "128 128 2 0" "128 128 3 0" "128 128 2 1"; do
  set -- $v
  timeout 60 $H bench 32760 12 128 $1 $2 $3 $4 128 0.1 0.25 0.5 1.0 2>&1 | tee -a $OUT/bench.log
done
timeout 60 $H bench 32760 12 64 128 128 3 0 128 0.1 0.25 0.5 2>&1 | tee -a $OUT/bench.log
timeout 60 python3 scripts/dev/sdpa_dense.py 32760 12 128 2>&1 | tee -a $OUT/bench.log
timeout 60 python3 scripts/dev/sdpa_dense.py 32760 12 64 2>&1 | tee -a $OUT/bench.log
