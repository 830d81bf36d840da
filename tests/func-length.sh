#!/bin/sh
# func-length.sh: no function in runtime/, gen/, profiler/ or cli/ runs past
# TSR_FUNC_MAX lines (150), counted from the first line of its signature to
# its closing brace.  Long functions are cut at the seams their comments
# mark (issue 15); this keeps them cut.  The tree's style puts a function's
# braces at column 0 ("{" and "}" alone on their lines, or a signature
# ending in ") {", on its first line or a continuation line); a body is what
# lies between, so braces inside strings or comments do not matter.  The
# kernel templates (templates/*.cuh) follow the same style, every one of
# them cut (the sm80 kernel last: issue 17, notes/sm80.md).  Every function
# over the limit is named (file:line, name, length); exit 1 if any.
# Usage: func-length.sh [FILE...]  (default: runtime/*.c, gen/*.c,
# profiler/*.c, cli/*.c and the kernel templates of the source tree,
# $TSR_TOP_SRCDIR).
set -u
MAX=${TSR_FUNC_MAX:-150}
if [ $# -eq 0 ]; then
  S=${TSR_TOP_SRCDIR:-$(dirname "$0")/..}
  set -- "$S"/runtime/*.c "$S"/gen/*.c "$S"/profiler/*.c "$S"/cli/*.c \
    "$S"/templates/attn_sm80.cuh "$S"/templates/attn_sm90.cuh "$S"/templates/attn_sm90_fp8.cuh "$S"/templates/merge.cuh \
    "$S"/templates/plan_gpu.cuh "$S"/templates/tsr_common.cuh
  for f in "$@"; do
    [ -f "$f" ] || { echo "func-length.sh: no $f under '$S'"; exit 99; }
  done
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
# (on its first line, at column 0, or on a continuation line of one)
/^\{/ || (/\)[ \t]*\{[ \t]*$/ && !/=/ && (/^[A-Za-z_]/ || sig != "")) {
  if ($0 !~ /^\{/) {
    if (sig == "" || $0 ~ /^[A-Za-z_]/) { sig = $0; sigstart = FNR } else sig = sig " " $0
  }
  # the function name: the last identifier before the first "(" of the
  # signature (past its return type and qualifiers; the kernels
  # __launch_bounds__(...) is an attribute, not their name)
  name = "?"
  gsub(/__launch_bounds__[ \t]*\([^)]*\)/, "", sig)
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
