#!/bin/sh
# gen-errors.sh: tessera-gen's behaviour around the compile itself, with a
# one-variant catalog for one target (the variant and the GPU planner
# module compiled once, the variant once more):
#  - a bad catalog is refused (exit 2) naming the file and the problem
#    (and the value, for an out-of-range integer);
#  - a template that does not compile fails the build (exit 1) with the
#    NVRTC log under the variant's name, and no registry is written;
#  - a second run reuses the cubin (hash match), also after a comment-only
#    template edit, and recompiles after a code edit;
#  - with $TESSERA_GEN_CACHE, a fresh output folder is filled from the cache;
#  - --define: a bad name or value, a name no template tests with #ifndef,
#    and a name given twice are refused (exit 2, named); a knob's define
#    reaches the rendered source and the registry, recompiles the variant
#    (not the planner) and leaves the defaults' cubin in the cache.
set -u
B=${TSR_TOP_BUILDDIR:-.}
S=${TSR_TOP_SRCDIR:-.}
gen="$B/tessera-gen"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tsr-gen-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*"; fail=1; }

cp -R "$S/templates" "$tmp/t"
chmod -R u+w "$tmp/t"
cat >"$tmp/cat.json" <<'JSON'
{"version": 1, "variants": [{"family": "sm80", "dtype": "bf16", "head_dim": 64,
  "tile": [64, 64], "stages": 2, "warps": 4}]}
JSON
name=tsr_sm80_bf16_d64_m64n64_s2_w4_pers_mb
run() { # OUTDIR [ARGS...] -> prints tessera-gen's output, returns its status
  o=$1
  shift
  "$gen" --catalog "$tmp/cat.json" --templates "$tmp/t" --layout "$S/runtime/plan_layout.h" \
    --out "$o" --targets sm_80 "$@" 2>&1
}

# 1. a bad catalog
printf '{"version": 1, "variants": [{"family": "sm80", "dtype": "bf16", "head_dim": 64, "tile": [64, 64], "stages": 2, "warps": 4, "colour": 1}]}' >"$tmp/bad.json"
out=$("$gen" --catalog "$tmp/bad.json" --templates "$tmp/t" --layout "$S/runtime/plan_layout.h" --out "$tmp/o0" 2>&1)
rc=$?
[ $rc -eq 2 ] || die "bad catalog: exit $rc, want 2"
echo "$out" | grep -q "bad catalog '$tmp/bad.json': variant entry 0: unknown key 'colour'" || die "bad catalog message: $out"
# the dyn task layout is the sm90 template's only (issue 20)
printf '{"version": 1, "variants": [{"family": "sm80", "dtype": "bf16", "head_dim": 64, "tile": [64, 64], "stages": 2, "warps": 4, "layout": "dyn"}]}' >"$tmp/bad.json"
out=$("$gen" --catalog "$tmp/bad.json" --templates "$tmp/t" --layout "$S/runtime/plan_layout.h" --out "$tmp/o0" 2>&1)
rc=$?
[ $rc -eq 2 ] || die "dyn on sm80: exit $rc, want 2"
echo "$out" | grep -q "the dyn task layout needs the sm90 family" || die "dyn on sm80 message: $out"
# an integer no variant name can spell is refused, not wrapped into an int
# (4294967360 was built as head dim 64; fuzz_catalog, notes/fuzz.md)
printf '{"version": 1, "variants": [{"family": "sm80", "dtype": "bf16", "head_dim": 4294967360, "tile": [64, 64], "stages": 2, "warps": 4}]}' >"$tmp/bad.json"
out=$("$gen" --catalog "$tmp/bad.json" --templates "$tmp/t" --layout "$S/runtime/plan_layout.h" --out "$tmp/o0" 2>&1)
rc=$?
[ $rc -eq 2 ] || die "head_dim 4294967360: exit $rc, want 2"
echo "$out" | grep -q "bad catalog '$tmp/bad.json': variant entry 0: key 'head_dim' holds 4294967360, out of range \[0, 99999\]" || die "head_dim 4294967360 message: $out"

# 2. a template that does not compile
cp "$tmp/t/attn_sm80.cuh" "$tmp/attn_sm80.good"
echo 'this is not cuda;' >>"$tmp/t/attn_sm80.cuh"
out=$(run "$tmp/o1")
rc=$?
[ $rc -eq 1 ] || die "broken template: exit $rc, want 1"
echo "$out" | grep -q "cannot compile variant '$name' for sm_80" || die "no variant name in: $out"
echo "$out" | grep -qi "error" || die "no NVRTC log in: $out"
[ ! -f "$tmp/o1/registry.json" ] || die "registry written after a failed compile"
cp "$tmp/attn_sm80.good" "$tmp/t/attn_sm80.cuh"

