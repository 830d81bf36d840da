"""tessera.diffusers: Tessera as the self-attention of diffusers' video
transformers, and as vLLM-Omni's SPARSE_ATTN callable.

    import tessera.diffusers
    pipe = WanPipeline.from_pretrained(...)            # diffusers 0.42.1
    h = tessera.diffusers.apply(pipe.transformer, method="vsa", sparsity=0.875)
    frames = pipe(prompt, num_inference_steps=50).frames
    h.remove()                                         # the model's own attention again

apply() swaps the self-attention of WanTransformer3DModel (blocks[i].attn1),
HunyuanVideoTransformer3DModel (transformer_blocks[i].attn, then
single_transformer_blocks[j].attn: layers numbered in that order) and
CogVideoXTransformer3DModel (transformer_blocks[i].attn1) through diffusers'
attention-processor mechanism (attn.set_processor): each layer's processor
becomes a Tessera processor that wraps the model's own one, so the model's
projections, QK norms and RoPE run unchanged; only the scaled-dot-product
call inside it (dispatch_attention_fn for Wan and HunyuanVideo, CogVideoX's
direct F.scaled_dot_product_attention) is routed to Tessera: the wrapper
runs a copy of the processor's function whose globals bind those two names
to the layer's route (plain name lookups, which torch.compile traces).  The
installed diffusers' dispatch stays in place (the wrapped processors are set
to its "native" backend, which the dense warm-up calls); cross-attention
(Wan's attn2) and the text refiner keep their processors.

torch.compile: torch.compile(transformer, fullgraph=True) after apply()
traces the whole model, mask producers and Tessera's op included, with
step_from="callback" or "manual" (tests/python_diffusers.py checks it on
CPU against eager).  It compiles twice, for the warm-up and the sparse
phase: the layers read only whether the step is a warm-up step.  Graph
breaks (so fullgraph=False): step_from="timestep" reads the timestep on the
host in the pre-forward hook (one Tensor.item()); check= and profile= read
results and clocks on the host.  HunyuanVideo's text lengths are read from
encoder_attention_mask in the hook, so each new set of lengths compiles
again (checked by hand: 4 sets, compiled output equal to eager).
record=True (and a callable method that uses its step argument) reads the
step: a recompile every step.

Per layer and step:
  1. the method's mask is made from the live q and k of the video tokens
     (tessera.methods: vsa, sta, svg, radial, sparge, xattention; or a
     callable, below);
  2. text tokens join as the model concatenates them: CogVideoX's 226 text
     tokens first, HunyuanVideo's text after the video (its padding, from
     encoder_attention_mask, attends but is never attended, as the model's
     own key mask does).  Text queries attend densely to every valid key and
     every video query attends to every valid text key; the method's mask
     covers video x video.  Text adds blocks of at most 128 tokens to the
     geometry, which becomes variable (the video blocks keep their sizes);
  3. q, k, v go into the method's token order (cubes, tiles, per-head SVG
     order: one gather each), Tessera runs the block mask, the output goes
     back to the model's order.

Dense warm-up: steps < dense_steps and layers in dense_layers run the
model's own attention untouched.  Defaults are the methods' published
schedules (docs/mask-families.md; the same fractions the corpus generator
uses, profiler/corpus.c): VSA 10% of steps, STA 24% (12 of 50), SVG 20% of
steps and the first 3% of layers (rounded up), Radial 24% and 2%, SpargeAttn
10%, XAttention 10% (below).  dense_steps: a step count; dense_layers: a count (the first N layers)
or a list of layer indices.

XAttention's defaults are those of its video-generation experiments
(XAttention, Xu et al. 2025, on HunyuanVideo; mit-han-lab/x-attention):
threshold tau 0.9 (0.95 is the paper's other setting), stride 8, 128-token
blocks, and full attention for the first 5 of 50 denoising steps (10%, the
corpus generator's xattn warm-up too) and no dense layers.  Its reference
code also forces key block 0 on in rows that are not fully kept; the corpus
rule and tessera.methods.xattention do not (docs/mask-families.md).

The step counter (h.step) is advanced from the timestep the pipeline passes
the transformer: a forward whose timestep differs from the previous one
starts the next step (classifier-free guidance's second call of a step has
the same timestep), and a timestep larger than the previous one starts a new
generation at step 0.  Reading it is one host synchronisation per forward
(one scalar).  step_from="callback": pass h.callback_on_step_end as the
pipeline's callback_on_step_end, which sets the step to i + 1 after step i;
step_from="manual": set h.step yourself (h.set_step(i)).  h.reset() starts
over at step 0.

backend: "tessera" (default), "flex" (FlexAttention with a BlockMask of the
same block mask, in the same token order: the comparison), or "sdpa" (torch
SDPA with the block mask expanded to a token mask in the model's order: a
reference, memory O(S^2)).  check="flex" (or "sdpa") runs that backend beside
Tessera on every sparse layer and appends (step, layer, max |diff|, max |ref|)
to h.checks.  profile=True records per-layer times of mask production and
attention (CUDA events on the GPU, the wall clock on the CPU); h.timings()
returns them summed over the layers since the last call.

method may also be a callable producer(q, k, v, grid, layer=, step=) ->
MethodMask (q, k, v: [B, H, S_video, D], frame-major video tokens; grid:
(T, H, W)), e.g. to replay recorded masks.  record=True keeps each sparse layer's MethodMask in
h.recorded[(step, layer)].

sparse_attn(q, k, v, params, is_causal, softmax_scale) is the same attention
as a vLLM-Omni SPARSE_ATTN plugin (BSND tensors, see its docstring).
"""
import math
import time

import torch

__all__ = ["apply", "SparseAttention", "sparse_attn", "masked_attention", "joint_mask",
           "token_mask", "flex_block_mask", "DENSE_WARMUP", "METHODS"]

