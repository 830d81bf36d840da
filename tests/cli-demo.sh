#!/bin/sh
# cli-demo.sh: `tessera demo` runs on the bundled defaults, says which path
# it runs, and reports each mask against the reference and dense attention.
set -u
B=${TSR_TOP_BUILDDIR:-.}
out=$("$B/tessera" demo 2>&1)
rc=$?
printf '%s\n' "$out"
fail=0
[ $rc -eq 0 ] || { echo "FAIL: demo exit $rc"; fail=1; }
printf '%s\n' "$out" | grep -Eq '^(no GPU found: running the CPU path|GPU found)' \
  || { echo "FAIL: demo does not say whether it found a GPU"; fail=1; }
for m in 'band+sink' 'random 25%' 'top-k 25%'; do
  printf '%s\n' "$out" | grep -qF "$m" || { echo "FAIL: no '$m' mask"; fail=1; }
done
[ "$(printf '%s\n' "$out" | grep -c '  reference: ')" -eq 3 ] \
  || { echo "FAIL: not three reference runs"; fail=1; }
# a local mask on local attention must stay close to dense; the random one not
band=$(printf '%s\n' "$out" | grep -A1 '^band+sink' | sed -n 's/.*dense attention by \([0-9.]*\).*/\1/p')
awk -v e="$band" 'BEGIN { exit !(e != "" && e < 0.05) }' \
  || { echo "FAIL: band+sink differs from dense by '$band'"; fail=1; }
# the CPU plan path, once it exists, must agree with the reference
printf '%s\n' "$out" | sed -n 's/.*max relative error vs reference \([0-9.e+-]*\).*/\1/p' |
  while read -r e; do
    awk -v e="$e" 'BEGIN { exit !(e < 1e-2) }' || { echo "FAIL: plan error $e"; exit 1; }
  done || fail=1
"$B/tessera" demo --seq 5 >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: demo --seq 5 not a usage error"; fail=1; }
exit $fail
