#!/bin/sh
# internal-symbols.sh: every non-static function of the library, the tools'
# libraries and the commands has a caller in another file (or is declared in
# tessera.h, or named by the Python binding): one that only its own file
# calls is static, one that nothing calls is gone.  Reads the objects with
# nm: the archives' members, the commands' objects, and the tests' objects
# (tests count as callers).  Skips (77) without nm or a built tree.
set -u
B=${TSR_TOP_BUILDDIR:-.}
S=${TSR_TOP_SRCDIR:-$(dirname "$0")/..}
command -v nm >/dev/null 2>&1 || { echo "no nm: skipped"; exit 77; }
[ -f "$B/.libs/libtessera.a" ] || { echo "no $B/.libs/libtessera.a: skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tsr-syms.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
# "FILE SYMBOL" for definitions (T) and uses (U), FILE the source's name
# (an object compiled into several targets counts once).
{
  for a in "$B/.libs/libtessera.a" "$B/profiler/libtsrprofile.a" "$B/profiler/libtsrcorpus.a"; do
    [ -f "$a" ] && nm -A "$a" 2>/dev/null
  done
  for o in "$B"/cli/tessera-*.o "$B"/cli/tests_tessera_test-*.o "$B"/gen/tessera_gen-*.o \
    "$B"/profiler/tessera_profile-*.o \
    "$B"/tests/*.o; do
    [ -f "$o" ] && nm -A "$o" 2>/dev/null
  done
} | awk '{
  # "ARCHIVE:MEMBER:ADDR T SYM", "OBJECT:ADDR T SYM", "OBJECT: U SYM"
  n = split($1, parts, ":"); file = parts[n - 1]
  sub(/.*\//, "", file); sub(/^[A-Za-z0-9_]+-/, "", file)
  if (NF == 3 && $2 == "T") print "T", file, $3
  else if (NF == 3 && $2 == "U") print "U", file, $3
}' | sort -u >"$tmp/syms"
awk '$1 == "T" { print $3, $2 }' "$tmp/syms" | sort >"$tmp/defs"
awk '$1 == "U" { print $3, $2 }' "$tmp/syms" | sort >"$tmp/uses"
[ -s "$tmp/defs" ] || { echo "no symbols read"; exit 99; }
bad=0
while read -r sym file; do
  case $sym in tsr_* | tsri_* | tsrp_* | cli_* | gen_*) ;; *) continue ;; esac
  # a caller in another file
  awk -v s="$sym" -v f="$file" '$1 == s && $2 != f { found = 1 } END { exit !found }' \
    "$tmp/uses" && continue
  grep -q "\\b$sym *(" "$S/runtime/tessera.h" && continue
  grep -q "\\b$sym\\b" "$S"/python/tessera/*.py && continue
  echo "FAIL: $sym ($file) has no caller in another file: make it static or remove it"
  bad=1
done <"$tmp/defs"
[ $bad -eq 0 ] && echo "ok: $(wc -l <"$tmp/defs") functions, each called from another file or public"
exit $bad
