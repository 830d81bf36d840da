#!/bin/sh
# gen-sass.sh: the generated cubins use the intended instructions.  The sm80
# family (every target) must show HMMA tensor-core products and LDGSTS
# (cp.async) loads; the sm90 family (sm_90a) must show HGMMA (wgmma); the
# GPU planner (tsr_plan.cubin, every target) its warp ballots (VOTE).
# Skips (77) only when cuobjdump is truly absent.
set -u
top=${TSR_TOP_BUILDDIR:-.}
cuobjdump=${CUOBJDUMP:-}
if test -z "$cuobjdump"; then
  cuobjdump=$(sed -n 's/^CUOBJDUMP = //p' "$top/Makefile" 2>/dev/null)
fi
if test -z "$cuobjdump" || ! test -x "$cuobjdump"; then
  cuobjdump=$(command -v cuobjdump 2>/dev/null || true)
fi
if test -z "$cuobjdump"; then
  echo "gen-sass: skipped: cuobjdump not found (pip install nvidia-cuda-cuobjdump, then re-run configure)"
  exit 77
fi
# cuobjdump 13.5 and later disassemble through nvdisasm, found on PATH:
# put configure's (or one beside cuobjdump) first, and name it when absent
# rather than failing on every cubin.
nvdisasm=${NVDISASM:-}
test -n "$nvdisasm" || nvdisasm=$(sed -n 's/^NVDISASM = //p' "$top/Makefile" 2>/dev/null)
test -n "$nvdisasm" && test -x "$nvdisasm" || nvdisasm=$(dirname "$cuobjdump")/nvdisasm
test -x "$nvdisasm" || nvdisasm=$(command -v nvdisasm 2>/dev/null || true)
if test -n "$nvdisasm"; then
  PATH=$(dirname "$nvdisasm"):$PATH
  export PATH
fi
bundle=$top/bundle
test -f "$bundle/registry.json" || { echo "gen-sass: no bundle at $bundle"; exit 1; }
fail=0
n=0
for arch in sm_80 sm_89 sm_90a sm_100a sm_120; do
  for f in "$bundle/$arch"/tsr_*.cubin; do
    test -f "$f" || continue
    name=$(basename "$f" .cubin)
    # Only what the registry lists (stale files from an older catalog do not count).
    grep -q "\"$arch/$name.cubin\"" "$bundle/registry.json" || continue
    sass=$("$cuobjdump" -sass "$f" 2>&1) || {
      case $sass in
        *nvdisasm*)
          ver=$("$cuobjdump" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
          echo "gen-sass: $cuobjdump needs nvdisasm, which is not on PATH or beside it" \
            "(pip install nvidia-cuda-nvdisasm matching cuobjdump ${ver:-?}, or sh scripts/setup-and-test)"
          exit 1 ;;
      esac
      echo "gen-sass: cuobjdump failed on $f: $sass"; fail=1; continue; }
    case $name in
      tsr_sm80_*) want="HMMA LDGSTS" ;;
      tsr_sm90_*) want="HGMMA" ;;
      tsr_plan) want="VOTE" ;; # the GPU planner: warp ballots
      *) echo "gen-sass: unknown family: $name"; fail=1; continue ;;
    esac
    for ins in $want; do
      if ! printf '%s\n' "$sass" | grep -q "$ins"; then
        echo "gen-sass: $arch/$name: no $ins in SASS"
        fail=1
      fi
    done
    n=$((n + 1))
  done
done
test $n -gt 0 || { echo "gen-sass: no cubins checked"; exit 1; }
echo "gen-sass: $n cubins checked with $cuobjdump (nvdisasm: ${nvdisasm:-none})"
exit $fail
