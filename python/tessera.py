"""tessera: a thin ctypes binding over libtessera for diffusion pipelines.

No compile step: the shared library is found through $TESSERA_LIBRARY, then
the installed libtessera.so.  Importing needs neither PyTorch nor a GPU;
running needs both.  Tensors are CUDA tensors (bf16 or fp16) shaped
[B, H, S, D] (SDPA) or [B, S, H, D] (most DiT code); the binding passes their
pointers, strides and the current stream, so a call is asynchronous and can
be captured in a CUDA graph once planned.

    import tessera
    ctx = tessera.Context()                          # device 0, embedded lookup table
    o = tessera.attention(q, k, v, block_mask, block=(128, 128), context=ctx)

block_mask: bool tensor [H, NQ, NK] or [B, H, NQ, NK] over logical blocks of
block=(bq, bk) tokens (the last block may be ragged), or of variable sizes:
block=(q_sizes, k_sizes), the token count of every query and key block (VSA's
cubes, STA's tiles); variable blocks are planned on the host.

A CUDA mask is planned on the GPU, where it already is (no copy to the host,
no synchronisation): attention() keeps one GpuPlan template per shape and
regime and reuses it, so a step is planning kernels + attention on the
current stream, capturable in a CUDA graph with the mask buffer's contents
changing between replays:

    gp = tessera.GpuPlan(ctx, 1, H, H, S, S, D, block=(128, 128))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gp(q, k, v, mask_buf, out=out)
    mask_buf.copy_(next_mask); g.replay()

The first call for a shape and regime allocates its template (device buffers):
make it (call once) before capturing a graph.
"""
import ctypes
import ctypes.util
import os

__all__ = ["TesseraError", "Context", "Plan", "GpuPlan", "attention", "library"]

# ---- enums mirrored from tessera.h (keep in order) ------------------------
DT_BOOL, DT_U8, DT_I32, DT_I64, DT_F16, DT_BF16, DT_F32, DT_F64 = range(8)
LAYOUT_BHSD, LAYOUT_BSHD = 0, 1
MAPPINGS = {"auto": 0, "retain": 1, "combine": 2, "subdivide": 3}
TASKS = {"auto": 0, "row": 1, "split": 2, "pack": 3}


class TesseraError(RuntimeError):
    """A libtessera call failed; the message is the library's error line."""


class _Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("text", ctypes.c_char * 320)]


class _Problem(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int64), ("heads_q", ctypes.c_int64),
                ("heads_kv", ctypes.c_int64), ("seq_q", ctypes.c_int64),
                ("seq_k", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("scale", ctypes.c_double), ("dtype", ctypes.c_int),
                ("layout", ctypes.c_int), ("geom", ctypes.c_void_p)]


class _PlanOpts(ctypes.Structure):
    _fields_ = [("tile_m", ctypes.c_int), ("tile_n", ctypes.c_int),
                ("mapping", ctypes.c_int), ("tasks", ctypes.c_int),
                ("num_sms", ctypes.c_int), ("arch", ctypes.c_char_p),
                ("variant", ctypes.c_char_p), ("split_tiles", ctypes.c_int)]


class _ContextOpts(ctypes.Structure):
    _fields_ = [("device", ctypes.c_int), ("bundle_dir", ctypes.c_char_p),
                ("db_path", ctypes.c_char_p)]


class _GpuTensors(ctypes.Structure):
    _fields_ = [("q", ctypes.c_uint64), ("k", ctypes.c_uint64), ("v", ctypes.c_uint64),
                ("o", ctypes.c_uint64), ("lse", ctypes.c_uint64),
                ("q_stride", ctypes.c_int64 * 4), ("k_stride", ctypes.c_int64 * 4),
                ("v_stride", ctypes.c_int64 * 4), ("o_stride", ctypes.c_int64 * 4)]


class _Summary(ctypes.Structure):
    _fields_ = [("tile_m", ctypes.c_int), ("tile_n", ctypes.c_int),
                ("mapping", ctypes.c_int), ("tasks", ctypes.c_int),
                ("tiles", ctypes.c_int64), ("partial_tiles", ctypes.c_int64),
                ("tasks_count", ctypes.c_int64), ("split_rows", ctypes.c_int64),
                ("empty_rows", ctypes.c_int64), ("selected_pairs", ctypes.c_double),
                ("computed_pairs", ctypes.c_double), ("wasted_fraction", ctypes.c_double),
                ("balance", ctypes.c_double), ("variant", ctypes.c_char * 96),
                ("combined", ctypes.c_int), ("subdivided", ctypes.c_int),
                ("members", ctypes.c_int64), ("merges", ctypes.c_int64),
                ("slots", ctypes.c_int64), ("membership_words", ctypes.c_int64)]


