#!/usr/bin/env python3
"""gpu_python_leak.py: 1,000 calls of tessera.attention without a context
leave the process's memory flat, on both request paths; the GPU templates'
step times (what their hold compares) are known and plausible.

For a CUDA mask (GPU planning through the default context's cached
templates) and for a CPU mask (host planning, a plan per call released when
the stream passes it), with fresh random bf16 inputs and masks rotating
through 8 random patterns: 50 warm-up calls, then a snapshot, 1,000 calls, a
snapshot.  A snapshot synchronises, releases finished host plans, collects
garbage and empties PyTorch's cache, then reads

  - the resident set size (/proc/self/statm);
  - torch.cuda.memory_allocated() (live tensors);
  - the device's free memory (cudaMemGetInfo, via torch.cuda.mem_get_info):
    what libtessera allocates with the driver shows here only.

Fails (exit 1) when, over the 1,000 calls, the resident set grows by more
than RSS_BOUND, live tensors by more than ALLOC_BOUND, or device memory in
use by more than DEVICE_BOUND, or when more than one context or more than a
few templates were made.  A context or template leaked per call costs
megabytes each, 1,000 times over.  Also checks the outputs against dense
SDPA on the selected keys (one call of each path).  Exits 77 without torch
or a CUDA device.

    TESSERA_LIBRARY=build/.libs/libtessera.so TESSERA_BUNDLE=build/bundle \\
        PYTHONPATH=python python3 tests/gpu_python_leak.py
"""
import gc
import os
import sys

RSS_BOUND = 8 << 20      # bytes over 1,000 calls (8 KiB a call)
ALLOC_BOUND = 0          # live tensors: none may survive a call
DEVICE_BOUND = 4 << 20   # two driver allocation granules
CALLS, WARMUP = 1000, 50

try:
    import torch
except ImportError:
    print("gpu_python_leak: no PyTorch")
    sys.exit(77)
if not torch.cuda.is_available():
    print("gpu_python_leak: no CUDA device")
    sys.exit(77)
import tessera  # noqa: E402  (after the skips: it loads libtessera)

PAGE = os.sysconf("SC_PAGE_SIZE")


def snapshot():
    torch.cuda.synchronize()
    tessera._reap()
    gc.collect()
    torch.cuda.empty_cache()
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * PAGE
    free, _ = torch.cuda.mem_get_info()
    return rss, torch.cuda.memory_allocated(), free


def reference(q, k, v, mask, blk):
    """Dense SDPA in float32 over the selected keys (mask blocks expanded)."""
    tok = mask.to(q.device).repeat_interleave(blk, 1).repeat_interleave(blk, 2)
    tok = tok[:, :q.shape[2], :k.shape[2]]
    return torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), attn_mask=tok.unsqueeze(0))


def step_times(label, ctx, q, k, v, mask, blk):
    """The templates' step times the hold compares (CUDA events around some
    calls, _GpuTemplates.run, divided by the call's density): every template
    called twice or more has one, from a ring of at most four event pairs,
    and the current template's, times the density, is within 3x of its mean
    over 20 calls timed here (the masks' densities differ a little)."""
    (tp,) = ctx._gpuplans.values()
    torch.cuda.synchronize()
    ok = True
    for gp, calls in tp.calls.items():
        ms, ring = tp._step_ms(gp), len(tp.events.get(gp, ()))
        print(f"{label}: template {gp.summary()['variant']}: {calls} calls, step time {ms:.4f} ms a unit "
              f"of density, from {ring} event pairs")
        if (calls >= 2 and not ms > 0) or ring > tp._RING:
            print(f"FAIL: {label}: {calls} calls, step time {ms} ms, {ring} event pairs")
            ok = False
    gp = tp.cur
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        gp(q, k, v, mask, out=None)
    end.record()
    torch.cuda.synchronize()
    mean, ms = start.elapsed_time(end) / 20, tp._step_ms(gp) * gp._stats().density
    print(f"{label}: the current template's step time {ms:.4f} ms, its mean over 20 calls {mean:.4f} ms")
    if not mean / 3 <= ms <= 3 * mean:
        print(f"FAIL: {label}: step time {ms} ms against a mean of {mean} ms")
        ok = False
    return ok


def run(label, on_gpu):
    g = torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))
    heads, seq, d, blk = 4, 2048, 128, 128
    nb = seq // blk
    shape = (1, heads, seq, d)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    masks = []
    for _ in range(8):
        m = torch.rand((heads, nb, nb), device="cuda", generator=g) < 0.3
        m |= torch.eye(nb, dtype=torch.bool, device="cuda")  # no empty rows
        masks.append(m if on_gpu else m.cpu())
    o = tessera.attention(q, k, v, masks[0], block=(blk, blk))
    torch.cuda.synchronize()
    want = reference(q, k, v, masks[0], blk)
    err = ((o.float() - want).norm() / want.norm()).item()
    ok = err < 2e-2
    print(f"{label}: relative error vs dense SDPA on the selected keys {err:.2e}"
          f"{'' if ok else ' (over 2e-2)'}")
    del o, want
    for i in range(WARMUP):
        tessera.attention(q, k, v, masks[i % 8], block=(blk, blk))
    before = snapshot()
    for i in range(CALLS):
        tessera.attention(q, k, v, masks[i % 8], block=(blk, blk))
    after = snapshot()
    rss, alloc, used = after[0] - before[0], after[1] - before[1], before[2] - after[2]
    ctx = tessera.default_context(q.device.index)
    print(f"{label}: over {CALLS} calls resident set {rss / 1024:+.0f} KiB (bound "
          f"{RSS_BOUND >> 10} KiB), live tensors {alloc:+d} B (bound {ALLOC_BOUND}), device "
          f"memory in use {used / 1024:+.0f} KiB (bound {DEVICE_BOUND >> 10} KiB); "
          f"{len(tessera._contexts)} context(s), {len(ctx._gpuplans)} template set(s)")
    for what, grew, bound in (("resident set", rss, RSS_BOUND), ("live tensors", alloc, ALLOC_BOUND),
                              ("device memory", used, DEVICE_BOUND)):
        if grew > bound:
            print(f"FAIL: {label}: {what} grew by {grew} bytes over {CALLS} calls (bound {bound})")
            ok = False
    if on_gpu and not step_times(label, ctx, q, k, v, masks[0], blk):
        ok = False
    if len(tessera._contexts) != 1 or len(ctx._gpuplans) > 1:
        print(f"FAIL: {label}: {len(tessera._contexts)} contexts, {len(ctx._gpuplans)} template "
              "sets (expected one of each at most)")
        ok = False
    return ok


ok = run("CUDA mask (GPU planning)", True)
ok = run("CPU mask (host planning)", False) and ok
print("gpu_python_leak: " + ("ok" if ok else "FAILED"))
sys.exit(0 if ok else 1)
