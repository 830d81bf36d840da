#!/bin/sh
# One device call for v7 (notes/sm90.md): two Q buffers and prefetched task
# records for two 64-row tasks a CTA, on a persistent grid.  Harness check
# (flat grid, then a persistent grid capped at 3 CTAs so that every stream
# runs many tasks; stops on a failure), then old vs new timings, then the
# library build: tests/gpu_attn, memcheck + racecheck on the new variant,
# bench-vs-torch rows.  Logs to $OUT.   sh scripts/dev/sm90d_device.sh [BUILD [grid]]
# ('grid': the second call, grid shapes; see inside)
b=${1:-build}
cd "$(dirname "$0")/../.."
H=build-sm90/sm90_harness
export SM90_CUBINS=build-sm90 SM90_ORDER=2 SM90_SHUFFLE=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/bench.log
# (the grid call runs the same code as the first: its checks are not repeated)
if [ "$2" != grid ]; then
  SM90_GRID=flat timeout 60 $H check ${SEED:-5} > $OUT/check_flat.log 2>&1; st1=$?
  SM90_GRID=3 timeout 60 $H check ${SEED:-6} > $OUT/check_pers3.log 2>&1; st2=$?
  echo "check flat exit $st1: $(grep -c '  OK' $OUT/check_flat.log) OK, $(grep -c FAIL $OUT/check_flat.log) FAIL; persistent(3) exit $st2: $(grep -c '  OK' $OUT/check_pers3.log) OK, $(grep -c FAIL $OUT/check_pers3.log) FAIL"
  grep -B1 FAIL $OUT/check_flat.log $OUT/check_pers3.log | head -8
  [ $st1 -eq 0 ] && [ $st2 -eq 0 ] || { echo "harness check failed: timings skipped"; exit 1; }
fi
# b LABEL GRID [env...] -- bench args
b() { l=$1; g=$2; shift 2; SM90_GRID=$g timeout 40 env "$@" 2>&1 | grep bench | sed "s/^bench /$l $g /" | tee -a $OUT/bench.log; }
if [ "$2" = grid ]; then
  # second call: the grid (flat, persistent, flat with 2 tasks a stream:
  # SM90_GRID=1536 = 6144 tasks / 4) for the QPF build, QPF off on the
  # flat grid, then the library with the flat s2 g3 variant in the catalog
  b random flat SM90_G3=1 SM90_MASK=random $H bench 32760 12 128 64 64 3 1 64 0.1
  b random flat SM90_G3=1 SM90_MASK=random $H bench 32760 12 128 64 64 2 1 64 0.1 0.25
  b topk flat SM90_G3=1 SM90_MASK=topk $H bench 32760 12 128 64 64 2 1 64 0.1
  b random flat SM90_G3=1 SM90_MASK=random SM90_SUFFIX=_old $H bench 32760 12 128 64 64 2 1 64 0.1 0.25
  b random 1536 SM90_G3=1 SM90_MASK=random $H bench 32760 12 128 64 64 2 1 64 0.1 0.25
  b topk 1536 SM90_G3=1 SM90_MASK=topk $H bench 32760 12 128 64 64 2 1 64 0.1
  b random flat SM90_G3=1 $H bench 17550 48 64 64 64 2 1 64 0.25
  b random 3300 SM90_G3=1 $H bench 17550 48 64 64 64 2 1 64 0.25
  export TESSERA_BUNDLE=$b/bundle
  o=tsr_sm90_bf16_d128_m64n64_s2_g3_flat
  timeout 25 $b/tests/gpu_attn --seed ${SEED:-12} --only $o > $OUT/gpu_attn_$o.log 2>&1
  echo "gpu_attn $o exit $?: $(grep -c ' ok$' $OUT/gpu_attn_$o.log) ok, $(grep FAIL $OUT/gpu_attn_$o.log | grep -vc 'no variant serves') FAIL"
  TESSERA_LIBRARY=$b/.libs/libtessera.so PYTHONUNBUFFERED=1 timeout ${BENCH_LIMIT:-80} python3 scripts/bench-vs-torch \
    --only wan1.3b-480p,cogvideox5b --cases 64x64:topk10,64x64:random25 --json $OUT/bench.json > $OUT/bench-vs-torch.txt 2>&1
  echo "bench-vs-torch exit $?"
  grep -E "tessera-exec|flex |failed|differs" $OUT/bench-vs-torch.txt
  echo "== harness table"; cat $OUT/bench.log
  exit 0
