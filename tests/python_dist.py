"""tests/python_dist.py WORLD [SEED]: tessera.distributed on WORLD CPU
processes (gloo), CPU tensors through the CPU plan executor.

Every rank draws the same fresh random inputs and masks (the seed), runs
Ulysses, ring and hybrid attention on its chunk, and compares its chunk of
the output and lse with single-process tessera.attention on the whole
sequence (1e-5, max-norm relative for out, absolute for finite lse, -inf
in the same places) and with a float64 torch reference (1e-4: the
executor computes in float32).  Outputs are poisoned with NaN first.
Cases: ragged chunks, block geometries (uniform and variable) whose blocks
straddle chunk boundaries, GQA (whole groups per rank, key heads shared by
ranks, groups cut by the split: repeated key heads), masks with empty
chunk pairs -- each rank checks its count of Tessera launches (a counter
around tessera.attention) and of key/value chunks sent and received
against the pairs that select anything, computed here at token level --
and query chunks whose every hop is empty.  diffusers' ParallelConfig through
attention_parallel_config, and bad inputs refused with one-line errors.  Precomputed hop tables and
hops="all" (no skip) give the same outputs.  chunked_attention (the ring's
merge in one process) is checked against the whole too.  Exit 0 when all
pass, 1 on a mismatch (the message names case, rank and error).
TSR_DIST_VERBOSE=1 prints each case as a rank starts it (to find a hang)."""
import os
import random
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tessera
import tessera.distributed as td
from python_ref import block_sizes, reference, rel_error as rel, token_mask

TOL, TOL64 = 1e-5, 1e-4


# ---- inputs and references ---------------------------------------------------

def check_lse(got, want, tol, what):
    inf_g, inf_w = torch.isneginf(got), torch.isneginf(want)
    assert torch.equal(inf_g, inf_w), f"{what}: lse -inf in other places ({inf_g.sum()} vs {inf_w.sum()})"
    assert not torch.isnan(got).any(), f"{what}: NaN in lse"
    fin = ~inf_w
    if fin.any():
        err = (got[fin].double() - want[fin].double()).abs().max().item()
        assert err <= tol, f"{what}: lse differs by {err:.3g} > {tol}"


def ragged_chunks(rng, seq, n):
    """n positive, unequal chunk sizes adding up to seq."""
    cuts = sorted(rng.sample(range(1, seq), n - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [seq])]


def variable_sizes(rng, seq, lo, hi):
    out = []
    while sum(out) < seq:
        out.append(min(rng.randint(lo, hi), seq - sum(out)))
    return out


def blank_pairs(m4, qs, ks, bounds, pairs):
    """Clears every block touching a (query chunk, key chunk) pair of pairs."""
    qst, kst = [0], [0]
    for x in qs:
        qst.append(qst[-1] + x)
    for x in ks:
        kst.append(kst[-1] + x)
    for i, j in pairs:
        rows = [b for b in range(len(qs)) if qst[b] < bounds[i + 1] and qst[b + 1] > bounds[i]]
        cols = [b for b in range(len(ks)) if kst[b] < bounds[j + 1] and kst[b + 1] > bounds[j]]
        m4[:, :, rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1] = False


def nonempty_pairs(tm, bounds, heads=None):
    """[n, n] bool from the token mask: pairs with a selected token pair."""
    t = tm if heads is None else tm[:, heads]
    t = t.any(0).any(0)
    n = len(bounds) - 1
    return [[bool(t[bounds[i]:bounds[i + 1], bounds[j]:bounds[j + 1]].any()) for j in range(n)]
            for i in range(n)]


# ---- the cases -----------------------------------------------------------------

