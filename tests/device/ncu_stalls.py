#!/usr/bin/env python3
"""ncu_stalls.py: the warp-stall reasons of Nsight Compute reports, side by
side (`ncu --import R --page raw` text, one file a report): warps stalled
for each reason per issued instruction, with each report's duration, SM
clock and SM throughput (notes/power-2026-12-06.md section 4).

  python3 tests/device/ncu_stalls.py NAME=RAW.txt [NAME=RAW.txt ...]
"""
import re
import sys

PREFIX = "smsp__average_warps_issue_stalled_"
SUFFIX = "_per_issue_active.ratio"
HEAD = {"gpu__time_duration.sum": "duration", "gpc__cycles_elapsed.avg.per_second": "clock",
        "gpc__cycles_elapsed.avg": "cycles", "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput",
        "smsp__inst_executed.sum": "instructions"}


def read(path):
    """{metric: (unit, value text)} of one raw page."""
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"\s+([a-z0-9_.]+)\s+(\S*)\s+([-0-9.,e+]+|n/a)\s*$", line)
            if m:
                out[m.group(1)] = (m.group(2), m.group(3))
    return out


def main(argv):
    if not argv or any("=" not in a for a in argv):
        sys.stderr.write(__doc__.split("\n\n")[-1] + "\n")
        return 2
    cols = []
    for a in argv:
        name, path = a.split("=", 1)
        try:
            cols.append((name, read(path)))
        except OSError as e:
            sys.stderr.write(f"ncu_stalls: {path}: {e.strerror}\n")
            return 2
    reasons = sorted({k[len(PREFIX):-len(SUFFIX)] for _, m in cols for k in m
                      if k.startswith(PREFIX) and k.endswith(SUFFIX)})
    if not reasons:
        sys.stderr.write("ncu_stalls: no stall metrics in these pages (profile with --section WarpStateStats)\n")
        return 2
    print("| metric | " + " | ".join(n for n, _ in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for key, label in HEAD.items():
        print(f"| {label} | " + " | ".join(" ".join(m.get(key, ("", "-"))[::-1]).strip() for _, m in cols) + " |")
    for r in reasons:
        print(f"| stall {r} | " + " | ".join(m.get(PREFIX + r + SUFFIX, ("", "-"))[1] for _, m in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
