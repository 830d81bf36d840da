#!/usr/bin/env python3
"""dist_bench.py: sequence-parallel Tessera on two GPUs (or more) against one.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
    TESSERA_LIBRARY=build/.libs/libtessera.so TESSERA_BUNDLE=build/bundle \\
    torchrun --standalone --nproc_per_node 2 tests/device/dist_bench.py [--json PATH]
(tests/device/run BUILDDIR dist-bench does this.)  Not run yet: the device
kind with two GPUs was withheld when it was written (issue 19).

Presets (bf16, head dim 128, [B, S, H, D], block 128x128, B = 1):
  wan       Wan2.1-14B 720p: 21 x 45 x 80 latent tokens = 75,600, 40 heads
  hunyuan   HunyuanVideo 720p (129 frames): 33 x 45 x 80 = 118,800 video
            tokens (its 256 text tokens left out), 24 heads
Masks (--mask): random (each block pair kept with probability --density,
the diagonal always: no empty row), window (a band of block pairs around
the diagonal of that density).  Per preset and mask:
  1gpu      tessera.attention on the whole sequence, rank 0 alone
  ulysses   tessera.distributed.attention, Ulysses degree = world size
  ring      ring degree = world size, the skip table computed per call
            from the CUDA mask (one small device-to-host copy)
  ring-tab  the same with hop_table() computed once (no synchronisation)
Each time is the wall clock of one request on every rank (a barrier, then
a synchronise after it; the slowest rank), median of --iters after --warm.
The ring rows report the hops launched and skipped (summed over ranks) and
the key/value chunks moved.  Every distributed output is gathered and
compared with the one-GPU output (max-norm relative, bf16: within 2e-2).
Fresh random inputs each run (SEED= repeats).  --cpu --preset tiny runs the
script itself on gloo CPU processes (no GPU; a check that it runs)."""
import argparse
import json
import os
import random
import statistics
import sys
import time

import torch
import torch.distributed as dist

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
import tessera  # noqa: E402
import tessera.distributed as td  # noqa: E402

PRESETS = {"wan": (75600, 40), "hunyuan": (118800, 24)}
SMOKE = {"tiny": (1500, 4)}  # --cpu: gloo processes, CPU tensors (a check of this script)
DEV = "cuda"


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()
D, BLOCK = 128, 128


def make_mask(kind, heads, n, density, gen, dev):
    if kind == "random":
        m = torch.rand((heads, n, n), generator=gen, device=dev) < density
    else:
        w = max(0, int(round(density * n / 2)))
        i = torch.arange(n, device=dev)
        m = ((i[:, None] - i[None, :]).abs() <= w).expand(heads, n, n).clone()
    m |= torch.eye(n, dtype=torch.bool, device=dev)
    return m


def timed(fn, iters, warm):
    """Median and min wall milliseconds of fn over every rank (the slowest)."""
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(iters):
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        t = torch.tensor([(time.perf_counter() - t0) * 1e3], device=DEV)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        ts.append(t.item())
    return statistics.median(ts), min(ts)


def gather_seq(chunk, chunks):
    """The whole [B, S, H, D] output from every rank's chunk."""
    parts = [torch.empty((chunk.shape[0], c, *chunk.shape[2:]), dtype=chunk.dtype, device=chunk.device)
             for c in chunks]
    dist.all_gather(parts, chunk.contiguous())
    return torch.cat(parts, 1)


def summed(stats):
    t = torch.tensor([stats[k] for k in ("launched", "skipped", "sent", "received")], device=DEV)
    dist.all_reduce(t)
    return dict(zip(("launched", "skipped", "sent", "received"), t.tolist()))