# (fraction of steps dense, fraction of layers dense), as published
# (docs/mask-families.md; profiler/corpus.c fam_tab holds the same numbers).
DENSE_WARMUP = {"vsa": (0.10, 0.0), "sta": (0.24, 0.0), "svg": (0.20, 0.03),
                "radial": (0.24, 0.02), "sparge": (0.10, 0.0), "xattention": (0.10, 0.0)}
# Which of q, k, v each tessera.methods producer reads.
METHODS = {"vsa": "qk", "sta": "q", "svg": "qkv", "radial": "q", "sparge": "qk",
           "xattention": "qk"}
TEXT_BLOCK = 128  # the largest block text tokens are cut into
BACKENDS = ("tessera", "flex", "sdpa")


def _methods():
    from . import methods  # tessera.methods (imports torch)
    return methods


def _producer(method, sparsity, kw):
    """A callable (q, k, v, grid) -> MethodMask for a method name or callable."""
    if callable(method):
        return method
    if method not in METHODS:
        raise ValueError(f"unknown method '{method}' (one of {', '.join(METHODS)}, or a callable)")
    kw = dict(kw)
    if method == "vsa":
        kw["sparsity"] = 0.875 if sparsity is None else float(sparsity)
    elif sparsity is not None:
        if method != "svg":
            raise ValueError(f"sparsity applies to vsa and svg; {method} takes its own parameters "
                             f"({', '.join(sorted(kw)) or 'see tessera.methods'})")
        kw["density"] = 1.0 - float(sparsity)
    if not 0.0 <= kw.get("sparsity", 0.0) < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {kw['sparsity']}")
    reads = METHODS[method]

    def produce(q, k, v, grid, in_order=False, **_):
        fn = getattr(_methods(), method)
        args = {"q": (q,), "qk": (q, k), "qkv": (q, k, v)}[reads]
        # in_order (hoisted order): VSA pools q and k as they lie; STA's
        # mask does not read them.
        return fn(*args, grid, **(dict(kw, in_order=True) if in_order and method == "vsa" else kw))
    produce.method = method
    # The static token order (one for every layer and head) a hoist can
    # apply once at the model's entry: VSA's cubes, STA's tiles.
    produce.tile = tuple(kw.get("cube", (4, 4, 4))) if method == "vsa" else \
        tuple(kw.get("tile", (6, 8, 8))) if method == "sta" else None
    return produce


# ---- the joint geometry: video blocks and text blocks -----------------------

