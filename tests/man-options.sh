#!/bin/sh
# man-options.sh: the --help of every command and subcommand and its man page
# agree, both ways.  Units are found, not listed: `tessera --help` names the
# commands, the build folder the tools (tessera-*), and a unit's subcommands
# are the words after its name on its usage lines or in its "commands:"
# list, and on the `.B NAME SUB` lines of its man page's SYNOPSIS.  The page
# of `A B` is man/A-B.1 when there is one, else its parent's page.
#
# For every unit:
#   - NAME --help exits 0 and prints a usage line naming NAME itself (not a
#     parent's generic usage);
#   - every option its --help prints is an item (.TP tag) of the page;
#   - the page names each subcommand, and --help lists each one the page has.
# For a leaf (no subcommands), also:
#   - every option its --help mentions has its own description line
#     ("  --opt ARG  what it does");
#   - the options of its SYNOPSIS entry in the page and those its --help
#     describes are the same set (--help aside);
#   - it accepts each of them: `NAME --opt [1] --help` says nothing of an
#     unknown option.
# For every page: each option it describes (.TP tag) is printed by the
# --help of one of its units.
set -u
B=${TSR_TOP_BUILDDIR:-.}
S=${TSR_TOP_SRCDIR:-.}
fail=0
checked=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tsr-man.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
bad() { echo "FAIL: $*"; fail=1; }
# roff to plain text, enough for option names: \- to -, drop font escapes
plain() { sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' -e 's/\\&//g' "$@"; }
opts() { grep -oE -- '--[a-z][a-z0-9-]*' | sort -u; }
# options that have a description line of their own in a --help text
described() { sed -nE 's/^ +(-[A-Za-z], )?(--[a-z][a-z0-9-]*).*/\2/p' | sort -u; }
# options given as .TP item tags anywhere in a page
tags() { awk 'p { print; p = 0 } /^\.TP/ { p = 1 }' "$1" | plain | opts; }
# the SYNOPSIS lines of one command: from ".B NAME" to the next .br
synopsis_of() {
  awk '/^\.SH SYNOPSIS/ { f = 1; next } /^\.SH/ { f = 0 } f' "$1" | plain |
    awk -v n=".B $2" '$0 == n || index($0, n " ") == 1 { c = 1; print; next } /^\.br/ { c = 0 } c'
}
has() { printf '%s\n' "$1" | grep -qxF -- "$2"; }
# bounded: a probe that reached real work must not hang the test
run() { if command -v timeout >/dev/null 2>&1; then timeout 20 "$@"; else "$@"; fi; }

main=$("$B/tessera" --help) || { echo "FAIL: tessera --help"; exit 1; }
printf '%s|%s\n' tessera "$S/man/tessera.1" >"$tmp/queue"
for p in "$B"/tessera-*; do
  [ -f "$p" ] && [ -x "$p" ] || continue
  n=$(basename "$p")
  printf '%s|%s\n' "$n" "$S/man/$n.1" >>"$tmp/queue"
done

i=0
while :; do
  i=$((i + 1))
  line=$(sed -n "${i}p" "$tmp/queue")
  [ -n "$line" ] || break
  name=${line%%|*}
  page=${line#*|}
  set -- $name
  bin=$1
  shift
  if ! help=$(run "$B/$bin" "$@" --help 2>"$tmp/err"); then
    bad "$name --help exits non-zero: $(head -n 1 "$tmp/err")"
    continue
  fi
  if [ ! -f "$page" ]; then
    bad "$name has --help but no man page $page"
    continue
  fi
  checked=$((checked + 1))
  key=$(basename "$page")
  if ! printf '%s\n' "$help" | grep -qE "^(usage: +| +)$name( |\$)"; then
    bad "$name --help prints no usage line of '$name' (a parent's generic usage?)"
    continue
  fi
  ptags=$(tags "$page")
  for o in $(printf '%s\n' "$help" | opts); do
    has "$ptags" "$o" || bad "$name --help prints $o, $page does not describe it (.TP item)"
  done
  # subcommands, from the help and from the page
  hsubs=$(printf '%s\n' "$help" | awk -v n="$name" '
    /^commands:/ { c = 1; next } /^$/ { c = 0 }
    c && /^  [a-z]/ { print $1 }
    { s = $0; sub(/^(usage: +| +)/, "", s)
      if (index(s, n " ") == 1) { w = substr(s, length(n) + 2); sub(/ .*/, "", w); if (w ~ /^[a-z][a-z0-9-]*$/) print w } }' |
    sort -u)
  psubs=$(awk '/^\.SH SYNOPSIS/ { f = 1; next } /^\.SH/ { f = 0 } f' "$page" | plain |
    awk -v n=".B $name " 'index($0, n) == 1 { w = substr($0, length(n) + 1); sub(/ .*/, "", w); if (w ~ /^[a-z][a-z0-9-]*$/) print w }' |
    sort -u)
  subs=$(printf '%s\n%s\n' "$hsubs" "$psubs" | grep . | sort -u)
  if [ -n "$subs" ]; then
    printf '%s\n' "$help" | opts >>"$tmp/printed.$key"
    for s in $subs; do
      has "$hsubs" "$s" || bad "$name --help does not list its subcommand '$s' ($page has it)"
      plain "$page" | grep -qE "(^|[^a-z-])$s([^a-z-]|\$)" || bad "$page does not name $name $s"
      sp="$S/man/$(printf '%s' "$name $s" | tr ' ' '-').1"
      [ -f "$sp" ] || sp=$page
      printf '%s|%s\n' "$name $s" "$sp" >>"$tmp/queue"
    done
    continue
  fi
  # a leaf
  syn=$(synopsis_of "$page" "$name")
  [ -n "$syn" ] || bad "$page has no SYNOPSIS entry '.B $name'"
  desc=$(printf '%s\n' "$help" | described)
  printf '%s\n' "$desc" >>"$tmp/printed.$key"
  sopts=$(printf '%s\n' "$syn" | opts | grep -vxF -- --help)
  for o in $(printf '%s\n' "$help" | opts); do
    has "$desc" "$o" || bad "$name --help mentions $o without a description line of its own"
  done
  for o in $sopts; do
    has "$desc" "$o" || bad "$page gives $o in the synopsis of $name, $name --help does not describe it"
  done
  for o in $desc; do
    [ "$o" = --help ] && continue
    has "$sopts" "$o" || bad "$name --help describes $o, the synopsis of $name in $page does not give it"
    # "  --opt ARG  ..." takes a value; "  --opt  ..." is a flag
    if printf '%s\n' "$help" | grep -qE -- "^ +(-[A-Za-z], )?$o [^ ]"; then
      probe="$o 1 --help"
    else
      probe="$o --help"
    fi
    # shellcheck disable=SC2086
    run "$B/$bin" "$@" $probe >/dev/null 2>"$tmp/err"
    st=$?
    if grep -qiE 'unrecogni[sz]ed option|unknown option|invalid option' "$tmp/err"; then
      bad "$name does not accept $o, which its --help describes: $(head -n 1 "$tmp/err")"
    elif [ "$st" -ge 124 ] || grep -qE 'Sanitizer|runtime error' "$tmp/err"; then
      bad "$name $probe: exit $st, $(grep -m 1 -E 'Sanitizer|runtime error' "$tmp/err")"
    fi
  done
done

# every option a page describes is printed by one of its units' --help
for page in "$S"/man/*.1; do
  key=$(basename "$page")
  if [ ! -f "$tmp/printed.$key" ]; then
    bad "$page belongs to no command found from tessera --help or the tools"
    continue
  fi
  for o in $(tags "$page"); do
    grep -qxF -- "$o" "$tmp/printed.$key" ||
      bad "$page describes $o, which no --help of its commands prints"
  done
done
[ "$checked" -gt 1 ] || bad "only $checked units checked"
echo "man-options: $checked commands checked"
exit $fail
