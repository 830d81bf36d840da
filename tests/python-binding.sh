#!/bin/sh
# python-binding.sh: python/tessera.py imports without PyTorch or a GPU and
# its shared problem set-up goes through libtessera's checks (defaults filled
# in, bad head ratios and scales refused, uniform and variable blocks); the
# binding and the benchmark scripts pass pyflakes.  Skips (77) without python3 or
# the shared library, and in the sanitizer build.
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
print("python-binding: ok")
PY
