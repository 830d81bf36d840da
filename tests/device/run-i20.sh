#!/bin/sh
# tests/device/run-i20.sh: the one device call of run E (issue 20,
# notes/sm90-dyn-2026-12-02b.md): tests/device/ring_handoff.cu with poison
# and under compute-sanitizer racecheck, then the selection sweep behind
# db/h200.sql (five corpora, both splits, each sweep under a time budget),
# its derivation, report and export.  Run from the repository root on the
# GPU machine with a carried folder D holding tessera, tessera-profile,
# bundle/ and ring_handoff.cu:
#   sh tests/device/run-i20.sh D      (about 330 s on the H200)
# Logs, h200.db, h200.sql and two tarballs land in $OUT.
D=${1:?usage: run-i20.sh CARRIED_DIR}
O=${OUT:-/tmp/out}
L=/tmp/i20logs
mkdir -p "$O" "$L"
T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$O/log.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv 2>&1 | tee -a "$O/log.txt"
date -u | tee -a "$O/log.txt"

# ---- 1. the ring hand-off alone ---------------------------------------------
nvcc --version | tail -2 | tee -a "$O/log.txt"
compute-sanitizer --version 2>&1 | tail -2 | tee -a "$O/log.txt"
compute-sanitizer --help 2>&1 | grep -i -A3 racecheck >"$L/cs-help.txt"
timeout 120 nvcc -O2 -arch=sm_90a -lineinfo -I templates -o /tmp/ring_handoff "$D/ring_handoff.cu" >"$L/nvcc.txt" 2>&1
log "nvcc exit $?"
R=/tmp/ring_handoff
rh() { # NAME ARGS...: one functional run
  n=$1; shift
  timeout 60 $R "$@" >"$L/rh-$n.txt" 2>&1
  log "ring_handoff $* -> exit $?: $(tail -1 "$L/rh-$n.txt")"
}
rh ok-poison ok --poison --delay 2000
rh ok-poison-nc1 ok --poison --delay 2000 --nc 1 --seed 7
rh ok-poison-nodelay ok --poison
rh ok-plain ok --delay 2000
rh token-poison token --poison --delay 2000
rh sts-poison sts --poison --delay 2000
rh early-poison early --poison --delay 2000
rh early-poison-nodelay early --poison
rh early-plain early --delay 2000
rc() { # NAME ARGS...: racecheck of a small run (2 CTAs, 40 tasks: 10 wraps a stream)
  n=$1; shift
  timeout 90 compute-sanitizer --tool racecheck --racecheck-report all --print-limit 20 \
    $R "$@" --ctas 2 --tasks 40 >"$L/rc-$n.txt" 2>&1
  log "racecheck $n ($*) exit $?: $(grep -h 'RACECHECK SUMMARY' "$L/rc-$n.txt")"
}
rc ok ok
rc ok-nc1 ok --nc 1
rc token token
rc sts sts
rc ok-poison ok --poison
rc early early
grep -q "racecheck-memcpy-async" "$L/cs-help.txt" &&
  { timeout 90 compute-sanitizer --tool racecheck --racecheck-memcpy-async no --racecheck-report all \
      --print-limit 20 $R ok --ctas 2 --tasks 40 >"$L/rc-ok-nomemcpyasync.txt" 2>&1
    log "racecheck ok --racecheck-memcpy-async no exit $?: $(grep -h 'RACECHECK SUMMARY' "$L/rc-ok-nomemcpyasync.txt")"; }
(cd "$L" && tar czf "$O/ring.tgz" .)

# ---- 2. the sweep -------------------------------------------------------------
export TESSERA_BUNDLE="$D/bundle"
C=/tmp/tsr_corpora
DB="$O/h200.db"
for p in demo wan2.1-1.3b-480p cogvideox-5b wan2.1-14b-720p hunyuanvideo-720p; do
  timeout 60 "$D/tessera" corpus generate --preset $p --out "$C/$p" --jobs 16 2>&1 | tail -1 | tee -a "$O/log.txt"
done
log "corpora generated"
sw() { # CORPUS SPLIT REPEATS WARMUP BUDGET PATTERN
  log "sweep $1 $2 repeats $3 warmup $4 budget $5 variants $6"
  timeout $(( $5 + 60 )) "$D/tessera-profile" sweep --corpus "$C/$1" --db "$DB" --split $2 --repeats $3 \
    --warmup $4 --budget $5 --variants "$6" >"$L/sweep.out" 2>&1
  r=$?
  tail -3 "$L/sweep.out" | tee -a "$O/log.txt"
  log "sweep $1 $2 exit $r"
}
A='tsr_sm90_bf16_d*'      # every bf16 Hopper variant (fp8 ones need another precision)
B='tsr_sm90_bf16_d*_m128n*' # 128-row tiles only, at 75K and 119K tokens
sw demo profile 10 3 30 "$A"
sw demo eval 10 3 30 "$A"
sw wan2.1-1.3b-480p profile 5 2 95 "$A"
sw wan2.1-1.3b-480p eval 5 2 50 "$A"
sw cogvideox-5b profile 5 2 35 "$A"
sw cogvideox-5b eval 5 2 20 "$A"
sw wan2.1-14b-720p profile 3 1 35 "$B"
sw wan2.1-14b-720p eval 3 1 20 "$B"
sw hunyuanvideo-720p profile 3 1 40 "$B"
sw hunyuanvideo-720p eval 3 1 25 "$B"
"$D/tessera-profile" build --db "$DB" 2>&1 | tee -a "$O/log.txt"
"$D/tessera-profile" report --db "$DB" --out "$L/report" 2>&1 | tee -a "$O/log.txt"
"$D/tessera-profile" export --db "$DB" --gpu "NVIDIA H200" --out "$O/h200.sql" 2>&1 | tee -a "$O/log.txt"
(cd "$L" && tar czf "$O/report.tgz" report sweep.out 2>/dev/null)
log "done"
