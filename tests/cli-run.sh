#!/bin/sh
# cli-run.sh: `tessera run` end to end.  Inputs come from tests/cli_attn
# (the test's own .npy writer); the output must match the independent
# float64 attention of tests/util.h to 1e-5 relative.  Every rejected input
# must exit 2 with one line on stderr naming the file, and leave no output.
set -u
B=${TSR_TOP_BUILDDIR:-.}
T="$B/tessera"
H="$B/tests/cli_attn"
SEED=${TSR_SEED:-4242}
echo "cli-run: seed $SEED"
D=$(mktemp -d "${TMPDIR:-/tmp}/tsr-cli-run.XXXXXX") || exit 99
trap 'rm -rf "$D"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# --- correct results -------------------------------------------------------
i=0
for mode in uniform batch variable f16 uniform batch; do
  i=$((i + 1))
  s=$((SEED + i))
  rm -f "$D"/*.npy
  blk=$("$H" gen "$D" "$s" "$mode") || { bad "gen $mode"; continue; }
  if [ "$blk" = - ]; then geo="--q-blocks $D/qs.npy --k-blocks $D/ks.npy"; else geo="--block $blk"; fi
  scale=0; sarg=
  if [ $i -eq 5 ]; then scale=0.21; sarg="--scale 0.21"; fi
  # shellcheck disable=SC2086
  "$T" run --backend ref --mask "$D/mask.npy" $geo --q "$D/q.npy" --k "$D/k.npy" \
    --v "$D/v.npy" --out "$D/out.npy" --lse "$D/lse.npy" $sarg >"$D/stdout" 2>"$D/stderr" \
    || { bad "run $mode seed $s: exit $?: $(cat "$D/stderr")"; continue; }
  "$H" check "$D" "$s" "$mode" "$scale" || bad "check $mode seed $s"
  # The CPU plan executor (float32 arithmetic, as the kernels): 1e-4, or a
  # clean refusal (exit 2, one line, no output) where it is not available.
  rm -f "$D/out.npy" "$D/lse.npy"
  # shellcheck disable=SC2086
  "$T" run --backend cpu --mask "$D/mask.npy" $geo --q "$D/q.npy" --k "$D/k.npy" \
    --v "$D/v.npy" --out "$D/out.npy" --lse "$D/lse.npy" $sarg >"$D/stdout" 2>"$D/stderr"
  rc=$?
  if [ $rc -eq 0 ]; then
    "$H" check "$D" "$s" "$mode" "$scale" 1e-4 || bad "cpu backend check $mode seed $s"
  elif [ $rc -eq 2 ] && [ "$(wc -l <"$D/stderr")" -eq 1 ] && [ ! -e "$D/out.npy" ]; then
    echo "note: cpu backend refused $mode: $(cat "$D/stderr")"
  else
    bad "cpu backend $mode seed $s: exit $rc: $(cat "$D/stderr")"
  fi
done

# --- mapping gather as asked: the cpu backend runs it (its plan printed) to
# the same 1e-4; blocks no gather tile pairs are refused naming the sizes ---
for s in 1 2 3; do
  rm -f "$D"/*.npy
  blk=$("$H" gen "$D" $((SEED + 100 + s)) gather) || { bad "gen gather"; continue; }
  bq=${blk%x*}; bk=${blk#*x}
  "$T" run --backend cpu --mapping gather --mask "$D/mask.npy" --block "$blk" --q "$D/q.npy" \
    --k "$D/k.npy" --v "$D/v.npy" --out "$D/out.npy" --lse "$D/lse.npy" >"$D/stdout" 2>"$D/stderr" ||
    { bad "cpu --mapping gather $blk: exit $?: $(cat "$D/stderr")"; continue; }
  grep -q "^cpu: plan gather ${bq}x$((2 * bk)), " "$D/stdout" || bad "gather plan not printed: $(cat "$D/stdout")"
  "$H" check "$D" $((SEED + 100 + s)) gather 0 1e-4 || bad "cpu --mapping gather check seed $s"
done
tile="${bq}x$((2 * bk + 32))" # a valid tile, but not bq x 2bk
"$T" run --backend cpu --mapping gather --tile "$tile" --mask "$D/mask.npy" --block "$blk" --q "$D/q.npy" \
  --k "$D/k.npy" --v "$D/v.npy" --out "$D/o2.npy" >"$D/stdout" 2>"$D/stderr"
rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <"$D/stderr")" -eq 1 ] && [ ! -e "$D/o2.npy" ] &&
  grep -q "mapping 'gather' needs the tile bq x 2bk .*got tile $tile and blocks $blk" "$D/stderr"; } ||
  bad "gather on tile $tile, blocks $blk: exit $rc: $(cat "$D/stderr")"
rm -f "$D"/*.npy
"$H" gen "$D" "$SEED" variable >/dev/null || bad "gen for the gather refusal"
"$T" run --backend cpu --mapping gather --mask "$D/mask.npy" --q-blocks "$D/qs.npy" --k-blocks "$D/ks.npy" \
  --q "$D/q.npy" --k "$D/k.npy" --v "$D/v.npy" --out "$D/out.npy" >"$D/stdout" 2>"$D/stderr"
rc=$?
{ [ $rc -eq 2 ] && grep -q "mapping 'gather' needs uniform blocks, got blocks variable" "$D/stderr" &&
  [ ! -e "$D/out.npy" ]; } || bad "gather on variable blocks: exit $rc: $(cat "$D/stderr")"

# --- precision (issue 18): native is the default, byte for byte; fp8 on the
# cpu backend runs the emulation (a different output: not a silent native
# run), which its own test measures (tests/check_fp8) -------------------------
rm -f "$D"/*.npy
blk=$("$H" gen "$D" "$SEED" uniform) || bad "gen for --precision"
PIN="--mask $D/mask.npy --block $blk --q $D/q.npy --k $D/k.npy --v $D/v.npy"
for pr in default native fp8; do
  parg=; [ $pr = default ] || parg="--precision $pr"
  # shellcheck disable=SC2086
  "$T" run --backend cpu $PIN --out "$D/o_$pr.npy" $parg >"$D/stdout" 2>"$D/stderr" ||
    bad "cpu --precision $pr: exit $?: $(cat "$D/stderr")"
done
cmp -s "$D/o_default.npy" "$D/o_native.npy" || bad "--precision native changed the output"
cmp -s "$D/o_native.npy" "$D/o_fp8.npy" && bad "--precision fp8 gave the native output"
# shellcheck disable=SC2086
"$T" run --backend cpu $PIN --out "$D/o_fp8b.npy" --precision fp8 --dtype fp16 >"$D/stdout" 2>"$D/stderr" ||
  bad "cpu fp8 --dtype fp16: $(cat "$D/stderr")"
cmp -s "$D/o_fp8.npy" "$D/o_fp8b.npy" && bad "--dtype fp16 did not change the fp8 emulation"
# the gpu backend: an FP8 kernel variant, or exit 2 naming what is missing
# shellcheck disable=SC2086
"$T" run --backend gpu $PIN --out "$D/o_gpu.npy" --precision fp8 >"$D/stdout" 2>"$D/stderr"
rc=$?
if [ $rc -eq 2 ]; then
  [ ! -e "$D/o_gpu.npy" ] || bad "gpu fp8 refused but left an output"
  echo "note: gpu --precision fp8 refused: $(cat "$D/stderr")"
elif [ $rc -ne 0 ]; then
  bad "gpu --precision fp8: exit $rc: $(cat "$D/stderr")"
fi

# --- rejected inputs ----------------------------------------------------------
rm -f "$D"/*.npy
"$H" bad "$D" || exit 99
G="$D/good.npy"
M="$D/mask_good.npy"
# expect_reject NEEDLE ARGS...: exit 2, one stderr line with NEEDLE, no out.npy
expect_reject() {
  needle=$1; shift
  rm -f "$D/out.npy" "$D/lse.npy"
  "$T" run "$@" >"$D/stdout" 2>"$D/stderr"
  rc=$?
  [ $rc -eq 2 ] || bad "exit $rc, not 2, for: $* ($(cat "$D/stderr"))"
  [ "$(wc -l <"$D/stderr")" -eq 1 ] || bad "not one stderr line for: $*: $(cat "$D/stderr")"
  grep -q "^tessera run: " "$D/stderr" || bad "no 'tessera run:' prefix: $(cat "$D/stderr")"
  grep -qF -- "$needle" "$D/stderr" || bad "stderr lacks '$needle': $(cat "$D/stderr")"
  [ ! -e "$D/out.npy" ] && [ ! -e "$D/lse.npy" ] || bad "output left behind for: $*"
  ls "$D" | grep -q tmp && bad "temporary file left behind for: $*"
  return 0
}
run_with() { # Q K V MASK BLOCK [extra...]
  q=$1 k=$2 v=$3 m=$4 b=$5; shift 5
  expect_reject "$needle_" --mask "$m" --block "$b" --q "$q" --k "$k" --v "$v" \
    --out "$D/out.npy" --lse "$D/lse.npy" "$@"
}
needle_="$D/badmagic.npy': bad magic";   run_with "$D/badmagic.npy" "$G" "$G" "$M" 16
needle_="$D/truncated.npy': truncated";  run_with "$G" "$D/truncated.npy" "$G" "$M" 16
needle_="$D/int32.npy': expected float32 or fp16, got int32"; run_with "$G" "$G" "$D/int32.npy" "$M" 16
needle_="$D/complex.npy': unsupported dtype '<c8'"; run_with "$D/complex.npy" "$G" "$G" "$M" 16
needle_="$D/fortran.npy': fortran order"; run_with "$D/fortran.npy" "$G" "$G" "$M" 16
needle_="$D/twodim.npy': expected 3 or 4 dimensions"; run_with "$D/twodim.npy" "$G" "$G" "$M" 16
needle_="not a multiple of the 3 of k '$D/k3.npy'"; run_with "$G" "$D/k3.npy" "$D/k3.npy" "$M" 16
needle_="mask '$D/mask_wrong.npy' does not match the geometry: 3 query blocks, but query length 64 in blocks of 16 gives 4"
run_with "$G" "$G" "$G" "$D/mask_wrong.npy" 16
needle_="$D/mask_f32.npy': expected bool or uint8, got float32"; run_with "$G" "$G" "$G" "$D/mask_f32.npy" 16
needle_="mask '$M' does not match the geometry: 4 query blocks, but query length 64 in blocks of 32 gives 2"
run_with "$G" "$G" "$G" "$M" 32
needle_="$D/missing.npy': No such file"; run_with "$D/missing.npy" "$G" "$G" "$M" 16
needle_="invalid --scale 'nan'"; run_with "$G" "$G" "$G" "$M" 16 --scale nan
needle_="invalid --scale 'inf'"; run_with "$G" "$G" "$G" "$M" 16 --scale inf
needle_="invalid --scale '1e999'"; run_with "$G" "$G" "$G" "$M" 16 --scale 1e999
needle_="invalid --block '0'"; run_with "$G" "$G" "$G" "$M" 0
needle_="invalid --block '16x'"; run_with "$G" "$G" "$G" "$M" 16x
needle_="invalid --backend 'tpu'"; run_with "$G" "$G" "$G" "$M" 16 --backend tpu
needle_="unknown option '--bogus'"; run_with "$G" "$G" "$G" "$M" 16 --bogus
needle_="invalid --precision 'bf8': expected native or fp8"
run_with "$G" "$G" "$G" "$M" 16 --backend cpu --precision bf8
needle_="--precision 'fp8' needs --backend cpu (its emulation) or gpu"
run_with "$G" "$G" "$G" "$M" 16 --precision fp8
needle_="--dtype needs --backend gpu"; run_with "$G" "$G" "$G" "$M" 16 --backend cpu --dtype fp16
needle_="invalid --mapping 'sideways'"; run_with "$G" "$G" "$G" "$M" 16 --backend cpu --mapping sideways
needle_="--tile, --mapping and --tasks need --backend cpu or gpu"; run_with "$G" "$G" "$G" "$M" 16 --tile 64x64
needle_="--q-blocks '$D/int32.npy': expected a non-empty 1-D int32 or int64 array"
expect_reject "$needle_" --mask "$M" --q-blocks "$D/int32.npy" --k-blocks "$D/int32.npy" \
  --q "$G" --k "$G" --v "$G" --out "$D/out.npy"
expect_reject "missing --out" --mask "$M" --block 16 --q "$G" --k "$G" --v "$G"
# the CPU plan path and the GPU path fail cleanly while they are not there
rm -f "$D/out.npy"
"$T" run --backend cpu --mask "$M" --block 16 --q "$G" --k "$G" --v "$G" --out "$D/out.npy" \
  >"$D/stdout" 2>"$D/stderr"
rc=$?
if [ $rc -ne 0 ]; then
  [ $rc -eq 2 ] && [ "$(wc -l <"$D/stderr")" -eq 1 ] && [ ! -e "$D/out.npy" ] \
    || bad "cpu backend failure not clean: exit $rc: $(cat "$D/stderr")"
fi
rm -f "$D/out.npy"
"$T" run --backend gpu --mask "$M" --block 16 --q "$G" --k "$G" --v "$G" --out "$D/out.npy" \
  >"$D/stdout" 2>"$D/stderr"
rc=$?
if [ $rc -ne 0 ]; then
  [ $rc -eq 2 ] && [ "$(wc -l <"$D/stderr")" -eq 1 ] && [ ! -e "$D/out.npy" ] \
    || bad "gpu backend failure not clean: exit $rc: $(cat "$D/stderr")"
fi
# --help works and exits 0
"$T" run --help >"$D/stdout" || bad "run --help exit $?"
grep -q -- "--mask" "$D/stdout" || bad "run --help lacks --mask"
# --check against the reference passes for the reference itself
"$T" run --mask "$M" --block 16 --q "$G" --k "$G" --v "$G" --out "$D/out.npy" --check 0 \
  >"$D/stdout" 2>&1 || bad "--check 0 on the reference: $(cat "$D/stdout")"
# --- selection from the lookup table (cpu backend) ------------------------------
# A recorded table (tessera-profile init over SQL text holding one row) for
# this case's geometry: the run takes the row's plan and says so; the output
# still matches the float64 reference.
P="$B/tessera-profile"
rm -f "$D"/*.npy
s=$((SEED + 50))
blk=$("$H" gen "$D" "$s" uniform) || bad "gen for selection"
bq=${blk%x*}; bk=${blk#*x}
"$T" run --backend cpu --mask "$D/mask.npy" --block "$blk" --q "$D/q.npy" --k "$D/k.npy" \
  --v "$D/v.npy" --out "$D/out.npy" --explain >"$D/stdout" 2>"$D/stderr" \
  || bad "run --explain: $(cat "$D/stderr")"
d=$(sed -n 's/^region: bf16 d\([0-9]*\) .*/\1/p' "$D/stdout")
[ -n "$d" ] || bad "run --explain printed no region: $(cat "$D/stdout")"
grep -q "^features: density" "$D/stdout" || bad "run --explain printed no features"
grep -q "^reason: no usable row.*: automatic plan" "$D/stdout" || bad "embedded table hit for d$d: $(cat "$D/stdout")"
grep -q "selected by no usable table row: the automatic planner" "$D/stdout" || bad "miss not said"
row() { # MAPPING TM TN TASKS
  echo "INSERT INTO lookup (gpu_name, arch, multiprocessors, feature_version, level, dtype, head_dim, bq, bk, seq_bin, density_bin, spread_bin, fill_bin, mapping, tile_m, tile_n, tasks, variant, masks, regret, speedup) VALUES ('NVIDIA H200', 'sm_90a', 132, 1, 2, 'bf16', $d, $bq, $bk, -1, -1, -1, -1, '$1', $2, $3, '$4', '', 3, 0.01, 1.5);"
}
# The row's tile is the base plan's (retain for 64/128-token blocks, else
# 128x128): a geometry-wide row whose tile wastes more than the base plan's
# on this mask is skipped (tests/plan.sh), which this test is not about.
case $blk in
  64x64 | 64x128 | 128x64 | 128x128) hit="retain $bq $bk" ;;
  *) hit="combine 128 128" ;;
