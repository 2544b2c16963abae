"""C00 — the harness calibrates itself before any experiment is trusted.

What the instruments cost and how small an effect this machine can resolve,
measured in one job that runs first:

* the floor of every timing: one device synchronize on an idle device, the
  clock's resolution, and an empty callable timed through the project's own
  helper (:func:`perflab.instruments.timing.time_calls`);
* CUDA events: the device time between two events recorded back to back and
  the host cost of recording a pair (CUDA only);
* the per-process floor: fresh interpreters launched a few times — bare, and
  one that imports torch (stamping a clock every process shares) and then
  initialises the device, so one child gives both stages — so a job's fixed
  cost is known;
* the profiler's overhead on the reference step (the controlled training step);
* the A/A floor: two independent copies of the step (model, optimizer, batch)
  as A and as B, interleaved; the floor is the 95% upper bound (bootstrap over
  the block pairs) of the statistic every A/B is judged by, the median paired
  block difference in % of A, for blocks as long as these (and, for
  comparison, for blocks of their first calls only). A planted 2x step (the
  second copy called twice) judged against that floor checks the judgement;
* peer agreement: the helper's median against ``torch.utils.benchmark.Timer``
  and, on CUDA, ``triton.testing.do_bench`` on the same step.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import os
import statistics
import subprocess
import sys
import time

import torch

from perflab.core.names import SAMPLING_DECISION, STEP_LATENCY, SYNCED_CALL
from perflab.experiments.c00_calibration import (
    AA_A,
    AA_B,
    AA_BLOCK,
    AA_FLOOR,
    AA_FLOOR_SHORT,
    AA_MIN_BLOCKS,
    AA_SHORT_INNER,
    CALL_LATENCY,
    CLOCK,
    EID,
    EMPTY_CALL,
    EVENT_ELAPSED,
    EVENTS_EMPTY_PAIR,
    EVENTS_RECORD_PAIR,
    FLOOR_PAIRS,
    FLOOR_PAIRS_VARIANT,
    FLOOR_REFERENCE_PAIRS,
    HOST_RECORD_COST,
    OVERHEAD_REL,
    PEER_DO_BENCH,
    PEER_DO_BENCH_OVER_HELPER,
    PEER_HELPER,
    PEER_TIMER,
    PEER_TIMER_OVER_HELPER,
    PLANTED_2X,
    PLANTED_A,
    PROCESS_DEVICE_INIT,
    PROCESS_IMPORT_TORCH,
    PROCESS_INTERPRETER,
    PROCESS_WALL,
    PROFILER_OVERHEAD,
    PROFILER_PROFILED,
    PROFILER_UNPROFILED,
    RATIO,
    RESOLUTION_DECLARED,
    SYNC_COST,
    SYNC_IDLE,
    TICK,
)
from perflab.instruments import budgeted, profiling, stats, timing
from perflab.kit import sampling
from perflab.pipeline.runner import run

#: the calibrations, in order (``parts``; "planted" needs the A/A floor, so runs it too)
PARTS = ("clock", "events", "process", "aa", "planted", "profiler", "peers")
#: what each fresh child does, for the window of the rows it gives
BARE_WHAT = "start the interpreter and exit"
STAGED_WHAT = ("start, import torch, first tensor on the device, synchronize, exit; the "
               "child stamps the shared monotonic clock once torch is imported")
#: the staged child: it prints the shared clock once torch is imported, then initialises
#: the device, so one interpreter gives both the import stage and the device-init stage
#: (a separate import-only child would pay the same import again and add no evidence)
STAGED_CODE = (
    "import time\n"
    "_c = getattr(time, 'clock_gettime', None)\n"
    "_now = (lambda: _c(time.CLOCK_MONOTONIC)) if _c else time.time\n"
    "import torch\n"
    "print(repr(_now()), flush=True)\n"
    "d = torch.device({device!r})\n"
    "x = torch.zeros(1, device=d)\n"
    "torch.cuda.synchronize(d) if d.type == 'cuda' else None\n"
)


def _shared_clock():
    """Seconds on a clock every process of this machine reads alike (CLOCK_MONOTONIC on
    POSIX), so a child's stamp can be set against the parent's launch time."""
    c = getattr(time, "clock_gettime", None)
    return c(time.CLOCK_MONOTONIC) if c else time.time()


def _clock_floor(ctx):
    p, t = ctx.params, ctx.timing
    n = p["floor_repeats"]
    info = time.get_clock_info("perf_counter")
    ctx.row(variant=CLOCK, metric=RESOLUTION_DECLARED,
            value=info.resolution * 1e3, unit="ms", window="time.get_clock_info('perf_counter')",
            sync_boundary="n/a: a property of the clock", n=1)
    deltas, clock = [], time.perf_counter
    for _ in range(n):
        t0 = clock()
        t1 = clock()
        while t1 == t0:
            t1 = clock()
        deltas.append((t1 - t0) * 1e3)
    ctx.summary(deltas, variant=CLOCK, metric=TICK,
                window=f"{n} pairs of back-to-back reads, the second repeated until it differs",
                sync_boundary="no device involved", statistics=("median", "min", "p25", "p75"))

    # one synchronize on an idle device: what each synchronized sample adds at its ends
    ctx.sync()
    sync_ms = []
    for _ in range(n):
        t0 = clock()
        ctx.sync()
        sync_ms.append((clock() - t0) * 1e3)
    ctx.summary(sync_ms, variant=SYNC_IDLE, metric=SYNC_COST,
                window=f"{n} calls of the sync on an idle device (queue already drained)",
                sync_boundary=f"{ctx.sync_name} itself, timed by the host clock")

    # the empty callable through the helper: the floor every step time sits above
    empty = timing.time_calls(lambda: None, warmup=t["warmup"], repeats=n, sync=ctx.sync)
    s = ctx.summary(empty, variant=EMPTY_CALL, metric=CALL_LATENCY,
                    window=f"timing.time_calls(lambda: None, warmup={t['warmup']}, repeats={n})",
                    sync_boundary="synchronized at both ends of each call (the helper's boundary)")
    ctx.log(f"clock tick {statistics.median(deltas) * 1e6:.0f} ns, idle sync "
            f"{statistics.median(sync_ms) * 1e3:.2f} us, empty call through the helper "
            f"{s['median'] * 1e3:.2f} us")


def _events(ctx):
    p = ctx.params
    n = p["floor_repeats"]
    if not ctx.is_cuda:
        for variant, metric in ((EVENTS_EMPTY_PAIR, EVENT_ELAPSED),
                                (EVENTS_RECORD_PAIR, HOST_RECORD_COST)):
            ctx.unsupported(variant=variant, metric=metric, unit="ms",
                            reason="CUDA events need a CUDA device")
        return
    ev = timing.time_events_idle_stream(lambda: None, warmup=ctx.timing["warmup"], repeats=n,
                                        device=ctx.device)
    ctx.summary(ev, variant=EVENTS_EMPTY_PAIR, metric=EVENT_ELAPSED,
                window=f"{n} pairs of events recorded back to back (nothing between them)",
                sync_boundary="start.elapsed_time(end) after end.synchronize()")
    host = []
    for _ in range(n):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        ctx.sync()
        t0 = time.perf_counter()
        a.record()
        b.record()
        host.append((time.perf_counter() - t0) * 1e3)
    ctx.sync()
    ctx.summary(host, variant=EVENTS_RECORD_PAIR, metric=HOST_RECORD_COST,
                window=f"{n} host-side record() pairs, event objects made beforehand",
                sync_boundary="host clock around the two record() calls; device drained before")


def _launch(code):
    """(launch time, exit time, the child's result) on the shared clock."""
    t0 = _shared_clock()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ), timeout=600)
    return t0, _shared_clock(), proc


