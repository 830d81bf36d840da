# scripts/: set-up scripts named by the README, device helpers.
EXTRA_DIST += scripts/setup-and-test scripts/setup-and-demo scripts/setup-common
EXTRA_DIST += scripts/bench-vs-torch
EXTRA_DIST += scripts/profile-h200
