#!/usr/bin/env python3
"""gpu_planned_prof.py: where a GPU-planned request's time goes, beside the
host plan of the same mask (issue 20: the GPU-planned request must be within
2% of the best host plan).  For each steady_ab.py case: torch.profiler's
CUDA time a call over 20 calls of tessera.attention with the CUDA mask (the
attention kernel and the planner's kernels, count and emit) and of the
host plan's run (tessera.Plan, row tasks).  Single process, not at the power
cap: a share of the request's GPU time, not a timing (the clock moves with
the card's power between the paths; steady_ab.py times them, and checks
their outputs).  notes/sm90-2026-12-06c.md section 7.

  TESSERA_LIBRARY=... TESSERA_BUNDLE=... PYTHONPATH=python:scripts \\
    python3 tests/device/gpu_planned_prof.py [--timeline] r10 t16 d64r25

--timeline also prints the last of 5 back-to-back GPU-planned requests as
a timeline (torch.profiler's kernel records): each kernel's start and end
from the count kernel's start, and the gap from the previous request's
attention kernel, so that the planner's critical path can be read off.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..", "python"), os.path.join(HERE, "..", "..", "scripts"), HERE]
from steady_ab import CASES, case_inputs  # noqa: E402

CALLS_PROF = 20


def profile_of(torch, fn):
    """CUDA time a call of each kernel fn launches, in us, longest first."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as pr:
        for _ in range(CALLS_PROF):
            fn()
        torch.cuda.synchronize()
    rows = [(e.self_device_time_total / CALLS_PROF, e.key) for e in pr.key_averages()
            if e.self_device_time_total > 0]
    return sorted(rows, reverse=True)


def timeline_of(torch, fn, n=5):
    """The last of n back-to-back calls of fn as (name, start, end) in us
    from its first kernel's start, and the idle gap before that kernel."""
    import json
    import tempfile
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as pr:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        pr.export_chrome_trace(f.name)
        ev = json.load(open(f.name))["traceEvents"]
    ks = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in ev if e.get("cat") == "kernel")
    per = len(ks) // n
    last, prev = ks[-per:], ks[-per - 1]
    t0 = last[0][0]
    return [(name, a - t0, b - t0) for a, b, name in last], t0 - prev[1]


def main():
    args = sys.argv[1:]
    timeline = "--timeline" in args
    names = [a for a in args if a != "--timeline"] or ["r10"]
    bad = [n for n in names if n not in CASES]
    if bad:
        print(f"gpu_planned_prof.py: unknown case {bad[0]!r} (cases: {', '.join(sorted(CASES))})", file=sys.stderr)
        sys.exit(2)
    import torch
    import tessera
    for cname in names:
        b, mb, q, k, v, _ = case_inputs(torch, cname, torch.Generator(device="cuda").manual_seed(7))
        _, H, S, D = q.shape
        o = torch.empty_like(q)
        ctx = tessera.Context()
        p = tessera.Plan(ctx, mb, 1, H, H, S, S, D, block=b, dtype=q.dtype, tile=b, tasks="row")
        paths = (("gpu-planned", lambda: tessera.attention(q, k, v, mb, block=b, context=ctx, out=o)),
                 ("host", lambda: p.run(q, k, v, out=o)))
        for _, fn in paths:  # warm: modules loaded, the GPU template built
            for _ in range(5):
                fn()
        torch.cuda.synchronize()
        for name, fn in paths:
            rows = profile_of(torch, fn)
            kern = "; ".join(f"{key[:60]} {t:.1f}" for t, key in rows[:6])
            print(f"{cname} {name}: {sum(t for t, _ in rows):.1f} us of CUDA time a call: {kern}", flush=True)
            if timeline:
                ks, gap = timeline_of(torch, fn)
                print(f"{cname} {name} timeline (us from the first kernel's start; idle before it {gap:.1f}):")
                for kname, a, b in ks:
                    print(f"    {a:9.1f} {b:9.1f}  {kname[:90]}")


if __name__ == "__main__":
    main()
