"""tessera: a thin ctypes binding over libtessera for diffusion pipelines.

No compile step: the shared library is found through $TESSERA_LIBRARY, then
the one `pip install .` put inside this package (tessera/_lib/, with its
kernel bundle), then the installed libtessera.so.  Importing needs neither PyTorch nor a GPU;
running needs both.  Tensors are CUDA tensors (bf16 or fp16) shaped
[B, H, S, D] (SDPA) or [B, S, H, D] (most DiT code); the binding passes their
pointers, strides and the current stream, so a call is asynchronous and can
be captured in a CUDA graph once planned.  Importing loads the library when
it is found and compares the struct copies below with the library's
(tsr_abi_sizeof): a binding and a library that disagree raise ImportError
naming the struct and both sizes.

    import tessera
    ctx = tessera.Context()                          # device 0, embedded lookup table
    o = tessera.attention(q, k, v, block_mask, block=(128, 128), context=ctx)

Without context=, attention() uses tessera.default_context(q's device): one
context per device for the process, so repeated calls create nothing new.
A context owns attention()'s GPU plan templates; closing it frees them.

A host mask is planned with the plan the context's lookup table selects for
its features (tile, mapping, task layout, variant; the automatic planner
when the table has no usable row); Plan(..., select=False) or
attention(..., select=False) forces the automatic planner, and
plan.selected_by / plan.selection say where the plan came from.

block_mask: bool tensor [H, NQ, NK] or [B, H, NQ, NK] over logical blocks of
block=(bq, bk) tokens (the last block may be ragged), or of variable sizes:
block=(q_sizes, k_sizes), the token count of every query and key block (VSA's
cubes, STA's tiles); a CUDA mask of either kind is planned on the GPU (a
variable geometry's block maps are uploaded once per template), a CPU mask on
the host.

A CUDA mask is planned on the GPU, where it already is (no copy to the host,
no synchronisation): attention() keeps one GpuPlan template per shape and
regime on the context and reuses it, so a step is planning kernels +
attention on the current stream.  The regime is re-selected from the lookup table with the
features the planner published for the previous completed step (density,
row spread), by libtessera's tsr_gpuplan_reselect (so C callers choose
alike), and each switch is judged by measured step times
(tsr_gpuplan_hold_step: a template more than 2% slower than the one it came
from goes back and is held); a shape's first step runs the automatic template.  A
GpuPlan used directly keeps its regime, capturable in a CUDA graph with the
mask buffer's contents changing between replays:

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
import sys
import threading

__all__ = ["TesseraError", "Context", "Plan", "GpuPlan", "attention", "default_context",
           "last_selection", "library", "NO_DEVICE"]

# ---- enums mirrored from tessera.h (keep in order) ------------------------
DT_BOOL, DT_U8, DT_I32, DT_I64, DT_F16, DT_BF16, DT_F32, DT_F64 = range(8)
LAYOUT_BHSD, LAYOUT_BSHD = 0, 1
MAPPINGS = {"auto": 0, "retain": 1, "combine": 2, "subdivide": 3, "gather": 4}
TASKS = {"auto": 0, "row": 1, "split": 2, "pack": 3}
# tsr_precision: products in the tensors' dtype, or the opt-in FP8 scheme
# (docs/fp8.md); a GPU without an FP8 variant refuses fp8 (TesseraError).
PRECISIONS = {"native": 0, "fp8": 1}
NO_DEVICE = -1  # TSR_CONTEXT_NO_DEVICE: bundle and lookup table only, no GPU


class TesseraError(RuntimeError):
    """A libtessera call failed; the message is the library's error line."""


class _Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("text", ctypes.c_char * 320)]


class _Array(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * 8), ("data", ctypes.c_void_p)]


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
                ("variant", ctypes.c_char_p), ("split_tiles", ctypes.c_int),
                ("precision", ctypes.c_int)]


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


class _Features(ctypes.Structure):
    _fields_ = [("density", ctypes.c_double), ("block_density", ctypes.c_double),
                ("row_cv", ctypes.c_double), ("empty_rows", ctypes.c_double),
                ("fill", ctypes.c_double * 4), ("touched", ctypes.c_int64 * 4),
                ("rows_per_sm", ctypes.c_double), ("bq", ctypes.c_int64), ("bk", ctypes.c_int64),
                ("seq_q", ctypes.c_int64), ("seq_k", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("dtype", ctypes.c_int), ("num_sms", ctypes.c_int)]


class _Selection(ctypes.Structure):
    _fields_ = [("opts", _PlanOpts), ("variant", ctypes.c_char * 96),
                ("from_table", ctypes.c_int), ("level", ctypes.c_int),
                ("row_id", ctypes.c_int64), ("region", ctypes.c_int * 8),
                ("reason", ctypes.c_char * 384)]


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


class _Regime(ctypes.Structure):
    _fields_ = [("changed", ctypes.c_int), ("opts", _PlanOpts), ("sel", _Selection)]


_HOLD_MAX = 64  # TSR_GPUPLAN_HOLD_MAX


class _Hold(ctypes.Structure):
    _fields_ = [("steps", ctypes.c_int64), ("came_to", ctypes.c_int), ("came_from", ctypes.c_int),
                ("holds", ctypes.c_int * _HOLD_MAX), ("until", ctypes.c_int64 * _HOLD_MAX),
                ("ms", ctypes.c_double * _HOLD_MAX)]


class _PoolArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint64), ("dtype", ctypes.c_int), ("batch", ctypes.c_int64),
                ("heads", ctypes.c_int64), ("tokens", ctypes.c_int64), ("dim", ctypes.c_int64),
                ("stride_b", ctypes.c_int64), ("stride_h", ctypes.c_int64), ("stride_s", ctypes.c_int64),
                ("grid", ctypes.c_int64 * 3), ("tile", ctypes.c_int64 * 3), ("out", ctypes.c_uint64),
                ("sq", ctypes.c_uint64), ("x2", ctypes.c_uint64), ("heads2", ctypes.c_int64),
                ("stride2_b", ctypes.c_int64), ("stride2_h", ctypes.c_int64), ("stride2_s", ctypes.c_int64),
                ("out2", ctypes.c_uint64), ("sq2", ctypes.c_uint64), ("runs", ctypes.c_int64),
                ("run_tiles", ctypes.c_int64 * 8), ("run_size", ctypes.c_int64 * 8), ("kernel", ctypes.c_int64),
                ("order", ctypes.c_uint64)]


