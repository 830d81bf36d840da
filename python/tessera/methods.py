"""tessera.methods: the block masks of published sparse-attention methods,
made from the live q and k of a video DiT layer on their own device.

Every producer takes q and k as tessera.attention() takes them ([B, H, S, D]
with layout="bhsd", or [B, S, H, D] with layout="bshd"; S = T*H*W tokens in
the model's frame-major order), the latent grid (T, H, W) and the method's
parameters, and returns a MethodMask:

    mask    bool [B, H, NQ, NK] on q's device: the logical block mask
    block   the block geometry, as tessera.attention(block=...) takes it:
            (bq, bk) for uniform blocks (the last one may be ragged), or
            (q_sizes, k_sizes), lists of token counts, where the method's
            cubes or tiles are ragged (Wan 480p's 21x30x52 grid in 4x4x4
            cubes: 6x8x13 = 624 cubes of 64, 32, 16 or 8 tokens, run as they
            are, no padding)
    order   a TokenOrder: the token order the mask's blocks are contiguous
            in; order.permute(x) puts q, k, v into it, order.unpermute(o)
            puts attention's output back (identity for frame-major methods)
    info    method-specific tensors (SVG: which heads are temporal)

so that

    mm = tessera.methods.vsa(q, k, (21, 30, 52), sparsity=0.875)
    o = tessera.methods.attend(mm, q, k, v)       # permute, attention, back

runs the method end to end.  The methods:

    vsa     Video Sparse Attention: mean-pooled 4x4x4 cubes, top-k per row
    sta     Sliding Tile Attention: a window of 6x8x8 tiles per head
    svg     Sparse VideoGen: spatial or temporal band per head, the head type
            chosen from sampled attention rows
    radial  Radial attention: the energy-decay rule reduced to 128-blocks
    sparge  SpargeAttn: mean-pooled scores, CDF threshold, self-similarity
            fallback and sink column
    xattention  XAttention: antidiagonal scores of each 128-block pair at
            stride 8-16 (softmax per query run, summed per block), CDF
            threshold tau per row

Each rule is the one the mask corpus generator applies (profiler/
corpus_families.c, docs/mask-families.md): given the same pooled inputs they
give the same mask, block for block (tests/python-methods.sh checks it
through tests/methods_rule, the corpus's C rules as a command).  Ties go to
the lower block index, as the corpus's.  On CUDA float32 the fused select's
top k runs on the scores (float32-accurate, from the tensor cores): where
float32's exp would round distinct scores to one probability the higher
score wins, not the lower index (float64 and the CPU path follow the rule
exactly).

No host synchronisation: only torch tensor ops run (no .item(), .cpu(),
nonzero or data-dependent shapes; geometry comes from the grid, in Python
integers), so a producer can be captured in a CUDA graph or traced by
torch.compile.  The index tensors of a geometry (token orders, the static
masks of STA, Radial and SVG) are built on first use and cached per device:
make the first call for a geometry before capturing a graph.

Cost (Wan2.1-1.3B 480p, bf16, 12 heads, d128, on an H200; tests/device/run
BUILDDIR methods measures it and lists each producer's kernels): the
data-dependent producers read q and k once for the pooling (one reduction per
whole or ragged piece of the grid, float32 sums of bf16, nothing of q's size
written: VSA about 22 kernels and 0.45 GB moved in all, SpargeAttn about 50
and 0.55 GB with its self-similarity's second read) and work on the pooled
blocks after that.  Measured 2026-12-02 (methods_bench): VSA 0.67 ms, 21% of
the attention it prepares (its row sort 0.2 ms and the ragged pooling 0.19
ms), SVG 0.48 ms (14%), SpargeAttn 0.46 ms (5.7%), STA and Radial under
0.2%: over the 5% budget for the three data-dependent ones, which a fused
kernel, not a reformulation in torch ops, would bring under it.
On CUDA tensors VSA and SpargeAttn now pool and apply their rule in
libtessera's fused kernels (tessera.produce: one read of q and of k, then
scores, softmax and top-k or CDF in one launch; FUSED = False keeps the
torch path, the reference and the CPU's).  Measured 2026-12-02, H200, one
run of the merged kernels (notes/producers-2026-12-02.md): VSA 0.348 ms
against the torch path's 0.573 ms (12.4% of its attention, 2.80 ms a layer
after the whole-first cube order), SpargeAttn 0.224 ms (2.8%) against
0.441 ms.  With the select's scores N/8 keys a thread (same masks), VSA's
select 0.139 ms at 16 rows a CTA (was 0.203), its producer about 0.26 ms
(8.9%), SpargeAttn's 0.190 ms (notes/pipeline-2026-12-02c.md).  On
2026-12-03 (notes/producers-2026-12-03.md): VSA 0.161 ms in the cube order
(pooling 0.061, select 0.097), 6.7% of its attention; the select's scores
(0.078 ms) are the rest.  With the scores on the tensor cores, 32 rows a
select CTA and the frame-major pool writing the cube order itself
(notes/producers-2026-12-03c.md): select 0.050, pooling 0.061-0.062 in
either order, about 4.7-4.9% of its attention.
XAttention is the exception: its antidiagonal scores are a matmul at
1/stride of dense attention's QK^T flops (stride 8 at Wan 480p: 12 x 4095 x
4095 scores of dimension 1024, about 0.4 TFLOP) and a float32 softmax and
block sum over them, chunked by `chunk` query blocks: 6.0 ms against 5.8 ms
of attention at its 62% density, measured with the key runs unpadded (4095,
an odd leading dimension that sent the matmul to an unaligned 4 ms kernel);
they are now padded to a multiple of 8 (not yet measured).
SVG's profile in torch reads k and v once and makes five passes over its
3 x samples x S weights, all in q's dtype (21 kernels, about 0.85 GB at 64
samples; fewer samples shrink the weight passes in proportion, not the reads
of k and v).  On CUDA fp16/bf16 (D 64, 128) it is libtessera's
tessera::sampled_errors instead: one read of k and v, nothing of
samples x S written (notes/producers-2026-12-06.md: 0.38 -> 0.16 ms, 4.8%
of its attention on an H100).
A token permutation is one gather per tensor, on 8-byte words where the rows
allow (reads and writes it once: 2 x 100 MB for each of q, k, v and the
output).  A static order (VSA cubes, STA tiles) is the same for every layer:
permute the hidden states (and the RoPE tables) once at the transformer's
entry and back at its exit, and its per-layer cost is zero
(tessera.diffusers.apply(hoist=True) on Wan; vsa(in_order=True) pools q and
k as they lie in the cube order).
"""
import math
from collections import namedtuple

