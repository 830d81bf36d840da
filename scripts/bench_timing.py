"""bench_timing: interleaved timing of several systems on the same inputs, for
scripts/bench-peers, tests/device/split_ab.py and tests/device/dyn_ab.py
(issue 20), with their common command-line options (add_args, check_args).

Why: one median of a few calls a system, taken one system after the other
after 3 warm-up calls, moved up to 9% between two runs of the same build in
one process on the H200 (clocks, L2 and the allocator drift between the
systems' turns), so a 2% target could not be judged.  Here every system is
first warmed up for a fixed duration (not a fixed count: a 1 ms kernel and a
180 ms one both reach steady clocks), then timed in R rounds interleaved
(A B C A B C ...), each round one timing of N back-to-back calls (N chosen
from the warm-up so a round lasts about round_ms).  A system's figure is the
median over rounds of (round time / N), with min, max and quartiles beside
it; a ratio of two systems is taken from their medians, and the per-round
ratios (same round, adjacent in time) give its spread.

Cost a system and case: about warmup_ms + rounds * max(round_ms, one call).

Power.  Under sustained load an H100 or H200 runs at its power cap (700 W)
and the SM clock falls from 1980 MHz to 1450-1700, by how much depending on
the kernel; the controller follows within about 100 ms.  A round of 30 ms
right after another system's round then runs at the clock that system's
power draw set, which favours whichever system draws more power a clock
(measured on the H100, 2026-12-06: FA4 620-690 TFLOP/s in 30 ms rounds after
Tessera's, 580-670 in 1.5 s blocks of its own; Tessera the same both ways).
So before each timed round a system first runs --settle-ms of its own calls,
untimed, and the clock it is timed at is its own.  Where NVML answers
(libnvidia-ml, with the driver), each round also records the device's energy
(joules a call) and SM clock, read around the round with the queue drained.

The timer is passed in: CudaTimer (CUDA events; one synchronize at the end)
on the GPU, WallTimer for CPU callables, or a fake one in tests; the power
meter likewise: Nvml, None, or a fake.
"""
import math
import time


class CudaTimer:
    """Marks are CUDA events on the current stream; read after sync()."""

    def __init__(self, torch):
        self.torch = torch

    def mark(self):
        e = self.torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def sync(self):
        self.torch.cuda.synchronize()

    @staticmethod
    def elapsed_ms(a, b):
        return a.elapsed_time(b)


class WallTimer:
    """Marks are perf_counter readings: for callables that finish on return."""

    def mark(self):
        return time.perf_counter()

    def sync(self):
        pass

    @staticmethod
    def elapsed_ms(a, b):
        return (b - a) * 1e3


