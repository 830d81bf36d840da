#!/bin/sh
# limits.sh: sizes past the limits of tessera.h ("Size limits", LIMITS in
# the man pages), options the user gives and inputs that would overflow,
# escape a corpus folder, or run forever: `tessera plan`, `run`, `corpus`,
# `db` and `tessera-profile` each exit 2 with one line naming the value, in
# well under a second (every command runs under `timeout 5`, so a hang
# fails instead of stalling the suite).  Unchecked, the plan below ran for
# a minute at 19 GB and a lookup database whose lookup is a recursive VIEW
# never returned.
set -u
B=${TSR_TOP_BUILDDIR:-.}
T="$B/tessera"
P="$B/tessera-profile"
MS=${TSR_LIMIT_MS:-1000} # "in under a second"
D=$(mktemp -d "${TMPDIR:-/tmp}/tsr-limits.XXXXXX") || exit 99
trap 'rm -rf "$D"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
"$B/tests/cli_attn" bad "$D" || exit 99
MAX=2147483136 # TSR_MAX_SEQ

# refuse NEEDLE CMD...: exit 2 within $MS ms, one stderr line holding NEEDLE
refuse() {
  needle=$1; shift
  t0=$(date +%s%N)
  timeout 5 "$@" >"$D/stdout" 2>"$D/stderr"
  rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  [ $rc -eq 2 ] || bad "exit $rc, not 2, for: $* ($(head -c 300 "$D/stderr"))"
  [ $ms -le "$MS" ] || bad "$ms ms to refuse: $*"
  [ "$(wc -l <"$D/stderr")" -eq 1 ] || bad "not one stderr line for: $*: $(head -c 300 "$D/stderr")"
  grep -qF -- "$needle" "$D/stderr" || bad "stderr lacks '$needle': $(head -c 300 "$D/stderr")"
  grep -q "(null)" "$D/stdout" "$D/stderr" && bad "(null) printed for: $*"
  return 0
}

# --- tessera plan: the issue's 1x1 mask, and options echoed as given --------------
M1="$D/mask_one.npy"
refuse "invalid --seq '2147483647': expected a positive integer up to $MAX" \
  "$T" plan --mask "$M1" --block 2147483647 --seq 2147483647 --head-dim 64
for extra in "" "--tile 16x32" "--tile 512x512" "--select" "--mapping subdivide --tasks split"; do
  # shellcheck disable=SC2086
  refuse "plan too large: the mask selects more than the 2147483647 tile records a plan can address" \
    "$T" plan --mask "$M1" --block $MAX --seq $MAX --head-dim 64 $extra
done
refuse "plan too large" "$T" plan --mask "$D/maskbits_one.npy" --mask-bits --block $MAX --seq $MAX \
  --seq-k 65536 --head-dim 64 --tile 16x32
refuse "invalid --block '64x99999999999': expected BQ or BQxBK, positive integers up to $MAX" \
  "$T" plan --mask "$M1" --block 64x99999999999 --seq 64 --head-dim 64
refuse "invalid --seq-k '99999999999'" "$T" plan --mask "$M1" --block 64 --seq 64 --seq-k 99999999999 --head-dim 64
refuse "invalid --heads '99999999999'" "$T" plan --mask "$M1" --block 64 --seq 64 --heads 99999999999 --head-dim 64
refuse "invalid --head-dim '18446744073709551617'" "$T" plan --mask "$M1" --block 64 --seq 64 --head-dim 18446744073709551617
# every option is checked before any file is read: the tile, not the missing mask
refuse "tile 99x64 is not supported" "$T" plan --mask "$D/missing.npy" --block 64 --seq 64 --head-dim 64 --tile 99x64
refuse "invalid --seq '0'" "$T" plan --mask "$D/missing.npy" --block 64 --seq 0 --head-dim 64
refuse "--q-blocks '$D/sizes_empty.npy': the array is empty" \
  "$T" plan --mask "$M1" --q-blocks "$D/sizes_empty.npy" --k-blocks "$D/sizes_empty.npy" --head-dim 64
refuse "with block 0 of size 4611686018427387904 the total length exceeds $MAX tokens" \
  "$T" plan --mask "$M1" --q-blocks "$D/sizes_huge.npy" --k-blocks "$D/sizes_huge.npy" --head-dim 64

