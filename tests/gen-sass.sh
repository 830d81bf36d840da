#!/bin/sh
# gen-sass.sh: the generated cubins use the intended instructions.  The sm80
# family (every target) must show HMMA tensor-core products and LDGSTS
# (cp.async) loads; the sm90 family (sm_90a) must show HGMMA (wgmma), its
# FP8 variants IGMMA int8 products for Q K^T, QGMMA e4m3 products for P V
# and their quantization kernels (issue 18); the
# GPU planner (tsr_plan.cubin, every target) its warp ballots (VOTE); the
# sm80 variants on the fused softmax schedule their exponentials among the
# HMMAs of P V (checked to fail with the schedule turned off, 2026-12-07).
# Skips (77) only when cuobjdump is truly absent.
#
# And every cubin fits its target (issue 17), function by function:
#  - no local-memory spills: no LDL or STL in its SASS, LOCAL 0;
#  - registers: at most 255 a thread, and a CTA of its launch bound
#    (EIATTR_MAX_THREADS, 1024 without one) within the 64K-register file,
#    allocated 256 registers a warp at a time;
#  - shared memory: static plus the registry's dynamic bytes (attention
#    kernels; the planner and merge kernels have static arrays only) at most
#    the target's opt-in limit per block (CUDA programming guide, compute
#    capabilities: 8.0 163 KiB, 8.9 and 12.0 99 KiB, 9.0 and 10.0 227 KiB).
#    From sm_90 on cuobjdump's SHARED includes the 1 KiB the system reserves
#    a CTA (a kernel without shared arrays shows 1024), which the opt-in
#    limit excludes: it is subtracted there.  These are the hardware's
#    figures, kept here rather than taken from runtime/variant.c, whose rule
#    they check.
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
# limit_of ARCH: opt-in shared memory a block, bytes.
limit_of() {
  case $1 in
    sm_80) echo 166912 ;;
    sm_89 | sm_120) echo 101376 ;;
    sm_90a | sm_100a) echo 232448 ;;
  esac
}
# reserved_of ARCH: the system reservation included in cuobjdump's SHARED.
reserved_of() {
  case $1 in
    sm_80 | sm_89) echo 0 ;;
    *) echo 1024 ;;
  esac
}
# dyn_of NAME: the registry's dynamic shared memory of variant NAME (0 for
# anything else: the planner and merge kernels have static arrays only).
dyn_of() {
  awk -v want="\"$1\"," '
    $1 == "\"name\":" { cur = $2 }
    $1 == "\"smem\":" && cur == want { sub(/,/, "", $2); print $2; found = 1; exit }
    END { if (!found) print 0 }' "$bundle/registry.json"
}
# fit ARCH NAME FILE SASS: one line per function that does not fit; none if all do.
fit() {
  { "$cuobjdump" -res-usage "$3" 2>&1; echo "@@elf"; "$cuobjdump" -elf "$3" 2>&1; echo "@@sass"; printf '%s\n' "$4"; } |
    awk -v arch="$1" -v name="$2" -v lim="$(limit_of "$1")" -v rsv="$(reserved_of "$1")" -v dyn="$(dyn_of "$2")" '
      function hex(s,   v, i, c) {
        v = 0; s = tolower(s); sub(/^0x/, "", s)
        for (i = 1; i <= length(s); i++) { c = index("0123456789abcdef", substr(s, i, 1)); v = v * 16 + c - 1 }
        return v
      }
      $0 == "@@elf" { part = 1; next }
      $0 == "@@sass" { part = 2; next }
      part == 0 && $1 == "Function" { fn = $2; sub(/:$/, "", fn); fns[fn] = 1; nfn++; next }
      part == 0 && fn != "" && /REG:/ {
        for (i = 1; i <= NF; i++) { split($i, kv, ":"); val[fn, kv[1]] = kv[2] + 0 }
        fn = ""; next
      }
      part == 1 && /^\.nv\.info\./ { efn = substr($1, 10); next }
      part == 1 && /EIATTR_MAX_THREADS/ { getmax = 2; next }
      part == 1 && getmax > 0 && /Value:/ { maxt[efn] = hex($2) * hex($3) * hex($4); getmax = 0; next }
      part == 2 && /Function :/ { sfn = $3; next }
      part == 2 && /[[:space:]](LDL|STL)[.[:space:]]/ { spill[sfn]++ }
      END {
        for (f in fns) {
          reg = val[f, "REG"]; t = (f in maxt) ? maxt[f] : 1024
          warps = int((t + 31) / 32); perwarp = int((reg * 32 + 255) / 256) * 256
          sh = val[f, "SHARED"] - rsv + (f == name ? dyn : 0)
          if (val[f, "SHARED"] < rsv)
            printf "%s/%s: %s: SHARED %d, below the %d bytes reserved on %s: is cuobjdump reporting differently?\n", arch, name, f, val[f, "SHARED"], rsv, arch
          if (spill[f] > 0) printf "%s/%s: %s: %d LDL/STL (local-memory spills)\n", arch, name, f, spill[f]
          if (val[f, "LOCAL"] > 0) printf "%s/%s: %s: %d bytes of local memory\n", arch, name, f, val[f, "LOCAL"]
          if (reg > 255) printf "%s/%s: %s: %d registers a thread, more than 255\n", arch, name, f, reg
          if (warps * perwarp > 65536)
            printf "%s/%s: %s: %d registers x %d threads exceed the 64K-register file\n", arch, name, f, reg, t
          if (sh > lim) printf "%s/%s: %s: %d bytes of shared memory, %s allows %d a block\n", arch, name, f, sh, arch, lim
        }
        if (nfn == 0) printf "%s/%s: cuobjdump -res-usage lists no function\n", arch, name
      }'
}
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
      # FP8 (issue 18): int8 tensor-core products (IGMMA, s32) for Q K^T,
      # e4m3 ones (QGMMA) for P V, the P fragments packed by saturating
      # e4m3 conversions, and the module's quantization kernels
      tsr_sm90_*_fp8_*) want="IGMMA\.64x[0-9]*x32\.S8\.S8 QGMMA\.64x[0-9]*x32\.F32\.E4M3\.E4M3 F2FP\.SATFINITE\.E4M3 Function:${name}_quant Function:${name}_kvstats" ;;
      tsr_sm90_*) want="HGMMA" ;;
      tsr_plan) want="VOTE" ;; # the GPU planner: warp ballots
      *) echo "gen-sass: unknown family: $name"; fail=1; continue ;;
    esac
    for ins in $want; do
      if ! printf '%s\n' "$sass" | sed 's/Function : /Function:/' | grep -q "$ins"; then
        echo "gen-sass: $arch/$name: no $ins in SASS"
        fail=1
      fi
    done
    # FP8 variants: Q K^T in int8 from shared memory (IGMMA, both operands
    # descriptors), P V in e4m3 with P from registers (QGMMA, register A);
    # no e4m3 product from shared memory (the old e4m3 Q K^T) and no 16-bit one
    case $name in
      tsr_sm90_*_fp8_*)
        if ! printf '%s\n' "$sass" | grep -q "IGMMA\.[^;]* R[0-9]*, gdesc\["; then
          echo "gen-sass: $arch/$name: no shared-operand IGMMA (the Q K^T product) in SASS"; fail=1
        fi
        if ! printf '%s\n' "$sass" | grep -q "QGMMA[^;]*, R[0-9]*, gdesc"; then
          echo "gen-sass: $arch/$name: no register-operand QGMMA (the P V product) in SASS"; fail=1
        fi
        if printf '%s\n' "$sass" | grep -q "QGMMA\.[^ ]* R[0-9]*, gdesc\["; then
          echo "gen-sass: $arch/$name: an e4m3 QGMMA from shared memory (Q K^T should be int8)"; fail=1
        fi
        if printf '%s\n' "$sass" | grep -q "HGMMA"; then
          echo "gen-sass: $arch/$name: a 16-bit HGMMA in an FP8 variant"; fail=1
        fi ;;
    esac
    # The sm80 variants on the fused softmax schedule (attn_sm80.cuh,
    # FUSED_PV: 32-row warps on 64-key tiles at d64, 16-row warps at d128)
    # issue their exponentials between P V's HMMAs: at least a third of the
    # MUFU.EX2s lie within four instructions of an HMMA (51-80% in the five
    # targets' cubins of 2026-12-07; the unfused form, whose rescale branch
    # separates the two, has none so placed).
    case $name in
      tsr_sm80_*)
        set -- $(printf '%s\n' "$name" | sed 's/^tsr_sm80_[a-z0-9]*_d\([0-9]*\)_m\([0-9]*\)n\([0-9]*\)_s[0-9]*_w\([0-9]*\)_.*/\1 \2 \3 \4/')
        fused=0
        if test "$1" = 64; then
          test $(($2 / (16 * $4))) = 2 && test "$3" = 64 && fused=1
        else
          test $(($2 / (16 * $4))) = 1 && fused=1
        fi
        if test $fused = 1; then
          near=$(printf '%s\n' "$sass" | grep -E '^[[:space:]]+/\*[0-9a-f]{4}\*/' | awk '
            { ins[NR] = $0 }
            END {
              for (i = 1; i <= NR; i++) if (ins[i] ~ /MUFU\.EX2/) {
                t++
                for (j = i - 4; j <= i + 4; j++) if (j != i && ins[j] ~ /HMMA/) { k++; break }
              }
              printf "%d %d", k, t
            }')
          set -- $near
          if test $(($1 * 3)) -lt "$2"; then
            echo "gen-sass: $arch/$name: $1 of $2 MUFU.EX2 next to an HMMA: not the fused schedule"; fail=1
          fi
        fi ;;
    esac
    bad=$(fit "$arch" "$name" "$f" "$sass")
    if test -n "$bad"; then
      printf '%s\n' "$bad" | sed 's/^/gen-sass: does not fit: /'
      fail=1
    fi
    n=$((n + 1))
  done
done
test $n -gt 0 || { echo "gen-sass: no cubins checked"; exit 1; }
echo "gen-sass: $n cubins checked (instructions; spills, registers, shared memory) with $cuobjdump (nvdisasm: ${nvdisasm:-none})"
exit $fail
