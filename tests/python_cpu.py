"""python_cpu.py (tests/python-cpu.sh): tessera.attention on CPU tensors, the
lookup table's host plan through the CPU plan executor, against the float64
reference (tests/python_ref.py): float32, bf16 and fp16; lse (natural log,
-inf for empty rows); masks [H, NQ, NK] and [B, H, NQ, NK] with broadcast
planes; uniform (ragged) and variable blocks; GQA; both layouts, strided
inputs; cross lengths; empty rows and heads; poisoned out and lse; the
plan options; mapping "gather"; non-finite inputs against tsr_ref_attention; bad input refused
with out left as it was.  Fresh random inputs every run (the seed is
printed; SEED= repeats one)."""
import math
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_ref as ref  # noqa: E402
import tessera  # noqa: E402

seed = int(os.environ.get("SEED") or random.SystemRandom().randrange(1 << 30))
print("python-cpu: seed", seed)
rng = random.Random(seed)
torch.manual_seed(seed)
# Normwise error bounds over the float64 reference: float32 arithmetic, then
# the output's rounding (half an ulp: 2^-9 bf16, 2^-12 fp16) with margin.
TOL = {torch.float32: 2e-5, torch.bfloat16: 2 ** -8, torch.float16: 2 ** -10}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def random_case():
    hkv = rng.choice([1, 2, 3])
    c = dict(b=rng.choice([1, 2]), hkv=hkv, hq=hkv * rng.choice([1, 2, 3]),
             sq=rng.randint(1, 420), d=rng.choice([64, 128]),
             dtype=rng.choice(list(TOL)), layout=rng.choice(["bhsd", "bshd"]))
    c["sk"] = c["sq"] if rng.random() < 0.3 else rng.randint(1, 420)
    if rng.random() < 0.5:
        c["block"] = (rng.choice([16, 32, 48, 64, 96, 128, 200]), rng.choice([16, 32, 64, 100, 128]))
    else:
        def cut(n):
            sizes = []
            while n:
                sizes.append(min(n, rng.randint(1, 150)))
                n -= sizes[-1]
            return sizes
        c["block"] = (cut(c["sq"]), cut(c["sk"]))
    return c


def make_mask(c):
    qs, ks = ref.block_sizes(c["block"], c["sq"], c["sk"])
    mb = rng.choice([None, 1, c["b"]])  # None: a 3-D mask
    mh = rng.choice([1, c["hq"]])
    shape = (mh, len(qs), len(ks)) if mb is None else (mb, mh, len(qs), len(ks))
    m = torch.rand(shape) < rng.uniform(0.1, 0.9)
    flat = m.view(-1, len(qs), len(ks))
    for _ in range(rng.randint(0, 3)):  # empty query block rows
        flat[rng.randrange(flat.shape[0]), rng.randrange(len(qs))] = False
    if flat.shape[0] > 1 and rng.random() < 0.5:  # an empty plane: a whole head
        flat[rng.randrange(flat.shape[0])] = False
    if not m.any():  # something to compute
        flat[rng.randrange(flat.shape[0]), rng.randrange(len(qs)), rng.randrange(len(ks))] = True
    return m


def tensors(c):
    """q, k, v in c's layout, sometimes strided views (the other layout's
    memory transposed)."""
    out = []
    for h, s in ((c["hq"], c["sq"]), (c["hkv"], c["sk"]), (c["hkv"], c["sk"])):
        other = rng.random() < 0.3
        bhsd_mem = (c["layout"] == "bhsd") != other
        x = torch.randn(c["b"], h, s, c["d"]) if bhsd_mem else torch.randn(c["b"], s, h, c["d"])
        if other:
            x = x.transpose(1, 2)
        out.append((x * rng.uniform(0.5, 2.0)).to(c["dtype"]))
    return out