import torch

from . import produce as _produce

__all__ = ["MethodMask", "TokenOrder", "vsa", "sta", "svg", "radial", "sparge", "xattention",
           "attend", "antidiagonal_scores",
           "tile_order", "pool_tiles", "pool_blocks", "self_similarity", "topk_rule",
           "cdf_rule", "sparge_rule", "svg_band", "svg_block", "sta_mask", "radial_mask",
           "vsa_k"]

MethodMask = namedtuple("MethodMask", "mask block order info")
MethodMask.__doc__ = """A producer's result: mask (bool [B, H, NQ, NK]), block (the geometry
tessera.attention takes), order (TokenOrder) and info (dict of method tensors)."""

_cache = {}

# On CUDA tensors the pooling and the pooled scores' rule run as libtessera's
# fused kernels (tessera.produce) when the library has them; False keeps
# the torch path (the reference, and the CPU's) everywhere.
FUSED = True
# With the fused kernels, VSA pools q and k in one launch (tessera::pool_pair;
# in the cube order, every run of cube sizes in it too).  False: the
# previous launches (q and k apart, one a run of sizes in the cube order),
# kept to compare; the same means, bit for bit.
PAIR = True


def _fused(x):
    return FUSED and _produce.available(x)


def _cached(key, build):
    """Static index tensors by (what, parameters, device): built once."""
    v = _cache.get(key)
    if v is None:
        v = _cache[key] = build()
    return v


# ---- shapes --------------------------------------------------------------


def _bhsd(x, layout):
    """The [B, H, S, D] view of a bhsd or bshd tensor (no copy)."""
    if x.dim() != 4:
        raise ValueError(f"expected a 4-D q/k/v tensor, got shape {tuple(x.shape)}")
    if layout == "bhsd":
        return x
    if layout == "bshd":
        return x.transpose(1, 2)
    raise ValueError(f"unknown layout '{layout}' (bhsd or bshd)")


def _grid(grid, s):
    if len(grid) != 3 or any(int(g) <= 0 for g in grid):
        raise ValueError(f"latent grid must be three positive sizes (T, H, W), got {grid}")
    t, h, w = (int(g) for g in grid)
    if t * h * w != s:
        raise ValueError(f"latent grid {t}x{h}x{w} has {t * h * w} tokens, the sequence has {s}")
    return t, h, w


