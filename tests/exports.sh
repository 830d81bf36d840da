#!/bin/sh
# exports.sh: libtessera.so exports exactly the functions tessera.h
# declares, no internal function (the runtime's internals use the tsr_
# prefix too) and no function of the header missing.
#
# The declared list comes from the compiler's own reading of the header
# (gcc -aux-info: one line per prototype, with the file it is in), not from
# the pattern the build uses to write the export list, so a declaration
# that pattern missed shows up here as a function not exported.  Without
# -aux-info (another compiler), the preprocessed header is read instead.
# Skips (77) when the build made no shared library.
set -u
top_src=${TSR_TOP_SRCDIR:-..}
top_build=${TSR_TOP_BUILDDIR:-.}
so=$top_build/.libs/libtessera.so
header=$top_src/runtime/tessera.h
cc=${TSR_CC:-cc}

if [ ! -f "$so" ]; then
  echo "exports.sh: no $so (a build without shared libraries): skipped"
  exit 77
fi
command -v nm >/dev/null 2>&1 || { echo "exports.sh: no nm: skipped"; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tsr-exports.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

if $cc -std=c11 -fsyntax-only -aux-info "$tmp/aux" -x c "$header" 2>"$tmp/cc.err"; then
  how="$cc -aux-info"
  grep 'tessera\.h:[0-9]*:' "$tmp/aux" | grep -o 'tsr_[A-Za-z0-9_]* (' | sed 's/ ($//' |
    LC_ALL=C sort -u > "$tmp/declared"
else
  how="$cc -E"
  $cc -E -P -x c "$header" | grep -o 'tsr_[A-Za-z0-9_]* *(' | sed 's/ *($//' |
    LC_ALL=C sort -u > "$tmp/declared"
fi
if [ ! -s "$tmp/declared" ]; then
  echo "exports.sh: no function found declared in $header ($how)"
  cat "$tmp/cc.err"
  exit 1
fi

# Every defined dynamic symbol, of any kind (functions, data), without the
# version suffix newer binutils print (name@@VERSION).
nm -D --defined-only "$so" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' |
  LC_ALL=C sort -u > "$tmp/exported"

status=0
LC_ALL=C comm -23 "$tmp/exported" "$tmp/declared" > "$tmp/extra"
LC_ALL=C comm -13 "$tmp/exported" "$tmp/declared" > "$tmp/missing"
if [ -s "$tmp/extra" ]; then
  echo "exports.sh: libtessera.so exports $(wc -l < "$tmp/extra") symbols tessera.h does not declare:"
  sed 's/^/  /' "$tmp/extra" | head -40
  status=1
fi
if [ -s "$tmp/missing" ]; then
  echo "exports.sh: tessera.h declares $(wc -l < "$tmp/missing") functions libtessera.so does not export:"
  sed 's/^/  /' "$tmp/missing" | head -40
  status=1
fi
[ $status -eq 0 ] &&
  echo "exports.sh: libtessera.so exports the $(wc -l < "$tmp/declared") functions of tessera.h ($how), nothing else"
exit $status