class _SelectArgs(ctypes.Structure):
    _fields_ = [("pq", ctypes.c_uint64), ("pk", ctypes.c_uint64), ("dtype", ctypes.c_int),
                ("batch", ctypes.c_int64), ("heads", ctypes.c_int64), ("kv_heads", ctypes.c_int64),
                ("nq", ctypes.c_int64), ("nk", ctypes.c_int64), ("dim", ctypes.c_int64),
                ("scale", ctypes.c_double), ("rule", ctypes.c_int), ("k", ctypes.c_int64),
                ("tau", ctypes.c_double), ("min_keep", ctypes.c_int64), ("out", ctypes.c_uint64),
                ("rows", ctypes.c_int64), ("kernel", ctypes.c_int64)]


class _SampledArgs(ctypes.Structure):
    _fields_ = [("q", ctypes.c_uint64), ("k", ctypes.c_uint64), ("v", ctypes.c_uint64),
                ("dtype", ctypes.c_int), ("batch", ctypes.c_int64), ("heads", ctypes.c_int64),
                ("tokens", ctypes.c_int64), ("dim", ctypes.c_int64), ("q_stride", ctypes.c_int64 * 3),
                ("k_stride", ctypes.c_int64 * 3), ("v_stride", ctypes.c_int64 * 3), ("rows", ctypes.c_uint64),
                ("samples", ctypes.c_int64), ("planes", ctypes.c_uint64), ("scale", ctypes.c_double),
                ("work", ctypes.c_uint64), ("work_bytes", ctypes.c_int64), ("out", ctypes.c_uint64),
                ("stages", ctypes.c_int64)]


MASK_BYTES, MASK_BITS = 0, 1

# The C struct each ctypes mirror above copies; library() compares their
# sizes with the library's own (tsr_abi_sizeof) and refuses a mismatch.
_MIRRORS = {"tsr_error": _Error, "tsr_array": _Array, "tsr_problem": _Problem, "tsr_plan_opts": _PlanOpts,
            "tsr_context_opts": _ContextOpts, "tsr_gpu_tensors": _GpuTensors,
            "tsr_plan_summary": _Summary, "tsr_features": _Features, "tsr_selection": _Selection,
            "tsr_gpuplan_caps": _GpuPlanCaps, "tsr_gpuplan_stats": _GpuPlanStats,
            "tsr_gpuplan_regime": _Regime, "tsr_gpuplan_hold": _Hold, "tsr_pool_args": _PoolArgs,
            "tsr_select_args": _SelectArgs, "tsr_sampled_args": _SampledArgs}


def _check_abi(lib, path):
    """ImportError unless every mirror has the library's size for its struct:
    a field added, removed or retyped on one side would otherwise shift every
    field after it silently."""
    fn = getattr(lib, "tsr_abi_sizeof", None)
    if fn is None:
        raise ImportError(f"{path} has no tsr_abi_sizeof: it is older than this binding (tessera/__init__.py)")
    fn.restype, fn.argtypes = ctypes.c_size_t, [ctypes.c_char_p]
    for name, mirror in _MIRRORS.items():
        want, got = fn(name.encode()), ctypes.sizeof(mirror)
        if want == 0:
            raise ImportError(f"{path} does not know struct {name} (tsr_abi_sizeof gives 0)")
        if want != got:
            raise ImportError(f"struct {name}: {want} bytes in {path}, {got} bytes in the binding's "
                              f"copy ({mirror.__name__}): the binding and the library disagree")


_lib = None
# What `pip install .` puts inside the package (setup.py): the library and
# the kernel bundle of one build.
_PKG_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib")
_PKG_BUNDLE = os.path.join(_PKG_LIB, "bundle")


def _library_path():
    """$TESSERA_LIBRARY, else the package's own library, else the installed one."""
    own = os.path.join(_PKG_LIB, "libtessera.so")
    return (os.environ.get("TESSERA_LIBRARY") or (own if os.path.exists(own) else None)
            or ctypes.util.find_library("tessera"))


def _bundle_dir(asked):
    """The bundle a context loads: the one asked for, else $TESSERA_BUNDLE
    (None: libtessera reads it), else the package's own when the library is
    the package's (one build's pair), else libtessera's installed default."""
    if asked or os.environ.get("TESSERA_BUNDLE"):
        return asked or None
    if library()._path == os.path.join(_PKG_LIB, "libtessera.so") and os.path.isdir(_PKG_BUNDLE):
        return _PKG_BUNDLE
    return None


