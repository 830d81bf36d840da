#!/bin/sh
# python-binding.sh: python/tessera/ (the binding) imports without PyTorch or a GPU and
# its shared problem set-up goes through libtessera's checks (defaults filled
# in, bad head ratios and scales refused, uniform and variable blocks); the
# binding and the benchmark scripts pass pyflakes.  Its selection path runs
# without a GPU through a host-only context (the build's bundle, the lookup
# table): the embedded H200 table and a recorded one (a row written by
# tessera-profile init), the renamed-variant fallback, selection off or
# overridden, a bad database path; every selected plan verifies exactly.
# The struct mirrors: importing checks each against tsr_abi_sizeof, and a
# copy of the binding with any one mirror changed (or a library without
# tsr_abi_sizeof) fails to import, naming the struct and both sizes.
# attention() without a context: one default context per device (made once
# under concurrent first calls), GPU plan templates cached on the context
# (one per shape however many calls) and freed with it; run with stand-ins
# for the tensors and for GpuPlan, which need a GPU; the GPU templates' re-selection
# follows what tsr_gpuplan_reselect answers (a stand-in here: it needs a GPU plan).
# Skips (77) without python3 or the shared library, and in the sanitizer build.
. "${TSR_TOP_SRCDIR:-.}/tests/python-env.sh" python-binding
# Names used before they are defined only fail when that line runs on a
# GPU: pyflakes finds them here (installed by scripts/setup-common).
if command -v pyflakes3 >/dev/null 2>&1; then
  pyflakes3 "$src"/python/tessera/*.py "$src/scripts/bench-vs-torch" "$src"/tests/device/*.py \
    "$src"/tests/*.py || exit 1
else
  echo "python-binding: pyflakes3 not installed, lint skipped"
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tsr-python.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
# A recorded table: one geometry-level row for bf16 d128 96x96 blocks, and
# one naming a variant build the bundle does not have (64x64 blocks).
cols="gpu_name, arch, multiprocessors, feature_version, level, dtype, head_dim, bq, bk, seq_bin, density_bin, spread_bin, fill_bin, mapping, tile_m, tile_n, tasks, variant, masks, regret, speedup"
{
  echo "INSERT INTO lookup ($cols) VALUES ('NVIDIA H200', 'sm_90a', 132, 1, 2, 'bf16', 128, 96, 96, -1, -1, -1, -1, 'combine', 128, 128, 'split', 'tsr_sm90_bf16_d128_m128n128_s2_g3_flat_mb_tma64', 4, 0.01, 1.4);"
  echo "INSERT INTO lookup ($cols) VALUES ('NVIDIA H200', 'sm_90a', 132, 1, 2, 'bf16', 128, 64, 64, -1, -1, -1, -1, 'retain', 64, 64, 'row', 'tsr_sm90_bf16_d128_m64n64_s2_g2_pers_mb_tma64', 4, 0.01, 1.2);"
} >"$tmp/rows.sql"
"$top/tessera-profile" init --db "$tmp/t.db" --sql "$tmp/rows.sql" >/dev/null || exit 99
export TSR_PY_BUNDLE="$top/bundle" TSR_PY_DB="$tmp/t.db" TSR_PY_TMP="$tmp" TSR_PY_SRC="$src/python"
TESSERA_LIBRARY=$lib PYTHONPATH=$src/python exec python3 - <<'PY'
import math, random, sys
import tessera
assert "torch" not in sys.modules, "importing tessera pulled in torch"
class Owner: pass
rng = random.Random()
seed = rng.randrange(1 << 30); rng.seed(seed); print("python-binding: seed", seed)
hkv = rng.choice([1, 2, 4]); hq = hkv * rng.randint(1, 4)
sq, sk, d = rng.randint(1, 5000), rng.randint(1, 5000), rng.choice([64, 128])
o = Owner()
p, opts = tessera._problem_setup(o, 1, hq, hkv, sq, sk, d, (96, 64), "torch.bfloat16", "bshd",
                                 None, (128, 64), "combine", "split", 3)
assert (p.heads_q, p.heads_kv, p.seq_q, p.seq_k, p.head_dim) == (hq, hkv, sq, sk, d)
assert abs(p.scale - 1 / math.sqrt(d)) < 1e-12, p.scale
assert p.layout == tessera.LAYOUT_BSHD and o._geom
assert (opts.tile_m, opts.tile_n, opts.mapping, opts.tasks, opts.split_tiles) == \
    (128, 64, tessera.MAPPINGS["combine"], tessera.TASKS["split"], 3)
for args, words in (((1, 5, 2), "not a multiple"), ((1, 4, 2), "not finite")):
    scale = float("nan") if words == "not finite" else None
    try:
        tessera._problem_setup(Owner(), *args, sq, sk, d, (128, 128), "torch.float16", "bhsd",
                               scale, None, "auto", "auto")
    except tessera.TesseraError as e:
        assert words in str(e), str(e)
    else:
        raise AssertionError("accepted " + words)
# Variable blocks (VSA cubes, STA tiles): block=(q_sizes, k_sizes).
qs = [rng.randint(1, 200) for _ in range(rng.randint(1, 40))]
ks = [rng.randint(1, 200) for _ in range(rng.randint(1, 40))]
o = Owner()
p, opts = tessera._problem_setup(o, 1, hq, hkv, sum(qs), sum(ks), d, (qs, ks), "torch.bfloat16",
                                 "bhsd", None, None, "auto", "auto")
assert tessera._is_variable((qs, ks)) and not tessera._is_variable((96, 64))
# GPU templates are cached by the sizes themselves (lists are not hashable).
assert tessera._block_key((qs, ks)) == (tuple(qs), tuple(ks)) and hash(tessera._block_key((qs, ks)))
assert tessera._block_key((96, 64)) == (96, 64)
assert tessera._block_key((qs, ks)) != tessera._block_key((qs, ks[:-1] + [ks[-1] + 1]))
assert (p.seq_q, p.seq_k) == (sum(qs), sum(ks)) and o._geom
lib = tessera.library()
assert (lib.tsr_geom_nq(o._geom), lib.tsr_geom_nk(o._geom)) == (len(qs), len(ks))
try:
    tessera._problem_setup(Owner(), 1, hq, hkv, sum(qs) + 1, sum(ks), d, (qs, ks), "torch.bfloat16",
                           "bhsd", None, None, "auto", "auto")
except tessera.TesseraError as e:
    print("python-binding: refused as expected:", e)
else:
    raise AssertionError("accepted q sizes that do not add up to seq_q")
# ---- selection without a GPU: host-only contexts --------------------------
import ctypes, os
lib.tsr_plan_summarize.argtypes = [ctypes.c_void_p, ctypes.c_void_p]

def mask_of(heads, nq, nk, dens):
    bits = bytes(1 if rng.random() < dens or j == i % nk else 0
                 for h in range(heads) for i in range(nq) for j in range(nk))
    h, err = ctypes.c_void_p(), tessera._Error()
    tessera._check(lib.tsr_mask_from_bytes(1, heads, nq, nk, bits, ctypes.byref(h), ctypes.byref(err)), err)
    return h

def plan(ctx, seq, d, block, dens, select=True, tile=None):
    o = Owner()
    p, opts = tessera._problem_setup(o, 1, 4, 4, seq, seq, d, block, "torch.bfloat16", "bhsd",
                                     None, tile, "auto", "auto")
    m = mask_of(4, -(-seq // block[0]), -(-seq // block[1]), dens)
    pl = tessera._plan_selected(o, ctx, p, m, opts, select, tile is None)
    err = tessera._Error()
    assert lib.tsr_plan_verify(pl, m, ctypes.byref(err)) == 0, err.text
    s = tessera._Summary()
    lib.tsr_plan_summarize(pl, ctypes.byref(s))
    lib.tsr_plan_destroy(pl)
    lib.tsr_mask_destroy(m)
    lib.tsr_geom_destroy(o._geom)
    return o, s

bundle, db = os.environ["TSR_PY_BUNDLE"], os.environ["TSR_PY_DB"]
# The embedded H200 table: the demo corpus's shape.
ctx = tessera.Context(device=tessera.NO_DEVICE, bundle=bundle)
assert "torch" not in sys.modules, "a host-only context pulled in torch"
assert ctx.table_gpu == "NVIDIA H200" and ctx.table_rows > 0, (ctx.table_gpu, ctx.table_rows)
for dens in (0.15, 0.4, 0.8):
    o, s = plan(ctx, 2304, 64, (128, 128), dens)
    assert o.selected_by in ("table", "nearest", "geometry", "fallback"), o.selected_by
    assert ("table row" in o.selection) == (o.selected_by != "fallback"), o.selection
    print("python-binding: embedded table, density", dens, ":", o.selected_by, "-", o.selection)
o, s = plan(ctx, 2304, 64, (128, 128), 0.3, select=False)
assert o.selected_by == "off" and s.tile_m == 128
ctx.close()
# A recorded table: the row's plan and variant; a renamed variant dropped.
ctx = tessera.Context(device=tessera.NO_DEVICE, bundle=bundle, db=db)
assert ctx.table_rows == 2, ctx.table_rows
seq = rng.randint(1500, 3000)
o, s = plan(ctx, seq, 128, (96, 96), 0.3)
assert o.selected_by == "geometry", (o.selected_by, o.selection)
assert (s.tile_m, s.tile_n, s.tasks) == (128, 128, tessera.TASKS["split"]), (s.tile_m, s.tasks)
assert s.variant.decode() == "tsr_sm90_bf16_d128_m128n128_s2_g3_flat_mb_tma64", s.variant
o, s = plan(ctx, seq, 128, (64, 64), 0.3)
assert o.selected_by == "geometry" and s.mapping == tessera.MAPPINGS["retain"], o.selection
assert "not in the bundle" in o.selection and s.variant == b"", (o.selection, s.variant)
o, s = plan(ctx, seq, 64, (96, 96), 0.3)  # no row for d64: the automatic planner
assert o.selected_by == "fallback" and o.selection.endswith(": automatic plan"), o.selection
o, s = plan(ctx, seq, 128, (96, 96), 0.3, tile=(64, 64))
assert o.selected_by == "options" and s.tile_m == 64
# The features mirror (what attention() re-selects GPU templates from)
# against an exact count, and selection from features agreeing with
# selection from the mask.
o = Owner()
p, opts = tessera._problem_setup(o, 1, 4, 4, seq, seq, 128, (96, 96), "torch.bfloat16", "bhsd",
                                 None, None, "auto", "auto")
nb = -(-seq // 96)
m = mask_of(4, nb, nb, 0.4)
f, err = tessera._Features(), tessera._Error()
assert lib.tsr_features_compute(ctypes.byref(p), m, 0, ctypes.byref(f), ctypes.byref(err)) == 0, err.text
sizes = [min(96, seq - 96 * i) for i in range(nb)]
lib.tsr_mask_bits.restype = ctypes.POINTER(ctypes.c_uint8)
lib.tsr_mask_bits.argtypes = [ctypes.c_void_p]
bits = lib.tsr_mask_bits(m)
sel_pairs = sum(sizes[i] * sizes[j] for h in range(4) for i in range(nb) for j in range(nb)
                if bits[(h * nb + i) * nb + j])
assert abs(f.density - sel_pairs / (4.0 * seq * seq)) < 1e-12, (f.density, sel_pairs)
assert (f.bq, f.bk, f.seq_q, f.seq_k, f.head_dim, f.dtype, f.num_sms) == \
    (96, 96, seq, seq, 128, tessera.DT_BF16, 132), (f.bq, f.seq_q, f.head_dim, f.dtype, f.num_sms)
a, by = tessera._select(ctx, p, m, opts)
b = tessera._Selection()
assert lib.tsr_context_select_features(ctx._h, ctypes.byref(f), ctypes.byref(opts), ctypes.byref(b),
                                       ctypes.byref(err)) == 0, err.text
assert (a.from_table, a.level, a.row_id, a.opts.tile_m, a.opts.tasks, a.reason) == \
    (b.from_table, b.level, b.row_id, b.opts.tile_m, b.opts.tasks, b.reason) and by == "geometry"
lib.tsr_mask_destroy(m)
lib.tsr_geom_destroy(o._geom)
ctx.close()
try:
    tessera.Context(device=tessera.NO_DEVICE, bundle=bundle, db=db + ".missing")
except tessera.TesseraError as e:
    assert db + ".missing" in str(e), str(e)
else:
    raise AssertionError("a missing database was accepted")
# ---- the struct mirrors against the library ---------------------------------
MIRRORS = {"tsr_error": "_Error", "tsr_array": "_Array", "tsr_problem": "_Problem", "tsr_plan_opts": "_PlanOpts",
           "tsr_context_opts": "_ContextOpts", "tsr_gpu_tensors": "_GpuTensors",
           "tsr_plan_summary": "_Summary", "tsr_features": "_Features",
           "tsr_selection": "_Selection", "tsr_gpuplan_caps": "_GpuPlanCaps",
           "tsr_gpuplan_stats": "_GpuPlanStats", "tsr_gpuplan_regime": "_Regime",
           "tsr_gpuplan_hold": "_Hold"}
lib.tsr_abi_sizeof.restype, lib.tsr_abi_sizeof.argtypes = ctypes.c_size_t, [ctypes.c_char_p]
for cname, pyname in MIRRORS.items():
    assert lib.tsr_abi_sizeof(cname.encode()) == ctypes.sizeof(getattr(tessera, pyname)), cname
assert lib.tsr_abi_sizeof(b"tsr_nothing") == 0 and lib.tsr_abi_sizeof(None) == 0
import re, subprocess
tmp, pysrc = os.environ["TSR_PY_TMP"], os.environ["TSR_PY_SRC"]
text = open(os.path.join(pysrc, "tessera", "__init__.py")).read()

def import_copy(source, library, code="import tessera"):
    """Runs `code` with `source` as tessera in a fresh interpreter; (exit, stderr)."""
    d = os.path.join(tmp, "copy")
    os.makedirs(os.path.join(d, "tessera"), exist_ok=True)
    with open(os.path.join(d, "tessera", "__init__.py"), "w") as f:
        f.write(source)
    env = dict(os.environ, PYTHONPATH=d, TESSERA_LIBRARY=library)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                       text=True, timeout=60)
    return r.returncode, r.stderr

# The unchanged copy imports, and importing loaded (and so checked) the
# library; one field more in any one mirror does not import.
rc, err = import_copy(text, os.environ["TESSERA_LIBRARY"],
                      "import sys, tessera; sys.exit(0 if tessera._lib is not None else 3)")
assert rc == 0, (rc, err)
for cname, pyname in MIRRORS.items():
    head = "class %s(ctypes.Structure):\n    _fields_ = [" % pyname
    assert text.count(head) == 1, head
    rc, err = import_copy(text.replace(head, head + '("abi_probe", ctypes.c_uint64), '),
                          os.environ["TESSERA_LIBRARY"])
    want = lib.tsr_abi_sizeof(cname.encode())
    got = re.search(r"ImportError: struct (\w+): (\d+) bytes in .*, (\d+) bytes in the binding's copy", err)
    assert rc != 0 and got, (cname, rc, err[-400:])
    probe = type("Probe", (ctypes.Structure,), {"_fields_": [("abi_probe", ctypes.c_uint64)] +
                                                   getattr(tessera, pyname)._fields_})
    assert (got[1], int(got[2]), int(got[3])) == (cname, want, ctypes.sizeof(probe)), (cname, got.groups())
# A field dropped: the last of tsr_gpuplan_stats (an int, padded to 8 bytes).
head = '("slots", ctypes.c_int64), ("membership_words", ctypes.c_int64),\n                ("overflow", ctypes.c_int)]'
assert text.count(head) == 1
rc, err = import_copy(text.replace(head, '("slots", ctypes.c_int64), ("membership_words", ctypes.c_int64)]'),
                      os.environ["TESSERA_LIBRARY"])
assert rc != 0 and "struct tsr_gpuplan_stats: %d bytes" % lib.tsr_abi_sizeof(b"tsr_gpuplan_stats") in err, err[-400:]
# A library without tsr_abi_sizeof (an older libtessera; here libm).
rc, err = import_copy(text, ctypes.util.find_library("m") or "libm.so.6")
assert rc != 0 and "has no tsr_abi_sizeof" in err, err[-400:]
print("python-binding: every struct mirror checked at import; a changed mirror is refused")

# ---- attention() without a context: one context per device, templates cached --
import gc, threading, time, weakref
os.environ["TESSERA_BUNDLE"] = bundle
class Dev:
    index = tessera.NO_DEVICE  # the default context of "device -1": host-only, no GPU
class Fake:
    """Just what attention() reads of a CUDA tensor before handing it on."""
    def __init__(self, shape):
        self.shape, self.is_cuda, self.device, self.dtype = tuple(shape), True, Dev(), "torch.bfloat16"
    def dim(self):
        return len(self.shape)
    def stride(self):
        st = [1]
        for n in reversed(self.shape[1:]):
            st.insert(0, st[0] * n)
        return tuple(st)
    def is_contiguous(self):
        return True
    def unsqueeze(self, i):
        return Fake(self.shape[:i] + (1,) + self.shape[i:])
made = []
class FakeGpuPlan:
    """GpuPlan's part in attention(): made per template, called per request."""
    def __init__(self, ctx, *args, **kw):
        self.ctx, self.args, self.calls, self.closed_with = ctx, args, 0, None
        made.append(weakref.ref(self))
    def __call__(self, q, k, v, mask, out=None, lse=None):
        self.calls += 1
        return "out"
    def close(self):
        if self.closed_with is None:  # was the context still open?
            self.closed_with = bool(getattr(self.ctx, "_h", None))
    __del__ = close
created = []
class CountingContext(tessera.Context):
    def __init__(self, *a, **kw):
        time.sleep(0.05)  # widen the window for concurrent first calls
        created.append(1)
        super().__init__(*a, **kw)
real_gpuplan, real_context = tessera.GpuPlan, tessera.Context
tessera.GpuPlan, tessera.Context = FakeGpuPlan, CountingContext
try:
    # Concurrent first calls make one default context.
    tessera._contexts.pop(tessera.NO_DEVICE, None)
    got, start = [], threading.Barrier(8)
    def first():
        start.wait()
        got.append(tessera.default_context(tessera.NO_DEVICE))
    threads = [threading.Thread(target=first) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(created) == 1 and len(got) == 8 and all(c is got[0] for c in got), (len(created), len(got))
    ctx = got[0]
    # Many calls of one shape: no new context, one template; a second shape, a second.
    hq, sq, d, blk = 4, rng.randint(200, 3000), 128, rng.choice([64, 128])
    nb = -(-sq // blk)
    q, m = Fake((1, hq, sq, d)), Fake((hq, nb, nb))
    for _ in range(300):
        assert tessera.attention(q, q, q, m, block=(blk, blk), select=False) == "out"
    assert len(created) == 1, f"{len(created)} contexts made by 300 calls"
    assert len(made) == 1 and made[0]().calls == 300, (len(made), made[0]() and made[0]().calls)
    assert len(ctx._gpuplans) == 1 and tessera.last_selection()["selected_by"] == "off"
    q2 = Fake((1, hq, sq + 1, d))
    m2 = Fake((hq, -(-(sq + 1) // blk), -(-(sq + 1) // blk)))
    for _ in range(50):
        tessera.attention(q2, q2, q2, m2, block=(blk, blk), select=False)
    assert len(created) == 1 and len(made) == 2 and len(ctx._gpuplans) == 2, (len(created), len(made))
    # Templates belong to their context: closed before it, gone with it.
    own = tessera.Context(device=tessera.NO_DEVICE, bundle=bundle)
    tessera.attention(q, q, q, m, block=(blk, blk), context=own, select=False)
    tp = made[-1]()
    assert len(made) == 3 and tp.ctx is own and len(own._gpuplans) == 1
    own.close()
    assert tp.closed_with is True, "a template was closed after its context, or not at all"
    assert not own._gpuplans
    own2 = tessera.Context(device=tessera.NO_DEVICE, bundle=bundle)
    tessera.attention(q, q, q, m, block=(blk, blk), context=own2, select=False)
    w_ctx, w_tp = weakref.ref(own2), made[-1]
    del own, own2, tp
    gc.collect()
    assert w_ctx() is None and w_tp() is None, "a context or its templates outlived the last reference"
    assert len(tessera._contexts) == 1 and len(created) == 3
    # A closed default context is replaced, once.
    d = tessera.default_context(tessera.NO_DEVICE)
    d.close()
    d2 = tessera.default_context(tessera.NO_DEVICE)
    assert d2 is not d and d2._h and tessera.default_context(tessera.NO_DEVICE) is d2
finally:
    tessera.GpuPlan, tessera.Context = real_gpuplan, real_context
print("python-binding: attention() without a context: 1 context, 1 template per shape over 350 calls")

# ---- attention()'s re-selection: libtessera decides, the templates follow ----
# tsr_gpuplan_reselect needs a GPU plan (tests/check_context.c checks its
# policy against the one this binding had); here a stand-in for it answers
# in the library's struct, and _GpuTemplates must keep, fall back, or make
# and reuse one template per regime exactly as told.
answers, made_regimes = [], []
class Template:
    def __init__(self, **regime):
        self.regime, self._h, self.step = regime, ctypes.c_void_p(id(self)), 0
        made_regimes.append(regime)
    def _stats(self):
        st = tessera._GpuPlanStats()
        st.step, st.density = self.step, 1.0
        return st
    def close(self):
        pass
def fake_reselect(ctx_h, gp_h, st, out, err):
    r = out._obj
    kind, opts = answers.pop(0)
    r.changed = kind != "keep"
    r.sel.from_table = kind == "table"
    r.sel.level = 1 if kind == "table" else -1
    r.sel.reason = ("reason %d" % st._obj.step).encode()
    if opts:
        r.opts.tile_m, r.opts.tile_n, r.opts.mapping, r.opts.tasks, r.opts.split_tiles, v = opts
        r.sel.variant = v.encode()
    return 0
class Busy:  # torch.cuda.is_current_stream_capturing() for _GpuTemplates.pick
    class cuda:
        @staticmethod
        def is_current_stream_capturing():
            return False
real_torch, real_reselect = tessera._torch, getattr(lib, "tsr_gpuplan_reselect")
tessera._torch, lib.tsr_gpuplan_reselect = (lambda: Busy), fake_reselect
try:
    host = tessera.Context(device=tessera.NO_DEVICE, bundle=bundle)
    # The regime plumbing first, with no step times (stand-ins are never
    # timed) and no wait for one before a switch (_DEFER, checked below).
    defer, tessera._GpuTemplates._DEFER = tessera._GpuTemplates._DEFER, 0
    tp = tessera._GpuTemplates(host, lambda **kw: Template(**kw), True)
    auto = tp.cur
    assert tp.pick() is auto  # no step completed (the one seen at creation): not asked
    answers.append(("keep", None))
    auto.step = 1
    assert tp.pick() is auto and tp.selected_by == "fallback"
    answers.append(("fallback", None))
    auto.step = 2
    assert tp.pick() is auto and tp.selected_by == "fallback" and tp.selection == "reason 2"
    assert tp.pick() is auto  # the same step again: not asked again (no answer queued)
    split = (128, 128, tessera.MAPPINGS["combine"], tessera.TASKS["split"], 3, "tsr_v")
    answers.append(("table", split))
    auto.step = 3
    one = tp.pick()
    assert one is not auto and tp.selected_by == "nearest", tp.selected_by
    assert one.regime == dict(tile=(128, 128), mapping="combine", tasks="split", split_tiles=3,
                              variant="tsr_v"), one.regime
    answers.append(("table", split))
    one.step = 9
    assert tp.pick() is one and len(made_regimes) == 2  # the regime's template, reused
    row = (64, 64, tessera.MAPPINGS["retain"], tessera.TASKS["row"], 0, "")
    answers.append(("table", row))
    one.step = 10
    two = tp.pick()
    assert two.regime == dict(tile=(64, 64), mapping="retain", tasks="row", split_tiles=0,
                              variant=None), two.regime
    answers.append(("fallback", None))
    two.step = 11
    assert tp.pick() is auto and len(made_regimes) == 3 and not answers
    # libtessera's hold, on a fresh template set with step times (stand-in
    # event pairs: query, elapsed_time).  A switch is judged at the new
    # template's first timed step: sent back but 2% faster, it stays and the
    # one it came from is held (3 selections of it refused, the reason
    # saying why); sent on to a template whose first step is slower, that
    # one goes back and is held, at any split chunk.
    class Ev:
        queries = 0
        def __init__(self, ms, done=True):
            self.ms, self.done = ms, done
        def query(self):
            Ev.queries += 1
            return self.done
        def elapsed_time(self, end):
            return end.ms - self.ms
    tessera._GpuTemplates._DEFER = defer
    n_made = len(made_regimes)
    tp4 = tessera._GpuTemplates(host, lambda **kw: Template(**kw), True)
    a4 = tp4.cur
    tp4.events[a4] = [[1, Ev(0), Ev(3.0), None, None]]
    answers.append(("table", row))
    a4.step = 1
    b4 = tp4.pick()
    assert b4 is not a4 and tp4.selection == "reason 1"
    tp4.events[b4] = [[1, Ev(0), Ev(2.0), None, None]]
    answers.append(("fallback", None))
    b4.step = 1
    assert tp4.pick() is b4 and tp4.selected_by == "nearest"
    assert tp4.selection == ("reason 1; then step 1 selected another template (reason 1), held back for 4 "
                             "more steps: this template's step took 2.000 ms a unit of density, that one's "
                             "3.000"), tp4.selection
    q0 = Ev.queries
    for n in range(3):
        answers.append(("fallback", None))
        b4.step = 2 + n
        assert tp4.pick() is b4, n
        assert "held back for %d more steps: of the two, it ran these masks slower" % (3 - n) in tp4.selection
    assert Ev.queries == q0  # b4's time read once, then kept
    answers.append(("table", split))
    b4.step = 5
    c4 = tp4.pick()
    assert c4.regime["split_tiles"] == 3 and tp4.selection == "reason 5"
    tp4.events[c4] = [[1, Ev(0), Ev(2.5), None, None]]
    answers.append(("table", split))  # kept by its selection, but 25% slower: back, held
    c4.step = 1
    assert tp4.pick() is b4 and tp4.hold.holds[tp4._number(tp4.key)] == 0 and tp4.selected_by == "nearest"
    assert tp4.selection == ("reason 1; back from the template it switched to, held for 4 steps: its step "
                             "took 2.500 ms a unit of density, this one's 2.000"), tp4.selection
    answers.append(("table", split[:4] + (7,) + split[5:]))  # held at any chunk
    b4.step = 6
    assert tp4.pick() is b4 and "held back for 3 more steps" in tp4.selection, tp4.selection
    assert len(made_regimes) == n_made + 3 and not answers
    # Of two templates that send each other the masks, the one whose step
    # was 2% faster stays, and the other is held; no faster, the table's
    # choice; its time not known yet, it waits for one (deferred).
    for b_ms, stays in ((7.0, True), (9.9, False), (None, True)):
        tp2 = tessera._GpuTemplates(host, lambda **kw: Template(**kw), True)
        a = tp2.cur
        # The newest not complete (nor its density known): the one before.
        tp2.events[a] = [[1, Ev(1.0), Ev(11.0), None, None], [2, Ev(0), Ev(99.0, False), None, None]]
        answers.append(("table", row))
        a.step = 1
        b = tp2.pick()
        assert b is not a and tp2.selection == "reason 1"
        tp2.events[b] = [[1, Ev(0), Ev(b_ms), None, None]] if b_ms else []
        answers.append(("fallback", None))
        b.step = 1
        assert (tp2.pick() is b) == stays, b_ms
        if b_ms is None:
            assert tp2.selection == ("reason 1; then step 1 selected another template (reason 1): deferred, "
                                     "this template's step not timed yet"), tp2.selection
            assert tp2.hold.came_to == 1  # the switch still waits to be judged
            tp2.calls[b] = tessera._GpuTemplates._DEFER  # ran that many calls, never timed:
            answers.append(("fallback", None))        # back, nobody held (untimed)
            b.step = 2
            assert tp2.pick() is a and tp2.selection == "reason 2" and not any(tp2.hold.holds)
        elif stays:
            assert tp2.selection == ("reason 1; then step 1 selected another template (reason 1), held back "
                                     "for 4 more steps: this template's step took 7.000 ms a unit of density, "
                                     "that one's 10.000"), tp2.selection
        else:
            assert tp2.selection == "reason 1" and tp2.hold.holds[1] == (b_ms is not None)
    assert not answers
    # Which calls run between events (stand-in torch.cuda.Event): never a
    # template's first; every call of a template until it has a time; then
    # every 8th from the second on; every call of a template just switched
    # to until the switch is judged; none while selection is off.
    class Rec:
        n = 0
        def __init__(self, enable_timing=False):
            assert enable_timing
        def record(self):
            Rec.n += 1
        def query(self):  # never complete here: no time known
            return False
    Template.__call__ = lambda self, *a, **kw: "out"
    Busy.cuda.Event = Rec
    tp3 = tessera._GpuTemplates(host, lambda **kw: Template(**kw), True)
    a = tp3.cur
    for n in range(1, 6):
        assert tp3.run(tp3.pick(), 1, out=None) == "out"
    assert Rec.n == 2 * 4 and [e[0] for e in tp3.events[a]] == [2, 3, 4, 5], (Rec.n, tp3.events)
    tp3.known.add(a)  # as _step_ms marks it once a time is read
    for n in range(6, 31):
        tp3.run(tp3.pick())
    assert Rec.n == 2 * 7 and [e[0] for e in tp3.events[a]] == [5, 10, 18, 26]  # a ring of 4
    answers.append(("table", row))
    a.step = 1
    b = tp3.pick()
    assert b is not a and tp3.hold.came_to >= 0
    tp3.run(b)
    tp3.run(b)
    tp3.run(b)
    assert Rec.n == 2 * 9 and [e[0] for e in tp3.events[b]] == [2, 3]
    off = tessera._GpuTemplates(host, lambda **kw: Template(**kw), False)
    for n in range(12):
        off.run(off.pick())
    assert Rec.n == 2 * 9 and not off.events
    del Busy.cuda.Event, Template.__call__
    host.close()
finally:
    tessera._torch, lib.tsr_gpuplan_reselect = real_torch, real_reselect
print("python-binding: GPU templates follow tsr_gpuplan_reselect (keep, fallback, one per regime) and hold a bounced one")
# precision (issue 18): native by default, fp8 into tsr_plan_opts.precision,
# anything else refused with the value named.
class Owner:
    _geom = None
assert tessera.PRECISIONS == {"native": 0, "fp8": 1}, tessera.PRECISIONS
for name, want in (("native", 0), ("fp8", 1), ("bf8", None)):
    own = Owner()
    try:
        _, o = tessera._problem_setup(own, 1, 2, 2, 256, 256, 64, (64, 64), "torch.bfloat16",
                                      "bhsd", None, None, "auto", "auto", precision=name)
        assert want is not None and o.precision == want, (name, o.precision)
    except tessera.TesseraError as e:
        assert want is None and "'bf8'" in str(e), (name, e)
    finally:
        if own._geom:
            lib.tsr_geom_destroy(own._geom)
own = Owner()
_, o = tessera._problem_setup(own, 1, 2, 2, 256, 256, 64, (64, 64), "torch.bfloat16", "bhsd",
                              None, None, "auto", "auto")
assert o.precision == 0
lib.tsr_geom_destroy(own._geom)
print("python-binding: precision native / fp8 reach tsr_plan_opts, others refused")
print("python-binding: ok")
PY
