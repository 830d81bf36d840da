"""python_methods.py: tessera.methods against the corpus generator's rules
(run by tests/python-methods.sh; TSR_METHODS_RULE names tests/methods_rule,
the corpus's C rules as a command).

Fresh random inputs every run (the seed is printed; SEED=N repeats one):
grids that do not divide into the method's cubes or tiles, random heads,
batch and parameters.  Each producer's mask is compared block for block
with the C rule fed the same pooled inputs (the producer's own pooling, in
float64, written to .npy); the pooling, the token orders and the
self-similarity are checked against float64 brute force over the corpus's
own layouts (its perm and block starts), XAttention's antidiagonal block
scores against float64 brute force over the token-level score matrix; ties
in the rules' scores go to the lower block index in both.  Each producer runs end to end through
tessera.attention's CPU path, and traces under torch.compile(fullgraph=True)
and on meta tensors (nothing reads a tensor's value on the host).  Everything
runs on CPU tensors."""
import math
import os
import random
import subprocess
import sys

import numpy as np
import torch

import tessera
from tessera import methods as M

RULE = os.environ["TSR_METHODS_RULE"]
TMP = os.environ["TSR_METHODS_TMP"]
seed = int(os.environ.get("SEED") or random.randrange(1 << 30))
print("python-methods: seed", seed)
rng = random.Random(seed)
torch.manual_seed(seed)
checks = 0


def c_rule(*args):
    """Runs methods_rule; .npy paths for array arguments (written here)."""
    argv, n = [RULE], 0
    for a in args:
        if isinstance(a, (np.ndarray, torch.Tensor)):
            n += 1
            p = os.path.join(TMP, f"in{n}.npy")
            np.save(p, np.ascontiguousarray(np.asarray(a)))
            argv.append(p)
        else:
            argv.append(str(a))
    return argv


def run_rule(*args, outs=1):
    argv = c_rule(*args)
    paths = [os.path.join(TMP, f"out{i}.npy") for i in range(outs)]
    subprocess.run(argv + paths, check=True)
    res = [np.load(p) for p in paths]
    return res[0] if outs == 1 else res


def same(name, got, want):
    global checks
    got = np.asarray(got.cpu() if isinstance(got, torch.Tensor) else got).astype(np.int64)
    want = np.asarray(want).astype(np.int64)
    if got.shape != want.shape or not np.array_equal(got, want):
        bad = np.argwhere(got != want)[:5] if got.shape == want.shape else "shape"
        sys.exit(f"FAIL {name}: {got.shape} vs {want.shape}, first differences {bad} (seed {seed})")
    checks += 1


def grid_ragged(tile):
    """A grid of 2-3 tiles a side that does not divide into tile (ragged)."""
    g = [rng.randint(1, 2) * t + rng.randint(1, t - 1) if t > 1 else rng.randint(2, 5) for t in tile]
    return tuple(g)


# ---- token orders and pooling ------------------------------------------------

for tile in ((4, 4, 4), (6, 8, 8), (rng.randint(1, 5), rng.randint(2, 5), rng.randint(2, 5))):
    grid = grid_ragged(tile)
    perm_c, sizes_c = run_rule("tiles", *grid, *tile, outs=2)
    order, sizes = M.tile_order(grid, tile)
    same(f"tile order {grid}/{tile}", order.perm, perm_c)
    same(f"tile sizes {grid}/{tile}", sizes, sizes_c)
    same(f"tile inverse {grid}/{tile}", order.perm[order.pos], np.arange(perm_c.size))
    b, h, d = rng.randint(1, 2), rng.randint(1, 3), rng.choice([8, 16])
    x = torch.randn(b, h, perm_c.size, d, dtype=torch.float64)
    for layout in ("bhsd", "bshd"):
        xl = x if layout == "bhsd" else x.transpose(1, 2).contiguous()
        y = order.permute(xl, layout)
        same(f"permute {layout}", torch.equal(M._bhsd(y, layout), x[:, :, torch.from_numpy(perm_c)]), True)
        same(f"unpermute {layout}", torch.equal(order.unpermute(y, layout), xl), True)
        # pool_tiles is in raster tile order; order.tiles takes it in the tile order.
        pooled = M.pool_tiles(xl, grid, tile, layout).index_select(2, order.tiles)
        starts = np.concatenate([[0], np.cumsum(sizes_c)])
        ref = torch.stack([x[:, :, torch.from_numpy(perm_c[starts[i]:starts[i + 1]])].mean(2)
                           for i in range(len(sizes_c))], 2)
        same(f"pool_tiles {layout} {grid}/{tile}", (pooled - ref).abs().max() < 1e-12, True)
    same(f"tile sizes descend {grid}/{tile}", sorted(sizes_c, reverse=True), list(sizes_c))