def _sizes(block, n):
    """Block sizes (Python ints) of a geometry along a sequence of n tokens:
    block is an int (uniform, the last block ragged) or a list of sizes."""
    if isinstance(block, int):
        return [block] * (n // block) + ([n % block] if n % block else [])
    sizes = [int(x) for x in (block.tolist() if hasattr(block, "tolist") else block)]
    if sum(sizes) != n:
        raise ValueError(f"block sizes cover {sum(sizes)} tokens, the sequence has {n}")
    return sizes


def _chunks(n):
    return [TEXT_BLOCK] * (n // TEXT_BLOCK) + ([n % TEXT_BLOCK] if n % TEXT_BLOCK else [])


def joint_mask(mm, n_video, text=0, text_valid=None, text_first=False):
    """The block mask, geometry and token order of video + text tokens.

    mm: the method's MethodMask over n_video tokens.  text: text tokens (0:
    none), text_first: CogVideoX (text, video) rather than HunyuanVideo's
    (video, text); text_valid: how many of the text tokens are real (the
    rest is padding: attends, never attended).  Returns (mask, block, perm,
    pos): mask bool [B', H, NQ, NK]; block as tessera.attention takes it
    (mm.block itself when there is no text); perm / pos: the joint order
    (position s holds token perm[s]; pos its inverse), [S] or per head
    [B', H, S], or None for the identity."""
    m, order = mm.mask, mm.order
    if m.dim() == 3:
        m = m.unsqueeze(0)
    perm, pos = order.perm, order.pos
    if not text:
        return m, mm.block, perm, pos
    qv, kv = _geometry_sizes(mm.block, n_video)
    valid = text if text_valid is None else int(text_valid)
    if not 0 <= valid <= text:
        raise ValueError(f"text_valid must be in [0, {text}], got {valid}")
    tq = _chunks(text) if valid in (0, text) else _chunks(valid) + _chunks(text - valid)
    nvq, nvk, nt = len(qv), len(kv), len(tq)
    nvalid = len(_chunks(valid))
    b, h = m.shape[0], m.shape[1]
    full = torch.zeros(b, h, nvq + nt, nvk + nt, dtype=torch.bool, device=m.device)
    vq0, vk0, t0q, t0k = (nt, nt, 0, 0) if text_first else (0, 0, nvq, nvk)
    # Every row sees every valid text key block and (text rows) every video key.
    full[:, :, :, t0k:t0k + nvalid] = True
    full[:, :, t0q:t0q + nt, vk0:vk0 + nvk] = True
    full[:, :, vq0:vq0 + nvq, vk0:vk0 + nvk] = m
    qs, ks = (tq + qv, tq + kv) if text_first else (qv + tq, kv + tq)
    jperm, jpos = _joint_order(perm, n_video, text, text_first, m.device), \
        _joint_order(pos, n_video, text, text_first, m.device)
    return full, (qs, ks), jperm, jpos


def _joint_order(idx, n_video, text, text_first, device):
    """A video order (or its inverse) extended with the text tokens, which
    keep their places: [S] or [B', H, S]."""
    if idx is None:
        return None
    t = torch.arange(text, device=device, dtype=torch.int64)
    v = idx + (text if text_first else 0)
    t = t if text_first else t + n_video
    t = t.expand(*idx.shape[:-1], text)
    return torch.cat([t, v] if text_first else [v, t], dim=-1)


def _take(x, idx):
    """x [B, H, S, D] with the sequence gathered by idx ([S] or [B', H, S]):
    tessera.methods' gather (8-byte words where the rows allow)."""
    return _methods()._take(x, idx, "bhsd")


def _block_of(sizes, device):
    """Token position -> block index, for a list of block sizes."""
    return torch.repeat_interleave(torch.arange(len(sizes), device=device),
                                   torch.tensor(sizes, device=device))


def _geometry_sizes(block, s):
    """(q sizes, k sizes) of block=(bq, bk) or (q_sizes, k_sizes) over s tokens."""
    return _sizes(block[0], s), _sizes(block[1], s)


def token_mask(mask, block, pos, s):
    """The block mask as a token mask [B', H, S, S] in the model's order
    (pos: the inverse token order, None for the identity): what the sdpa
    backend runs, and what a reference compares with."""
    qs, ks = _geometry_sizes(block, s)
    qb, kb = _block_of(qs, mask.device), _block_of(ks, mask.device)
    if pos is None:
        return mask[:, :, qb][:, :, :, kb]
    b, h = max(mask.shape[0], pos.shape[0] if pos.dim() == 3 else 1), mask.shape[1]
    if pos.dim() == 1:
        pos = pos.expand(b, h, s)
    pos = pos.expand(b, h, s)
    qi, ki = qb[pos], kb[pos]  # [B', H, S]: the block of each model token
    m = mask.expand(b, h, -1, -1)
    rows = torch.gather(m, 2, qi.unsqueeze(-1).expand(b, h, s, m.shape[3]))
    return torch.gather(rows, 3, ki.unsqueeze(2).expand(b, h, s, s))


_flex_compiled = None
FLEX_BLOCK = 128  # FlexAttention's default block


def _overlap(sizes, n, device):
    """[ceil(n / 128), len(sizes)]: tokens of each logical block inside each
    128-token FlexAttention block."""
    sz = torch.tensor(sizes, device=device, dtype=torch.int64)
    ends = torch.cumsum(sz, 0)
    starts = ends - sz
    fs = torch.arange(0, n, FLEX_BLOCK, device=device)
    fe = (fs + FLEX_BLOCK).clamp(max=n)
    ov = torch.minimum(ends[None, :], fe[:, None]) - torch.maximum(starts[None, :], fs[:, None])
    return ov.clamp(min=0), fe - fs


def flex_block_mask(mask, block, b, s, sk):
    """The FlexAttention BlockMask of a logical block mask (tokens in its
    order), exact for any geometry: the selected tokens of every 128 x 128
    flex block are counted as Nq M Nk^T (Nq, Nk: tokens of each logical block
    in each flex block), so a block is full (all selected: no mask_mod),
    partial (mask_mod looks the logical block mask up per token) or skipped.
    No token-level pass over the S x S mask."""
    from torch.nn.attention.flex_attention import BlockMask
    dev = mask.device
    qs, ks = _sizes(block[0], s), _sizes(block[1], sk)
    (nq, aq), (nk, ak) = _overlap(qs, s, dev), _overlap(ks, sk, dev)
    m = mask.expand(b, -1, -1, -1)
    # float64: the counts stay exact whatever TF32 setting the caller has.
    cnt = torch.matmul(torch.matmul(nq.double(), m.double()), nk.double().t())
    area = (aq[:, None] * ak[None, :]).double()
    full, part = cnt == area, (cnt > 0) & (cnt < area)

    def kv(sel):
        n = sel.sum(-1, dtype=torch.int32)
        idx = torch.argsort((~sel).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return n, idx
    (pn, pi), (fn, fi) = kv(part), kv(full)
    return BlockMask.from_kv_blocks(pn, pi, fn, fi, BLOCK_SIZE=FLEX_BLOCK,
                                    mask_mod=_mask_mod(m, qs, ks), seq_lengths=(s, sk))


_mask_mods = {}


def _mask_mod(m, qs, ks):
    """The per-token lookup of the logical block mask for flex's partial
    blocks.  One function and one mask buffer per geometry, refilled per
    call: compiled flex_attention sees the same mask_mod and captured
    tensors every layer, so it compiles once per geometry, not per call."""
    key = (tuple(m.shape), tuple(qs), tuple(ks), str(m.device))
    hit = _mask_mods.get(key)
    if hit is None:
        buf = torch.empty(m.shape, dtype=torch.bool, device=m.device)
        qb, kb = _block_of(qs, m.device), _block_of(ks, m.device)

        def mask_mod(bi, hi, qi, ki):
            return buf[bi, hi, qb[qi], kb[ki]]
        hit = _mask_mods[key] = (buf, mask_mod)
    hit[0].copy_(m)
    return hit[1]


def _flex(q, k, v, mask, block, scale, timer=None):
    """FlexAttention over the block mask (q, k, v already in its token
    order): flex_block_mask, then flex_attention (compiled on the GPU)."""
    global _flex_compiled
    from torch.nn.attention.flex_attention import flex_attention
    t0 = timer.mark("flex_blockmask", q.device) if timer else None
    bm = flex_block_mask(mask, block, q.shape[0], q.shape[2], k.shape[2])
    if timer:
        timer.add("flex_blockmask", t0, timer.mark("flex_blockmask", q.device))
    fn = flex_attention
    if q.is_cuda:
        if _flex_compiled is None:
            _flex_compiled = torch.compile(flex_attention, dynamic=False)
        fn = _flex_compiled
    return fn(q, k, v, block_mask=bm, scale=scale)


def masked_attention(q, k, v, mm, text=0, text_valid=None, text_first=False,
                     backend="tessera", scale=None, context=None, timer=None, permuted=False):
    """Attention of video (+ text) tokens under a method's mask.

    q, k, v: [B, H, S, D] in the model's token order (S = video + text
    tokens, text first or last as text_first says); mm: the MethodMask over
    the video tokens; text_valid: real text tokens, an int or one per batch
    element (a batch of different counts runs element by element).  Returns
    [B, H, S, D] in the model's order.  permuted: q, k, v are already in
    mm.order (video only, a hoisted order), and so is the output: no
    gathers."""
    if permuted and text:
        raise ValueError("masked_attention: permuted=True takes video tokens only (no text)")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend '{backend}' (one of {', '.join(BACKENDS)})")
    b, h, s, d = q.shape
    n_video = s - text
    if n_video <= 0:
        raise ValueError(f"{s} tokens hold no video tokens besides {text} text tokens")
    scale = float(d ** -0.5 if scale is None else scale)
    tv = text_valid
    if isinstance(tv, (list, tuple)):
        if len(set(tv)) > 1:
            outs = [masked_attention(q[i:i + 1], k[i:i + 1], v[i:i + 1], _batch_slice(mm, i),
                                     text, tv[i], text_first, backend, scale, context, timer,
                                     permuted)
                    for i in range(b)]
            return torch.cat(outs, 0)
        tv = tv[0] if tv else None
    mask, block, perm, pos = joint_mask(mm, n_video, text, tv, text_first)
    if permuted:
        perm = pos = None
    if backend == "sdpa":
        tm = token_mask(mask, block, pos, s)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=tm, scale=scale)
    qp, kp, vp = _take(q, perm), _take(k, perm), _take(v, perm)
    if backend == "flex":
        out = _flex(qp, kp, vp, mask, block, scale, timer)
    elif permuted and all(x.transpose(1, 2).is_contiguous() for x in (q, k, v)):
        # Hoisted: q, k, v as the processor made them ([B, S, H, D] memory
        # seen as bhsd): run in that layout, no copies (into bhsd and the
        # output back) to replace the gathers with.
        import tessera
        out = tessera.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                mask.contiguous(), block=block, layout="bshd", scale=scale,
                                context=context).transpose(1, 2)
    else:
        import tessera
        out = tessera.attention(qp.contiguous(), kp.contiguous(), vp.contiguous(),
                                mask.contiguous(), block=block, layout="bhsd", scale=scale,
                                context=context)
    return _take(out, pos)


def _batch_slice(mm, i):
    """The MethodMask of batch element i (batch dims of 1 broadcast)."""
    def one(t):
        return t[i:i + 1] if t is not None and t.dim() >= 3 and t.shape[0] > 1 else t
    o = mm.order
    if o.perm is not None and o.perm.dim() == 3:
        o = type(o)(one(o.perm), one(o.pos), o.name)
    return mm._replace(mask=one(mm.mask), order=o)


# ---- the models ---------------------------------------------------------------

class _Kind:
    """How one transformer class lays out its self-attention."""

    def __init__(self, name, layers, text_first, text_of, grid_of, timestep_at=1):
        self.name, self.layers, self.text_first = name, layers, text_first
        self.text_of, self.grid_of = text_of, grid_of
        self.timestep_at = timestep_at  # forward()'s positional index of timestep


def _arg(args, kwargs, name, index):
    return kwargs[name] if name in kwargs else (args[index] if len(args) > index else None)


def _kinds():
    from diffusers import (CogVideoXTransformer3DModel, HunyuanVideoTransformer3DModel,
                           WanTransformer3DModel)

    def wan_grid(m, args, kwargs):
        x = _arg(args, kwargs, "hidden_states", 0)  # [B, C, F, H, W]
        pt, ph, pw = m.config.patch_size
        return (x.shape[2] // pt, x.shape[3] // ph, x.shape[4] // pw)

    def hy_grid(m, args, kwargs):
        x = _arg(args, kwargs, "hidden_states", 0)  # [B, C, F, H, W]
        pt, p = m.config.patch_size_t, m.config.patch_size
        return (x.shape[2] // pt, x.shape[3] // p, x.shape[4] // p)

    def cog_grid(m, args, kwargs):
        x = _arg(args, kwargs, "hidden_states", 0)  # [B, F, C, H, W]
        pt, p = m.config.patch_size_t or 1, m.config.patch_size
        return (x.shape[1] // pt, x.shape[3] // p, x.shape[4] // p)

    def hy_text(m, args, kwargs):
        e = _arg(args, kwargs, "encoder_hidden_states", 2)
        mask = _arg(args, kwargs, "encoder_attention_mask", 3)
        valid = None if mask is None else [int(x) for x in mask.sum(1).tolist()]
        return e.shape[1], valid

    def cog_text(m, args, kwargs):
        return _arg(args, kwargs, "encoder_hidden_states", 1).shape[1], None

    return [
        (WanTransformer3DModel, _Kind("wan", lambda m: [b.attn1 for b in m.blocks], False,
                                      lambda m, a, k: (0, None), wan_grid)),
        (HunyuanVideoTransformer3DModel,
         _Kind("hunyuan", lambda m: [b.attn for b in m.transformer_blocks] +
               [b.attn for b in m.single_transformer_blocks], False, hy_text, hy_grid)),
        (CogVideoXTransformer3DModel, _Kind("cogvideox", lambda m: [b.attn1 for b in m.transformer_blocks],
                                            True, cog_text, cog_grid, timestep_at=2)),
    ]


def _kind_of(transformer):
    for cls, kind in _kinds():
        if isinstance(transformer, cls):
            return kind
    raise TypeError(f"tessera.diffusers.apply: {type(transformer).__name__} is not a "
                    "WanTransformer3DModel, HunyuanVideoTransformer3DModel or CogVideoXTransformer3DModel")


# ---- the processor and the routed call -----------------------------------------

_SDPA = torch.nn.functional.scaled_dot_product_attention
def _routed_call(proc):
    """The wrapped processor's __call__ as a function whose globals send its
    attention call to proc: a copy of the function (same code, defaults and
    closure) with dispatch_attention_fn (Wan, HunyuanVideo) bound to
    proc._dispatch and the name it holds torch.nn.functional under
    (CogVideoX's F) bound to a copy of that module whose
    scaled_dot_product_attention is proc._sdpa.  Plain name lookups, so
    torch.compile traces through them (fullgraph); a TorchFunctionMode
    around the processor, the earlier way, made dynamo break the graph at
    the first Python-level tensor method inside it (Tensor.unflatten's
    super() call).  One copy per layer (the globals hold the layer)."""
    import sys
    import types
    f = type(proc.inner).__call__
    # The globals are those of a module of their own, in sys.modules while
    # the layer is swapped (proc.module; _Processor.release drops it): dynamo
    # finds a function's global scope by its module's __name__, and took the
    # model's cross-attention (same function, original globals) for a routed
    # one when the copy kept the model module's name.
    proc.module = f"tessera._routed_{id(proc):x}"
    mod = types.ModuleType(proc.module)
    g = mod.__dict__
    g.update(f.__globals__)
    g["__name__"] = proc.module
    sys.modules[proc.module] = mod
    if "dispatch_attention_fn" in g:
        proc.dispatch = g["dispatch_attention_fn"]
        g["dispatch_attention_fn"] = proc._dispatch
    for name, val in f.__globals__.items():
        if val is torch.nn.functional:
            shim = types.ModuleType("torch.nn.functional")
            shim.__dict__.update(torch.nn.functional.__dict__)
            shim.scaled_dot_product_attention = proc._sdpa
            g[name] = shim
    fn = types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
    fn.__kwdefaults__ = f.__kwdefaults__
    return fn


_wrapped_classes = {}


def _processor_class(cls):
    """A subclass of _Processor whose __call__ shows the wrapped class's
    signature: diffusers' Attention.forward passes a processor only the
    keyword arguments its __call__ names (image_rotary_emb, ...)."""
    import functools
    if cls not in _wrapped_classes:
        def __call__(self, attn, *args, **kwargs):
            return self._run(attn, args, kwargs)
        functools.update_wrapper(__call__, cls.__call__)
        _wrapped_classes[cls] = type("Tessera" + cls.__name__, (_Processor,), {"__call__": __call__})
    return _wrapped_classes[cls]


class _Processor:
    """The model's own processor, with its attention call routed to Tessera
    (_routed_call)."""

    def __init__(self, inner, layer, owner):
        self.inner, self.layer, self.owner = inner, layer, owner
        self.hits, self.dispatch = 0, None
        self.call = _routed_call(self)

    def release(self):
        import sys
        sys.modules.pop(self.module, None)

    def _hit(self, a, dense):
        self.hits += 1
        return self.owner._attend(self.layer, a, dense)

    def _sdpa(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
              scale=None, enable_gqa=False):
        """F.scaled_dot_product_attention inside the processor: [B, H, S, D]."""
        a = dict(query=query, key=key, value=value, attn_mask=attn_mask, dropout_p=dropout_p,
                 is_causal=is_causal, scale=scale)
        return self._hit(a, lambda: _SDPA(query, key, value, attn_mask=attn_mask,
                                          dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                                          enable_gqa=enable_gqa))

    def _dispatch(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                  scale=None, enable_gqa=False, attention_kwargs=None, *, backend=None,
                  parallel_config=None):
        """diffusers' dispatch_attention_fn inside the processor: q, k, v and
        the output [B, S, H, D]; the dense path is the real dispatch (with the
        native backend apply() set)."""
        a = dict(query=query.transpose(1, 2), key=key.transpose(1, 2),
                 value=value.transpose(1, 2), attn_mask=attn_mask, dropout_p=dropout_p,
                 is_causal=is_causal, scale=scale)

        def dense():
            return self.dispatch(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                                 is_causal=is_causal, scale=scale, enable_gqa=enable_gqa,
                                 attention_kwargs=attention_kwargs, backend=backend,
                                 parallel_config=parallel_config).transpose(1, 2)
        return self._hit(a, dense).transpose(1, 2)

    def _run(self, attn, args, kwargs):
        self.hits = 0
        out = self.call(self.inner, attn, *args, **kwargs)
        if self.hits != 1:
            raise RuntimeError(f"tessera.diffusers: layer {self.layer}'s processor "
                               f"({type(self.inner).__name__}) made {self.hits} attention calls, "
                               "expected 1")
        return out


def _hoist_hooks(model, h):
    """Wan's hooks for the hoisted order (SparseAttention.hoisted): the
    RoPE tables ([1, S, 1, D], model.rope's output) and the hidden states
    ([B, S, C]) into the order before the first block, back after the last."""
    def rope(mod, args, out):
        if not h.hoisted():
            return None
        perm = h._order(out[0].device).perm
        return tuple(t.index_select(1, perm) for t in out)

    def enter(mod, args, kwargs):
        if not h.hoisted():
            return None
        x = _arg(args, kwargs, "hidden_states", 0)
        x = _methods()._take(x, h._order(x.device).perm, "bshd")
        if "hidden_states" in kwargs:
            return args, dict(kwargs, hidden_states=x)
        return (x,) + tuple(args[1:]), kwargs

    def leave(mod, args, out):
        if not h.hoisted():
            return None
        return _methods()._take(out, h._order(out.device).pos, "bshd")
    blocks = model.blocks
    return [model.rope.register_forward_hook(rope),
            blocks[0].register_forward_pre_hook(enter, with_kwargs=True),
            blocks[-1].register_forward_hook(leave)]


class _Timer:
    """Per-layer intervals: CUDA events on the GPU (no synchronisation until
    read), perf_counter on the CPU."""

    def __init__(self):
        self.marks = []

    def mark(self, what, device):
        if device.type == "cuda":
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def add(self, what, t0, t1):
        self.marks.append((what, t0, t1))

    def read(self):
        out = {}
        for what, t0, t1 in self.marks:
            if isinstance(t0, float):
                ms = (t1 - t0) * 1e3
            else:
                t1.synchronize()
                ms = t0.elapsed_time(t1)
            out[what] = out.get(what, 0.0) + ms
        self.marks = []
        return out


class SparseAttention:
    """What apply() returns: the swapped layers, their schedule and state.

    step (int): the current denoising step; dense_steps, dense_layers (a set);
    checks: [(step, layer, max |diff|, max |ref|)] when check= was given;
    recorded: {(step, layer): MethodMask} when record=True."""

    def __init__(self, transformer, kind, produce, method_name, dense_steps, dense_layers,
                 total_steps, backend, step_from, check, profile, record, context, hoist="auto"):
        self.transformer, self.kind, self.produce = transformer, kind, produce
        self.method, self.backend, self.step_from = method_name, backend, step_from
        self.check, self.profile, self.record, self.context = check, profile, record, context
        self.layers = kind.layers(transformer)
        n = len(self.layers)
        warm = DENSE_WARMUP.get(method_name, (0.0, 0.0))
        self.total_steps = total_steps
        self.dense_steps = int(math.floor(warm[0] * total_steps + 0.5)) if dense_steps is None \
            else int(dense_steps)
        if dense_layers is None:
            dense_layers = int(math.ceil(warm[1] * n - 1e-9))
        self.dense_layers = set(range(min(dense_layers, n))) if isinstance(dense_layers, int) \
            else {int(i) for i in dense_layers}
        bad = [i for i in self.dense_layers if not 0 <= i < n]
        if bad or self.dense_steps < 0:
            raise ValueError(f"dense_layers must be in [0, {n}) and dense_steps >= 0, got "
                             f"{sorted(bad) or self.dense_steps}")
        # Decided before the model is touched: a refused hoist leaves it as it was.
        self._hoist_asked, self._token_timestep = hoist, False
        self._hoist = self._hoistable(hoist)
        self.step, self._last_t = 0, None
        self.grid = self.text = self.text_valid = None
        self.checks, self.recorded = [], {}
        self.timer = _Timer()
        self._originals = []
        for i, attn in enumerate(self.layers):
            inner = attn.processor
            if hasattr(inner, "_attention_backend"):
                self._originals.append((attn, inner, inner._attention_backend))
                from diffusers.models.attention_dispatch import AttentionBackendName
                inner._attention_backend = AttentionBackendName.NATIVE
            else:
                self._originals.append((attn, inner, None))
            attn.set_processor(_processor_class(type(inner))(inner, i, self))
        self._hook = transformer.register_forward_pre_hook(self._pre_forward, with_kwargs=True)
        self._hoist_hooks = []
        if self._hoist:
            self._hoist_hooks = _hoist_hooks(transformer, self)

    # -- the hoisted token order ----------------------------------------------------
    # A static order (VSA's cubes, STA's tiles) is the same for every layer:
    # on Wan, whose self-attention alone mixes tokens (norms, projections,
    # QK norm, RoPE, cross-attention queries and the FFN are per token),
    # the hidden states go into it once before the first block, with the
    # RoPE tables, and back after the last; each attention call then runs
    # on q, k, v as they come (no gather of q, k, v and the output: 4 a
    # layer, 0.06 ms each at Wan 480p on the H200).  Bit for bit the
    # unhoisted path's result where the per-token arithmetic does not
    # depend on a row's place (the CPU: tests/python_diffusers.py's
    # hoist_case), the same mask (VSA pools in the cube order, bitwise the
    # same means: methods._pool_in_order).  On the H200 the masks of a
    # Wan 480p step differed at near-ties and the output by 5e-3 (relative,
    # bf16), which cuBLAS's choice of reduction by tile position would
    # explain (not checked).  Only on sparse steps, and only with no dense
    # layers (a dense layer would attend in another key order).
    # hoist="auto" (the default) takes the hoisted order where it can be
    # taken and the gathered one elsewhere, silently: on the H200 it made the
    # compiled Wan 480p step with VSA 87.5% 251.2 ms against 260.1
    # (notes/pipeline-2026-12-02d.md).  hoist=True says the caller wants it,
    # so where it cannot be taken that is an error.
    def _hoistable(self, hoist):
        if hoist not in (True, False, "auto"):
            raise ValueError(f"tessera.diffusers.apply: hoist must be True, False or 'auto', "
                             f"got {hoist!r}")
        if not hoist:
            return False
        why = None
        if self.kind.name != "wan":
            why = f"{self.kind.name} joins text tokens in its self-attention"
        elif getattr(self.produce, "tile", None) is None:
            why = f"method {self.method} has no static token order (VSA and STA have)"
        elif self.dense_layers:
            why = "dense layers would attend in the hoisted order"
        if why and hoist == "auto":
            return False
        if why:
            raise ValueError(f"tessera.diffusers.apply: hoist=True, but {why}")
        return True

    def hoisted(self):
        """Whether this forward runs in the hoisted order."""
        return self._hoist and not self._dense_now and not self._token_timestep

    def _order(self, device):
        return _methods().tile_order(self.grid, self.produce.tile, device)[0]

    # -- schedule ---------------------------------------------------------------
    # step and dense_steps are properties that keep _dense_now (this step is
    # a warm-up step) current: the layers read only that flag, not the step,
    # so a torch.compile'd model guards on one bool and compiles twice
    # (warm-up and sparse), not once per step.
    @property
    def step(self):
        return self._step

    @step.setter
    def step(self, i):
        self._step = int(i)
        self._dense_now = self._step < getattr(self, "_dense_steps", 0)

    @property
    def dense_steps(self):
        return self._dense_steps

    @dense_steps.setter
    def dense_steps(self, n):
        self._dense_steps = int(n)
        self._dense_now = getattr(self, "_step", 0) < self._dense_steps

    def _pre_forward(self, module, args, kwargs):
        self.grid = self.kind.grid_of(module, args, kwargs)
        self.text, self.text_valid = self.kind.text_of(module, args, kwargs)
        self._token_timestep = False
        if self._hoist:
            t = _arg(args, kwargs, "timestep", self.kind.timestep_at)
            # A per-token timestep (Wan 2.2 TI2V) modulates each token by its
            # place: such a forward keeps the gathered order under "auto".
            self._token_timestep = torch.is_tensor(t) and t.dim() > 1
            if self._token_timestep and self._hoist_asked is True:
                raise ValueError("tessera.diffusers: a per-token timestep (Wan 2.2 TI2V) modulates "
                                 "each token; apply(..., hoist=False or 'auto') for it")
        if self.step_from == "timestep":
            t = _arg(args, kwargs, "timestep", self.kind.timestep_at)
            t = float(t.flatten()[0]) if torch.is_tensor(t) else float(t)
            if self._last_t is not None and t > self._last_t:
                self.step = 0
            elif self._last_t is not None and t != self._last_t:
                self.step += 1
            self._last_t = t

    def set_step(self, i):
        self.step = int(i)

    def reset(self):
        self.step, self._last_t = 0, None

    def callback_on_step_end(self, pipe, i, t, callback_kwargs):
        """diffusers' callback_on_step_end: step i has ended."""
        self.step = int(i) + 1
        return callback_kwargs

    def is_dense(self, layer, step=None):
        step = self.step if step is None else step
        return step < self.dense_steps or layer in self.dense_layers

    # -- one layer ----------------------------------------------------------------
    def _attend(self, layer, a, dense):
        q, k, v = a["query"], a["key"], a["value"]
        if self._dense_now or layer in self.dense_layers:
            if not self.profile:
                return dense()
            t0 = self.timer.mark("dense", q.device)
            out = dense()
            self.timer.add("attention", t0, self.timer.mark("attention", q.device))
            return out
        if a.get("is_causal") or a.get("dropout_p", 0.0) or k.shape[2] != q.shape[2]:
            raise ValueError(f"tessera.diffusers: layer {layer} is not a non-causal self-attention "
                             f"(q {tuple(q.shape)}, k {tuple(k.shape)})")
        self._check_padding_mask(layer, a.get("attn_mask"), q.shape[2])
        text, text_first = self.text or 0, self.kind.text_first
        v0 = text if text_first else 0
        n_video = q.shape[2] - text
        sl = slice(v0, v0 + n_video)
        t0 = self.timer.mark("produce", q.device) if self.profile else None
        # A named method's producer ignores the step; only a callable gets
        # it (under torch.compile, reading it recompiles the model per step).
        kw = {} if hasattr(self.produce, "method") else {"step": self.step}
        hoisted = self.hoisted()
        if hoisted:
            kw["in_order"] = True
        mm = self.produce(q[:, :, sl], k[:, :, sl], v[:, :, sl], self.grid, layer=layer, **kw)
        if self.profile:
            t1 = self.timer.mark("produce", q.device)
            self.timer.add("produce", t0, t1)
        if self.record:
            self.recorded[(self.step, layer)] = mm
        out = masked_attention(q, k, v, mm, text, self.text_valid, text_first, self.backend,
                               a.get("scale"), self.context, self.timer if self.profile else None,
                               hoisted)
        if self.profile:
            self.timer.add("attention", t1, self.timer.mark("attention", q.device))
        if self.check:
            ref = masked_attention(q, k, v, mm, text, self.text_valid, text_first, self.check,
                                   a.get("scale"), permuted=hoisted)
            self.checks.append((self.step, layer, float((out.float() - ref.float()).abs().max()),
                                float(ref.float().abs().max())))
        return out

    def _check_padding_mask(self, layer, m, s):
        """The only attention mask these models pass their self-attention is
        HunyuanVideo's key padding [B, 1, 1, S], which text_valid (from
        encoder_attention_mask) already holds; anything else is refused
        rather than dropped."""
        if m is None:
            return
        if self.text_valid is None or m.dim() != 4 or m.shape[1] != 1 or m.shape[2] != 1 \
                or m.shape[3] != s:
            raise ValueError(f"tessera.diffusers: layer {layer} got an attention mask of shape "
                             f"{tuple(m.shape)}; only a key-padding mask of the text is supported")

    def timings(self):
        """{"produce": ms, "attention": ms} summed since the last call
        (synchronises on the GPU)."""
        return self.timer.read()

    def remove(self):
        """Puts the model's own processors (and their backends) back."""
        for attn, inner, backend in self._originals:
            if isinstance(attn.processor, _Processor):
                attn.processor.release()
            if backend is not None or hasattr(inner, "_attention_backend"):
                inner._attention_backend = backend
            attn.set_processor(inner)
        self._originals = []
        self._hook.remove()
        for hk in self._hoist_hooks:
            hk.remove()
        self._hoist_hooks = []


def apply(transformer, method="vsa", sparsity=None, dense_steps=None, dense_layers=None,
          total_steps=50, backend="tessera", step_from="timestep", check=None, profile=False,
          record=False, context=None, hoist="auto", **method_kw):
    """Swaps the transformer's self-attention for Tessera with the method's
    masks; returns the SparseAttention handle (module docstring).

    method: vsa (sparsity, default 0.875), sta (window=, tile=), svg (density=,
    or sparsity = 1 - density; sink=), radial (decay=, block=), sparge (tau=,
    topk=, block=), xattention (tau= 0.9, stride= 8, block= 128, chunk=), each as tessera.methods takes it (method_kw); or a
    callable (q, k, v, grid, layer=, step=) -> MethodMask.  dense_steps / dense_layers:
    None for the method's published warm-up over total_steps steps.
    hoist: the method's token order applied once at the model's entry
    instead of around every attention call (SparseAttention._hoistable):
    "auto" (default) where it can be (Wan with VSA or STA and no dense
    layers; a forward with a per-token timestep keeps the gathered order),
    True to insist (an error where it cannot be), False never.  On the
    H200 the compiled Wan 480p step with VSA 87.5% took 251.2 ms hoisted
    against 260.1 gathered (notes/pipeline-2026-12-02d.md); the hoisted
    masks there differed from the gathered ones at near-ties (the hoisted q
    and k are not bitwise the gathered ones permuted; on the CPU they are,
    and masks and outputs are equal bit for bit)."""
    if backend not in BACKENDS or (check is not None and check not in BACKENDS):
        raise ValueError(f"backend and check must be one of {', '.join(BACKENDS)}; got "
                         f"{backend!r}, {check!r}")
    if step_from not in ("timestep", "callback", "manual"):
        raise ValueError(f"step_from must be timestep, callback or manual, got {step_from!r}")
    if getattr(transformer, "_tessera", None) is not None:
        raise ValueError("tessera.diffusers.apply: already applied; call .remove() on the handle first")
    kind = _kind_of(transformer)
    produce = _producer(method, sparsity, method_kw)
    name = method if isinstance(method, str) else getattr(method, "method", "custom")
    h = SparseAttention(transformer, kind, produce, name, dense_steps, dense_layers, total_steps,
                        backend, step_from, check, profile, record, context, hoist)
    transformer._tessera = h
    remove = h.remove

    def remove_and_forget():
        remove()
        transformer._tessera = None
    h.remove = remove_and_forget
    return h


# ---- vLLM-Omni ------------------------------------------------------------------

def _grid_from_params(params, s):
    g = params.get("grid")
    if g is None and params.get("latent_shape") is not None and params.get("patch_size") is not None:
        ls, ps = params["latent_shape"], params["patch_size"]
        ls = ls[0] if torch.is_tensor(ls) and ls.dim() == 2 else ls
        ps = ps[0] if torch.is_tensor(ps) and ps.dim() == 2 else ps
        g = [int(a) // int(b) for a, b in zip(ls.tolist() if torch.is_tensor(ls) else ls,
                                               ps.tolist() if torch.is_tensor(ps) else ps)]
    if g is None:
        raise ValueError("tessera sparse_attn: params need the video grid: 'grid' (T, H, W) or "
                         "'latent_shape' and 'patch_size'")
    g = tuple(int(x) for x in (g.tolist() if torch.is_tensor(g) else g))
    if len(g) != 3 or math.prod(g) > s:
        raise ValueError(f"tessera sparse_attn: grid {g} does not fit {s} tokens")
    return g


def _scalar(x):
    if torch.is_tensor(x):
        return int(x.flatten()[0])
    return None if x is None else int(x)


def sparse_attn(query, key, value, params, is_causal=False, softmax_scale=None):
    """vLLM-Omni's SPARSE_ATTN callable: query, key, value [B, S, H, D]
    (BSND), returns the attention [B, S, H, D].

    params: "method" (default "vsa") and the method's parameters ("sparsity",
    "window", "density", ... as apply() takes them), the video grid ("grid"
    (T, H, W), or vLLM-Omni's "latent_shape" and "patch_size"), the step
    ("denoise_step_idx", "total_denoise_steps") and layer ("layer") for the
    dense warm-up ("dense_steps", "dense_layers" override the published one),
    "backend".  Tokens beyond the grid are text, at the end unless
    "text_first" (or a "full_attn_spans" span that starts at 0) says first;
    "attn_mask" [B, S] (or [B, 1, 1, S]) marks real keys: a valid prefix of
    the text, the rest padding."""
    if is_causal:
        raise ValueError("tessera sparse_attn: video self-attention is not causal (is_causal=True)")
    params = dict(params or {})
    b, s, h, d = query.shape
    grid = _grid_from_params(params, s)
    n_video = math.prod(grid)
    text = s - n_video
    spans = params.get("full_attn_spans")
    text_first = bool(params.get("text_first", False))
    if spans and spans[0]:
        text_first = int(spans[0][0][0]) == 0 and text > 0
    method = params.get("method", "vsa")
    kw = {k: params[k] for k in ("window", "tile", "density", "sink", "decay", "block", "tau",
                                 "topk", "selfsim_min", "cube", "samples", "stride",
                                 "chunk") if k in params}
    produce = _producer(method, params.get("sparsity"), kw)
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))
    step, total = _scalar(params.get("denoise_step_idx")), _scalar(params.get("total_denoise_steps"))
    warm = DENSE_WARMUP.get(method, (0.0, 0.0))
    dense_steps = params.get("dense_steps")
    if dense_steps is None:
        dense_steps = int(math.floor(warm[0] * (total or 0) + 0.5))
    layer = params.get("layer")
    dl = params.get("dense_layers", ())
    dense_layer = layer is not None and (layer < dl if isinstance(dl, int) else layer in set(dl))
    if (step is not None and step < dense_steps) or dense_layer:
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=_padding_mask(params.get("attn_mask"), b, s), scale=softmax_scale)
        return out.transpose(1, 2)
    valid = _text_valid(params.get("attn_mask"), b, s, n_video, text, text_first)
    vs = slice(text, s) if text_first else slice(0, n_video)
    mm = produce(q[:, :, vs], k[:, :, vs], v[:, :, vs], grid, layer=layer, step=step)
    out = masked_attention(q, k, v, mm, text, valid, text_first, params.get("backend", "tessera"),
                           softmax_scale)
    return out.transpose(1, 2)


sparse_attn.capabilities = {"supports_attention_mask": True, "supports_full_attn_spans": True}


def _padding_mask(m, b, s):
    if m is None:
        return None
    return (m if m.dim() == 4 else m.reshape(b, 1, 1, s)).bool()


def _text_valid(m, b, s, n_video, text, text_first):
    """Real text tokens per batch element from a key mask [B, S] / [B, 1, 1, S]:
    the video keys all real, the text's real ones a prefix of it."""
    if m is None:
        return None
    m = m.reshape(b, s).bool()
    t = m[:, :text] if text_first else m[:, n_video:]
    vid = m[:, text:] if text_first else m[:, :n_video]
    n = t.sum(1)
    prefix = torch.arange(text, device=m.device)[None, :] < n[:, None]
    if not bool(vid.all()) or not bool((t == prefix).all()):
        raise ValueError("tessera sparse_attn: attn_mask must keep every video key and a prefix "
                         "of the text keys (padding at the end)")
    return [int(x) for x in n.tolist()]
