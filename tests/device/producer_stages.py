#!/usr/bin/env python3
"""producer_stages.py: where each data-dependent tessera.methods producer
spends its time, stage by stage, on the GPU (issue 16's 5% budget), and
the fused kernels (tessera.produce) against the torch path.

Wan2.1-1.3B 480p by default (grid 21x30x52, 32,760 tokens, 12 heads,
d128, bf16; q and k as methods_bench makes them).  Each stage is timed
alone with CUDA events (median of --reps, the host ahead of the GPU) on
the inputs the previous stage produced, beside its floor: the bytes it
must move at the copy bandwidth measured in the same run (a clone of q),
or the launch floor (an empty kernel's time, measured too) times its
kernels, whichever is larger.

Checks (exit 1 on a failure):
  * float64: the fused VSA and SpargeAttn (CDF and top-k) masks on CUDA
    equal the torch path's on the CPU, block for block, on ragged grids,
    GQA, both layouts;
  * bf16 at the bench shape: the fused pooled means against the torch
    path's (relative difference), and where the fused VSA mask differs from
    the torch path's, the two blocks' probabilities tie within float32
    rounding (|p_a - p_b| <= 1e-5 p_max, from float64 scores of the same
    pooled inputs)."""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from methods_bench import rope_qk, shape_args, timed  # noqa: E402

from tessera import methods as M  # noqa: E402

ROWS = []
FAILS = []


def row(method, stage, ms, floor_ms, note=""):
    ROWS.append((method, stage, ms, floor_ms, note))
    if "DIFFERS" in note:
        FAILS.append(f"{method} {stage}")
    print(f"{method:7} {stage:34} {ms:8.4f} ms  floor {floor_ms:7.4f} ms  "
          f"{ms / floor_ms if floor_ms > 0 else float('nan'):6.1f}x  {note}")
    sys.stdout.flush()


def floors(q, reps):
    """(bytes per ms of a device copy, ms of one tiny kernel)."""
    c = q.clone()
    t_copy = timed(lambda: c.copy_(q), reps)
    bw = 2 * q.numel() * q.element_size() / t_copy
    x = torch.zeros(1, device=q.device)
    t_launch = timed(lambda: [x.add_(1) for _ in range(20)], reps) / 20
    print(f"copy bandwidth {bw / 1e9:.2f} TB/s (clone of q, {2 * q.numel() * q.element_size() / 1e6:.0f} MB "
          f"moved in {t_copy:.4f} ms), one tiny kernel {1e3 * t_launch:.2f} us")
    return bw, t_launch


def fl(nbytes, kernels, bw, t1):
    return max(nbytes / bw, kernels * t1)


def stage(method, name, fn, reps, nbytes, kernels, bw, t1, note=""):
    fn()
    row(method, name, timed(fn, reps), fl(nbytes, kernels, bw, t1), note)