class Nvml:
    """The device's total energy (mJ) and SM clock (MHz) through NVML, by
    ctypes; open(cuda_index) returns None where NVML does not answer.
    NVML counts every GPU of the machine, CUDA only the visible ones: the
    index goes through CUDA_VISIBLE_DEVICES (ordinals or GPU-UUIDs)."""

    def __init__(self, lib, handle):
        import ctypes
        self.ctypes, self.lib, self.h = ctypes, lib, handle

    @classmethod
    def open(cls, index=0):
        import os
        vis = [x.strip() for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
        if vis and index >= len(vis):
            return None
        which = vis[index] if vis else str(index)
        try:
            import ctypes
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            h = ctypes.c_void_p()
            if lib.nvmlInit_v2() != 0:
                return None
            if which.isdigit():
                rc = lib.nvmlDeviceGetHandleByIndex_v2(int(which), ctypes.byref(h))
            else:
                rc = lib.nvmlDeviceGetHandleByUUID(which.encode(), ctypes.byref(h))
            if rc != 0:
                return None
            me = cls(lib, h)
            me.energy_mj()
            return me
        except (OSError, AttributeError, RuntimeError):
            return None

    def energy_mj(self):
        e = self.ctypes.c_ulonglong()
        if self.lib.nvmlDeviceGetTotalEnergyConsumption(self.h, self.ctypes.byref(e)) != 0:
            raise RuntimeError("nvmlDeviceGetTotalEnergyConsumption failed")
        return e.value

    def sm_mhz(self):
        c = self.ctypes.c_uint()
        return c.value if self.lib.nvmlDeviceGetClockInfo(self.h, 1, self.ctypes.byref(c)) == 0 else None


def quantile(xs, f):
    """Linear-interpolated quantile f in [0, 1] of a non-empty list."""
    s = sorted(xs)
    x = f * (len(s) - 1)
    i = int(x)
    return s[i] if i + 1 >= len(s) else s[i] + (s[i + 1] - s[i]) * (x - i)


def summary(per_call):
    """Median, min, max, quartiles and the relative spread of a list of ms."""
    med = quantile(per_call, .5)
    return dict(ms=med, ms_min=min(per_call), ms_max=max(per_call), ms_q1=quantile(per_call, .25),
                ms_q3=quantile(per_call, .75), spread=(max(per_call) - min(per_call)) / med if med else None,
                rounds_ms=per_call)


def warm_up(fn, warmup_ms, timer, clock=time.perf_counter, max_calls=None):
    """Calls fn until warmup_ms of wall time has passed or max_calls calls
    were made (at least once, each call synchronized); returns the mean wall
    ms a call and the calls made."""
    n, t0 = 0, clock()
    while True:
        fn()
        timer.sync()
        n += 1
        el = (clock() - t0) * 1e3
        if el >= warmup_ms or (max_calls is not None and n >= max_calls):
            return el / n, n


def calls_per_round(call_ms, round_ms, cap=1000):
    """N back-to-back calls so that a round lasts about round_ms (1..cap)."""
    if round_ms <= 0:
        return 1
    if call_ms <= 0:
        return cap
    return max(1, min(cap, round(round_ms / call_ms)))


# NVML's energy counter over a shorter window than this is too coarse to
# read (30 ms rounds gave 0.5-3x the cap); over the 0.28 s of a default
# settle and round it read 690-790 W where 1.5 s blocks read 670-730 W
# (H100): within about 10-15%.
POWER_MIN_MS = 200.0


def interleaved(systems, rounds, warmup_ms, round_ms, timer, clock=time.perf_counter, settle_ms=0.0,
                power=None, max_calls=None):
    """systems: [(name, fn)], fn() runs one call.  Returns {name: summary +
    calls_per_round + settle_calls + warmup_call_ms}, ms = the median over
    rounds of the time a call.  Each system is warmed up in turn, then the
    rounds run A B C A B C ...; before each timed round the system runs
    settle_ms of its own calls untimed (so that the clock it is timed at is
    the one its own power draw sets).  Without a power meter nothing is
    synchronized between marks, so the device queue stays full and the
    first call of a round does not carry a launch gap; with one (Nvml) the
    queue is drained before each settle and after each timed round to read
    the energy of both (where settle_ms + round_ms >= POWER_MIN_MS), and
    the summary gains joules (a call), watts and sm_mhz (sampled once a
    round, while its calls run): medians over rounds, per-round lists
    beside them.
    max_calls: {name: most calls} for systems that cannot make as many as
    the durations ask for (a peer that keeps GPU memory on every call):
    such a system's warm-up takes at most a fifth of them, and each round
    what is left over the rounds, timed calls first, settle calls after
    (at least one timed call a round); its summary gains call_cap, and
    energy only where its settle and round still last POWER_MIN_MS."""
    if rounds < 1:
        raise ValueError(f"rounds {rounds}: must be at least 1")
    if not systems:
        return {}
    if settle_ms + round_ms < POWER_MIN_MS:
        power = None
    caps = {name: cap for name, cap in (max_calls or {}).items() if any(name == x for x, _ in systems)}
    warm, warm_calls = {}, {}
    for name, fn in systems:
        cap = caps.get(name)
        warm[name], warm_calls[name] = warm_up(fn, warmup_ms, timer, clock, None if cap is None else max(1, cap // 5))
    n = {name: calls_per_round(warm[name], round_ms) for name, _ in systems}
    ns = {name: calls_per_round(warm[name], settle_ms) if settle_ms > 0 else 0 for name, _ in systems}
    for name, cap in caps.items():
        per_round = max(1, (cap - warm_calls[name]) // rounds)
        n[name] = min(n[name], per_round)
        ns[name] = min(ns[name], per_round - n[name])
    # energy only over windows the counter can read (a capped system's may be short)
    metered = {name: power is not None and (ns[name] + n[name]) * warm[name] >= POWER_MIN_MS for name, _ in systems}
    marks = {name: [] for name, _ in systems}
    meter = {name: [] for name, _ in systems}
    for _ in range(rounds):
        for name, fn in systems:
            if metered[name]:
                timer.sync()
                e0, s0 = power.energy_mj(), timer.mark()
            for _ in range(ns[name]):
                fn()
            a = timer.mark()
            for _ in range(n[name]):
                fn()
            b = timer.mark()
            marks[name].append((a, b))
            if metered[name]:
                mhz = power.sm_mhz()  # while the round's calls still run
                timer.sync()
                meter[name].append(((power.energy_mj() - e0) / 1e3, s0, b, mhz))
    timer.sync()
    out = {}
    for name, _ in systems:
        per_call = [timer.elapsed_ms(a, b) / n[name] for a, b in marks[name]]
        out[name] = dict(summary(per_call), calls_per_round=n[name], settle_calls=ns[name],
                         warmup_call_ms=warm[name])
        if name in caps:
            out[name]["call_cap"] = caps[name]
        if meter[name]:
            # the energy window holds the settle calls too (the counter's
            # resolution wants more than a 30 ms round): watts over the
            # window, joules a call at the timed calls' time
            watts = [j * 1e3 / timer.elapsed_ms(s0, b) for j, s0, b, _ in meter[name]
                     if timer.elapsed_ms(s0, b) > 0]
            joules = [w * t * 1e-3 for w, t in zip(watts, per_call)]
            mhz = [m for *_, m in meter[name] if m is not None]
            out[name].update(joules=quantile(joules, .5), rounds_joules=joules,
                             watts=quantile(watts, .5) if watts else None,
                             sm_mhz=quantile(mhz, .5) if mhz else None, rounds_sm_mhz=mhz)
    return out


def ratio(num, den):
    """num / den of two interleaved() results: the ratio of the medians, and
    min / median / max of the per-round ratios (round i against round i)."""
    per = [a / b for a, b in zip(num["rounds_ms"], den["rounds_ms"]) if b > 0]
    if not per or not den["ms"]:
        return None
    return dict(ratio=num["ms"] / den["ms"], round_min=min(per), round_median=quantile(per, .5),
                round_max=max(per))


def describe(rounds, warmup_ms, round_ms, settle_ms=0.0, power=False):
    """One line for logs and tables: how the figures were taken."""
    return (f"CUDA events; each system warmed up >= {warmup_ms:g} ms, then {rounds} rounds interleaved "
            f"across systems, a round = {settle_ms:g} ms of the system's calls untimed (its own clock), then "
            f"N back-to-back calls timed (N: about {round_ms:g} ms a round); "
            f"median over rounds of the time a call, spread = (max - min) / median"
            + ("; energy and SM clock from NVML around each timed round" if power else ""))


def add_args(ap):
    """The timing options every interleaved benchmark takes (argparse)."""
    ap.add_argument("--rounds", type=int, default=11,
                    help="timing rounds, interleaved across a case's systems (median over rounds); default 11")
    ap.add_argument("--warmup-ms", type=float, default=100.0,
                    help="warm-up of each system before its case's rounds, in ms of calls; default 100")
    ap.add_argument("--round-ms", type=float, default=30.0,
                    help="about how long one round of a system lasts (N back-to-back calls); default 30")
    ap.add_argument("--settle-ms", type=float, default=250.0,
                    help="untimed calls of a system before each of its rounds, in ms, so that it is timed at "
                         "the clock its own power draw sets (0: none); default 250")


def check_args(ap, args):
    """ap.error (exit 2, naming the option and value) for timing options
    that cannot time anything: fewer than one round, a negative or
    non-finite duration."""
    if args.rounds < 1:
        ap.error(f"--rounds {args.rounds}: must be at least 1")
    for name, x in (("--warmup-ms", args.warmup_ms), ("--round-ms", args.round_ms),
                    ("--settle-ms", args.settle_ms)):
        if not (x >= 0 and math.isfinite(x)):
            ap.error(f"{name} {x:g}: must be a finite number of ms, 0 or more")
