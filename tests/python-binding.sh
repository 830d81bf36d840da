#!/bin/sh
# python-binding.sh: python/tessera.py imports without PyTorch or a GPU and
# its shared problem set-up goes through libtessera's checks (defaults filled
# in, bad head ratios and scales refused, uniform and variable blocks); the
# binding and the benchmark scripts pass pyflakes.  Its selection path runs
# without a GPU through a host-only context (the build's bundle, the lookup
# table): the embedded H200 table and a recorded one (a row written by
# tessera-profile init), the renamed-variant fallback, selection off or
# overridden, a bad database path; every selected plan verifies exactly.
# Skips (77) without python3 or the shared library, and in the sanitizer build.
top=${TSR_TOP_BUILDDIR:-.}
src=${TSR_TOP_SRCDIR:-.}
lib=$top/.libs/libtessera.so
command -v python3 >/dev/null 2>&1 || { echo "python-binding: no python3"; exit 77; }
[ -f "$lib" ] || { echo "python-binding: no $lib (static-only build)"; exit 77; }
# A sanitizer build's library needs the ASan runtime loaded before python
# itself; the binding is checked in the normal build.
if ldd "$lib" 2>/dev/null | grep -q libasan; then
  echo "python-binding: $lib is built with AddressSanitizer"
  exit 77
fi
# Names used before they are defined only fail when that line runs on a
# GPU: pyflakes finds them here (installed by scripts/setup-common).
if command -v pyflakes3 >/dev/null 2>&1; then
  pyflakes3 "$src/python/tessera.py" "$src/scripts/bench-vs-torch" "$src"/scripts/dev/*.py || exit 1
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
export TSR_PY_BUNDLE="$top/bundle" TSR_PY_DB="$tmp/t.db"
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
print("python-binding: ok")
PY