class Case:
    """One random problem; identical on every rank (seeded by name)."""

    def __init__(self, seed, name, world, u, r, hq, hkv, block_kind, layout="bhsd", batch=1,
                 mask_heads=None, blank=0, dead_row=False, hops=None, equal=False):
        rng = random.Random(f"{seed}:{name}")
        gen = torch.Generator().manual_seed(rng.randrange(1 << 62))
        self.name, self.u, self.r, self.layout, self.hops = name, u, r, layout, hops
        seq = rng.randint(40, 90) * world
        self.chunks = [seq // world] * world if equal else ragged_chunks(rng, seq, world)
        if block_kind == "uniform":
            # sizes that do not divide the chunks: blocks straddle boundaries
            self.block = (rng.choice([16, 24, 32, 40]), rng.choice([16, 24, 48]))
        else:
            self.block = (tuple(variable_sizes(rng, seq, 5, 70)), tuple(variable_sizes(rng, seq, 5, 70)))
        qs, ks = block_sizes(self.block, seq, seq)
        self.d = 64
        self.scale = rng.uniform(0.05, 0.2)
        mh = mask_heads or hq
        m4 = torch.rand((batch, mh, len(qs), len(ks)), generator=gen) < rng.uniform(0.25, 0.6)
        ring_bounds = [0]
        for g in range(r):
            ring_bounds.append(ring_bounds[-1] + sum(self.chunks[g * u:(g + 1) * u]))
        pairs = [(i, j) for i in range(r) for j in range(r)]
        rng.shuffle(pairs)
        blank_pairs(m4, qs, ks, ring_bounds, pairs[:blank])
        if dead_row:  # one ring chunk's queries select nothing at all
            blank_pairs(m4, qs, ks, ring_bounds, [(r - 1, j) for j in range(r)])
        self.mask = m4 if batch > 1 or rng.random() < 0.5 else m4[0]
        self.m4, self.ring_bounds = m4, ring_bounds
        self.tm = token_mask(m4, self.block, batch, hq, seq, seq)
        shape = lambda h: (batch, h, seq, self.d)
        self.q, self.k, self.v = (torch.randn(shape(h), generator=gen) for h in (hq, hkv, hkv))
        self.hq = hq

    def view(self, t):
        """t [B, H, S, D] in the case's layout."""
        return t if self.layout == "bhsd" else t.transpose(1, 2).contiguous()

    def reference(self):
        """(single-process tessera.attention, float64 reference) on the whole."""
        lse = torch.full(self.q.shape[:3], float("nan"))
        out = tessera.attention(self.q, self.k, self.v, self.mask, block=self.block, scale=self.scale,
                                lse=lse)
        o64, l64 = reference(self.q, self.k, self.v, self.mask, self.block, scale=self.scale)
        return (out, lse), (o64, l64)


def expect(case, g, u):
    """(launches, sent, received) this rank (ring index g, Ulysses index u)
    must make, from the token-level mask."""
    if case.r == 1:
        return 1, 0, 0
    hp = case.hq // case.u
    ne = nonempty_pairs(case.tm, case.ring_bounds, list(range(u * hp, (u + 1) * hp)))
    r = case.r
    launches = sum(ne[g][j] for j in range(r))
    received = sum(ne[g][j] for j in range(r) if j != g)
    sent = sum(ne[i][g] for i in range(r) if i != g)
    return launches, sent, received


def counting(fn):
    def wrapper(*a, **kw):
        wrapper.calls += 1
        return fn(*a, **kw)
    wrapper.calls = 0
    return wrapper


def run_case(case, rank, world, ref, group, config=None):
    (out_t, lse_t), (o64, l64) = ref
    g, u = divmod(rank, case.u)
    a, b = sum(case.chunks[:rank]), sum(case.chunks[:rank + 1])
    q, k, v = (case.view(t[:, :, a:b].contiguous()) for t in (case.q, case.k, case.v))
    out = torch.full_like(q, float("nan"))
    lse = torch.full((q.shape[0], case.hq, b - a), float("nan"))
    hops = case.hops
    if hops == "table":
        hops = td.hop_table(case.mask, case.block, sum(case.chunks), case.chunks, case.u, case.r)
    base = tessera.attention
    tessera.attention = counter = counting(base)
    try:
        if config is not None:  # as the diffusers wiring calls it: equal chunks, bshd
            got = td.attention_parallel_config(q, k, v, case.mask, config, block=case.block,
                                               scale=case.scale, out=out, lse=lse, hops=hops)
        else:
            got = td.attention(q, k, v, case.mask, block=case.block, layout=case.layout,
                               scale=case.scale, out=out, lse=lse, group=group,
                               ulysses_degree=case.u, ring_degree=case.r, chunks=case.chunks,
                               hops=hops)
    finally:
        tessera.attention = base
    what = f"{case.name} rank {rank}/{world} (U={case.u} R={case.r})"
    assert got is out, f"{what}: out= not returned"
    o = got if case.layout == "bhsd" else got.transpose(1, 2)
    assert not torch.isnan(o).any(), f"{what}: NaN left in the output (not every row written)"
    e = rel(o, out_t[:, :, a:b])
    assert e <= TOL, f"{what}: output differs from single-process tessera.attention by {e:.3g}"
    e64 = rel(o, o64[:, :, a:b])
    assert e64 <= TOL64, f"{what}: output differs from the float64 reference by {e64:.3g}"
    check_lse(lse, lse_t[:, :, a:b], TOL, what + " vs tessera")
    check_lse(lse, l64[:, :, a:b], TOL64, what + " vs float64")
    st = td.last_stats()
    want = expect(case, g, u) if case.hops != "all" else (case.r if case.r > 1 else 1, None, None)
    assert counter.calls == want[0] == st["launched"], \
        f"{what}: {counter.calls} launches (stats {st['launched']}), expected {want[0]}"
    if case.hops != "all":
        assert (st["sent"], st["received"]) == want[1:], \
            f"{what}: sent/received {st['sent']}/{st['received']}, expected {want[1]}/{want[2]}"
        assert st["skipped"] == (case.r - want[0] if case.r > 1 else 0), f"{what}: stats {st}"
    return st


def chunked_case(case):
    """chunked_attention over the case's ring chunks against the whole."""
    (out_t, lse_t), (o64, l64) = case.reference()
    q, k, v = (case.view(t) for t in (case.q, case.k, case.v))
    out = torch.full_like(q, float("nan"))
    lse = torch.full(case.q.shape[:3], float("nan"))
    base = tessera.attention
    tessera.attention = counter = counting(base)
    try:
        got = td.chunked_attention(q, k, v, case.mask, block=case.block, layout=case.layout,
                                   chunks=[case.ring_bounds[i + 1] - case.ring_bounds[i]
                                           for i in range(case.r)],
                                   scale=case.scale, out=out, lse=lse)
    finally:
        tessera.attention = base
    assert got is out, f"chunked {case.name}: out= not returned"
    out = out if case.layout == "bhsd" else out.transpose(1, 2)
    ne = nonempty_pairs(case.tm, case.ring_bounds)
    want = sum(map(sum, ne))
    assert counter.calls == want, f"chunked {case.name}: {counter.calls} launches, expected {want}"
    assert rel(out, out_t) <= TOL and rel(out, o64) <= TOL64, \
        f"chunked {case.name}: output off by {rel(out, out_t):.3g} / {rel(out, o64):.3g}"
    check_lse(lse, lse_t, TOL, f"chunked {case.name}")


def cases(seed, world):
    """(name, kwargs) for this world size."""
    p = world
    out = [
        ("ulysses-gqa", dict(u=p, r=1, hq=2 * p, hkv=p, block_kind="uniform", layout="bshd", batch=2)),
        ("ulysses-mqa", dict(u=p, r=1, hq=p, hkv=1, block_kind="variable")),
        ("ulysses-cut-groups", dict(u=p, r=1, hq=3 * p, hkv=3 * p // 2, block_kind="uniform")),
        ("ring-full", dict(u=1, r=p, hq=4, hkv=2, block_kind="uniform")),
        ("ring-uniform", dict(u=1, r=p, hq=4, hkv=2, block_kind="uniform", blank=p - 1)),
        ("ring-variable", dict(u=1, r=p, hq=2, hkv=1, block_kind="variable", layout="bshd", blank=p - 1,
                               dead_row=True)),
        ("ring-one-plane", dict(u=1, r=p, hq=4, hkv=4, block_kind="variable", mask_heads=1, blank=p - 1,
                                batch=2)),
        ("ring-table", dict(u=1, r=p, hq=2, hkv=2, block_kind="uniform", blank=p - 1, hops="table")),
        ("ring-all", dict(u=1, r=p, hq=2, hkv=1, block_kind="variable", blank=p - 1, hops="all")),
    ]
    if p >= 4:
        out += [
            ("hybrid-variable", dict(u=2, r=p // 2, hq=4, hkv=2, block_kind="variable", blank=2,
                                     dead_row=True)),
            ("hybrid-uniform-mqa", dict(u=2, r=p // 2, hq=2, hkv=1, block_kind="uniform", layout="bshd",
                                        blank=1, hops="table")),
            ("hybrid-ring-major", dict(u=p // 2, r=2, hq=p, hkv=p // 2, block_kind="variable", blank=1)),
        ]
    return [Case(seed, n, world, **kw) for n, kw in out]


def chunked_cases(seed):
    """One-process ring runs over 3 and 5 chunks (chunked_attention)."""
    return [Case(seed, "chunked-uniform", 3, u=1, r=3, hq=4, hkv=2, block_kind="uniform", blank=2),
            Case(seed, "chunked-variable", 5, u=1, r=5, hq=2, hkv=1, block_kind="variable", blank=6,
                 layout="bshd", dead_row=True),
            Case(seed, "chunked-full", 5, u=1, r=5, hq=2, hkv=2, block_kind="variable")]


def bad_inputs(world):
    """Calls every rank makes alike, refused before any message with a
    ValueError naming the value (a check only one rank fails would leave
    the others waiting: these fail on all)."""
    s, hq = 48 * world, 2 * world
    q = torch.randn(1, hq, 48, 64)
    kv = torch.randn(1, 2, 48, 64)
    mask = torch.ones(hq, 3 * world, 3 * world, dtype=torch.bool)
    calls = [
        (dict(ulysses_degree=world + 1), f"ulysses_degree {world + 1}"),
        (dict(ulysses_degree=world, q=torch.randn(1, hq + 1, 48, 64)), "do not split"),
        (dict(ring_degree=world, chunks=[47] * world), "this rank's chunk has 48 tokens"),
        (dict(ring_degree=world, chunks=[48] * (world + 1)), f"{world + 1} chunk sizes"),
        (dict(ring_degree=world, hops="some"), "'some'"),
        (dict(ring_degree=world, hops=torch.ones(world + 1, world + 1)), "hop table has shape"),
        (dict(ring_degree=world, block_mask=mask[:, :-1]), "block mask must be"),
        (dict(ulysses_degree=world, layout="sbhd"), "unknown layout 'sbhd'"),
        (dict(ring_degree=world, block=([16] * (s // 16 + 1), [16] * (s // 16))), "add up to"),
    ]
    for kw, words in calls:
        args = dict(q=q, k=kv, v=kv, block_mask=mask, block=(16, 16))
        args.update(kw)
        try:
            td.attention(**args)
        except ValueError as e:
            assert words in str(e) and "\n" not in str(e), f"bad input {kw}: said '{e}'"
        else:
            raise AssertionError(f"bad input {kw} accepted")


def diffusers_config(rank, world):
    """diffusers' ParallelConfig over a ("ring", "ulysses") CPU mesh, ring
    degree 2 (hybrid with 4 ranks), set up as enable_parallelism does;
    None (the case is skipped, said once) without diffusers."""
    try:
        from diffusers.models._modeling_parallel import ContextParallelConfig, ParallelConfig
    except ImportError:
        if rank == 0:
            print("python_dist: diffusers not installed, its parallel_config case skipped")
        return None
    from torch.distributed.device_mesh import init_device_mesh
    cp = ContextParallelConfig(ring_degree=2, ulysses_degree=world // 2)
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("ring", "ulysses"))
    cp.setup(rank, world, torch.device("cpu"), mesh)
    return ParallelConfig(context_parallel_config=cp)


def worker(rank, world, seed, init, failures):
    import datetime
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    torch.set_num_threads(1)
    ok = True
    for case in cases(seed, world):
        if os.environ.get("TSR_DIST_VERBOSE"):
            print(f"rank {rank}: {case.name}", flush=True)
        try:
            run_case(case, rank, world, case.reference(), None)
        except Exception:
            ok = False
            msg = f"{case.name} rank {rank}: {traceback.format_exc()}"
            print("FAIL", msg, file=sys.stderr, flush=True)
            failures.put(msg)
        dist.barrier()
    try:
        bad_inputs(world)
    except Exception:
        ok = False
        failures.put(f"bad inputs rank {rank}: {traceback.format_exc()}")
    config = diffusers_config(rank, world)
    if config is not None:
        case = Case(seed, "diffusers-config", world, u=world // 2, r=2, hq=2 * world, hkv=world,
                    block_kind="variable", layout="bshd", equal=True, blank=1)
        try:
            run_case(case, rank, world, case.reference(), None, config)
        except Exception:
            ok = False
            failures.put(f"{case.name} rank {rank}: {traceback.format_exc()}")
    if rank == 0:
        for case in chunked_cases(seed):
            try:
                chunked_case(case)
            except Exception:
                ok = False
                failures.put(f"chunked {case.name}: {traceback.format_exc()}")
    dist.destroy_process_group()
    tessera.default_context(tessera.NO_DEVICE).close()  # not left to interpreter shutdown
    if not ok:
        sys.exit(1)


def main():
    world = int(sys.argv[1])
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else random.randrange(1 << 30)
    print(f"python_dist: world {world}, seed {seed}", flush=True)
    ctx = mp.get_context("spawn")
    failures = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init = "file://" + os.path.join(tmp, "store")
        try:
            mp.start_processes(worker, args=(world, seed, init, failures), nprocs=world,
                               start_method="spawn")
        except Exception as e:  # a rank that died (its failures are queued or printed)
            print(f"python_dist: {e}", file=sys.stderr)
            failures.put(f"a rank failed: {str(e).strip().splitlines()[-1] if str(e).strip() else e}")
    bad = []
    while not failures.empty():
        bad.append(failures.get())
    for b in bad:
        print("FAIL", b, file=sys.stderr)
    n = len(cases(seed, world))
    print(f"python_dist: world {world}: {n} cases x {world} ranks, "
          f"{'FAILED' if bad else 'all equal'} (seed {seed})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