def run_case(i):
    c = random_case()
    q, k, v = tensors(c)
    m = make_mask(c)
    scale = None if rng.random() < 0.5 else rng.uniform(0.02, 0.3)
    kw = {}
    if rng.random() < 0.3:
        kw["select"] = False
    if rng.random() < 0.3:
        kw["tile"] = rng.choice([(64, 64), (64, 128), (128, 64), (128, 128)])
        kw["tasks"] = rng.choice(["row", "split"])
    give_out, give_lse = rng.random() < 0.7, rng.random() < 0.8
    out = torch.full_like(q, float("nan")) if give_out else None
    lse = torch.full((c["b"], c["hq"], c["sq"]), float("nan")) if give_lse else None
    got = tessera.attention(q, k, v, m, block=c["block"], layout=c["layout"], scale=scale,
                            out=out, lse=lse, **kw)
    want, wlse = ref.reference(q, k, v, m, c["block"], c["layout"], scale)
    name = "case %d %s %s" % (i, {x: (y if x != "block" or not tessera._is_variable(y) else
                                      "variable %dx%d" % (len(y[0]), len(y[1])))
                                  for x, y in c.items()}, kw)
    check(got.dtype == q.dtype and got.shape == q.shape, name + ": dtype/shape")
    check(not give_out or got is out, name + ": out= not returned")
    check(not torch.isnan(got).any(), name + ": NaN in the output (a poisoned element not written?)")
    err = ref.rel_error(got, want)
    check(err <= TOL[c["dtype"]], name + ": error %.3g > %.3g" % (err, TOL[c["dtype"]]))
    tm = ref.token_mask(m, c["block"], c["b"], c["hq"], c["sq"], c["sk"])
    empty = ~tm.any(dim=-1)
    check(bool((ref.bhsd(got, c["layout"])[empty] == 0).all()), name + ": empty rows not zero")
    if give_lse:
        check(bool(torch.equal(torch.isneginf(lse), empty)), name + ": lse -inf exactly at empty rows")
        fin = ~empty
        if fin.any():
            e = ((lse[fin].double() - wlse[fin]).abs() / wlse[fin].abs().clamp_min(1)).max().item()
            check(e <= 1e-5, name + ": lse error %.3g" % e)
    print("python-cpu: %s: error %.2e, %s" % (name, err, tessera.last_selection()["selected_by"]))
    return int(empty.sum())


empties = sum(run_case(i) for i in range(int(os.environ.get("CASES", 24))))
check(empties > 0, "no case had an empty row: the test lost its empty rows")

# ---- a row split across chunks (merge records): one query block, many key
# blocks, tasks="split" with a small chunk on the 64x64 tile ----------------
q, k, v = (torch.randn(1, 2, 64, 64) for _ in range(3))
k, v = (torch.randn(1, 2, 2048, 64) for _ in range(2))
m = torch.ones(2, 1, 32, dtype=torch.bool)
m[1, 0, ::3] = False
lse = torch.full((1, 2, 64), float("nan"))
got = tessera.attention(q, k, v, m, block=(64, 64), tile=(64, 64), tasks="split", lse=lse)
want, wlse = ref.reference(q, k, v, m, (64, 64))
check(ref.rel_error(got, want) <= TOL[torch.float32] and ref.rel_error(lse, wlse) <= 1e-5,
      "split rows: error %.3g" % ref.rel_error(got, want))

