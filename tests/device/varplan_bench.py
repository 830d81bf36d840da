#!/usr/bin/env python3
"""varplan_bench.py: request time of variable-block masks (STA, VSA) on the
device, GPU-planned against host-planned, with execution alone and dense
cuDNN SDPA beside them (notes/varplan.md).  Runs where PyTorch and a GPU are.

    TESSERA_LIBRARY=build/.libs/libtessera.so python3 tests/device/varplan_bench.py CORPUS_DIR [INDEX...]

For each corpus entry (manifest index; default: every variable-geometry
entry of the eval split), Wan2.1-1.3B shapes, bf16, head dim 128:
  exec        Plan.run of the host plan (CUDA events, median)
  req-gpu     tessera.attention(q, k, v, cuda_mask, block=(q_sizes, k_sizes)):
              the GPU-planned request (template cached per shape; wall
              clock with a synchronise, median) -- the path this work adds
  (and, for the template the request used: its planning kernels alone and
  attention with its plan alone, CUDA events)
  req-host    a host-planned request as attention() did before: a fresh
              tessera.Plan from the CUDA mask (download, selection, plan,
              upload), then run (wall clock with a synchronise, median)
  cudnn       dense SDPA with the cuDNN backend (CUDA events)
The GPU-planned output is checked against the host-planned one first.
"""
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import tessera  # noqa: E402


def events(fn, iters=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def wall(fn, iters=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    cdir = sys.argv[1]
    man = json.load(open(os.path.join(cdir, "manifest.json")))
    idx = [int(x) for x in sys.argv[2:]] or [i for i, e in enumerate(man["entries"])
                                              if e["split"] == "eval" and e["geometry"]["kind"] == "variable"]
    ctx = tessera.Context()
    print(f"card {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    print(f"{'mask':44s} {'dens':>5s} {'exec':>7s} {'req-gpu':>8s} {'req-host':>9s} {'cudnn':>7s} "
          f"{'gpu/exec':>8s} {'rel err':>8s}  (ms)", flush=True)
    rows = []
    for i in idx:
        e = man["entries"][i]
        geo = e["geometry"]
        qs, ks = ([int(x) for x in np.load(os.path.join(cdir, geo[f])).tolist()] for f in ("q_sizes", "k_sizes"))
        H, S, D = e["heads_q"], e["seq_q"], e["head_dim"]
        mb = torch.from_numpy(np.load(os.path.join(cdir, e["file"])).astype(np.bool_)).cuda().contiguous()
        g = torch.Generator(device="cuda").manual_seed(1)
        q, k, v = (torch.randn(1, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        qsz = torch.tensor(qs, device="cuda")
        ksz = torch.tensor(ks, device="cuda")
        dens = float((mb.float() * qsz[None, :, None] * ksz[None, None, :]).sum()) / (H * S * S)
        block = (qs, ks)
        plan = tessera.Plan(ctx, mb, 1, H, H, S, S, D, block=block, dtype=q.dtype)
        ref = torch.full_like(q, float("nan"))
        plan.run(q, k, v, out=ref)
        t_exec = events(lambda: plan.run(q, k, v, out=ref))
        out = torch.full_like(q, float("nan"))
        tessera.attention(q, k, v, mb, block=block, context=ctx, out=out)
        torch.cuda.synchronize()
        err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
        t_gpu = wall(lambda: tessera.attention(q, k, v, mb, block=block, context=ctx, out=out))
        t_gpu_ev = events(lambda: tessera.attention(q, k, v, mb, block=block, context=ctx, out=out))
        sel = tessera.last_selection()
        # The template the request path used: its planning kernels alone,
        # and attention with its plan alone (CUDA events).
        tp = [t for key, t in ctx._gpuplans.items() if key[6] == tessera._block_key(block)][0]
        gp = tp.cur
        t_gplan = events(lambda: gp.plan(mb))
        gp.plan(mb)
        t_grun = events(lambda: gp.run(q, k, v, out=out))
        summ = gp.summary()

        def host_request():
            p = tessera.Plan(ctx, mb, 1, H, H, S, S, D, block=block, dtype=q.dtype)
            p.run(q, k, v, out=out)
            return p
        t_host = wall(host_request, iters=10)
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                t_dense = events(lambda: F.scaled_dot_product_attention(q, k, v))
        except Exception as ex:  # no cuDNN backend: the default one
            print("cudnn:", repr(ex)[:120])
            t_dense = events(lambda: F.scaled_dot_product_attention(q, k, v))
        name = f"{e['family']}#{i} h{H} var{len(qs)}x{len(ks)}"
        print(f"{name:44s} {dens:5.3f} {t_exec:7.3f} {t_gpu:8.3f} {t_host:9.3f} {t_dense:7.3f} "
              f"{t_gpu / t_exec:8.3f} {err:8.2g}", flush=True)
        print(f"  req-gpu between events {t_gpu_ev:.3f} ms; GPU template {summ['tile_m']}x{summ['tile_n']} "
              f"mapping {summ['mapping']} tasks {summ['tasks']}: planning kernels {t_gplan * 1e3:.1f} us, "
              f"attention with its plan {t_grun:.3f} ms; selected by {sel['selected_by']}: {sel['selection']}",
              flush=True)
        if not err < 2e-2:
            print(f"  FAIL: GPU-planned request differs from the host-planned run ({err:.3g})", flush=True)
        rows.append(dict(mask=name, density=dens, exec_ms=t_exec, req_gpu_ms=t_gpu, req_gpu_events_ms=t_gpu_ev,
                         req_host_ms=t_host, cudnn_ms=t_dense, gpu_plan_ms=t_gplan, gpu_run_ms=t_grun, rel_err=err, selected_by=sel["selected_by"],
                         selection=sel["selection"]))
        plan.close()
    out_dir = os.environ.get("OUT", "/tmp")
    with open(os.path.join(out_dir, "varplan_bench.json"), "w") as fh:
        json.dump(dict(card=torch.cuda.get_device_name(), rows=rows), fh, indent=1)


if __name__ == "__main__":
    main()