esac
set -- $hit
row "$1" "$2" "$3" split >"$D/hit.sql"
want="$1 ${2}x$3"
"$P" init --db "$D/hit.db" --sql "$D/hit.sql" >/dev/null 2>"$D/stderr" || bad "init hit.db: $(cat "$D/stderr")"
rm -f "$D/out.npy"
"$T" run --backend cpu --db "$D/hit.db" --explain --mask "$D/mask.npy" --block "$blk" \
  --q "$D/q.npy" --k "$D/k.npy" --v "$D/v.npy" --out "$D/out.npy" --lse "$D/lse.npy" \
  >"$D/stdout" 2>"$D/stderr" || bad "run --db hit.db: $(cat "$D/stderr")"
grep -q "^selected: $want split" "$D/stdout" || bad "row not selected: $(cat "$D/stdout")"
grep -q "^reason: table row [0-9]* at level 2 for NVIDIA H200" "$D/stdout" || bad "no row reason: $(cat "$D/stdout")"
grep -q "^cpu: plan $want, split tasks .*selected by table row [0-9]* (level 2)" "$D/stdout" \
  || bad "plan line: $(cat "$D/stdout")"
"$H" check "$D" "$s" uniform 0 1e-4 || bad "selected plan's output"
# The same with --no-select: the automatic planner, the same output.
rm -f "$D/out.npy" "$D/lse.npy"
"$T" run --backend cpu --no-select --mask "$D/mask.npy" --block "$blk" --q "$D/q.npy" \
  --k "$D/k.npy" --v "$D/v.npy" --out "$D/out.npy" --lse "$D/lse.npy" >"$D/stdout" 2>&1 \
  || bad "run --no-select: $(cat "$D/stdout")"
