#!/usr/bin/env python3
"""methods_bench.py: the cost of each tessera.methods producer against the
attention it prepares, on the GPU (tests/device/run BUILDDIR methods).

Default shape: Wan2.1-1.3B at 480p, 81 frames (latent grid 21x30x52,
32,760 tokens), 12 heads, head dim 128, bf16, batch 1.  q and k carry a 3D
rotary phase on a per-head vector plus noise (attention that decays with
distance, as a DiT's), so the data-dependent masks have realistic density.

For each method it times, with CUDA events (median of --reps calls after a
warm-up that builds the cached geometry and the GPU plan templates):
    producer   the mask from live q, k (tessera.methods.<method>), eager
               (the budget's figure) and as a CUDA graph replay
    permute    q, k, v into the method's order and the output back
    attention  tessera.attention with the CUDA mask and the geometry (GPU
               planning + kernel), on the permuted tensors
and prints producer / attention (the budget is 5%) and permute / attention.
Dense cuDNN SDPA is timed beside them for scale.  The producers: VSA,
STA, SVG, Radial, SpargeAttn and XAttention (stride 8, tau 0.9).
--variants (on by default) then times SpargeAttn's previous
self-similarity beside the current one, and checks that every
data-dependent producer gives on CUDA float64 tensors the mask it gives on
the CPU (where tests/python-methods.sh checks it against the C rules).
VSA and SpargeAttn run on libtessera's fused kernels (tessera.produce) on
CUDA tensors; their torch path is timed beside them in the same run.

It also proves each producer synchronises nothing: an eager call under
torch.cuda.set_sync_debug_mode("error"), and a CUDA-graph capture replayed
on new q, k whose mask must equal an eager call on them.
Exit status 1 when a producer is over budget or a check fails.
--device cpu is a dry run of the script itself (small grids, float32, the
CPU path; wall-clock timing, no graph or sync checks)."""
import argparse
import statistics
import sys
import time

import torch

import tessera
from tessera import methods as M

DEVICE = "cuda"
# Producers with fused kernels (tessera.produce): timed on both paths.
FUSED_METHODS = ("vsa", "sparge")


