#!/usr/bin/env python3
"""ncu_one.py: one launch of one system on one of steady_ab.py's cases, for
Nsight Compute with --profile-from-start off (issue 20: our sm90 kernel
beside FA4's on the same mask, notes/power-2026-12-06.md).  Five warm-up
calls, then the profiler is started and stopped around a single call, so
`ncu --profile-from-start off --launch-count 1` profiles exactly that
launch (tessera's host plan is one kernel; FA4's run() is one kernel).

  ncu --profile-from-start off --launch-count 1 --section WarpStateStats ... -o REPORT \\
    python3 tests/device/ncu_one.py tessera|fa4 CASE [--kit KIT] [--variant V] [--precision fp8]

CASE: one of steady_ab.py's; --variant runs tessera's plan on the named
variant (select=False), else the bundle's own choice; --precision fp8 plans
tessera's FP8 scheme (its run is the K/V statistics and quantization
kernels, then the attention, whose name alone ends in the TMA box: give ncu
--kernel-name 'regex:_tma[0-9]+$' to profile the attention);
--kit: the baselines kit folder, for fa4.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "..", "python"), os.path.join(HERE, "..", "..", "scripts"), HERE]
from steady_ab import CASES, case_inputs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("system", choices=("tessera", "fa4"))
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--kit", default=None)
    ap.add_argument("--variant", default=None)
    ap.add_argument("--precision", default="native", choices=("native", "fp8"))
    args = ap.parse_args()
    if args.system == "fa4" and not args.kit:
        ap.error("fa4 needs --kit KIT (the baselines kit folder)")
    import torch
    import tessera
    b, mb, q, k, v, _ = case_inputs(torch, args.case, torch.Generator(device="cuda").manual_seed(20261206))
    _, H, S, D = q.shape
    if args.system == "fa4":
        sys.path.insert(0, args.kit)
        import fa4_adapter
        fn, _ = fa4_adapter.fa4_bsr(q, k, v, mb, b[0], b[1])
        what = "FA4 CuTe BSR"
    else:
        kw = dict(select=False, variant=args.variant) if args.variant else {}
        p = tessera.Plan(tessera.Context(), mb, 1, H, H, S, S, D, block=b, dtype=q.dtype, tile=b,
                         tasks="row", precision=args.precision, **kw)
        o = torch.empty_like(q)
        fn = (lambda: p.run(q, k, v, out=o))
        what = p.summary()["variant"]
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"ncu_one: {args.system} {args.case}: {what}")


if __name__ == "__main__":
    main()