def library():
    """Loads libtessera once (_library_path says where from)."""
    global _lib
    if _lib is not None:
        return _lib
    path = _library_path()
    if not path:
        raise TesseraError("libtessera not found: set TESSERA_LIBRARY to the path of "
                           "libtessera.so, or pip install Tessera's source tree")
    lib = ctypes.CDLL(path)
    lib._path = path
    _check_abi(lib, path)
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
        "tsr_plan_verify": (I, [P, P, P]),
        "tsr_cpu_execute": (I, [P, P, P, P, P, P, P]),
        "tsr_npy_free": (V, [P]),
        "tsr_context_select": (I, [P, P, P, P, P, P]),
        "tsr_context_select_features": (I, [P, P, P, P, P]),
        "tsr_features_compute": (I, [P, P, I, P, P]),
        "tsr_context_selector": (P, [P]),
        "tsr_select_gpu": (ctypes.c_char_p, [P]),
        "tsr_select_rows": (I64, [P]),
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
            "tsr_gpuplan_features": (V, [P, P, P]),
            "tsr_gpuplan_reselect": (I, [P, P, P, P, P]),
            "tsr_gpuplan_hold_init": (V, [P]),
            "tsr_gpuplan_hold_step": (I, [P, ctypes.c_int, ctypes.c_int, ctypes.c_double, P, P, P]),
        }.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
    # The mask producers' fused stages (tessera.methods); absent in older builds.
    if hasattr(lib, "tsr_producer_create"):
        for name, (res, args) in {
            "tsr_producer_create": (I, [P, ctypes.POINTER(P), P]),
            "tsr_producer_destroy": (V, [P]),
            "tsr_produce_pool": (I, [P, P, P, P]),
            "tsr_produce_select": (I, [P, P, P, P]),
            "tsr_produce_sampled_work_bytes": (I64, [P, P, P]),
            "tsr_produce_sampled": (I, [P, P, P, P]),
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
    """Device, kernel bundle and lookup table; create once per process.

    db: the lookup database to select plans from (default: the embedded
    one).  device=NO_DEVICE: a host-only context (bundle and table, no GPU,
    no PyTorch) that selects and plans but cannot run."""

    def __init__(self, device=None, db=None, bundle=None):
        # attention()'s GPU plan templates made with this context, by shape
        # (_GpuTemplates): they live and die with it.
        self._gpuplans = {}
        self._producer = None  # tessera.methods' fused stages, loaded on first use (producer())
        lib = self._lib = library()  # close() runs at interpreter exit too: no lookups then
        if device != NO_DEVICE:
            torch = _torch()
            if device is None:
                device = torch.cuda.current_device()
            torch.cuda.init()  # the primary context exists before libtessera uses it
        o = _ContextOpts()
        lib.tsr_context_opts_init(ctypes.byref(o))
        o.device = device
        o.db_path = db.encode() if db else None
        bundle = _bundle_dir(bundle)
        o.bundle_dir = bundle.encode() if bundle else None
        self._keep = (o.db_path, o.bundle_dir)
        h, err = ctypes.c_void_p(), _Error()
        _check(lib.tsr_context_create(ctypes.byref(o), ctypes.byref(h), ctypes.byref(err)), err)
        self._h = h
        self.device = device
        sel = lib.tsr_context_selector(h)
        self.table_gpu = lib.tsr_select_gpu(sel).decode()
        self.table_rows = lib.tsr_select_rows(sel)

    def close(self):
        # The templates' device buffers belong to this context: free them first.
        templates, self._gpuplans = getattr(self, "_gpuplans", {}), {}
        for tp in templates.values():
            tp.close()
        if getattr(self, "_producer", None):
            self._lib.tsr_producer_destroy(self._producer)
            self._producer = None
        if getattr(self, "_h", None):
            self._lib.tsr_context_destroy(self._h)
            self._h = None

    __del__ = close

    def producer(self):
        """The handle of tessera.methods' fused producer kernels on this
        context (tsr_producer_create: loads the bundle's planner module once;
        make the first call before capturing a CUDA graph)."""
        if self._producer is None:
            h, err = ctypes.c_void_p(), _Error()
            _check(self._lib.tsr_producer_create(self._h, ctypes.byref(h), ctypes.byref(err)), err)
            self._producer = h
        return self._producer


_contexts = {}  # default_context(): device index -> Context, for the process
_contexts_lock = threading.Lock()


def default_context(device=None):
    """The context attention() uses when given none: one per device (the
    current CUDA device when None), created on first use and kept for the
    process (a closed one is replaced).  Thread-safe: concurrent first calls
    create one context."""
    if device is None:
        device = _torch().cuda.current_device()
    with _contexts_lock:
        ctx = _contexts.get(device)
        if ctx is None or not ctx._h:
            ctx = _contexts[device] = Context(device=device)
        return ctx


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


def _block_key(block):
    """A hashable key of (bq, bk) or (q_sizes, k_sizes): variable geometries
    are cached by their sizes (a GpuPlan template uploads its block maps
    once), so a request costs a tuple of the sizes, not a new geometry."""
    if not _is_variable(block):
        return tuple(block)
    # tuple() of a list is one C loop (a few us for 624 cubes); arrays and
    # tensors become lists first, so equal sizes give equal keys.
    return tuple(tuple(s.tolist() if hasattr(s, "tolist") else s) for s in block)


def _problem_setup(owner, batch, heads_q, heads_kv, seq_q, seq_k, head_dim, block, dtype,
                   layout, scale, tile, mapping, tasks, split_tiles=0, precision="native"):
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
    if mapping not in MAPPINGS:
        raise TesseraError(f"invalid mapping {mapping!r}: expected one of {', '.join(MAPPINGS)}")
    o.mapping, o.tasks, o.split_tiles = MAPPINGS[mapping], TASKS[tasks], split_tiles
    if precision not in PRECISIONS:
        raise TesseraError(f"invalid precision {precision!r}: expected 'native' or 'fp8'")
    o.precision = PRECISIONS[precision]
    return p, o


_LEVELS = {0: "table", 1: "nearest", 2: "geometry"}


def _select(context, problem, mask, opts):
    """The context's selection for (problem, mask handle), with opts as the
    fallback: returns (selection, selected_by).  selection.opts is what to
    plan with; it points into selection, so keep that alive until planned.
    selected_by: "table" (a row of the mask's region), "nearest" (the
    nearest profiled region's row), "geometry" (the row of the block
    geometry alone) or "fallback" (no usable row: the automatic planner)."""
    lib, err, sel = library(), _Error(), _Selection()
    _check(lib.tsr_context_select(context._h, ctypes.byref(problem), mask, ctypes.byref(opts),
                                  ctypes.byref(sel), ctypes.byref(err)), err)
    return sel, (_LEVELS.get(sel.level, "table") if sel.from_table else "fallback")


class Plan:
    """A mask planned for one problem; replay run() on new q, k, v freely.

    The plan is the one the context's lookup table selects for the mask
    (select=True, unless tile, mapping or tasks are given); select=False
    plans with the automatic planner.  selected_by: "table", "nearest",
    "geometry", "fallback" (no usable row: the automatic planner),
    "options" (tile/mapping/tasks given) or "off"; selection: the reason,
    one line.  run() on CPU tensors executes the plan on the host
    (tsr_cpu_execute); upload=False leaves the device copy of the plan to
    the first run() on CUDA tensors (a host-only context has no device).
    variant: the kernel variant to run (a bundle name, as GpuPlan takes it);
    like tile, mapping and tasks it turns the table's selection off."""

    def __init__(self, context, block_mask, batch, heads_q, heads_kv, seq_q, seq_k,
                 head_dim, block=(128, 128), dtype="torch.bfloat16", layout="bhsd",
                 scale=None, tile=None, mapping="auto", tasks="auto", select=True, upload=True,
                 precision="native", variant=None):
        lib, torch = library(), _torch()
        self._lib, self.ctx = lib, context
        err = _Error()
        p, o = _problem_setup(self, batch, heads_q, heads_kv, seq_q, seq_k, head_dim, block,
                              dtype, layout, scale, tile, mapping, tasks, precision=precision)
        self._problem, self._opts = p, o
        if variant:
            self._variant = variant.encode()
            o.variant = self._variant
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
        self._h = _plan_selected(self, context, p, h, o, select,
                                 tile is None and mapping == "auto" and tasks == "auto" and not variant)
        self._uploaded = False
        self.layout = layout
        if upload:
            self._upload()

    def _upload(self):
        err = _Error()
        _check(library().tsr_gpu_upload(self.ctx._h, self._h, ctypes.byref(err)), err)
        self._uploaded = True

    def summary(self):
        s = _Summary()
        library().tsr_plan_summarize(self._h, ctypes.byref(s))
        return {f: (getattr(s, f).decode() if f == "variant" else getattr(s, f))
                for f, _ in _Summary._fields_}

    def run(self, q, k, v, out=None, lse=None, stream=None):
        """Launches on the current stream (no host synchronisation); CPU
        tensors run the CPU plan executor (synchronous, see _cpu_run)."""
        lib, torch = library(), _torch()
        if not q.is_cuda:
            return _cpu_run(self, q, k, v, out, lse)
        if not self._uploaded:
            self._upload()
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
        lib = self.__dict__.get("_lib") or library()
        for attr, fn in (("_h", lib.tsr_plan_destroy), ("_mask", lib.tsr_mask_destroy),
                         ("_geom", lib.tsr_geom_destroy)):
            if getattr(self, attr, None):
                fn(getattr(self, attr))
                setattr(self, attr, None)

    __del__ = close



def _plan_selected(owner, context, problem, mask, opts, select, open_choice):
    """Selects (when asked and the options leave the choice open), plans and
    records owner.selected_by and owner.selection; returns the plan handle."""
    lib, err = library(), _Error()
    if select and open_choice:
        sel, owner.selected_by = _select(context, problem, mask, opts)
        owner.selection = sel.reason.decode(errors="replace")
        opts = sel.opts  # shares sel's memory: sel stays alive until planned
    else:
        sel = None
        owner.selected_by = "off" if open_choice else "options"
        owner.selection = ("selection off: the automatic planner" if open_choice
                           else "tile, mapping, tasks or variant given: planned as asked")
    pl = ctypes.c_void_p()
    _check(lib.tsr_plan_create(ctypes.byref(problem), mask, ctypes.byref(opts), ctypes.byref(pl),
                               ctypes.byref(err)), err)
    del sel
    return pl


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


_CPU_DTYPES = ("torch.float32", "torch.bfloat16", "torch.float16")


def _cpu_view(x, name, q, layout):
    """x as a contiguous float32 [B, H, S, D] CPU tensor (x itself when it is
    one already), after checking it is a CPU tensor of q's dtype."""
    if x.is_cuda or str(x.dtype) not in _CPU_DTYPES:
        raise TesseraError(f"{name} must be a CPU float32, bf16 or fp16 tensor, got {x.dtype} "
                           f"on {x.device}")
    if x.dtype != q.dtype:
        raise TesseraError(f"{name} is {x.dtype} but q is {q.dtype}: q, k and v share one dtype")
    if layout == "bshd":
        x = x.transpose(1, 2)
    return x.to(_torch().float32).contiguous()


def _array_of(x):
    """A tsr_array over a contiguous float32 CPU tensor (borrowed memory)."""
    a = _Array(DT_F32, x.dim())
    a.shape[:x.dim()] = list(x.shape)
    a.data = x.data_ptr()
    return a


def _cpu_run(plan, q, k, v, out, lse):
    """The plan on CPU tensors through tsr_cpu_execute: float32 arithmetic
    (bf16 and fp16 inputs are widened, the output is rounded back to q's
    dtype), out shaped and laid out like q, lse float32 [B, Hq, Sq] natural
    log (-inf for a row with nothing selected), as the GPU path writes.
    Costs float32 copies of q, k, v (none for contiguous float32 BHSD) and
    O(computed pairs x D) single-threaded flops."""
    torch, lib, err = _torch(), library(), _Error()
    p = plan._problem
    want = (p.batch, p.heads_q, p.seq_q, p.head_dim)
    x = [_cpu_view(t, n, q, plan.layout) for n, t in (("q", q), ("k", k), ("v", v))]
    if out is None:
        out = torch.empty_like(q)
    elif out.is_cuda or out.dtype != q.dtype or tuple(out.shape) != tuple(q.shape):
        raise TesseraError(f"out must be a CPU {q.dtype} tensor shaped like q {tuple(q.shape)}, "
                           f"got {out.dtype} {tuple(out.shape)} on {out.device}")
    if lse is not None and (lse.is_cuda or lse.dtype != torch.float32 or
                            tuple(lse.shape) != want[:3]):
        raise TesseraError(f"lse must be a CPU float32 tensor {list(want[:3])}, "
                           f"got {lse.dtype} {tuple(lse.shape)} on {lse.device}")
    arrays = [_array_of(t) for t in x]
    ro, rl = _Array(), _Array()
    _check(lib.tsr_cpu_execute(plan._h, *(ctypes.byref(a) for a in arrays), ctypes.byref(ro),
                               ctypes.byref(rl) if lse is not None else None, ctypes.byref(err)), err)
    try:
        # Copied (and rounded to out's dtype) straight from the library's buffers.
        for res, dst, shape in ((ro, out, want), (rl, lse, want[:3])):
            if dst is None:
                continue
            n = 1
            for e in shape:
                n *= e
            src = torch.frombuffer((ctypes.c_float * n).from_address(res.data),
                                   dtype=torch.float32).view(shape)
            if dst is out and plan.layout == "bshd":
                dst = dst.transpose(1, 2)
            dst.copy_(src)
    finally:
        lib.tsr_npy_free(ctypes.byref(ro))
        lib.tsr_npy_free(ctypes.byref(rl))
    return out


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
                 mask_batch=None, mask_heads=None, max_tiles=0, max_slots=0, variant=None,
                 precision="native"):
        lib = library()
        if getattr(lib, "tsr_gpuplan_create", None) is None:
            raise TesseraError("this libtessera has no GPU planning (tsr_gpuplan_create)")
        self._lib, self.ctx = lib, context
        err = _Error()
        self._h = None
        p, o = _problem_setup(self, batch, heads_q, heads_kv, seq_q, seq_k, head_dim, block,
                              dtype, layout, scale, tile, mapping, tasks, split_tiles,
                              precision)
        self._problem = p
        if variant:
            self._variant = variant.encode()
            o.variant = self._variant
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
        self.nq, self.nk = lib.tsr_geom_nq(self._geom), lib.tsr_geom_nk(self._geom)

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

    def _stats(self):
        s = _GpuPlanStats()
        library().tsr_gpuplan_stats_read(self._h, ctypes.byref(s))
        return s

    def stats(self):
        """Features of the latest completed planning (no synchronisation)."""
        s = self._stats()
        return {f: getattr(s, f) for f, _ in _GpuPlanStats._fields_}

    def summary(self):
        s = _Summary()
        library().tsr_gpuplan_summarize(self._h, ctypes.byref(s))
        return {f: (getattr(s, f).decode() if f == "variant" else getattr(s, f))
                for f, _ in _Summary._fields_}

    def close(self):
        lib = self.__dict__.get("_lib") or library()
        if getattr(self, "_h", None):
            lib.tsr_gpuplan_destroy(self._h)
            self._h = None
        if getattr(self, "_geom", None):
            lib.tsr_geom_destroy(self._geom)
            self._geom = None

    __del__ = close