def rope_qk(b, h, grid, d, dtype, gen):
    t, hh, ww = grid
    n = t * hh * ww
    dev = gen.device
    pos = torch.stack(torch.meshgrid(torch.arange(t, device=dev), torch.arange(hh, device=dev),
                                     torch.arange(ww, device=dev), indexing="ij"), -1)
    pos = pos.reshape(n, 3).float()
    # Wan's split of the head dim over t, h, w; RoPE frequencies per axis.
    split = [d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6)]
    ang = []
    for a, c in enumerate(split):
        om = 10000.0 ** (-torch.arange(c // 2, device=dev).float() * 2 / c)
        ang.append(pos[:, a:a + 1] * om)
    ang = torch.cat(ang, -1)  # [n, d/2]

    def one():
        u = torch.randn(b, h, 1, d // 2, 2, device=dev, generator=gen) * 1.6
        re, im = u[..., 0], u[..., 1]
        c, s = torch.cos(ang), torch.sin(ang)
        x = torch.stack([re * c - im * s, re * s + im * c], -1).flatten(-2)
        return (x + torch.randn(b, h, n, d, device=dev, generator=gen)).to(dtype)
    return one(), one()


def timed(fn, reps):
    """Median milliseconds of fn() over reps calls: on the GPU, CUDA events
    with the host ahead of the GPU; on the CPU (dry run), wall clock."""
    ts = []
    if not torch.cuda.is_available() or DEVICE == "cpu":
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(ts)
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # The GPU sleeps ~5 ms first, so the host enqueues fn() ahead of it
        # (as in a pipeline): the events time the GPU's work, not Python's.
        torch.cuda._sleep(10_000_000)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def checks(make, q, k, v, q2, k2):
    """(no-sync verdict, graph verdict, graph replay ms) of one producer."""
    # No host synchronisation: an eager call that would sync raises here.
    torch.cuda.set_sync_debug_mode("error")
    try:
        make(q, k, v)
        nosync = "no-sync"
    except RuntimeError as e:
        nosync = f"SYNC ({e})"
    finally:
        torch.cuda.set_sync_debug_mode("default")
    # CUDA graph: capture with q, k; replay on q2, k2; compare with eager.
    sq, sk = q.clone(), k.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        make(sq, sk, v)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            gm = make(sq, sk, v)
        sq.copy_(q2)
        sk.copy_(k2)
        g.replay()
        want = make(q2, k2, v)
        ok = torch.equal(gm.mask, want.mask)
        graph = "graph-replay-ok" if ok else "GRAPH MISMATCH"
        ms = timed(g.replay, 10)
    except RuntimeError as e:
        graph, ms = f"GRAPH FAILED ({str(e).splitlines()[0]})", float("nan")
    return nosync, graph, ms


def breakdown(name, what, fn, top):
    """The kernels one call of fn launches and their GPU time (torch.profiler,
    CUPTI), the `top` longest by name: where a producer's time goes."""
    from torch.profiler import ProfilerActivity, profile
    try:
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        rows = []
        for e in prof.key_averages():
            us = getattr(e, "device_time_total", None)
            us = e.cuda_time_total if us is None else us
            if us > 0 and e.key and not e.key.startswith("cuda"):
                rows.append((us, e.count, e.key))
        rows.sort(reverse=True)
        print(f"  {name} {what}: {sum(r[1] for r in rows)} kernels, "
              f"{sum(r[0] for r in rows) / 1e3:.3f} ms of kernel time; longest:")
        for us, n, key in rows[:top]:
            print(f"    {us / 1e3:8.3f} ms  x{n:<3} {key[:100]}")
    except Exception as e:  # the table above stands without it
        print(f"  {name} {what}: no kernel breakdown ({str(e).splitlines()[0] if str(e) else type(e).__name__})")


def cuda_matches_cpu(seed):
    """Each data-dependent producer on CUDA float64 tensors gives the mask it
    gives on the same tensors on the CPU, where tests/python-methods.sh
    checks it against the corpus's C rules: the GPU's kernels (kthvalue,
    baddbmm, the reductions, the sort) do not change a rule.  A small
    ragged grid, GQA for VSA and XAttention.  Returns 1 on a difference."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    grid, h, d = (5, 7, 9), 4, 32
    q, k = rope_qk(2, h, grid, d, torch.float64, gen)
    k2 = k[:, ::2].contiguous()
    v = torch.randn(q.shape, dtype=torch.float64, generator=gen)
    cases = {
        "vsa": lambda q, k, k2, v: M.vsa(q, k2, grid, sparsity=0.8),
        "sparge": lambda q, k, k2, v: M.sparge(q, k, grid, tau=0.9, block=(32, 16)),
        "sparge-topk": lambda q, k, k2, v: M.sparge(q, k, grid, topk=0.3, block=(32, 16)),
        "svg": lambda q, k, k2, v: M.svg(q, k, v, grid, samples=8),
        "xattn": lambda q, k, k2, v: M.xattention(q, k2, grid, tau=0.9, stride=4, block=16, chunk=3),
    }
    rc = 0
    # both CUDA paths: libtessera's fused kernels (VSA, SpargeAttn) and torch
    for fused in ((True, False) if M._fused(q.cuda()) else (False,)):
        M.FUSED = fused
        bad = []
        for name, fn in cases.items():
            want = fn(q, k, k2, v).mask
            got = fn(*(x.cuda() for x in (q, k, k2, v))).mask.cpu()
            if not torch.equal(got, want):
                bad.append(f"{name} ({int((got != want).sum())} blocks)")
        M.FUSED = True
        print(f"CUDA ({'fused kernels' if fused else 'torch path'}) against CPU masks, float64, grid {grid}: "
              f"{'all equal (' + ', '.join(cases) + ')' if not bad else 'DIFFERENT: ' + ', '.join(bad)}")
        rc |= 1 if bad else 0
    return rc


def variants(q, k, reps):
    """SpargeAttn's self-similarity in its previous formulation (each
    block's norm over tokens and channels in one reduction) beside the
    current one (per channel across rows, then over channels), timed on the
    same q, k; they must agree to float32 rounding.  Returns 1 when not."""
    def selfsim_old(x, pooled, block):
        e = M._segsums(x, (2,), (block,), lambda y, red: torch.linalg.vector_norm(
            y, dim=red + (y.dim() - 1,), dtype=torch.float32)).square()
        e = e / M._lengths_as(x.shape[2], block, e.dtype, x.device)
        m2 = torch.linalg.vector_norm(pooled, dim=-1).square()
        return (m2 / e).clamp(max=1.0).nan_to_num(1.0)
    pq, pk = M.pool_blocks(q, 128), M.pool_blocks(k, 64)
    old = lambda: (selfsim_old(q, pq, 128), selfsim_old(k, pk, 64))
    new = lambda: (M.self_similarity(q, pq, 128), M.self_similarity(k, pk, 64))
    old()
    new()
    t_old, t_new = timed(old, reps), timed(new, reps)
    ss = M.self_similarity(q, pq, 128)
    rel = ((selfsim_old(q, pq, 128) - ss).abs().max() / ss.abs().max()).item()
    print(f"sparge self-similarity of q and k: previous {t_old:.3f} ms, current {t_new:.3f} ms "
          f"({t_old / t_new:.2f}x); max relative difference {rel:.1e} (summation order)")
    return 0 if rel < 1e-5 else 1


def shape_args(ap):
    """The problem and repetition options this bench and producer_stages.py
    share: Wan2.1-1.3B 480p by default."""
    ap.add_argument("--grid", type=int, nargs=3, default=[21, 30, 52])
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=20)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    shape_args(ap)
    ap.add_argument("--budget", type=float, default=0.05)
    ap.add_argument("--methods", default="vsa,sta,svg,radial,sparge,xattn")
    ap.add_argument("--variants", type=int, default=1,
                    help="time SpargeAttn's previous self-similarity beside the current one, and "
                         "check that the CUDA path gives the CPU path's masks (0: skip)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--breakdown", type=int, default=8,
                    help="after the table, each producer's and permute's longest N kernels (GPU; 0: none)")
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    cuda = a.device == "cuda"
    dt = torch.bfloat16 if cuda else torch.float32
    grid, h, d = tuple(a.grid), a.heads, a.dim
    n = grid[0] * grid[1] * grid[2]
    gen = torch.Generator(device=a.device).manual_seed(a.seed)
    q, k = rope_qk(1, h, grid, d, dt, gen)
    v = torch.randn(q.shape, device=a.device, dtype=dt, generator=gen)
    q2, k2 = rope_qk(1, h, grid, d, dt, gen)
    print(f"methods_bench: {torch.cuda.get_device_name() if cuda else 'CPU dry run'}, grid "
          f"{grid[0]}x{grid[1]}x{grid[2]} ({n} tokens), {h} heads, d{d}, {dt}, median of {a.reps}")
    producers = {
        "vsa": lambda q, k, v: M.vsa(q, k, grid, sparsity=0.875),
        "sta": lambda q, k, v: M.sta(q, grid, (3, 3, 3)),
        "svg": lambda q, k, v: M.svg(q, k, v, grid, density=0.3, sink=True),
        "radial": lambda q, k, v: M.radial(q, grid, decay=0.2, sink=True),
        "sparge": lambda q, k, v: M.sparge(q, k, grid, tau=0.95),
        "xattn": lambda q, k, v: M.xattention(q, k, grid, tau=0.9, stride=8),
    }
    sdpa = torch.nn.functional.scaled_dot_product_attention
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION if cuda else SDPBackend.MATH]):
        sdpa(q, k, v)
        dense = timed(lambda: sdpa(q, k, v), a.reps)
    print(f"dense cuDNN SDPA: {dense:.3f} ms")
    print(f"{'method':8} {'density':>8} {'blocks':>12} {'producer':>10} {'graph':>9} {'permute':>9} "
          f"{'attention':>10} {'prod/attn':>10} {'perm/attn':>10}  checks")
    rc = 0
    for name in a.methods.split(","):
        make = producers[name]
        mm = make(q, k, v)  # builds the cached geometry
        nosync, graph, t_graph = "", "", float("nan")
        if cuda:
            torch.cuda.synchronize()
            nosync, graph, t_graph = checks(make, q, k, v, q2, k2)
            rc |= 0 if nosync == "no-sync" and graph == "graph-replay-ok" else 1
        o = mm.order
        qp, kp, vp = o.permute(q), o.permute(k), o.permute(v)
        for _ in range(3):  # the GPU templates' regime settles
            out = tessera.attention(qp, kp, vp, mm.mask, block=mm.block)
        if cuda:
            torch.cuda.synchronize()
        t_prod = timed(lambda: make(q, k, v), a.reps)
        t_perm = timed(lambda: (o.permute(q), o.permute(k), o.permute(v), o.unpermute(out)), a.reps)
        t_attn = timed(lambda: tessera.attention(qp, kp, vp, mm.mask, block=mm.block), a.reps)
        ratio = t_prod / t_attn
        if cuda and name in FUSED_METHODS and M._fused(q):
            # the torch path beside the fused kernels, same q, k, same run
            M.FUSED = False
            try:
                make(q, k, v)
                t_old = timed(lambda: make(q, k, v), a.reps)
                ndiff = int((make(q, k, v).mask != mm.mask).sum())
            finally:
                M.FUSED = True
            # bf16 q, k: both paths pool in float32 but sum in different
            # orders, so a row's rule can flip where two blocks (top-k) or a
            # cumulative sum and tau (CDF) are within rounding; the float64
            # check below (--variants) must be exact.
            print(f"{name:8} torch path {t_old:.3f} ms ({100 * t_old / t_attn:.2f}% of attention), fused "
                  f"{t_prod:.3f} ms ({100 * ratio:.2f}%): {t_old / t_prod:.2f}x; masks "
                  f"{'equal' if not ndiff else f'differ in {ndiff} of {mm.mask.numel()} blocks (bf16 rounding)'}")
        over = ratio > a.budget
        rc |= 1 if over else 0
        geom = (f"{len(mm.block[0])} var" if not isinstance(mm.block[0], int)
                else f"{mm.block[0]}x{mm.block[1]}")
        print(f"{name:8} {mm.mask.float().mean().item():8.3f} {geom:>12} {t_prod:9.3f}ms "
              f"{t_graph:8.3f}ms {t_perm:8.3f}ms {t_attn:9.3f}ms {100 * ratio:9.2f}% {100 * t_perm / t_attn:9.2f}%  "
              f"{nosync} {graph}{' OVER BUDGET' if over else ''}")
        sys.stdout.flush()
    if a.variants:
        rc |= variants(q, k, a.reps)
        if cuda:
            rc |= cuda_matches_cpu(a.seed)
    if cuda and a.breakdown > 0:
        print("kernel breakdown (one call each):")
        for name in a.methods.split(","):
            make = producers[name]
            mm = make(q, k, v)
            breakdown(name, "producer", lambda: make(q, k, v), a.breakdown)
            if mm.order.perm is not None:
                o = mm.order
                breakdown(name, "permute q, k, v and back", lambda: (
                    o.permute(q), o.permute(k), o.permute(v), o.unpermute(q)), a.breakdown)
    print(f"methods_bench: budget {100 * a.budget:.0f}% of the attention: "
          f"{'all within' if rc == 0 else 'FAILED (see above)'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
