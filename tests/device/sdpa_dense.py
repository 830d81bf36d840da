"""tests/device/sdpa_dense.py: dense SDPA (cuDNN and flash backends) on the same
card, the anchor the sm90 kernel's effective TFLOP/s are compared with.
Usage: python3 sdpa_dense.py S H D [bf16|fp16]"""
import sys, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
S, H, D = (int(a) for a in sys.argv[1:4])
dt = sys.argv[4] if len(sys.argv) > 4 else "bf16"
q, k, v = (torch.randn(1, H, S, D, device="cuda", dtype=torch.bfloat16 if dt == "bf16" else torch.float16)
           for _ in range(3))
for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
    with sdpa_kernel(be):
        for _ in range(3):
            torch.nn.functional.scaled_dot_product_attention(q, k, v)
        ts = []
        for _ in range(10):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            torch.nn.functional.scaled_dot_product_attention(q, k, v)
            e1.record()
            torch.cuda.synchronize()
            ts.append(e0.elapsed_time(e1))
        ms = sorted(ts)[5]
        print(f"dense sdpa {name} S={S} H={H} D={D} {dt}: {ms:.3f} ms  {4*S*S*H*D/ms/1e9:.1f} TFLOP/s")