class _GpuTemplates:
    """The GPU plan templates of one shape: the automatic one, and those the
    lookup table selects from the features the planner published for the
    latest completed step (read without synchronising, so a step behind),
    unless libtessera's hold (tsr_gpuplan_hold_step) keeps one back: a
    switch is judged by step times (CUDA events around some steps, see run),
    and a template more than 2% slower than the one it came from goes back
    and is held.  Templates are kept, so a regime seen before costs nothing;
    none is made while a CUDA graph is being captured."""

    _NAMES_M = {v: k for k, v in MAPPINGS.items()}
    _NAMES_T = {v: k for k, v in TASKS.items()}

    def __init__(self, ctx, make, select):
        self.ctx, self.make, self.select = ctx, make, select
        self.auto = self.cur = make()
        self.plans = {}
        self.key = None           # the current template's regime (None: the automatic one)
        self.prev = None          # the template before it: (regime, reason, selected_by)
        # Numbers in the hold, one a regime apart from the split chunk (which
        # follows each step's mean row): a held split row stays held.
        self.numbers = {None: 0}
        self.hold = _Hold()
        library().tsr_gpuplan_hold_init(ctypes.byref(self.hold))
        self.timing = False       # whether this step's template runs between events
        self.calls = {}           # template -> calls
        # template -> its latest timed calls, oldest first: [call, start event, end event,
        # the call's density (None until the planner publishes it), its time a unit of density]
        self.events = {}
        self.known = set()        # templates with a step time
        self.seen = (id(self.cur), 0)
        self.selected_by = "fallback" if select else "off"
        self.selection = self.reason = ("no completed step yet: the automatic template" if select
                                        else "selection off: the automatic template")

    def _number(self, regime):
        """The regime's number in the hold (0: the automatic template)."""
        return self.numbers.setdefault(regime and regime[:4] + regime[5:], len(self.numbers))

    def pick(self):
        """The template for this step: the regime libtessera re-selects
        (tsr_gpuplan_reselect, the policy C callers get) from the latest
        completed step of the current template, made on first use, unless
        tsr_gpuplan_hold_step holds it back."""
        self.timing = False
        if not self.select or _torch().cuda.is_current_stream_capturing():
            return self.cur
        self.timing = True
        lib, err, cur = library(), _Error(), self.cur
        st = cur._stats()
        if (id(cur), st.step) == self.seen:
            return cur
        for e in self.events.get(cur, ()):  # a timed call's density, what its time is divided by
            if e[0] == st.step:
                e[3] = st.density
        r = _Regime()
        _check(lib.tsr_gpuplan_reselect(self.ctx._h, cur._h, ctypes.byref(st), ctypes.byref(r),
                                        ctypes.byref(err)), err)
        if not r.changed:  # no completed step yet, or it overflowed: keep the template
            return cur
        self.seen = (id(cur), st.step)
        sel, o = r.sel, r.opts
        reason = sel.reason.decode(errors="replace")
        regime = (o.tile_m, o.tile_n, o.mapping, o.tasks, o.split_tiles, sel.variant) if sel.from_table else None
        chosen, here, nxt, held = self._number(regime), self._number(self.key), ctypes.c_int(), ctypes.c_int64()
        h = self.hold
        # A time is read (an event query or two) only where it is judged: a
        # switch away, or this template's own switch waiting for one; the
        # hold keeps the latest it was given.
        ms = self._step_ms(cur) if chosen != here or h.came_to == here else 0.0
        if chosen != here and not ms and self.calls.get(cur, 0) < self._DEFER:
            # Time this template before leaving it, so that the switch can be judged.
            self.selection = (f"{self.reason}; then step {st.step} selected another template ({reason}): "
                              "deferred, this template's step not timed yet")
            return cur
        holds = h.holds[chosen] if chosen < _HOLD_MAX else 0
        _check(lib.tsr_gpuplan_hold_step(ctypes.byref(h), here, chosen, ctypes.c_double(ms),
                                         ctypes.byref(nxt), ctypes.byref(held), ctypes.byref(err)), err)
        if nxt.value == here != chosen:  # held back: the current template and its selection stay
            why = (f"this template's step took {ms:.3f} ms a unit of density, that one's {h.ms[chosen]:.3f}"
                   if chosen < _HOLD_MAX and h.holds[chosen] != holds else
                   "of the two, it ran these masks slower or sent them back here")
            self.selection = (f"{self.reason}; then step {st.step} selected another template ({reason}), "
                              f"held back for {held.value} more steps: {why}")
            return cur
        if nxt.value != chosen:  # back to the template it came from: this one ran slower
            return self._back(ms, here, nxt.value)
        return self._switch(regime, sel, o, reason)

    def _back(self, ms, here, to):
        """Back to the template this one was switched from (number `to`),
        this one held."""
        h, (key, reason, by) = self.hold, self.prev
        self.selection = (f"{reason}; back from the template it switched to, held for "
                          f"{h.until[here] - h.steps} steps: its step took {ms:.3f} ms a unit of "
                          f"density, this one's {h.ms[to]:.3f}")
        self.key, self.reason, self.selected_by = key, reason, by
        self.cur = self.plans[key] if key is not None else self.auto
        return self.cur

    def _switch(self, regime, sel, o, reason):
        """To the template of `regime` (None: the automatic one; o its
        options), made on first use."""
        if regime is not None and regime not in self.plans:
            try:
                self.plans[regime] = self.make(tile=(o.tile_m, o.tile_n), mapping=self._NAMES_M[o.mapping],
                                               tasks=self._NAMES_T[o.tasks], split_tiles=o.split_tiles,
                                               variant=sel.variant.decode() or None)
            except TesseraError as e:  # a regime the GPU planner cannot take
                self.plans[regime] = None
                reason += f"; GPU template refused ({e}): the automatic template"
        if regime is not None and self.plans[regime] is None:
            regime = None
        self.prev = (self.key, self.reason, self.selected_by)  # where a judged switch goes back to
        self.selection = self.reason = reason
        self.key = regime
        self.selected_by = _LEVELS.get(sel.level, "table") if regime is not None else "fallback"
        self.cur = self.plans[regime] if regime is not None else self.auto
        return self.cur

    # Events cost microseconds a call, so only some calls are timed: every
    # call of a template until it has a time, and of one just switched to
    # until the switch is judged, then every 8th; never a template's first
    # (it may load kernels, and the GPU may wait on the host).  A switch away
    # from a template with no time yet waits up to _DEFER calls for one.
    # Times are divided by the density the planner published for the same
    # call (layers' masks differ in density; a time a unit of density
    # compares templates across them).
    _TIME_EVERY, _RING, _DEFER = 8, 4, 4

    def run(self, gp, *args, **kw):
        """Runs template gp (the one pick returned) on the current stream,
        between two CUDA events where this call is timed."""
        n = self.calls[gp] = self.calls.get(gp, 0) + 1
        if (not self.timing or n == 1 or
                (gp in self.known and self.hold.came_to < 0 and n % self._TIME_EVERY != 2)):
            return gp(*args, **kw)
        torch = _torch()
        ring = self.events.setdefault(gp, [])
        old = ring.pop(0) if len(ring) == self._RING else None
        start, end = old[1:3] if old else (torch.cuda.Event(enable_timing=True),
                                           torch.cuda.Event(enable_timing=True))
        start.record()
        o = gp(*args, **kw)
        end.record()
        ring.append([n, start, end, None, None])
        return o

    def _step_ms(self, gp):
        """Template gp's latest timed call that has completed and whose
        density is known: its time in ms divided by that density; 0 if none."""
        for e in reversed(self.events.get(gp, ())):
            if e[4] is None and e[3] and e[2].query():
                e[4] = e[1].elapsed_time(e[2]) / e[3]
            if e[4] is not None:
                self.known.add(gp)
                return e[4]
        return 0.0

    def close(self):
        self.events = {}
        for gp in [self.auto, *self.plans.values()]:
            if gp is not None:
                gp.close()
        self.plans = {}


