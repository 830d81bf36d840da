"""tessera.produce: the fused stages of tessera.methods' mask producers on
CUDA tensors, as torch ops over libtessera's kernels (tsr_produce_pool,
tsr_produce_select; templates/produce_gpu.cuh):

    tessera::pool_tiles(x, grid, tile, layout, sq) -> (means, mean |x|^2)
        x [B, H, S, D] (bhsd) or [B, S, H, D] (bshd), any float dtype,
        channels contiguous: the mean over each tile of the (T, H, W) grid
        (boundary tiles ragged) in raster tile order, float32 (float64 for
        float64 x), and with sq the tiles' mean squared norm ([B, H, 0]
        without).  One read of x, one launch.
    tessera::pool_pair(x, y, grid, tile, runs, layout, sq, order=None)
            -> (means of x, of y, mean |x|^2, mean |y|^2)
        pool_tiles of two tensors (q and k: y's heads may be fewer) in one
        launch.  runs, [tiles, size, tiles, size, ...] (at most 8 pairs):
        x and y are already in tile order (tessera.methods.tile_order's),
        each run that many consecutive tiles of that many tokens, outputs
        in that order, grid and tile unused; [] for the grid's tiles.
        order (with runs []): int32 [tiles] on x's device, output tile i
        the grid's raster tile order[i] (tile_order's order.tiles32: the
        cube order without a gather after).
    tessera::select_blocks(pq, pk, scale, rule, k, tau, min_keep) -> mask
        pooled q [B, H, NQ, D] and k [B, HK, NK, D] (float32 or float64):
        the corpus's rule on softmax(pq pk^T * scale) per row, bool
        [B, H, NQ, NK]: TOPK keeps the k largest (ties to the lower index),
        CDF the fewest reaching tau of the row's sum, at least min_keep.
        Scores, softmax and rule in one launch, nothing of NQ x NK written
        but the mask.
    tessera::sampled_errors(q, k, v, rows, planes, scale, layout) -> errors
        Sparse VideoGen's online profile: q, k, v [B, H, S, D] (bhsd) or
        [B, S, H, D] (bshd), fp16 or bf16, D 64 or 128, as many key as
        query heads; rows int32 [samples] (query tokens); planes int32
        [2, samples, ceil(S / 32)], bit j % 32 of word j / 32 set where the
        pattern lets that row see key j (pack_planes).  float32 [B, H, 2]:
        per head, the mean over samples x D of each pattern's squared
        difference from the dense attention output of the sampled rows.
        Three launches (key chunks with three accumulators, their merge,
        the sum over rows), nothing of samples x S written; working space
        from torch's allocator.

All launch on the current stream without synchronising or allocating
inside the library (their outputs come from torch's allocator), so a CUDA
graph captures them; all have fake implementations, so torch.compile
traces them.  The CPU (and reference) path is tessera.methods' torch code.
"""
import ctypes
import math

import torch

import tessera

TOPK, CDF = 0, 1
# Query rows a select CTA takes (1-32, over 16 for the float32 radix select
# only; 0: libtessera's choice: 32 there, else 16 top-k, 8 CDF): a tuning
# knob for benchmarks, not part of the ops' results.
ROWS = 0
# The select's top-k search (tsr_select_args.kernel): 0 libtessera's choice
# (radix select), 1 the bitwise search, 2 the radix select reading pooled k
# transposed (transposed here, float32 top-k, dim a multiple of 16): for
# benchmarks, the same masks.
KERNEL = 0
# The pooling kernel (tsr_pool_args.kernel): 0 libtessera's choice (a warp a
# tile), 1 a CTA a tile (the previous kernel): for benchmarks, the same
# means within float32 rounding.
POOL_KERNEL = 0
# sampled_errors' key pipeline (tsr_sampled_args.stages): 0 libtessera's
# choice (3 stages where shared memory holds them), 2 or 3 to compare: the
# same errors, bit for bit.
SAMPLED_STAGES = 0
_DT = {torch.float32: tessera.DT_F32, torch.float16: tessera.DT_F16,
       torch.bfloat16: tessera.DT_BF16, torch.float64: tessera.DT_F64}


def _probe():
    try:
        return hasattr(tessera.library(), "tsr_produce_pool")
    except (tessera.TesseraError, OSError):
        return False


# Probed once, at import: available() then reads a plain bool, which
# torch.compile traces without a graph break (a ctypes lookup would break it).
_HAVE = _probe()


