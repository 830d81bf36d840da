#!/usr/bin/env python3
"""svg_profile.py: Sparse VideoGen's online profile as libtessera's kernels
(tessera::sampled_errors, templates/produce_sampled.cuh) on the GPU against
a float64 reference, then its cost beside the attention it prepares
(issue 16: a producer may cost at most 5% of it).

Checks (exit 1 on a failure), on fresh random q, k, v (fp16 and bf16, d64
and d128, bhsd and bshd with strided rows, tokens and samples off the
kernels' multiples of 64, batch 1-2, random bit planes over every bit of a
word, bit 31 included), out and the working space poisoned with NaN first:
  * each head's two errors within a first-order bound of the float64
    reference's, computed per element from the reference: P rounded to
    q's 16-bit type before the products with v (unit roundoff 2^-8 bf16,
    2^-11 fp16), fp32 sums over the keys, fp32 scores and exp2;
  * a pattern that keeps every key gives an error of exactly 0 (its
    weights and sums are the dense ones, in the same order);
  * a row that keeps no key, a NaN in q or k, a sampled row outside
    [0, tokens) give NaN where (and only where) the reference does;
  * two calls give the same bits (fixed-order sums), and so do the 2- and
    3-stage pipelines (tessera.produce.SAMPLED_STAGES);
  * at Wan2.1-1.3B 480p (bench shape): SVG's head types equal the float64
    reference's wherever its two errors are apart by more than their
    bounds, and the torch path's (tessera.methods.SVG_KERNEL = False)
    likewise; the producer synchronises nothing, and a CUDA graph of it
    replayed on new q, k gives the eager mask.
Timing (bench shape, CUDA events, median of --reps, two rounds): methods.svg
with the kernels and with the torch path (compiled), the op alone, and the
attention with the produced mask.
--quick: the checks on small shapes only (for compute-sanitizer)."""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from methods_bench import rope_qk, timed  # noqa: E402
from producer_ab import FAILS, check, svg_attention_ms, svg_graph_checks  # noqa: E402

from tessera import methods as M  # noqa: E402

P = M._produce


def reference(qb, kb, vb, rows, masks, scale):
    """(errors [B, H, 2], bounds [B, H, 2]) in float64: the kernels'
    errors may differ from these by at most the bounds."""
    b, h, s, d = qb.shape
    u = 2.0 ** -8 if qb.dtype == torch.bfloat16 else 2.0 ** -11
    gam = (s + d + 64) * 2.0 ** -24  # fp32 sums over the keys (and chunk merges)
    ok = (rows >= 0) & (rows < s)
    r = torch.where(ok, rows, 0).long()
    q = qb.double()[:, :, r]
    k, v = kb.double(), vb.double()
    sc = torch.matmul(q, k.transpose(-1, -2)) * scale
    # fp32 scores: relative perturbation of each weight from the score sums
    # (D terms, |q| |k| by Cauchy-Schwarz), the scaled fma and exp2.approx
    qn, kn = q.norm(dim=-1, keepdim=True), k.norm(dim=-1).amax(-1)[..., None, None]
    eps = 2 * (d * 2.0 ** -24 * scale * qn * kn + 2.0 ** -21 + 2.0 ** -23 * sc.abs().amax(-1, keepdim=True))
    p = torch.softmax(sc, -1)
    o, ao = [], []
    for m in (None, masks[0], masks[1]):
        w = p if m is None else p * m.double()
        z = w.sum(-1, keepdim=True)
        o.append(torch.matmul(w, v) / z)
        ao.append(torch.matmul(w, v.abs()) / z)
    errs, bnds = [], []
    for a in (1, 2):
        e = o[a] - o[0]
        dl = (u + 2 * gam + 2 * eps) * (ao[a] + ao[0]) + gam * (o[a].abs() + o[0].abs())
        err = e.square().mean((-1, -2))
        errs.append(err)
        bnds.append((2 * e.abs() * dl + dl * dl).mean((-1, -2)) * (1 + 1e-6) + 1e-5 * err + 1e-30)
    bad = torch.full_like(errs[0], math.nan)
    return (torch.stack([torch.where(ok.all(), x, bad) for x in errs], -1), torch.stack(bnds, -1))


def run_kernel(qb, kb, vb, rows, planes, scale):
    """The op's launch with out and the working space poisoned (NaN)."""
    out = torch.full((qb.shape[0], qb.shape[1], 2), math.nan, device=qb.device)
    a, prod = P._sampled_args(qb, kb, vb, rows, planes, scale, out)
    work = torch.full((P._sampled_work_bytes(a, prod),), 0xFF, dtype=torch.uint8, device=qb.device)
    P._sampled_launch(a, prod, work, qb.device)
    return out