def last_selection():
    """Where the plan of the latest attention() call came from:
    {"selected_by": ..., "selection": the reason}.  For a CUDA mask it is the
    template chosen from the previous completed step's features."""
    return dict(_last_selection)


def attention(q, k, v, block_mask, block=(128, 128), context=None, layout="bhsd",
              scale=None, out=None, lse=None, select=True, return_lse=False, **plan_kw):
    """One request: selection + planning + execution.  Returns the output.

    A CUDA block mask is planned on the GPU with a cached GpuPlan template
    (no host copy, no synchronisation), re-selected from the lookup table
    with the features the planner published for the latest completed step;
    a CPU mask is planned on the host with the plan the lookup table selects
    for its features.  select=False: the automatic plan (template).  Giving
    tile, mapping or tasks plans as asked.  last_selection() says why.

    CPU tensors (float32, bf16 or fp16; a CPU mask) run the plan the lookup
    table selects through the CPU plan executor, in float32, with a
    host-only default context (device NO_DEVICE) unless context= is given:
    synchronous and slow, for tests and machines without a GPU.

    return_lse=True returns (out, lse), lse float32 [B, Hq, Sq] (natural
    log, -inf for a row with nothing selected).  Without context=, out=,
    lse= or plan options, the call goes through the torch op
    tessera::attention (torch.ops.tessera.attention, see _register_op), so
    torch.compile(fullgraph=True) traces it and a CUDA graph captures it;
    with any of them it runs directly (eager only).

    precision="fp8" (default "native"): the FP8 scheme of docs/fp8.md; a
    GPU or bundle without an FP8 variant raises TesseraError naming it,
    never a silent native run.  Heads whose K has outlier channels run in
    the native dtype (the per-head fallback, decided on the device)."""
    op = _OP if _OP is not None else _load_op(q)
    if op is not None and context is None and out is None and lse is None and not plan_kw:
        o, lse = op(q, k, v, block_mask, *_block_args(block), layout, scale, select, return_lse)
        return (o, lse) if return_lse else o
    if return_lse and lse is None:
        b, hq, sq, _, _ = _layout_of(q, layout)
        lse = _torch().empty((b, hq, sq), dtype=_torch().float32, device=q.device)
    o = _attention(q, k, v, block_mask, block, context, layout, scale, out, lse, select, plan_kw)
    return (o, lse) if return_lse else o