def available(x):
    """Whether the fused stages can serve x: a CUDA tensor of a float dtype
    and a libtessera that has them."""
    return _HAVE and isinstance(x, torch.Tensor) and x.is_cuda and x.dtype in _DT


def _tiles(grid, tile):
    return math.prod(-(-int(g) // int(t)) for g, t in zip(grid, tile))


def _acc(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _stream(dev):
    return ctypes.c_void_p(torch.cuda.current_stream(dev).cuda_stream)


def _as_bhsd(x, layout):
    if layout not in ("bhsd", "bshd"):
        raise ValueError(f"unknown layout '{layout}' (bhsd or bshd)")
    xb = x if layout == "bhsd" else x.transpose(1, 2)
    return xb if xb.stride(3) == 1 else xb.contiguous()


def _ntiles(grid, tile, runs):
    return sum(int(t) for t in runs[0::2]) if runs else _tiles(grid, tile)


def _outputs(xb, n, sq):
    b, h, _, d = xb.shape
    return (torch.empty(b, h, n, d, dtype=_acc(xb.dtype), device=xb.device),
            torch.empty(b, h, n if sq else 0, dtype=_acc(xb.dtype), device=xb.device))


def _pool_launch(xb, yb, grid, tile, runs, sq, order=None):
    """One tsr_produce_pool of xb (and yb, or None), both [B, H, S, D] views."""
    if len(runs) % 2 or len(runs) > 16:
        raise ValueError(f"runs must be (tiles, size) pairs, at most 8, got {list(runs)}")
    n = _ntiles(grid, tile, runs)
    if order is not None and (runs or order.dtype != torch.int32 or order.device != xb.device
                              or order.dim() != 1 or order.numel() != n or not order.is_contiguous()):
        raise ValueError(f"pool_pair: order must be a contiguous int32 [{n}] on {xb.device} with runs [], got "
                         f"{order.dtype} {tuple(order.shape)} on {order.device}, runs {list(runs)}")
    out, sqo = _outputs(xb, n, sq)
    b, h, s, d = xb.shape
    a = tessera._PoolArgs()
    a.x, a.dtype = xb.data_ptr(), _DT[xb.dtype]
    a.batch, a.heads, a.tokens, a.dim = b, h, s, d
    a.stride_b, a.stride_h, a.stride_s = xb.stride(0), xb.stride(1), xb.stride(2)
    if runs:
        a.runs = len(runs) // 2
        for i in range(a.runs):
            a.run_tiles[i], a.run_size[i] = int(runs[2 * i]), int(runs[2 * i + 1])
    else:
        a.grid[:], a.tile[:] = [int(g) for g in grid], [int(t) for t in tile]
    a.out, a.sq = out.data_ptr(), sqo.data_ptr() if sq else 0
    a.kernel = POOL_KERNEL
    a.order = order.data_ptr() if order is not None else 0
    res = [out, sqo]
    if yb is not None:
        if yb.dtype != xb.dtype or yb.shape[0] != b or yb.shape[2:] != xb.shape[2:]:
            raise ValueError(f"pool_pair: y {tuple(yb.shape)} {yb.dtype} must match x {tuple(xb.shape)} "
                             f"{xb.dtype} but for its heads")
        out2, sq2 = _outputs(yb, n, sq)
        a.x2, a.heads2 = yb.data_ptr(), yb.shape[1]
        a.stride2_b, a.stride2_h, a.stride2_s = yb.stride(0), yb.stride(1), yb.stride(2)
        a.out2, a.sq2 = out2.data_ptr(), sq2.data_ptr() if sq else 0
        res = [out, out2, sqo, sq2]
    lib, err = tessera.library(), tessera._Error()
    ctx = tessera.default_context(xb.device.index)
    tessera._check(lib.tsr_produce_pool(ctx.producer(), ctypes.byref(a), _stream(xb.device),
                                        ctypes.byref(err)), err)
    return tuple(res)


def _pool_kernel(x, grid, tile, layout, sq):
    return _pool_launch(_as_bhsd(x, layout), None, grid, tile, [], sq)


def _pool_fake(x, grid, tile, layout, sq):
    b, h, d = x.shape[0], x.shape[1 if layout == "bhsd" else 2], x.shape[3]
    n = _tiles(grid, tile)
    return (x.new_empty((b, h, n, d), dtype=_acc(x.dtype)),
            x.new_empty((b, h, n if sq else 0), dtype=_acc(x.dtype)))


def _pair_kernel(x, y, grid, tile, runs, layout, sq, order=None):
    return _pool_launch(_as_bhsd(x, layout), _as_bhsd(y, layout), grid, tile, runs, sq, order)


def _pair_fake(x, y, grid, tile, runs, layout, sq, order=None):
    hx, hy = (x.shape[1], y.shape[1]) if layout == "bhsd" else (x.shape[2], y.shape[2])
    b, d, n = x.shape[0], x.shape[3], _ntiles(grid, tile, runs)
    acc = _acc(x.dtype)
    return (x.new_empty((b, hx, n, d), dtype=acc), x.new_empty((b, hy, n, d), dtype=acc),
            x.new_empty((b, hx, n if sq else 0), dtype=acc), x.new_empty((b, hy, n if sq else 0), dtype=acc))


def _select_kernel(pq, pk, scale, rule, k, tau, min_keep):
    pq, pk = pq.contiguous(), pk.contiguous()
    if KERNEL == 2:
        pk = pk.transpose(-1, -2).contiguous()  # [B, HK, D, NK]
    b, h, nq, d = pq.shape
    a = tessera._SelectArgs()
    a.pq, a.pk, a.dtype = pq.data_ptr(), pk.data_ptr(), _DT[pq.dtype]
    nk = pk.shape[3] if KERNEL == 2 else pk.shape[2]
    out = torch.empty(b, h, nq, nk, dtype=torch.bool, device=pq.device)
    a.batch, a.heads, a.kv_heads, a.nq, a.nk, a.dim = b, h, pk.shape[1], nq, nk, d
    a.scale, a.rule, a.k, a.tau, a.min_keep = float(scale), int(rule), int(k), float(tau), int(min_keep)
    a.out, a.rows, a.kernel = out.data_ptr(), ROWS, KERNEL
    lib, err = tessera.library(), tessera._Error()
    ctx = tessera.default_context(pq.device.index)
    tessera._check(lib.tsr_produce_select(ctx.producer(), ctypes.byref(a), _stream(pq.device),
                                          ctypes.byref(err)), err)
    return out


def _select_fake(pq, pk, scale, rule, k, tau, min_keep):
    return pq.new_empty((pq.shape[0], pq.shape[1], pq.shape[2], pk.shape[2]), dtype=torch.bool)


def pack_planes(masks):
    """bool [P, samples, S] -> int32 [P, samples, ceil(S / 32)]: the bit
    planes sampled_errors takes (bit j % 32 of word j / 32 is key j)."""
    p, n, s = masks.shape
    words = -(-s // 32)
    m = torch.nn.functional.pad(masks.to(torch.int64), (0, 32 * words - s)).view(p, n, words, 32)
    w = (m << torch.arange(32, device=masks.device)).sum(-1)
    return torch.where(w >= 2**31, w - 2**32, w).to(torch.int32)  # bit 31 as the sign


def sampled_supported(q, k, v, layout="bhsd"):
    """Whether sampled_errors takes these tensors (else the torch path)."""
    d = q.shape[-1]
    return (available(q) and q.dtype in (torch.float16, torch.bfloat16) and d in (64, 128)
            and k.dtype == q.dtype and v.dtype == q.dtype and k.shape == q.shape and v.shape == q.shape
            and q.shape[0] * q.shape[1 if layout == "bhsd" else 2] <= 65535)


def _sampled_args(qb, kb, vb, rows, planes, scale, out):
    """The tsr_sampled_args of bhsd views (all but the working space) and
    the device's producer."""
    b, h, s, d = qb.shape
    if kb.shape != qb.shape or vb.shape != qb.shape or kb.dtype != qb.dtype or vb.dtype != qb.dtype:
        raise ValueError(f"sampled_errors: k {tuple(kb.shape)} {kb.dtype} and v {tuple(vb.shape)} {vb.dtype} "
                         f"must match q {tuple(qb.shape)} {qb.dtype}")
    if rows.dtype != torch.int32 or rows.dim() != 1 or rows.device != qb.device or not rows.is_contiguous():
        raise ValueError(f"sampled_errors: rows must be a contiguous int32 [samples] on {qb.device}, got "
                         f"{rows.dtype} {tuple(rows.shape)} on {rows.device}")
    want = (2, rows.numel(), -(-s // 32))
    if planes.dtype != torch.int32 or tuple(planes.shape) != want or planes.device != qb.device \
            or not planes.is_contiguous():
        raise ValueError(f"sampled_errors: planes must be a contiguous int32 {list(want)} on {qb.device} "
                         f"(pack_planes), got {planes.dtype} {tuple(planes.shape)} on {planes.device}")
    a = tessera._SampledArgs()
    a.q, a.k, a.v, a.dtype = qb.data_ptr(), kb.data_ptr(), vb.data_ptr(), _DT.get(qb.dtype, -1)
    a.batch, a.heads, a.tokens, a.dim = b, h, s, d
    a.q_stride[:], a.k_stride[:], a.v_stride[:] = qb.stride()[:3], kb.stride()[:3], vb.stride()[:3]
    a.rows, a.samples, a.planes, a.scale = rows.data_ptr(), rows.numel(), planes.data_ptr(), float(scale)
    a.out, a.stages = out.data_ptr(), SAMPLED_STAGES
    return a, tessera.default_context(qb.device.index).producer()


def _sampled_work_bytes(a, prod):
    err = tessera._Error()
    n = tessera.library().tsr_produce_sampled_work_bytes(prod, ctypes.byref(a), ctypes.byref(err))
    if n <= 0:
        tessera._check(err.status or -1, err)
    return n


def _sampled_launch(a, prod, work, dev):
    a.work, a.work_bytes = work.data_ptr(), work.numel()
    err = tessera._Error()
    tessera._check(tessera.library().tsr_produce_sampled(prod, ctypes.byref(a), _stream(dev), ctypes.byref(err)),
                   err)


def _sampled_kernel(q, k, v, rows, planes, scale, layout):
    qb, kb, vb = _as_bhsd(q, layout), _as_bhsd(k, layout), _as_bhsd(v, layout)
    out = torch.empty(qb.shape[0], qb.shape[1], 2, dtype=torch.float32, device=qb.device)
    a, prod = _sampled_args(qb, kb, vb, rows, planes, scale, out)
    work = torch.empty(_sampled_work_bytes(a, prod), dtype=torch.uint8, device=qb.device)
    _sampled_launch(a, prod, work, qb.device)
    return out


def _sampled_fake(q, k, v, rows, planes, scale, layout):
    h = q.shape[1 if layout == "bhsd" else 2]
    return q.new_empty((q.shape[0], h, 2), dtype=torch.float32)


def _define():
    """Registers the ops once per process (a second import of the binding
    finds them defined)."""
    try:
        return (torch.ops.tessera.pool_tiles, torch.ops.tessera.pool_pair, torch.ops.tessera.select_blocks,
                torch.ops.tessera.sampled_errors)
    except (AttributeError, RuntimeError):
        pass
    pool = torch.library.custom_op(
        "tessera::pool_tiles", _pool_kernel, mutates_args=(), device_types=("cuda",),
        schema="(Tensor x, int[] grid, int[] tile, str layout, bool sq) -> (Tensor, Tensor)")
    pool.register_fake(_pool_fake)
    pair = torch.library.custom_op(
        "tessera::pool_pair", _pair_kernel, mutates_args=(), device_types=("cuda",),
        schema="(Tensor x, Tensor y, int[] grid, int[] tile, int[] runs, str layout, bool sq, "
               "Tensor? order=None) -> (Tensor, Tensor, Tensor, Tensor)")
    pair.register_fake(_pair_fake)
    sel = torch.library.custom_op(
        "tessera::select_blocks", _select_kernel, mutates_args=(), device_types=("cuda",),
        schema="(Tensor pq, Tensor pk, float scale, int rule, int k, float tau, int min_keep) -> Tensor")
    sel.register_fake(_select_fake)
    smp = torch.library.custom_op(
        "tessera::sampled_errors", _sampled_kernel, mutates_args=(), device_types=("cuda",),
        schema="(Tensor q, Tensor k, Tensor v, Tensor rows, Tensor planes, float scale, str layout) -> Tensor")
    smp.register_fake(_sampled_fake)
    return (torch.ops.tessera.pool_tiles, torch.ops.tessera.pool_pair, torch.ops.tessera.select_blocks,
            torch.ops.tessera.sampled_errors)


pool_tiles, pool_pair, select_blocks, sampled_errors = _define()