grep -q "selected by the automatic planner (--no-select)" "$D/stdout" || bad "--no-select: $(cat "$D/stdout")"
grep -q "split tasks" "$D/stdout" && bad "--no-select took the table's split tasks"
"$H" check "$D" "$s" uniform 0 1e-4 || bad "automatic plan's output"
# A row that does not apply (retain needs blocks equal to the tile) is
# skipped, with the reason: the automatic planner.
row retain 64 64 row >"$D/skip.sql"
"$P" init --db "$D/skip.db" --sql "$D/skip.sql" >/dev/null 2>&1 || bad "init skip.db"
"$T" run --backend cpu --db "$D/skip.db" --explain --mask "$D/mask.npy" --block "$blk" \
  --q "$D/q.npy" --k "$D/k.npy" --v "$D/v.npy" --out "$D/out.npy" >"$D/stdout" 2>&1 \
  || bad "run --db skip.db: $(cat "$D/stdout")"
grep -q "^reason: .*skipped: retain needs blocks equal to the tile: automatic plan" "$D/stdout" \
  || bad "ineligible row: $(cat "$D/stdout")"
# Rejected: a missing or corrupt table (named), --db/--explain without a
# plan to select, --no-select with them.
X="--mask $D/mask.npy --block $blk --q $D/q.npy --k $D/k.npy --v $D/v.npy --out $D/out.npy"
head -c 3000 /dev/urandom >"$D/junk.db"
# shellcheck disable=SC2086
{
  expect_reject "cannot open lookup database '$D/missing.db'" $X --backend cpu --db "$D/missing.db"
  expect_reject "$D/junk.db" $X --backend cpu --db "$D/junk.db"
  expect_reject "--no-select, --db and --explain need --backend cpu or gpu" $X --explain
  expect_reject "--no-select excludes --db and --explain" $X --backend cpu --no-select --db "$D/hit.db"
  expect_reject "--db and --explain select the plan" $X --backend cpu --explain --tile 64x64
}

