#!/bin/sh
# gpuplan-bundle.sh: tessera-gen compiles the GPU planner
# (templates/plan_gpu.cuh) for every compile target: the registry lists a
# planner module for each target, and each tsr_plan.cubin is an ELF file that
# defines tsr_plan_count and tsr_plan_emit.  Runs anywhere (reads the ELF
# symbol names; no GPU needed).
set -u
top_build=${TSR_TOP_BUILDDIR:-.}
b=$top_build/bundle
reg=$b/registry.json
if [ ! -f "$reg" ]; then
  echo "gpuplan-bundle: no bundle at $b (build it first)" >&2
  exit 1
fi
planner=$(sed -n '/"planner"/,$p' "$reg")
fail=0
n=0
for arch in sm_80 sm_89 sm_90a sm_100a sm_120; do
  if ! printf '%s' "$planner" | grep -q "\"$arch/tsr_plan.cubin\""; then
    echo "gpuplan-bundle: the registry lists no planner for $arch" >&2
    fail=1
    continue
  fi
  f=$b/$arch/tsr_plan.cubin
  if [ ! -s "$f" ] || [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" != '177ELF' ]; then
    echo "gpuplan-bundle: $f is missing or not an ELF file" >&2
    fail=1
    continue
  fi
  for sym in tsr_plan_count tsr_plan_emit; do
    if ! LC_ALL=C grep -q -a "$sym" "$f"; then
      echo "gpuplan-bundle: $f lacks the kernel $sym" >&2
      fail=1
    fi
  done
  n=$((n + 1))
done
echo "gpuplan-bundle: planner compiled for $n of 5 targets"
exit $fail