def _child_error(proc):
    return (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]


def _staged_sample(t0, t1, proc):
    """(launch to torch imported, launch to exit) in ms from one staged child, or an error."""
    try:
        stamp = float(proc.stdout.strip().splitlines()[0])
    except (IndexError, ValueError):
        return f"the child printed no clock stamp: {proc.stdout.strip()[:200]!r}"
    if not t0 <= stamp <= t1:
        return "the child's clock stamp lies outside its launch-to-exit span: no shared clock"
    return (stamp - t0) * 1e3, (t1 - t0) * 1e3


def _process_samples(ctx, n):
    """n bare children and n staged children, alternating (drift hits both alike)."""
    samples = {v: [] for v in (PROCESS_INTERPRETER, PROCESS_IMPORT_TORCH, PROCESS_DEVICE_INIT)}
    failed = {}
    staged = STAGED_CODE.format(device=str(ctx.device))
    for _ in range(n):
        if PROCESS_INTERPRETER not in failed:
            t0, t1, proc = _launch("pass")
            if proc.returncode != 0:
                failed[PROCESS_INTERPRETER] = _child_error(proc)
            else:
                samples[PROCESS_INTERPRETER].append((t1 - t0) * 1e3)
        if PROCESS_DEVICE_INIT in failed:
            continue
        t0, t1, proc = _launch(staged)
        got = _staged_sample(t0, t1, proc) if proc.returncode == 0 else _child_error(proc)
        if isinstance(got, str):
            failed[PROCESS_IMPORT_TORCH] = failed[PROCESS_DEVICE_INIT] = got
            continue
        samples[PROCESS_IMPORT_TORCH].append(got[0])
        samples[PROCESS_DEVICE_INIT].append(got[1])
    return samples, failed


