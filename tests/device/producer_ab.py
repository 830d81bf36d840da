#!/usr/bin/env python3
"""producer_ab.py: VSA's producer, the previous kernels against the current
ones in one process, beside the attention it prepares (issue 16: a producer
may cost at most 5% of it), SVG's eager passes against its compiled one,
XAttention's floor, and the checks of the current kernels' new paths on the
GPU (notes/producers-2026-12-02e.md).

Previous ("old"): q and k pooled apart by a CTA a tile, in the cube order
one launch a run of cube sizes (8 at Wan 480p), and the select's top k by a
30-pass bitwise search (tessera.methods.PAIR = False,
tessera.produce.KERNEL = 1, POOL_KERNEL = 1).  Current ("new"): q and k in
one launch by a warp a tile (tessera::pool_pair, the runs of cube sizes in
one launch too) and the top k by an 8-bit radix select after a branch-free
scores loop (PAIR = True, KERNEL = 0, POOL_KERNEL = 0, the defaults).

Timing (Wan2.1-1.3B 480p by default: grid 21x30x52, 12 heads, d128, bf16,
q and k as methods_bench makes them): CUDA events, median of --reps calls,
the host ahead of the GPU (methods_bench.timed), old and new alternated
twice in the same process, for the two orders a pipeline uses:
  gathered  q, k, v frame-major bhsd, pooled as they lie then taken in the
            cube order (and the attention on the permuted tensors);
  hoisted   q, k, v already in the cube order, in the processor's layout
            bshd (tessera.diffusers.apply(hoist=True)).
Attention: tessera.attention with the produced mask and geometry.

Checks (exit 1 on a failure):
  * bf16 at the bench shape, both orders: new pooled means within 1e-6
    (relative) of the old ones (sums in another order); new masks differ
    from old ones only at float32 ties (float64 probability gap <= 1e-5 of
    the row's max); the new select on the old pooled means gives the old
    select's mask; every rows setting and select kernel the same mask;
  * the new producer synchronises nothing and a CUDA graph of it replayed
    on new q, k gives the eager mask (VSA and SVG);
  * the radix select against the bitwise search and (float64) the CPU's
    torch rule: ties (keys with 3 distinct rows, all-equal rows), scores
    that underflow to 0, k from 1 to nk, nk from 1 to 1024 (every
    register kernel and ragged warps) and 1100 (the shared-memory rule),
    GQA, rows a CTA 3, 16, 32 (two m16 tiles) and automatic, 37 query rows;
    float32 against the float64 rule at ties only;
  * pool_pair against two pool_tiles and, in the cube order (runs), against
    the frame-major pooling taken in that order, bit for bit; against the
    previous kernel within rounding; float32, fp16, bf16, float64, both
    layouts, GQA, ragged grids, with and without the squared norms;
    float64 against a CPU float64 mean;
  * SVG's torch path: its compiled pass gives the eager head types and
    masks (the kernels' checks are svg_profile.py's).
--quick: the select and pool checks on small shapes (compute-sanitizer);
--only select|pool with it; --ncu: one call of each kernel (for ncu)."""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from methods_bench import checks as sync_graph_checks  # noqa: E402
from methods_bench import rope_qk, timed  # noqa: E402

import tessera  # noqa: E402
from tessera import methods as M  # noqa: E402

P = M._produce
FAILS = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    sys.stdout.flush()
    if not ok:
        FAILS.append(name)


def mode(new):
    M.PAIR = new
    P.KERNEL = 0 if new else 1
    P.POOL_KERNEL = 0 if new else 1


def prob_gap(p, m_a, m_b):
    """The largest float64 probability gap among a row's differing blocks
    over the row's max (0 where the masks agree)."""
    diff = m_a != m_b
    sel = diff.any(-1)
    if not bool(sel.any()):
        return 0.0
    hi = torch.where(diff, p, -torch.inf).amax(-1)
    lo = torch.where(diff, p, torch.inf).amin(-1)
    return ((hi - lo)[sel] / p.amax(-1)[sel]).max().item()


