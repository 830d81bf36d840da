#!/bin/sh
# layout.sh: runtime/ is the request path and nothing of the tools.
#  1. No file of runtime/ includes a tools header: a header of profiler/,
#     cli/ or gen/ (profiler/tools.h, profile.h, corpus_impl.h, cli.h, ...).
#  2. tessera.h, the installed header, names no SQLite type or function.
#  3. runtime/ names none of the tools' functions and types, those that the
#     tools headers declare (profiler/tools.h: the corpus, the profiler's
#     database writers; and the others): it neither defines nor calls them.
set -u
top_src=${TSR_TOP_SRCDIR:-..}
rt=$top_src/runtime
tools_h=$top_src/profiler/tools.h
status=0

# 1. Includes, by header name ("x.h" or <x.h>, with or without a folder).
tool_headers=$(cd "$top_src" && ls profiler/*.h cli/*.h gen/*.h 2>/dev/null)
for h in $tool_headers; do
  base=${h##*/}
  if [ -e "$rt/$base" ]; then
    echo "layout.sh: runtime/$base has the name of the tools header $h"
    status=1
  fi
  hits=$(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]([^\">]*/)?$base[\">]" \
    "$rt"/*.c "$rt"/*.h 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "layout.sh: runtime/ includes the tools header $h:"
    echo "$hits" | sed "s|^$rt/|  runtime/|"
    status=1
  fi
done

# 2. SQLite in the installed header: sqlite3, sqlite3_*, SQLITE_* (prose
# that says "SQLite" is fine).
hits=$(grep -nE 'sqlite3|SQLITE_' "$rt/tessera.h")
if [ -n "$hits" ]; then
  echo "layout.sh: runtime/tessera.h names SQLite (a tools or internal header's business):"
  echo "$hits" | sed 's/^/  /'
  status=1
fi

# 3. The tools' names: functions (an identifier before "(") and types
# (typedef ... NAME;) that the tools headers declare themselves.
if [ ! -f "$tools_h" ]; then
  echo "layout.sh: no profiler/tools.h: the tools' declarations have no header of their own"
  exit 1
fi
names=$(cd "$top_src" && for h in $tool_headers; do
          grep -oE 'tsr_[A-Za-z0-9_]+ *\(' "$h" | sed 's/ *($//'
          grep -oE '^} *tsr_[A-Za-z0-9_]+;' "$h" | sed 's/^} *//; s/;$//'
          grep -oE '^typedef struct [A-Za-z0-9_]+ tsr_[A-Za-z0-9_]+;' "$h" | sed 's/.* //; s/;$//'
        done | LC_ALL=C sort -u)
if [ -z "$names" ]; then
  echo "layout.sh: found no declaration in $tool_headers"
  exit 1
fi
n=0
for name in $names; do
  n=$((n + 1))
  hits=$(grep -nw "$name" "$rt"/*.c "$rt"/*.h 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "layout.sh: runtime/ names $name, which belongs to the tools (profiler/tools.h):"
    echo "$hits" | sed "s|^$rt/|  runtime/|" | head -5
    status=1
  fi
done
[ $status -eq 0 ] &&
  echo "layout.sh: runtime/ includes no tools header, tessera.h names no SQLite, runtime/ names none of the $n tools' declarations"
exit $status