def _attention(q, k, v, block_mask, block, context, layout, scale, out, lse, select, plan_kw):
    """attention() without the op: what the op's kernels run."""
    b, hq, sq, d, _ = _layout_of(q, layout)
    _, hkv, sk, _, _ = _layout_of(k, layout)
    _check_shapes(q, k, v, layout)
    if not q.is_cuda:
        return _cpu_attention(q, k, v, block_mask, block, context, layout, scale, out, lse,
                              select, plan_kw)
    ctx = context if context is not None else default_context(q.device.index)
    open_choice = not any(x in plan_kw for x in ("tile", "mapping", "tasks", "split_tiles", "variant"))
    if block_mask.is_cuda and getattr(library(), "tsr_gpuplan_create", None) is not None:
        m = block_mask if block_mask.dim() == 4 else block_mask.unsqueeze(0)
        # One template set per shape and options, held by the context: a
        # request of a known shape allocates nothing.
        key = (b, hq, hkv, sq, sk, d, _block_key(block), str(q.dtype), layout, scale,
               m.shape[0], m.shape[1], select, tuple(sorted(plan_kw.items())))
        tp = ctx._gpuplans.get(key)
        if tp is None:
            def make(**regime):
                kw = dict(plan_kw, **regime)
                return GpuPlan(ctx, b, hq, hkv, sq, sk, d, block=block, dtype=q.dtype, layout=layout,
                               scale=scale, mask_batch=m.shape[0], mask_heads=m.shape[1], **kw)
            tp = _GpuTemplates(ctx, make, select and open_choice)
            other = ctx._gpuplans.setdefault(key, tp)
            if other is not tp:  # another thread made this shape's first
                tp.close()
                tp = other
        gp = tp.pick()
        _last_selection.update(selected_by=tp.selected_by if open_choice else "options",
                               selection=tp.selection)
        return tp.run(gp, q, k, v, block_mask if block_mask.is_contiguous() else block_mask.contiguous(),
                      out=out, lse=lse)
    plan = Plan(ctx, block_mask, b, hq, hkv, sq, sk, d, block=block, dtype=q.dtype,
                layout=layout, scale=scale, select=select, **plan_kw)
    _last_selection.update(selected_by=plan.selected_by, selection=plan.selection)
    o = plan.run(q, k, v, out=out, lse=lse)
    # The plan's device metadata must outlive the launch: keep the plan alive
    # until the stream passes this point, without a host synchronisation.
    _pending.append((plan, ctx, _torch().cuda.current_stream().record_event()))
    _reap()
    return o