def tie_gap(pq, pk, m_a, m_b):
    """(blocks that differ, rows, prob_gap on the float64 probabilities):
    masks from pooled inputs within float32 rounding may differ only at
    ties."""
    diff = m_a != m_b
    nrows = int(diff.any(-1).sum())
    if not nrows:
        return 0, 0, 0.0
    p = torch.softmax(torch.matmul(pq.double(), M._kv_heads(pk, pq.shape[1]).double().transpose(-1, -2))
                      / math.sqrt(pq.shape[-1]), -1)
    return int(diff.sum()), nrows, prob_gap(p, m_a, m_b)


def old_pool(x, y, grid, layout, in_order):
    o, sizes = M.tile_order(grid, (4, 4, 4), x.device)
    if in_order:
        return (M._pool_in_order(x, grid, (4, 4, 4), o, sizes, layout),
                M._pool_in_order(y, grid, (4, 4, 4), o, sizes, layout))
    return (M.pool_tiles(x, grid, (4, 4, 4), layout).index_select(2, o.tiles),
            M.pool_tiles(y, grid, (4, 4, 4), layout).index_select(2, o.tiles))


def new_pool(x, y, grid, layout, in_order):
    o, sizes = M.tile_order(grid, (4, 4, 4), x.device)
    if in_order:
        return P.pool_pair(x, y, [], [], M._runs(sizes), layout, False)[:2]
    return P.pool_pair(x, y, list(grid), [4, 4, 4], [], layout, False, o.tiles32)[:2]


