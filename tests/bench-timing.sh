#!/bin/sh
# bench-timing.sh: scripts/bench_timing.py (the interleaved timing of
# scripts/bench-peers and tests/device/split_ab.py) under a fake clock, and
# bench-peers' gpu/host ratio, tables and flag errors; tests/bench_timing.py
# says what it covers.  No GPU, no library, no real timings.  Skips (77)
# without python3.  SEED= repeats a run.
command -v python3 >/dev/null 2>&1 || { echo "bench-timing: no python3"; exit 77; }
TSR_TOP_SRCDIR=${TSR_TOP_SRCDIR:-.}
export TSR_TOP_SRCDIR
exec python3 "$TSR_TOP_SRCDIR/tests/bench_timing.py"