def _process_floor(ctx):
    n = ctx.params["process_repeats"]
    samples, failed = _process_samples(ctx, n)
    exe = os.path.basename(sys.executable)
    stages = (
        (PROCESS_INTERPRETER, f"{n} fresh `{exe} -c pass` processes: {BARE_WHAT}",
         "host clock around subprocess.run (launch to exit)"),
        (PROCESS_IMPORT_TORCH, f"{n} fresh `{exe} -c` processes: {STAGED_WHAT}",
         "shared monotonic clock: launch (parent) to torch imported (child's stamp)"),
        (PROCESS_DEVICE_INIT, f"the same {n} fresh `{exe} -c` processes: {STAGED_WHAT}",
         "shared monotonic clock around subprocess.run (launch to exit)"),
    )
    for variant, window, boundary in stages:
        if variant in failed:
            ctx.row(variant=variant, metric=PROCESS_WALL, value=None, unit="ms",
                    window="fresh interpreter", sync_boundary="n/a", status="error",
                    reason=f"the child process failed: {failed[variant]}")
            continue
        ctx.summary(samples[variant], variant=variant, metric=PROCESS_WALL,
                    window=window + "; bare and staged children alternate",
                    sync_boundary=boundary, statistics=("median", "min", "max", "iqr"))
    ctx.log("process floor: " + ", ".join(
        f"{v} {statistics.median(s):.0f} ms" for v, s in samples.items() if s))


