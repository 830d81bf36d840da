# scripts/: set-up scripts named by the README, device helpers.
EXTRA_DIST += scripts/setup-and-test
EXTRA_DIST += scripts/bench-vs-torch