def run_preset(name, kind, args, rank, world, seed):
    s, h = {**PRESETS, **SMOKE}[name]
    dev = torch.device("cuda", torch.cuda.current_device()) if DEV == "cuda" else torch.device("cpu")
    gen = torch.Generator(device=dev).manual_seed(seed)  # the same inputs on every rank
    q, k, v = (torch.randn((1, s, h, D), generator=gen, device=dev, dtype=torch.bfloat16)
               for _ in range(3))
    n = -(-s // BLOCK)
    mask = make_mask(kind, h, n, args.density, gen, dev)
    density = mask.float().mean().item()
    chunks = td.chunk_sizes(s, world)
    a, b = sum(chunks[:rank]), sum(chunks[:rank + 1])
    qc, kc, vc = (t[:, a:b] for t in (q, k, v))
    rows = []

    def record(mode, ms, extra=None):
        row = dict(preset=name, mask=kind, density=round(density, 4), seq=s, heads=h, world=world,
                   mode=mode, ms=round(ms[0], 3), ms_min=round(ms[1], 3), **(extra or {}))
        if rows and rows[0]["mode"] == "1gpu":
            row["speedup"] = round(rows[0]["ms"] / ms[0], 3)
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)

    # one GPU: rank 0 alone (the others wait at the barrier)
    whole = None
    if rank == 0:
        f = lambda: tessera.attention(q, k, v, mask, block=(BLOCK, BLOCK), layout="bshd")  # noqa: E731
        for _ in range(args.warm):
            f()
        ts = []
        for _ in range(args.iters):
            sync()
            t0 = time.perf_counter()
            whole = f()
            sync()
            ts.append((time.perf_counter() - t0) * 1e3)
        ms = (statistics.median(ts), min(ts))
    dist.barrier()
    if rank == 0:
        record("1gpu", ms)
    else:
        rows.append(dict(mode="1gpu", ms=0.0))

    table = td.hop_table(mask, (BLOCK, BLOCK), s, chunks, ulysses_degree=1, ring_degree=world)
    modes = {
        "ulysses": dict(ulysses_degree=world, ring_degree=1),
        "ring": dict(ulysses_degree=1, ring_degree=world),
        "ring-tab": dict(ulysses_degree=1, ring_degree=world, hops=table),
    }
    for mode, kw in modes.items():
        out = torch.empty_like(qc)
        f = lambda: td.attention(qc, kc, vc, mask, block=(BLOCK, BLOCK), layout="bshd", out=out,  # noqa: E731
                                 chunks=chunks, **kw)
        ms = timed(f, args.iters, args.warm)
        st = summed(td.last_stats())
        full = gather_seq(out, chunks)
        err = None
        if rank == 0:
            err = ((full.float() - whole.float()).abs().max() / whole.float().abs().max()).item()
        extra = dict(err=err and round(err, 6))
        if mode != "ulysses":
            extra.update(hops=world * world, **st)
        record(mode, ms, extra)
        if rank == 0 and not err <= 2e-2:
            print(f"dist_bench: {name} {kind} {mode}: output differs from one GPU by {err:.3g}",
                  file=sys.stderr, flush=True)
            rows[-1]["bad"] = True
        del full
    return rows


def gpu_name():
    return torch.cuda.get_device_name() if DEV == "cuda" else "cpu"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="all", choices=["all", *PRESETS, *SMOKE])
    ap.add_argument("--mask", default="random,window")
    ap.add_argument("--density", type=float, default=0.10)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--cpu", action="store_true", help="gloo and CPU tensors (with --preset tiny)")
    args = ap.parse_args()
    global DEV
    DEV = "cpu" if args.cpu else "cuda"
    for var, want in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")):
        if os.environ.get(var) != want:
            print(f"dist_bench: {var} must be {want} (NVLink multicast stays off)", file=sys.stderr)
            sys.exit(2)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if DEV == "cuda":
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    else:
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    seed = int(os.environ.get("SEED") or 0) or None
    if seed is None:  # fresh, and the same on every rank
        t = torch.tensor([random.randrange(1 << 30)], device=DEV)
        dist.broadcast(t, 0)
        seed = int(t.item())
    if rank == 0:
        print(f"dist_bench: world {world}, seed {seed}, {gpu_name()}", flush=True)
    rows = []
    for name in (PRESETS if args.preset == "all" else [args.preset]):
        for kind in args.mask.split(","):
            rows += [r for r in run_preset(name, kind, args, rank, world, seed) if "preset" in r]
            if DEV == "cuda":
                torch.cuda.empty_cache()
    bad = any(r.get("bad") for r in rows)
    if rank == 0:
        print(f"{'preset':8} {'mask':7} {'mode':9} {'ms':>9} {'speedup':>8} {'skipped':>8} {'err':>9}")
        for r in rows:
            print(f"{r['preset']:8} {r['mask']:7} {r['mode']:9} {r['ms']:9.2f} "
                  f"{r.get('speedup', 1.0):8.2f} {str(r.get('skipped', '-')):>8} {str(r.get('err', '-')):>9}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(seed=seed, world=world, gpu=gpu_name(), rows=rows), f, indent=1)
    dist.destroy_process_group()
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
