"""bench_timing.py: scripts/bench_timing.py (the interleaved timing of
scripts/bench-peers, tests/device/split_ab.py and dyn_ab.py) under a fake clock, and
bench-peers' gpu/host ratio and tables on made-up rows; no GPU, no real
timings (every figure below is the fake clock's, so the checks are exact).
SEED= repeats a run."""
import argparse
import importlib.machinery
import importlib.util
import os
import random
import statistics
import subprocess
import sys

SRC = os.environ.get("TSR_TOP_SRCDIR", ".")
sys.path.insert(0, os.path.join(SRC, "scripts"))
import bench_timing as bt  # noqa: E402

seed = int(os.environ.get("SEED", random.randrange(1 << 31)))
rng = random.Random(seed)
fails = 0


def expect(ok, what):
    global fails
    if not ok:
        fails += 1
        print(f"FAIL (SEED={seed}): {what}")


class Fake:
    """A device whose clock advances only by the calls: timer and clock both."""

    def __init__(self):
        self.now = 0.0  # ms
        self.log = []
        self.marks = 0

    def mark(self):
        self.marks += 1
        return self.now

    def sync(self):
        pass

    @staticmethod
    def elapsed_ms(a, b):
        return b - a

    def clock(self):
        return self.now / 1e3

    def system(self, name, cost):
        """cost(round_call_index) -> ms of one call."""
        count = [0]

        def fn():
            self.log.append(name)
            self.now += cost(count[0])
            count[0] += 1
        return fn


def close(a, b, tol=1e-9):
    return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


# quantile against statistics (inclusive method = linear interpolation)
for _ in range(50):
    xs = [rng.uniform(0, 10) for _ in range(rng.randint(2, 30))]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    expect(close(bt.quantile(xs, .25), q[0]) and close(bt.quantile(xs, .75), q[2]), f"quartiles of {xs}")
    expect(close(bt.quantile(xs, .5), statistics.median(xs)), f"median of {xs}")
expect(bt.quantile([3.0], .5) == 3.0, "quantile of one value")

# calls a round
expect(bt.calls_per_round(1.0, 30) == 30, "30 calls of 1 ms in a 30 ms round")
expect(bt.calls_per_round(180.0, 30) == 1, "one call when a call is longer than a round")
expect(bt.calls_per_round(0.0, 30) == 1000 and bt.calls_per_round(0.001, 30) == 1000, "capped at 1000")
expect(bt.calls_per_round(5.0, 0) == 1, "round_ms 0: one call a round")

