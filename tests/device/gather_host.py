#!/usr/bin/env python3
"""gather_host.py: the host side of gather plans (TSR_MAP_GATHER) on the GPU
machine, once the bundle has kg variants (sm_90a).  Three checks, each
failing loudly:

1. host-planned gather plans (128x64 blocks on 128x128 tiles, ragged
   lengths, GQA, empty rows, odd and even counts a row; bf16 and fp16, d64
   and d128, BHSD and BSHD, row and split tasks) run on the device and match
   the float64 reference (normwise 1e-2, the GPU path's tolerance) and the
   CPU plan executor on the same plan; the variant run is a kg one;
2. the request path's upgrade: attention() on CUDA tensors with a CPU mask
   of 128x64 blocks selects gather on 128x128 tiles (the reason says
   "gather: 128x64 blocks on 128x128 tiles"), and TESSERA_GATHER=0 keeps
   the retained 128x64 plan; both outputs match the reference;
3. a 64x64-block mask is never upgraded.

  TESSERA_LIBRARY=BUILD/.libs/libtessera.so TESSERA_BUNDLE=BUILD/bundle \\
    python3 tests/device/gather_host.py [--seed N]
"""
import argparse
import os
import random
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
sys.path.insert(0, os.path.join(here, ".."))
import torch  # noqa: E402
import python_ref as ref  # noqa: E402
import tessera  # noqa: E402

TOL = 1e-2
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def case(rng, dtype, d, layout):
    hkv = rng.choice([1, 2])
    hq = hkv * rng.choice([1, 2])
    sq, sk = rng.randint(300, 2000), rng.randint(300, 2000)
    shape = (lambda h, s: (1, h, s, d)) if layout == "bhsd" else (lambda h, s: (1, s, h, d))
    q = torch.randn(shape(hq, sq), device="cuda").to(dtype)
    k, v = (torch.randn(shape(hkv, sk), device="cuda").to(dtype) for _ in range(2))
    m = torch.rand(hq, (sq + 127) // 128, (sk + 63) // 64) < rng.uniform(0.1, 0.6)
    m[0, 0] = False  # an empty row
    return q, k, v, m


def host_gather(rng, ctx):
    for dtype in (torch.bfloat16, torch.float16):
        for d in (64, 128):
            for layout in ("bhsd", "bshd"):
                for tasks in ("row", "split"):
                    q, k, v, m = case(rng, dtype, d, layout)
                    b, hq, sq, _ = ref.bhsd(q, layout).shape
                    hkv, sk = ref.bhsd(k, layout).shape[1:3]
                    p = tessera.Plan(ctx, m, b, hq, hkv, sq, sk, d, block=(128, 64), dtype=dtype,
                                     layout=layout, mapping="gather", tasks=tasks)
                    got = p.run(q, k, v)
                    torch.cuda.synchronize()
                    s = p.summary()
                    name = "host gather %s d%d %s %s %dx%d" % (dtype, d, layout, tasks, sq, sk)
                    check(s["mapping"] == tessera.MAPPINGS["gather"] and "_kg" in s["variant"],
                          name + ": mapping %d variant %s" % (s["mapping"], s["variant"]))
                    want, _ = ref.reference(q.cpu(), k.cpu(), v.cpu(), m, (128, 64), layout)
                    err = ref.rel_error(got.cpu(), want)
                    check(err <= TOL, name + ": error %.3g" % err)
                    cpu = p.run(q.cpu().float(), k.cpu().float(), v.cpu().float())
                    err = ref.rel_error(got.cpu(), cpu)
                    check(err <= TOL, name + ": against the CPU executor %.3g" % err)
                    p.close()


def upgrade(rng, ctx):
    q, k, v, m = case(rng, torch.bfloat16, 128, "bhsd")
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1:3]
    want, _ = ref.reference(q.cpu(), k.cpu(), v.cpu(), m, (128, 64))
    for knob in (None, "0"):
        if knob is None:
            os.environ.pop("TESSERA_GATHER", None)
        else:
            os.environ["TESSERA_GATHER"] = knob
        p = tessera.Plan(ctx, m, b, hq, hkv, sq, sk, d, block=(128, 64), dtype=torch.bfloat16)
        got = p.run(q, k, v)
        torch.cuda.synchronize()
        s = p.summary()
        gathered = s["mapping"] == tessera.MAPPINGS["gather"]
        name = "selection, TESSERA_GATHER=%s" % knob
        check(gathered == (knob is None) and (s["tile_n"] == 128) == gathered and
              ("gather: 128x64 blocks on 128x128 tiles" in p.selection) == gathered,
              name + ": mapping %d tile %dx%d variant %s (%s)" % (s["mapping"], s["tile_m"], s["tile_n"],
                                                                 s["variant"], p.selection))
        check(ref.rel_error(got.cpu(), want) <= TOL, name + ": error %.3g" % ref.rel_error(got.cpu(), want))
        p.close()
    os.environ.pop("TESSERA_GATHER", None)
    m64 = torch.rand(hq, (sq + 63) // 64, (sk + 63) // 64) < 0.3
    p = tessera.Plan(ctx, m64, b, hq, hkv, sq, sk, d, block=(64, 64), dtype=torch.bfloat16)
    check(p.summary()["mapping"] != tessera.MAPPINGS["gather"], "64x64 blocks not upgraded (%s)" % p.selection)
    p.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=random.SystemRandom().randrange(1 << 30))
    a = ap.parse_args()
    print("gather_host: seed", a.seed)
    rng = random.Random(a.seed)
    torch.manual_seed(a.seed)
    ctx = tessera.Context()
    host_gather(rng, ctx)
    upgrade(rng, ctx)
    ctx.close()
    print("gather_host: %d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
