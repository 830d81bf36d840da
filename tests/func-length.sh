#!/bin/sh
# func-length.sh: no function in runtime/ runs past TSR_FUNC_MAX lines (150),
# counted from the first line of its signature to its closing brace.  Long
# functions are cut at the seams their comments mark (issue 15); this keeps
# them cut.  The tree's style puts a function's braces at column 0 ("{" and
# "}" alone on their lines, or a signature ending in ") {"); a body is what
# lies between, so braces inside strings or comments do not matter.  Every
# function over the limit is named (file:line, name, length); exit 1 if any.
# Usage: func-length.sh [FILE.c...]  (default: the runtime/*.c of the source
# tree, $TSR_TOP_SRCDIR).
set -u
MAX=${TSR_FUNC_MAX:-150}
if [ $# -eq 0 ]; then
  S=${TSR_TOP_SRCDIR:-$(dirname "$0")/..}
  set -- "$S"/runtime/*.c
  [ -f "$1" ] || { echo "func-length.sh: no runtime/*.c under '$S'"; exit 99; }
fi
awk -v max="$MAX" '
function report(   n) {
  n = FNR - start + 1
  nfuncs++
  if (n > max) {
    printf "%s:%d: %s is %d lines (at most %d)\n", FILENAME, start, name, n, max
    bad++
  }
}
FNR == 1 { sig = ""; sigstart = 0; inbody = 0 }
inbody {
  if ($0 ~ /^}/) { report(); inbody = 0; sig = ""; sigstart = 0 }
  next
}
# a body opens: "{" at column 0, or a top-level signature that ends in ") {"
/^\{/ || (/^[A-Za-z_].*\)[ \t]*\{[ \t]*$/ && !/=/) {
  if ($0 !~ /^\{/) { sig = $0; sigstart = FNR }
  # the function name: the last identifier before the first "(" of the
  # signature (past its return type and qualifiers)
  name = "?"
  if (sig != "" && match(sig, /[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
    name = substr(sig, RSTART, RLENGTH)
    sub(/[ \t]*\($/, "", name)
  }
  start = sigstart ? sigstart : FNR
  inbody = 1
  next
}
# signature lines: from the first non-blank top-level line that is neither a
# comment, a preprocessor line, nor the end of a declaration
/^[ \t]*$/ || /^#/ || /^[ \t]*(\/\*|\*|\/\/)/ || /;[ \t]*$/ || /^}/ {
  sig = ""; sigstart = 0; next
}
{ if (sig == "") sigstart = FNR; sig = sig " " $0 }
END {
  if (nfuncs == 0) { print "func-length.sh: no function found"; exit 99 }
  if (bad) { printf "%d function(s) over %d lines\n", bad, max; exit 1 }
  printf "ok: %d functions, none over %d lines\n", nfuncs, max
}
' "$@"
