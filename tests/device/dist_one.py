#!/usr/bin/env python3
"""dist_one.py: tessera.distributed on one GPU (tests/device/run BUILDDIR dist).

1. A world of one rank on NCCL: tessera.distributed.attention (Ulysses and
   ring degree 1, a group and a 1-D device mesh) on CUDA bf16 tensors and a
   CUDA mask equals tessera.attention on the same inputs (1e-2: the GPU
   template may be re-selected between the calls), in one launch, and the
   mask reaches Tessera on the GPU.
2. The ring's merge in one process: chunked_attention over ragged chunks
   (blocks straddling chunk boundaries, uniform 128x128 and variable
   geometries, GQA, empty chunk pairs, a query chunk with nothing selected)
   on CUDA tensors against tessera.attention on the whole sequence (bf16:
   1e-2 max-norm relative; lse 2e-2 absolute where finite, -inf in the
   same places) and the float64 reference (tests/python_ref.py, 2e-2),
   with the launch count of the pairs that select anything, for hops
   computed from the CUDA mask, from hop_table(), and hops="all".
Fresh random inputs (SEED= repeats); outputs poisoned with NaN first.  Exit
0 when all pass, 1 on a mismatch.  NVLink multicast stays off (the runner
sets NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1)."""
import os
import random
import sys
import tempfile

import torch
import torch.distributed as dist

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(here, "..", "..", "python"), os.path.join(here, "..")]
import tessera  # noqa: E402
import tessera.distributed as td  # noqa: E402
from python_ref import block_sizes, reference, rel_error, token_mask  # noqa: E402

TOL, TOL_LSE = 1e-2, 2e-2
fails = []


def check(ok, msg):
    print(("ok   " if ok else "FAIL ") + msg, flush=True)
    if not ok:
        fails.append(msg)


def lse_ok(got, want, tol):
    if not torch.equal(torch.isneginf(got), torch.isneginf(want)) or torch.isnan(got).any():
        return False
    fin = ~torch.isneginf(want)
    return not fin.any() or (got[fin].double() - want[fin].double()).abs().max().item() <= tol


def counting(fn, need_cuda_mask):
    def wrapper(q, k, v, block_mask, *a, **kw):
        wrapper.calls += 1
        if need_cuda_mask and not block_mask.is_cuda:
            wrapper.host_masks += 1
        return fn(q, k, v, block_mask, *a, **kw)
    wrapper.calls = wrapper.host_masks = 0
    return wrapper


