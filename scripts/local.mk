# scripts/: set-up scripts named by the README, device helpers.
EXTRA_DIST += scripts/setup-and-test scripts/setup-and-demo scripts/setup-common
EXTRA_DIST += scripts/bench-vs-torch scripts/bench-peers scripts/bench_timing.py
EXTRA_DIST += scripts/profile-h200
EXTRA_DIST += scripts/device-check scripts/device-demo
# The notes of the kernel and GPU-planning work (their device runs:
# tests/device/run, tests/local.mk).
EXTRA_DIST += notes/sm90.md notes/gpuplan.md notes/varplan.md notes/varplan-device-2026-11-29.txt notes/bench-peers.md
