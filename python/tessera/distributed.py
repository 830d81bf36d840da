"""tessera.distributed: sequence-parallel block-sparse attention on torch.distributed.

A video DiT that outgrows one GPU shards its sequence over ranks (xDiT,
FastVideo, diffusers' context parallelism).  attention() runs Tessera inside
that machinery, on the caller's process group or device mesh, with no
scheduler of its own:

    import tessera.distributed as td
    # q, k, v: this rank's chunk of the sequence; block_mask: the whole mask
    o = td.attention(q, k, v, block_mask, block=(128, 128), group=pg,
                     ulysses_degree=2, ring_degree=1)

Each rank passes its own chunk of q, k and v ([B, H, S_rank, D] or
[B, S_rank, H, D]) and the same whole block mask ([H, NQ, NK] or
[B, H, NQ, NK], over the whole sequence, block=(bq, bk) or
(q_sizes, k_sizes) as for tessera.attention, on every rank); it gets its
chunk of the output back (and of lse, float32 [B, Hq, S_rank], when lse= is
given).  Rank (ring index g, Ulysses index u) holds chunk g * U + u of the
sequence: ring-major, as diffusers' flattened ("ring", "ulysses") mesh and
xDiT's ulysses-low layout shard it.

- Ulysses (degree U): one exchange turns the sequence-sharded q, k, v into
  head-sharded ones (Hq / U query heads over the group's whole sequence),
  Tessera runs on them with the mask's slice of those heads (a view of the
  mask where it lies: a CUDA mask never leaves the GPU), and a second
  exchange brings the output back.  GQA: every rank receives the key/value
  heads its query heads read; when Hq / U query heads do not map onto whole
  groups of key heads (MQA with U > Hkv, say) the key heads are repeated to
  match the query heads.
- Ring (degree R): each rank keeps its query chunk and receives the other
  ranks' key/value chunks hop by hop (hop t: from the rank t places before
  it in the ring, sent by the rank that holds it rather than forwarded by
  each rank between, so a chunk nobody further needs is not moved; each
  hop still moves one chunk in and one out per rank; the next hop's
  transfer is posted before this hop's launch);
  every hop runs Tessera on the cross-length block mask of (query chunk, key
  chunk) with lse, and the partial outputs merge by log-sum-exp in float32.
  Chunk boundaries need not fall on block boundaries: a block that
  straddles one is split into two blocks, each keeping the block's mask
  row or column (the geometry is sliced per chunk).  A hop whose mask slice
  selects nothing is skipped: no launch, and no transfer (its sender knows
  too).  Deciding that is a host decision: see hops= below.
- Hybrid: both, U x R ranks (Ulysses inside each ring position's group, as
  xDiT's USP and diffusers' unified attention do).

hops= (the ring's skip decision): None computes the table of chunk pairs
that select anything from the mask: for a CPU mask that is host work alone;
for a CUDA mask it is one small reduction on the GPU (prefix sums over the
[NQ, NK] block mask) and a copy of U x R x R booleans to the host, which
waits for the current stream (a synchronisation per call; about the cost of
one small kernel when the stream is idle, the whole queue's drain when it is
not).  To avoid it, compute hop_table() once for a mask that is reused (over
layers, heads or steps) and pass it, or pass hops="all": every hop runs (a
hop with an empty mask still launches and computes nothing), no
synchronisation.

The diffusers wiring calls attention_parallel_config(q, k, v, block_mask,
parallel_config, block=...), which reads the ring and Ulysses degrees and
the mesh from diffusers' ParallelConfig (or its ContextParallelConfig).

chunked_attention() runs the ring's per-hop slicing, skipping and merging
in one process over the chunks of a whole sequence (no communication): the
one-GPU check of the merge, and a reference for the distributed paths.

Requirements: seq_q == seq_k (self-attention over the sharded sequence,
keys sharded as the queries); Hq divisible by U; every rank gives the same
mask, block, chunks and scale (the skip decisions are made on every rank
from the same table, so a rank with another mask would wait forever).
"""
import bisect

import torch
import torch.distributed as dist

import tessera