# constant costs: exact medians, warm-up by duration, interleaved order
for _ in range(20):
    f = Fake()
    names = [f"s{i}" for i in range(rng.randint(1, 5))]
    cost = {n: rng.choice([0.375, 1.125, 2.5, 7.25, 45.0, 180.0]) for n in names}  # exact in binary
    # warm-ups: no exact multiple of a cost (the fake clock's seconds are not exact)
    rounds, warmup, rms = rng.randint(1, 15), rng.choice([0, 50.3, 100.7, 250.1]), rng.choice([0, 10, 30])
    settle = rng.choice([0, 0, 20.3, 60.7])
    res = bt.interleaved([(n, f.system(n, lambda i, c=cost[n]: c)) for n in names], rounds, warmup, rms, f,
                         clock=f.clock, settle_ms=settle)
    for n in names:
        r = res[n]
        want_n = bt.calls_per_round(cost[n], rms)
        want_s = bt.calls_per_round(cost[n], settle) if settle else 0
        warm_calls = max(1, int(-(-warmup // cost[n])))
        expect(r["calls_per_round"] == want_n, f"{n}: {r['calls_per_round']} calls a round, want {want_n}")
        expect(r["settle_calls"] == want_s, f"{n}: {r['settle_calls']} settle calls, want {want_s}")
        expect("joules" not in r, f"{n}: energy without a power meter")
        expect(close(r["ms"], cost[n]) and close(r["ms_min"], cost[n]) and close(r["ms_max"], cost[n]),
               f"{n}: median {r['ms']} for a constant {cost[n]} ms")
        expect(len(r["rounds_ms"]) == rounds and close(r["spread"], 0.0, 1e-9), f"{n}: rounds {r['rounds_ms']}")
        expect(close(r["warmup_call_ms"], cost[n]), f"{n}: warm-up mean {r['warmup_call_ms']}")
        expect(f.log.count(n) == warm_calls + rounds * (want_s + want_n),
               f"{n}: {f.log.count(n)} calls, want {warm_calls} warm-up + {rounds} x ({want_s} + {want_n})")
    # after the warm-ups, the log is the rounds: each system's settle and N calls in turn, A B C A B C
    tail = f.log[sum(max(1, int(-(-warmup // cost[n]))) for n in names):]
    want = [n for _ in range(rounds) for n in names
            for _ in range(res[n]["settle_calls"] + res[n]["calls_per_round"])]
    expect(tail == want, f"interleaving: {tail[:12]}... want {want[:12]}...")

# a slowdown common to a round (clocks) moves every system's rounds, not the per-round ratio
f = Fake()
slow = {3: 1.125, 7: 0.875}  # round -> factor; two marks a system a round, two systems


def drifting(base):
    return lambda i: base * slow.get(f.marks // 4, 1.0)


res = bt.interleaved([("a", f.system("a", drifting(1.25))), ("b", f.system("b", drifting(1.0)))], 9, 100, 30, f,
                     clock=f.clock)
r = bt.ratio(res["a"], res["b"])
expect(close(r["ratio"], 1.25) and close(r["round_min"], 1.25) and close(r["round_max"], 1.25),
       f"ratio under a common drift: {r}")
expect(close(res["a"]["ms_max"], 1.25 * 1.125) and close(res["a"]["ms_min"], 1.25 * .875)
       and close(res["a"]["ms"], 1.25), f"a's rounds under the drift: {res['a']['rounds_ms']}")
expect(close(res["a"]["spread"], .25), f"spread {res['a']['spread']}")


class Governor(Fake):
    """A device at its power cap: a call's time is its cycles over the
    clock, and the clock moves a fraction of the way to the calling
    system's own steady clock with every call (the controller's lag), so a
    round inherits the clock the previous system's calls set."""

    def __init__(self):
        super().__init__()
        self.mhz = 1500.0
        self.mj = 0.0

    def powered(self, name, kcycles, steady_mhz, watts):
        def fn():
            self.log.append(name)
            t = kcycles / self.mhz
            self.now += t
            self.mj += watts * t
            self.mhz += (steady_mhz - self.mhz) * 0.2
        return fn

    # the power meter's side
    def energy_mj(self):
        return self.mj

    def sm_mhz(self):
        return self.mhz


# settle: each system timed at its own clock (a: 1500 MHz, b: 1700), not at the one the other left
for settle, worst in ((0.0, None), (240.0, .005)):
    g = Governor()
    sy = [("a", g.powered("a", 1500.0, 1500.0, 700.0)), ("b", g.powered("b", 1530.0, 1700.0, 650.0))]
    res = bt.interleaved(sy, 7, 50, 6, g, clock=g.clock, settle_ms=settle, power=g)
    ea, eb = abs(res["a"]["ms"] / 1.0 - 1), abs(res["b"]["ms"] / 0.9 - 1)
    if worst is None:
        expect(ea > .03 and eb > .03, f"no settle: a {res['a']['ms']}, b {res['b']['ms']} should be off steady")
        expect("joules" not in res["a"], "energy read over a window under POWER_MIN_MS")
    else:
        expect(ea < worst and eb < worst, f"settle {settle}: a {res['a']['ms']} (1.0), b {res['b']['ms']} (0.9)")
        expect(abs(res["a"]["watts"] - 700) < 1e-6 and abs(res["b"]["watts"] - 650) < 1e-6,
               f"watts {res['a']['watts']}, {res['b']['watts']}")
        expect(abs(res["a"]["joules"] - 0.7) < .005 and abs(res["b"]["joules"] - .65 * .9) < .005,
               f"joules a call {res['a']['joules']}, {res['b']['joules']}")
        expect(abs(res["b"]["sm_mhz"] - 1700) < 10 and len(res["b"]["rounds_sm_mhz"]) == 7,
               f"sm_mhz {res['b']['sm_mhz']}")
# max_calls: a capped system makes at most its cap of calls (warm-up a fifth
# of it, each round at least one timed call), the others what the durations ask
for _ in range(20):
    f = Fake()
    rounds, cap = rng.randint(1, 11), rng.randint(1, 400)
    cost = rng.choice([0.375, 1.125, 2.5])
    res = bt.interleaved([("a", f.system("a", lambda i: cost)), ("b", f.system("b", lambda i: cost))], rounds,
                         100.7, 30, f, clock=f.clock, settle_ms=250.1, max_calls={"a": cap, "zz": 3})
    made = f.log.count("a")
    want_b = max(1, int(-(-100.7 // cost))) + rounds * (bt.calls_per_round(cost, 250.1) + bt.calls_per_round(cost, 30))
    expect(made <= max(cap, max(1, cap // 5) + rounds), f"cap {cap}, {rounds} rounds: {made} calls")
    expect(res["a"]["calls_per_round"] >= 1 and res["a"]["call_cap"] == cap and close(res["a"]["ms"], cost),
           f"cap {cap}: {res['a']}")
    expect(res["a"]["calls_per_round"] + res["a"]["settle_calls"] ==
           min(bt.calls_per_round(cost, 30) + bt.calls_per_round(cost, 250.1),
               max(1, (cap - min(max(1, cap // 5), max(1, int(-(-100.7 // cost))))) // rounds)),
           f"cap {cap}, {rounds} rounds: {res['a']['calls_per_round']} + {res['a']['settle_calls']} a round")
    expect(f.log.count("b") == want_b and "call_cap" not in res["b"], f"uncapped b: {f.log.count('b')} calls")

# a capped system's rounds too short for the energy counter: no energy for it, the others keep theirs
g = Governor()
sy = [("a", g.powered("a", 1500.0, 1500.0, 700.0)), ("b", g.powered("b", 1530.0, 1700.0, 650.0))]
res = bt.interleaved(sy, 7, 50, 6, g, clock=g.clock, settle_ms=240.0, power=g, max_calls={"b": 60})
expect("joules" not in res["b"] and "watts" not in res["b"] and g.log.count("b") <= 60,
       f"capped b: {g.log.count('b')} calls, {res['b'].get('watts')} W")
expect(abs(res["a"]["watts"] - 700) < 1e-6, f"uncapped a beside a capped b: {res['a'].get('watts')} W")

try:
    bt.interleaved([("a", lambda: None)], 0, 0, 0, bt.WallTimer())
    expect(False, "rounds 0 accepted")
except ValueError as e:
    expect("rounds 0" in str(e), f"rounds 0: {e}")
expect(bt.interleaved([], 3, 0, 0, bt.WallTimer()) == {}, "no systems")

# bench-peers: gpu/host from the medians, the per-round range, the tables
spec = importlib.util.spec_from_loader("bench_peers", importlib.machinery.SourceFileLoader(
    "bench_peers", os.path.join(SRC, "scripts", "bench-peers")))
bp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bp)
base = dict(case="c1", tokens=32768, heads=12, head_dim=128, block="128x128", mask="random", density=.1,
            window=None)
t_rounds = [1.00, 1.02, 0.99, 1.05, 1.01]
h_rounds = [1.03, 1.04, 1.00, 1.06, 1.04]
rows = []
for name, rr in (("tessera", t_rounds), ("host", h_rounds)):
    r = dict(base, system=name, status="ok", err=1e-3)
    r.update(bt.summary(rr), calls_per_round=25)
    r["tflops"] = 1e12 / r["ms"] / 1e9
    rows.append(r)
rows.append(dict(base, system="fa4", status="failed: x"))
g = bp.tessera_vs_host(rows, "c1")
expect(close(g["ratio"], 1.04 / 1.01), f"gpu/host from medians: {g}")
expect(close(g["round_min"], 1.06 / 1.05) and close(g["round_max"], 1.03 / 1.00), f"per-round range: {g}")
md = bp.table(rows, {"fa4": "not carried"})
expect(f"| {1.04 / 1.01:.3f} ({1.06 / 1.05:.3f}-{1.03 / 1.00:.3f}) |" in md, f"gpu/host cell in:\n{md}")
sp = bp.spread_table(rows)
expect("| c1 | tessera | 1.0100 | 0.9900 | 1.0500 |" in sp and "5.9% | 25 |" in sp, f"spread table:\n{sp}")
expect(bp.tessera_vs_host(rows[:1], "c1") is None, "gpu/host without a host row")

# bench-peers: each peer gets the mask at its own block size.  On 128x128
# blocks FA4 takes the mask as it is and VSA one refined to 64x64; the
# builders run after every branch, so a builder reading the name m (not its
# value when built) handed FA4 VSA's 512x512 mask (found on the device).
class FakeMask:
    """The block mask's shape, and the methods peer_runs calls on it."""
    def __init__(self, shape):
        self.shape = tuple(shape)

    def any(self, dim):
        return self

    def all(self):
        return True

    def repeat_interleave(self, f, dim):
        return FakeMask(n * f if i == dim else n for i, n in enumerate(self.shape))

    def contiguous(self):
        return self


class Got:
    """Records the mask shape each fake peer is given."""
    def __init__(self):
        self.shapes = {}

    to_bhsd = None  # the run object the adapters return: this one

    def __call__(self):
        return None

    def fa4_bsr(self, q, k, v, m, bq, bk):
        self.shapes["fa4"] = (m.shape, bq, bk)
        return self, 0.0

    def vsa_blocks(self, q, k, v, m):
        self.shapes["vsa"] = m.shape
        return self, 0.0


sys.modules.setdefault("torch", type(sys)("torch"))  # peer_runs imports it; the fakes need nothing of it
got = Got()
fake_peers = type("P", (), dict(fa4=got, adapters=got, flashinfer=None))()
for blk, want_fa4, want_vsa in (((128, 128), ((12, 256, 256), 128, 128), (12, 512, 512)),
                                ((64, 64), ((12, 512, 512), 64, 64), (12, 512, 512)),
                                ((384, 384), ((12, 255, 255), 128, 128), (12, 510, 510))):
    n = 32768 // blk[0] if blk[0] != 384 else 85
    c = dict(S=n * blk[0], D=128, block=blk, mask="random")
    got.shapes.clear()
    for system, make in bp.peer_runs(c, None, None, None, FakeMask((12, n, n)), fake_peers, None, ()):
        make()
    expect(got.shapes.get("fa4") == want_fa4 and got.shapes.get("vsa") == want_vsa,
           f"{blk} blocks: the peers got {got.shapes}, want fa4 {want_fa4}, vsa {want_vsa}")

# bench-peers: a system that keeps GPU memory on every call is found after
# its check, and its calls are capped so the case fits what is free
class FakeCuda:
    def __init__(self):
        self.allocated = rng.randint(1, 1 << 30)

    def synchronize(self):
        pass

    def memory_allocated(self):
        return self.allocated


ft = type("T", (), {})()
ft.cuda = FakeCuda()
keep = rng.randint(1, 200) << 20


def leaky():
    ft.cuda.allocated += keep


expect(bp.kept_per_call(leaky, ft) == keep, f"kept {bp.kept_per_call(leaky, ft)} a call, want {keep}")
expect(bp.kept_per_call(lambda: None, ft) == 0, "a call that keeps nothing")
ready = [(dict(system="tessera"), None, 1), (dict(system="vsa", kept_mib_per_call=96.0), None, 1),
         (dict(system="x", kept_mib_per_call=1000.0), None, 1)]
caps = bp.call_caps(ready, 5, 80 << 30, 5)
expect(caps == {"vsa": int(0.8 * (80 << 30) / 2 / 5 / (96 << 20)),
                "x": max(10, int(0.8 * (80 << 30) / 2 / 5 / (1000 << 20)))}, f"caps {caps}")
expect(bp.call_caps(ready[:1], 3, 1 << 30, 5) == {}, "no cap without kept memory")
expect(bp.call_caps(ready[1:2], 1, 1 << 20, 7) == {"vsa": 14}, "at least 2 calls a round")
kr = dict(base, system="vsa", status="ok", kept_mib_per_call=96.0, call_cap=333, settle_calls=7)
md = bp.table(rows + [kr], {})
expect("- vsa (c1): keeps 96 MiB of GPU memory a call, never given back; timed with at most 333 calls "
       "(7 settle a round)" in md, f"kept-memory note in:\n{md}")

# bench-peers refuses bad timing flags, naming them (exit 2)
for argv, word in ((["--rounds", "0"], "--rounds 0"), (["--warmup-ms", "-1"], "--warmup-ms -1"),
                   (["--round-ms", "inf"], "--round-ms inf"), (["--settle-ms", "-5"], "--settle-ms -5")):
    p = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "bench-peers"), "--peers", "."] + argv,
                       capture_output=True, text=True)
    expect(p.returncode == 2 and word in p.stderr, f"{argv}: exit {p.returncode}, {p.stderr.strip()[-120:]}")

# the shared options (add_args): their defaults, and NaN refused as inf is
ap = argparse.ArgumentParser()
bt.add_args(ap)
a = ap.parse_args([])
expect((a.rounds, a.warmup_ms, a.round_ms, a.settle_ms) == (11, 100.0, 30.0, 250.0), f"timing defaults: {a}")
try:
    bt.check_args(ap, ap.parse_args(["--round-ms", "nan"]))
    expect(False, "--round-ms nan accepted")
except SystemExit as e:
    expect(e.code == 2, f"--round-ms nan: exit {e.code}")

print(f"bench_timing: {'FAIL' if fails else 'ok'} (SEED={seed})")
sys.exit(1 if fails else 0)
