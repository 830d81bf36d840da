"""python_ref.py: the float64 oracle of the Python tests (tests/python_*.py).

Attention over the token-level expansion of a block mask, in float64, through
torch's SDPA, with the contract's rules for what SDPA leaves undefined: a
query row with no selected key gives zeros and log-sum-exp -inf.  Finite
inputs only: non-finite ones follow runtime/ref.c, which never reads an
unselected key (a matmul does: 0 * NaN), so tests compare those with
tsr_ref_attention itself (ref_c below)."""
import ctypes

import torch
import torch.nn.functional as F

import tessera


def block_sizes(block, seq_q, seq_k):
    """(q_sizes, k_sizes) of block=(bq, bk) (the last block ragged) or of
    variable sizes."""
    if tessera._is_variable(block):
        return [int(x) for x in block[0]], [int(x) for x in block[1]]
    bq, bk = block
    return ([min(bq, seq_q - i) for i in range(0, seq_q, bq)],
            [min(bk, seq_k - j) for j in range(0, seq_k, bk)])


def token_mask(mask, block, batch, heads_q, seq_q, seq_k):
    """The block mask [H, NQ, NK] or [B, H, NQ, NK] (batch and heads of 1
    broadcast) as a bool token mask [B, Hq, Sq, Sk]."""
    qs, ks = block_sizes(block, seq_q, seq_k)
    m = mask if mask.dim() == 4 else mask.unsqueeze(0)
    t = m.bool().repeat_interleave(torch.tensor(qs), dim=2).repeat_interleave(torch.tensor(ks), dim=3)
    return t.expand(batch, heads_q, seq_q, seq_k)


def bhsd(x, layout):
    return x.transpose(1, 2) if layout == "bshd" else x


def reference(q, k, v, mask, block, layout="bhsd", scale=None):
    """(out float64 [B, Hq, Sq, D] in q's layout, lse float64 [B, Hq, Sq])."""
    q, k, v = (bhsd(t, layout).double() for t in (q, k, v))
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    scale = 1 / d ** 0.5 if scale is None else scale
    k, v = (t.repeat_interleave(hq // hkv, dim=1) for t in (k, v))
    tm = token_mask(mask, block, b, hq, sq, sk)
    s = (q @ k.transpose(-1, -2) * scale).masked_fill(~tm, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    empty = ~tm.any(dim=-1)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=tm, scale=scale)
    o = o.masked_fill(empty[..., None], 0.0)
    return bhsd(o, layout), lse


def rel_error(got, want):
    """max|got - want| / max|want| (normwise, as tsr_ref_max_rel_error)."""
    got, want = got.double(), want.double()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-300)).item()


def ref_c(q, k, v, mask, block, layout="bhsd", scale=None):
    """tsr_ref_attention, the C oracle (double accumulation, the NaN rules of
    runtime/ref.c), on float32 copies: (out [B, Hq, Sq, D] float32 in q's
    layout, lse [B, Hq, Sq] float32)."""
    lib, err = tessera.library(), tessera._Error()
    lib.tsr_ref_attention.restype = ctypes.c_int
    lib.tsr_ref_attention.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_double] + [ctypes.c_void_p] * 3
    x = [bhsd(t, layout).float().contiguous() for t in (q, k, v)]
    b, hq, sq, d = x[0].shape
    qs, ks = block_sizes(block, sq, x[1].shape[2])
    g = ctypes.c_void_p()
    qa, ka = (ctypes.c_int64 * len(qs))(*qs), (ctypes.c_int64 * len(ks))(*ks)
    tessera._check(lib.tsr_geom_variable(qa, len(qs), ka, len(ks), ctypes.byref(g), ctypes.byref(err)), err)
    m = (mask if mask.dim() == 4 else mask.unsqueeze(0)).to(torch.uint8).contiguous()
    mh = ctypes.c_void_p()
    tessera._check(lib.tsr_mask_from_bytes(*m.shape, ctypes.c_void_p(m.data_ptr()), ctypes.byref(mh),
                                           ctypes.byref(err)), err)
    ro, rl = tessera._Array(), tessera._Array()
    try:
        tessera._check(lib.tsr_ref_attention(g, mh, *(ctypes.byref(tessera._array_of(t)) for t in x),
                                             0.0 if scale is None else scale, ctypes.byref(ro),
                                             ctypes.byref(rl), ctypes.byref(err)), err)
        out = torch.frombuffer((ctypes.c_float * (b * hq * sq * d)).from_address(ro.data),
                               dtype=torch.float32).view(b, hq, sq, d).clone()
        lse = torch.frombuffer((ctypes.c_float * (b * hq * sq)).from_address(rl.data),
                               dtype=torch.float32).view(b, hq, sq).clone()
    finally:
        lib.tsr_npy_free(ctypes.byref(ro))
        lib.tsr_npy_free(ctypes.byref(rl))
        lib.tsr_mask_destroy(mh)
        lib.tsr_geom_destroy(g)
    return bhsd(out, layout), lse