# ---- mapping="gather" (two selected key blocks a tile) as asked, on ragged
# uniform blocks with GQA and empty rows, both layouts; refused on a tile
# that is not bq x 2bk; and never chosen by the CPU path on its own --------
def gather_checks():
    for layout in ("bhsd", "bshd"):
        sq, sk = rng.randint(40, 300), rng.randint(40, 300)
        q = torch.randn(1, 4, sq, 64) if layout == "bhsd" else torch.randn(1, sq, 4, 64)
        k, v = ((torch.randn(1, 2, sk, 64) if layout == "bhsd" else torch.randn(1, sk, 2, 64))
                for _ in range(2))
        m = torch.rand(4, (sq + 31) // 32, (sk + 15) // 16) < 0.5
        m[1, 0] = False
        got = tessera.attention(q, k, v, m, block=(32, 16), layout=layout, mapping="gather", tasks="split")
        want, _ = ref.reference(q, k, v, m, (32, 16), layout)
        err = ref.rel_error(got, want)
        check(err <= TOL[torch.float32], "gather %s: error %.3g" % (layout, err))
    ctx = tessera.Context(device=tessera.NO_DEVICE)
    p = tessera.Plan(ctx, m, 1, 4, 2, sq, sk, 64, block=(32, 16), mapping="gather", upload=False)
    s = p.summary()
    check(s["mapping"] == tessera.MAPPINGS["gather"] and (s["tile_m"], s["tile_n"]) == (32, 32),
          "Plan(mapping='gather'): %r" % s)
    p.close()
    for kw, words in ((dict(mapping="gather", tile=(32, 64)), "got tile 32x64 and blocks 32x16"),
                      (dict(mapping="gathered"), "invalid mapping 'gathered'")):
        try:
            tessera.attention(q, k, v, m, block=(32, 16), layout=layout, **kw)
        except tessera.TesseraError as e:
            check(words in str(e), "gather refusal %s: %r" % (kw, str(e)))
        else:
            check(False, "gather refusal %s: accepted" % kw)
    m = torch.rand(2, 4, 8) < 0.5
    p = tessera.Plan(ctx, m, 1, 2, 2, 512, 512, 64, block=(128, 64), upload=False)
    check(p.summary()["mapping"] != tessera.MAPPINGS["gather"] and "gather" not in p.selection,
          "the CPU path upgraded 128x64 blocks to gather: %s" % p.selection)
    p.close()


gather_checks()

# ---- a variant named on a host plan: kept, and the table's choice off -------
ctx = tessera.Context(device=tessera.NO_DEVICE)
name = "tsr_sm90_bf16_d64_m64n64_s2_g2_flat_mb_tma64"
p = tessera.Plan(ctx, m, 1, 2, 2, 64, 2048, 64, block=(64, 64), variant=name, upload=False)
check(p.summary()["variant"] == name and p.selected_by == "options",
      "Plan(variant=...): %r, %s" % (p.summary()["variant"], p.selected_by))
p.close()

# ---- non-finite inputs: as tsr_ref_attention (runtime/ref.c's rules) -------
S, D, blk = 256, 64, (64, 64)
q, k, v = (torch.randn(1, 2, S, D) for _ in range(3))
m = torch.rand(2, 4, 4) < 0.5
m[:, :, 0] = True  # every row selects key block 0
m[:, :, 3] = False  # no row selects key block 3
m[1, 2] = False  # an empty row
q[0, 0, 5, 7] = float("nan")  # one query row NaN
k[0, 1, 10, 3] = float("inf")  # a +inf score in rows selecting key 10 of head 1
v[0, 0, 20, 9] = float("nan")  # a NaN value in key block 0 (selected by all)
v[0, 0, 200, 1] = float("nan")  # a NaN value in key block 3 (selected by none)
v[0, 1, 250, :] = float("inf")
lse = torch.full((1, 2, S), 7.0)
got = tessera.attention(q, k, v, m, block=blk, lse=lse)
cwant, clse = ref.ref_c(q, k, v, m, blk)
same = lambda a, b: bool(torch.equal(torch.isnan(a), torch.isnan(b)) and  # noqa: E731
                         torch.equal(torch.isinf(a), torch.isinf(b)))
check(same(got, cwant) and same(lse, clse), "non-finite: NaN/inf positions differ from tsr_ref_attention")
check(bool(torch.isnan(got[0, 0, :, 9]).all()) and not torch.isnan(got[0, 0, :, 1]).all(),
      "non-finite: a NaN value of an unselected key reached the rows")
fin = torch.isfinite(cwant)
check(ref.rel_error(got[fin], cwant[fin]) <= TOL[torch.float32], "non-finite: finite part differs")
check(torch.isneginf(lse[0, 1, 128:192]).all() and (got[0, 1, 128:192] == 0).all(),
      "non-finite: the empty row is not zeros / -inf")

# ---- bad input: refused with one line, out untouched -----------------------
q, k, v = (torch.randn(1, 2, 100, 64) for _ in range(3))
m = torch.ones(2, 1, 1, dtype=torch.bool)
poison = torch.full_like(q, 3.0)
bad = [
    (dict(k=k.half()), "share one dtype"),
    (dict(k=k.double(), v=v.double()), "float32, bf16 or fp16"),
    (dict(q=q.to(torch.int32), k=k.to(torch.int32), v=v.to(torch.int32)), "float32, bf16 or fp16"),
    (dict(v=torch.randn(1, 2, 99, 64)), "disagree"),
    (dict(k=torch.randn(1, 2, 100, 32), v=torch.randn(1, 2, 100, 32)), "disagree"),
    (dict(m=torch.ones(2, 2, 1, dtype=torch.bool)), "query blocks"),
    (dict(m=torch.ones(3, 1, 1, dtype=torch.bool)), "heads"),
    (dict(q=torch.randn(1, 3, 100, 64)), "multiple"),
    (dict(lse=torch.zeros(1, 2, 99)), "lse must be"),
    (dict(out=torch.zeros(1, 2, 100, 64, dtype=torch.float16)), "out must be"),
    (dict(scale=math.inf), "finite"),
]
for change, words in bad:
    a = dict(q=q, k=k, v=v, m=m, out=poison, lse=None, scale=None)
    a.update(change)
    try:
        tessera.attention(a["q"], a["k"], a["v"], a["m"], block=(128, 128), out=a["out"], lse=a["lse"],
                          scale=a["scale"])
    except tessera.TesseraError as e:
        check(words in str(e) and "\n" not in str(e), "bad input %s: message %r" % (words, str(e)))
        print("python-cpu: refused:", e)
    else:
        check(False, "bad input %s accepted" % words)
    check(bool((poison == 3.0).all()), "bad input %s: out was written" % words)

if failures:
    print("python-cpu: %d failure(s), seed %d" % (len(failures), seed))
    sys.exit(1)
print("python-cpu: ok")