# 3. reuse, comment-only edits, code edits, the shared cache
export TESSERA_GEN_CACHE="$tmp/cache"
out=$(run "$tmp/o2") || die "first build failed: $out"
echo "$out" | grep -q "compiled, 0 reused)" || die "first build: $out"
out=$(run "$tmp/o2") || die "second build failed: $out"
echo "$out" | grep -q "(0 compiled, " || die "second build did not reuse: $out"
printf '/* a comment-only edit */\n' >>"$tmp/t/attn_sm80.cuh"
out=$(run "$tmp/o2") || die "comment edit build failed: $out"
echo "$out" | grep -q "(0 compiled, " || die "a comment edit recompiled: $out"
rm -rf "$tmp/o2"
out=$(run "$tmp/o2") || die "cache build failed: $out"
echo "$out" | grep -q "(0 compiled, " || die "the cache was not used: $out"
printf '#define TSR_GEN_ERRORS_TEST 1\n' >>"$tmp/t/attn_sm80.cuh"
out=$(run "$tmp/o2") || die "code edit build failed: $out"
echo "$out" | grep -q "(1 compiled, " || die "a code edit did not recompile (only) the variant: $out"
head -c 4 "$tmp/o2/sm_80/$name.cubin" | od -c | grep -q "E   L   F" || die "cubin is not an ELF file"
grep -q "\"hash\"" "$tmp/o2/registry.json" || die "registry has no hash"
# 4. inputs that are not files are refused at once (exit 2, named), never
#    waited on; the registry is written through a link (the link stays)
mkfifo "$tmp/cat.fifo" "$tmp/t/zz_fifo.cuh"
out=$(timeout 1 "$gen" --catalog "$tmp/cat.fifo" --templates "$tmp/t" --layout "$S/runtime/plan_layout.h" \
  --out "$tmp/o3" 2>&1)
rc=$?
[ $rc -eq 2 ] || die "FIFO as --catalog: exit $rc, want 2 (124: it waited)"
echo "$out" | grep -q "cannot read catalog '$tmp/cat.fifo': a FIFO, not a regular file" || die "FIFO catalog: $out"
out=$(timeout 1 "$gen" --catalog "$tmp/cat.json" --templates "$tmp/t" --layout "$S/runtime/plan_layout.h" \
  --out "$tmp/o3" --targets sm_80 2>&1)
rc=$?
[ $rc -eq 2 ] || die "FIFO as a template: exit $rc, want 2 (124: it waited)"
echo "$out" | grep -q "cannot read template '$tmp/t/zz_fifo.cuh': a FIFO, not a regular file" || die "FIFO template: $out"
rm -f "$tmp/t/zz_fifo.cuh"
mv "$tmp/o2/registry.json" "$tmp/o2/registry.real" && ln -s registry.real "$tmp/o2/registry.json"
out=$(run "$tmp/o2") || die "build over a registry link failed: $out"
[ -L "$tmp/o2/registry.json" ] && grep -q "\"hash\"" "$tmp/o2/registry.real" || die "the registry link was replaced"

# 5. --define
def() { # ARGS... -> tessera-gen's output on a fresh folder, its status
  "$gen" --catalog "$tmp/cat.json" --templates "$tmp/t" --layout "$S/runtime/plan_layout.h" \
    --out "$tmp/o5" --targets sm_80 "$@" 2>&1
}
for bad in "sm80=1|the name must be TSR_ then capitals" "TSR_knob|the name must be TSR_ then capitals" \
  "TSR_GEN_KNOB_TEST=|the value must be 1 to 127 printable" "TSR_GEN_KNOB_TEST=a\\b|the value must be" \
  "TSR_GEN_KNOB_TEST=1/*x|the value must be"; do
  arg=${bad%%|*}
  out=$(def -D "$arg")
  rc=$?
  [ $rc -eq 2 ] || die "--define '$arg': exit $rc, want 2"
  printf '%s\n' "$out" | grep -qF -- "--define '$arg': ${bad#*|}" || die "--define '$arg' message: $out"
done
out=$(def --define TSR_GEN_KNOB_TEST=1)
rc=$?
[ $rc -eq 2 ] || die "--define of no knob: exit $rc, want 2"
printf '%s\n' "$out" | grep -qF "no template in '$tmp/t' has that knob (no '#ifndef TSR_GEN_KNOB_TEST')" ||
  die "--define of no knob message: $out"
[ ! -e "$tmp/o5/registry.json" ] || die "registry written after a refused --define"
printf '#ifndef TSR_GEN_KNOB_TEST\n#define TSR_GEN_KNOB_TEST 0\n#endif\n' >>"$tmp/t/attn_sm80.cuh"
out=$(def -D TSR_GEN_KNOB_TEST=1 -D TSR_GEN_KNOB_TEST=2)
rc=$?
[ $rc -eq 2 ] || die "a name defined twice: exit $rc, want 2"
printf '%s\n' "$out" | grep -qF "TSR_GEN_KNOB_TEST is defined twice" || die "a name defined twice: $out"
out=$(run "$tmp/o2") || die "build with the knob's default failed: $out"
printf '%s\n' "$out" | grep -q "(1 compiled, " || die "the knob's code edit did not recompile (only) the variant: $out"
grep -q '"defines"' "$tmp/o2/registry.json" && die "a registry without --define lists defines"
out=$(run "$tmp/o2" --define 'TSR_GEN_KNOB_TEST=(TSR_HEAD_DIM + 1)') || die "build with --define failed: $out"
printf '%s\n' "$out" | grep -q "(1 compiled, " || die "--define did not recompile (only) the variant: $out"
printf '%s\n' "$out" | grep -qF "every variant built with TSR_GEN_KNOB_TEST=(TSR_HEAD_DIM + 1) (--define)" ||
  die "--define not reported: $out"
grep -qF '#define TSR_GEN_KNOB_TEST (TSR_HEAD_DIM + 1)' "$tmp/o2/src/$name.cu" || die "--define not in the source"
grep -qF '"TSR_GEN_KNOB_TEST=(TSR_HEAD_DIM + 1)"' "$tmp/o2/registry.json" || die "--define not in the registry"
out=$(run "$tmp/o2") || die "build back at the default failed: $out"
printf '%s\n' "$out" | grep -q "(0 compiled, " || die "the default's cubin was not reused from the cache: $out"

[ $fail -eq 0 ] && echo "gen-errors: ok"
exit $fail