def _check_shapes(q, k, v, layout):
    """q, k and v agree: k and v of one shape, batch and head dim as q's
    (head ratio and sizes are libtessera's checks)."""
    (b, _, _, d, _), (bk, _, _, dk, _) = _layout_of(q, layout), _layout_of(k, layout)
    if tuple(k.shape) != tuple(v.shape) or (b, d) != (bk, dk):
        raise TesseraError(f"q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} ({layout}) "
                           "disagree: k and v must have one shape, and batch and head dim q's")


def _cpu_attention(q, k, v, block_mask, block, context, layout, scale, out, lse, select, plan_kw):
    """attention() on CPU tensors: the host plan through tsr_cpu_execute.
    The plan's dtype (what the lookup table is keyed on) is q's for bf16 and
    fp16, bf16 for float32."""
    if block_mask.is_cuda:
        raise TesseraError(f"q is a CPU tensor but the block mask is on {block_mask.device}: "
                           "CPU tensors take a CPU mask")
    ctx = context if context is not None else default_context(NO_DEVICE)
    b, hq, sq, d, _ = _layout_of(q, layout)
    _, hkv, sk, _, _ = _layout_of(k, layout)
    dtype = q.dtype if str(q.dtype) in _DTYPES else "torch.bfloat16"
    plan = Plan(ctx, block_mask, b, hq, hkv, sq, sk, d, block=block, dtype=dtype, layout=layout,
                scale=scale, select=select, upload=False, **plan_kw)
    try:
        _last_selection.update(selected_by=plan.selected_by, selection=plan.selection)
        return plan.run(q, k, v, out=out, lse=lse)
    finally:
        plan.close()


