#!/usr/bin/env python3
"""dyn_ab.py: the sm90 "dyn" variants (a persistent grid whose CTAs take tasks
from an atomic counter, templates/attn_sm90.cuh) against the flat variants of
the same tile, on the same plans, on the GPU machine, one process (issue 20).

For each case (bf16, BHSD, one batch, masks as scripts/bench-peers makes
them: random with every query block's diagonal block kept, or top-k) the
automatic row plan on the block's own tile (tile=(b, b), tasks="row") is run
with: the variant the bundle picks (host-auto), main's flat variant where that
differs (host-flat: the 64x64 d128 s2 g3 kernel when the s3 S2F one is
picked), the dyn variant of the tile (host-dyn), and the GPU-planned request
(tessera.attention with the CUDA mask, tasks="row") with the flat and the dyn
variant (gpu-flat, gpu-dyn; planning included, as a pipeline sees it), and
with --peers KIT VSA's ThunderKittens kernel on the 64x64 cases (the
baselines kit's adapters.vsa_blocks, as scripts/bench-peers runs it).  Every
output is poisoned and checked against a float32 reference of the masked
softmax on 256 random query rows of heads 0 and H-1 (max |err| < 3e-2) before
timing, and the dyn ones again after timing (the counter must come back to
zero after every launch).  Timing as scripts/bench-peers (bench_timing: a
warm-up of --warmup-ms each, --rounds rounds interleaved, median over rounds
of the time a call, min-max beside it).  Effective TFLOP/s = 4 * selected
pairs * D / time.  Exit 1 if any check failed.

  TESSERA_LIBRARY=BUILD/.libs/libtessera.so TESSERA_BUNDLE=BUILD/bundle \\
    python3 tests/device/dyn_ab.py [--rounds R] [--warmup-ms W] [--round-ms T]
      [--cases SUBSTR,...] [--json PATH] [--tag NAME] [--peers KIT]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_timing  # noqa: E402 -- the timing scripts/bench-peers uses
from split_ab import check, drive, make_mask, options  # noqa: E402 -- the same masks, reference and driver

CASES = [  # name, S, H, D, block, mask, density
    ("64x64 random 10%", 32768, 12, 128, 64, "random", .10),
    ("64x64 random 25%", 32768, 12, 128, 64, "random", .25),
    ("64x64 topk 10%", 32768, 12, 128, 64, "topk", .10),
    ("128x128 random 10%", 32768, 12, 128, 128, "random", .10),
    ("128x128 topk 16%", 32760, 12, 128, 128, "topk", .16),
    ("128x128 random 25%", 32768, 12, 128, 128, "random", .25),
    ("d64 128x128 random 25%", 17550, 48, 64, 128, "random", .25),
    ("d64 128x128 topk 10%", 17550, 48, 64, 128, "topk", .10),
]


def variants(tessera, ctx, mb, H, S, D, b, dtype):
    """(auto, flat, dyn): the picked variant, main's flat one, the dyn one
    (None where the bundle has none)."""
    p = tessera.Plan(ctx, mb, 1, H, H, S, S, D, block=(b, b), dtype=dtype, tile=(b, b), tasks="row", select=False)
    auto = p.summary()["variant"]
    p.close()
    flat = auto.replace("_s3_g3_flat_", "_s2_g3_flat_") if f"d{D}_m64n64_s3_g3" in auto and D == 128 else auto
    dyn = None
    for cand in (flat.replace("_flat_", "_dyn_"), flat.replace("_flat_nm", "_dyn_mb")):
        try:
            t = tessera.Plan(ctx, mb, 1, H, H, S, S, D, block=(b, b), dtype=dtype, tile=(b, b), tasks="row",
                             select=False, variant=cand)
            t.close()
            dyn = cand
            break
        except tessera.TesseraError:
            continue
    return auto, flat, dyn


def run_case(torch, tessera, ctx, c, args, gen, out_rows, adapters):
    name, S, H, D, b, mask, density = c
    n = -(-S // b)
    q, k, v = (torch.randn(1, H, S, D, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(3))
    mb = make_mask(torch, mask, H, n, density, gen)
    sizes = torch.full((n,), float(b), device="cuda", dtype=torch.float64)
    sizes[-1] = S - b * (n - 1)
    pairs = torch.einsum("hij,i,j->", mb.double(), sizes, sizes).item()
    rows = torch.randint(0, S, (255,), device="cuda", generator=gen)
    rows = torch.cat([rows, torch.tensor([S - 1], device="cuda")])
    out = torch.full_like(q, float("nan"))
    auto, flat, dyn = variants(tessera, ctx, mb, H, S, D, b, q.dtype)
    named = [("host-auto", auto)] + ([("host-flat", flat)] if flat != auto else [])
    if dyn:
        named.append(("host-dyn", dyn))
    plans, systems = [], []
    for sysname, var in named:
        p = tessera.Plan(ctx, mb, 1, H, H, S, S, D, block=(b, b), dtype=q.dtype, tile=(b, b), tasks="row",
                         select=False, variant=var)
        plans.append(p)
        systems.append((sysname, var, lambda p=p: p.run(q, k, v, out=out)))
    for sysname, var in (("gpu-flat", flat), ("gpu-dyn", dyn)):
        if var:  # the device planner may want membership code: then the _mb variant of the layout
            systems.append((sysname, var, [lambda var=var: tessera.attention(
                q, k, v, mb, block=(b, b), context=ctx, out=out, tile=(b, b), tasks="row", variant=var)
                for var in dict.fromkeys((var, var.replace("_nm", "_mb")))]))
    if adapters is not None and b == 64 and S % 64 == 0:
        systems.append(("vsa", "VSA 0.0.4 (TK)", None))  # prepared below
    ready = []
    for sysname, var, fn in systems:
        if sysname == "vsa":  # prepared once (index build untimed), then its calls timed
            try:
                run, _ = adapters.vsa_blocks(q, k, v, mb)
                fn = (lambda run=run: run.to_bhsd(run()))
            except Exception as e:  # noqa: BLE001
                out_rows.append(dict(tag=args.tag, case=name, system=sysname, variant=var, err=float("nan"),
                                     status=f"failed: {e!r}"[:300]))
                continue
        r = dict(tag=args.tag, case=name, system=sysname, variant=var, tokens=S, heads=H, head_dim=D,
                 block=b, density=pairs / (H * S * S))
        out_rows.append(r)
        cands = fn if isinstance(fn, list) else [fn]
        for i, fn in enumerate(cands):
            try:
                out.fill_(float("nan"))
                o = fn()
                torch.cuda.synchronize()
                r["err"] = check(torch, o, q, k, v, mb, b, rows)
                if i:
                    r["variant"] = var.replace("_nm", "_mb")
                break
            except Exception as e:  # noqa: BLE001 -- reported, the others still timed
                r["status"], r["err"] = f"failed: {e!r}"[:300], float("nan")
        if "err" not in r or r["err"] != r["err"]:
            continue
        r["status"] = "ok" if r["err"] < 3e-2 else f"failed its check: max |err| {r['err']:.3g}"
        if r["status"] == "ok":
            ready.append((r, fn))
    res = bench_timing.interleaved([(r["system"], fn) for r, fn in ready], args.rounds, args.warmup_ms,
                                   args.round_ms, bench_timing.CudaTimer(torch), settle_ms=args.settle_ms)
    for r, fn in ready:
        r.update(res[r["system"]])
        r["tflops"] = 4 * pairs * D / (r["ms"] * 1e-3) / 1e12
        if "dyn" in r["system"]:  # after hundreds of launches: the counter still right
            out.fill_(float("nan"))
            o = fn()
            torch.cuda.synchronize()
            r["err_after"] = check(torch, o, q, k, v, mb, b, rows)
            if not r["err_after"] < 3e-2:
                r["status"] = f"failed its check after timing: max |err| {r['err_after']:.3g}"
    mine = [r for r in out_rows if r["case"] == name and r.get("tag") == args.tag]
    base = {r["system"]: r.get("ms") for r in mine}
    for r in mine:
        ref = base.get("gpu-flat" if r["system"].startswith("gpu") else "host-flat") or base.get("host-auto")
        rel = f" flat/this {ref / r['ms']:.3f}" if "ms" in r and ref else ""
        print(f"{args.tag:6s} {name:24s} {r['system']:9s} "
              + (f"{r['ms']:.4f} ms [{r['ms_min']:.4f}-{r['ms_max']:.4f}] {r['tflops']:6.1f} TFLOP/s{rel}"
                 if "ms" in r else r["status"])
              + f"  err {r['err']:.1e}  {r['variant']}", flush=True)
    for p in plans:
        p.close()


def main():
    ap = options(__doc__)
    ap.add_argument("--peers", default="", help="the baselines kit folder: VSA's kernel on the 64x64 cases")
    args = ap.parse_args()
    bench_timing.check_args(ap, args)
    adapters = None
    if args.peers:
        sys.path.insert(0, args.peers)
        try:
            import adapters
        except Exception as e:  # noqa: BLE001 -- reported; Tessera's systems still run
            print(f"vsa: adapters not importable: {e!r}"[:200], flush=True)
    sys.exit(drive(args, CASES, run_case, adapters))


if __name__ == "__main__":
    main()