# --- tessera run ---------------------------------------------------------------------
G="$D/good.npy"
X="--q $G --k $G --v $G --out $D/out.npy"
# shellcheck disable=SC2086
{
  refuse "invalid --block '16x99999999999'" "$T" run --mask "$D/missing.npy" --block 16x99999999999 $X
  refuse "tile 99x64 is not supported" "$T" run --backend cpu --mask "$D/missing.npy" --block 16 --tile 99x64 $X
  refuse "with block 0 of size 4611686018427387904 the total length exceeds" \
    "$T" run --mask "$D/mask_good.npy" --q-blocks "$D/sizes_huge.npy" --k-blocks "$D/sizes_huge.npy" $X
  refuse "the array is empty" \
    "$T" run --mask "$D/mask_good.npy" --q-blocks "$D/sizes_empty.npy" --k-blocks "$D/sizes_empty.npy" $X
  refuse "does not match the problem: batch 3, expected 1" "$T" run --mask "$D/mask_batch3.npy" --block 16 $X
  grep -q "batch 3, expected 1\$" "$D/stderr" || bad "not 'expected 1': $(cat "$D/stderr")"
}
[ -e "$D/out.npy" ] && bad "an output was written"

# --- lookup databases: a recursive VIEW, missing columns, NULL names, wide values -----
view_sql() {
  cat <<'SQL'
DROP TABLE lookup;
CREATE VIEW lookup AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)
SELECT x AS id, 'NVIDIA H200' AS gpu_name, 'sm_90a' AS arch, 132 AS multiprocessors,
  1 AS feature_version, 0 AS level, 'bf16' AS dtype, 16 AS head_dim, 16 AS bq, 16 AS bk,
  0 AS seq_bin, 0 AS density_bin, 0 AS spread_bin, 0 AS fill_bin, 'combine' AS mapping,
  128 AS tile_m, 128 AS tile_n, 'row' AS tasks, '' AS variant, 1 AS masks, 1.0 AS regret,
  1.0 AS speedup FROM r;
SQL
}
view_sql >"$D/view.sql"
"$P" init --db "$D/view.db" --sql "$D/view.sql" 2>"$D/stderr" || bad "init view.db: $(cat "$D/stderr")"
V="'lookup' is a view, not a table of the tessera schema"
refuse "$V" "$T" db tables --db "$D/view.db"
refuse "$V" "$T" db show --db "$D/view.db"
# shellcheck disable=SC2086
refuse "$V" "$T" run --backend cpu --db "$D/view.db" --mask "$D/mask_good.npy" --block 16 $X
refuse "$V" "$T" plan --mask "$M1" --block 64 --seq 64 --head-dim 64 --select --db "$D/view.db"
refuse "$V" "$P" build --db "$D/view.db"
refuse "$V" "$P" export --db "$D/view.db" --out "$D/export.sql"
refuse "$V" "$P" report --db "$D/view.db" --out "$D/report"
cat >"$D/nocol.sql" <<'SQL'
DROP TABLE lookup; CREATE TABLE lookup (id INTEGER PRIMARY KEY, gpu_name TEXT NOT NULL);
SQL
"$P" init --db "$D/nocol.db" --sql "$D/nocol.sql" 2>"$D/stderr" || bad "init nocol.db: $(cat "$D/stderr")"
refuse "table 'lookup' has no column 'arch'" "$T" db tables --db "$D/nocol.db"
# A NULL gpu_name needs a column without NOT NULL: not the schema's shape.
cat >"$D/null.sql" <<'SQL'
CREATE TABLE l2 AS SELECT * FROM lookup; DROP TABLE lookup; ALTER TABLE l2 RENAME TO lookup;
INSERT INTO lookup (id, gpu_name, arch, multiprocessors, feature_version, level, dtype, head_dim,
  bq, bk, seq_bin, density_bin, spread_bin, fill_bin, mapping, tile_m, tile_n, tasks, variant,
  masks, regret, speedup) VALUES (1, NULL, 'sm_90a', 132, 1, 2, 'bf16', 64, 0, 0, -1, -1, -1, -1,
  'combine', 128, 128, 'row', '', 1, 1.0, 1.0);
SQL
"$P" init --db "$D/null.db" --sql "$D/null.sql" 2>"$D/stderr" || bad "init null.db: $(cat "$D/stderr")"
refuse "column 'lookup.id' is 'INT', expected 'INTEGER'" "$T" db tables --db "$D/null.db"
refuse "cannot use lookup database '$D/null.db'" "$T" db show --db "$D/null.db"
# A value past 32 bits is shown as stored, and refused by the selection.
cat >"$D/wide.sql" <<'SQL'
INSERT INTO lookup (id, gpu_name, arch, multiprocessors, feature_version, level, dtype, head_dim,
  bq, bk, seq_bin, density_bin, spread_bin, fill_bin, mapping, tile_m, tile_n, tasks, variant,
  masks, regret, speedup) VALUES (5, 'NVIDIA H200', 'sm_90a', 132, 1, 2, 'bf16', 64, 128,
  99999999999, -1, -1, -1, -1, 'combine', 128, 128, 'row', '', 1, 1.0, 1.0);
