"""torch_op.py (tests/device/run BUILDDIR torch-op, after tests/python_op.py
--device cuda): the torch op tessera::attention captured in a
torch.cuda.CUDAGraph once and replayed while the CUDA block mask's contents
(and q's) change between replays; every replay's out and lse, poisoned
before it, are checked against the float64 reference of that replay's mask
(tests/python_ref.py): uniform blocks with a ragged last block, variable
blocks, GQA, both layouts, batch-broadcast masks, replays with dense,
sparse, empty-row and all-empty masks.  Exit status 1 on any failure.
SEED= repeats a run."""
import os
import random
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
sys.path.insert(0, os.path.join(here, ".."))
import python_ref as ref  # noqa: E402
import tessera  # noqa: E402

seed = int(os.environ.get("SEED") or random.SystemRandom().randrange(1 << 30))
print("torch-op: seed", seed)
rng = random.Random(seed)
torch.manual_seed(seed)
dev = torch.device("cuda")
failures = []
# The GPU kernels' tolerance of tests/gpu_plan (bf16 and fp16 outputs,
# normwise); lse is float32.
TOL, LSE_TOL = 1e-2, 1e-3


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def cut(n, lo, hi):
    sizes = []
    while n:
        sizes.append(min(n, rng.randint(lo, hi)))
        n -= sizes[-1]
    return sizes


def new_mask(shape, kind):
    if kind == "dense":
        return torch.ones(shape, dtype=torch.bool)
    if kind == "empty":
        return torch.zeros(shape, dtype=torch.bool)
    m = torch.rand(shape) < (0.1 if kind == "sparse" else rng.uniform(0.2, 0.8))
    flat = m.view(-1, shape[-2], shape[-1])
    for _ in range(3):  # empty rows
        flat[rng.randrange(flat.shape[0]), rng.randrange(shape[-2])] = False
    return m


def graph_case(name, b, hq, hkv, s_q, s_k, d, block, layout, dtype, mask_batch):
    qs, ks = ref.block_sizes(block, s_q, s_k)
    shape = (hq, len(qs), len(ks)) if mask_batch is None else (mask_batch, hq, len(qs), len(ks))

    def make(h, s):
        return torch.randn((b, h, s, d) if layout == "bhsd" else (b, s, h, d), device=dev, dtype=dtype)
    q, k, v = make(hq, s_q), make(hkv, s_k), make(hkv, s_k)
    mask_buf = new_mask(shape, "random").to(dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: templates made, regime settled, before capture
        for _ in range(3):
            tessera.attention(q, k, v, mask_buf, block=block, layout=layout, return_lse=True)
            torch.cuda.synchronize()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = tessera.attention(q, k, v, mask_buf, block=block, layout=layout, return_lse=True)
    for r, kind in enumerate(["random", "sparse", "dense", "random", "empty", "random"]):
        m = new_mask(shape, kind)
        mask_buf.copy_(m)
        if r % 2:
            q.copy_(torch.randn_like(q))
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        want, wlse = ref.reference(q.cpu(), k.cpu(), v.cpu(), m, block, layout)
        got, glse = out.cpu(), lse.cpu()
        e = ref.rel_error(got, want) if want.abs().max() > 0 else got.abs().max().item()
        tm = ref.token_mask(m, block, b, hq, s_q, s_k)
        empty = ~tm.any(dim=-1)
        fin = ~empty
        el = (((glse[fin].double() - wlse[fin]).abs() / wlse[fin].abs().clamp_min(1)).max().item()
              if fin.any() else 0.0)
        ok = (not torch.isnan(got).any() and e <= TOL and el <= LSE_TOL and
              bool(torch.equal(torch.isneginf(glse), empty)) and
              bool((ref.bhsd(got, layout)[empty] == 0).all()))
        check(ok, "%s replay %d (%s mask): error %.3g, lse %.3g" % (name, r, kind, e, el))
        print("torch-op: %s replay %d (%s mask, %.0f%% empty rows): error %.2e, lse %.2e"
              % (name, r, kind, 100.0 * empty.double().mean().item(), e, el))


graph_case("uniform bhsd", 2, 8, 8, 1000, 1000, 128, (128, 128), "bhsd", torch.bfloat16, None)
graph_case("uniform gqa bshd", 2, 12, 4, 777, 1290, 64, (64, 128), "bshd", torch.float16, 1)
s = rng.randint(800, 1600)
qs = cut(s, 40, 200)
graph_case("variable bshd", 2, 6, 6, s, s, 128, (qs, list(reversed(qs))), "bshd", torch.bfloat16, 2)

if failures:
    print("torch-op: %d failure(s), seed %d" % (len(failures), seed))
    sys.exit(1)
print("torch-op: ok")
