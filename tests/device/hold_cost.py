#!/usr/bin/env python3
"""hold_cost.py: what timing the GPU templates' steps costs a request
(issue 20: _GpuTemplates.run records two CUDA events around every 8th call
of a template, for tsr_gpuplan_hold_step's comparison of step times).

tessera.attention with a CUDA mask, select on, bf16, BHSD, one batch, on a
small problem where the host's cost shows (S tokens, H heads, d128, random
128x128 blocks at 25%) and on a large one; CALLS back-to-back calls, host
time per call (synchronised at the end) and the template's step time,
with the events every 8th call (as shipped) and never (_TIME_EVERY huge),
in alternating rounds.  Outputs checked first against float32 SDPA on the
selected keys.

    TESSERA_LIBRARY=build/.libs/libtessera.so TESSERA_BUNDLE=build/bundle \\
        PYTHONPATH=python python3 tests/device/hold_cost.py
"""
import statistics
import sys
import time

import torch

import tessera

CALLS, ROUNDS = 400, 5


def case(seq, heads, density=0.25, blk=128, d=128):
    g = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn((1, heads, seq, d), device="cuda", dtype=torch.bfloat16, generator=g)
               for _ in range(3))
    nb = (seq + blk - 1) // blk
    m = torch.rand((heads, nb, nb), device="cuda", generator=g) < density
    m |= torch.eye(nb, dtype=torch.bool, device="cuda")
    return q, k, v, m, blk


def check(q, k, v, m, blk):
    o = tessera.attention(q, k, v, m, block=(blk, blk))
    tok = m.repeat_interleave(blk, 1).repeat_interleave(blk, 2)[:, :q.shape[2], :k.shape[2]]
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                           attn_mask=tok.unsqueeze(0))
    err = ((o.float() - ref).norm() / ref.norm()).item()
    if not err < 2e-2:
        sys.exit(f"hold_cost: relative error {err:.2e} over 2e-2")
    return err


def per_call_us(q, k, v, m, blk):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        tessera.attention(q, k, v, m, block=(blk, blk))
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / CALLS * 1e6


every = tessera._GpuTemplates._TIME_EVERY
for seq, heads in ((2048, 4), (32768, 12)):
    x = case(seq, heads)
    err = check(*x)
    got = {"never": [], "every 8th": []}
    for _ in range(ROUNDS):
        for name, te in (("never", 1 << 30), ("every 8th", every)):
            tessera._GpuTemplates._TIME_EVERY = te
            got[name].append(per_call_us(*x))
    tessera._GpuTemplates._TIME_EVERY = every
    (tp,) = [t for key, t in tessera.default_context(0)._gpuplans.items() if key[3] == seq]
    print(f"S {seq}, {heads} heads, 25% random 128x128 (error {err:.1e}): per call "
          + ", ".join(f"{n} {statistics.median(v):.1f} us (min {min(v):.1f})" for n, v in got.items())
          + f"; step time {tp._step_ms(tp.cur) * tp.cur._stats().density:.4f} ms")