__all__ = ["attention", "attention_parallel_config", "chunked_attention", "hop_table",
           "chunk_sizes", "merge_partial", "Topology", "last_stats"]

_stats = {}


def last_stats():
    """What this rank's latest attention()/chunked_attention() call did:
    hops (the ring hops it had: R per query chunk), launched (Tessera
    calls), skipped (hops with an empty mask slice: no launch), received and
    sent (key/value chunks moved by the ring), ulysses (the Ulysses degree)."""
    return dict(_stats)


def chunk_sizes(seq, parts):
    """Token counts of torch.tensor_split(x, parts) along a sequence of seq
    tokens (the first seq % parts chunks one token longer): the ragged
    chunking of diffusers' "anything" modes."""
    base, extra = divmod(seq, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


# ---- topology --------------------------------------------------------------

class Topology:
    """Which global rank holds which chunk: grid[g][u] is the global rank at
    ring index g and Ulysses index u (chunk g * U + u); group carries the
    point-to-point messages (None: the default group)."""

    def __init__(self, grid, group=None):
        self.grid = [list(map(int, row)) for row in grid]
        self.ring, self.ulysses = len(self.grid), len(self.grid[0])
        if any(len(row) != self.ulysses for row in self.grid):
            raise ValueError(f"rank grid is not rectangular: {self.grid}")
        self.group = group
        me = dist.get_rank()
        where = [(g, u) for g, row in enumerate(self.grid) for u, r in enumerate(row) if r == me]
        if len(where) != 1:
            raise ValueError(f"global rank {me} is {len(where)} times in the rank grid {self.grid}")
        self.g, self.u = where[0]

    @classmethod
    def from_group(cls, group=None, ulysses_degree=None, ring_degree=None):
        """The group's ranks, in group order, ring-major: U defaults to the
        group size over R (R to 1 when neither is given)."""
        n = dist.get_world_size(group)
        ranks = [dist.get_global_rank(group, i) if group is not None else i for i in range(n)]
        u, r = _degrees(n, ulysses_degree, ring_degree)
        return cls([ranks[g * u:(g + 1) * u] for g in range(r)], group)

    @classmethod
    def from_mesh(cls, mesh, ulysses_degree=None, ring_degree=None):
        """A 2-D DeviceMesh with dimensions named "ring" and "ulysses" (any
        order; else taken as (ring, ulysses)), or a 1-D one split by the
        degrees as from_group does."""
        ranks = mesh.mesh
        if ranks.dim() == 1:
            u, r = _degrees(ranks.numel(), ulysses_degree, ring_degree)
            return cls(ranks.reshape(r, u).tolist(), mesh.get_group())
        if ranks.dim() != 2:
            raise ValueError(f"expected a 1-D or 2-D device mesh, got {ranks.dim()} dimensions "
                             "(slice it: mesh['ring', 'ulysses'])")
        names = tuple(mesh.mesh_dim_names or ())
        if names == ("ulysses", "ring"):
            ranks = ranks.t()
        grid = ranks.tolist()
        for want, got in ((ulysses_degree, len(grid[0])), (ring_degree, len(grid))):
            if want is not None and want != got:
                raise ValueError(f"degree {want} given, the mesh has {got}")
        return cls(grid, None)


def _degrees(n, ulysses_degree, ring_degree):
    u = ulysses_degree or (n // ring_degree if ring_degree else n)
    r = ring_degree or n // u
    if u < 1 or r < 1 or u * r != n:
        raise ValueError(f"ulysses_degree {ulysses_degree} x ring_degree {ring_degree} "
                         f"does not make the group's {n} ranks")
    return u, r


# ---- geometry: block sizes, sliced per chunk ---------------------------------

def _full_sizes(block, seq):
    """(q_sizes, k_sizes) of the whole sequence's geometry, and whether it
    is uniform (bq, bk) (the last block ragged)."""
    if not tessera._is_variable(block):
        out = []
        for b in block:
            b = int(b)
            out.append([b] * (seq // b) + ([seq % b] if seq % b else []))
        return out, True
    out = [[int(x) for x in (s.tolist() if hasattr(s, "tolist") else s)] for s in block]
    for name, sizes in zip(("query", "key"), out):
        if sum(sizes) != seq:
            raise ValueError(f"the {name} block sizes add up to {sum(sizes)} tokens, "
                             f"the sequence has {seq}")
    return out, False


def _slice_sizes(sizes, starts, a, b):
    """The blocks covering tokens [a, b): (index of the first, their sizes
    cut to [a, b)) -- a block straddling a or b becomes its part inside."""
    i = bisect.bisect_right(starts, a) - 1
    first, pieces = i, []
    while i < len(sizes) and starts[i] < b:
        pieces.append(min(starts[i] + sizes[i], b) - max(starts[i], a))
        i += 1
    return first, pieces


class _Chunks:
    """A whole-sequence geometry cut at chunk boundaries: for each chunk the
    range of mask rows (query side) and columns (key side) it touches, and
    the sizes of its blocks, straddling blocks cut in two."""

    def __init__(self, block, seq, chunks):
        if sum(chunks) != seq or min(chunks) < 1:
            raise ValueError(f"chunks {list(chunks)} do not cut the {seq}-token sequence "
                             "into non-empty parts")
        (qs, ks), self.uniform = _full_sizes(block, seq)
        self.block = tuple(int(b) for b in block) if self.uniform else None
        self.nq, self.nk = len(qs), len(ks)
        bounds = [0]
        for c in chunks:
            bounds.append(bounds[-1] + c)
        self.bounds = bounds
        self.q, self.k = ([_slice_sizes(s, _starts(s), bounds[i], bounds[i + 1])
                           for i in range(len(chunks))] for s in (qs, ks))

    def rows(self, i):
        return self.q[i][0], len(self.q[i][1])

    def cols(self, j):
        return self.k[j][0], len(self.k[j][1])

    def block_arg(self, i, j):
        """block= for tessera.attention on (query chunk i, key chunk j):
        (bq, bk) when both sides are the uniform geometry of their chunk
        (every block whole but the last), else their sizes."""
        qp, kp = self.q[i][1], self.k[j][1]
        if self.uniform:
            bq, bk = self.block
            if all(x == bq for x in qp[:-1]) and all(x == bk for x in kp[:-1]):
                return (bq, bk)
        return (tuple(qp), tuple(kp))

    def mask(self, m4, i, j):
        """The mask slice of (query chunk i, key chunk j): a view of m4
        [Bm, Hm, NQ, NK] (made contiguous where it lies)."""
        (r0, nr), (c0, nc) = self.rows(i), self.cols(j)
        return m4.narrow(2, r0, nr).narrow(3, c0, nc).contiguous()


def _starts(sizes):
    s, out = 0, []
    for x in sizes:
        out.append(s)
        s += x
    return out


def _mask4(block_mask, nq, nk):
    m = block_mask if block_mask.dim() == 4 else block_mask.unsqueeze(0)
    if m.dim() != 4 or m.shape[2] != nq or m.shape[3] != nk:
        raise ValueError(f"block mask must be [H, {nq}, {nk}] or [B, H, {nq}, {nk}] over the "
                         f"whole sequence, got {tuple(block_mask.shape)}")
    return m


def _head_slice(m4, hq, u, nu):
    """The mask planes of Ulysses rank u's Hq / U query heads (one plane
    shared by every head stays as it is)."""
    if m4.shape[1] == 1 or nu == 1:
        return m4
    if m4.shape[1] != hq:
        raise ValueError(f"block mask has {m4.shape[1]} heads, the queries {hq}")
    hp = hq // nu
    return m4.narrow(1, u * hp, hp)


def _pair_table(m4, ch, nchunks):
    """[nchunks, nchunks] bool (where m4 lies): whether the mask slice of
    (query chunk i, key chunk j) selects anything, from 2-D prefix sums of
    the block mask reduced over batch and heads."""
    plane = m4.to(torch.bool).any(dim=1).any(dim=0).to(torch.int32)
    pre = torch.nn.functional.pad(plane.cumsum(0).cumsum(1), (1, 0, 1, 0))
    r0 = torch.tensor([ch.rows(i)[0] for i in range(nchunks)], device=m4.device)
    r1 = r0 + torch.tensor([ch.rows(i)[1] for i in range(nchunks)], device=m4.device)
    c0 = torch.tensor([ch.cols(j)[0] for j in range(nchunks)], device=m4.device)
    c1 = c0 + torch.tensor([ch.cols(j)[1] for j in range(nchunks)], device=m4.device)
    ri, ci = r1[:, None], c1[None, :]
    total = pre[ri, ci] - pre[r0[:, None], ci] - pre[ri, c0[None, :]] + pre[r0[:, None], c0[None, :]]
    return total > 0


def hop_table(block_mask, block, seq, chunks=None, ulysses_degree=1, ring_degree=1):
    """[U, R, R] bool on the host: entry [u, g, j] says whether ring hop
    (query chunk g, key chunk j) of Ulysses rank u selects anything.  chunks:
    the token counts of every rank's chunk (default: equal).  Pass the result
    as hops= to attention() with the same arguments to skip without a
    synchronisation; the table is as good as the mask it came from."""
    u, r = ulysses_degree, ring_degree
    chunks = list(chunks) if chunks is not None else [seq // (u * r)] * (u * r)
    ch = _Chunks(block, seq, _ring_chunks(chunks, u, r))
    m4 = _mask4(block_mask, ch.nq, ch.nk)
    hq = m4.shape[1] if m4.shape[1] > 1 else u
    return torch.stack([_pair_table(_head_slice(m4, hq, i, u), ch, r) for i in range(u)]).cpu()


def _ring_chunks(chunks, u, r):
    """The ring's chunks: each Ulysses group's chunks together."""
    if len(chunks) != u * r:
        raise ValueError(f"{len(chunks)} chunk sizes for {u * r} ranks")
    return [sum(chunks[g * u:(g + 1) * u]) for g in range(r)]


# ---- the log-sum-exp merge ---------------------------------------------------

def merge_partial(out_acc, lse_acc, out_t, lse_t):
    """Merges a partial result (out_t [B, H, S, D], lse_t [B, H, S]) into
    the float32 accumulators in place: softmax over the union of the two
    key sets.  Rows empty in both stay 0 with lse -inf."""
    lse_t = lse_t.to(torch.float32)
    m = torch.maximum(lse_acc, lse_t)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)  # both empty: no -inf - -inf
    wa, wb = torch.exp(lse_acc - m), torch.exp(lse_t - m)
    s = wa + wb
    inv = torch.where(s > 0, 1.0 / s, torch.zeros_like(s))
    out_acc.mul_((wa * inv).unsqueeze(-1)).add_(out_t.to(torch.float32) * (wb * inv).unsqueeze(-1))
    lse_acc.copy_(m + torch.log(s))


class _Merge:
    """The hops of one query chunk: the first launched hop is written as
    it is, the next ones merged into float32 accumulators."""

    def __init__(self, q, nheads, want_lse):
        self.q, self.want_lse = q, want_lse
        b, _, s, d = q.shape
        self.shape = (b, nheads, s, d)
        self.out = self.lse = None
        self.hops = 0

    def add(self, k, v, mask, block, scale, kw):
        # return_lse (not lse=): the torch op's path, which torch.compile traces
        o, lse = tessera.attention(self.q, k, v, mask, block=block, layout="bhsd", scale=scale,
                                   return_lse=True, **kw)
        if self.out is None:
            self.out, self.lse = o.to(torch.float32), lse
        else:
            merge_partial(self.out, self.lse, o, lse)
        self.hops += 1

    def result(self, dtype):
        """(out in dtype, lse float32 or None); zeros and -inf when no hop ran."""
        if self.out is None:
            out = torch.zeros(self.shape, dtype=dtype, device=self.q.device)
            lse = torch.full(self.shape[:3], float("-inf"), dtype=torch.float32, device=self.q.device)
            return out, lse
        return self.out.to(dtype), self.lse


# ---- layouts ---------------------------------------------------------------

def _bhsd(t, layout):
    """A [B, H, S, D] view of a tensor in layout ("bhsd" or "bshd")."""
    if t.dim() != 4:
        raise ValueError(f"expected a 4-D tensor, got shape {tuple(t.shape)}")
    if layout == "bhsd":
        return t
    if layout == "bshd":
        return t.transpose(1, 2)
    raise ValueError(f"unknown layout '{layout}' (bhsd or bshd)")


def _outputs(q4, layout, out, lse):
    """out (in the caller's layout, as a [B, H, S, D] view) and lse, checked."""
    if out is None:
        out = torch.empty_like(q4.transpose(1, 2) if layout == "bshd" else q4)
    o4 = _bhsd(out, layout)
    if o4.shape != q4.shape:
        raise ValueError(f"out has shape {tuple(out.shape)}, q {tuple(q4.shape)} ({layout})")
    if lse is not None and (lse.dtype != torch.float32 or tuple(lse.shape) != tuple(q4.shape[:3])):
        raise ValueError(f"lse must be float32 [{', '.join(map(str, q4.shape[:3]))}], "
                         f"got {lse.dtype} {tuple(lse.shape)}")
    return out, o4


# ---- one process over the chunks ----------------------------------------------

def chunked_attention(q, k, v, block_mask, block=(128, 128), chunks=None, layout="bhsd",
                      scale=None, out=None, lse=None, hops=None, **kw):
    """Attention over the whole sequence, run as the ring runs it in one
    process: for each query chunk, each key chunk's hop (the cross-length
    mask slice, straddling blocks cut), empty hops skipped, partial results
    merged by log-sum-exp.  chunks: token counts (default: two halves).
    hops: None (computed from the mask), "all" or a [R, R] host table."""
    q4, k4, v4 = (_bhsd(t, layout) for t in (q, k, v))
    b, hq, s, d = q4.shape
    chunks = list(chunks) if chunks is not None else chunk_sizes(s, 2)
    ch = _Chunks(block, s, chunks)
    m4 = _mask4(block_mask, ch.nq, ch.nk)
    n = len(chunks)
    table = _host_table(hops, lambda: _pair_table(m4, ch, n), (n, n))
    out, o4 = _outputs(q4, layout, out, lse)
    bd = ch.bounds
    launched = 0
    for i in range(n):
        acc = _Merge(q4[:, :, bd[i]:bd[i + 1]], hq, lse is not None)
        for t in range(n):
            j = (i - t) % n
            if table[i][j]:
                acc.add(k4[:, :, bd[j]:bd[j + 1]], v4[:, :, bd[j]:bd[j + 1]], ch.mask(m4, i, j),
                        ch.block_arg(i, j), scale, kw)
        o, ls = acc.result(q4.dtype)
        o4[:, :, bd[i]:bd[i + 1]].copy_(o)
        if lse is not None:
            lse[:, :, bd[i]:bd[i + 1]].copy_(ls)
        launched += acc.hops
    _stats.clear()
    _stats.update(hops=n * n, launched=launched, skipped=n * n - launched, received=0, sent=0,
                  ulysses=1)
    return out


def _host_table(hops, compute, shape):
    """The skip table as nested host lists: computed (one device-to-host
    copy for a CUDA mask), every hop ("all"), or the caller's."""
    if hops is None:
        t = compute().cpu()
    elif isinstance(hops, str):
        if hops != "all":
            raise ValueError(f"hops must be None, 'all' or a table, got '{hops}'")
        return [[True] * shape[1] for _ in range(shape[0])]
    else:
        t = torch.as_tensor(hops).to(torch.bool).cpu()
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"hop table has shape {tuple(t.shape)}, expected {tuple(shape)}")
    return t.tolist()


# ---- point-to-point ----------------------------------------------------------

def _exchange(sends, recvs, group):
    """Posts sends [(global rank, tensor, tag)] and receives alike; returns
    the requests.  One batch: NCCL groups it, gloo posts each."""
    ops = [dist.P2POp(dist.isend, t, peer, group, tag) for peer, t, tag in sends]
    ops += [dist.P2POp(dist.irecv, t, peer, group, tag) for peer, t, tag in recvs]
    return dist.batch_isend_irecv(ops) if ops else []


def _wait(reqs):
    for r in reqs:
        r.wait()


# ---- Ulysses -----------------------------------------------------------------

def _kv_heads(hq, hkv, u, nu):
    """The key/value heads Ulysses rank u needs for its Hq / U query heads:
    (index tensor or (start, count), local count).  Whole GQA groups give a
    range; otherwise (several ranks per key head, or groups cut by the
    split) one key head per query head, repeated to match."""
    hp, g = hq // nu, hq // hkv
    need = [(u * hp + i) // g for i in range(hp)]
    distinct = sorted(set(need))
    n = len(distinct)
    if hp % n == 0 and all(need[i] == distinct[i // (hp // n)] for i in range(hp)):
        return (distinct[0], n), n
    return need, hp


def _take_heads(t, sel):
    if isinstance(sel, tuple):
        return t.narrow(1, sel[0], sel[1])
    return t.index_select(1, torch.tensor(sel, device=t.device))


def _ulysses_in(topo, q4, k4, v4, chunks):
    """Sequence-sharded -> head-sharded: this rank's Hq / U query heads (and
    the key heads they read) over its Ulysses group's whole sequence."""
    b, hq, _, d = q4.shape
    hkv = k4.shape[1]
    nu, me, g = topo.ulysses, topo.u, topo.g
    hp = hq // nu
    mine = chunks[g * nu:(g + 1) * nu]
    _, nkv_me = _kv_heads(hq, hkv, me, nu)
    sends, recvs, parts = [], [], [None] * nu
    for p in range(nu):
        sel, _ = _kv_heads(hq, hkv, p, nu)
        pieces = [q4.narrow(1, p * hp, hp), _take_heads(k4, sel), _take_heads(v4, sel)]
        packed = torch.cat([x.reshape(-1) for x in pieces])
        if p == me:
            parts[p] = packed
        else:
            sends.append((topo.grid[g][p], packed, 1))
            parts[p] = torch.empty(b * mine[p] * d * (hp + 2 * nkv_me), dtype=q4.dtype, device=q4.device)
            recvs.append((topo.grid[g][p], parts[p], 1))
    _wait(_exchange(sends, recvs, topo.group))
    qs, ks, vs = [], [], []
    for p in range(nu):
        nq, nk = b * hp * mine[p] * d, b * nkv_me * mine[p] * d
        buf = parts[p]
        qs.append(buf[:nq].view(b, hp, mine[p], d))
        ks.append(buf[nq:nq + nk].view(b, nkv_me, mine[p], d))
        vs.append(buf[nq + nk:nq + 2 * nk].view(b, nkv_me, mine[p], d))
    return torch.cat(qs, 2), torch.cat(ks, 2), torch.cat(vs, 2)


def _ulysses_out(topo, o_g, lse_g, o4, lse, chunks):
    """Head-sharded -> sequence-sharded: each Ulysses peer gets its chunk of
    this rank's heads, this rank its chunk of every peer's heads."""
    b, hp, _, d = o_g.shape
    nu, me, g = topo.ulysses, topo.u, topo.g
    mine = chunks[g * nu:(g + 1) * nu]
    off = _starts(mine)
    s_me = mine[me]
    sends, recvs, got = [], [], {}
    for p in range(nu):
        piece = o_g.narrow(2, off[p], mine[p])
        lpiece = lse_g.narrow(2, off[p], mine[p]) if lse is not None else None
        if p == me:
            got[p] = (piece, lpiece)
            continue
        peer = topo.grid[g][p]
        sends.append((peer, piece.contiguous(), 2))
        ro = torch.empty((b, hp, s_me, d), dtype=o_g.dtype, device=o_g.device)
        recvs.append((peer, ro, 2))
        rl = None
        if lse is not None:
            sends.append((peer, lpiece.contiguous(), 3))
            rl = torch.empty((b, hp, s_me), dtype=torch.float32, device=o_g.device)
            recvs.append((peer, rl, 3))
        got[p] = (ro, rl)
    _wait(_exchange(sends, recvs, topo.group))
    for p in range(nu):
        o4[:, p * hp:(p + 1) * hp].copy_(got[p][0])
        if lse is not None:
            lse[:, p * hp:(p + 1) * hp].copy_(got[p][1])


# ---- ring --------------------------------------------------------------------

def _ring(topo, q, k, v, m4, ch, table, scale, want_lse, kw):
    """This rank's query chunk against every ring position's key chunk.
    Hop t takes key chunk (g - t) mod R straight from the rank holding it;
    a pair the table marks empty is neither sent nor launched.  The next
    hop's transfer is posted before this hop's launch (double buffering)."""
    nr, g, u = topo.ring, topo.g, topo.u
    b, hkv, _, d = k.shape
    kv = torch.cat([k.reshape(-1), v.reshape(-1)]) if nr > 1 else None
    acc = _Merge(q, q.shape[1], want_lse)
    sent = received = 0

    def post(t):
        nonlocal sent, received
        src, dst = (g - t) % nr, (g + t) % nr
        sends, recvs, buf = [], [], None
        if table[dst][g]:
            sends.append((topo.grid[dst][u], kv, 4))
            sent += 1
        if table[g][src]:
            n = ch.bounds[src + 1] - ch.bounds[src]
            buf = torch.empty(2 * b * hkv * n * d, dtype=k.dtype, device=k.device)
            recvs.append((topo.grid[src][u], buf, 4))
            received += 1
        return _exchange(sends, recvs, topo.group), buf

    pending = post(1) if nr > 1 else None
    for t in range(nr):
        j = (g - t) % nr
        if t == 0:
            kj, vj = k, v
        else:
            reqs, buf = pending
            _wait(reqs)
            if buf is not None:
                n = ch.bounds[j + 1] - ch.bounds[j]
                half = b * hkv * n * d
                kj, vj = buf[:half].view(b, hkv, n, d), buf[half:].view(b, hkv, n, d)
        if 0 < t < nr - 1:  # hop 1 went out before hop 0's launch
            pending = post(t + 1)
        if table[g][j]:
            acc.add(kj, vj, ch.mask(m4, g, j), ch.block_arg(g, j), scale, kw)
    return acc, sent, received


# ---- the entry point -----------------------------------------------------------

def attention(q, k, v, block_mask, block=(128, 128), layout="bhsd", scale=None, out=None,
              lse=None, group=None, mesh=None, ulysses_degree=None, ring_degree=None,
              chunks=None, hops=None, **kw):
    """Sequence-parallel tessera.attention: this rank's chunk of q, k, v in,
    its chunk of the output out (and of lse).  group (a process group, None
    for the default) or mesh (a DeviceMesh) with the Ulysses and ring
    degrees (defaults: Ulysses over every rank).  chunks: the token counts
    of every rank's chunk, in chunk order (default: all equal to this
    rank's; "gather" asks the ranks: one small collective and a host wait).
    hops: the ring's skip table (module doc).  Other keywords go to
    tessera.attention (context, select, tile, ...)."""
    topo = (Topology.from_mesh(mesh, ulysses_degree, ring_degree) if mesh is not None
            else Topology.from_group(group, ulysses_degree, ring_degree))
    nu, nr = topo.ulysses, topo.ring
    q4, k4, v4 = (_bhsd(t, layout) for t in (q, k, v))
    b, hq, s_me, d = q4.shape
    hkv = k4.shape[1]
    if k4.shape[2] != s_me or v4.shape != k4.shape:
        raise ValueError(f"q, k, v chunks disagree: {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)} ({layout}; keys are sharded as the queries)")
    if hq % nu or hq % hkv:
        raise ValueError(f"{hq} query heads do not split over Ulysses degree {nu} "
                         f"with {hkv} key heads")
    chunks = _chunk_list(chunks, s_me, nu * nr, topo)
    if chunks[topo.g * nu + topo.u] != s_me:
        raise ValueError(f"this rank's chunk has {s_me} tokens, chunks[{topo.g * nu + topo.u}] "
                         f"says {chunks[topo.g * nu + topo.u]}")
    seq = sum(chunks)
    ch = _Chunks(block, seq, _ring_chunks(chunks, nu, nr))
    m4 = _head_slice(_mask4(block_mask, ch.nq, ch.nk), hq, topo.u, nu)
    out, o4 = _outputs(q4, layout, out, lse)

    if nu > 1:
        qg, kg, vg = _ulysses_in(topo, q4, k4, v4, chunks)
    else:
        qg, kg, vg = q4, k4, v4
    want_lse = lse is not None
    if nr == 1:  # Ulysses alone: one launch over the whole sequence
        o_g, lse_g = tessera.attention(qg, kg, vg, m4, block=block, layout="bhsd", scale=scale,
                                       return_lse=True, **kw)
        launched, sent, received, table_hops = 1, 0, 0, 1
    else:
        table = _host_table(_own_table(hops, topo), lambda: _pair_table(m4, ch, nr), (nr, nr))
        acc, sent, received = _ring(topo, qg, kg, vg, m4, ch, table, scale, want_lse, kw)
        o_g, lse_g = acc.result(q4.dtype)
        launched, table_hops = acc.hops, nr
    if nu > 1:
        _ulysses_out(topo, o_g, lse_g, o4, lse, chunks)
    else:
        o4.copy_(o_g)
        if want_lse:
            lse.copy_(lse_g)
    _stats.clear()
    _stats.update(hops=table_hops, launched=launched, skipped=table_hops - launched,
                  received=received, sent=sent, ulysses=nu)
    return out


def _own_table(hops, topo):
    """This rank's [R, R] slice of a [U, R, R] table (a [R, R] one is taken
    as it is when U = 1)."""
    if hops is None or isinstance(hops, str):
        return hops
    t = torch.as_tensor(hops)
    if t.dim() == 3:
        return t[topo.u]
    if topo.ulysses != 1:
        raise ValueError(f"hops must be [U, R, R] with Ulysses degree {topo.ulysses}")
    return t


def _chunk_list(chunks, s_me, n, topo):
    if chunks is None:
        return [s_me] * n
    if isinstance(chunks, str):
        if chunks != "gather":
            raise ValueError(f"chunks must be None, 'gather' or a list, got '{chunks}'")
        return _gather_sizes(s_me, n, topo)
    chunks = [int(c) for c in chunks]
    if len(chunks) != n:
        raise ValueError(f"{len(chunks)} chunk sizes for {n} ranks")
    return chunks


def _gather_sizes(s_me, n, topo):
    """Every rank's chunk length, in chunk order (one all-gather on the
    group, then a host wait)."""
    dev = torch.device("cuda", torch.cuda.current_device()) if (
        dist.get_backend(topo.group) == "nccl") else torch.device("cpu")
    mine = torch.tensor([s_me], dtype=torch.int64, device=dev)
    got = [torch.empty_like(mine) for _ in range(dist.get_world_size(topo.group))]
    dist.all_gather(got, mine, group=topo.group)
    by_rank = {dist.get_global_rank(topo.group, i) if topo.group is not None else i: int(x)
               for i, x in enumerate(got)}
    return [by_rank[r] for row in topo.grid for r in row]


# ---- diffusers ---------------------------------------------------------------

def attention_parallel_config(q, k, v, block_mask, parallel_config, block=(128, 128),
                              layout="bshd", **kw):
    """attention() with diffusers' parallel_config (a ParallelConfig, or its
    context_parallel_config), as dispatch_attention_fn receives it: its
    ("ring", "ulysses") mesh and degrees.  diffusers shards the sequence over
    the flattened mesh in equal chunks; its ulysses_anything/ring_anything
    modes shard with tensor_split, whose sizes are gathered (chunks=
    overrides).  Layout defaults to diffusers' [B, S, H, D]."""
    cp = getattr(parallel_config, "context_parallel_config", parallel_config)
    mesh = cp._mesh
    if mesh is None:
        raise ValueError("the context parallel config is not set up (no mesh): "
                         "call enable_parallelism first")
    sub = mesh["ring", "ulysses"] if mesh.mesh.dim() > 2 or mesh.mesh_dim_names != ("ring", "ulysses") \
        else mesh
    if "chunks" not in kw and (getattr(cp, "ulysses_anything", False) or getattr(cp, "ring_anything", False)):
        kw["chunks"] = "gather"
    return attention(q, k, v, block_mask, block=block, layout=layout, mesh=sub,
                     ulysses_degree=cp.ulysses_degree, ring_degree=cp.ring_degree, **kw)
