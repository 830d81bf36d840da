#!/usr/bin/env python3
"""table_ab.py: the GPU-planned request with the lookup table against the
same request without it (select=False: the automatic plan), on the GPU
machine (issue 20, "Selection": what the embedded table gives through the
path users take, on the card it was swept on).

For each of steady_ab.py's cases: the request tessera.attention(q, k, v,
CUDA mask, context=ctx) with selection and without, each checked against
float32 on 256 rows of heads 0 and H-1 before it is timed, then timed in
alternating blocks of --ms back-to-back calls after 300 ms of its own
(steady_ab.steady: time a call, SM clock), --reps blocks each.  Prints the
selection's reason (the table row, its GPU) and the ratio automatic /
selected (> 1: the table is faster).

  TESSERA_LIBRARY=BUILD/.libs/libtessera.so TESSERA_BUNDLE=BUILD/bundle \\
    python3 tests/device/table_ab.py [--cases k64r25,r10] [--ms 1000] [--reps 2] [--json PATH]
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..", "python"), os.path.join(HERE, "..", "..", "scripts"), HERE]
import bench_timing  # noqa: E402 -- Nvml
from split_ab import check  # noqa: E402
from steady_ab import CASES, case_inputs, log, steady  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="k64r25,r10,t16,b64r25,d64r25,L25")
    ap.add_argument("--ms", type=float, default=1000)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    bad = [c for c in args.cases.split(",") if c not in CASES]
    if bad:
        ap.error(f"unknown case {bad[0]!r}; cases: {', '.join(sorted(CASES))}")
    import torch
    import tessera
    nv = bench_timing.Nvml.open()
    ctx = tessera.Context()
    log("device", torch.cuda.get_device_name())
    results, failed = [], 0
    for cname in args.cases.split(","):
        gen = torch.Generator(device="cuda").manual_seed(20261206)
        b, mb, q, k, v, flops = case_inputs(torch, cname, gen)
        rows = torch.randperm(q.shape[2], generator=gen, device="cuda")[:256].sort().values
        fns = {}
        for name, sel in (("table", True), ("automatic", False)):
            o = torch.full_like(q, float("nan"))
            fn = (lambda o=o, sel=sel: tessera.attention(q, k, v, mb, block=b, context=ctx, out=o, select=sel))
            for _ in range(3):  # the template re-selected from the previous calls' features
                fn()
            torch.cuda.synchronize()
            why = tessera.last_selection().get("selection")
            err = check(torch, o, q, k, v, mb, b, rows)
            ok = err < 3e-2
            failed += not ok
            log(f"{cname} {name}: max |err| {err:.2e} {'ok' if ok else 'FAIL'}; {why}")
            if ok:
                fns[name] = (fn, why)
        if len(fns) < 2:
            continue
        t = {n: [] for n in fns}
        for _ in range(args.reps):
            for n, (fn, _) in fns.items():
                ms, _, _, mhz = steady(torch, nv, fn, args.ms)
                t[n].append((ms, mhz))
        best = {n: min(x[0] for x in t[n]) for n in t}
        r = best["automatic"] / best["table"]
        log(f"{cname}: table {best['table']:.3f} ms ({flops / best['table'] / 1e9:.1f} TFLOP/s), automatic "
            f"{best['automatic']:.3f} ms ({flops / best['automatic'] / 1e9:.1f}), automatic / table {r:.3f}; "
            f"clocks {[round(x[1] or 0) for n in t for x in t[n]]}")
        results.append(dict(case=cname, table_ms=best["table"], automatic_ms=best["automatic"], ratio=r,
                            table_selection=fns["table"][1], automatic_selection=fns["automatic"][1],
                            blocks={n: t[n] for n in t}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), results=results, failed=failed), f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
