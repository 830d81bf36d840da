#!/bin/sh
# gen-constants.sh: the kernel templates take every constant of a variant
# from tessera-gen, under one name each, with no default.  For generated
# sources of both families and both dtypes (the build's bundle/src):
#  - each constant the generator defines is read by the templates the
#    source includes (no alias, no constant nothing reads), and no template
#    defines one of those names itself (no default, no second spelling);
#  - the source preprocesses, and with any one #define dropped it does not
#    (#error): a constant the generator forgets cannot compile silently.
# The host preprocessor stands in for NVRTC's (the bundle build compiles the
# same sources).  Skips (77) without the generated sources or a compiler.
set -u
B=${TSR_TOP_BUILDDIR:-.}
S=${TSR_TOP_SRCDIR:-.}
cc=${CC:-$(sed -n 's/^CC = //p' "$B/Makefile" 2>/dev/null)}
cc=${cc:-cc}
command -v "${cc%% *}" >/dev/null 2>&1 || { echo "gen-constants: no C compiler"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tsr-genconst-XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*"; fail=1; }
pp() { $cc -E -x c++ -P -I"$S/templates" -I"$S/runtime" "$1" >/dev/null 2>"$tmp/err"; }

checked=0
for pat in 'tsr_sm80_bf16_*' 'tsr_sm80_fp16_*' 'tsr_sm90_bf16_*' 'tsr_sm90_fp16_*'; do
  src=$(ls "$B"/bundle/src/$pat.cu 2>/dev/null | head -1)
  [ -n "$src" ] || { echo "gen-constants: no generated source $pat.cu in $B/bundle/src"; exit 77; }
  name=$(basename "$src" .cu)
  tmpl=$(sed -n 's/^#include "\(attn_[a-z0-9]*\.cuh\)"$/\1/p' "$src")
  [ -n "$tmpl" ] || { die "$name: includes no attn_*.cuh template"; continue; }
  files="$S/templates/$tmpl $S/templates/merge.cuh $S/templates/tsr_common.cuh $S/runtime/plan_layout.h"
  pp "$src" || die "$name: does not preprocess: $(cat "$tmp/err")"
  for c in $(sed -n 's/^#define \(TSR_[A-Z0-9_]*\) .*/\1/p' "$src"); do
    # read somewhere other than a comment or the templates' own check
    # (`defined(C)`); defined nowhere but here
    uses=$(cat $files | grep -v '^ *\(/\*\| \*\)' | grep -w "$c" | grep -cv "defined($c)")
    [ "$uses" -gt 0 ] || die "$name: $c is defined by tessera-gen but no template reads it"
    if cat $files | grep -q "^ *# *define  *$c\b"; then
      die "$name: a template defines $c itself (a default or a second name)"
    fi
    grep -v "^#define $c " "$src" >"$tmp/drop.cu"
    if pp "$tmp/drop.cu"; then
      die "$name: preprocesses without $c (a default let it through)"
    elif ! grep -q "#error" "$tmp/err"; then
      die "$name: without $c the error is not the templates' own: $(head -3 "$tmp/err")"
    fi
    checked=$((checked + 1))
  done
done
[ $checked -ge 40 ] || die "only $checked constants checked"
[ $fail -eq 0 ] && echo "gen-constants: $checked constants of 4 generated sources: each read, none defaulted"
exit $fail
