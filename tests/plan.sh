#!/bin/sh
# plan.sh: `tessera plan` end to end: summaries for retain / combine /
# subdivide / variable geometry, JSON, --verify (and exit 1 when a plan is
# damaged through the test hooks of tests/tessera-test), --bench, and every rejected input
# exiting 2 with one "tessera plan: ..." line on stderr.
set -u
B=${TSR_TOP_BUILDDIR:-.}
T="$B/tessera"
G="$B/tests/plan_masks"
SEED=${TSR_SEED:-77}
echo "plan.sh: seed $SEED"
D=$(mktemp -d "${TMPDIR:-/tmp}/tsr-plan.XXXXXX") || exit 99
trap 'rm -rf "$D"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# 700 tokens in 96-token blocks: 8 blocks; 2 heads.
"$G" mask "$D/m96.npy" 1 2 8 8 random 0.4 "$SEED" >/dev/null || exit 99
"$G" mask "$D/m128.npy" 1 4 6 6 band 0.3 "$SEED" >/dev/null || exit 99
"$G" mask "$D/m384.npy" 1 1 3 3 random 0.6 "$SEED" >/dev/null || exit 99
"$G" mask "$D/mvar.npy" 1 2 3 4 random 0.5 "$SEED" >/dev/null || exit 99
"$G" mask "$D/empty.npy" 1 2 8 8 empty 0 "$SEED" >/dev/null || exit 99
"$G" pack "$D/m96.npy" "$D/m96bits.npy" || exit 99
"$G" pack "$D/mvar.npy" "$D/mvarbits.npy" || exit 99
"$G" sizes "$D/qs.npy" 100 37 263 >/dev/null || exit 99
"$G" sizes "$D/ks.npy" 64 64 200 72 >/dev/null || exit 99

# expect_ok NEEDLE ARGS...: exit 0 and NEEDLE on stdout
expect_ok() {
  needle=$1; shift
  "$T" plan "$@" >"$D/stdout" 2>"$D/stderr"
  rc=$?
  [ $rc -eq 0 ] || { bad "exit $rc for: $* ($(cat "$D/stderr"))"; return; }
  grep -qF -- "$needle" "$D/stdout" || bad "stdout lacks '$needle' for: $*: $(cat "$D/stdout")"
}
# expect_exit CODE NEEDLE ARGS...: exit CODE, one stderr line with NEEDLE
expect_exit() {
  code=$1 needle=$2; shift 2
  "$T" plan "$@" >"$D/stdout" 2>"$D/stderr"
  rc=$?
  [ $rc -eq "$code" ] || bad "exit $rc, not $code, for: $* ($(cat "$D/stderr"))"
  [ "$(wc -l <"$D/stderr")" -eq 1 ] || bad "not one stderr line for: $*: $(cat "$D/stderr")"
  grep -q "^tessera plan: " "$D/stderr" || bad "no 'tessera plan:' prefix: $(cat "$D/stderr")"
  grep -qF -- "$needle" "$D/stderr" || bad "stderr lacks '$needle': $(cat "$D/stderr")"
}

M96="--mask $D/m96.npy --block 96 --seq 700 --head-dim 64"
# --- plans that work ------------------------------------------------------------
# shellcheck disable=SC2086
{
expect_ok "mapping combine" $M96 --verify
expect_ok "verify: ok" $M96 --verify --tasks split --split 2
expect_ok "tile: 64x64, mapping combine+subdivide" $M96 --mapping subdivide --verify
expect_ok "mapping retain" --mask "$D/m128.npy" --block 128 --seq 700 --head-dim 128 --heads-kv 2 --verify
expect_ok "tile: 64x128" --mask "$D/m128.npy" --block 128 --seq 700 --head-dim 128 --tile 64x128 --verify
expect_ok "mapping subdivide" --mask "$D/m384.npy" --block 384 --seq 1100 --head-dim 128 --verify
expect_ok "tile: 128x256, mapping gather (a tile pairs two selected key blocks)" --mask "$D/m128.npy" --block 128 --seq 700 --head-dim 128 --heads-kv 2 --mapping gather --verify
expect_ok "tile: 96x192, mapping gather" $M96 --mapping gather --tasks split --split 1 --verify
expect_ok "blocks: variable, 3 x 4 blocks" --mask "$D/mvar.npy" --q-blocks "$D/qs.npy" --k-blocks "$D/ks.npy" --head-dim 64 --verify
expect_ok "22 empty rows" --mask "$D/empty.npy" --block 96 --seq 700 --head-dim 64 --tile 64x64 --tasks row --verify
expect_ok "700 x 760 tokens" --mask "$D/m96.npy" --block 96 --seq 700 --seq-k 760 --head-dim 64 --verify
expect_ok '"wasted_fraction"' $M96 --json
expect_ok '"membership"' $M96 --json --detail
expect_ok "bench: replanning" $M96 --bench
expect_ok "arch sm_80" $M96 --arch sm_80 --sms 108
expect_ok "verify: ok" --mask "$D/m96bits.npy" --mask-bits --block 96 --seq 700 --head-dim 64 --verify
expect_ok "bench: replanning" --mask "$D/m96bits.npy" --mask-bits --block 96 --seq 700 --head-dim 64 --bench
expect_ok "verify: ok" --mask "$D/mvarbits.npy" --mask-bits --q-blocks "$D/qs.npy" --k-blocks "$D/ks.npy" --head-dim 64 --verify
}
# A packed mask plans exactly as its byte form (the JSON holds every record).
"$T" plan $M96 --tasks split --split 2 --json --detail >"$D/bytes.json" 2>&1
"$T" plan --mask "$D/m96bits.npy" --mask-bits --block 96 --seq 700 --head-dim 64 --tasks split --split 2 --json --detail >"$D/bits.json" 2>&1
cmp -s "$D/bytes.json" "$D/bits.json" || bad "--mask-bits plan differs from the byte mask's"
"$T" plan --help | grep -q -- "--mapping" || bad "--help lacks --mapping"

