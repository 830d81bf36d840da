#!/bin/sh
# gpu_profile.sh: a short sweep of the demo corpus on the GPU, end to end:
# sweep (a few masks), resume (nothing timed twice), build the lookup
# table, select through it with `tessera plan --select --explain`, report.
# Exits 77 (skip) where no GPU or driver is present.
set -u
top=${TSR_TOP_BUILDDIR:-.}
prof="$top/tessera-profile"
tess="$top/tessera"
tmp=$(mktemp -d /tmp/tsr_gpu_profile.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
say() { echo "gpu_profile: $*"; }
die() { say "FAIL: $*"; exit 1; }
export TESSERA_BUNDLE="${TESSERA_BUNDLE:-$top/bundle}"

"$tess" corpus generate --preset demo --out "$tmp/demo" --jobs 2 >/dev/null 2>"$tmp/gen" || die "corpus generate: $(cat "$tmp/gen")"
"$prof" sweep --corpus "$tmp/demo" --db "$tmp/p.db" --limit 4 --repeats 5 --warmup 2 \
  2>"$tmp/sweep1"; rc=$?
[ $rc -eq 77 ] && { say "skip: $(tail -1 "$tmp/sweep1")"; exit 77; }
cat "$tmp/sweep1"
[ $rc -eq 0 ] || die "sweep exit $rc"
n1=$(sed -n 's/^timed \([0-9]*\) candidates.*/\1/p' "$tmp/sweep1")
[ -n "$n1" ] && [ "$n1" -gt 0 ] || die "sweep timed nothing"
# The same command again resumes: everything is recorded already.
"$prof" sweep --corpus "$tmp/demo" --db "$tmp/p.db" --limit 4 --repeats 5 --warmup 2 \
  2>"$tmp/sweep2" || die "resumed sweep failed: $(tail -1 "$tmp/sweep2")"
grep -q "^timed 0 candidates" "$tmp/sweep2" || die "resumed sweep re-timed: $(tail -1 "$tmp/sweep2")"
# (with a settle: launches until 20 ms have passed before each candidate's timing)
"$prof" sweep --corpus "$tmp/demo" --db "$tmp/p.db" --split eval --limit 4 --repeats 5 \
  --warmup 2 --settle-ms 20 2>"$tmp/sweep3" || die "eval sweep failed: $(tail -1 "$tmp/sweep3")"
"$prof" build --db "$tmp/p.db" >"$tmp/build" || die "build failed"
cat "$tmp/build"
grep -q "^derived [1-9][0-9]* lookup rows" "$tmp/build" || die "no lookup rows"
"$tess" db tables --db "$tmp/p.db" || die "db tables"
mask=$(ls "$tmp/demo/masks" | sed -n 1p) # 128x128 blocks (dense warm-up)
"$tess" plan --mask "$tmp/demo/masks/$mask" --block 128 --seq 2304 --head-dim 64 --select \
  --explain --db "$tmp/p.db" >"$tmp/plan" 2>&1 || { cat "$tmp/plan"; say "note: plan of $mask failed"; }
grep "^reason:" "$tmp/plan" || true
"$prof" report --db "$tmp/p.db" --out "$tmp/report" || die "report failed"
for f in selection.csv summary.csv regime.png speedup.png; do
  [ -s "$tmp/report/$f" ] || die "report lacks $f"
done
say "ok"