def _profiler_overhead(ctx, step):
    p, t = ctx.params, ctx.timing
    n = p["profiler_steps"]
    timing.warm(step, t["warmup"], ctx.sync)
    before = timing.time_calls(step, warmup=0, repeats=n, sync=ctx.sync)
    r = profiling.profile_steps(step, device=ctx.device, sync=ctx.sync, wait=0, warmup=1,
                                active=n, profile_memory=False)
    prof = list(r.active_ms)
    del r
    after = timing.time_calls(step, warmup=0, repeats=n, sync=ctx.sync)
    base = before + after
    acts = "CPU + CUDA" if ctx.is_cuda else "CPU"
    window = (f"the reference step: {n} profiled steps (schedule wait 0, warmup 1, active {n}, "
              f"activities {acts}) between {n} unprofiled steps before and {n} after")
    synced = f"{ctx.sync_name} at both ends of each step"
    ctx.summary(base, variant=PROFILER_UNPROFILED, metric=STEP_LATENCY, window=window,
                sync_boundary=synced + "; no profiler",
                statistics=("median", "iqr", "p25", "p75", "min", "max"),
                block=[0] * n + [2] * n)
    ctx.summary(prof, variant=PROFILER_PROFILED, metric=STEP_LATENCY, window=window,
                sync_boundary=synced + "; prof.step() outside the timed region",
                statistics=("median", "iqr", "p25", "p75", "min", "max"), block=1)
    j = stats.judge(base, prof, paired=False)
    ctx.row(variant=PROFILER_OVERHEAD, metric=OVERHEAD_REL, value=j.relative_pct, unit="%",
            window=window, sync_boundary="profiled median over unprofiled median, minus 1",
            n=len(prof))
    ctx.judgement(j, variant=PROFILER_OVERHEAD, window=window)
    ctx.log(f"profiler overhead on the reference step: {j.relative_pct:+.1f}% "
            f"({j.verdict}, p={j.p:.3g})")


def _short_block_medians(samples, inner, k):
    """Median of the first ``k`` calls of each block of ``inner`` calls."""
    return [statistics.median(samples[i:i + k]) for i in range(0, len(samples), inner)]


def _aa_design(ctx, blocks: int | None = None) -> tuple[dict, str]:
    """The interleaving of the A/A pair (and, with its own ``blocks``, of the planted pair):
    its arguments and window."""
    p, t = ctx.params, ctx.timing
    blocks, inner = blocks or p["aa_blocks"], p["aa_inner"]
    return (dict(blocks=blocks, inner=inner, warmup=t["warmup"], sync=ctx.sync),
            f"{blocks} blocks per side of {inner} synchronized calls, alternating AB/BA, "
            f"after {t['warmup']} warmup calls per side")


#: under a budget the A/A runs in rounds of this many block pairs (AB, BA) ...
AA_ROUND = 2
#: ... from AA_MIN_BLOCKS pairs on (perflab.experiments.c00_calibration: the budget's split
#: gives C00 at least what they take)
#: and stops once its floor is known to within this share of itself (the A/Bs it gates
#: compare an effect with it) ...
AA_PRECISION_REL = 0.25


def _precision_pp() -> float:
    """... or within this many points of the step: a tenth of the least threshold the
    diagnosis holds a distance to the floor against (its near-threshold notes)."""
    from perflab.views import diagnose as view

    return 0.1 * min(view.INPUT_SHARE_PCT, view.SYNC_COST_PCT, view.HOST_IDLE_PCT,
                     view.OPTIMIZER_SHARE_PCT)


def _aa_budget_s(ctx, started: float) -> float | None:
    """What is left of C00's share of the run's budget (sampling.rule adaptive), or None:
    the A/A runs its fixed count."""
    if sampling.rule(ctx.contract) != sampling.ADAPTIVE:
        return None
    share = sampling.job_budget_s(ctx.contract, EID)
    return None if share is None else max(0.0, share - (time.perf_counter() - started))


def _extend(into: timing.ABResult, more: timing.ABResult) -> None:
    for name in ("a_samples", "b_samples", "a_blocks", "b_blocks", "order"):
        getattr(into, name).extend(getattr(more, name))