# --- where the outputs go, and inputs that are not files -------------------------
# --out and --lse are one transaction (runtime/files.h): a link is written
# through (the link stays), a FIFO directly (it stays a FIFO), a folder is
# refused (left as it was); a failing --lse leaves the --out that was there
# byte for byte.  An input that is not a regular file (a FIFO as --mask) is
# refused at once, never waited on.
rm -f "$D"/*.npy
s=$((SEED + 70))
blk=$("$H" gen "$D" "$s" uniform) || bad "gen for output files"
IN="--mask $D/mask.npy --block $blk --q $D/q.npy --k $D/k.npy --v $D/v.npy"
mkdir "$D/sub"
ln -s sub/out_real.npy "$D/out.npy" # dangling: the run creates the target
ln -s sub/lse_real.npy "$D/lse.npy"
for round in new existing; do
  # shellcheck disable=SC2086
  "$T" run $IN --out "$D/out.npy" --lse "$D/lse.npy" >"$D/stdout" 2>"$D/stderr" \
    || bad "run through links ($round targets): $(cat "$D/stderr")"
  [ -L "$D/out.npy" ] && [ -L "$D/lse.npy" ] || bad "a link at --out/--lse was replaced ($round)"
  [ -f "$D/sub/out_real.npy" ] && [ -f "$D/sub/lse_real.npy" ] || bad "link targets not written ($round)"
  "$H" check "$D" "$s" uniform 0 || bad "output written through links ($round)"
done
cp "$D/sub/out_real.npy" "$D/want.npy"
rm -f "$D/out.npy" "$D/lse.npy"
# a FIFO at --out: its reader gets the result (the reader gives up after 20 s)
mkfifo "$D/fifo.npy"
timeout 20 cat "$D/fifo.npy" >"$D/from_fifo.npy" &
reader=$!
# shellcheck disable=SC2086
timeout 20 "$T" run $IN --out "$D/fifo.npy" >"$D/stdout" 2>"$D/stderr" || bad "run --out FIFO: exit $?: $(cat "$D/stderr")"
wait $reader || bad "the FIFO's reader got nothing (exit $?)"
[ -p "$D/fifo.npy" ] || bad "--out FIFO replaced by a regular file"
cmp -s "$D/from_fifo.npy" "$D/want.npy" || bad "the FIFO's reader did not get the output"
# ... also when stdout writes the same FIFO (as with --out /dev/stdout | ...):
# the messages go to stderr, the reader gets the .npy alone
timeout 20 cat "$D/fifo.npy" >"$D/from_fifo.npy" &
reader=$!
# shellcheck disable=SC2086
timeout 20 "$T" run $IN --out "$D/fifo.npy" >"$D/fifo.npy" 2>"$D/stderr" || bad "run --out FIFO >FIFO: exit $?: $(cat "$D/stderr")"
wait $reader || bad "the FIFO's reader got nothing (exit $?)"
cmp -s "$D/from_fifo.npy" "$D/want.npy" || bad "--out the FIFO stdout writes: not the .npy alone"
grep -q "^ref: batch 1, .*wrote '$D/fifo.npy'" "$D/stderr" || bad "--out the FIFO stdout writes: no message on stderr"
rm -f "$D/fifo.npy" "$D/from_fifo.npy"
# a folder at --out: refused, kept
mkdir "$D/dir.npy" && echo keep >"$D/dir.npy/keep"
# shellcheck disable=SC2086
expect_reject "cannot write '$D/dir.npy': a directory, not a regular file" $IN --out "$D/dir.npy"
[ -d "$D/dir.npy" ] && [ "$(cat "$D/dir.npy/keep")" = keep ] && [ "$(ls -A "$D/dir.npy")" = keep ] \
  || bad "--out folder changed"
# a failing --lse (no such folder; a folder): the --out that was there stays byte for byte
head -c 4096 /dev/urandom >"$D/prev.npy"
cp "$D/prev.npy" "$D/prev0.npy"
for lse in "$D/nodir/lse.npy" "$D/dir.npy"; do
  # shellcheck disable=SC2086
  "$T" run $IN --out "$D/prev.npy" --lse "$lse" >"$D/stdout" 2>"$D/stderr"
  rc=$?
  [ $rc -eq 2 ] || bad "failing --lse '$lse': exit $rc, not 2"
  grep -qF "cannot write '$lse'" "$D/stderr" || bad "failing --lse: $(cat "$D/stderr")"
  cmp -s "$D/prev.npy" "$D/prev0.npy" || bad "failing --lse '$lse' changed or removed --out"
  ls "$D" | grep -q tmp && bad "temporary file left behind by failing --lse '$lse'"
done
# --out and --lse naming one file through a link: refused, nothing written
ln -s prev.npy "$D/alias.npy"
# shellcheck disable=SC2086
"$T" run $IN --out "$D/prev.npy" --lse "$D/alias.npy" >"$D/stdout" 2>"$D/stderr"
[ $? -eq 2 ] && grep -q "names the same file" "$D/stderr" || bad "--out, --lse one file: $(cat "$D/stderr")"
cmp -s "$D/prev.npy" "$D/prev0.npy" || bad "--out, --lse one file changed --out"
# FIFOs (nothing writes them) as inputs: exit 2 within a second
mkfifo "$D/in_fifo.npy"
for opt in mask q; do
  case $opt in
    mask) args="--mask $D/in_fifo.npy --block $blk --q $D/q.npy" ;;
    q) args="--mask $D/mask.npy --block $blk --q $D/in_fifo.npy" ;;
  esac
  # shellcheck disable=SC2086
  timeout 1 "$T" run $args --k "$D/k.npy" --v "$D/v.npy" --out "$D/o.npy" >"$D/stdout" 2>"$D/stderr"
  rc=$?
  [ $rc -eq 2 ] || bad "FIFO as --$opt: exit $rc, not 2 (124: it waited)"
  grep -qF "'$D/in_fifo.npy': a FIFO, not a regular file" "$D/stderr" || bad "FIFO as --$opt: $(cat "$D/stderr")"
  [ ! -e "$D/o.npy" ] || bad "FIFO as --$opt left an output"
done
timeout 1 "$T" run --mask "$D/mask.npy" --q-blocks "$D/in_fifo.npy" --k-blocks "$D/in_fifo.npy" \
  --q "$D/q.npy" --k "$D/k.npy" --v "$D/v.npy" --out "$D/o.npy" >"$D/stdout" 2>"$D/stderr"
[ $? -eq 2 ] && grep -q "a FIFO" "$D/stderr" || bad "FIFO as --q-blocks: $(cat "$D/stderr")"

exit $fail
