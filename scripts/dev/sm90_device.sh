#!/bin/sh
# One device call: correctness cases, then timings (Wan2.1-1.3B size, random
# 128-token block masks, tasks head-major with ascending key tiles), with and
# without the consumer ping-pong.  Logs go to $OUT.
cd "$(dirname "$0")/../.."
H=build-sm90/sm90_harness
export SM90_CUBINS=build-sm90
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 120 $H check ${SEED:-1} 2>&1 | grep -v "^  plan" | tee $OUT/check.log
export SM90_ORDER=${ORDER:-1} SM90_SHUFFLE=0
for v in "128 2" "128 3" "64 3"; do
  set -- $v
  for pp in "" _pp1; do
    SM90_SUFFIX=$pp timeout 60 $H bench 32760 12 $1 128 128 $2 0 128 0.1 0.25 0.5 1.0 2>&1 | grep bench | tee -a $OUT/bench.log
  done
done
if [ -n "$DENSE" ]; then
  timeout 60 python3 scripts/dev/sdpa_dense.py 32760 12 128 2>&1 | tee -a $OUT/bench.log
  timeout 60 python3 scripts/dev/sdpa_dense.py 32760 12 64 2>&1 | tee -a $OUT/bench.log
fi
true