# The gathers move 8-byte words where the rows allow (bf16, fp16, fp32 rows
# of an even byte count), the elements themselves elsewhere: every dtype,
# odd rows, offset and strided views, one order for all heads and one per head.
order, _ = M.tile_order(grid, tile)
idx = torch.from_numpy(perm_c)
per_head = torch.stack([torch.randperm(perm_c.size) for _ in range(3)])[None]  # [1, 3, S]
for dt in (torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int32):
    for d in (8, 3, 12):
        base = (torch.randn(2, 3, perm_c.size, d + 4) * 100).to(dt)
        for view in ("contiguous", "offset", "bshd"):
            x = base[..., :d].contiguous() if view == "contiguous" else base[..., 1:d + 1]
            layout = "bshd" if view == "bshd" else "bhsd"
            if layout == "bshd":
                x = base[..., :d].transpose(1, 2).contiguous().transpose(1, 2)  # [B,H,S,D] view of bshd
            xl = x if layout == "bhsd" else x.transpose(1, 2)
            y = order.permute(xl, layout)
            same(f"permute {dt} d{d} {view}", torch.equal(M._bhsd(y, layout), x[:, :, idx]), True)
            same(f"unpermute {dt} d{d} {view}", torch.equal(order.unpermute(y, layout), xl), True)
            ph = M.TokenOrder(per_head, torch.argsort(per_head, -1))
            want = torch.stack([x[:, i, per_head[0, i]] for i in range(3)], 1)
            y = ph.permute(xl, layout)
            same(f"per-head permute {dt} d{d} {view}", torch.equal(M._bhsd(y, layout), want), True)
            same(f"per-head unpermute {dt} d{d} {view}", torch.equal(ph.unpermute(y, layout), xl), True)

# SVG's (spatial, frame) order.
grid = (rng.randint(2, 9), rng.randint(1, 7), rng.randint(1, 7))
perm_c = run_rule("spatial", *grid)
_, _, perm, pos = M._svg_static(grid, 5, 0.3, True, "cpu")
same("svg spatial order", perm, perm_c)
same("svg spatial inverse", perm[pos], np.arange(perm_c.size))

# ---- rules on identical scores, with ties ------------------------------------

for _ in range(4):
    nq, nk = rng.randint(1, 40), rng.randint(1, 40)
    # Quantised scores: many exact ties, which both sides break to the lower index.
    prob = torch.randint(0, rng.choice([3, 6, 1000]), (nq, nk), dtype=torch.float64)
    prob = prob / prob.sum(-1, keepdim=True).clamp(min=1)
    k = rng.randint(0, nk + 2)
    same(f"topk {nq}x{nk} k={k}", M.topk_rule(prob, k), run_rule("topk", prob.numpy(), k))
    tau, mk = rng.choice([0.5, 0.9, 0.95, 0.98, 1.0]), rng.randint(0, 3)
    same(f"cdf {nq}x{nk} tau={tau} min={mk}", M.cdf_rule(prob, tau, mk),
         run_rule("cdf", prob.numpy(), tau, mk))

for _ in range(4):
    nq, nk = rng.randint(1, 30), rng.randint(1, 30)
    prob = torch.softmax(torch.randn(2, nq, nk, dtype=torch.float64) * 3, -1)
    sq, sk = torch.rand(2, nq, dtype=torch.float64), torch.rand(2, nk, dtype=torch.float64)
    tau, topf = rng.choice([(0.9, None), (0.98, None), (0, 0.1), (0, 0.3)])
    theta, sink = rng.choice([0.0, 0.1, 0.3]), rng.choice([True, False])
    # Some self-similarities exactly at the threshold: not forced (strictly below is).
    sq[:, rng.randrange(nq)] = theta
    sk[:, rng.randrange(nk)] = theta
    got = M.sparge_rule(prob, sq, sk, tau or 0.95, topf, theta, sink)
    for i in range(2):
        same(f"sparge rule {nq}x{nk} tau={tau} topf={topf} theta={theta} sink={sink}", got[i],
             run_rule("sparge-prob", prob[i].numpy(), sq[i].numpy(), sk[i].numpy(), tau, topf or 0,
                      theta, int(sink)))

