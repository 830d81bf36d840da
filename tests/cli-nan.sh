#!/bin/sh
# cli-nan.sh: a NaN in the input through `tessera run`.  tests/cli_attn
# writes a case with NaN at one element of a query row that selects keys;
# on the reference and on the CPU plan executor (the planner's plan, and
# split rows with merges on small subdivided tiles) that whole row of
# --out and its --lse must be NaN and every other row as the independent
# float64 attention gives it (cli_attn check, 1e-4); --check must accept
# the matching NaN (exit 0).
set -u
B=${TSR_TOP_BUILDDIR:-.}
T="$B/tessera"
H="$B/tests/cli_attn"
SEED=${TSR_SEED:-4242}
echo "cli-nan: seed $SEED"
D=$(mktemp -d "${TMPDIR:-/tmp}/tsr-cli-nan.XXXXXX") || exit 99
trap 'rm -rf "$D"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

for i in 1 2 3; do
  s=$((SEED + 100 + i))
  rm -f "$D"/*.npy
  blk=$("$H" gen "$D" "$s" nan) || { bad "gen nan seed $s"; continue; }
  for how in "ref" "cpu" "cpu --tile 16x32 --tasks split"; do
    rm -f "$D/out.npy" "$D/lse.npy"
    # shellcheck disable=SC2086
    "$T" run --backend $how --mask "$D/mask.npy" --block "$blk" --q "$D/q.npy" --k "$D/k.npy" \
      --v "$D/v.npy" --out "$D/out.npy" --lse "$D/lse.npy" --check 1e-4 >"$D/stdout" 2>"$D/stderr" \
      || { bad "run --backend $how seed $s: exit $?: $(cat "$D/stderr")"; continue; }
    cat "$D/stdout"
    "$H" check "$D" "$s" nan 0 1e-4 || bad "check --backend $how seed $s"
  done
done
[ $fail -eq 0 ] && echo "cli-nan: ok"
exit $fail
