#!/bin/sh
# gpuplan-bundle.sh: the GPU planner (templates/plan_gpu.cuh) is compiled by
# tessera-gen into every variant's module for every target: each cubin the
# registry lists must define tsr_plan_count and tsr_plan_emit next to the
# attention kernel, and every compile target must appear.  Runs anywhere
# (reads the ELF symbol names; no GPU needed).
set -u
top_build=${TSR_TOP_BUILDDIR:-.}
b=$top_build/bundle
reg=$b/registry.json
if [ ! -f "$reg" ]; then
  echo "gpuplan-bundle: no bundle at $b (build it first)" >&2
  exit 1
fi
fail=0
n=0
for arch in sm_80 sm_89 sm_90a sm_100a sm_120; do
  grep -q "\"$arch\"" "$reg" || { echo "gpuplan-bundle: no $arch target in $reg" >&2; fail=1; }
done
for cubin in $(sed -n 's/.*"cubin": "\([^"]*\)".*/\1/p' "$reg"); do
  f=$b/$cubin
  if [ ! -s "$f" ]; then
    echo "gpuplan-bundle: missing cubin $f" >&2
    fail=1
    continue
  fi
  for sym in tsr_plan_count tsr_plan_emit "$(basename "$cubin" .cubin)"; do
    if ! LC_ALL=C grep -q -a "$sym" "$f"; then
      echo "gpuplan-bundle: $f lacks the kernel $sym" >&2
      fail=1
    fi
  done
  n=$((n + 1))
done
if [ "$n" -eq 0 ]; then
  echo "gpuplan-bundle: the registry lists no cubin" >&2
  exit 1
fi
echo "gpuplan-bundle: $n cubins carry the planning kernels"
exit $fail