_pending = []
_last_selection = {"selected_by": None, "selection": None}


# ---- the torch op -----------------------------------------------------------
# tessera::attention(Tensor q, Tensor k, Tensor v, Tensor block_mask,
#     bool variable, int[] block_q, int[] block_k, str layout, float? scale,
#     bool select, bool return_lse) -> (Tensor out, Tensor lse)
# block_q, block_k: [bq], [bk] (uniform) or every block's size (variable).
# lse: float32 [B, Hq, Sq], or [0] when return_lse is false.  One kernel for
# CPU and CUDA: _attention (CPU tensors: the CPU plan executor; CUDA tensors:
# the GPU path); a fake kernel gives the shapes, so torch.compile traces it
# without running it.  Registered when tessera is imported after torch, or on
# the first attention() call with a tensor (importing tessera needs no torch).
_OP = None
_op_lock = threading.Lock()


def _block_args(block):
    """block as the op's (variable, block_q, block_k)."""
    if _is_variable(block):
        qs, ks = _block_key(block)
        return True, [int(x) for x in qs], [int(x) for x in ks]
    return False, [int(block[0])], [int(block[1])]


def _lse_shape(q, layout):
    if q.dim() != 4 or layout not in ("bhsd", "bshd"):
        raise TesseraError(f"expected a 4-D q and layout bhsd or bshd, got shape {tuple(q.shape)} "
                           f"and layout '{layout}'")
    b, x, y, _ = q.shape
    return (b, x, y) if layout == "bhsd" else (b, y, x)


def _op_kernel(q, k, v, block_mask, variable, block_q, block_k, layout, scale, select, return_lse):
    torch = _torch()
    if not variable and (len(block_q), len(block_k)) != (1, 1):
        raise TesseraError(f"uniform blocks take one size each, got block_q {list(block_q)} and "
                           f"block_k {list(block_k)}")
    block = (list(block_q), list(block_k)) if variable else (block_q[0], block_k[0])
    lse = (torch.empty(_lse_shape(q, layout), dtype=torch.float32, device=q.device)
           if return_lse else torch.empty((0,), dtype=torch.float32, device=q.device))
    o = _attention(q, k, v, block_mask, block, None, layout, scale, None,
                   lse if return_lse else None, select, {})
    return o, lse


def _op_fake(q, k, v, block_mask, variable, block_q, block_k, layout, scale, select, return_lse):
    torch = _torch()
    lse = _lse_shape(q, layout) if return_lse else (0,)
    return torch.empty_like(q), q.new_empty(lse, dtype=torch.float32)


def _register_op(torch):
    """Defines tessera::attention once per process (a second import of the
    binding, as the tests make, finds it defined)."""
    global _OP
    with _op_lock:
        if _OP is None:
            try:
                _OP = torch.ops.tessera.attention
            except (AttributeError, RuntimeError):
                op = torch.library.custom_op(
                    "tessera::attention", _op_kernel, mutates_args=(), device_types=("cpu", "cuda"),
                    schema="(Tensor q, Tensor k, Tensor v, Tensor block_mask, bool variable, "
                           "int[] block_q, int[] block_k, str layout, float? scale, bool select, "
                           "bool return_lse) -> (Tensor, Tensor)")
                op.register_fake(_op_fake)
                _OP = torch.ops.tessera.attention
    return _OP


def _load_op(q):
    """The op for a call with torch tensors (registered now when torch was
    imported after tessera); None for anything else."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(q, torch.Tensor):
        return None
    return _register_op(torch)


def _reap():
    while _pending and _pending[0][2].query():
        _pending.pop(0)[0].close()


# Loading the library here checks the struct mirrors against it, so a
# binding and a library that disagree fail at import (ImportError).  A
# library not found (or not loadable) yet is not an import error: library()
# says what to set when first used.
try:
    library()
except (TesseraError, OSError):
    pass
if "torch" in sys.modules:
    _register_op(sys.modules["torch"])