def make_qkv(b, h, s, d, dtype, layout, gen):
    """q, k, v in layout; bshd ones are views of one [B, S, 3, H, D] tensor
    (a fused projection's: token stride 3 H D)."""
    if layout == "bshd":
        x = torch.randn(b, s, 3, h, d, device="cuda", generator=gen).to(dtype)
        return x[:, :, 0], x[:, :, 1], x[:, :, 2]
    return tuple(torch.randn(b, h, s, d, device="cuda", generator=gen).to(dtype) for _ in range(3))


def one_case(name, b, h, s, d, n, dtype, layout, gen, density=0.5, edit=None):
    q, k, v = make_qkv(b, h, s, d, dtype, layout, gen)
    rows = torch.randint(0, s, (n,), device="cuda", generator=gen, dtype=torch.int32)
    masks = torch.rand(2, n, s, device="cuda", generator=gen) < density
    masks[:, :, 0] = True  # every row keeps a key unless a case says otherwise
    if edit:
        q, k, rows, masks = edit(q, k, rows, masks)
    scale = 1 / math.sqrt(d)
    qb, kb, vb = (x if layout == "bhsd" else x.transpose(1, 2) for x in (q, k, v))
    got = run_kernel(qb, kb, vb, rows, P.pack_planes(masks), scale)
    again = run_kernel(qb, kb, vb, rows, P.pack_planes(masks), scale)
    staged = []
    for st in (2, 3):  # the pipeline's depth is a tuning knob: the same bits
        P.SAMPLED_STAGES = st
        staged.append(run_kernel(qb, kb, vb, rows, P.pack_planes(masks), scale))
    P.SAMPLED_STAGES = 0
    want, bnd = reference(qb, kb, vb, rows, masks, scale)
    nan_ok = torch.equal(got.isnan(), want.isnan())
    fin = ~want.isnan()
    gap = (got.double() - want).abs()
    within = bool((gap[fin] <= bnd[fin]).all())
    worst = float((gap[fin] / bnd[fin]).max()) if bool(fin.any()) else 0.0
    same = all(torch.equal(got.view(torch.int32), x.view(torch.int32)) for x in [again] + staged)
    check(f"{name}: errors within the float64 bound, NaN where the reference has it, same bits twice and "
          f"at 2 and 3 stages", nan_ok and within and same, f"largest gap / bound {worst:.3f}, NaN "
          f"{int(got.isnan().sum())} (reference {int(want.isnan().sum())}), bitwise repeats {same}")
    return got, want