class _GpuPlanCaps(ctypes.Structure):
    _fields_ = [("mask_batch", ctypes.c_int64), ("mask_heads", ctypes.c_int64),
                ("max_tiles", ctypes.c_int64), ("max_words", ctypes.c_int64),
                ("max_slots", ctypes.c_int64), ("no_host_stats", ctypes.c_int)]


class _GpuPlanStats(ctypes.Structure):
    _fields_ = [("step", ctypes.c_int64), ("density", ctypes.c_double),
                ("row_cv", ctypes.c_double), ("empty_rows", ctypes.c_double),
                ("tiles", ctypes.c_int64), ("partial_tiles", ctypes.c_int64),
                ("tasks", ctypes.c_int64), ("merges", ctypes.c_int64),
                ("slots", ctypes.c_int64), ("membership_words", ctypes.c_int64),
                ("overflow", ctypes.c_int)]


MASK_BYTES, MASK_BITS = 0, 1


_lib = None


def library():
    """Loads libtessera once: $TESSERA_LIBRARY, else the installed library."""
    global _lib
    if _lib is not None:
        return _lib
    path = os.environ.get("TESSERA_LIBRARY") or ctypes.util.find_library("tessera")
    if not path:
        raise TesseraError("libtessera not found: set TESSERA_LIBRARY to the path of "
                           "libtessera.so or install Tessera")
    lib = ctypes.CDLL(path)
    P, I64, I, V = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, None
    sigs = {
        "tsr_geom_uniform": (I, [I64, I64, I64, I64, ctypes.POINTER(P), P]),
        "tsr_geom_variable": (I, [P, I64, P, I64, ctypes.POINTER(P), P]),
        "tsr_geom_destroy": (V, [P]),
        "tsr_geom_nq": (I64, [P]),
        "tsr_geom_nk": (I64, [P]),
        "tsr_mask_from_bytes": (I, [I64, I64, I64, I64, P, ctypes.POINTER(P), P]),
        "tsr_mask_destroy": (V, [P]),
        "tsr_problem_check": (I, [P, P]),
        "tsr_plan_opts_init": (V, [P]),
        "tsr_plan_create": (I, [P, P, P, ctypes.POINTER(P), P]),
        "tsr_plan_destroy": (V, [P]),
        "tsr_plan_summarize": (V, [P, P]),
        "tsr_plan_explain_json": (P, [P, I]),
        "tsr_context_opts_init": (V, [P]),
        "tsr_context_create": (I, [P, ctypes.POINTER(P), P]),
        "tsr_context_destroy": (V, [P]),
        "tsr_gpu_upload": (I, [P, P, P]),
        "tsr_gpu_launch": (I, [P, P, P, P, P]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    # GPU planning; absent in older builds.
    if hasattr(lib, "tsr_gpuplan_create"):
        for name, (res, args) in {
            "tsr_gpuplan_caps_init": (V, [P]),
            "tsr_gpuplan_create": (I, [P, P, P, P, ctypes.POINTER(P), P]),
            "tsr_gpuplan_destroy": (V, [P]),
            "tsr_gpuplan_plan": (I, [P, ctypes.c_uint64, I, P, P]),
            "tsr_gpuplan_run": (I, [P, P, P, P]),
            "tsr_gpuplan_launch": (I, [P, ctypes.c_uint64, I, P, P, P]),
            "tsr_gpuplan_summarize": (V, [P, P]),
            "tsr_gpuplan_stats_read": (I64, [P, P]),
        }.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [P]
    lib._free = libc.free
    _lib = lib
    return lib


def _check(status, err):
    if status != 0:
        raise TesseraError(err.text.decode(errors="replace") or f"status {status}")


def _torch():
    import torch  # imported lazily: importing tessera needs no PyTorch
    return torch


class Context:
    """Device, kernel bundle and lookup table; create once per process."""

    def __init__(self, device=None, db=None, bundle=None):
        lib = library()
        torch = _torch()
        if device is None:
            device = torch.cuda.current_device()
        torch.cuda.init()  # the primary context exists before libtessera uses it
        o = _ContextOpts()
        lib.tsr_context_opts_init(ctypes.byref(o))
        o.device = device
        o.db_path = db.encode() if db else None
        o.bundle_dir = bundle.encode() if bundle else None
        self._keep = (o.db_path, o.bundle_dir)
        h, err = ctypes.c_void_p(), _Error()
        _check(lib.tsr_context_create(ctypes.byref(o), ctypes.byref(h), ctypes.byref(err)), err)
        self._h = h
        self.device = device

    def close(self):
        if getattr(self, "_h", None):
            library().tsr_context_destroy(self._h)
            self._h = None

    __del__ = close


_DTYPES = {"torch.bfloat16": DT_BF16, "torch.float16": DT_F16}


def _layout_of(t, layout):
    """Maps a [B,H,S,D] or [B,S,H,D] tensor to (B, H, S, D, strides in BHSD order)."""
    if t.dim() != 4:
        raise TesseraError(f"expected a 4-D tensor, got shape {tuple(t.shape)}")
    if layout == "bhsd":
        b, h, s, d = t.shape
        st = t.stride()
    elif layout == "bshd":
        b, s, h, d = t.shape
        sb, ss, sh, sd = t.stride()
        st = (sb, sh, ss, sd)
    else:
        raise TesseraError(f"unknown layout '{layout}' (bhsd or bshd)")
    if st[3] != 1:
        raise TesseraError("the head dimension must be contiguous (stride 1)")
    return b, h, s, d, st


def _is_variable(block):
    """block=(q_sizes, k_sizes) (sequences of block sizes) rather than (bq, bk)."""
    return not all(isinstance(b, int) for b in block)


def _problem_setup(owner, batch, heads_q, heads_kv, seq_q, seq_k, head_dim, block, dtype,
                   layout, scale, tile, mapping, tasks, split_tiles=0):
    """Geometry, checked problem and plan options shared by Plan and GpuPlan.
    The geometry handle is stored on `owner` at once so close() frees it
    even when a later check fails."""
    lib, err = library(), _Error()
    g = ctypes.c_void_p()
    if _is_variable(block):
        qs, ks = ([int(x) for x in sizes] for sizes in block)
        qa, ka = (ctypes.c_int64 * len(qs))(*qs), (ctypes.c_int64 * len(ks))(*ks)
        _check(lib.tsr_geom_variable(qa, len(qs), ka, len(ks), ctypes.byref(g), ctypes.byref(err)), err)
    else:
        bq, bk = block
        _check(lib.tsr_geom_uniform(seq_q, seq_k, bq, bk, ctypes.byref(g), ctypes.byref(err)), err)
    owner._geom = g
    p = _Problem(batch, heads_q, heads_kv, seq_q, seq_k, head_dim,
                 0.0 if scale is None else float(scale), _DTYPES[str(dtype)],
                 LAYOUT_BHSD if layout == "bhsd" else LAYOUT_BSHD, g)
    _check(lib.tsr_problem_check(ctypes.byref(p), ctypes.byref(err)), err)
    o = _PlanOpts()
    lib.tsr_plan_opts_init(ctypes.byref(o))
    if tile:
        o.tile_m, o.tile_n = tile
    o.mapping, o.tasks, o.split_tiles = MAPPINGS[mapping], TASKS[tasks], split_tiles
    return p, o


class Plan:
    """A mask planned for one problem; replay run() on new q, k, v freely."""

    def __init__(self, context, block_mask, batch, heads_q, heads_kv, seq_q, seq_k,
                 head_dim, block=(128, 128), dtype="torch.bfloat16", layout="bhsd",
                 scale=None, tile=None, mapping="auto", tasks="auto"):
        lib, torch = library(), _torch()
        self.ctx = context
        err = _Error()
        p, o = _problem_setup(self, batch, heads_q, heads_kv, seq_q, seq_k, head_dim, block,
                              dtype, layout, scale, tile, mapping, tasks)
        self._problem, self._opts = p, o
        m = block_mask
        if m.dim() == 3:
            m = m.unsqueeze(0)
        if m.dim() != 4:
            raise TesseraError(f"block mask must be [H, NQ, NK] or [B, H, NQ, NK], got {tuple(block_mask.shape)}")
        mb = m.to(device="cpu", dtype=torch.uint8).contiguous()
        h = ctypes.c_void_p()
        _check(lib.tsr_mask_from_bytes(mb.shape[0], mb.shape[1], mb.shape[2], mb.shape[3],
                                       ctypes.c_void_p(mb.data_ptr()), ctypes.byref(h),
                                       ctypes.byref(err)), err)
        self._mask = h
        pl = ctypes.c_void_p()
        _check(lib.tsr_plan_create(ctypes.byref(p), h, ctypes.byref(o), ctypes.byref(pl),
                                   ctypes.byref(err)), err)
        self._h = pl
        _check(lib.tsr_gpu_upload(context._h, pl, ctypes.byref(err)), err)
        self.layout = layout

    def summary(self):
        s = _Summary()
        library().tsr_plan_summarize(self._h, ctypes.byref(s))
        return {f: (getattr(s, f).decode() if f == "variant" else getattr(s, f))
                for f, _ in _Summary._fields_}

    def run(self, q, k, v, out=None, lse=None, stream=None):
        """Launches on the current stream (no host synchronisation)."""
        lib, torch = library(), _torch()
        if out is None:
            out = torch.empty_like(q)
        t = _tensors(q, k, v, out, lse, self.layout)
        if stream is None:
            stream = torch.cuda.current_stream().cuda_stream
        err = _Error()
        _check(lib.tsr_gpu_launch(self.ctx._h, self._h, ctypes.byref(t), ctypes.c_void_p(stream),
                                  ctypes.byref(err)), err)
        return out

    def close(self):
        lib = library()
        for attr, fn in (("_h", lib.tsr_plan_destroy), ("_mask", lib.tsr_mask_destroy),
                         ("_geom", lib.tsr_geom_destroy)):
            if getattr(self, attr, None):
                fn(getattr(self, attr))
                setattr(self, attr, None)

    __del__ = close



def _tensors(q, k, v, out, lse, layout):
    """Device pointers and BHSD strides of q, k, v, out (and lse) for a launch."""
    torch = _torch()
    t = _GpuTensors()
    for name, x in (("q", q), ("k", k), ("v", v), ("o", out)):
        if not x.is_cuda or str(x.dtype) not in _DTYPES:
            raise TesseraError(f"{name} must be a CUDA bf16 or fp16 tensor, got {x.dtype} on {x.device}")
        *_, st = _layout_of(x, layout)
        setattr(t, name, x.data_ptr())
        getattr(t, name + "_stride")[:] = list(st)
    if lse is not None:
        if lse.dtype != torch.float32 or not lse.is_contiguous():
            raise TesseraError("lse must be a contiguous float32 tensor [B, Hq, Sq]")
        t.lse = lse.data_ptr()
    return t


class GpuPlan:
    """A plan template planned on the GPU: a device mask in, attention out.

    Chosen once per shape and regime (tile, mapping, task layout, variant,
    capacities); every call runs the planning kernels on the current stream
    and the attention kernel after them, with no host synchronisation and
    no allocation, so it can be captured in a CUDA graph and replayed while
    the mask buffer changes.  tasks: "row" (default) or "split" with
    split_tiles > 0.  stats() reads the features the planner wrote for the
    latest completed step (density, row spread) without synchronising."""

    def __init__(self, context, batch, heads_q, heads_kv, seq_q, seq_k, head_dim,
                 block=(128, 128), dtype="torch.bfloat16", layout="bhsd", scale=None,
                 tile=None, mapping="auto", tasks="row", split_tiles=0,
                 mask_batch=None, mask_heads=None, max_tiles=0, max_slots=0):
        lib = library()
        if getattr(lib, "tsr_gpuplan_create", None) is None:
            raise TesseraError("this libtessera has no GPU planning (tsr_gpuplan_create)")
        self.ctx = context
        err = _Error()
        self._h = None
        p, o = _problem_setup(self, batch, heads_q, heads_kv, seq_q, seq_k, head_dim, block,
                              dtype, layout, scale, tile, mapping, tasks, split_tiles)
        self._problem = p
        c = _GpuPlanCaps()
        lib.tsr_gpuplan_caps_init(ctypes.byref(c))
        c.mask_batch = mask_batch or batch
        c.mask_heads = mask_heads or heads_q
        c.max_tiles, c.max_slots = max_tiles, max_slots
        h = ctypes.c_void_p()
        _check(lib.tsr_gpuplan_create(context._h, ctypes.byref(p), ctypes.byref(o), ctypes.byref(c),
                                      ctypes.byref(h), ctypes.byref(err)), err)
        self._h = h
        self.layout = layout
        self.shape = (batch, heads_q, seq_q, seq_k)
        self.mask_planes = (c.mask_batch, c.mask_heads)
        bq, bk = block  # uniform: tsr_gpuplan_create refuses variable blocks
        self.nq, self.nk = -(-seq_q // bq), -(-seq_k // bk)

    def _mask_ptr(self, mask):
        torch = _torch()
        m = mask if mask.dim() == 4 else mask.unsqueeze(0)
        if m.dim() != 4 or tuple(m.shape) != (*self.mask_planes, self.nq, self.nk):
            raise TesseraError(f"block mask must be [{self.mask_planes[1]}, {self.nq}, {self.nk}] or "
                               f"[{self.mask_planes[0]}, {self.mask_planes[1]}, {self.nq}, {self.nk}], "
                               f"got {tuple(mask.shape)}")
        if not m.is_cuda or m.dtype not in (torch.bool, torch.uint8) or not m.is_contiguous():
            raise TesseraError("a GPU-planned block mask must be a contiguous CUDA bool or uint8 tensor")
        return m.data_ptr()

    def plan(self, mask, stream=None):
        """Plans the CUDA mask on the current stream (asynchronous)."""
        lib, torch = library(), _torch()
        if stream is None:
            stream = torch.cuda.current_stream().cuda_stream
        err = _Error()
        _check(lib.tsr_gpuplan_plan(self._h, self._mask_ptr(mask), MASK_BYTES, ctypes.c_void_p(stream),
                                    ctypes.byref(err)), err)

    def run(self, q, k, v, out=None, lse=None, stream=None):
        """Attention with the plan the last plan() on this stream made."""
        lib, torch = library(), _torch()
        if out is None:
            out = torch.empty_like(q)
        t = _tensors(q, k, v, out, lse, self.layout)
        if stream is None:
            stream = torch.cuda.current_stream().cuda_stream
        err = _Error()
        _check(lib.tsr_gpuplan_run(self._h, ctypes.byref(t), ctypes.c_void_p(stream), ctypes.byref(err)), err)
        return out

    def __call__(self, q, k, v, mask, out=None, lse=None, stream=None):
        """plan(mask) then run(q, k, v): one step, no host synchronisation."""
        self.plan(mask, stream)
        return self.run(q, k, v, out=out, lse=lse, stream=stream)

    def stats(self):
        """Features of the latest completed planning (no synchronisation)."""
        s = _GpuPlanStats()
        library().tsr_gpuplan_stats_read(self._h, ctypes.byref(s))
        return {f: getattr(s, f) for f, _ in _GpuPlanStats._fields_}

    def summary(self):
        s = _Summary()
        library().tsr_gpuplan_summarize(self._h, ctypes.byref(s))
        return {f: (getattr(s, f).decode() if f == "variant" else getattr(s, f))
                for f, _ in _Summary._fields_}

    def close(self):
        lib = library()
        if getattr(self, "_h", None):
            lib.tsr_gpuplan_destroy(self._h)
            self._h = None
        if getattr(self, "_geom", None):
            lib.tsr_geom_destroy(self._geom)
            self._geom = None

    __del__ = close


def attention(q, k, v, block_mask, block=(128, 128), context=None, layout="bhsd",
              scale=None, out=None, lse=None, **plan_kw):
    """One request: selection + planning + execution.  Returns the output.

    A CUDA block mask is planned on the GPU with a cached GpuPlan template
    (no host copy, no synchronisation); a CPU mask is planned on the host."""
    ctx = context or Context(device=q.device.index)
    b, hq, sq, d, _ = _layout_of(q, layout)
    _, hkv, sk, _, _ = _layout_of(k, layout)
    if (block_mask.is_cuda and not _is_variable(block)
            and getattr(library(), "tsr_gpuplan_create", None) is not None):
        m = block_mask if block_mask.dim() == 4 else block_mask.unsqueeze(0)
        key = (id(ctx), b, hq, hkv, sq, sk, d, tuple(block), str(q.dtype), layout, scale,
               m.shape[0], m.shape[1], tuple(sorted(plan_kw.items())))
        gp = _gpuplans.get(key)
        if gp is None:
            gp = GpuPlan(ctx, b, hq, hkv, sq, sk, d, block=block, dtype=q.dtype, layout=layout,
                         scale=scale, mask_batch=m.shape[0], mask_heads=m.shape[1], **plan_kw)
            _gpuplans[key] = gp
        return gp(q, k, v, block_mask if block_mask.is_contiguous() else block_mask.contiguous(),
                  out=out, lse=lse)
    plan = Plan(ctx, block_mask, b, hq, hkv, sq, sk, d, block=block, dtype=q.dtype,
                layout=layout, scale=scale, **plan_kw)
    o = plan.run(q, k, v, out=out, lse=lse)
    # The plan's device metadata must outlive the launch: keep the plan alive
    # until the stream passes this point, without a host synchronisation.
    _pending.append((plan, ctx, _torch().cuda.current_stream().record_event()))
    _reap()
    return o


_pending = []
_gpuplans = {}  # GPU plan templates by shape and regime; kept for the process


def _reap():
    while _pending and _pending[0][2].query():
        _pending.pop(0)[0].close()
