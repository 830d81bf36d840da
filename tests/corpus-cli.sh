#!/bin/sh
# corpus-cli.sh: `tessera corpus` end to end -- generate a slice of the demo
# preset, describe it (table and CSV), reproduce it byte for byte, and the
# exit status and one-line message of each usage or input error.
set -u
B=${TSR_TOP_BUILDDIR:-.}
T=$(mktemp -d "${TMPDIR:-/tmp}/tsr-corpus-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
fail=0
expect() { # STATUS PATTERN CMD...: exit status and a stderr line matching PATTERN
  want=$1 pat=$2; shift 2
  "$@" >"$T/out" 2>"$T/err"; rc=$?
  [ $rc -eq "$want" ] || { echo "FAIL: '$*' exit $rc, want $want"; cat "$T/err"; fail=1; }
  [ -z "$pat" ] || grep -q -- "$pat" "$T/err" || { echo "FAIL: '$*' stderr lacks '$pat'"; cat "$T/err"; fail=1; }
}
expect 0 '' "$B/tessera" corpus generate --preset demo --out "$T/a" --seed 5 --limit 12
grep -q '12/12 masks (100%)' "$T/err" || { echo "FAIL: no progress line on a non-tty stderr"; fail=1; }
[ "$(ls "$T/a/masks" | wc -l)" -eq 12 ] || { echo "FAIL: not 12 mask files"; fail=1; }
expect 0 '' "$B/tessera" corpus generate --preset demo --out "$T/b" --seed 5 --limit 12 --jobs 1
diff -r "$T/a" "$T/b" >/dev/null || { echo "FAIL: same seed, different bytes"; fail=1; }
expect 0 '' "$B/tessera" corpus stats "$T/a" --csv "$T/a.csv"
cat "$T/out"
grep -q "preset 'demo', seed 5, 12 masks" "$T/out" || { echo "FAIL: stats header"; fail=1; }
for f in svg sta dense; do
  grep -q "^$f " "$T/out" || { echo "FAIL: stats lacks family $f"; fail=1; }
done
head -1 "$T/a.csv" | grep -q '^entry,model,family,split,step,layer,head,kind,nq,nk,density,row_cv,contiguity,empty_rows$' \
  || { echo "FAIL: csv header"; fail=1; }
[ "$(($(wc -l <"$T/a.csv") - 1))" -eq 48 ] || { echo "FAIL: csv rows != 12 masks x 4 heads"; fail=1; }
expect 0 '' "$B/tessera" corpus list
grep -q '^  paper ' "$T/out" && grep -q '^  demo ' "$T/out" || { echo "FAIL: list"; fail=1; }
# errors: one line "tessera corpus: ...", status 2
expect 2 "^tessera corpus: unknown corpus preset 'nope'" "$B/tessera" corpus generate --preset nope --out "$T/c"
[ ! -e "$T/c" ] || { echo "FAIL: unknown preset left a folder"; fail=1; }
: >"$T/file"
expect 2 "^tessera corpus: cannot create corpus folder '$T/file'" "$B/tessera" corpus generate --preset demo --out "$T/file/sub/x"
expect 2 "^tessera corpus: generate needs --preset" "$B/tessera" corpus generate --out "$T/c"
expect 2 "^tessera corpus: invalid --seed" "$B/tessera" corpus generate --preset demo --out "$T/c" --seed -3
expect 2 "^tessera corpus: invalid --limit" "$B/tessera" corpus generate --preset demo --out "$T/c" --limit x
expect 2 "^tessera corpus: cannot read corpus manifest" "$B/tessera" corpus stats "$T/none"
expect 2 "^tessera corpus: unknown subcommand 'frob'" "$B/tessera" corpus frob
expect 2 "^tessera corpus: unknown option '--frob'" "$B/tessera" corpus stats "$T/a" --frob

# --- the folder: new or empty (built aside, renamed into place), or the same
# complete corpus (kept); anything else refused, exit 2, left as it was
snap() { (cd "$1" && find . | sort && find . -type f -exec cksum {} + | sort && ls -iR .) ; }
mkdir "$T/bad"
printf '{"format": "tessera-corpus", "version": 1, "entries": [%s,' "$(od -An -tu4 -N4 /dev/urandom)" \
  >"$T/bad/manifest.json"
head -c 300 /dev/urandom >"$T/bad/mine.bin"
snap "$T/bad" >"$T/bad.before"
expect 2 "^tessera corpus: cannot use corpus folder '$T/bad': not empty and not a complete corpus (cannot read corpus manifest" \
  "$B/tessera" corpus generate --preset demo --out "$T/bad" --limit 3
snap "$T/bad" | cmp -s - "$T/bad.before" || { echo "FAIL: a folder with a corrupt manifest was changed"; fail=1; }
snap "$T/a" >"$T/a.before"
expect 0 '' "$B/tessera" corpus generate --preset demo --out "$T/a" --seed 5 --limit 12
grep -q "^kept $T/a: it holds preset 'demo' (seed 5) already" "$T/out" || { echo "FAIL: same corpus not kept: $(cat "$T/out")"; fail=1; }
snap "$T/a" | cmp -s - "$T/a.before" || { echo "FAIL: a kept corpus was rewritten"; fail=1; }
expect 2 "^tessera corpus: corpus '$T/a' holds preset 'demo' seed 5 (12 masks), not preset 'demo' seed 6 (12 masks)" \
  "$B/tessera" corpus generate --preset demo --out "$T/a" --seed 6 --limit 12
snap "$T/a" | cmp -s - "$T/a.before" || { echo "FAIL: another corpus was changed"; fail=1; }
# a link to an empty folder: the corpus goes into the folder, the link stays
mkdir "$T/real" && ln -s real "$T/link"
expect 0 '' "$B/tessera" corpus generate --preset demo --out "$T/link" --seed 5 --limit 12
[ -L "$T/link" ] && [ -f "$T/real/manifest.json" ] || { echo "FAIL: corpus through a link"; fail=1; }
diff -r "$T/a" "$T/real" >/dev/null || { echo "FAIL: corpus through a link differs"; fail=1; }
# a failure half-way, as on a full disk: files limited to 40 blocks (every
# mask fits, the 60 kB manifest does not): exit 2, no folder, no temporary
(trap '' XFSZ; ulimit -f 40 && exec "$B/tessera" corpus generate --preset demo --out "$T/full") \
  >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 2 ] || { echo "FAIL: generate on a full disk: exit $rc"; fail=1; }
grep -q "^tessera corpus: cannot write .*manifest.json.*File too large" "$T/err" || { echo "FAIL: full disk: $(tail -1 "$T/err")"; fail=1; }
[ ! -e "$T/full" ] || { echo "FAIL: a failed generate left '$T/full': $(ls "$T/full")"; fail=1; }
ls "$T" | grep -q tmp && { echo "FAIL: a failed generate left a temporary: $(ls "$T")"; fail=1; }
# stats --csv through a link; a FIFO as the manifest is refused at once
ln -s csv_real "$T/link.csv"
expect 0 '' "$B/tessera" corpus stats "$T/a" --csv "$T/link.csv"
[ -L "$T/link.csv" ] && cmp -s "$T/csv_real" "$T/a.csv" || { echo "FAIL: stats --csv through a link"; fail=1; }
mkdir "$T/fifo" && mkfifo "$T/fifo/manifest.json"
expect 2 "^tessera corpus: cannot read corpus manifest '$T/fifo/manifest.json': a FIFO, not a regular file" \
  timeout 1 "$B/tessera" corpus stats "$T/fifo"
exit $fail