def vsa_stages(q, k, grid, reps, bw, t1):
    b, h, s, d = q.shape
    cube = (4, 4, 4)
    nb = math.prod(-(-g // c) for g, c in zip(grid, cube))
    kk = M.vsa_k(0.875, nb)
    qb = q.numel() * q.element_size()
    pooled = b * h * nb * d * 4
    scores = b * h * nb * nb * 4
    M.FUSED = False
    stage("vsa", "pool q (torch)", lambda: M.pool_tiles(q, grid, cube), reps, qb + pooled, 1, bw, t1)
    stage("vsa", "pool k (torch)", lambda: M.pool_tiles(k, grid, cube), reps, qb + pooled, 1, bw, t1)
    pq, pk = M.pool_tiles(q, grid, cube), M.pool_tiles(k, grid, cube)
    sc = 1 / math.sqrt(d)
    mm = lambda: torch.baddbmm(pq.new_empty(()).expand(1, 1, 1), pq.flatten(0, 1),
                               pk.flatten(0, 1).transpose(-1, -2), beta=0, alpha=sc)
    stage("vsa", "pooled scores (baddbmm)", mm, reps, 2 * pooled + scores, 1, bw, t1)
    s_ = mm()
    stage("vsa", "softmax", lambda: torch.softmax(s_, -1), reps, 2 * scores, 1, bw, t1)
    p = torch.softmax(s_, -1).unflatten(0, (b, h))
    stage("vsa", "top-k (sort + scatter)", lambda: M.topk_rule(p, kk), reps, scores + scores // 4, 2, bw, t1)
    stage("vsa", "total, torch path", lambda: M.vsa(q, k, grid, 0.875), reps, 2 * qb, 3, bw, t1)
    order, _ = M.tile_order(grid, cube, q.device)
    stage("vsa", "cube permutation of one tensor", lambda: order.permute(q), reps, 2 * qb, 1, bw, t1,
          "x4 for q, k, v, out; zero when hoisted to the model's entry")
    M.FUSED = True
    if not M._fused(q):
        print("vsa: no fused kernels in this libtessera")
        return
    stage("vsa", "pool q (fused)", lambda: M.pool_tiles(q, grid, cube), reps, qb + pooled, 1, bw, t1)
    stage("vsa", "pool k (fused)", lambda: M.pool_tiles(k, grid, cube), reps, qb + pooled, 1, bw, t1)
    fq, fk = M.pool_tiles(q, grid, cube), M.pool_tiles(k, grid, cube)
    stage("vsa", "scores+softmax+top-k (fused)", lambda: M._topk_scores(fq, fk, sc, kk), reps,
          2 * pooled + scores // 4, 1, bw, t1)
    stage("vsa", "total, fused", lambda: M.vsa(q, k, grid, 0.875), reps, 2 * qb, 3, bw, t1)
    # q and k already in the cube order (the order hoisted to the model's
    # entry): pooled a run of equal cube sizes at a time, no gather; the
    # same mask as from frame-major q and k.
    oq, ok_ = order.permute(q), order.permute(k)
    same = torch.equal(M.vsa(oq, ok_, grid, 0.875, in_order=True).mask, M.vsa(q, k, grid, 0.875).mask)
    stage("vsa", "total, fused, q k in cube order", lambda: M.vsa(oq, ok_, grid, 0.875, in_order=True), reps,
          2 * qb, 6, bw, t1, "same mask" if same else "MASK DIFFERS")
    want = M._topk_scores(fq, fk, sc, kk)
    for rows in (4, 8, 12, 16, 32):  # the select kernel's rows a CTA (automatic: 32 here, two m16 tiles)
        M._produce.ROWS = rows
        stage("vsa", f"  select with {rows} rows a CTA", lambda: M._topk_scores(fq, fk, sc, kk), reps,
              2 * pooled + scores // 4, 1, bw, t1,
              "same mask" if torch.equal(M._topk_scores(fq, fk, sc, kk), want) else "MASK DIFFERS")
    M._produce.ROWS = 0


def sparge_stages(q, k, grid, reps, bw, t1):
    b, h, s, d = q.shape
    qb = q.numel() * q.element_size()
    M.FUSED = False
    stage("sparge", "pool q 128 (torch)", lambda: M.pool_blocks(q, 128), reps, qb, 1, bw, t1)
    stage("sparge", "pool k 64 (torch)", lambda: M.pool_blocks(k, 64), reps, qb, 1, bw, t1)
    pq, pk = M.pool_blocks(q, 128), M.pool_blocks(k, 64)
    stage("sparge", "self-similarity q (torch)", lambda: M.self_similarity(q, pq, 128), reps, qb, 1, bw, t1)
    stage("sparge", "self-similarity k (torch)", lambda: M.self_similarity(k, pk, 64), reps, qb, 1, bw, t1)
    sc = 1 / math.sqrt(d)
    stage("sparge", "pooled scores + softmax", lambda: M._probs(pq, pk, sc), reps,
          3 * b * h * pq.shape[2] * pk.shape[2] * 4, 2, bw, t1)
    p = M._probs(pq, pk, sc)
    stage("sparge", "CDF rule (sort, cumsum, scatter)", lambda: M.cdf_rule(p, 0.95, 1), reps,
          p.numel() * 5, 4, bw, t1)
    stage("sparge", "total, torch path", lambda: M.sparge(q, k, grid, 0.95), reps, 2 * qb, 3, bw, t1)
    M.FUSED = True
    if not M._fused(q):
        return
    stage("sparge", "pool q 128 + |x|^2 (fused)",
          lambda: M._produce.pool_tiles(q, [1, 1, s], [1, 1, 128], "bhsd", True), reps, qb, 1, bw, t1)
    stage("sparge", "pool k 64 + |x|^2 (fused)",
          lambda: M._produce.pool_tiles(k, [1, 1, s], [1, 1, 64], "bhsd", True), reps, qb, 1, bw, t1)
    fq = M._produce.pool_tiles(q, [1, 1, s], [1, 1, 128], "bhsd", True)[0]
    fk = M._produce.pool_tiles(k, [1, 1, s], [1, 1, 64], "bhsd", True)[0]
    stage("sparge", "scores+softmax+CDF (fused)",
          lambda: M._produce.select_blocks(fq, fk, sc, M._produce.CDF, 0, 0.95, 1), reps,
          b * h * fq.shape[2] * fk.shape[2], 1, bw, t1)
    stage("sparge", "total, fused", lambda: M.sparge(q, k, grid, 0.95), reps, 2 * qb, 3, bw, t1)
    want = M._produce.select_blocks(fq, fk, sc, M._produce.CDF, 0, 0.95, 1)
    for rows in (2, 4, 8, 12, 16):  # automatic: 8 for the CDF rule
        M._produce.ROWS = rows
        stage("sparge", f"  select with {rows} rows a CTA",
              lambda: M._produce.select_blocks(fq, fk, sc, M._produce.CDF, 0, 0.95, 1), reps,
              b * h * fq.shape[2] * fk.shape[2], 1, bw, t1,
              "same mask" if torch.equal(M._produce.select_blocks(fq, fk, sc, M._produce.CDF, 0, 0.95, 1), want)
              else "MASK DIFFERS")
    M._produce.ROWS = 0


def svg_stages(q, k, v, grid, reps, bw, t1):
    b, h, s, d = q.shape
    qb = q.numel() * q.element_size()
    mm = M.svg(q, k, v, grid)  # builds the cache
    blk = M.svg_block(grid[1] * grid[2])
    key = ("svg-rows", tuple(grid), blk, 0.3, True, 64, str(q.device))
    rows, _, _ = M._cache[key]
    planes = M._cache[key + (v.dtype,)]
    sc = 1 / math.sqrt(d)
    qs = (q.index_select(2, rows).float() * sc).to(q.dtype)
    stage("svg", "sampled rows (select + scale)",
          lambda: (q.index_select(2, rows).float() * sc).to(q.dtype), reps, 1, 3, bw, t1)
    stage("svg", "sampled scores (matmul, reads k)", lambda: torch.matmul(qs, k.transpose(-1, -2)), reps,
          qb + b * h * 64 * s * 2, 1, bw, t1)
    sm = torch.matmul(qs, k.transpose(-1, -2))
    w1 = b * h * 64 * s * 2
    stage("svg", "softmax", lambda: torch.softmax(sm, -1), reps, 2 * w1, 1, bw, t1)
    p = torch.softmax(sm, -1)
    stage("svg", "weights x 3 patterns (broadcast)", lambda: p.unsqueeze(2) * planes, reps,
          4 * w1 + 3 * 64 * s * 2, 1, bw, t1)
    wts = p.unsqueeze(2) * planes

    def inplace():
        w = p.new_empty(p.shape[:2] + (3,) + p.shape[2:])
        w[:, :, 0].copy_(p)
        torch.mul(p, planes[1], out=w[:, :, 1])
        torch.mul(p, planes[2], out=w[:, :, 2])
        return w
    stage("svg", "weights x 3 patterns (in place)", inplace, reps, 4 * w1 + 2 * 64 * s * 2, 3, bw, t1,
          "same weights" if torch.equal(inplace(), wts) else "WEIGHTS DIFFER")
    stage("svg", "normalisers (sum)", lambda: wts.sum(-1, keepdim=True, dtype=torch.float32), reps, 3 * w1, 1,
          bw, t1)
    stage("svg", "outputs (matmul, reads v)",
          lambda: torch.matmul(wts.flatten(2, 3), v), reps, qb + 3 * w1, 1, bw, t1)
    stage("svg", "total", lambda: M.svg(q, k, v, grid), reps, 2 * qb, 1, bw, t1,
          f"mask {mm.mask.shape[-1]}^2 blocks of {blk}")


def xattn_stages(q, k, grid, reps, bw, t1):
    b, h, s, d = q.shape
    qb = q.numel() * q.element_size()
    stage("xattn", "reversed query runs (copy of q)", lambda: M._stride_groups(q, 8, True), reps, 2 * qb, 1,
          bw, t1)
    stage("xattn", "total (scores + CDF rule)", lambda: M.xattention(q, k, grid, 0.9, 8), reps, 2 * qb, 1,
          bw, t1, "the scores' matmul: 1/8 of dense QK^T flops")
    sc = M.antidiagonal_scores(q, k, 8)
    stage("xattn", "antidiagonal_scores", lambda: M.antidiagonal_scores(q, k, 8), reps, 2 * qb, 1, bw, t1)
    stage("xattn", "CDF rule on block scores", lambda: M.cdf_rule(sc, 0.9, 1), reps, sc.numel() * 5, 4, bw, t1)


def f64_checks(seed, quick=False):
    """Fused on CUDA float64 == torch path on the CPU, block for block: ragged
    grids, GQA, both layouts, rows of 624, 512, 1024 and 1560 blocks (the
    kernel kinds of branch i16-produce-v2: rows of up to 256, 512, 768, 1024
    blocks in registers, longer ones in shared memory) and odd dims (scalar
    loads)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    bad, n = [], 0
    small = ("vsa", "vsa-0.5", "vsa-in-order", "sparge", "sparge-topk", "sparge-tau0.5")
    for grid, h, d, hk, layout, names in [
            ((5, 7, 9), 4, 32, 2, "bhsd", small), ((3, 30, 52), 6, 64, 3, "bshd", small),
            ((21, 6, 10), 2, 128, 1, "bhsd", small), ((4, 9, 11), 4, 40, 4, "bshd", small),
            ((21, 30, 52), 2, 32, 1, "bhsd", ("vsa", "vsa-in-order", "sparge")),  # 624 and 512 blocks a row
            ((4, 16, 16), 2, 32, 2, "bshd", ("sparge-1024",)),           # 1024
            ((4, 30, 52), 2, 32, 1, "bhsd", ("sparge-1560",)),           # 1560
            ((3, 5, 7), 2, 33, 1, "bshd", ("vsa", "sparge", "sparge-topk"))]:  # odd dim: scalar loads
        if quick and math.prod(grid) > 2000:
            continue
        if d % 2:
            q = torch.randn(2, h, math.prod(grid), d, dtype=torch.float64, generator=gen)
            k = torch.randn(2, h, math.prod(grid), d, dtype=torch.float64, generator=gen)
        else:
            q, k = rope_qk(2, h, grid, d, torch.float64, gen)
        k = k[:, ::h // hk].contiguous()
        if layout == "bshd":
            q, k = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous()
        s = math.prod(grid)
        def in_order(q, k, cube=(4, 4, 4)):
            # fused: q and k in the cube order, pooled a run of sizes at a
            # time; against the CPU's frame-major vsa (want) below
            if not q.is_cuda:
                return M.vsa(q, k, grid, 0.8, layout=layout, cube=cube)
            o = M.tile_order(grid, cube, q.device)[0]
            return M.vsa(o.permute(q, layout), o.permute(k, layout), grid, 0.8, layout=layout, cube=cube,
                         in_order=True)
        cases = {
            "vsa": lambda q, k: M.vsa(q, k, grid, 0.8, layout=layout),
            "vsa-in-order": in_order,
            "vsa-0.5": lambda q, k: M.vsa(q, k, grid, 0.5, layout=layout, cube=(2, 3, 4)),
            "sparge": lambda q, k: M.sparge(q, k, grid, 0.9, block=(32, 16) if s < 30000 else (128, 64),
                                            layout=layout),
            "sparge-topk": lambda q, k: M.sparge(q, k, grid, topk=0.3, block=(24, 40), layout=layout),
            "sparge-tau0.5": lambda q, k: M.sparge(q, k, grid, 0.5, block=(s, 16), layout=layout),
            "sparge-1024": lambda q, k: M.sparge(q, k, grid, 0.9, block=(64, 1), layout=layout),
            "sparge-1560": lambda q, k: M.sparge(q, k, grid, 0.9, topk=0.2, block=(64, 4), layout=layout),
        }
        for name in names:
            fn = cases[name]
            n += 1
            want = fn(q, k).mask
            got = fn(q.cuda(), k.cuda()).mask.cpu()
            if not torch.equal(got, want):
                bad.append(f"{name} grid {grid} d{d} {layout} ({int((got != want).sum())} of {want.numel()} blocks)")
    print(f"float64, fused CUDA against the torch path on the CPU: {n} cases, "
          f"{'all equal' if not bad else 'DIFFERENT: ' + '; '.join(bad)}")
    return 1 if bad else 0


def compile_check(q, k, grid):
    """torch.compile(fullgraph=True) traces the fused producers (the ops'
    fake impls) and the compiled masks equal eager ones."""
    import torch._dynamo
    torch._dynamo.reset()
    ok = True
    for name, fn in (("vsa", lambda q, k: M.vsa(q, k, grid, 0.875).mask),
                     ("sparge", lambda q, k: M.sparge(q, k, grid, 0.95).mask)):
        try:
            got = torch.compile(fn, fullgraph=True, backend="aot_eager")(q, k)
            same = torch.equal(got, fn(q, k))
            print(f"torch.compile(fullgraph=True, aot_eager) {name}: "
                  f"{'masks equal eager' if same else 'MASKS DIFFER'}")
        except Exception as e:  # a graph break or a tracing error
            same = False
            print(f"torch.compile {name}: FAILED ({str(e).splitlines()[0][:200]})")
        ok &= same
    return 0 if ok else 1


def bf16_checks(q, k, grid):
    rc = 0
    M.FUSED = False
    tq, tk = M.pool_tiles(q, grid, (4, 4, 4)), M.pool_tiles(k, grid, (4, 4, 4))
    want = M.vsa(q, k, grid, 0.875).mask
    M.FUSED = True
    fq, fk = M.pool_tiles(q, grid, (4, 4, 4)), M.pool_tiles(k, grid, (4, 4, 4))
    got = M.vsa(q, k, grid, 0.875).mask
    rel = max(((fq - tq).abs().max() / tq.abs().max()).item(), ((fk - tk).abs().max() / tk.abs().max()).item())
    print(f"bf16 pooled means, fused against torch: max relative difference {rel:.1e}")
    rc |= 0 if rel < 1e-5 else 1
    # Differences must be ties within float32 rounding: per differing row,
    # the dropped and kept blocks' float64 probabilities (same pooled input).
    p = torch.softmax(torch.matmul(tq.double(), tk.double().transpose(-1, -2)) / math.sqrt(q.shape[-1]), -1)
    diff = got != want
    nrows = int(diff.any(-1).sum())
    worst = 0.0
    if nrows:
        pm = p.amax(-1, keepdim=True)
        gap = torch.where(diff, p, torch.nan)
        # in a differing row, kept-by-one and kept-by-the-other blocks differ by <= worst
        hi = torch.where(diff, gap, -torch.inf).amax(-1)
        lo = torch.where(diff, gap, torch.inf).amin(-1)
        sel = diff.any(-1)
        worst = ((hi - lo)[sel] / pm[..., 0][sel]).max().item()
    print(f"bf16 VSA masks, fused against torch: {int(diff.sum())} of {diff.numel()} blocks differ in "
          f"{nrows} rows; largest probability gap among them {worst:.1e} of the row's max")
    rc |= 0 if worst <= 1e-5 else 1
    # SpargeAttn's CDF rule: printed, not asserted (a cumulative sum in
    # another order can cross tau at another rank; float64 is exact above)
    M.FUSED = False
    want = M.sparge(q, k, grid, 0.95).mask
    M.FUSED = True
    got = M.sparge(q, k, grid, 0.95).mask
    d = got != want
    print(f"bf16 SpargeAttn masks, fused against torch: {int(d.sum())} of {d.numel()} blocks differ in "
          f"{int(d.any(-1).sum())} of {d.shape[0] * d.shape[1] * d.shape[2]} rows")
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    shape_args(ap)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--methods", default="vsa,sparge,svg,xattn")
    ap.add_argument("--quick", action="store_true",
                    help="only the small float64 checks (for compute-sanitizer)")
    a = ap.parse_args()
    if a.quick:
        M.FUSED = True
        M._produce.ROWS = 3
        rc = f64_checks(a.seed, quick=True)
        M._produce.ROWS = 0
        return rc | f64_checks(a.seed, quick=True)
    grid = tuple(a.grid)
    gen = torch.Generator(device="cuda").manual_seed(a.seed)
    q, k = rope_qk(1, a.heads, grid, a.dim, torch.bfloat16, gen)
    v = torch.randn(q.shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    print(f"producer_stages: {torch.cuda.get_device_name()}, grid {grid} ({math.prod(grid)} tokens), "
          f"{a.heads} heads, d{a.dim}, bf16, median of {a.reps}")
    bw, t1 = floors(q, a.reps)
    rc = 0
    for m in a.methods.split(","):
        if m == "vsa":
            vsa_stages(q, k, grid, a.reps, bw, t1)
        elif m == "sparge":
            sparge_stages(q, k, grid, a.reps, bw, t1)
        elif m == "svg":
            svg_stages(q, k, v, grid, a.reps, bw, t1)
        elif m == "xattn":
            xattn_stages(q, k, grid, a.reps, bw, t1)
    M.FUSED = True
    rc |= f64_checks(a.seed)
    M._produce.ROWS = 3  # a CTA's last rows partial everywhere
    rc |= f64_checks(a.seed + 1)
    M._produce.ROWS = 0
    rc |= bf16_checks(q, k, grid)
    rc |= compile_check(q, k, grid)
    rc |= 1 if FAILS else 0
    print(f"producer_stages: {'ok' if rc == 0 else 'FAILED'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
