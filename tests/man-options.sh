#!/bin/sh
# man-options.sh: every option that a command's --help lists appears in its
# man page (man/tessera-CMD.1 for `tessera CMD`, man/NAME.1 for a tool
# NAME), and man/tessera.1 names every command.  Generic: commands are read
# from `tessera --help` and tools from the build folder, so new ones are
# checked as they land.  A command whose --help fails is not written yet and
# is skipped (reported).
set -u
B=${TSR_TOP_BUILDDIR:-.}
S=${TSR_TOP_SRCDIR:-.}
fail=0
checked=0
# roff to plain text, enough for option names: \- to -, drop font escapes
plain() { sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' -e 's/\\&//g' "$1"; }
check_page() { # NAME PAGE HELPTEXT
  if [ ! -f "$2" ]; then
    echo "FAIL: $1 has --help but no man page $2"; fail=1; return
  fi
  text=$(plain "$2")
  for o in $(printf '%s\n' "$3" | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u); do
    printf '%s\n' "$text" | grep -qF -- "$o" || { echo "FAIL: $1: $o not in $2"; fail=1; }
  done
  checked=$((checked + 1))
}

main=$("$B/tessera" --help) || { echo "FAIL: tessera --help"; exit 1; }
check_page tessera "$S/man/tessera.1" "$main"
cmds=$(printf '%s\n' "$main" | awk '/^commands:/ { f = 1; next } f && /^  [a-z]/ { print $1 }')
[ -n "$cmds" ] || { echo "FAIL: no commands in tessera --help"; exit 1; }
for c in $cmds; do
  plain "$S/man/tessera.1" | grep -q "tessera-$c\|\\b$c\\b" || { echo "FAIL: tessera.1 does not name $c"; fail=1; }
  if help=$("$B/tessera" "$c" --help 2>/dev/null); then
    check_page "tessera $c" "$S/man/tessera-$c.1" "$help"
  else
    echo "skip: tessera $c --help fails (not written yet)"
  fi
done
for p in "$B"/tessera-*; do
  [ -f "$p" ] && [ -x "$p" ] || continue
  n=$(basename "$p")
  if help=$("$p" --help 2>/dev/null); then
    check_page "$n" "$S/man/$n.1" "$help"
  else
    echo "skip: $n --help fails"
  fi
done
echo "man-options: $checked pages checked"
exit $fail