def world_of_one(rng, dev):
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("nccl", init_method="file://" + os.path.join(tmp, "s"), rank=0,
                                world_size=1, device_id=dev)
        try:
            b, hq, hkv, s, d = 1, 8, 2, rng.randint(3000, 5000), 128
            q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16) for h in (hq, hkv, hkv))
            nq = -(-s // 128)
            mask = torch.rand(hq, nq, nq, device=dev) < 0.2
            lse0 = torch.empty(b, hq, s, device=dev)
            want = tessera.attention(q, k, v, mask, block=(128, 128), lse=lse0)
            from torch.distributed.device_mesh import init_device_mesh
            for how, kw in (("group", {}), ("mesh", {"mesh": init_device_mesh("cuda", (1,))})):
                out = torch.full_like(q, float("nan"))
                lse = torch.full_like(lse0, float("nan"))
                base = tessera.attention
                tessera.attention = c = counting(base, True)
                try:
                    td.attention(q, k, v, mask, block=(128, 128), out=out, lse=lse, **kw)
                finally:
                    tessera.attention = base
                torch.cuda.synchronize()
                e = rel_error(out, want)
                check(e <= TOL and lse_ok(lse, lse0, TOL_LSE) and c.calls == 1 and c.host_masks == 0,
                      f"world of one ({how}, nccl): {e:.2e} vs tessera.attention, {c.calls} launch, "
                      f"{c.host_masks} host masks")
        finally:
            dist.destroy_process_group()


def blank(m, qs, ks, bounds, pairs):
    qst, kst = [0], [0]
    for x in qs:
        qst.append(qst[-1] + x)
    for x in ks:
        kst.append(kst[-1] + x)
    for i, j in pairs:
        rows = [r for r in range(len(qs)) if qst[r] < bounds[i + 1] and qst[r + 1] > bounds[i]]
        cols = [c for c in range(len(ks)) if kst[c] < bounds[j + 1] and kst[c + 1] > bounds[j]]
        m[:, rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1] = False


def ring_merge(rng, dev, kind):
    hq, hkv, d = 4, 2, 128
    s = rng.randint(3000, 5000)
    n = rng.randint(3, 5)
    cuts = sorted(rng.sample(range(1, s), n - 1))
    chunks = [y - x for x, y in zip([0] + cuts, cuts + [s])]
    bounds = [0] + [sum(chunks[:i + 1]) for i in range(n)]
    if kind == "uniform":
        block = (128, 128)
    else:
        sizes = []
        while sum(sizes) < s:
            sizes.append(min(rng.randint(40, 300), s - sum(sizes)))
        block = (sizes, sizes)
    qs, ks = block_sizes(block, s, s)
    mask = torch.rand(hq, len(qs), len(ks), device=dev) < 0.25
    pairs = [(i, j) for i in range(n) for j in range(n)]
    rng.shuffle(pairs)
    blank(mask, qs, ks, bounds, pairs[:n] + [(n - 1, j) for j in range(n)])
    q, k, v = (torch.randn(1, h, s, d, device=dev, dtype=torch.bfloat16) for h in (hq, hkv, hkv))
    lse_w = torch.empty(1, hq, s, device=dev)
    whole = tessera.attention(q, k, v, mask, block=block, lse=lse_w)
    # the float64 reference and the token-level pair count on the host
    o64, l64 = (t.to(dev) for t in reference(q.cpu(), k.cpu(), v.cpu(), mask.cpu(), block))
    tm = token_mask(mask.cpu().unsqueeze(0), block, 1, hq, s, s)[0].any(0)
    want_calls = sum(bool(tm[bounds[i]:bounds[i + 1], bounds[j]:bounds[j + 1]].any())
                     for i in range(n) for j in range(n))
    for hops in (None, "table", "all"):
        h = td.hop_table(mask, block, s, chunks=[bounds[i + 1] - bounds[i] for i in range(n)],
                         ring_degree=n)[0] if hops == "table" else hops
        out = torch.full_like(q, float("nan"))
        lse = torch.full_like(lse_w, float("nan"))
        base = tessera.attention
        tessera.attention = c = counting(base, True)
        try:
            td.chunked_attention(q, k, v, mask, block=block, chunks=chunks, out=out, lse=lse, hops=h)
        finally:
            tessera.attention = base
        torch.cuda.synchronize()
        e, e64 = rel_error(out, whole), rel_error(out, o64)
        calls = want_calls if hops != "all" else n * n
        check(e <= TOL and e64 <= TOL and lse_ok(lse, lse_w, TOL_LSE) and lse_ok(lse, l64, TOL_LSE)
              and not torch.isnan(out).any() and c.calls == calls and c.host_masks == 0,
              f"ring merge {kind}, {n} chunks {chunks}, hops={hops}: {e:.2e} vs whole, {e64:.2e} vs float64, "
              f"{c.calls} launches (expected {calls} of {n * n}), {c.host_masks} host masks")


def main():
    seed = int(os.environ.get("SEED") or random.randrange(1 << 30))
    print(f"dist_one: seed {seed}", flush=True)
    rng = random.Random(seed)
    torch.manual_seed(seed)
    if not torch.cuda.is_available():
        print("dist_one: no GPU")
        sys.exit(77)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    world_of_one(rng, dev)
    for kind in ("uniform", "variable"):
        ring_merge(rng, dev, kind)
    print(f"dist_one: {'FAILED ' + str(len(fails)) if fails else 'all passed'} (seed {seed})")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
