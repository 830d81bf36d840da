# scripts/: set-up scripts named by the README, device helpers.
EXTRA_DIST += scripts/setup-and-test scripts/setup-and-demo scripts/setup-common
EXTRA_DIST += scripts/bench-vs-torch scripts/bench-peers
EXTRA_DIST += scripts/profile-h200
EXTRA_DIST += scripts/device-check scripts/device-demo
# sm90 kernel development: standalone device harness (see notes/sm90.md)
EXTRA_DIST += scripts/dev/sm90_harness.cu scripts/dev/sm90_variant.cu.in \
	scripts/dev/sm90_build.sh scripts/dev/sm90_device.sh scripts/dev/sdpa_dense.py \
	notes/sm90.md
# GPU planning: one device call (tests, memcheck, bench), and its notes
EXTRA_DIST += scripts/dev/sm90b_device.sh scripts/dev/sm90b_validate.sh scripts/dev/sm90d_device.sh
EXTRA_DIST += scripts/dev/gpuplan_device.sh scripts/dev/plan_probe.cu notes/gpuplan.md
# variable geometries on the GPU planner: one device call, the request bench
EXTRA_DIST += scripts/dev/varplan_device.sh scripts/dev/varplan_bench.py notes/varplan.md \
	notes/varplan-device-2026-11-29.txt