# --- tessera run --backend cpu (the plan executor) matches the reference ----
if [ -x "$B/tests/cli_attn" ]; then
  R="$D/run"
  mkdir -p "$R"
  i=0
  for mode in uniform batch variable f16; do
    i=$((i + 1))
    blk=$("$B/tests/cli_attn" gen "$R" $((SEED + i)) "$mode") || { bad "cli_attn gen $mode"; continue; }
    if [ "$blk" = - ]; then geo="--q-blocks $R/qs.npy --k-blocks $R/ks.npy"; else geo="--block $blk"; fi
    for tk in auto row split pack; do
      for tile in 64x64 128x128 16x32; do
        # shellcheck disable=SC2086
        "$B/tessera" run --backend cpu --tasks $tk --tile $tile --mask "$R/mask.npy" $geo \
          --q "$R/q.npy" --k "$R/k.npy" --v "$R/v.npy" --out "$R/o.npy" --lse "$R/l.npy" \
          --check 1e-5 >"$R/stdout" 2>"$R/stderr" \
          || bad "run --backend cpu $mode $tk $tile: $(cat "$R/stderr")"
      done
    done
  done
fi

# --- verification failures exit 1, naming the violation ---------------------
# (tests/tessera-test: the command with its test hooks, which damage the plan
# before --verify as TSR_TEST_DAMAGE says)
T="$B/tests/tessera-test"
for how in drop dup bit; do
  # shellcheck disable=SC2086
  TSR_TEST_DAMAGE=$how expect_exit 1 "verification failed: batch 0 head" $M96 --verify
done
T="$B/tessera"

# --- --select: a row borrowed from another region never wastes more ------------
# A geometry-wide row (level 2) saying "combine 128x64 blocks into 128x128
# tiles", as SpargeAttn's clustered masks prefer: taken for a banded mask
# (pairs of key blocks selected together, fill at 128x128 about 0.96), skipped
# for a random 25% mask (fill 0.57, under sqrt(1/2) of the base tile's 1.0:
# the combined tiles would compute 1.75x the selected pairs), which keeps the
# base plan (retain 128x64).
P="$B/tessera-profile"
echo "INSERT INTO lookup (gpu_name, arch, multiprocessors, feature_version, level, dtype, head_dim, bq, bk, seq_bin, density_bin, spread_bin, fill_bin, mapping, tile_m, tile_n, tasks, variant, masks, regret, speedup) VALUES ('NVIDIA H200', 'sm_90a', 132, 1, 2, 'bf16', 128, 128, 64, -1, -1, -1, -1, 'combine', 128, 128, 'row', '', 3, 0.01, 1.2);" >"$D/g.sql"
"$P" init --db "$D/g.db" --sql "$D/g.sql" >/dev/null 2>"$D/stderr" || bad "init g.db: $(cat "$D/stderr")"
"$G" mask "$D/r6.npy" 1 2 64 128 random 0.25 "$SEED" >/dev/null || exit 99
"$G" mask "$D/b6.npy" 1 2 64 128 band 0.3 "$SEED" >/dev/null || exit 99
S6="--block 128x64 --seq 8192 --head-dim 128 --select --explain --db $D/g.db"
# shellcheck disable=SC2086
{
expect_ok "selected: combine 128x128 row" --mask "$D/b6.npy" $S6
expect_ok "reason: table row 1 at level 2" --mask "$D/b6.npy" $S6
expect_ok "selected: retain 128x64 row" --mask "$D/r6.npy" $S6
expect_ok "row 1 (combine 128x128) skipped: its tile computes more masked-out pairs than the base plan's" --mask "$D/r6.npy" $S6
}
# --explain alone selects (man tessera-profile says `tessera plan --explain`):
# the same selection, explanation and plan as --select --explain, text and JSON.
S7="--block 128x64 --seq 8192 --head-dim 128 --explain --db $D/g.db"
for m in b6 r6; do
  for j in "" --json; do
    # shellcheck disable=SC2086
    "$T" plan --mask "$D/$m.npy" $S6 $j >"$D/sel.out" 2>&1 || bad "$m --select --explain $j: exit $?"
    # shellcheck disable=SC2086
    if "$T" plan --mask "$D/$m.npy" $S7 $j >"$D/exp.out" 2>&1; then
      cmp -s "$D/sel.out" "$D/exp.out" || bad "$m: --explain $j differs from --select --explain $j"
    else
      bad "$m: --explain $j without --select exits $?: $(head -n 1 "$D/exp.out")"
    fi
  done
