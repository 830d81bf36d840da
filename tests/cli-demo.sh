#!/bin/sh
# cli-demo.sh: `tessera demo` on the CPU path: generates the demo corpus
# (then reuses it), selects (through a host-only context, as `tessera run`
# does), plans, verifies and runs masks of two families
# and geometries, prints the table and exits 0; a plan that fails to verify
# or an output off the reference exits 1; bad options exit 2.  Cost: a few
# seconds (one dense float64 reference of 4 x 2,304 tokens, two masks).
set -u
B=${TSR_TOP_BUILDDIR:-.}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cli-demo.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
say() { echo "FAIL: $*"; fail=1; }
out=$("$B/tessera" demo --cpu --masks 2 --corpus "$tmp/c" 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || say "demo exit $rc"
printf '%s\n' "$out" | grep -q '^--cpu: running the CPU plan executor' || say "path not said"
printf '%s\n' "$out" | grep -q '^corpus: generated preset demo' || say "corpus not generated"
[ -f "$tmp/c/manifest.json" ] || say "--corpus folder has no manifest.json"
# the table: header, then one row per mask with every column filled
printf '%s\n' "$out" | grep -Eq '^mask +family +blocks +density +tile +mapping +tasks +source +wasted +skipped +cpu ms +err/ref +vs dense$' ||
  say "no table header"
rows=$(printf '%s\n' "$out" | grep -E '^#[0-9]+ s[0-9]+ l[0-9]+ h[0-9]+ ')
[ "$(printf '%s\n' "$rows" | grep -c .)" -eq 2 ] || say "not two table rows"
printf '%s\n' "$rows" | grep -q ' svg ' || say "no svg row"
printf '%s\n' "$rows" | grep -q ' vsa  *~[0-9]*x[0-9]* ' || say "no vsa row with a variable geometry"
printf '%s\n' "$rows" | awk '{ # name is 4 fields: family $5, blocks $6, density $7, tile $8; from the end: vs dense, error, ms, skipped, wasted
  vd = $NF; e = $(NF-1); ms = $(NF-2); sk = $(NF-3); w = $(NF-4); d = $7
  if (!(e + 0 <= 1e-4 && e + 0 > 0)) { print "FAIL: error " e " not in (0, 1e-4]"; bad = 1 }
  if (!(d > 0 && d <= 1)) { print "FAIL: density " d; bad = 1 }
  if (!(ms + 0 > 0)) { print "FAIL: time " ms; bad = 1 }
  if (sk !~ /%$/ || w !~ /%$/ || sk + 0 <= 0) { print "FAIL: skipped " sk " wasted " w; bad = 1 }
  if (vd == "" || vd + 0 < 0) { print "FAIL: vs dense " vd; bad = 1 }
  if ($8 !~ /^[0-9]+x[0-9]+$/) { print "FAIL: tile " $8; bad = 1 }
  if ($0 !~ /(table #[0-9]+ L[0-2]|automatic)/) { print "FAIL: no source"; bad = 1 }
} END { exit bad }' || fail=1
printf '%s\n' "$out" | grep -q '^ok: 2 masks on the CPU path, every plan verified: yes' || say "no ok line"
# the svg mask keeps the band of near blocks: close to dense on these inputs
vd=$(printf '%s\n' "$rows" | awk '/ svg / { print $NF }')
awk -v e="$vd" 'BEGIN { exit !(e != "" && e < 0.05) }' || say "svg differs from dense by '$vd'"

# reuse of the corpus; failures reach the exit status
out=$("$B/tessera" demo --cpu --masks 1 --corpus "$tmp/c" 2>&1)
[ $? -eq 0 ] || say "second run exit"
printf '%s\n' "$out" | grep -q '^corpus: reusing' || say "corpus not reused"
# (tests/tessera-test: the command with its test hooks, which damage each
# plan or output as TSR_TEST_DAMAGE says)
out=$(TSR_TEST_DAMAGE=drop TESSERA_BUNDLE="$B/bundle" "$B/tests/tessera-test" demo --cpu --masks 1 \
  --corpus "$tmp/c" 2>&1)
[ $? -eq 1 ] || say "corrupt plan: exit not 1"
printf '%s\n' "$out" | grep -q 'NOT VERIFIED' || say "corrupt plan not flagged"
out=$(TSR_TEST_DAMAGE=output TESSERA_BUNDLE="$B/bundle" "$B/tests/tessera-test" demo --cpu \
  --masks 1 --corpus "$tmp/c" 2>&1)
[ $? -eq 1 ] || say "corrupt output: exit not 1"
printf '%s\n' "$out" | grep -q 'TOO FAR' || say "corrupt output not flagged"
# a folder holding another corpus is refused, not overwritten
"$B/tessera" demo --cpu --masks 1 --seed 2 --corpus "$tmp/c" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || say "other seed: exit not 2"
grep -q "^tessera demo: corpus '.*' holds preset 'demo' seed 1" "$tmp/err" || say "other seed message: $(cat "$tmp/err")"
# a folder whose manifest is corrupt is refused (exit 2, named), not
# overwritten: every byte and every file stays
mkdir "$tmp/bad"
printf '{"format": "tessera-corpus", "version": 1, "entries": [{"id": %s' "$(od -An -tu4 -N4 /dev/urandom)" \
  >"$tmp/bad/manifest.json"
head -c 500 /dev/urandom >"$tmp/bad/results.bin"
snap() { (cd "$1" && ls -liR . && find . -type f -exec cksum {} + | sort); }
snap "$tmp/bad" >"$tmp/bad.before"
"$B/tessera" demo --cpu --masks 1 --corpus "$tmp/bad" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || say "corrupt manifest: exit not 2"
grep -q "^tessera demo: cannot use corpus folder '$tmp/bad': not empty and not a complete corpus (cannot read corpus manifest '$tmp/bad/manifest.json'" "$tmp/err" ||
  say "corrupt manifest message: $(cat "$tmp/err")"
snap "$tmp/bad" | cmp -s - "$tmp/bad.before" || say "corrupt manifest: the folder was changed"

# selection goes through a (host-only) context, which needs the bundle:
# a missing one is a one-line environment error, not a crash
TESSERA_BUNDLE="$tmp/no-bundle" "$B/tessera" demo --cpu --masks 1 --corpus "$tmp/c" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || say "missing bundle: exit not 2"
grep -q "^tessera demo: cannot read kernel registry '$tmp/no-bundle/registry.json'" "$tmp/err" ||
  say "missing bundle message: $(cat "$tmp/err")"

for bad in '--masks 0' '--masks 9' '--seed x' '--gpu --cpu' '--cpu --device 1' '--nope'; do
  # shellcheck disable=SC2086
  "$B/tessera" demo $bad >/dev/null 2>"$tmp/err"
  [ $? -eq 2 ] || say "demo $bad: exit not 2"
  grep -q '^tessera demo: ' "$tmp/err" || say "demo $bad: no one-line error"
done
# without a GPU, --gpu is an environment error; with one the lead runs it
if ! "$B/tessera" demo --gpu --masks 1 --corpus "$tmp/c" >/dev/null 2>"$tmp/err"; then
  grep -q '^tessera demo: --gpu: no usable GPU: ' "$tmp/err" || say "--gpu message: $(cat "$tmp/err")"
fi
exit $fail
