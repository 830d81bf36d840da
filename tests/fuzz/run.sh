#!/bin/sh
# tests/fuzz/run.sh NAME SECONDS: runs the libFuzzer harness
# tests/fuzz/fuzz_NAME for SECONDS from the build folder (make fuzz-smoke,
# make fuzz), over its seeds (fuzz/seeds/NAME) and the inputs earlier runs
# kept (fuzz/work/NAME), with its dictionary.  Writes fuzz/log/NAME.log and
# prints one summary line: executions, speed, coverage (edges, features),
# inputs kept, peak memory.  A finding (crash, assertion, sanitizer report,
# leak, timeout, out of memory) leaves its input in fuzz/crash/NAME/ and
# exits 1 naming the command that replays it.
#
# Environment: FUZZ_TIMEOUT (s an input may take, default 10), FUZZ_RSS_MB
# (memory limit, default 2048), FUZZ_FLAGS (more libFuzzer flags).
set -u
name=$1
secs=$2
bin=tests/fuzz/fuzz_$name
[ -x "$bin" ] || { echo "fuzz: $bin is not built (configure --enable-fuzzing, make $bin)" >&2; exit 1; }
[ -d "fuzz/seeds/$name" ] || { echo "fuzz: no seeds in fuzz/seeds/$name (make fuzz-seeds)" >&2; exit 1; }
mkdir -p "fuzz/work/$name" "fuzz/crash/$name" fuzz/log
log=fuzz/log/$name.log
# The database harnesses select against the registry mkseeds wrote (the
# real variant list, no cubins); a GPU is never touched.
TESSERA_BUNDLE=$(pwd)/fuzz/bundle
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# The harnesses write each input to files; in memory (tmpfs) that is some
# fifty times faster than on a disk.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then TMPDIR=/dev/shm; fi
TMPDIR=${TMPDIR:-/tmp}
export TESSERA_BUNDLE UBSAN_OPTIONS TMPDIR
"$bin" -max_total_time="$secs" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
  -dict="fuzz/dict/$name.dict" -artifact_prefix="fuzz/crash/$name/" -print_final_stats=1 \
  ${FUZZ_FLAGS:-} "fuzz/work/$name" "fuzz/seeds/$name" >"$log" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -n 1)
last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
cov=$(printf '%s\n' "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
ft=$(printf '%s\n' "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
corp=$(printf '%s\n' "$last" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
if [ "$rc" -ne 0 ]; then
  tail -n 60 "$log" >&2
  art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
  echo "fuzz $name: FINDING after ${execs:-?} executions (exit $rc); log $log" >&2
  [ -n "$art" ] && echo "fuzz $name: replay with: TESSERA_BUNDLE=$TESSERA_BUNDLE $bin $art" >&2
  exit 1
fi
printf 'fuzz %s: %s s, %s executions (%s/s), cov %s, ft %s, %s inputs kept, peak %s MB, 0 findings\n' \
  "$name" "$secs" "${execs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "${rss:-?}"
