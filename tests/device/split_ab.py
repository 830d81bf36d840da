#!/usr/bin/env python3
"""split_ab.py: GPU-planned requests against host plans of the same task
layout (issue 20, notes/sm90.md), on the GPU machine, one process.

For each case (bf16, BHSD, one batch, random masks with every query block's
diagonal block kept, as scripts/bench-peers makes them): tessera.attention
with the CUDA mask and tasks="row" / tasks="split" (split_tiles = the mean row
in key tiles, rounded, as tsr_gpuplan_reselect picks it), and tessera.Plan
with the same tasks on the host planner (split: its own mean-row chunk).
Every output is checked first against a float32 reference of the masked
softmax on 256 random query rows of heads 0 and H-1 (max |err| < 3e-2), then
the four are timed together as scripts/bench-peers times a case's systems
(scripts/bench_timing.py: a warm-up of --warmup-ms each, --rounds rounds
interleaved, median over rounds of the time a call, min-max beside it;
GPU-planned times include the planning kernels, as a pipeline sees them).
JSON format 2: ms is that median; ms_min, ms_max, ms_q1, ms_q3, rounds_ms
added (format 1, no "format" key: median of --reps after 3 warm-ups).  Effective TFLOP/s =
4 * selected pairs * D / time.  Prints one line a system and case, and
--json the rows.

  TESSERA_LIBRARY=BUILD/.libs/libtessera.so TESSERA_BUNDLE=BUILD/bundle \\
    python3 tests/device/split_ab.py [--rounds R] [--warmup-ms W] [--round-ms T]
      [--cases SUBSTR,...] [--json PATH] [--tag NAME]
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import bench_timing  # noqa: E402 -- the timing scripts/bench-peers uses

CASES = [  # name, S, H, D, block, mask, density
    ("64x64 random 10%", 32768, 12, 128, 64, "random", .10),
    ("64x64 random 25%", 32768, 12, 128, 64, "random", .25),
    ("64x64 topk 10%", 32768, 12, 128, 64, "topk", .10),
    ("128x128 random 10%", 32768, 12, 128, 128, "random", .10),
    ("128x128 topk 25%", 32760, 12, 128, 128, "topk", .25),
    ("128x128 random 25%", 32768, 12, 128, 128, "random", .25),
    ("64x64 random 50%", 32768, 12, 128, 64, "random", .50),
    ("d64 128x128 random 25%", 17550, 48, 64, 128, "random", .25),
]


def make_mask(torch, mask, H, n, density, gen, nk=None):
    """H x n x nk block masks (nk = n unless given): dense, random with each
    row's block on the diagonal (the key block at the row's start), top-k."""
    nk = n if nk is None else nk
    if mask == "dense":
        return torch.ones(H, n, nk, dtype=torch.bool, device="cuda")
    if mask == "random":
        m = torch.rand(H, n, nk, device="cuda", generator=gen) < density
        i = torch.arange(n, device="cuda")
        m[:, i, i * nk // n] = True
        return m
    k = max(1, round(density * nk))
    idx = torch.rand(H, n, nk, device="cuda", generator=gen).topk(k, -1).indices
    return torch.zeros(H, n, nk, dtype=torch.bool, device="cuda").scatter_(-1, idx, True)


def reference(torch, q, k, v, mb, b, rows, h):
    """float32 masked softmax of head h's `rows` (b x b blocks of mb, or
    bq x bk for b = (bq, bk))."""
    S, D = q.shape[2], q.shape[3]
    bq, bk = b if isinstance(b, tuple) else (b, b)
    s = q[0, h, rows].float() @ k[0, h].float().T / math.sqrt(D)
    keep = mb[h][rows // bq].repeat_interleave(bk, dim=1)[:, :S]
    return torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ v[0, h].float()


def check(torch, o, q, k, v, mb, b, rows):
    """Max |error| of o against float32 on `rows` of heads 0 and H-1."""
    H = q.shape[1]
    return max((o[0, h, rows].float() - reference(torch, q, k, v, mb, b, rows, h)).abs().max().item()
               for h in (0, H - 1))


def run_case(torch, tessera, ctx, c, args, gen, out_rows):
    name, S, H, D, b, mask, density = c
    n = -(-S // b)
    q, k, v = (torch.randn(1, H, S, D, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(3))
    mb = make_mask(torch, mask, H, n, density, gen)
    sizes = torch.full((n,), float(b), device="cuda", dtype=torch.float64)
    sizes[-1] = S - b * (n - 1)
    pairs = torch.einsum("hij,i,j->", mb.double(), sizes, sizes).item()
    chunk = max(1, round(mb.sum().item() / (H * n)))
    rows = torch.randint(0, S, (255,), device="cuda", generator=gen)
    rows = torch.cat([rows, torch.tensor([S - 1], device="cuda")])
    out = torch.full_like(q, float("nan"))
    systems = [
        ("gpu-row", lambda: tessera.attention(q, k, v, mb, block=(b, b), context=ctx, out=out, tasks="row")),
        ("gpu-split", lambda: tessera.attention(q, k, v, mb, block=(b, b), context=ctx, out=out, tasks="split",
                                                split_tiles=chunk)),
    ]
    plans = {}
    for t in ("row", "split"):
        plans[t] = tessera.Plan(ctx, mb, 1, H, H, S, S, D, block=(b, b), dtype=q.dtype, tasks=t, select=False)
        systems.append((f"host-{t}", lambda p=plans[t]: p.run(q, k, v, out=out)))
    ready = []
    for sysname, fn in systems:
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        err = check(torch, out, q, k, v, mb, b, rows)
        r = dict(tag=args.tag, case=name, system=sysname, tokens=S, heads=H, head_dim=D, block=b,
                 density=pairs / (H * S * S), chunk=chunk, err=err)
        if not err < 3e-2:
            r["status"] = f"failed its check: max |err| {err:.3g}"
        else:
            r["status"] = "ok"
            ready.append((r, fn))
        if sysname.startswith("host"):
            s = plans[sysname[5:]].summary()
            r.update(variant=s["variant"], tasks_count=s.get("tasks_count"))
        out_rows.append(r)
    res = bench_timing.interleaved([(r["system"], fn) for r, fn in ready], args.rounds, args.warmup_ms,
                                   args.round_ms, bench_timing.CudaTimer(torch), settle_ms=args.settle_ms)
    for r, _ in ready:
        r.update(res[r["system"]])
        r["tflops"] = 4 * pairs * D / (r["ms"] * 1e-3) / 1e12
    for r in out_rows[-len(systems):]:
        print(f"{args.tag:6s} {name:20s} {r['system']:10s} chunk {chunk:3d} "
              + (f"{r['ms']:.4f} ms [{r['ms_min']:.4f}-{r['ms_max']:.4f}] {r['tflops']:6.1f} TFLOP/s"
                 if "ms" in r else r["status"])
              + f"  err {r['err']:.1e}", flush=True)
    for p in plans.values():
        p.close()


def options(doc):
    """The command line split_ab.py and dyn_ab.py share: bench_timing's
    options, --cases, --json and --tag."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    bench_timing.add_args(ap)
    ap.add_argument("--cases", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--tag", default="run")
    return ap


def drive(args, cases, run_case, *extra):
    """Runs run_case(torch, tessera, ctx, case, args, gen, rows, *extra) for
    each case --cases names, writing --json after each; prints the rows that
    failed their checks and returns the exit status (1 if any did)."""
    import torch
    import tessera
    ctx = tessera.Context()
    gen = torch.Generator(device="cuda").manual_seed(20261202)
    rows = []
    for c in cases:
        if args.cases and not any(x in c[0] for x in args.cases.split(",")):
            continue
        run_case(torch, tessera, ctx, c, args, gen, rows, *extra)
        torch.cuda.empty_cache()
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(dict(format=2, card=torch.cuda.get_device_name(), rows=rows,
                               timing=bench_timing.describe(args.rounds, args.warmup_ms, args.round_ms,
                                                            args.settle_ms)),
                          fh, indent=1)
    bad = [r for r in rows if r["status"] != "ok"]
    for r in bad:
        print(f"FAILED: {r['case']} {r['system']} {r.get('variant', '')}: {r['status']}")
    return 1 if bad else 0


def main():
    ap = options(__doc__)
    args = ap.parse_args()
    bench_timing.check_args(ap, args)
    sys.exit(drive(args, CASES, run_case))


if __name__ == "__main__":
    main()
