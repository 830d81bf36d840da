#!/bin/sh
# Device validation of a build folder made on the development machine: SASS
# of every sm_90a cubin (HGMMA present, no local memory), tests/gpu_attn over
# every variant, compute-sanitizer memcheck + racecheck on the sm90 families
# this work changed, then bench-vs-torch rows.  Logs to $OUT.
#   scripts/dev/sm90b_validate.sh BUILD   (from the repository root)
# Env: ATTN_ONLY (gpu_attn --only prefix), SAN_ONLY (variant prefixes for the
# sanitizers), BENCH_CASES / BENCH_ONLY / BENCH_LIMIT (bench-vs-torch).
b=${1:-build}
export TESSERA_BUNDLE=$b/bundle
cd "$(dirname "$0")/../.."
# the standalone harness first (build-sm90, made by sm90_build.sh), if carried
if [ -x build-sm90/sm90_harness ]; then
  SM90_CUBINS=build-sm90 timeout 60 build-sm90/sm90_harness check ${SEED:-5} > $OUT/harness_check.log 2>&1
  echo "harness check exit $?: $(grep -c '  OK' $OUT/harness_check.log) OK, $(grep -c FAIL $OUT/harness_check.log) FAIL"
fi
for f in $b/bundle/sm_90a/tsr_sm90*.cubin; do
  n=$(basename $f .cubin)
  sass=$(cuobjdump -sass $f)
  printf '%s HGMMA %d LDL/STL %d\n' $n "$(echo "$sass" | grep -c HGMMA)" "$(echo "$sass" | grep -cE '\bLDL|\bSTL')"
done > $OUT/sass.txt
grep -E " HGMMA 0 | LDL/STL [1-9]" $OUT/sass.txt && echo "SASS: FAIL" || echo "SASS: ok ($(wc -l < $OUT/sass.txt) sm90 cubins)"
timeout ${ATTN_LIMIT:-150} $b/tests/gpu_attn --seed ${SEED:-11} ${ATTN_ONLY:+--only $ATTN_ONLY} > $OUT/gpu_attn.log 2>&1
echo "gpu_attn exit $?: $(grep -c ' ok$' $OUT/gpu_attn.log) ok, $(grep FAIL $OUT/gpu_attn.log | grep -vc 'no variant serves') FAIL (not counting plans no filtered variant serves)"
grep FAIL $OUT/gpu_attn.log | grep -v 'no variant serves' | head -5
tail -2 $OUT/gpu_attn.log
for v in ${SAN_ONLY:-tsr_sm90_bf16_d128_m64n64_s2_g3 tsr_sm90_bf16_d128_m128n64_s2_g3_flat_mb}; do
  for tool in memcheck racecheck; do
    timeout ${SAN_LIMIT:-60} compute-sanitizer --tool $tool --racecheck-report all $b/tests/gpu_attn --quick --only $v > $OUT/san_${tool}_$v.log 2>&1
    echo "$tool $v exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_${tool}_$v.log | tail -1); runs $(grep -c ' ok$' $OUT/san_${tool}_$v.log) ok, $(grep FAIL $OUT/san_${tool}_$v.log | grep -vc 'no variant serves') FAIL"
  done
done
if [ -n "$BENCH_CASES" ]; then
  TESSERA_LIBRARY=$b/.libs/libtessera.so PYTHONUNBUFFERED=1 timeout ${BENCH_LIMIT:-240} python3 scripts/bench-vs-torch \
    --only ${BENCH_ONLY:-wan1.3b-480p} --cases $BENCH_CASES --json $OUT/bench.json > $OUT/bench-vs-torch.txt 2>&1
  echo "bench-vs-torch exit $?"
  grep -E "tessera-exec|flex |sdpa-cudnn|failed|differs" $OUT/bench-vs-torch.txt
fi
true
