"""python_op.py: the torch op tessera::attention, on CPU tensors here and on
CUDA tensors on the device (tests/device/torch_op.py runs it there with
--device cuda): the op is registered with its schema; torch.library.opcheck
passes (schema, fake kernel, AOT dispatch with dynamic shapes); the fake
kernel gives the shapes of out and lse for both layouts; attention() goes
through the op (a counting kernel sees the call); torch.compile(fullgraph=True,
inductor) traces and runs a small attention module whose mask is an input,
uniform and variable blocks, and its outputs equal eager's and the float64
reference's, for two different masks in a row (the mask is not baked in).
Fresh random inputs (the seed is printed; SEED= repeats one)."""
import argparse
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_ref as ref  # noqa: E402
import tessera  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cpu")
args = ap.parse_args()
dev = torch.device(args.device)
seed = int(os.environ.get("SEED") or random.SystemRandom().randrange(1 << 30))
print("python-op: seed", seed, "device", dev)
rng = random.Random(seed)
torch.manual_seed(seed)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


# ---- registration, schema, opcheck, fake shapes ---------------------------
op = torch.ops.tessera.attention
check(tessera._OP is op, "importing tessera after torch did not register the op")
schema = str(op.default._schema)
check(schema.startswith("tessera::attention(Tensor q, Tensor k, Tensor v, Tensor block_mask, bool variable,")
      and schema.endswith("-> (Tensor, Tensor)"), "schema: " + schema)
dt = torch.float32 if dev.type == "cpu" else torch.bfloat16
# Normwise bounds over the float64 reference: the CPU executor's float32
# arithmetic; on the GPU, bf16 kernels' tolerance of tests/gpu_plan (1e-2),
# lse in float32 there.
TOL, LSE_TOL = (1e-5, 1e-5) if dt == torch.float32 else (1e-2, 1e-3)
B, H, S, D = 1, 2, 192, 64
q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=dt) for _ in range(3))
m = (torch.rand(H, 3, 3, device=dev) < 0.7)
res = torch.library.opcheck(op.default, (q, k, v, m, False, [64], [64], "bhsd", None, True, True))
check(all(x == "SUCCESS" for x in res.values()), "opcheck: %s" % res)
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
with FakeTensorMode() as mode:
    for layout, shape in (("bhsd", (2, 6, 300, 128)), ("bshd", (2, 300, 6, 128))):
        fq = torch.empty(shape, dtype=dt, device=dev)
        fk = torch.empty(shape[:1] + (shape[1] // 3 if layout == "bhsd" else 300,
                                      300 if layout == "bhsd" else 2) + shape[3:], dtype=dt, device=dev)
        for want_lse in (True, False):
            o, lse = op(fq, fk, fk, torch.empty(6, 3, 3, dtype=torch.bool, device=dev), False, [128], [128],
                        layout, None, True, want_lse)
            check(tuple(o.shape) == shape and o.dtype == dt and o.stride() == fq.stride(),
                  "fake out %s %s" % (layout, tuple(o.shape)))
            check(tuple(lse.shape) == ((2, 6, 300) if want_lse else (0,)) and lse.dtype == torch.float32,
                  "fake lse %s %s" % (layout, tuple(lse.shape)))

# ---- attention() routes through the op -------------------------------------
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


class Seen(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


with Seen() as seen:
    o, lse = tessera.attention(q, k, v, m, block=(64, 64), return_lse=True)
check("tessera.attention.default" in seen.ops, "attention() did not go through the op: %s" % seen.ops)
with Seen() as seen:  # out= given: the direct path, as before the op
    tessera.attention(q, k, v, m, block=(64, 64), out=torch.empty_like(q))
check("tessera.attention.default" not in seen.ops, "attention(out=) went through the op")
want, wlse = ref.reference(q.cpu(), k.cpu(), v.cpu(), m.cpu(), (64, 64))
check(ref.rel_error(o.cpu(), want) <= TOL,
      "eager through the op: error %.3g" % ref.rel_error(o.cpu(), want))


# ---- torch.compile(fullgraph=True) of a module calling it ------------------
class Block(torch.nn.Module):
    """Self-attention of a DiT block: qkv projection, tessera attention in
    the [B, S, H, D] layout with lse, output projection."""

    def __init__(self, dim, heads, block):
        super().__init__()
        self.heads, self.block = heads, block
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x, mask):
        b, s, e = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, e // self.heads).unbind(2)
        o, lse = tessera.attention(q, k, v, mask, block=self.block, layout="bshd", return_lse=True)
        return self.proj(o.reshape(b, s, e)), lse


def compile_case(block, s, heads=4, dim=256):
    mod = Block(dim, heads, block).to(device=dev, dtype=dt).eval()
    comp = torch.compile(mod, fullgraph=True, backend="inductor")
    qs, ks = ref.block_sizes(block, s, s)
    name = "compile %s" % (("variable %dx%d" % (len(qs), len(ks))) if tessera._is_variable(block)
                           else str(block))
    for step in range(2):
        x = torch.randn(2, s, dim, device=dev, dtype=dt)
        mask = torch.rand(heads, len(qs), len(ks), device=dev) < rng.uniform(0.3, 0.8)
        mask[0, 0] = False  # an empty row
        with torch.no_grad():
            got, glse = comp(x, mask)
            want, wlse = mod(x, mask)
            q, k, v = mod.qkv(x).view(2, s, 3, heads, dim // heads).unbind(2)
            ro, rl = ref.reference(q.cpu(), k.cpu(), v.cpu(), mask.cpu(), block, "bshd")
            rout = mod.proj(ro.to(device=dev, dtype=dt).reshape(2, s, dim))
        e1 = ref.rel_error(got.cpu(), want.cpu())
        e2 = ref.rel_error(want.cpu(), rout.cpu())
        el = ref.rel_error(glse.cpu()[~torch.isinf(rl)], rl[~torch.isinf(rl)])
        check(e1 <= TOL and e2 <= TOL and el <= LSE_TOL and bool(torch.equal(glse.isinf().cpu(), rl.isinf())),
              "%s step %d: compiled vs eager %.3g, eager vs reference %.3g, lse %.3g" % (name, step, e1, e2, el))
        print("python-op: %s step %d: compiled vs eager %.2e, eager vs float64 %.2e, lse %.2e"
              % (name, step, e1, e2, el))


s = rng.randint(150, 400)
compile_case((64, 64), s)
cut = []
n = s
while n:
    cut.append(min(n, rng.randint(20, 120)))
    n -= cut[-1]
compile_case((cut, list(reversed(cut))), s)
# graph breaks would have raised under fullgraph=True; one more check that
# dynamo saw the op as one node of the graph:
expl = torch._dynamo.explain(lambda a, b, c, mm: tessera.attention(a, b, c, mm, block=(64, 64)))(q, k, v, m)
check(expl.graph_break_count == 0 and expl.graph_count == 1,
      "explain: %d graphs, %d breaks" % (expl.graph_count, expl.graph_break_count))

if failures:
    print("python-op: %d failure(s), seed %d" % (len(failures), seed))
    sys.exit(1)
print("python-op: ok")