done
grep -q '"selection"' "$D/exp.out" || bad "--explain --json printed no selection"

# --- rejected inputs exit 2 ----------------------------------------------------
# shellcheck disable=SC2086
{
expect_exit 2 "missing --mask" --block 96 --seq 700 --head-dim 64
expect_exit 2 "missing --head-dim" --mask "$D/m96.npy" --block 96 --seq 700
expect_exit 2 "missing --seq" --mask "$D/m96.npy" --block 96 --head-dim 64
expect_exit 2 "missing --block" --mask "$D/m96.npy" --seq 700 --head-dim 64
expect_exit 2 "mapping 'retain' needs the tile to equal the logical block, got tile 128x128 and blocks 96x96" $M96 --mapping retain --tile 128x128
expect_exit 2 "mapping 'subdivide' needs logical blocks larger than the tile" $M96 --mapping subdivide --tile 128x128
expect_exit 2 "tile 100x128 is not supported" $M96 --tile 100x128
expect_exit 2 "invalid --tile 'big'" $M96 --tile big
expect_exit 2 "invalid --mapping 'merge': expected auto, retain, combine, subdivide or gather" $M96 --mapping merge
expect_exit 2 "mapping 'gather' needs the tile bq x 2bk of the blocks bq x bk (rows a multiple of 16, columns of 32, at most 512), got tile 96x96 and blocks 96x96" $M96 --mapping gather --tile 96x96
expect_exit 2 "invalid --tasks 'all'" $M96 --tasks all
expect_exit 2 "invalid --arch 'hopper'" $M96 --arch hopper
expect_exit 2 "invalid --split '0'" $M96 --split 0
expect_exit 2 "invalid --sms '-3'" $M96 --sms -3
expect_exit 2 "invalid --heads-kv 3" $M96 --heads-kv 3
expect_exit 2 "--detail needs --json" $M96 --detail
expect_exit 2 "exclude each other" $M96 --q-blocks "$D/qs.npy" --k-blocks "$D/ks.npy"
expect_exit 2 "unknown option '--bogus'" $M96 --bogus
expect_exit 2 "$D/none.npy" --mask "$D/none.npy" --block 96 --seq 700 --head-dim 64
expect_exit 2 "m96.npy" --mask "$D/m96.npy" --block 64 --seq 700 --head-dim 64
expect_exit 2 "cover 400 tokens, but --seq has 500" --mask "$D/mvar.npy" --q-blocks "$D/qs.npy" --k-blocks "$D/ks.npy" --head-dim 64 --seq 500
expect_exit 2 "expected uint8, got bool" --mask "$D/m96.npy" --mask-bits --block 96 --seq 700 --head-dim 64
expect_exit 2 "rows of 1 bytes, but 11 key blocks pack into 2" --mask "$D/m96bits.npy" --mask-bits --block 64 --seq 700 --head-dim 64
expect_exit 2 "missing --seq" --mask "$D/m96bits.npy" --mask-bits --block 96 --head-dim 64
expect_exit 2 "cannot use --q-blocks '$D/m96.npy'" --mask "$D/mvar.npy" --q-blocks "$D/m96.npy" --k-blocks "$D/ks.npy" --head-dim 64
}
exit $fail
