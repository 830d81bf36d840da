#!/bin/sh
# lookup-tables.sh: each shipped lookup table is what the shipped
# derivation makes of its recorded timings, and the selection figures
# BENCHMARKS.md publishes for its sweep are what the shipped evaluation
# gives: db/h200.sql from db/h200-timings.sql.gz (run E's timings, derived
# with the rank's base variant), db/h100.sql from db/h100-timings.sql.gz
# (run G).
# For each: loads the timings into a new database (tessera-profile init
# --sql), derives the table (build), compares its rows with the shipped
# file's byte for byte, then checks the report's figures.  A change to the
# derivation, the features or the selection rules that moves a table or
# its figures fails here until the .sql file and BENCHMARKS.md are
# regenerated from the same timings.  Then the derivation is
# cross-validated: derived from the eval split and replayed on the profile
# split (build --split eval, report --split profile), whose figures
# BENCHMARKS.md publishes beside the others.  Each report's GPU-planned line
# is checked too (switches judged by the sweep's times, tsr_gpuplan_hold_step):
# among its figures, that no template alternates.  About
# four seconds.
set -u
top=${TSR_TOP_BUILDDIR:-.}
src=${TSR_TOP_SRCDIR:-..}
prof="$top/tessera-profile"
tmp=$(mktemp -d /tmp/tsr_lookup_tables.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "lookup-tables: FAIL: $*"; fail=1; }

# check NAME GPU BUILD_LINE FIGURE...: db/NAME.sql against db/NAME-timings.sql.gz.
check() {
  name=$1 gpu=$2 built=$3
  shift 3
  d="$tmp/$name"
  mkdir -p "$d"
  gzip -dc "$src/db/$name-timings.sql.gz" >"$d/t.sql" ||
    { echo "lookup-tables: cannot read $src/db/$name-timings.sql.gz"; exit 99; }
  "$prof" init --db "$d/t.db" --sql "$d/t.sql" || { echo "lookup-tables: init of $name failed"; exit 99; }
  "$prof" build --db "$d/t.db" >"$d/build.out" 2>&1 || bad "$name: build failed: $(cat "$d/build.out")"
  grep -qF "$built" "$d/build.out" || bad "$name: build: $(cat "$d/build.out")"
  "$prof" export --db "$d/t.db" --gpu "$gpu" --out "$d/t.out.sql" 2>/dev/null || bad "$name: export failed"
  grep "^INSERT OR IGNORE INTO lookup " "$d/t.out.sql" >"$d/derived"
  grep "^INSERT OR IGNORE INTO lookup " "$src/db/$name.sql" >"$d/shipped"
  [ -s "$d/shipped" ] || bad "db/$name.sql has no lookup rows"
  cmp -s "$d/derived" "$d/shipped" ||
    bad "db/$name.sql differs from the derivation of db/$name-timings.sql.gz: $(diff "$d/shipped" "$d/derived" | head -4)"
  "$prof" report --db "$d/t.db" --out "$d/report" >"$d/report.out" 2>&1 || bad "$name: report failed"
  for want in "$@"; do
    grep -qF "$want" "$d/report.out" || bad "$name: report lacks '$want': $(cat "$d/report.out")"
  done
}

# swapped NAME FIGURE...: the table derived from db/NAME's eval split,
# replayed on its profile split (after check NAME, on its database).
swapped() {
  name=$1
  shift
  d="$tmp/$name"
  "$prof" build --db "$d/t.db" --split eval >"$d/xbuild.out" 2>&1 ||
    bad "$name: build --split eval failed: $(cat "$d/xbuild.out")"
  "$prof" report --db "$d/t.db" --split profile --out "$d/xreport" >"$d/xreport.out" 2>&1 ||
    bad "$name: report --split profile failed: $(cat "$d/xreport.out")"
  for want in "$@"; do
    grep -qF "$want" "$d/xreport.out" ||
      bad "$name: cross-validation report lacks '$want': $(cat "$d/xreport.out")"
  done
}

check h200 "NVIDIA H200" "derived 51 lookup rows for 1 GPU(s) from 162 masks, 4161 timings" \
  "96 masks (0 not timed for the selected plan), 88 from the table" \
  "selected within 5% of best: 95.8%" "geometric-mean regret: 1.21%" \
  "speed-up over the direct plan: 1.022x (best possible 1.035x)" \
  "52 of 96: within 5% 94.2%, regret 1.22%, speed-up over direct 1.033x (best possible 1.045x)" \
  "against the automatic plan: 1.026x, 2 of 96 masks more than 2% slower (worst 0.937x)" \
  "pack as row): 96 masks, 11 run another plan, 0 alternate templates, 9 hold one back; within 5% 95.8%, regret 0.90%, against the automatic plan 1.029x, 0 more than 2% slower (worst 0.992x)"
swapped h200 "156 masks (6 not timed for the selected plan), 123 from the table" \
  "selected within 5% of best: 97.4%" "geometric-mean regret: 0.98%" \
  "against the automatic plan: 1.020x, 4 of 156 masks more than 2% slower (worst 0.954x)" \
  "pack as row): 156 masks, 19 run another plan, 0 alternate templates, 11 hold one back; within 5% 98.1%, regret 0.70%, against the automatic plan 1.023x, 0 more than 2% slower (worst 0.997x)"
check h100 "NVIDIA H100 80GB HBM3" "derived 52 lookup rows for 1 GPU(s) from 168 masks, 4680 timings" \
  "96 masks (0 not timed for the selected plan), 90 from the table" \
  "selected within 5% of best: 90.6%" "geometric-mean regret: 1.65%" \
  "speed-up over the direct plan: 1.026x (best possible 1.042x)" \
  "52 of 96: within 5% 84.6%, regret 1.93%, speed-up over direct 1.033x (best possible 1.053x)" \
  "against the automatic plan: 1.017x, 5 of 96 masks more than 2% slower (worst 0.957x)" \
  "pack as row): 96 masks, 23 run another plan, 0 alternate templates, 9 hold one back; within 5% 90.6%, regret 1.29%, against the automatic plan 1.021x, 0 more than 2% slower (worst 1.000x)"
swapped h100 "162 masks (6 not timed for the selected plan), 129 from the table" \
  "selected within 5% of best: 88.9%" "geometric-mean regret: 1.34%" \
  "against the automatic plan: 1.021x, 3 of 162 masks more than 2% slower (worst 0.960x)" \
  "pack as row): 162 masks, 6 run another plan, 0 alternate templates, 4 hold one back; within 5% 89.5%, regret 1.26%, against the automatic plan 1.021x, 0 more than 2% slower (worst 0.992x)"
[ $fail -eq 0 ] && echo "lookup-tables: db/h200.sql, db/h100.sql and their figures (cross-validated too) reproduce from the recorded timings"
exit $fail