# ---- VSA ---------------------------------------------------------------------


def rope_qk(b, h, grid, d, hk=None):
    """q, k with positional structure (a 3D rotary phase on a shared vector
    plus noise), so pooled scores decay with distance as in a DiT."""
    t, hh, ww = grid
    n = t * hh * ww
    pos = torch.stack(torch.meshgrid(torch.arange(t), torch.arange(hh), torch.arange(ww),
                                     indexing="ij"), -1).reshape(n, 3).double()
    freq = torch.rand(d // 2, 3, dtype=torch.float64) * 1.5
    ang = pos @ freq.T
    rot = torch.cat([torch.cos(ang), torch.sin(ang)], -1)

    def one(heads):
        u = torch.randn(b, heads, 1, d, dtype=torch.float64) * 2
        return u * rot + torch.randn(b, heads, n, d, dtype=torch.float64)
    return one(h), one(hk or h)


for _ in range(2):
    cube = (4, 4, 4)
    grid = grid_ragged(cube)
    b, h, d = rng.randint(1, 2), rng.choice([1, 2, 4]), rng.choice([16, 32])
    hk = rng.choice([x for x in (1, h) if h % x == 0])
    q, k = rope_qk(b, h, grid, d, hk)
    layout = rng.choice(["bhsd", "bshd"])
    ql, kl = (q, k) if layout == "bhsd" else (q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous())
    s = rng.choice([0.8, 0.85, 0.875, 0.9])
    mm = M.vsa(ql, kl, grid, sparsity=s, layout=layout)
    perm_c, sizes_c = run_rule("tiles", *grid, *cube, outs=2)
    same("vsa geometry", mm.block[0], sizes_c)
    same("vsa geometry k", mm.block[1], sizes_c)
    same("vsa order", mm.order.perm, perm_c)
    kk = M.vsa_k(s, len(sizes_c))
    same("vsa k", kk, math.ceil((1 - s) * len(sizes_c) - 1e-9))
    # Identical pooled inputs (the whole-first pooling check above ties them
    # to the C rule's cubes).
    pq, pk = (M.pool_tiles(x, grid, cube).index_select(2, mm.order.tiles) for x in (q, k))
    for bi in range(b):
        for hi in range(h):
            want = run_rule("vsa", pq[bi, hi].numpy(), pk[bi, hi * hk // h].numpy(), d, kk)
            same(f"vsa mask b{bi} h{hi} grid {grid} s={s}", mm.mask[bi, hi], want)
    same("vsa dtype/device", (mm.mask.dtype, mm.mask.device.type) == (torch.bool, "cpu"), True)

# ---- SpargeAttn --------------------------------------------------------------

for _ in range(3):
    bq, bk = rng.choice([(128, 64), (64, 128), (32, 16)])
    grid = (rng.randint(2, 5), rng.randint(3, 9), rng.randint(3, 9))
    b, h, d = rng.randint(1, 2), rng.randint(1, 3), rng.choice([16, 32])
    q, k = rope_qk(b, h, grid, d)
    n = q.shape[2]
    # Some blocks of low self-similarity: tokens of random sign around 0.
    for x, blk in ((q, bq), (k, bk)):
        nb = -(-n // blk)
        for i in rng.sample(range(nb), max(1, nb // 4)):
            x[:, :, i * blk:(i + 1) * blk] = torch.randn_like(x[:, :, i * blk:(i + 1) * blk]) * 0.3
    tau, topf = rng.choice([(0.9, None), (0.95, None), (0.98, None), (0, 0.2), (0, 0.3)])
    theta, sink = rng.choice([0.05, 0.2, 0.5]), rng.choice([True, False])
    mm = M.sparge(q, k, grid, tau=tau or 0.95, topk=topf, selfsim_min=theta, sink=sink,
                  block=(bq, bk))
    same("sparge geometry", mm.block, (bq, bk))
    pq, pk = M.pool_blocks(q, bq), M.pool_blocks(k, bk)
    sq, sk = M.self_similarity(q, pq, bq), M.self_similarity(k, pk, bk)
    # Self-similarity against brute force: |mean|^2 / mean |x|^2 per block.
    for x, pooled, blk, ss in ((q, pq, bq, sq), (k, pk, bk, sk)):
        for i in range(pooled.shape[2]):
            seg = x[:, :, i * blk:(i + 1) * blk]
            ref = (seg.mean(2).square().sum(-1) / seg.square().sum(-1).mean(2)).clamp(max=1)
            same(f"selfsim block {i}", (ss[:, :, i] - ref).abs().max() < 1e-12, True)
            same(f"pool_blocks block {i}", (pooled[:, :, i] - seg.mean(2)).abs().max() < 1e-12, True)
    for bi in range(b):
        for hi in range(h):
            want = run_rule("sparge", pq[bi, hi].numpy(), pk[bi, hi].numpy(), sq[bi, hi].numpy(),
                            sk[bi, hi].numpy(), d, tau, topf or 0, theta, int(sink))
            same(f"sparge mask b{bi} h{hi} tau={tau} topf={topf} theta={theta}", mm.mask[bi, hi], want)

# ---- XAttention ----------------------------------------------------------------


def antidiagonal_brute(q, k, stride, block, scale):
    """float64 XAttention block scores from the token-level score matrix:
    each (query run, key run) block's antidiagonal, taken entry by entry
    (tokens past the end are zero vectors), softmax per query run, summed
    over the runs of each block pair."""
    b, h, n, d = q.shape
    nk = k.shape[2]
    gq, gk = -(-n // stride), -(-nk // stride)
    qp = torch.nn.functional.pad(q, (0, 0, 0, gq * stride - n))
    kp = torch.nn.functional.pad(k.repeat_interleave(h // k.shape[1], 1), (0, 0, 0, gk * stride - nk))
    full = (qp @ kp.transpose(-1, -2)) * scale
    a = torch.zeros(b, h, gq, gk, dtype=torch.float64)
    for i in range(gq):
        for m in range(stride):
            a[:, :, i] += full[:, :, i * stride + stride - 1 - m, m::stride]
    p = torch.softmax(a / stride, -1)
    r = block // stride
    nqb, nkb = -(-gq // r), -(-gk // r)
    out = torch.zeros(b, h, nqb, nkb, dtype=torch.float64)
    for i in range(nqb):
        for j in range(nkb):
            out[:, :, i, j] = p[:, :, i * r:(i + 1) * r, j * r:(j + 1) * r].sum((-1, -2))
    return out


for _ in range(3):
    stride = rng.choice([2, 4, 8, 16])
    block = stride * rng.choice([1, 2, 4])
    grid = (rng.randint(2, 4), rng.randint(2, 7), rng.randint(2, 9))  # rarely a multiple of block
    b, h, d = rng.randint(1, 2), rng.choice([1, 2, 4]), rng.choice([8, 16])
    hk = rng.choice([x for x in (1, h) if h % x == 0])
    q, k = rope_qk(b, h, grid, d, hk)
    layout = rng.choice(["bhsd", "bshd"])
    ql, kl = (q, k) if layout == "bhsd" else (q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous())
    tau = rng.choice([0.5, 0.9, 0.95, 1.0])
    chunk = rng.randint(1, 4)
    mm = M.xattention(ql, kl, grid, tau=tau, stride=stride, block=block, layout=layout, chunk=chunk)
    same("xattention geometry", mm.block, (block, block))
    score = mm.info["scores"]
    ref = antidiagonal_brute(q, k, stride, block, 1 / math.sqrt(d))
    same(f"xattention antidiagonal scores stride {stride} block {block} grid {grid} {layout} "
         f"chunk {chunk}", score.shape == ref.shape and (score - ref).abs().max() < 1e-12, True)
    for bi in range(b):
        for hi in range(h):
            same(f"xattention mask b{bi} h{hi} tau={tau}", mm.mask[bi, hi],
                 run_rule("xattn", score[bi, hi].numpy(), tau))
# The rule on quantised scores, with ties: the corpus's XAttention rule is
# its CDF rule at tau with at least one block a row.
for _ in range(3):
    nq, nk = rng.randint(1, 30), rng.randint(1, 30)
    sc = torch.randint(0, rng.choice([3, 50]), (nq, nk), dtype=torch.float64)
    tau = rng.choice([0.5, 0.9, 0.95])
    same(f"xattn rule {nq}x{nk} tau={tau}", M.cdf_rule(sc, tau, 1), run_rule("xattn", sc.numpy(), tau))

# ---- Sliding Tile Attention --------------------------------------------------

for _ in range(6):
    tiles = tuple(rng.randint(1, 7) for _ in range(3))
    win = tuple(rng.randint(1, 8) for _ in range(3))
    same(f"sta mask {tiles} {win}", M.sta_mask(tiles, win), run_rule("sta", *tiles, *win))
tile = (6, 8, 8)
grid = grid_ragged(tile)
b, h = rng.randint(1, 2), rng.randint(1, 4)
wins = [tuple(rng.randint(1, 4) for _ in range(3)) for _ in range(h)]
q = torch.randn(b, grid[0] * grid[1] * grid[2], h, 8)
mm = M.sta(q, grid, wins, layout="bshd")
perm_c, sizes_c = run_rule("tiles", *grid, *tile, outs=2)
same("sta geometry", mm.block[0], sizes_c)
same("sta order", mm.order.perm, perm_c)
tg = tuple(-(-g // t) for g, t in zip(grid, tile))
# The C rule indexes tiles in raster order: each block's raster tile, from its first token.
first = perm_c[np.concatenate([[0], np.cumsum(sizes_c)[:-1]])]
ti = ((first // (grid[1] * grid[2]) // tile[0]) * tg[1] + (first // grid[2]) % grid[1] // tile[1]) \
    * tg[2] + first % grid[2] // tile[2]
for bi in range(b):
    for hi in range(h):
        same(f"sta head {hi} window {wins[hi]}", mm.mask[bi, hi],
             run_rule("sta", *tg, *wins[hi])[ti][:, ti])

# ---- Radial ------------------------------------------------------------------

for _ in range(8):
    frames, f = rng.randint(3, 14), rng.randint(8, 200)
    block = rng.choice([16, 32, 64, 128])
    decay, sink = rng.choice([0.2, 0.95, 0.5]), rng.choice([True, False])
    want = run_rule("radial", frames, f, block, decay, int(sink))
    same(f"radial {frames}x{f} block {block} decay {decay} sink {sink}",
         M.radial_mask(frames, f, block, decay, sink), want)
grid = (rng.randint(3, 8), rng.randint(2, 9), rng.randint(2, 9))
q = torch.randn(1, 2, grid[0] * grid[1] * grid[2], 8)
mm = M.radial(q, grid, decay=0.2, block=32, sink=True)
same("radial producer", mm.mask[0, 1], run_rule("radial", grid[0], grid[1] * grid[2], 32, 0.2, 1))
same("radial geometry", mm.block, (32, 32))

# ---- Sparse VideoGen ---------------------------------------------------------

for _ in range(4):
    nb, block = rng.randint(1, 30), rng.randint(1, 200)
    n = rng.randint((nb - 1) * block + 1, nb * block)
    dens, sink_t = rng.choice([0.1, 0.25, 0.3, 0.6]), rng.choice([0, rng.randint(1, n)])
    same(f"svg band nb={nb} block={block}", M.svg_band(nb, block, n, dens, sink_t),
         run_rule("svg", nb, block, n, dens, sink_t))
same("svg block Wan 480p", M.svg_block(30 * 52), 195)

# Heads made spatial (q, k by frame) or temporal (q, k by spatial position):
# the sampled-attention profile must tell them apart.
grid = (rng.randint(4, 7), rng.randint(2, 4), rng.randint(2, 4))
t, hh, ww = grid
f, n = hh * ww, t * hh * ww
b, h, d = rng.randint(1, 2), rng.randint(2, 4), 32
kind = torch.tensor([[rng.random() < 0.5 for _ in range(h)] for _ in range(b)])
if not kind.any():
    kind[0, 0] = True
if kind.all():
    kind[0, 0] = False
tok = torch.arange(n)
onehot_f = torch.nn.functional.one_hot(tok // f, d).double()
onehot_s = torch.nn.functional.one_hot(tok % f + t, d).double()
base = torch.where(kind[:, :, None, None], onehot_s, onehot_f) * 6
q = base + 0.05 * torch.randn(b, h, n, d, dtype=torch.float64)
k = base + 0.05 * torch.randn(b, h, n, d, dtype=torch.float64)
v = torch.randn(b, h, n, d, dtype=torch.float64)
sink = rng.choice([True, False])
mm = M.svg(q, k, v, grid, density=0.3, sink=sink, samples=rng.choice([8, 16]))
same("svg head types", mm.info["temporal"], kind)
blk = M.svg_block(f)
nb = -(-n // blk)
same("svg geometry", mm.block, (blk, blk))
band_sp = run_rule("svg", nb, blk, n, 0.3, f if sink else 0)
band_tm = run_rule("svg", nb, blk, n, 0.3, 0)
perm_c = torch.from_numpy(run_rule("spatial", *grid))
for bi in range(b):
    for hi in range(h):
        tm = bool(kind[bi, hi])
        same(f"svg mask b{bi} h{hi} temporal={tm}", mm.mask[bi, hi], band_tm if tm else band_sp)
        want = q[bi, hi, perm_c] if tm else q[bi, hi]
        same(f"svg order b{bi} h{hi}", torch.equal(mm.order.permute(q)[bi, hi], want), True)
same("svg unpermute", torch.equal(mm.order.unpermute(mm.order.permute(q)), q), True)
qs = q.transpose(1, 2).contiguous()
y = mm.order.permute(qs, "bshd")
same("svg order bshd", torch.equal(y.transpose(1, 2), mm.order.permute(q)), True)

# The CUDA profile's bit planes (tessera.produce.pack_planes): random masks
# over lengths off the multiples of 32, word for word against a plain loop
# (bit 31 as the int32 sign).
for s_ in (1, 31, 32, 33, 95, 130):
    m_ = torch.rand(2, 3, s_, generator=torch.Generator().manual_seed(s_)) < 0.5
    m_[0, 0, :] = True
    got = M._produce.pack_planes(m_)
    want = np.zeros((2, 3, -(-s_ // 32)), dtype=np.int64)
    for j in range(s_):
        want[:, :, j // 32] |= m_[:, :, j].numpy().astype(np.int64) << (j % 32)
    want = np.where(want >= 2**31, want - 2**32, want)
    same(f"pack_planes {s_} keys: int32", got.dtype == torch.int32, True)
    same(f"pack_planes {s_} keys", got, want)

# ---- end to end: tessera.attention (the CPU path) with each method's mask ----


def token_ids(geom, n):
    """Block of every token for a (bq, bk)-style size or a list of sizes."""
    if isinstance(geom, int):
        return torch.arange(n) // geom
    return torch.repeat_interleave(torch.arange(len(geom)), torch.tensor(geom))


def reference(mm, q, k, v):
    """float64 attention over the token mask the block mask means, in the
    method's order, put back: what attend() must give."""
    o = mm.order
    qp, kp, vp = (o.permute(x.double()) for x in (q, k, v))
    n = q.shape[2]
    qi, ki = token_ids(mm.block[0], n), token_ids(mm.block[1], n)
    tm = mm.mask[:, :, qi][:, :, :, ki]
    s = (qp @ kp.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    p = torch.softmax(s.masked_fill(~tm, float("-inf")), -1).nan_to_num(0.0)
    return o.unpermute(p @ vp)


if os.environ.get("TESSERA_LIBRARY"):
    grid = (rng.randint(5, 7), rng.randint(5, 10), rng.randint(5, 10))
    n = grid[0] * grid[1] * grid[2]
    b, h, d = 1, 2, 32
    q64, k64 = rope_qk(b, h, grid, d)
    q, k, v = q64.float(), k64.float(), torch.randn(b, h, n, d)
    for name, mm in (("vsa", M.vsa(q, k, grid, sparsity=0.75)),
                     ("sta", M.sta(q, grid, [(1, 1, 1), (2, 1, 2)], tile=(3, 4, 4))),
                     ("radial", M.radial(q, grid, block=32)),
                     ("sparge", M.sparge(q, k, grid, tau=0.9, block=(32, 16))),
                     ("xattention", M.xattention(q, k, grid, tau=0.9, stride=4, block=32)),
                     ("svg", M.svg(q, k, v, grid, samples=8))):
        out = M.attend(mm, q, k, v)
        ref = reference(mm, q, k, v)
        err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        same(f"attend {name} on CPU tensors: relative error {err:.2e}", err < 1e-4, True)
        print(f"python-methods: attend {name}: density {mm.mask.float().mean().item():.3f}, "
              f"max relative error {err:.1e} against float64")
        # The mask must matter: dense attention differs from it.
        dense = torch.nn.functional.scaled_dot_product_attention(q64, k64, v.double())
        same(f"{name} mask is not dense", mm.mask.all().item() or (dense - ref).abs().max() > 1e-3, True)
else:
    print("python-methods: no TESSERA_LIBRARY: end-to-end attention skipped")

# ---- no host synchronisation: each producer traces as one graph ----------------
# torch.compile(fullgraph=True) refuses a graph break, which .item(), .tolist(),
# nonzero or any data-dependent shape would cause (each a host sync on a GPU).
grid = (rng.randint(3, 6), rng.randint(3, 7), rng.randint(3, 7))
n = grid[0] * grid[1] * grid[2]
q, k, v = (torch.randn(1, 2, n, 16) for _ in range(3))
for name, fn in (("vsa", lambda q, k, v: M.vsa(q, k, grid)),
                 ("sta", lambda q, k, v: M.sta(q, grid, (2, 2, 2), tile=(2, 4, 4))),
                 ("radial", lambda q, k, v: M.radial(q, grid, block=32)),
                 ("sparge", lambda q, k, v: M.sparge(q, k, grid, block=(32, 16))),
                 ("xattention", lambda q, k, v: M.xattention(q, k, grid, stride=4, block=16, chunk=2)),
                 ("svg", lambda q, k, v: M.svg(q, k, v, grid, samples=8))):
    want = fn(q, k, v)  # the geometry's cached tensors, built eagerly first
    got = torch.compile(fn, fullgraph=True, backend="eager")(q, k, v)
    same(f"{name} under torch.compile(fullgraph=True)", torch.equal(got.mask, want.mask), True)
    # Its token order too: permute and unpermute trace as one graph.
    o = want.order
    for x in (q, q.to(torch.bfloat16)):
        y = torch.compile(lambda x: o.permute(x), fullgraph=True, backend="eager")(x)
        same(f"{name} permute {x.dtype} under torch.compile", torch.equal(y, o.permute(x)), True)
        y = torch.compile(lambda y: o.unpermute(y), fullgraph=True, backend="eager")(y)
        same(f"{name} unpermute {x.dtype} under torch.compile", torch.equal(y, x), True)
# On meta tensors (shapes, no data) anything that reads a value on the host
# (.item(), .tolist(), .cpu(), nonzero, boolean indexing) raises: a producer
# that runs there synchronises nothing on a GPU.
qm, km, vm = (x.to("meta") for x in (q, k, v))
for name, fn in (("vsa", lambda: M.vsa(qm, km, grid)), ("sta", lambda: M.sta(qm, grid, (2, 2, 2))),
                 ("radial", lambda: M.radial(qm, grid, block=32)),
                 ("sparge", lambda: M.sparge(qm, km, grid, block=(32, 16))),
                 ("xattention", lambda: M.xattention(qm, km, grid, stride=4, block=16, chunk=2)),
                 ("svg", lambda: M.svg(qm, km, vm, grid, samples=8))):
    mm = fn()
    same(f"{name} on meta tensors", (mm.mask.device.type, mm.mask.dtype) == ("meta", torch.bool), True)

# ---- the fused kernels' dispatch (tessera.produce), on fake CUDA tensors -------
# On CUDA tensors vsa and sparge run libtessera's fused stages (custom ops
# tessera::pool_tiles and tessera::select_blocks); their fake impls give
# torch.compile the shapes.  Under FakeTensorMode (no GPU needed) the
# producers take that path and must give the torch path's shapes; CPU
# tensors never take it.  The kernels' masks are checked on the GPU
# (tests/device/producer_stages.py, methods_bench.py).
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

same("CPU tensors keep the torch path", M._fused(q), False)
# The sanitizer build sets no TESSERA_LIBRARY (its library cannot load into
# python); the plain build runs this part.
if not os.environ.get("TESSERA_LIBRARY"):
    print("python-methods: no TESSERA_LIBRARY: the fused dispatch check skipped")
elif hasattr(tessera.library(), "tsr_produce_pool"):
    saved = dict(M._cache)
    want = {"vsa": M.vsa(q, k, grid), "sparge": M.sparge(q, k, grid, block=(32, 16)),
            "sparge-topk": M.sparge(q, k, grid, topk=0.3, block=(24, 40), layout="bhsd")}
    want["vsa-in-order"] = want["vsa"]
    calls = []
    real_pool, real_pair, real_sel = M._produce.pool_tiles, M._produce.pool_pair, M._produce.select_blocks
    M._produce.pool_tiles = lambda *a: calls.append("pool") or real_pool(*a)
    M._produce.pool_pair = lambda *a: calls.append("pair") or real_pair(*a)
    M._produce.select_blocks = lambda *a: calls.append("select") or real_sel(*a)
    try:
        with FakeTensorMode():
            qf = torch.empty(q.shape, device="cuda", dtype=torch.bfloat16)
            kf = torch.empty(k.shape, device="cuda", dtype=torch.bfloat16)
            same("fake CUDA tensors take the fused path", M._fused(qf), True)
            # VSA pools q and k in one launch (tessera::pool_pair), in the cube
            # order too (the runs of cube sizes)
            got = {"vsa": M.vsa(qf, kf, grid), "sparge": M.sparge(qf, kf, grid, block=(32, 16)),
                   "sparge-topk": M.sparge(qf, kf, grid, topk=0.3, block=(24, 40)),
                   "vsa-in-order": M.vsa(qf, kf, grid, in_order=True)}
    finally:
        M._produce.pool_tiles, M._produce.pool_pair, M._produce.select_blocks = real_pool, real_pair, real_sel
        M._cache.clear()  # the geometry built on fake tensors must not serve real ones
        M._cache.update(saved)
    for name in want:
        same(f"{name} through the fused ops' fake impls: mask shape and dtype",
             (tuple(got[name].mask.shape), got[name].mask.dtype, got[name].mask.device.type) ==
             (tuple(want[name].mask.shape), torch.bool, "cuda"), True)
        same(f"{name} geometry", got[name].block == want[name].block, True)
    same(f"the fused ops were called, pair, select for VSA, pool, pool, select for SpargeAttn: {calls}",
         calls == ["pair", "select"] + ["pool", "pool", "select"] * 2 + ["pair", "select"], True)
    # the runs pool_pair takes in the cube order: each size once, sorted
    order, sizes = M.tile_order(grid, (4, 4, 4))
    runs = M._runs(sizes)
    same(f"runs {runs} cover the cube order's sizes", [n for t, z in zip(runs[0::2], runs[1::2])
                                                        for n in [z] * t] == sizes, True)

# ---- bad input: one clear error ----------------------------------------------

# (a grid one column wider than q's own: never its token count)
for fn, words in ((lambda: M.vsa(q, k, (grid[0], grid[1], grid[2] + 1)), "has"),
                  (lambda: M.sta(q, grid, [(1, 1, 1)] * (h + 1)), "STA window"),
                  (lambda: M.svg(q, k[:, :1], v[:, :1], grid), "key heads"),
                  (lambda: M.xattention(q, k, grid, stride=8, block=12), "multiple of the stride"),
                  (lambda: M.xattention(q, k, grid, tau=1.5), "tau")):
    try:
        fn()
    except ValueError as e:
        same(f"error names the problem: {e}", words in str(e), True)
    else:
        sys.exit(f"FAIL: bad input accepted ({words})")

print(f"python-methods: {checks} checks passed")