def bench(q, k, v, grid, reps, sparsity):
    """q, k, v frame-major bhsd (bf16)."""
    d = q.shape[-1]
    o, sizes = M.tile_order(grid, (4, 4, 4), q.device)
    kk = M.vsa_k(sparsity, len(sizes))
    sc = 1 / math.sqrt(d)
    summary = []
    for label, layout, in_order in (("gathered", "bhsd", False), ("hoisted", "bshd", True)):
        if in_order:
            x = [o.permute(t).transpose(1, 2).contiguous() for t in (q, k, v)]  # [B, S, H, D] in cube order
        else:
            x = [q, k, v]
        qx, kx, vx = x
        lay = layout
        prod = lambda: M.vsa(qx, kx, grid, sparsity, layout=lay, in_order=in_order)  # noqa: E731
        mode(False)
        m_old = prod()
        pq_old, pk_old = old_pool(qx, kx, grid, lay, in_order)
        mode(True)
        m_new = prod()
        pq_new, pk_new = new_pool(qx, kx, grid, lay, in_order)
        rel = max(((pq_new - pq_old).abs().max() / pq_old.abs().max()).item(),
                  ((pk_new - pk_old).abs().max() / pk_old.abs().max()).item())
        check(f"{label}: pooled q and k, new (a warp a tile) against old (a CTA a tile)", rel < 1e-6,
              f"max relative difference {rel:.1e}")
        nd, nr, gap = tie_gap(pq_old, pk_old, m_old.mask, m_new.mask)
        check(f"{label}: VSA masks, new against old: differences only at float32 ties", gap <= 1e-5,
              f"{nd} of {m_new.mask.numel()} blocks differ in {nr} rows, largest gap {gap:.1e} of the row's max")
        # the new select on the old pooled means: the same mask as the old select
        P.KERNEL = 1
        want_old = P.select_blocks(pq_old, pk_old, sc, P.TOPK, kk, 0.0, 0)
        P.KERNEL = 0
        check(f"{label}: new select on the old pooled inputs equals the old select",
              torch.equal(P.select_blocks(pq_old, pk_old, sc, P.TOPK, kk, 0.0, 0), want_old))
        # attention on the permuted tensors (gathered) or as they lie (hoisted)
        if in_order:
            aq, ak, av = qx, kx, vx
        else:
            aq, ak, av = o.permute(q), o.permute(k), o.permute(v)
        attn = lambda: tessera.attention(aq, ak, av, m_new.mask, block=m_new.block, layout=lay)  # noqa: E731
        attn()
        t = {}
        for rnd in range(2):  # old and new alternated, twice
            for name, new in (("old", False), ("new", True)):
                mode(new)
                t.setdefault(("total", name), []).append(timed(prod, reps))
                t.setdefault(("pool", name), []).append(
                    timed(lambda: (new_pool if new else old_pool)(qx, kx, grid, lay, in_order), reps))
                t.setdefault(("select", name), []).append(
                    timed(lambda: P.select_blocks(pq_new, pk_new, sc, P.TOPK, kk, 0.0, 0), reps))
            t.setdefault(("attn", ""), []).append(timed(attn, reps))
        mode(True)
        med = {key: sorted(val)[len(val) // 2] for key, val in t.items()}
        ta = med[("attn", "")]
        print(f"{label} ({layout}{', cube order' if in_order else ', frame-major'}): attention {ta:.4f} ms "
              f"(tessera.attention, density {m_new.mask.float().mean().item():.3f})")
        for st in ("pool", "select", "total"):
            a, b = med[(st, "old")], med[(st, "new")]
            print(f"  {st:7} old {a:.4f} ms ({100 * a / ta:5.2f}%)  new {b:.4f} ms ({100 * b / ta:5.2f}%)  "
                  f"{a / b:.2f}x")
        summary.append((label, med[("total", "old")], med[("total", "new")], ta))
        # rows a CTA for the radix select (automatic 32 where two m16 tiles fit)
        want = P.select_blocks(pq_new, pk_new, sc, P.TOPK, kk, 0.0, 0)
        for kern in (0, 1, 2):
            P.KERNEL = kern
            line = []
            for rows in (8, 12, 16, 24, 32) if kern == 0 else (8, 12, 16) if kern == 1 else (16,):
                P.ROWS = rows
                ms = timed(lambda: P.select_blocks(pq_new, pk_new, sc, P.TOPK, kk, 0.0, 0), reps)
                same = torch.equal(P.select_blocks(pq_new, pk_new, sc, P.TOPK, kk, 0.0, 0), want)
                check(f"{label}: select kernel {kern} rows {rows} gives the automatic mask", same)
                line.append(f"{rows} rows {ms:.4f}")
            print(f"  select kernel {kern} ({['radix', 'bitwise', 'radix, k transposed (in the time)'][kern]}): "
                  + ", ".join(line) + " ms")
        P.ROWS, P.KERNEL = 0, 0
        # k = 0 skips the search (every block off): the scores, the softmax's
        # max and exp and the writes; the rule's search is the rest
        ms0 = timed(lambda: P.select_blocks(pq_new, pk_new, sc, P.TOPK, 0, 0.0, 0), reps)
        print(f"  select with k = 0 (no search: scores, softmax, writes): {ms0:.4f} ms")
        # no sync, graph replay
        gen = torch.Generator(device="cuda").manual_seed(99)
        q2, k2 = rope_qk(q.shape[0], q.shape[1], grid, d, q.dtype, gen)
        if in_order:
            q2, k2 = (o.permute(t).transpose(1, 2).contiguous() for t in (q2, k2))
        nosync, graph, gms = sync_graph_checks(
            lambda a, b, c: M.vsa(a, b, grid, sparsity, layout=lay, in_order=in_order), qx, kx, vx, q2, k2)
        check(f"{label}: new producer synchronises nothing", nosync == "no-sync", nosync)
        check(f"{label}: new producer in a CUDA graph, replayed on new q, k, gives the eager mask",
              graph == "graph-replay-ok", f"{graph}, replay {gms:.4f} ms")
    return summary


def svg_attention_ms(m, q, k, v, reps):
    """tessera.attention's time with a produced SVG mask, on q, k, v in its
    per-head order."""
    o = m.order
    qp, kp, vp = o.permute(q), o.permute(k), o.permute(v)
    attn = lambda: tessera.attention(qp, kp, vp, m.mask, block=m.block)  # noqa: E731
    attn()
    return timed(attn, reps)


def svg_graph_checks(q, k, v, grid, label):
    """methods.svg synchronises nothing, and a CUDA graph of it replayed on
    new q, k gives the eager mask (whichever path the flags pick)."""
    gen = torch.Generator(device="cuda").manual_seed(98)
    q2, k2 = rope_qk(q.shape[0], q.shape[1], grid, q.shape[-1], q.dtype, gen)
    nosync, graph, gms = sync_graph_checks(lambda a_, b_, c_: M.svg(a_, b_, c_, grid), q, k, v, q2, k2)
    check(f"{label}: synchronises nothing", nosync == "no-sync", nosync)
    check(f"{label}: a CUDA graph replayed on new q, k gives the eager mask", graph == "graph-replay-ok",
          f"{graph}, replay {gms:.4f} ms")


def svg_bench(q, k, v, grid, reps):
    """SVG's torch path (methods.SVG_KERNEL = False; the kernels are
    svg_profile.py's): the producer with its softmax, weightings and
    normalisers eager (methods.SVG_FUSED = False: a softmax, a copy, two
    products and a sum) against one torch.compile'd function (SVG_FUSED =
    True), beside the attention it prepares; the heads' types (spatial or
    temporal) must be the same.  Then XAttention's producer beside its
    attention and its antidiagonal scores' matmul alone (its floor)."""
    M.SVG_KERNEL = False
    M.SVG_FUSED = False
    old = M.svg(q, k, v, grid)
    M.SVG_FUSED = True
    new = M.svg(q, k, v, grid)
    same = torch.equal(old.info["temporal"], new.info["temporal"]) and torch.equal(old.mask, new.mask)
    check("svg: one compiled pass gives the eager heads' types and masks", same,
          f"temporal heads {int(new.info['temporal'].sum())} of {new.info['temporal'].numel()}")
    t = {}
    for _ in range(2):
        for name, fused in (("old", False), ("new", True)):
            M.SVG_FUSED = fused
            t.setdefault(name, []).append(timed(lambda: M.svg(q, k, v, grid), reps))
    M.SVG_FUSED = True
    ta = svg_attention_ms(new, q, k, v, reps)
    a, b = sorted(t["old"])[1], sorted(t["new"])[1]
    print(f"svg: attention {ta:.4f} ms (density {new.mask.float().mean().item():.3f}); producer old {a:.4f} ms "
          f"({100 * a / ta:.2f}%), new {b:.4f} ms ({100 * b / ta:.2f}%), {a / b:.2f}x")
    svg_graph_checks(q, k, v, grid, "svg (torch path, compiled)")
    M.SVG_KERNEL = True
    # XAttention: where its floor is
    mx = M.xattention(q, k, grid, 0.9, 8)
    attn = lambda: tessera.attention(q, k, v, mx.mask, block=mx.block)  # noqa: E731
    attn()
    ta = timed(attn, reps)
    tp = timed(lambda: M.xattention(q, k, grid, 0.9, 8), reps)
    # the antidiagonal scores' matmul alone: q's and k's stride groups, bf16
    qg, kg = M._stride_groups(q, 8, True), M._stride_groups(k, 8, False)
    tm = timed(lambda: torch.matmul(qg, kg.transpose(-1, -2)), reps)
    print(f"xattn: attention {ta:.4f} ms (density {mx.mask.float().mean().item():.3f}); producer {tp:.4f} ms "
          f"({100 * tp / ta:.2f}%); its scores' matmul alone {tm:.4f} ms ({100 * tm / ta:.2f}%)")


def select_cases(seed, quick=False):
    """Radix select (kernel 0) against the bitwise search (kernel 1), float32
    also against the radix select on k transposed (kernel 2) and against the
    CPU's float64 rule (its scores on the tensor cores, d % 16 == 0, or by FMA
    chains, d = 24: differences only at ties, float64 probability gap <= 1e-5
    of the row's max), and float64 against the CPU torch rule exactly."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    n = bad = 0
    worst = 0.0
    nks = (33, 624, 1100) if quick else (1, 5, 31, 33, 200, 256, 257, 300, 511, 624, 700, 1000, 1024, 1100)
    for nk, kind, d in [(nk, kind, d)
                        for nk in nks
                        for kind in (("random", "ties") if quick else ("random", "ties", "equal", "underflow"))
                        for d in ((16,) if quick or kind in ("equal", "underflow") else (16, 24))]:
        b, h, hk, nq = 2, 4, 2, 37  # 32 rows a CTA: a full CTA and one of 5 rows
        pq = torch.randn(b, h, nq, d, dtype=torch.float64, generator=gen)
        if kind == "random":
            pk = torch.randn(b, hk, nk, d, dtype=torch.float64, generator=gen)
        elif kind == "ties":  # 3 distinct key rows: 3 distinct scores a row
            base = torch.randint(-2, 3, (b, hk, 3, d), generator=gen).double()
            pk = base[:, :, torch.randint(0, 3, (nk,), generator=gen)]
            pq = torch.randint(-2, 3, pq.shape, generator=gen).double()
        elif kind == "equal":  # every key alike: every probability 1
            pk = torch.randn(b, hk, 1, d, dtype=torch.float64, generator=gen).expand(b, hk, nk, d)
        else:  # most probabilities underflow to 0: ties at key 0
            pk = torch.randn(b, hk, nk, d, dtype=torch.float64, generator=gen)
        pk = pk.contiguous()
        scale = 1e4 if kind == "underflow" else 0.25
        for k in sorted({1, max(1, nk // 8), max(1, nk // 2), max(1, nk - 1), nk}):
            for rows in (0, 3, 16, 32):
                P.ROWS = rows
                probs = M._probs(pq, pk, scale)
                want = M.topk_rule(probs, k)  # the CPU's rule, float64
                for dt in (torch.float64, torch.float32):
                    cq, ck = pq.to(dt).cuda(), pk.to(dt).cuda()
                    P.KERNEL = 0
                    g0 = P.select_blocks(cq, ck, scale, P.TOPK, k, 0.0, 0).cpu()
                    P.KERNEL = 1
                    g1 = P.select_blocks(cq, ck, scale, P.TOPK, k, 0.0, 0).cpu()
                    n += 1
                    ok = torch.equal(g0, g1) and (dt == torch.float32 or torch.equal(g0, want))
                    if dt == torch.float32:
                        gap = prob_gap(probs, g0, want)
                        worst = max(worst, gap)
                        ok = ok and gap <= 1e-5
                    # k transposed (nk <= 1024): the same scores, the same mask
                    if dt == torch.float32 and d % 16 == 0 and nk <= 1024:
                        P.KERNEL = 2
                        ok = ok and torch.equal(P.select_blocks(cq, ck, scale, P.TOPK, k, 0.0, 0).cpu(), g0)
                    ok = ok and bool((g0.sum(-1) == min(k, nk)).all())
                    if not ok:
                        bad += 1
                        if bad <= 10:
                            print(f"  select {kind} nk {nk} d {d} k {k} rows {rows} {dt}: radix vs bitwise "
                                  f"{int((g0 != g1).sum())} differ, vs CPU {int((g0 != want).sum())} (gap "
                                  f"{prob_gap(probs, g0, want):.1e})")
    P.ROWS, P.KERNEL = 0, 0
    check(f"radix select against the bitwise search, float64 against the CPU rule, float32 against it at "
          f"ties only: {n} cases", bad == 0, f"{bad} differ; float32's largest gap {worst:.1e} of the row's max")


def pool_cases(seed, quick=False):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    n = bad = 0
    for grid, tile in (((5, 7, 9), (4, 4, 4)),) if quick else (
            ((5, 7, 9), (4, 4, 4)), ((3, 6, 10), (2, 3, 4)), ((21, 30, 52), (4, 4, 4)), ((4, 9, 11), (1, 2, 4))):
        s = math.prod(grid)
        o, sizes = M.tile_order(grid, tile, "cuda")
        runs = M._runs(sizes)
        for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            for layout in ("bhsd", "bshd"):
                for h, hk, d in ((4, 2, 32), (2, 2, 40), (3, 1, 33)):
                    if s > 5000 and (dt != torch.bfloat16 or d != 32):
                        continue
                    q = torch.randn(2, h, s, d, generator=gen).to(dt).cuda()
                    k = torch.randn(2, hk, s, d, generator=gen).to(dt).cuda()
                    qx, kx = (q, k) if layout == "bhsd" else (q.transpose(1, 2).contiguous(),
                                                              k.transpose(1, 2).contiguous())
                    for sq in (False, True):
                        n += 1
                        a = P.pool_pair(qx, kx, list(grid), list(tile), [], layout, sq)
                        wq = P.pool_tiles(qx, list(grid), list(tile), layout, sq)
                        wk = P.pool_tiles(kx, list(grid), list(tile), layout, sq)
                        ok = all(torch.equal(x, y) for x, y in zip(a, (wq[0], wk[0], wq[1], wk[1])))
                        # the previous kernel (a CTA a tile): the same means within rounding
                        P.POOL_KERNEL = 1
                        c = P.pool_pair(qx, kx, list(grid), list(tile), [], layout, sq)
                        P.POOL_KERNEL = 0
                        # Two float32 (float64) recursive sums of the same n terms in other
                        # orders differ by at most 2 n u sum|t| (Higham, Accuracy and Stability,
                        # 4.2), divided by the tile's tokens: for the means n = tokens and
                        # sum|t| / tokens <= max |x|; for the mean squared norms n = tokens x
                        # channels and sum|t| / tokens = y itself (positive terms).  (1e-6
                        # relative, the bound before, is under that for 2,560-term squares:
                        # round 2 on the H200 failed one bf16 d40 squares case.)
                        u = 2.0 ** (-53 if dt == torch.float64 else -24)
                        tok = math.prod(tile)
                        xmax = max(qx.abs().max().item(), kx.abs().max().item())
                        ok = ok and all((x - y).abs().max().item() <=
                                        2 * u * (tok * xmax if i < 2 else tok * d * y.abs().max().item()) * 1.0001
                                        for i, (x, y) in enumerate(zip(a, c)) if y.numel())
                        # in the cube order, as runs of tiles
                        oq, ok_ = (o.permute(t) for t in (q, k))
                        if layout == "bshd":
                            oq, ok_ = oq.transpose(1, 2).contiguous(), ok_.transpose(1, 2).contiguous()
                        r = P.pool_pair(oq, ok_, [], [], runs, layout, sq)
                        ok = ok and all(torch.equal(x, y.index_select(2, o.tiles) if y.shape[2] else y)
                                        for x, y in zip(r, (wq[0], wk[0], wq[1], wk[1])))
                        # frame-major, written straight in the cube order (order): both kernels
                        for pk_, ref in ((0, a), (1, c)):
                            P.POOL_KERNEL = pk_
                            r = P.pool_pair(qx, kx, list(grid), list(tile), [], layout, sq, o.tiles32)
                            P.POOL_KERNEL = 0
                            ok = ok and all(torch.equal(x, y.index_select(2, o.tiles) if y.shape[2] else y)
                                            for x, y in zip(r, ref))
                        if dt == torch.float64:
                            ref = M.pool_tiles(q.cpu(), grid, tile)  # the torch path on the CPU
                            ok = ok and (a[0].cpu() - ref).abs().max().item() < 1e-12
                        if not ok:
                            bad += 1
                            print(f"  pool_pair {grid}/{tile} {dt} {layout} h{h}/{hk} d{d} sq {sq}: DIFFERS")
    check(f"pool_pair against two pool_tiles, in the cube order (runs) and written in it (order), bit for "
          f"bit, and against the previous kernel within rounding: {n} cases",
          bad == 0, f"{bad} differ")
    # an order index outside the grid's tiles pools nothing: NaN means, the
    # other tiles as before (the library cannot read the device's order)
    grid, tile = (5, 7, 9), (4, 4, 4)
    o, _ = M.tile_order(grid, tile, "cuda")
    q = torch.randn(1, 2, math.prod(grid), 32, generator=gen).cuda()
    bad_order = o.tiles32.clone()
    bad_order[1], bad_order[-1] = -1, bad_order.numel()
    for pk_ in (0, 1):  # each kernel against itself (their sums' orders differ)
        P.POOL_KERNEL = pk_
        good = P.pool_pair(q, q, list(grid), list(tile), [], "bhsd", True, o.tiles32)
        r = P.pool_pair(q, q, list(grid), list(tile), [], "bhsd", True, bad_order)
        P.POOL_KERNEL = 0
        keep = torch.ones(bad_order.numel(), dtype=torch.bool, device="cuda")
        keep[1] = keep[-1] = False
        check(f"pool_pair with order indices -1 and {bad_order.numel()} (kernel {pk_}): NaN means there, the "
              f"rest unchanged",
              all(bool(x[:, :, ~keep].isnan().all()) and torch.equal(x[:, :, keep], y[:, :, keep])
                  for x, y in zip(r, good)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grid", type=int, nargs=3, default=[21, 30, 52])
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sparsity", type=float, default=0.875)
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="a few small checks, no timing (for compute-sanitizer)")
    ap.add_argument("--only", choices=("select", "pool"), help="with --quick: only these checks")
    a = ap.parse_args()
    grid = tuple(a.grid)
    gen = torch.Generator(device="cuda").manual_seed(a.seed)
    if a.quick:
        grid, a.heads = (5, 7, 9), 2
    q, k = rope_qk(1, a.heads, grid, a.dim, torch.bfloat16, gen)
    v = torch.randn(q.shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    if a.ncu:
        o, sizes = M.tile_order(grid, (4, 4, 4), q.device)
        pq, pk = new_pool(q, k, grid, "bhsd", False)
        for kern in (1, 0, 2):
            P.KERNEL = kern
            P.select_blocks(pq, pk, 1 / math.sqrt(a.dim), P.TOPK, M.vsa_k(a.sparsity, len(sizes)), 0.0, 0)
        oq, ok_ = (o.permute(t).transpose(1, 2).contiguous() for t in (q, k))
        P.KERNEL = 0
        new_pool(oq, ok_, grid, "bshd", True)
        torch.cuda.synchronize()
        return 0
    print(f"producer_ab: {torch.cuda.get_device_name()}, grid {grid} ({math.prod(grid)} tokens), {a.heads} heads, "
          f"d{a.dim}, bf16, VSA sparsity {a.sparsity}, median of {a.reps} (x2 rounds)")
    summary = [] if a.quick else bench(q, k, v, grid, a.reps, a.sparsity)
    if a.only != "pool":
        select_cases(a.seed, a.quick)
    if a.only != "select":
        pool_cases(a.seed, a.quick)
    for label, old, new, ta in summary:
        print(f"SUMMARY VSA {label}: producer old {old:.4f} ms ({100 * old / ta:.2f}%), new {new:.4f} ms "
              f"({100 * new / ta:.2f}%) of attention {ta:.4f} ms; {'within' if new <= 0.05 * ta else 'OVER'} "
              f"the 5% budget")
    if not a.quick:  # last: its torch.compile may take a while
        try:
            svg_bench(q, k, v, grid, a.reps)
        except Exception as e:
            check("svg bench ran", False, str(e).splitlines()[0][:200])
    print(f"producer_ab: {'ok' if not FAILS else 'FAILED: ' + '; '.join(FAILS)}")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
