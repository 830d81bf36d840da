#!/bin/sh
# h200-table.sh: the shipped H200 lookup table is what the shipped
# derivation makes of the recorded timings, and the selection figures
# of the shipped sweep (run E, notes/sm90-dyn-2026-12-02b.md) are what the
# shipped evaluation gives.
# Loads db/h200-timings.sql.gz into a new database (tessera-profile init
# --sql), derives the table (build), and compares its rows with
# db/h200.sql's byte for byte; then checks the report's figures.  A change
# to the derivation, the features or the selection rules that moves the
# table or the figures fails here until db/h200.sql and BENCHMARKS.md are
# regenerated from the same timings.  About a second.
set -u
top=${TSR_TOP_BUILDDIR:-.}
src=${TSR_TOP_SRCDIR:-..}
prof="$top/tessera-profile"
tmp=$(mktemp -d /tmp/tsr_h200_table.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "h200-table: FAIL: $*"; fail=1; }

gzip -dc "$src/db/h200-timings.sql.gz" >"$tmp/t.sql" || { echo "h200-table: cannot read $src/db/h200-timings.sql.gz"; exit 99; }
"$prof" init --db "$tmp/t.db" --sql "$tmp/t.sql" || { echo "h200-table: init failed"; exit 99; }
"$prof" build --db "$tmp/t.db" >"$tmp/build.out" 2>&1 || bad "build failed: $(cat "$tmp/build.out")"
grep -q "derived 51 lookup rows for 1 GPU(s) from 162 masks, 4161 timings" "$tmp/build.out" ||
  bad "build: $(cat "$tmp/build.out")"
"$prof" export --db "$tmp/t.db" --gpu "NVIDIA H200" --out "$tmp/t.out.sql" 2>/dev/null || bad "export failed"
grep "^INSERT OR IGNORE INTO lookup " "$tmp/t.out.sql" >"$tmp/derived"
grep "^INSERT OR IGNORE INTO lookup " "$src/db/h200.sql" >"$tmp/shipped"
[ -s "$tmp/shipped" ] || bad "db/h200.sql has no lookup rows"
cmp -s "$tmp/derived" "$tmp/shipped" ||
  bad "db/h200.sql differs from the derivation of db/h200-timings.sql.gz: $(diff "$tmp/shipped" "$tmp/derived" | head -4)"

# The evaluation split's figures as BENCHMARKS.md publishes them (run E's
# timings, derived with the rank's base variant).
"$prof" report --db "$tmp/t.db" --out "$tmp/report" >"$tmp/report.out" 2>&1 || bad "report failed"
for want in "96 masks (0 not timed for the selected plan), 96 from the table" \
            "selected within 5% of best: 94.8%" "geometric-mean regret: 1.34%" \
            "speed-up over the direct plan: 1.021x (best possible 1.035x)" \
            "52 of 96: within 5% 92.3%, regret 1.45%, speed-up over direct 1.030x (best possible 1.045x)" \
            "against the automatic plan: 1.024x, 4 of 96 masks more than 2% slower (worst 0.936x)"; do
  grep -qF "$want" "$tmp/report.out" || bad "report lacks '$want': $(cat "$tmp/report.out")"
done
[ $fail -eq 0 ] && echo "h200-table: db/h200.sql and the run E figures reproduce from the recorded timings"
exit $fail