def _acc(x):
    """Accumulation dtype: float64 stays float64 (the tests), else float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _segments(n, size):
    """Lengths of consecutive segments of `size` along n (the last ragged)."""
    return [size] * (n // size) + ([n % size] if n % size else [])


def _lengths(n, size, device):
    """_segments as a device tensor, built by device ops (no host copy)."""
    g = -(-n // size)
    return torch.clamp(n - torch.arange(g, device=device) * size, max=size)


def _pieces(n, size):
    """(start, segments, length) of the whole segments of `size` along n and
    of the ragged last one."""
    m = n // size * size
    return ([(0, n // size, size)] if m else []) + ([(m, 1, n - m)] if m < n else [])


def _cat(parts, dim):
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim)


def _segsums(x, dims, sizes, fn=None):
    """Sums over consecutive segments of sizes[i] along dims[i] (each axis's
    last segment ragged), all axes at once, in the accumulation dtype: one
    reduction per combination of whole and ragged pieces (1, 2, 4 or 8),
    each over views of x, so x is read once and nothing of its size is
    written; the small results are joined.  fn(piece, reduced dims) replaces
    the plain sum (the self-similarity's squared norms).  dims ascending."""
    acc = _acc(x)

    def rec(y, i):
        if i < 0:
            red = tuple(d + 1 + j for j, d in enumerate(dims))
            return y.sum(red, dtype=acc) if fn is None else fn(y, red)
        d = dims[i]
        return _cat([rec(y.narrow(d, s0, g * ln).unflatten(d, (g, ln)), i - 1)
                     for s0, g, ln in _pieces(y.shape[d], int(sizes[i]))], d)
    # Axes are split from the last to the first, so earlier dims keep their
    # index; the reduced axes end up at dims[j] + 1 + j.
    return rec(x, len(dims) - 1)


def _segsum(x, dim, size):
    """Sums of consecutive segments of `size` along dim (last one ragged), in
    the accumulation dtype: one read of x, views only, so pooling costs what
    reading q or k costs."""
    return _segsums(x, (dim,), (size,))


def _lengths_as(n, size, dtype, device):
    """_lengths in dtype, cached: no kernels per call."""
    return _cached(("lengths", n, size, dtype, str(device)),
                   lambda: _lengths(n, size, device).to(dtype))


def _scale(scale, d):
    return 1.0 / math.sqrt(d) if scale is None else float(scale)


def _kv_heads(pk, hq):
    """GQA: repeat pooled key heads to the query heads."""
    hk = pk.shape[1]
    if hq % hk:
        raise ValueError(f"query heads {hq} are not a multiple of key heads {hk}")
    return pk if hk == hq else pk.repeat_interleave(hq // hk, dim=1)


# ---- token orders --------------------------------------------------------


class TokenOrder:
    """A token order: position s of the method's sequence holds the
    frame-major token perm[s], and pos is the inverse (pos[perm[s]] = s).
    perm and pos are int64, [S] for one order of every head, or [B or 1, H, S]
    per head (SVG).  None: the frame-major order itself.

    permute(x) / unpermute(x): one gather along the sequence (index_select,
    or gather for per-head orders) on x's device; it reads and writes x once
    (Wan 480p bf16: 2 x 100 MB a tensor) and returns a contiguous tensor in
    x's layout."""

    def __init__(self, perm=None, pos=None, name="frame-major"):
        self.perm, self.pos, self.name = perm, pos, name

    def permute(self, x, layout="bhsd"):
        """x (frame-major) in this order."""
        return _take(x, self.perm, layout)

    def unpermute(self, x, layout="bhsd"):
        """x (in this order) back in frame-major order."""
        return _take(x, self.pos, layout)

    def __repr__(self):
        return f"TokenOrder({self.name})"


def _wide(x):
    """x viewed with 8-byte elements along its last axis where it can be (a
    bf16 row of 128 is 32 int64s): a gather then moves a quarter as many
    elements, each a full 8-byte load, instead of one 2-byte element per
    thread.  Returns (view, dtype to view back) or (x, None)."""
    n = x.element_size()
    # Traced (torch.compile), the compiler makes its own gather; dynamo
    # cannot read storage_offset().
    if torch.compiler.is_compiling() or n >= 8 or x.stride(-1) != 1 or (x.shape[-1] * n) % 8 or x.dtype.is_complex \
            or x.dtype == torch.bool or any(st * n % 8 for st in x.stride()[:-1]) \
            or x.storage_offset() * n % 8:
        return x, None
    return x.view(torch.int64), x.dtype


def _take(x, idx, layout):
    if idx is None:
        return x
    dim = {"bhsd": 2, "bshd": 1}.get(layout)
    if dim is None:
        raise ValueError(f"unknown layout '{layout}' (bhsd or bshd)")
    w, back = _wide(x)
    if idx.dim() == 1:
        y = w.index_select(dim, idx)
    else:
        # Per head: idx [B or 1, H, S] -> the sequence axis of x.
        i = idx if layout == "bhsd" else idx.transpose(1, 2)
        y = torch.gather(w, dim, i.unsqueeze(-1).expand(w.shape))
    return y if back is None else y.view(back)


def tile_order(grid, tile, device="cpu"):
    """The order of `tile`-sized tiles of the latent grid (VSA's 4x4x4
    cubes, STA's 6x8x8 tiles): each tile contiguous, raster inside; boundary
    tiles keep the tokens that exist (ragged).  Tiles by decreasing size,
    raster order within a size, as tsr_corpus_layout_tiles: the whole tiles
    come first, each on a multiple of the tile size, and map one to one onto
    physical tiles; in raster order every row of ragged tiles shifts the
    later ones half a physical tile off.
    Returns (TokenOrder, sizes): sizes, a list of Python ints, the tokens of
    every tile in this order; order.tiles, the raster index of each tile in
    it (order.tiles32: the same, int32).  Built by device ops and cached per (grid, tile, device)."""
    grid, tile = tuple(int(g) for g in grid), tuple(int(t) for t in tile)
    dev = torch.device(device)
    def ranked():
        lens = [_segments(n, s) for n, s in zip(grid, tile)]
        raster = [a * b * c for a in lens[0] for b in lens[1] for c in lens[2]]
        rank = sorted(range(len(raster)), key=lambda i: -raster[i])
        return rank, [raster[i] for i in rank]
    rank, sizes = _cached(("tile-sizes", grid, tile), ranked)

    def build():
        ax = []
        for n, size in zip(grid, tile):
            i = torch.arange(n, device=dev)
            ax.append((i // size, i % size, _lengths(n, size, dev)))
        (ti, to, tl), (hi, ho, hl), (wi, wo, wl) = ax
        gh, gw = hl.numel(), wl.numel()
        sizes = (tl[:, None, None] * hl[None, :, None] * wl[None, None, :]).flatten()
        # start[tile]: where the tile begins in the chosen order.
        r = torch.tensor(rank, device=dev)
        start = torch.empty_like(sizes).scatter_(0, r, torch.cumsum(sizes[r], 0) - sizes[r])
        tid = (ti[:, None, None] * gh + hi[None, :, None]) * gw + wi[None, None, :]
        intra = (to[:, None, None] * hl[hi][None, :, None] + ho[None, :, None]) * wl[wi][None, None, :] \
            + wo[None, None, :]
        pos = (start[tid] + intra).flatten()
        perm = torch.empty_like(pos).scatter_(0, pos, torch.arange(pos.numel(), device=dev))
        order = TokenOrder(perm, pos, "tiles-%dx%dx%d" % tile)
        order.tiles = r
        order.tiles32 = r.to(torch.int32)  # tessera::pool_pair's order
        return order
    return _cached(("tiles", grid, tile, str(dev)), build), list(sizes)


# ---- pooling -------------------------------------------------------------


def pool_tiles(x, grid, tile, layout="bhsd"):
    """Mean of x over each tile of the latent grid, [B, H, n_tiles, D] in
    tile raster order (float32; float64 for float64 x), from x in
    frame-major order: segment sums along T, H and W at once (views, one
    read of x, one reduction per whole/ragged piece of the grid).  Two passes
    (first over a tile's frames and rows with whole frame rows as the inner
    axis, then over its columns) measured no faster on the H200 (Wan 480p q
    and k: 0.259 ms against 0.255 ms)."""
    xb = _bhsd(x, layout)
    t, h, w = _grid(grid, xb.shape[2])
    if _fused(x):
        return _produce.pool_tiles(x, [t, h, w], [int(c) for c in tile], layout, False)[0]
    y = _segsums(xb.unflatten(2, (t, h, w)), (2, 3, 4), tile).flatten(2, 4)
    cnt = _cached(("tile-counts", (t, h, w), tuple(tile), y.dtype, str(x.device)),
                  lambda: (_lengths(t, tile[0], x.device)[:, None, None] *
                           _lengths(h, tile[1], x.device)[None, :, None] *
                           _lengths(w, tile[2], x.device)[None, None, :]).flatten()
                  .to(y.dtype)[:, None])
    return y / cnt


def pool_blocks(x, block, layout="bhsd"):
    """Mean of x over consecutive blocks of `block` tokens (the last one
    ragged), [B, H, nb, D], float32 (float64 for float64 x)."""
    xb = _bhsd(x, layout)
    if _fused(x):
        return _produce.pool_tiles(x, [1, 1, xb.shape[2]], [1, 1, int(block)], layout, False)[0]
    y = _segsum(xb, 2, block)
    return y / _lengths_as(xb.shape[2], block, y.dtype, x.device)[:, None]


def self_similarity(x, pooled, block, layout="bhsd"):
    """Per block |mean x|^2 / mean |x|^2 in (0, 1], [B, H, nb]: the corpus's
    self-similarity (corpus_synth.c); equal to SpargeAttn's mean pairwise
    cosine similarity when the block's tokens have equal norms.  1 for an
    all-zero block.  Reads x once: the norm of each block is taken over its
    tokens per channel (a reduction across rows, D-wide outputs read at
    full width, as the pooling's), then over the channels of that small
    result; one reduction over a whole block's tokens and channels read q
    at about three quarters of the pooling's bandwidth on the H200."""
    xb = _bhsd(x, layout)
    acc = _acc(xb)
    e = _segsums(xb, (2,), (block,), lambda y, red: torch.linalg.vector_norm(
        torch.linalg.vector_norm(y, dim=red, dtype=acc), dim=-1)).square()
    e = e / _lengths_as(xb.shape[2], block, e.dtype, x.device)
    m2 = torch.linalg.vector_norm(pooled, dim=-1).square()
    # An all-zero block has e = m2 = 0: 0/0 is NaN, which becomes 1.
    return (m2 / e).clamp(max=1.0).nan_to_num(1.0)


# ---- rules (the corpus's, on pooled scores) --------------------------------


def topk_rule(prob, k):
    """Keep the k largest of each row of prob [..., NQ, NK]; ties to the lower
    block index (a stable descending sort), as tsr_corpus_topk.  The sort
    stays: a radix select of each row's k-th largest (kthvalue) plus a
    running count of its ties gives the same set but measured slower on the
    H200 (VSA at Wan 480p, 12 x 624 rows of 624: 0.34 ms against 0.25 ms)."""
    k = max(0, min(int(k), prob.shape[-1]))
    order = torch.sort(prob, dim=-1, descending=True, stable=True).indices
    return torch.zeros(prob.shape, dtype=torch.bool, device=prob.device).scatter_(
        -1, order[..., :k], True)


def cdf_rule(prob, tau, min_keep=1):
    """Per row the fewest blocks, in decreasing probability (ties to the lower
    index), whose sum reaches tau times the row's sum, and at least min_keep:
    rank j is kept while the sum before it is below tau * total
    (tsr_corpus_cdf; sums in sorted order, sequential on the CPU)."""
    sp, order = torch.sort(prob, dim=-1, descending=True, stable=True)
    cum = torch.cumsum(sp, dim=-1)
    excl = torch.nn.functional.pad(cum[..., :-1], (1, 0))  # the sum before each rank
    nk, mk = prob.shape[-1], int(min_keep)
    first = _cached(("ranks-below", nk, mk, str(prob.device)),
                    lambda: torch.arange(nk, device=prob.device) < mk)
    keep = (excl < float(tau) * cum[..., -1:]) | first
    # order is a permutation of each row: every entry is written.
    return torch.empty(prob.shape, dtype=torch.bool, device=prob.device).scatter_(-1, order, keep)


def sparge_rule(prob, selfq, selfk, tau=0.95, topk=None, selfsim_min=0.05, sink=True):
    """SpargeAttn's rule on block probabilities [B, H, NQ, NK]: the CDF rule
    at tau (or, with topk=f, the top ceil(f * NK) blocks of each row), then
    every query block (row) and key block (column) of self-similarity below
    selfsim_min forced on, and key block 0 when sink (tsr_corpus_sparge)."""
    nk = prob.shape[-1]
    m = topk_rule(prob, math.ceil(topk * nk)) if topk else cdf_rule(prob, tau, 1)
    return _sparge_force(m, selfq, selfk, selfsim_min, sink)


def _sparge_force(m, selfq, selfk, selfsim_min, sink):
    """SpargeAttn's fallbacks on a rule's mask m: rows and columns of low
    self-similarity forced on, and the sink column."""
    m = m | (selfq < selfsim_min)[..., :, None] | (selfk < selfsim_min)[..., None, :]
    if sink:
        m[..., 0] = True
    return m


def vsa_k(sparsity, n_blocks):
    """VSA's blocks kept per row: ceil((1 - s) * n), as the corpus rounds."""
    return int(math.ceil((1.0 - sparsity) * n_blocks - 1e-9))


def svg_block(frame_tokens):
    """SVG's block: the largest divisor of the frame's tokens below 256."""
    return next((b for b in range(255, 1, -1) if frame_tokens % b == 0), 1)


def svg_band(nb, block, n, density, sink_tokens, device="cpu"):
    """SVG's band [nb, nb]: keep (i, j) when |i - j| * block <= n (1 - sqrt(1 -
    density)), and every key block starting before sink_tokens
    (tsr_corpus_svg_band)."""
    wtok = n * (1.0 - math.sqrt(1.0 - density))
    i = torch.arange(nb, device=device)
    return ((i[:, None] - i[None, :]).abs() * block <= wtok) | (i * block < sink_tokens)[None, :]


def sta_mask(tiles, window, device="cpu"):
    """STA's mask [n, n] on a tiles = (gt, gh, gw) tile grid: query tile q
    keeps key tile k when k lies in the window of window[a] tiles starting at
    clamp(q - window[a] // 2, 0, g - window[a]) on every axis (the window
    clamped to the grid), as tsr_corpus_sta."""
    keep = []
    for g, kw in zip(tiles, window):
        kw = min(int(kw), g)
        i = torch.arange(g, device=device)
        s = torch.clamp(i - kw // 2, 0, g - kw)
        keep.append((i[None, :] >= s[:, None]) & (i[None, :] < s[:, None] + kw))
    kt, kh, kw = keep
    m = kt[:, None, None, :, None, None] & kh[None, :, None, None, :, None] & \
        kw[None, None, :, None, None, :]
    n = tiles[0] * tiles[1] * tiles[2]
    return m.reshape(n, n)


def _bitlen(x):
    return int(x).bit_length()


def radial_mask(frames, frame_tokens, block=128, decay=0.2, sink=True, device="cpu"):
    """Radial attention's token rule reduced to frame-major blocks [nb, nb]
    (tsr_corpus_radial): between frames i and j, d = |i - j|, every pair when
    d <= 1 (or j = 0 with the sink), else the in-frame band of half-width
    max(2^bitlen(f) / 2^bitlen(d) * decay, block), only for d a multiple of
    floor(block / that) when that ratio is below block; a block is kept when
    more than 60% of its non-empty key columns have more than a third of its
    rows selected.  O(tokens x blocks) work, in chunks of block rows."""
    f, n = int(frame_tokens), int(frames) * int(frame_tokens)
    nb = -(-n // block)
    # Half-width per frame distance: f = every pair, -1 = none.
    wd = []
    for d in range(frames):
        if d <= 1:
            wd.append(f)
            continue
        r = math.ldexp(1.0, _bitlen(f) - _bitlen(d))
        if r < block and d % int(math.floor(block / r)) != 0:
            wd.append(-1)
        else:
            wd.append(int(math.floor(max(r * decay, float(block)))))
    wd = torch.tensor(wd, dtype=torch.int64, device=device)
    j = torch.arange(n, device=device)
    fj, sj = j // f, j % f
    wsink = (fj == 0) if sink else torch.zeros_like(fj, dtype=torch.bool)
    span = (block - 1) // f + 2  # frames a block of rows can touch
    out = torch.empty(nb, nb, dtype=torch.bool, device=device)
    pad = nb * block - n
    for c0 in range(0, nb, 32):
        bi = torch.arange(c0, min(nb, c0 + 32), device=device)
        a, b = bi * block, torch.clamp((bi + 1) * block, max=n)
        cnt = torch.zeros(bi.numel(), n, dtype=torch.int64, device=device)
        for s in range(span):
            fi = a // f + s
            ok = fi <= (b - 1) // f
            r0 = torch.maximum(a, fi * f) - fi * f
            r1 = torch.minimum(b, (fi + 1) * f) - fi * f
            d = (fi[:, None] - fj[None, :]).abs().clamp(max=frames - 1)
            w = torch.where(wsink[None, :], torch.full_like(d, f), wd[d])
            lo = torch.maximum(sj[None, :] - w, r0[:, None])
            hi = torch.minimum(sj[None, :] + w + 1, r1[:, None])
            cnt += torch.where(ok[:, None], (hi - lo).clamp(min=0), 0)
        cnt = torch.nn.functional.pad(cnt, (0, pad)).view(bi.numel(), nb, block)
        nonempty = (cnt > 0).sum(-1)
        dense = (3 * cnt > (b - a)[:, None, None]).sum(-1)
        out[c0:c0 + bi.numel()] = (nonempty > 0) & (10 * dense > 6 * nonempty)
    return out


# ---- producers -----------------------------------------------------------


def _planes(m, b, h):
    """A static [nq, nk] or [H, nq, nk] mask as a contiguous [B, H, nq, nk]."""
    if m.dim() == 2:
        m = m.expand(h, *m.shape)
    return m.expand(b, *m.shape).contiguous()


def _probs(pq, pk, scale):
    """softmax(pq pk^T * scale) per row, in pq's dtype (float32 or float64):
    the scale applied in the matmul's epilogue (the same product, rounded
    once, as a separate multiply of the float32 result), no pass of its own.
    beta=0: baddbmm ignores its (uninitialised, broadcast) input."""
    pk = _kv_heads(pk, pq.shape[1])
    s = torch.baddbmm(pq.new_empty(()).expand(1, 1, 1), pq.flatten(0, 1),
                      pk.flatten(0, 1).transpose(-1, -2), beta=0, alpha=scale)
    return torch.softmax(s, dim=-1).unflatten(0, pq.shape[:2])


def _topk_scores(pq, pk, scale, k):
    """topk_rule(_probs(pq, pk, scale), k): on CUDA, scores, softmax and the
    top k in one fused kernel (tessera.produce.select_blocks)."""
    if _fused(pq):
        return _produce.select_blocks(pq, pk, scale, _produce.TOPK, k, 0.0, 0)
    return topk_rule(_probs(pq, pk, scale), k)


def _pool_in_order(x, grid, tile, order, sizes, layout):
    """pool_tiles(x in frame-major order).index_select(2, order.tiles), from
    x already in the tile order (tile_order's): on CUDA, each run of equal
    tile sizes (Wan 480p's cubes: 64, 32, 16 and 8 tokens) pooled as
    consecutive blocks, one fused launch a run, no gather; a tile's tokens
    are raster inside it in both orders and the kernel sums them in that
    sequence, so the means are bitwise those of the frame-major pooling.
    Elsewhere x is gathered back to frame-major order and pooled as there
    (the same values, bit for bit, as the unhoisted path)."""
    xb = _bhsd(x, layout)
    if not _fused(x):
        return pool_tiles(order.unpermute(xb), grid, tile).index_select(2, order.tiles)
    parts, s0, i = [], 0, 0
    while i < len(sizes):
        j = i
        while j < len(sizes) and sizes[j] == sizes[i]:
            j += 1
        n = (j - i) * sizes[i]
        parts.append(_produce.pool_tiles(xb.narrow(2, s0, n), [1, 1, n], [1, 1, sizes[i]], "bhsd",
                                         False)[0])
        s0, i = s0 + n, j
    return _cat(parts, 2)


def _runs(sizes):
    """[tiles, size, ...] of the runs of equal sizes in a tile order's sizes
    (tile_order sorts them by size: at most 8 runs, one a combination of
    whole and ragged axes)."""
    out = []
    for n in sizes:
        if out and out[-1] == n:
            out[-2] += 1
        else:
            out += [1, n]
    return out


def vsa(q, k, grid, sparsity=0.875, layout="bhsd", cube=(4, 4, 4), scale=None, in_order=False):
    """Video Sparse Attention: q and k mean-pooled per 4x4x4 cube of the
    latent grid (boundary cubes smaller), softmax(q_c k_c^T * scale) per
    row, and the top ceil((1 - sparsity) * n_cubes) cubes of each row kept.
    Geometry: variable, one block per cube; order: cube order (tile_order).
    in_order: q and k are already in the cube order (order.permute(x), e.g.
    the hidden states permuted once at the model's entry: tessera.diffusers'
    hoist); the mask is the same.
    Cost: one read of q and k (the pooling), then O(B H n_cubes^2 D)."""
    b, h, s, d = _bhsd(q, layout).shape
    grid = _grid(grid, s)
    order, sizes = tile_order(grid, cube, q.device)
    if PAIR and _fused(q) and k.dtype == q.dtype and _bhsd(k, layout).shape[2:] == (s, d):
        if in_order:
            pq, pk = _produce.pool_pair(q, k, [], [], _runs(sizes), layout, False)[:2]
        else:  # pooled straight into the cube order: with two gathers after, 0.079 ms, not 0.062
            # (Wan 480p, H200, notes/producers-2026-12-03c.md)
            pq, pk = _produce.pool_pair(q, k, list(grid), [int(c) for c in cube], [], layout, False,
                                        order.tiles32)[:2]
    elif in_order:
        pq = _pool_in_order(q, grid, cube, order, sizes, layout)
        pk = _pool_in_order(k, grid, cube, order, sizes, layout)
    else:
        # Pooled in raster order, then taken in the cube order (624 rows at Wan 480p).
        pq = pool_tiles(q, grid, cube, layout).index_select(2, order.tiles)
        pk = pool_tiles(k, grid, cube, layout).index_select(2, order.tiles)
    keep = _topk_scores(pq, pk, _scale(scale, d), vsa_k(sparsity, len(sizes)))
    return MethodMask(keep, (sizes, sizes), order, {})


def sta(q, grid, window=(3, 3, 5), layout="bhsd", tile=(6, 8, 8)):
    """Sliding Tile Attention: tokens in 6x8x8 tiles (boundary tiles ragged),
    each query tile keeping the window[0] x window[1] x window[2] tiles
    around its centre, clamped to the grid (so every row keeps the same
    count).  window: one (kt, kh, kw) for every head or a list of one per
    head.  The mask depends on the geometry only (q gives device, batch,
    heads): built once per geometry and cached.  Geometry: variable (tiles);
    order: tile order."""
    b, h, s, _ = _bhsd(q, layout).shape
    grid = _grid(grid, s)
    order, sizes = tile_order(grid, tile, q.device)
    wins = [tuple(window)] * h if isinstance(window[0], int) else [tuple(w) for w in window]
    if len(wins) != h or any(len(w) != 3 or min(w) < 1 for w in wins):
        raise ValueError(f"STA window: one (kt, kh, kw) of positive tiles, or {h} of them; got {window}")
    tiles = tuple(-(-g // t) for g, t in zip(grid, tile))

    def build():
        # sta_mask indexes tiles in raster order: taken in the tile order.
        r = order.tiles
        per = {w: sta_mask(tiles, w, q.device)[r][:, r] for w in set(wins)}
        return torch.stack([per[w] for w in wins])
    m = _cached(("sta", tiles, tuple(tile), tuple(wins), str(q.device)), build)
    return MethodMask(_planes(m, b, h), (sizes, sizes), order, {})


def radial(q, grid, decay=0.2, block=128, sink=True, layout="bhsd"):
    """Radial attention (decay 0.2 for Wan, 0.95 for HunyuanVideo; sink: Wan's
    first-frame sink) on frame-major blocks of `block` tokens.  Static per
    geometry: built once and cached.  Geometry: uniform (block, block);
    order: frame-major."""
    b, h, s, _ = _bhsd(q, layout).shape
    t, hh, ww = _grid(grid, s)
    m = _cached(("radial", (t, hh, ww), int(block), float(decay), bool(sink), str(q.device)),
                lambda: radial_mask(t, hh * ww, int(block), float(decay), bool(sink), q.device))
    return MethodMask(_planes(m, b, h), (block, block), TokenOrder(), {})


def sparge(q, k, grid, tau=0.95, topk=None, selfsim_min=0.05, sink=True, block=(128, 64),
           layout="bhsd", scale=None):
    """SpargeAttn on frame-major blocks of block = (bq, bk) tokens (128 x 64;
    64 x 128 as on Hopper): q and k mean-pooled per block, softmax of the
    pooled scores per row, the CDF rule at tau (or topk=f: the top fraction
    f of each row), blocks of self-similarity below selfsim_min forced on
    for their whole row (query) or column (key), and key block 0 when sink.
    Geometry: uniform block; order: frame-major.  Cost: one read of q and k
    (means and row norms), then O(B H nq nk D)."""
    bq, bk = (int(x) for x in block)
    _, h, s, d = _bhsd(q, layout).shape
    _grid(grid, s)
    if _fused(q):
        return MethodMask(_sparge_fused(q, k, s, (bq, bk), tau, topk, selfsim_min, sink, layout,
                                        _scale(scale, d)), (bq, bk), TokenOrder(), {})
    pq, pk = pool_blocks(q, bq, layout), pool_blocks(k, bk, layout)
    selfq = self_similarity(q, pq, bq, layout)
    selfk = _kv_heads(self_similarity(k, pk, bk, layout)[..., None], h)[..., 0]
    prob = _probs(pq, pk, _scale(scale, d))
    return MethodMask(sparge_rule(prob, selfq, selfk, tau, topk, selfsim_min, sink),
                      (bq, bk), TokenOrder(), {})


def _sparge_fused(q, k, s, block, tau, topk, selfsim_min, sink, layout, scale):
    """sparge's mask on CUDA: q and k pooled with their blocks' mean squared
    norms in one read each (the self-similarity |mean|^2 / mean |x|^2 from
    them), the pooled scores' CDF (or top-k) rule in one kernel, then the
    fallbacks."""
    pq, sq = _produce.pool_tiles(q, [1, 1, s], [1, 1, block[0]], layout, True)
    pk, sk = _produce.pool_tiles(k, [1, 1, s], [1, 1, block[1]], layout, True)

    def selfsim(p, e):
        return (p.square().sum(-1) / e).clamp(max=1.0).nan_to_num(1.0)
    selfq, selfk = selfsim(pq, sq), _kv_heads(selfsim(pk, sk)[..., None], pq.shape[1])[..., 0]
    nk = pk.shape[2]
    if topk:
        m = _produce.select_blocks(pq, pk, scale, _produce.TOPK, math.ceil(topk * nk), 0.0, 0)
    else:
        m = _produce.select_blocks(pq, pk, scale, _produce.CDF, 0, float(tau), 1)
    return _sparge_force(m, selfq, selfk, selfsim_min, sink)


def _svg_static(grid, block, density, sink, device):
    """SVG's two band masks (spatial with the sink, temporal without) and the
    temporal heads' (spatial, frame) order with its inverse."""
    t, h, w = grid
    f, n = h * w, t * h * w
    nb = -(-n // block)
    sp = svg_band(nb, block, n, density, f if sink else 0, device)
    tm = svg_band(nb, block, n, density, 0, device)
    s = torch.arange(n, device=device)
    perm = (s % t) * f + s // t  # position sp * T + fr holds frame fr, spatial sp
    pos = (s % f) * t + s // f
    return sp, tm, perm, pos


def _svg_rows(grid, block, density, sink, samples, pos):
    """SVG's sampled query rows (evenly spaced, frame-major) and the token
    masks [samples, S] the spatial and temporal patterns give them."""
    t, h, w = grid
    f, n = h * w, t * h * w
    wtok = n * (1.0 - math.sqrt(1.0 - density))
    rows = (torch.arange(samples, device=pos.device) * n) // samples + n // (2 * samples)
    j = torch.arange(n, device=pos.device)

    def allowed(rp, kp, sink_tokens):
        return (((rp // block)[:, None] - (kp // block)[None, :]).abs() * block <= wtok) | \
            ((kp // block) * block < sink_tokens)[None, :]
    return rows, allowed(rows, j, f if sink else 0), allowed(pos[rows], pos, 0)


# On CUDA, SVG's softmax, its three weightings and their normalisers run as
# one function compiled by torch.compile (inductor: a row reduction and one
# pass writing the weightings, instead of a softmax, a copy, two products and
# a sum, each a pass over samples x S).  False: the eager passes (the
# reference, and the CPU's).
SVG_FUSED = True
_svg_compiled = []
# SVG's profile on CUDA fp16/bf16 with D 64 or 128: libtessera's kernels
# (tessera::sampled_errors, nothing of samples x S written).  False: the
# torch path above (to compare; the types agree where the two errors are
# apart by more than the paths' rounding).
SVG_KERNEL = True


def _svg_weigh(s, planes, acc):
    """(weightings [B, H, 3, samples, S], normalisers [B, H, 3, samples, 1]):
    softmax(s) times each plane, and their sums in acc."""
    w = torch.softmax(s, dim=-1).unsqueeze(2) * planes
    return w, w.sum(-1, keepdim=True, dtype=acc)


def _svg_errors(qb, kb, vb, rows, planes, scale):
    """Mean squared error [B, H] of the sampled rows' attention output under
    the spatial and the temporal pattern against dense.  planes [3, samples,
    S] in v's dtype: ones (dense), the spatial and the temporal token masks.
    One score matmul (reads k once; the scale goes into the few sampled q
    rows), one softmax, the three weightings written into one tensor, their
    normalisers in one sum and their outputs in one matmul with v (reads v
    once): five passes over samples x S weights (three planes where
    stacked), nothing of them in float32."""
    acc = _acc(qb)
    qs = (qb.index_select(2, rows).to(acc) * scale).to(qb.dtype)
    s = torch.matmul(qs, kb.transpose(-1, -2))
    if SVG_FUSED and s.is_cuda and not torch.compiler.is_compiling():
        if not _svg_compiled:
            _svg_compiled.append(torch.compile(_svg_weigh, fullgraph=True, dynamic=False))
        wts, z = _svg_compiled[0](s, planes, acc)
        o = torch.matmul(wts.flatten(2, 3), vb).unflatten(2, (3, rows.numel())).to(acc) / z
        return (o[:, :, 1] - o[:, :, 0]).square().mean((-1, -2)), \
            (o[:, :, 2] - o[:, :, 0]).square().mean((-1, -2))
    p = torch.softmax(s, dim=-1)
    # [B, H, 3, samples, S]: p itself, then p times each pattern's plane,
    # written in place (the broadcast product of p and all three planes
    # measured 0.19 ms at Wan 480p, 4x its traffic's time); traced by
    # torch.compile, which refuses out= views, as the product (same values).
    if torch.compiler.is_compiling():
        wts = p.unsqueeze(2) * planes
    else:
        wts = p.new_empty(p.shape[:2] + (3,) + p.shape[2:])
        wts[:, :, 0].copy_(p)
        torch.mul(p, planes[1], out=wts[:, :, 1])
        torch.mul(p, planes[2], out=wts[:, :, 2])
    z = wts.sum(-1, keepdim=True, dtype=acc)
    o = torch.matmul(wts.flatten(2, 3), vb).unflatten(2, (3, rows.numel())).to(acc) / z
    return (o[:, :, 1] - o[:, :, 0]).square().mean((-1, -2)), \
        (o[:, :, 2] - o[:, :, 0]).square().mean((-1, -2))


def svg(q, k, v, grid, density=0.3, sink=True, block=None, samples=64, layout="bhsd",
        scale=None):
    """Sparse VideoGen: every head is spatial (a band of frames in frame-major
    order, plus Wan's first-frame sink when sink) or temporal (the same band
    in (spatial, frame) order: the same spatial position across frames),
    w = n (1 - sqrt(1 - density)) tokens each side.  The type is chosen per
    (batch, head) as SVG profiles online: `samples` query rows (evenly
    spaced) are attended densely and under each pattern, and the pattern
    whose output is nearer the dense one (mean squared error) wins.
    Geometry: uniform (block, block), block = the largest divisor of the
    frame's tokens below 256 (195 for Wan 480p); order: per head (temporal
    heads in (spatial, frame) order), so permute q, k and v with it.
    info["temporal"]: bool [B, H].  Needs as many key as query heads.
    Cost: the sampled rows' scores against every key and their three
    weighted sums of v (reads k and v once), then a select between two
    cached masks.  On CUDA fp16/bf16 with D 64 or 128 (and FUSED) the
    profile is tessera::sampled_errors, libtessera's kernels: one online
    softmax a sampled row feeding three accumulators, nothing of
    samples x S written; elsewhere the torch path (_svg_errors: 3 x
    samples x S weights in q's dtype).  The two compute in different
    precisions (the kernel's scores and sums in float32), so a head whose
    two errors lie within rounding of each other may take either type."""
    qb, kb, vb = _bhsd(q, layout), _bhsd(k, layout), _bhsd(v, layout)
    b, h, s, d = qb.shape
    if kb.shape[1] != h:
        raise ValueError(f"svg needs as many key heads as query heads ({kb.shape[1]} != {h})")
    _, hh, ww = grid = _grid(grid, s)
    f = hh * ww
    block = int(block or svg_block(f))
    sp, tm, perm, pos = _cached(("svg", grid, block, float(density), bool(sink), str(q.device)),
                                lambda: _svg_static(grid, block, density, sink, q.device))
    key = ("svg-rows", grid, block, float(density), bool(sink), int(samples), str(q.device))
    rows, m_sp, m_tm = _cached(key, lambda: _svg_rows(grid, block, density, sink, samples, pos))
    if SVG_KERNEL and _fused(qb) and _produce.sampled_supported(qb, kb, vb):
        rows32, bits = _cached(key + ("bits",), lambda: (
            rows.to(torch.int32), _produce.pack_planes(torch.stack([m_sp, m_tm]))))
        err = _produce.sampled_errors(qb, kb, vb, rows32, bits, _scale(scale, d), "bhsd")
        err_sp, err_tm = err[..., 0], err[..., 1]
    else:
        planes = _cached(key + (vb.dtype,), lambda: torch.stack(
            [torch.ones_like(m_sp), m_sp, m_tm]).to(vb.dtype))
        err_sp, err_tm = _svg_errors(qb, kb, vb, rows, planes, _scale(scale, d))
    temporal = err_tm < err_sp
    mask = torch.where(temporal[:, :, None, None], tm, sp)
    ident = _cached(("arange", s, str(q.device)), lambda: torch.arange(s, device=q.device))
    order = TokenOrder(torch.where(temporal[..., None], perm, ident),
                       torch.where(temporal[..., None], pos, ident), "svg-per-head")
    return MethodMask(mask, (block, block), order, {"temporal": temporal})


def _stride_groups(x, stride, reverse):
    """[B, H, S, D] -> [B, H, ceil(S / stride), stride x D]: each run of
    `stride` tokens as one vector (the last run zero-padded), the tokens of
    a run in reverse order when reverse.  A view for contiguous x when
    nothing is reversed or padded, else one copy."""
    n = x.shape[2]
    if n % stride:
        x = torch.nn.functional.pad(x, (0, 0, 0, -n % stride))
    g = x.unflatten(2, (-1, stride))
    return (g.flip(3) if reverse else g).flatten(3)


def antidiagonal_scores(q, k, stride=8, block=128, layout="bhsd", scale=None, chunk=128):
    """XAttention's block scores [B, H, NQ, NK] (float32; float64 for float64
    q): for every query run i and key run j of `stride` tokens, the sum of
    the antidiagonal of their stride x stride score block,
    sum_m q[i S + S - 1 - m] . k[j S + m] * scale / S (S = stride; tokens
    past the end count as zero vectors), softmax over j for each i, then
    summed over the runs of each (query block, key block) pair of `block`
    tokens (the last block ragged).  Each row sums to the query block's run
    count.  As XAttention's reference code: the query runs reversed and the
    key runs as they lie, one matmul (scale applied in its epilogue, the
    scores in q's dtype), softmax in float32.
    Cost: one copy of q (the reversal) and of k where its run count is
    padded to a multiple of 8, then per `chunk` query blocks one
    matmul of (chunk x block / S) x (S_k / S) x (S x D) per head and a
    softmax and block sum over its scores: 1/S of dense attention's QK^T
    flops, and at Wan 480p (stride 8) about 400 MB of scores a chunk."""
    qb, kb = _bhsd(q, layout), _bhsd(k, layout)
    b, h, n, d = qb.shape
    stride, block, chunk = int(stride), int(block), int(chunk)
    if stride < 1 or block < stride or block % stride:
        raise ValueError(f"XAttention block {block} must be a positive multiple of the stride {stride}")
    if chunk < 1:
        raise ValueError(f"XAttention chunk must be at least one query block, got {chunk}")
    r = block // stride  # runs per block
    qg = _stride_groups(qb, stride, True)
    kg = _stride_groups(kb, stride, False)
    alpha = _scale(scale, d) / stride
    gq, gk = qg.shape[2], kg.shape[2]
    # The scores' rows are padded to a multiple of 8 key runs (16 bytes of
    # bf16): Wan 480p has 4095 runs at stride 8, an odd leading dimension
    # for which cuBLAS took an unaligned kernel at a sixth of the speed.
    # The padded runs (zero vectors) get -inf before the softmax: weight 0.
    pad = -gk % 8
    if pad:
        kg = torch.nn.functional.pad(kg, (0, 0, 0, pad))
    kt = _kv_heads(kg, h).flatten(0, 1).transpose(1, 2)
    parts = []
    for r0 in range(0, gq, chunk * r):
        qc = qg[:, :, r0:r0 + chunk * r].flatten(0, 1)
        # beta=0: the uninitialised input is ignored; alpha = scale / stride.
        s = torch.baddbmm(qc.new_empty(()).expand(1, 1, 1), qc, kt, beta=0, alpha=alpha)
        if pad:
            s[..., gk:] = float("-inf")
        p = torch.softmax(s, dim=-1, dtype=_acc(qb)).unflatten(0, (b, h))
        parts.append(_segsums(p[..., :gk], (2, 3), (r, r)))
    return _cat(parts, 2)


def xattention(q, k, grid, tau=0.9, stride=8, block=128, layout="bhsd", scale=None,
               chunk=128):
    """XAttention on frame-major blocks of `block` tokens (128): the
    antidiagonal block scores at `stride` (8 or 16; antidiagonal_scores),
    and per row the fewest blocks, in decreasing score, whose sum reaches
    tau (0.9-0.95) of the row's, at least one (the corpus's
    tsr_corpus_xattn, the CDF rule).  Geometry: uniform (block, block);
    order: frame-major.  info["scores"]: the block scores.
    Cost: antidiagonal_scores (a matmul at 1/stride of dense QK^T), then a
    sort per row of blocks."""
    _grid(grid, _bhsd(q, layout).shape[2])
    if not 0.0 < float(tau) <= 1.0:
        raise ValueError(f"XAttention threshold tau must be in (0, 1], got {tau}")
    score = antidiagonal_scores(q, k, stride, block, layout, scale, chunk)
    return MethodMask(cdf_rule(score, tau, 1), (int(block), int(block)), TokenOrder(),
                      {"scores": score})


def attend(mm, q, k, v, layout="bhsd", **kw):
    """tessera.attention with a MethodMask: q, k, v permuted into the method's
    order, attention over its mask and geometry, the output put back in
    frame-major order.  kw goes to tessera.attention (context, scale, ...)."""
    import tessera
    o = mm.order
    out = tessera.attention(o.permute(q, layout), o.permute(k, layout), o.permute(v, layout),
                            mm.mask, block=mm.block, layout=layout, **kw)
    return o.unpermute(out, layout)
