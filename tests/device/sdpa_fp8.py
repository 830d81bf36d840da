#!/usr/bin/env python3
"""tests/device/sdpa_fp8.py: does this PyTorch expose an FP8 SDPA (issue 18's "dense masks at or
above cuDNN's FP8 SDPA, if PyTorch exposes it")?  Calls scaled_dot_product_attention with
float8_e4m3fn q, k, v under each backend but math (cuDNN, flash, efficient) and prints, for each,
either the time and effective TFLOP/s (median of 10 calls) or the error it raised; bf16 on the
cuDNN backend alongside, same shape.

  python3 sdpa_fp8.py [S H D]   (default 32768 12 128)"""
import sys
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

S, H, D = (int(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else (32768, 12, 128)
print(f"torch {torch.__version__}, cuda {torch.version.cuda}, cudnn {torch.backends.cudnn.version()}, "
      f"{torch.cuda.get_device_name()}")
g = torch.Generator(device="cuda").manual_seed(7)
qb, kb, vb = (torch.randn(1, H, S, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
f8 = getattr(torch, "float8_e4m3fn", None)


def timed(fn):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(10):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1))
    return sorted(ts)[5]


def run(name, be, q, k, v):
    try:
        with sdpa_kernel(be):
            ms = timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))
        print(f"{name}: {ms:.3f} ms  {4 * S * S * H * D / ms / 1e9:.1f} TFLOP/s")
    except Exception as e:  # the answer when the backend has no FP8 path
        print(f"{name}: not available: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


run(f"bf16 cudnn S={S} H={H} D={D}", SDPBackend.CUDNN_ATTENTION, qb, kb, vb)
if f8 is None:
    print("fp8: this torch has no float8_e4m3fn")
else:
    q8, k8, v8 = (x.to(f8) for x in (qb, kb, vb))
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        run(f"fp8 e4m3 {name} S={S} H={H} D={D}", be, q8, k8, v8)
