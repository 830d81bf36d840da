#!/bin/sh
# exports.sh: the names of libtessera.
#  1. libtessera.so exports exactly the functions tessera.h declares: nothing
#     the header does not declare, and no function of the header missing.
#  2. Every global symbol the library defines (libtessera.a: functions and
#     data of any section, T D B R ...) is either a function tessera.h
#     declares, named tsr_, or an internal named tsri_: an internal under the
#     public prefix, or under no prefix at all, fails (the tools' own
#     libraries, profiler/tools.h, are not libtessera and keep tsr_).  The static archive is
#     what the tools and tests link, so it is where an internal's name shows.
#
# The declared list comes from the compiler's own reading of the header
# (gcc -aux-info: one line per prototype, with the file it is in), not from
# the pattern the build uses to write the export list, so a declaration
# that pattern missed shows up here as a function not exported.  Without
# -aux-info (another compiler), the preprocessed header is read instead.
# Each half skips when the build made no library of its kind (no shared
# library: 1 is skipped); the whole test skips (77) with neither.
set -u
top_src=${TSR_TOP_SRCDIR:-..}
top_build=${TSR_TOP_BUILDDIR:-.}
so=$top_build/.libs/libtessera.so
archive=$top_build/.libs/libtessera.a
header=$top_src/runtime/tessera.h
cc=${TSR_CC:-cc}

if [ ! -f "$so" ] && [ ! -f "$archive" ]; then
  echo "exports.sh: neither $so nor $archive: skipped"
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

status=0

# 1. Every defined dynamic symbol, of any kind (functions, data), without
# the version suffix newer binutils print (name@@VERSION).
if [ -f "$so" ]; then
  nm -D --defined-only "$so" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' |
    LC_ALL=C sort -u > "$tmp/exported"
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
else
  echo "exports.sh: no $so (a build without shared libraries): exports not checked"
fi

# 2. Global symbols defined in the archive (nm -g: external only; every
# member, every section).  Declared ones pass; tsri_ ones pass; names the
# compiler makes for itself (leading "__", reserved to the implementation:
# i386's __x86.get_pc_thunk.*) pass; the rest fail, split by prefix for
# the message.
if [ -f "$archive" ]; then
  nm -g --defined-only "$archive" | awk 'NF >= 3 { print $3 }' | LC_ALL=C sort -u > "$tmp/globals"
  if [ ! -s "$tmp/globals" ]; then
    echo "exports.sh: no global symbol read from $archive"
    exit 1
  fi
  LC_ALL=C comm -23 "$tmp/globals" "$tmp/declared" | grep -v -e '^tsri_' -e '^__' > "$tmp/bad" || true
  if [ -s "$tmp/bad" ]; then
    grep '^tsr_' "$tmp/bad" > "$tmp/bad_tsr" || true
    grep -v '^tsr_' "$tmp/bad" > "$tmp/bad_other" || true
    if [ -s "$tmp/bad_tsr" ]; then
      echo "exports.sh: libtessera.a defines $(wc -l < "$tmp/bad_tsr") global tsr_ symbols tessera.h does not declare (internals take the prefix tsri_ instead):"
      sed 's/^/  /' "$tmp/bad_tsr" | head -40
    fi
    if [ -s "$tmp/bad_other" ]; then
      echo "exports.sh: libtessera.a defines $(wc -l < "$tmp/bad_other") global symbols with neither prefix (make them static, or name them tsri_):"
      sed 's/^/  /' "$tmp/bad_other" | head -40
    fi
    status=1
  else
    echo "exports.sh: libtessera.a's $(wc -l < "$tmp/globals") global symbols are tessera.h's functions or tsri_ internals"
  fi
fi
exit $status