def small_cases(seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shapes = [  # (b, h, tokens, d, samples, dtype, layout)
        (1, 3, 1000, 128, 5, torch.bfloat16, "bhsd"),
        (2, 2, 777, 64, 70, torch.float16, "bshd"),
        (1, 2, 4109, 128, 130, torch.float16, "bshd"),
        (1, 4, 64, 64, 64, torch.bfloat16, "bhsd"),
        (1, 1, 33, 128, 1, torch.bfloat16, "bshd"),
        (2, 1, 2048, 64, 200, torch.bfloat16, "bhsd"),
    ]
    for (b, h, s, d, n, dt, lay) in shapes:
        tag = f"b{b} h{h} s{s} d{d} samples {n} {str(dt)[6:]} {lay}"
        one_case(tag, b, h, s, d, n, dt, lay, gen)
        one_case(tag + " sparse patterns", b, h, s, d, n, dt, lay, gen, density=0.05)

    def all_keys(q, k, rows, masks):
        masks[0] = True
        return q, k, rows, masks
    got, _ = one_case("pattern 0 keeps every key", 1, 2, 900, 128, 40, torch.bfloat16, "bhsd", gen, edit=all_keys)
    check("a pattern keeping every key: error exactly 0", bool((got[..., 0] == 0).all()),
          f"largest {float(got[..., 0].abs().max()):.3g}")

    def empty_row(q, k, rows, masks):
        masks[1, 3] = False
        return q, k, rows, masks
    one_case("a row keeping no key (NaN)", 1, 2, 500, 64, 9, torch.float16, "bhsd", gen, edit=empty_row)

    def nan_q(q, k, rows, masks):
        q = q.clone()
        q[0, 1, int(rows[2])] = math.nan
        return q, k, rows, masks
    one_case("NaN in a sampled row of q (head 1)", 1, 3, 700, 128, 12, torch.bfloat16, "bhsd", gen, edit=nan_q)

    def nan_k(q, k, rows, masks):
        k = k.clone()
        k[1, 0, 321] = math.nan
        return q, k, rows, masks
    one_case("NaN in a key (batch 1, head 0)", 2, 2, 600, 64, 20, torch.float16, "bhsd", gen, edit=nan_k)

    def bad_row(q, k, rows, masks):
        rows = rows.clone()
        rows[4] = q.shape[2]
        return q, k, rows, masks
    one_case("a sampled row past the tokens (NaN)", 1, 2, 300, 128, 10, torch.bfloat16, "bhsd", gen, edit=bad_row)

    def neg_row(q, k, rows, masks):
        rows = rows.clone()
        rows[0] = -1
        return q, k, rows, masks
    one_case("a sampled row -1 (NaN)", 1, 2, 300, 64, 3, torch.float16, "bhsd", gen, edit=neg_row)


def svg_rows(q, grid):
    """svg()'s sampled rows and their two token masks at its defaults."""
    block = M.svg_block(grid[1] * grid[2])
    pos = M._svg_static(grid, block, 0.3, True, q.device)[3]
    return M._svg_rows(grid, block, 0.3, True, 64, pos)


def svg_types(q, k, v, grid, label):
    """SVG's head types against the float64 reference where the reference's
    two errors are apart by more than their bounds."""
    rows, m_sp, m_tm = svg_rows(q, grid)
    want, bnd = reference(q, k, v, rows.int(), torch.stack([m_sp, m_tm]), 1 / math.sqrt(q.shape[-1]))
    clear = (want[..., 0] - want[..., 1]).abs() > bnd[..., 0] + bnd[..., 1]
    for kern in (True, False):
        M.SVG_KERNEL = kern
        got = M.svg(q, k, v, grid).info["temporal"]
        agree = bool((got == (want[..., 1] < want[..., 0]))[clear].all())
        check(f"{label}: {'kernel' if kern else 'torch path'} head types = float64's where the errors are "
              f"apart", agree, f"{int(clear.sum())} of {clear.numel()} heads clear, temporal {int(got.sum())}")
    M.SVG_KERNEL = True


def bench(q, k, v, grid, reps):
    svg_types(q, k, v, grid, "svg bench shape")
    m = M.svg(q, k, v, grid)
    t = {}
    for _ in range(2):
        for name, kern in (("torch", False), ("kernel", True)):
            M.SVG_KERNEL = kern
            t.setdefault(name, []).append(timed(lambda: M.svg(q, k, v, grid), reps))
    M.SVG_KERNEL = True
    rows, m_sp, m_tm = svg_rows(q, grid)
    rows32, bits = rows.int(), P.pack_planes(torch.stack([m_sp, m_tm]))
    top = timed(lambda: P.sampled_errors(q, k, v, rows32, bits, 1 / math.sqrt(q.shape[-1]), "bhsd"), reps)
    ta = svg_attention_ms(m, q, k, v, reps)
    a, b = min(t["torch"]), min(t["kernel"])
    print(f"svg: attention {ta:.4f} ms (density {m.mask.float().mean().item():.3f}); producer torch path "
          f"{a:.4f} ms ({100 * a / ta:.2f}%), kernels {b:.4f} ms ({100 * b / ta:.2f}%), op alone {top:.4f} ms; "
          f"rounds torch {t['torch']}, kernel {t['kernel']}")
    print(f"SUMMARY SVG: producer {b:.4f} ms = {100 * b / ta:.2f}% of attention {ta:.4f} ms; "
          f"{'within' if b <= 0.05 * ta else 'OVER'} the 5% budget")
    svg_graph_checks(q, k, v, grid, "svg (kernels)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grid", type=int, nargs=3, default=[21, 30, 52])
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="the small checks only (for compute-sanitizer)")
    a = ap.parse_args()
    grid = tuple(a.grid)
    print(f"svg_profile: {torch.cuda.get_device_name()}, bench grid {grid} ({math.prod(grid)} tokens), "
          f"{a.heads} heads, d{a.dim}, bf16, median of {a.reps} (x2 rounds)")
    small_cases(a.seed)
    if not a.quick:
        gen = torch.Generator(device="cuda").manual_seed(a.seed)
        q, k = rope_qk(1, a.heads, grid, a.dim, torch.bfloat16, gen)
        v = torch.randn(q.shape, device="cuda", dtype=torch.bfloat16, generator=gen)
        bench(q, k, v, grid, a.reps)
    print(f"svg_profile: {'ok' if not FAILS else 'FAILED: ' + '; '.join(FAILS)}")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