fi
b random flat SM90_G3=1 SM90_MASK=random $H bench 32760 12 128 64 64 3 1 64 0.1 0.25
b random pers SM90_G3=1 SM90_MASK=random $H bench 32760 12 128 64 64 2 1 64 0.1 0.25
b topk flat SM90_G3=1 SM90_MASK=topk $H bench 32760 12 128 64 64 3 1 64 0.1
b topk pers SM90_G3=1 SM90_MASK=topk $H bench 32760 12 128 64 64 2 1 64 0.1
b random pers SM90_G3=1 SM90_MASK=random SM90_SUFFIX=_old $H bench 32760 12 128 64 64 2 1 64 0.1 0.25
b random flat SM90_G3=1 SM90_MASK=random $H bench 32760 12 128 64 64 2 1 64 0.1
b random flat SM90_G3=1 $H bench 17550 48 64 64 64 3 1 64 0.25
b random pers SM90_G3=1 $H bench 17550 48 64 64 64 2 1 64 0.25
b random flat $H bench 32760 12 128 128 128 2 0 128 0.1 0.25
export TESSERA_BUNDLE=$b/bundle
for f in $b/bundle/sm_90a/tsr_sm90*_m64n64_s2_g3_pers*.cubin build-sm90/v_*g3*.cubin; do
  sass=$(cuobjdump -sass $f)
  echo "sass $(basename $f .cubin) HGMMA $(echo "$sass" | grep -c HGMMA) LDL/STL $(echo "$sass" | grep -cE '\bLDL|\bSTL')"
done | tee $OUT/sass.txt | grep -E " HGMMA 0 | LDL/STL [1-9]" || echo "sass: $(wc -l < $OUT/sass.txt) cubins ok (HGMMA, no local memory)"
V=tsr_sm90_bf16_d128_m64n64_s2_g3_pers
for o in $V tsr_sm90_bf16_d64_m64n64_s2_g3 tsr_sm90_fp16_d128_m64n64_s2_g3; do
  timeout 25 $b/tests/gpu_attn --seed ${SEED:-11} --only $o > $OUT/gpu_attn_$o.log 2>&1
  echo "gpu_attn $o exit $?: $(grep -c ' ok$' $OUT/gpu_attn_$o.log) ok, $(grep FAIL $OUT/gpu_attn_$o.log | grep -vc 'no variant serves') FAIL"
  grep FAIL $OUT/gpu_attn_$o.log | grep -v 'no variant serves' | head -3
done
for tool in memcheck racecheck; do
  timeout 45 compute-sanitizer --tool $tool --racecheck-report all $b/tests/gpu_attn --quick --only $V > $OUT/san_$tool.log 2>&1
  echo "$tool $V exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.log | tail -1); runs $(grep -c ' ok$' $OUT/san_$tool.log) ok, $(grep FAIL $OUT/san_$tool.log | grep -vc 'no variant serves') FAIL"
done
TESSERA_LIBRARY=$b/.libs/libtessera.so PYTHONUNBUFFERED=1 timeout ${BENCH_LIMIT:-100} python3 scripts/bench-vs-torch \
  --only wan1.3b-480p,cogvideox5b --cases 64x64:topk10,64x64:random25 --json $OUT/bench.json > $OUT/bench-vs-torch.txt 2>&1
echo "bench-vs-torch exit $?"
grep -E "tessera-exec|flex |failed|differs" $OUT/bench-vs-torch.txt
echo "== harness table"; cat $OUT/bench.log
true