SQL
"$P" init --db "$D/wide.db" --sql "$D/wide.sql" 2>"$D/stderr" || bad "init wide.db: $(cat "$D/stderr")"
timeout 5 "$T" db show --db "$D/wide.db" >"$D/stdout" 2>"$D/stderr" || bad "db show wide.db: $(cat "$D/stderr")"
grep -q "128x99999999999" "$D/stdout" || bad "db show truncates bk: $(cat "$D/stdout")"
grep -q "1215752191" "$D/stdout" && bad "db show printed the truncated bk"
refuse "row 5 has bk 99999999999, out of range" \
  "$T" plan --mask "$M1" --block 64 --seq 64 --head-dim 64 --select --db "$D/wide.db"

# --- tessera corpus: a manifest past the limits, or naming files outside ---------------
H="$B/tests/cli_attn"
"$T" corpus generate --preset demo --out "$D/c" --limit 6 >/dev/null 2>&1 || bad "corpus generate"
cp "$D/c/manifest.json" "$D/manifest.orig"
edit() { cp "$D/manifest.orig" "$D/c/manifest.json" && "$H" edit "$D/c/manifest.json" "$@" || bad "edit $*"; }
edit 0 seq_q=1099511627776
refuse "entry 0: 'seq_q' is 1099511627776, more than $MAX" "$T" corpus stats "$D/c"
edit 0 head_dim=99999999999
refuse "entry 0: 'head_dim' is 99999999999, more than 2147483647" "$T" corpus stats "$D/c"
edit 0 geometry.nq=19
refuse "entry 0: geometry of 19 x 18 blocks does not cover 2304 x 2304 tokens" "$T" corpus stats "$D/c"
edit 1 file=../../x.npy
refuse "entry 1: 'file' names '../../x.npy' outside the corpus folder: a '..' component" \
  "$T" corpus stats "$D/c"
edit 0 file=/etc/passwd
refuse "outside the corpus folder: an absolute path" "$T" corpus stats "$D/c"
ln -s /etc/passwd "$D/c/masks/link.npy"
edit 0 file=masks/link.npy
refuse "outside the corpus folder: a path that resolves to '/etc/passwd'" "$T" corpus stats "$D/c"
cp "$D/manifest.orig" "$D/c/manifest.json"
timeout 5 "$T" corpus stats "$D/c" >/dev/null 2>"$D/stderr" || bad "the original manifest: $(cat "$D/stderr")"
refuse "invalid --jobs '99999999999'" "$T" corpus generate --preset demo --out "$D/c2" --jobs 99999999999

# --- tessera demo ----------------------------------------------------------------------
refuse "invalid --masks '99999999999': expected 1..8" "$T" demo --masks 99999999999
refuse "invalid --device '99999999999'" "$T" demo --device 99999999999
# An entry within every limit whose tensors are 16 x 2^30 x 2^30 = 2^64 elements: the
# product wrapped to 0 and the demo read past an empty buffer; now it is refused.
# The demo reuses only a complete corpus of its preset, so these edit a full one.
"$T" corpus generate --preset demo --out "$D/cd" >/dev/null 2>&1 || bad "corpus generate (full demo)"
cp "$D/cd/manifest.json" "$D/manifest.demo"
dedit() { cp "$D/manifest.demo" "$D/cd/manifest.json" && "$H" edit "$D/cd/manifest.json" "$@" || bad "edit $*"; }
dedit 4 density=0 heads_q=16 heads_kv=16 model_heads=16 seq_q=1073741824 seq_k=1073741824 \
  head_dim=1073741824 geometry.bq=1073741824 geometry.bk=1073741824 geometry.nq=1 geometry.nk=1
refuse "demo: cannot allocate a 16x1073741824x1073741824 float32 tensor" \
  "$T" demo --corpus "$D/cd" --masks 1 --cpu
# A manifest past the limits is refused at load, by the demo as by corpus stats.
dedit 0 seq_q=1099511627776
refuse "entry 0: 'seq_q' is 1099511627776, more than $MAX" "$T" demo --corpus "$D/cd" --masks 1 --cpu

exit $fail
