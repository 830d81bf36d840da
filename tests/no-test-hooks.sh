#!/bin/sh
# no-test-hooks.sh: the shipped command, tools and library hold no test
# hook: no environment variable that damages plans or outputs
# (TESSERA_PLAN_CORRUPT and TESSERA_DEMO_CORRUPT were read by the shipped
# `tessera plan` and `tessera demo`), no hook function.  The hooks live in
# tests/tessera-test only (cli/cli.h, tests/cli_hooks.c), which must have
# them.
set -u
B=${TSR_TOP_BUILDDIR:-.}
fail=0
for f in "$B/tessera" "$B/tessera-profile" "$B/tessera-gen" "$B/.libs/libtessera.so" \
  "$B/.libs/libtessera.a"; do
  [ -f "$f" ] || { echo "FAIL: no $f"; fail=1; continue; }
  for s in TESSERA_PLAN_CORRUPT TESSERA_DEMO_CORRUPT TSR_TEST_DAMAGE cli_test_damage; do
    if grep -aq "$s" "$f"; then
      echo "FAIL: $f holds '$s'"
      fail=1
    fi
  done
done
for s in TSR_TEST_DAMAGE cli_test_damage_plan; do
  [ -f "$B/tests/tessera-test" ] && grep -aq "$s" "$B/tests/tessera-test" ||
    { echo "FAIL: tests/tessera-test lacks '$s'"; fail=1; }
done
[ $fail -eq 0 ] && echo "ok: no test hook in the shipped binaries"
exit $fail