def _aa_until_precise(ctx, step_a, step_b, budget_s: float):
    """The A/A in rounds of AA_ROUND block pairs until its floor is as precise as the run's
    comparisons need (:func:`_precise`), twice the fixed count of pairs is in, or the budget
    is spent. Returns (the blocks, the SAMPLING_DECISION row's value and reason)."""
    common, _ = _aa_design(ctx, AA_ROUND)
    aa, target = timing.ABResult(), _precision_pp()
    state = {}

    def take(i: int) -> None:
        _extend(aa, timing.interleaved_ab(step_a, step_b,
                                          **{**common, "warmup": common["warmup"] if i == 0
                                             else 0}))

    def precise() -> bool:
        n = len(aa.a_blocks)
        if n < AA_MIN_BLOCKS:
            return False
        pairs = min(FLOOR_REFERENCE_PAIRS, n)
        floor = stats.aa_floor_pct(aa.a_blocks, aa.b_blocks, pairs=pairs)
        lo, hi = stats.aa_floor_interval_pct(aa.a_blocks, aa.b_blocks, pairs=pairs)
        state.update(n=n, floor=floor, lo=lo, hi=hi, half=(hi - lo) / 2,
                     need=max(AA_PRECISION_REL * floor, target))
        return state["half"] <= state["need"]

    least = -(-AA_MIN_BLOCKS // AA_ROUND)
    rounds, reason, elapsed = budgeted.until_precise(
        take, precise, budget_s=budget_s, min_rounds=least,
        max_rounds=max(least, -(-2 * ctx.params["aa_blocks"] // AA_ROUND)))
    iv = (f"{state['floor']:.2g} % (90% bootstrap interval {state['lo']:.2g}..{state['hi']:.2g}"
          f" %, {state['n']} block pairs)")
    if state["half"] <= state["need"]:
        line = f"decided: the A/A floor is {iv}, within ±{state['need']:.2g} points"
    else:
        more = state["n"] * ((state["half"] / state["need"]) ** 2 - 1)  # half-width ~ 1/sqrt(n)
        # "within budget" only where the budget stopped it: a newcomer read "undecided within
        # budget [stopped: max_n reached ...]" as a contradiction
        why = ("undecided within budget" if reason == budgeted.BUDGET else
               f"undecided at its most block pairs (twice the fixed {ctx.params['aa_blocks']})")
        line = (f"{why}: the A/A floor is {iv}, not yet within ±{state['need']:.2g} points; "
                f"about {max(1, round(more))} more block pairs would decide it")
    ctx.log(f"A/A floor: {rounds} rounds in {elapsed:.1f} s ({reason}); {line}")
    over = " (its first rounds run whatever the share)" if elapsed > budget_s else ""
    return aa, (state["floor"], f"{line} [stopped: {reason}; the A/A had {budget_s:.1f} s of "
                                f"C00's share and took {elapsed:.1f} s{over}]")


def _noise_floor(ctx, step_a, step_b, budget_s: float | None = None):
    """The A/A floor from two independent copies of the step: the fixed count of block
    pairs, or under a budget (``budget_s``) until the floor is precise enough."""
    common, window = _aa_design(ctx)
    copies = "A/A: two independent copies of the step (model, optimizer, batch); "
    if budget_s is None:
        aa = timing.interleaved_ab(step_a, step_b, **common)
    else:
        aa, (value, line) = _aa_until_precise(ctx, step_a, step_b, budget_s)
        _, window = _aa_design(ctx, len(aa.a_blocks))
        ctx.row(variant=AA_FLOOR[0], metric=SAMPLING_DECISION, value=value, unit="%",
                n=len(aa.a_blocks), window=copies + window, reason=line,
                sync_boundary="the floor (below) and its precision: bootstrap over the "
                "block pairs, each resample's floor recomputed")
    blocks, inner = len(aa.a_blocks), ctx.params["aa_inner"]
    d = ctx.ab(aa, a=AA_A, b=AA_B, window=copies + window, noise_floor_pct=None)
    bound = (f"{stats.AA_FLOOR_CONFIDENCE:.0%} upper bound of |median paired block difference "
             "(B - A)| / median(A): bootstrap over the block pairs (2000 resamples, seeded)")
    # the run's floor is for a median of 12 pairs (the A/Bs' usual count) however many the
    # A/A ran: more pairs estimate that bound with less noise of its own; each pair count of
    # FLOOR_PAIRS gets its own, for an A/B of that many pairs
    ref = min(FLOOR_REFERENCE_PAIRS, blocks)
    floor = stats.aa_floor_pct(aa.a_blocks, aa.b_blocks, pairs=ref)
    ctx.row(variant=AA_FLOOR[0], metric=AA_FLOOR[1], value=floor, unit="%", n=blocks,
            window=copies + window + f"; resampled as medians of {ref} pairs",
            sync_boundary=bound)
    # counts up to the A/A's own only: a bound for more pairs than were measured would be
    # an extrapolation; an A/B of more pairs is held to the largest written (wider: safe)
    for m in (m for m in FLOOR_PAIRS if m <= blocks):
        ctx.row(variant=FLOOR_PAIRS_VARIANT.format(m), metric=AA_FLOOR[1],
                value=stats.aa_floor_pct(aa.a_blocks, aa.b_blocks, pairs=m), unit="%",
                n=blocks, window=copies + window + f"; resampled as medians of {m} pairs",
                sync_boundary=bound)
    block_ms = inner * statistics.median(aa.a_samples)
    ctx.row(variant=AA_BLOCK[0], metric=AA_BLOCK[1], value=block_ms, unit="ms", n=blocks,
            window=copies + window, sync_boundary=f"{inner} calls x A's median call")
    k = min(AA_SHORT_INNER, inner)
    short = stats.aa_floor_pct(_short_block_medians(aa.a_samples, inner, k),
                               _short_block_medians(aa.b_samples, inner, k), pairs=ref)
    ctx.row(variant=AA_FLOOR_SHORT[0], metric=AA_FLOOR_SHORT[1], value=short, unit="%",
            n=blocks, window=copies + window + f"; each block's first {k} calls only",
            sync_boundary=bound)
    ctx.noise_floor_pct = floor
    ctx.log(f"A/A: B - A {d['diff']:+.4f} ms (p={d['p']:.3g}); floor {floor:.2f}% for blocks of "
            f"{block_ms:.1f} ms ({short:.2f}% for blocks of {k} calls)")


def _planted(ctx, step_a, step_b):
    """A planted 2x (B calls the second copy twice) judged against the A/A floor.

    Its blocks are ``planted_blocks`` (null: the A/A's): a 2x effect needs fewer pairs to be
    told from the floor than the floor needs to be measured (6 all-positive pairs give the
    signed-rank test p = 0.031), and B's side costs two steps per call."""
    common, window = _aa_design(ctx, ctx.params.get("planted_blocks"))
    floor = ctx.noise_floor_pct

    def twice():
        step_b()
        step_b()

    planted = timing.interleaved_ab(step_a, twice, **common)
    d2 = ctx.ab(planted, a=PLANTED_A, b=PLANTED_2X,
                window="planted slowdown: B calls the second copy twice; " + window,
                noise_floor_pct=floor)
    ctx.log(f"planted 2x: B - A {d2['diff']:+.4f} ms (p={d2['p']:.3g}) -> "
            f"{'resolved' if d2['resolved'] else 'inconclusive'} against the A/A floor")


def _do_bench(step, warmup_ms, rep_ms):
    from triton.testing import do_bench

    try:
        return float(do_bench(step, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    except TypeError:  # an older triton without return_mode
        return float(do_bench(step, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5])[0])


def _peers(ctx, step):
    p, t = ctx.params, ctx.timing
    n = t["repeats"] if p.get("peer_repeats") is None else p["peer_repeats"]  # a scale's
    helper = timing.time_calls(step, warmup=t["warmup"], repeats=n, sync=ctx.sync)
    h = ctx.summary(helper, variant=PEER_HELPER, metric=STEP_LATENCY,
                    window=f"timing.time_calls: warmup {t['warmup']}, repeats {n}",
                    sync_boundary=SYNCED_CALL,
                    statistics=("median", "iqr", "p25", "p75"))
    m = timing.timer_blocked_autorange(step, min_run_time=p["peer_min_run_time_s"])
    tw = f"torch.utils.benchmark.Timer.blocked_autorange(min_run_time={p['peer_min_run_time_s']})"
    tb = f"sync at each block's ends; per-call = block / {m['number_per_run']}"
    ctx.row(variant=PEER_TIMER, metric=STEP_LATENCY, statistic="median",
            value=m["median_ms"], unit="ms", n=m["runs"], window=tw, sync_boundary=tb)
    ctx.row(variant=PEER_TIMER, metric=STEP_LATENCY, statistic="iqr", value=m["iqr_ms"],
            unit="ms", n=m["runs"], window=tw, sync_boundary=tb)
    ctx.row(variant=PEER_TIMER_OVER_HELPER, metric=RATIO, value=m["median_ms"] / h["median"],
            unit="x", n=m["runs"], window=tw + " median over the helper's median",
            sync_boundary="ratio of two medians of the same step")
    ctx.log(f"peers: helper {h['median']:.4f} ms, Timer {m['median_ms']:.4f} ms")
    db_window = (f"triton.testing.do_bench(warmup={p['do_bench_warmup_ms']} ms, "
                 f"rep={p['do_bench_rep_ms']} ms), median; it clears the L2 cache before each "
                 "call and times with CUDA events")
    if not ctx.is_cuda:
        for variant, metric, unit in ((PEER_DO_BENCH, STEP_LATENCY, "ms"),
                                      (PEER_DO_BENCH_OVER_HELPER, RATIO, "x")):
            ctx.unsupported(variant=variant, metric=metric, unit=unit,
                            reason="triton.testing.do_bench times with CUDA events and "
                            "needs a CUDA device")
        return
    try:
        ms = _do_bench(step, p["do_bench_warmup_ms"], p["do_bench_rep_ms"])
    except Exception as exc:  # triton missing or broken: say so in a row, do not crash
        reason = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
        for variant, metric, unit in ((PEER_DO_BENCH, STEP_LATENCY, "ms"),
                                      (PEER_DO_BENCH_OVER_HELPER, RATIO, "x")):
            ctx.unsupported(variant=variant, metric=metric, unit=unit, status="error",
                            reason=reason)
        ctx.log(f"do_bench failed: {reason}")
        return
    ctx.row(variant=PEER_DO_BENCH, metric=STEP_LATENCY, statistic="median", value=ms,
            unit="ms", window=db_window, sync_boundary="CUDA events around each call")
    ctx.row(variant=PEER_DO_BENCH_OVER_HELPER, metric=RATIO, value=ms / h["median"],
            unit="x", window=db_window + "; over the helper's median",
            sync_boundary="ratio of two medians of the same step")
    ctx.log(f"peers: do_bench {ms:.4f} ms")


def measure(ctx):
    started = time.perf_counter()
    # `parts` (default: all): perflab diagnose keeps the clock and the A/A floor, all the
    # verdict reads; the others' rows are then absent, so their views say "not run"
    parts = ctx.params.get("parts", PARTS)
    for name, calibrate in (("clock", _clock_floor), ("events", _events),
                            ("process", _process_floor)):
        if name in parts:
            calibrate(ctx)
    if not {"aa", "planted", "profiler", "peers"} & set(parts):
        return
    step = ctx.training_step()
    if step is None:  # no optimizer: the step-based calibrations wrote unsupported rows
        return
    if {"aa", "planted"} & set(parts):
        other = ctx.training_step()  # the A/A's second side: another copy
        _noise_floor(ctx, step, other, _aa_budget_s(ctx, started))
        if "planted" in parts:
            _planted(ctx, step, other)
    if "profiler" in parts:
        _profiler_overhead(ctx, step)
    if "peers" in parts:
        _peers(ctx, step)


if __name__ == "__main__":
    run(EID, measure, globals().get("snakemake"))
