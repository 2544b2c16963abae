"""``perflab whatif -- python train.py``: each intervention that applies, applied from outside
the script in a fresh run of it, timed against the baseline (docs/whatif-script.md).

One attached baseline run (perflab.attach.run.run_child) gives the diagnosis; the
interventions of :mod:`perflab.attach.patches` that apply to what it observed run next, the
diagnosis's first, each in a fresh process with the same settings (seed, steps, warm-up),
interleaved with repeats of the baseline (B, I1, B, B, I2, B, ...) so the between-run floor
is measured in the same invocation. Each change is compared with the baseline runs either side
of it, and so is the floor: each baseline run between two others against their geometric mean
(perflab.instruments.stats.bracketed_floor_pct), so a machine that drifts over the invocation
widens neither. Each change is decided by the stopping rule
(perflab.instruments.sequential.compare) on per-block log differences against that floor; an undecided change is run again in a
further round while the budget and --max-runs allow. A change inside the floor is never a
speedup.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perflab.attach import run as runmod

#: the W01 names this table shares (perflab.experiments.w01_whatif): one vocabulary
FASTER, SLOWER, UNRESOLVED, NOT_APPLICABLE, FAILED = (
    "faster", "slower", "not resolved", "does not apply", "failed")
NOT_RUN = "not run"
#: a change decided to lie inside the between-run floor (seq.WITHIN_FLOOR)
WITHIN = "within the floor"
#: steps per block of the stopping rule's observations; runs of an undecided change at most
BLOCK_STEPS, MAX_RUNS = 5, 3
#: timed steps of every run unless --steps says
DEFAULT_STEPS = 40
#: a run with no step after this long is stopped (perflab run's default: a script that
#: compiles, or loads a dataset, on a busy CPU takes tens of seconds to its first step)
NO_STEP_S = 120.0
#: observations one run should give: the median's anytime interval decides a clear change
#: from about ten (perflab.instruments.sequential; six never bound it)
BLOCKS_PER_RUN = 10
MIN_BLOCK_STEPS = 4
BASELINE = "baseline"
NOT_DETERMINISTIC = ("the script is not deterministic run to run: correctness not checked "
                     "(losses differ by {:.3g} (relative) between two identical runs)")
#: beyond diagnose.HYPOTHESES (the W01 names for each verdict): the attached-only patches
EXTRA_HYPOTHESES = {"device_compute": ("tf32", "channels_last"),
                    "memory_bandwidth": ("autocast_fp16",), "recompiling": ("compile_dynamic",)}
#: where each patch edits the script: the construction-site kind of ev["sites"]
SITE_KIND = {"loader": "loader", "optimizer": "optimizer"}


class WhatifError(runmod.RunError):
    """Bad input, or a script that cannot be re-run, said in one line."""


def parse_params(items: list[str]) -> dict[str, dict]:
    """--set's ``NAME:k=v,...`` (perflab run --patch's grammar, perflab.attach.patches.parse_spec)
    -> {NAME: {k: v}}."""
    from perflab.attach import patches as pmod

    out: dict[str, dict] = {}
    for item in items:
        try:
            spec = pmod.parse_spec(item)
        except ValueError as exc:
            raise WhatifError(f"--set {item!r}: {exc}") from None
        out.setdefault(spec.pop("name"), {}).update(spec)
    return out


def patches():
    """The patch registry of the child side (perflab.attach.patches)."""
    from perflab.attach import patches as pmod

    return pmod.REGISTRY


def order(names: list[str], verdict: str) -> list[str]:
    """The diagnosis's interventions first (in its order), then the rest as registered."""
    from perflab.views import diagnose as dg

    first = [*dg.HYPOTHESES.get(verdict, ()), *EXTRA_HYPOTHESES.get(verdict, ())]
    head = [n for n in first if n in names]
    return head + [n for n in names if n not in head]


def schedule(names: list[str], every: int = 2, repeats: int = 3,
             opening: bool = False) -> list[str | None]:
    """The run order: None = a baseline run, between every ``every`` interventions and at the
    end; at least ``repeats`` of them after the first intervention; ``opening``: one before
    it too (the first round: the diagnosis run is no baseline, see :func:`whatif`). The first
    round's four baselines give the bracketed floor two degrees of freedom, Student factor
    4.3 where three give 12.7; the plan skips a baseline that brackets no intervention run
    when the budget has no room for it."""
    out: list[str | None] = []
    for i, n in enumerate(names):
        out.append(n)
        if (i + 1) % every == 0 and i + 1 < len(names):
            out.append(None)
    out.append(None)
    while out.count(None) < repeats:
        out.insert(len(out) // 2 if names else 0, None)
    return [None, *out] if opening and names else out


# ------------------------------------------------------------------ reading one run

#: step kinds only the first baseline runs (its instruments: work counted, the profiler's
#: window and the trace written at its close); the later, lighter runs skip their cost
FIRST_ONLY = ("work", "profiled", "settle")


def light_wall_s(ev: dict, wall_s: float) -> float:
    """What a run without the first baseline's instruments takes: ``wall_s`` less their
    steps' time beyond a steady step's and what the child did after its last step (the
    ceilings). The budget's first estimate of a run: the first baseline's wall counts them
    (23.8 s on an H100, 7.4 s of it the trace, where a repeat took 13-16 s)."""
    steady = steady_ms(ev)
    step_s = float(np.median(steady)) / 1e3 if steady else 0.0
    ends = [(r["kind"], r["t_end_s"]) for r in ev.get("steps", []) if r.get("t_end_s") is not None]
    extra = sum(max(0.0, t - t0 - step_s)
                for (_, t0), (kind, t) in zip(ends, ends[1:]) if kind in FIRST_ONLY)
    tail = max(0.0, float(ev.get("process_s") or 0.0) - float(ev.get("last_step_s") or 0.0))
    return max(wall_s - extra - tail, 0.2 * wall_s)


def steady_ms(ev: dict) -> list[float]:
    """The wall of every timed step after the warm-up, in step order, recompiling steps
    included: what an intervention that removes recompiles (compile_dynamic) saves is in
    them, and block j of every run of the script is then the same steps."""
    from perflab.attach import evidence as evmod

    return [r["wall_ms"] for r in ev["steps"]
            if r.get("kind") in evmod.TIMED and r.get("wall_ms") is not None]


def block_size(n_steps: int, block_steps: int = BLOCK_STEPS) -> int:
    """Steps per block: enough for BLOCKS_PER_RUN blocks a run (the median's confidence
    sequence needs about ten to decide even a clear case), within [MIN_BLOCK_STEPS,
    block_steps]: a block shorter than a loader's prefetch cycle (one slow step in four with
    four workers) reads the fast steps alone and overstates the gain."""
    return max(MIN_BLOCK_STEPS, min(block_steps, n_steps // BLOCKS_PER_RUN))


def blocks(values: list[float], size: int) -> list[float]:
    """Means of consecutive blocks of ``size`` step walls (a short tail block is dropped):
    the block's throughput. Not its median: with loader workers the steps alternate (three
    of 1 ms, one of 60 ms, as the prefetched batches run out), and the median step would
    claim a speed-up the wall never sees."""
    return [float(np.mean(values[i:i + size])) for i in range(0, len(values) - size + 1, size)]


def block_log_diffs(around: list[dict], new: dict, size: int) -> list[float]:
    """100 ln(new/base) of the j-th block means (block j of one run against block j of the
    other: the same steps of each), % on the log scale. ``around``: the baseline runs on
    either side of the intervention's (one, or two: their blocks' geometric mean, so a
    machine that drifts over the invocation does not read as the intervention's effect)."""
    n = blocks(steady_ms(new), size)
    bs = [blocks(steady_ms(b), size) for b in around]
    k = min(len(n), *(len(b) for b in bs))
    out = []
    for j in range(k):
        if n[j] > 0 and all(b[j] > 0 for b in bs):
            base = math.fsum(math.log(b[j]) for b in bs) / len(bs)
            out.append(100 * (math.log(n[j]) - base))
    return out


def run_diffs(bases: list[dict], pairs: list[tuple[dict, int]], size: int) -> list[float]:
    """Every block difference of an intervention's runs, each run against the baseline
    before it and, where one ran yet, the one after it."""
    return [v for ev, bi in pairs for v in block_log_diffs(bases[bi:bi + 2], ev, size)]


def peak_mib(ev: dict) -> tuple[float | None, str]:
    """(the highest memory of a step row, its metric): the allocator's on CUDA, else RSS."""
    for key in ("max_allocated_mib", "rss_mib"):
        vals = [r["memory"][key] for r in ev["steps"] if key in r.get("memory", {})]
        if vals:
            return float(max(vals)), key
    return None, "not measured (no memory in the step rows)"


def first_call_ms(ev: dict) -> float:
    """The process's start to its first step's end (imports, model build, the first call:
    the first step has no start of its own to time it from) plus the warm-up steps' wall
    above the median steady step (a compile on the second forward), ms. Only the difference
    of two runs means anything: the intervention's first-call cost."""
    from perflab.attach import evidence as evmod

    s = evmod.summarize(ev)
    steps = steady_ms(ev)
    if not steps:
        return math.nan
    med = float(np.median(steps))
    start = 1e3 * float(ev.get("first_step_s") or 0.0)
    return start + float(sum(max(0.0, w - med) for w in s.warmup_ms))


def energy_blocks(ev: dict, size: int) -> tuple[list[float], str]:
    """(J per step of each block of consecutive timed steps, the instrument): the cumulative
    counter's rise from the step before the block to its last step; none: why not."""
    from perflab.attach import evidence as evmod

    rows = [r for r in ev["steps"] if r.get("kind") in evmod.TIMED
            and r.get("energy_j") is not None]
    per = [b["energy_j"] - a["energy_j"] for a, b in zip(rows, rows[1:])
           if b["index"] == a["index"] + 1]
    if len(per) >= size:
        return ([float(np.mean(per[i:i + size])) for i in range(0, len(per) - size + 1, size)],
                (ev.get("energy") or {}).get("instrument") or "energy counter")
    why = (ev.get("energy") or {}).get("reason") or "the evidence has no energy counter"
    return [], f"not measured ({why})"


def batch_size(ev: dict) -> int | None:
    """Examples one step consumes: the DataLoader's batch times the step's micro-batches
    (backward calls per optimizer step: gradient accumulation of 2 read a 16-example step as
    8 and doubled its µs per example); None without a loader."""
    sizes = [ld.get("batch_size") for ld in ev.get("loaders", []) if ld.get("batch_size")]
    if not sizes:
        return None
    micro = [r["micro_batches"] for r in ev.get("steps", []) if r.get("micro_batches")]
    return int(sizes[0]) * max(1, round(float(np.median(micro))) if micro else 1)


def traceback_tail(ev: dict | None, lines: int = 6) -> str:
    tb = ((ev or {}).get("status") or {}).get("traceback") or ""
    return " / ".join(t.strip() for t in tb.strip().splitlines()[-lines:]) or \
        "no traceback in the evidence"


def ran(rc: int, ev: dict | None) -> bool:
    """The run gave timed steps and did not raise."""
    return ev is not None and (ev.get("status") or {}).get("exit") != "raised" and bool(
        steady_ms(ev))


def rerun_problem(first: dict, repeat_rc: int, repeat: dict | None, command: list[str]) -> str:
    """Why an identical repeat of the baseline shows the script cannot be re-run ("" when it
    can): it failed, or it ran far fewer timed steps than the first run (its input used up)."""
    from perflab.instruments import sequential as seq

    if not ran(repeat_rc, repeat):
        return (f"its first run succeeded, an identical second one did not "
                f"({runmod.outcome_line(repeat_rc, repeat, command)}; {traceback_tail(repeat)})")
    n1, n2 = len(steady_ms(first)), len(steady_ms(repeat))
    if n2 < max(seq.MIN_N, n1 // 2):
        return (f"an identical second run timed {n2} steps where the first timed {n1} "
                "(it consumed its input, or resumed from what the first run left)")
    return ""


RERUN_FIX = ("make what it consumes or writes (a checkpoint, a log directory, a dataset it "
             "moves, a port it binds) an argument or let it exist, then run whatif again")


# ------------------------------------------------------------------ judging

#: fewest baseline runs of the bracketed floor: one between two others
BRACKET_BASES = 3
BRACKETED_FLOOR = "perflab.instruments.stats.bracketed_floor_pct"
EXCHANGEABLE_FLOOR = "perflab.instruments.stats.process_floor_pct"


def aa_log_ratios(bases: list[dict], size: int) -> list[float] | None:
    """The A/A analogue of every comparison: each baseline run between two others against
    their geometric mean, as a change's run is against the baselines either side of it (the
    median of its block log differences, :func:`block_log_diffs`), % on the log scale.
    None when a baseline run gave no block to compare."""
    out = []
    for i in range(1, len(bases) - 1):
        d = block_log_diffs([bases[i - 1], bases[i + 1]], bases[i], size)
        if not d:
            return None
        out.append(float(np.median(d)))
    return out


def run_level(ev: dict, size: int) -> float:
    """A run's step wall as the comparisons see it: the geometric mean of its block means, ms."""
    return float(np.exp(np.mean(np.log(blocks(steady_ms(ev), size)))))


def floor_of(bases: list[dict], size: int) -> tuple[float | None, str]:
    """(the between-run floor of this invocation's baseline runs, %; what it is and its
    instrument). Three or more: the bracketed A/A prediction bound (BRACKETED_FLOOR), which
    matches the bracketed comparisons it bounds. Two: the exchangeable floor of their run
    levels (EXCHANGEABLE_FLOOR), labelled as the fallback: a drift between them counts as
    noise. Fewer: None."""
    from perflab.instruments import stats

    aa = aa_log_ratios(bases, size) if len(bases) >= BRACKET_BASES else None
    if aa:
        return stats.bracketed_floor_pct(aa), (
            f"bracketed A/A of {len(bases)} baseline runs, each against the two either side "
            f"of it ({len(aa)} degree{'s' * (len(aa) != 1)} of freedom; {BRACKETED_FLOOR})")
    if len(bases) < 2:
        return None, "not measured (fewer than two baseline runs)"
    return stats.process_floor_pct([run_level(b, size) for b in bases]), (
        f"fallback: {len(bases)} baseline runs taken as exchangeable, fewer than "
        f"{BRACKET_BASES} with a usable bracket, so a drift counts as noise ({EXCHANGEABLE_FLOOR})")


def log_pct(pct: float) -> float:
    """A relative change in % as 100 ln(1 + pct/100): the scale the floor bounds."""
    return 100 * math.log1p(pct / 100)


def pct_of_log(lg: float) -> float:
    return 100 * math.expm1(lg / 100) if math.isfinite(lg) else lg


@dataclass
class Row:
    """One intervention as the table shows it."""

    name: str
    verdict: str
    reason: str = ""
    change_pct: float | None = None  # step wall (block means), intervened vs baseline
    ci_pct: tuple[float, float] | None = None  # the stopping rule's 95 % anytime interval
    runs: int = 0  # fresh runs of the intervention measured
    bound_pct: float | None = None
    first_call_cost_ms: float | None = None
    break_even_steps: float | None = None
    peak_mib: tuple[float | None, float | None] = (None, None)
    peak_metric: str = ""
    per_example_us: tuple[float, float] | None = None  # (baseline, intervened) µs/example
    #: J per step of each side: (median, low, high) of its blocks, None: not measured
    energy_j: tuple[tuple | None, tuple | None] = (None, None)
    energy_how: str = ""
    batch: tuple[int | None, int | None] = (None, None)
    check: str = "no check"
    site: str = ""
    edit: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def gain_pct(self) -> float | None:
        """The step time saved, % of the baseline's step (positive: faster)."""
        return None if self.change_pct is None else -self.change_pct

    @property
    def gain_per_example_pct(self) -> float | None:
        """The time per example saved, % (the step's gain when the batch is unchanged)."""
        if self.per_example_us is None:
            return self.gain_pct
        b, n = self.per_example_us
        return 100 * (b - n) / b if b else None


def judge_runs(diffs: list[float], floor: float | None, max_n: int):
    """The stopping rule (perflab.instruments.sequential.compare) on per-block log diffs
    against the between-run floor on the same log scale."""
    from perflab.instruments import sequential as seq

    return seq.compare(diffs, None if floor is None else log_pct(floor), max_n=max_n)


#: baseline runs beyond which a change inside the floor is not re-run to narrow it (6 degrees
#: of freedom: the bracketed floor's Student factor 2.4, against 4.3 at four baselines)
NARROW_BASES = 8


def another_run(d, floor: float | None, runs: int, max_runs: int, bases: int) -> str:
    """Why a change should run again this round ("" if not): ``undecided`` while its interval
    straddles the floor; ``narrow`` when it was decided inside the floor but its interval
    excludes no change (a change the runs show and the floor cannot resolve), since its run
    and the baseline after it add to the floor's degrees of freedom: a budget left over buys
    a narrower floor (a CPU's ±220 % from four baselines left foreach's −37 % (−45..−2 %)
    unresolved with 76 s of 120 unspent)."""
    from perflab.instruments import sequential as seq

    if floor is None or runs >= max_runs:
        return ""
    if not d.decided and not d.futile:
        return "undecided"
    if d.state == seq.WITHIN_FLOOR and bases < NARROW_BASES and (d.high < 0 or d.low > 0):
        return "narrow"
    return ""


def verdict_of(d, floor: float | None, runs: int) -> tuple[str, str]:
    """(verdict, reason) of a seq.Decision on log diffs, said in % of the step."""
    from perflab.instruments import sequential as seq

    lo, hi = pct_of_log(d.low), pct_of_log(d.high)
    iv = f"interval [{lo:+.1f}, {hi:+.1f}] %" if math.isfinite(lo) and math.isfinite(hi) \
        else "interval unbounded"
    if floor is None:
        return UNRESOLVED, "no between-run floor (fewer than two baseline runs)"
    if d.state == seq.FASTER:
        return FASTER, ""
    if d.state == seq.SLOWER:
        return SLOWER, ""
    if d.state == seq.WITHIN_FLOOR:
        return WITHIN, f"the whole interval lies inside the between-run floor ±{floor:.2g} %"
    return UNRESOLVED, (f"undecided within budget ({runs} run{'s' * (runs != 1)}, {d.n} "
                        f"blocks, {iv}; floor ±{floor:.2g} %)")


#: interventions whose runs draw other random numbers than the baseline's from the same seed:
#: their losses can differ however right the change is, so a difference is not a mismatch
OTHER_STREAM = {
    "loader_workers": "each DataLoader worker draws the dataset's random numbers (augmentation) "
                      "from its own seed",
    "compile_default": "compiled random ops (dropout) draw another stream than eager's",
    "compile_reduce_overhead": "compiled random ops (dropout) draw another stream than eager's",
    "compile_dynamic": "a dynamic graph's random ops (dropout) may draw another stream",
}


def loss_check(name: str, baselines: list[list[float]], new: list[float]) -> str:
    """The intervention's first K losses against the baseline's run-to-run spread, with
    W01's tolerance class for the intervention. W01's loss tolerance bounds one step; the
    first K steps compound a rounding difference, so the limit is K times it (channels-last
    convolutions on a CPU: 2.8e-4 after 5 steps, against 1e-4 for one). Beyond it, an
    intervention that draws other random numbers (OTHER_STREAM) is not checked rather than
    called a mismatch: its losses could not agree from the same seed."""
    from perflab.experiments.w01_whatif import whatif as w01

    base = [b for b in baselines if b]
    if len(base) < 2 or not new:
        return "not checked (fewer than two baseline runs, or no losses recorded)"
    k = min(len(new), *(len(b) for b in base))
    if k == 0:
        return "not checked (no losses recorded)"
    ref = np.asarray(base[0][:k], float)
    scale = np.maximum(np.abs(ref), 1e-12)
    spread = max(float(np.max(np.abs(np.asarray(b[:k], float) - ref) / scale)) for b in base[1:])
    same = w01.TOLERANCES["same arithmetic"]
    if spread > same.loss_rel:
        return NOT_DETERMINISTIC.format(spread)
    iv = w01.REGISTRY.get(name)
    tol = w01.TOLERANCES[iv.tolerance if iv else "reordered"]
    diff = float(np.max(np.abs(np.asarray(new[:k], float) - ref) / scale))
    limit = max(k * tol.loss_rel, 2 * spread)
    said = (f"first {k} losses within {diff:.2g} (relative; limit {limit:.2g}, {tol.name} over "
            f"{k} steps; baseline runs differ by {spread:.2g})")
    if diff <= limit:
        return f"ok: {said}"
    if name in OTHER_STREAM:
        return f"not checked: {OTHER_STREAM[name]}, so the same seed cannot give the same losses ({said})"
    return f"MISMATCH: {said}"


def bound_pct(name: str, entry, shares: dict[str, float]) -> tuple[float | None, str]:
    """W01's phase bound: the share of the baseline's step the touched phases take."""
    from perflab.experiments.w01_whatif import whatif as w01

    touches = tuple(getattr(entry, "touches", ()) or getattr(w01.REGISTRY.get(name), "touches", ()))
    if not touches or not shares:
        return None, "no phase it removes" if not touches else "no phase shares observed"
    total = sum(shares.get(p, 0.0) for p in touches)
    return total, f"{' + '.join(touches)} {total:.1f}% of the step"


def site_of(name: str, ev: dict) -> str:
    """The construction site the patch edits (ev["sites"]; older evidence: the DataLoader's
    site, else the optimizer's step site)."""
    sites = ev.get("sites") or {}
    kind = next((k for pre, k in SITE_KIND.items() if pre in name), "model")
    found = list(sites.get(kind) or [])
    if not found and kind == "loader":
        found = [ld["site"] for ld in ev.get("loaders", []) if ld.get("site")]
    return found[0] if found else ""


def _interval(values: list[float]) -> tuple | None:
    """(median, low, high) of per-block values (the stopping rule's anytime interval of the
    mean: energy blocks are well-behaved), None when there are none."""
    from perflab.instruments import sequential as seq

    if not values:
        return None
    est, lo, hi = seq.interval(values, statistic="mean") if len(values) >= 2 else (
        values[0], -math.inf, math.inf)
    return (float(est), float(lo), float(hi))


def measured_row(name: str, entry, bases: list[dict], pairs: list[tuple[dict, int]],
                 floor: float | None, max_n: int, size: int, shares: dict[str, float],
                 used: dict | None = None) -> Row:
    """The row of an intervention measured in ``pairs`` (its run, the index of the baseline
    run it is paired with): the stopping rule's verdict, and what each side cost."""
    used = used or {}
    diffs = run_diffs(bases, pairs, size)
    d = judge_runs(diffs, floor, max_n)
    verdict, reason = verdict_of(d, floor, len(pairs))
    row = Row(name, verdict, reason, change_pct=pct_of_log(d.estimate),
              ci_pct=(pct_of_log(d.low), pct_of_log(d.high)), runs=len(pairs))
    row.extra["decision"] = d
    row.bound_pct, bound_from = bound_pct(name, entry, shares)
    row.extra["bound_from"] = bound_from
    new_evs = [ev for ev, _ in pairs]
    base_steps = [v for b in bases for v in steady_ms(b)]
    new_steps = [v for ev in new_evs for v in steady_ms(ev)]
    base_first = float(np.median([first_call_ms(b) for b in bases]))
    row.first_call_cost_ms = float(np.median([first_call_ms(ev) for ev in new_evs])) - base_first
    saving = float(np.mean(base_steps) - np.mean(new_steps))  # the wall per step, mean
    if verdict == FASTER and saving > 0 and row.first_call_cost_ms > 0:
        # only a saving the floor resolves pays anything back (a newcomer read "compile:
        # +10857 ms (17160 steps)" on a change within the floor)
        row.break_even_steps = row.first_call_cost_ms / saving
    recompiles = (len(bases[0].get("recompiles") or []), len(new_evs[0].get("recompiles") or []))
    if any(recompiles):
        row.extra["recompiles"] = recompiles  # Dynamo's count in each side's first run
    bp, metric = peak_mib(bases[0])
    row.peak_mib, row.peak_metric = (bp, max((peak_mib(ev)[0] or 0.0 for ev in new_evs),
                                             default=None) or None), metric
    bs, ns = batch_size(bases[0]), batch_size(new_evs[0]) or batch_size(bases[0])
    row.batch = (bs, ns)
    if bs and math.isfinite(row.change_pct):
        # the new side from the judged change, not from the runs' plain means: the two
        # disagreed in sign on a change inside the noise (+1.4 % a step, +2.5 % an example)
        # the median step, as the runs' lines say (a stalled run's mean read 3.0 ms an
        # example on a 44 ms step of 32 examples: a newcomer's CPU, busy)
        per = 1e3 * float(np.median(base_steps)) / bs
        row.per_example_us = (per, per * (1 + row.change_pct / 100) * bs / ns)
    base_e, how = [], ""
    for b in bases:
        e, how = energy_blocks(b, size)
        base_e += e
    new_e = [v for ev in new_evs for v in energy_blocks(ev, size)[0]]
    row.energy_j, row.energy_how = (_interval(base_e), _interval(new_e)), how
    row.check = loss_check(name, [b.get("losses") or [] for b in bases],
                           new_evs[0].get("losses") or [])
    row.site = site_of(name, bases[0])
    p = new_evs[0].get("patch") or {}
    if p.get("where"):
        row.site = p["where"][0]
    try:
        # the device the patch acted on (autocast's: 'cpu' on a CPU run, not the default)
        acted = {"device": p["device"]} if p.get("device") else {}
        row.edit = entry.edit(row.site, {**getattr(entry, "params", {}), **acted, **used}) \
            if row.site else ""
    except Exception as exc:  # the diff is an explanation, never a reason to lose the row
        row.edit = f"(no diff: {exc})"
    return row


def ranked(rows: list[Row]) -> list[Row]:
    """Faster first by measured gain per example (per step where the batch is unknown), then
    within the floor, not resolved, slower, failed, not run, not applicable."""
    rank = {FASTER: 0, WITHIN: 1, UNRESOLVED: 2, SLOWER: 3, FAILED: 4, NOT_RUN: 5,
            NOT_APPLICABLE: 6}
    return sorted(rows, key=lambda r: (rank.get(r.verdict, 7), -(r.gain_per_example_pct or 0.0),
                                       -(r.gain_pct or 0.0)))


# ------------------------------------------------------------------ output

def _f(v, fmt="{:+.1f}", none="") -> str:
    return none if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _energy(iv: tuple | None, per: int | None = None) -> str:
    """'0.52 J [0.50, 0.55]' (per step, or per example when ``per`` is the batch)."""
    if iv is None:
        return "?"
    k = 1 / per if per else 1.0
    est, lo, hi = (v * k for v in iv)
    band = f" [{lo:.3g}, {hi:.3g}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    return f"{est:.3g}{band}"


def energy_cell(r: Row) -> str:
    if r.energy_j == (None, None):
        return r.energy_how
    step = f"J/step {_energy(r.energy_j[0])} → {_energy(r.energy_j[1])}"
    if r.batch[0]:
        step += (f"; J/example {_energy(r.energy_j[0], r.batch[0])} → "
                 f"{_energy(r.energy_j[1], r.batch[1] or r.batch[0])}")
    return step


def markdown(rows: list[Row], head: list[str]) -> str:
    lines = [*head, "",
             "| intervention | verdict | step change % (95% anytime interval) [runs] | "
             "bound % | gain per example % | first-call cost ms (break-even steps) | "
             "peak MiB base→new | energy base→new (95% interval) | losses | where |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in ranked(rows):
        if r.change_pct is None:
            why = r.reason.replace("|", "/")
            lines.append(f"| {r.name} | {r.verdict} | {why} | | | | | | | |")
            continue
        ci = (f" ({r.ci_pct[0]:+.1f}..{r.ci_pct[1]:+.1f})" if r.ci_pct and all(
            math.isfinite(v) for v in r.ci_pct) else " (interval unbounded)")
        be = f" ({r.break_even_steps:.0f})" if r.break_even_steps else ""
        if r.extra.get("recompiles"):
            be += " recompiles {}→{}".format(*r.extra["recompiles"])
        pe = (_f(r.gain_per_example_pct) + f" ({r.per_example_us[0]:.3g}→"
              f"{r.per_example_us[1]:.3g} µs/example)" if r.per_example_us
              else "batch size unknown")
        pk = (f"{_f(r.peak_mib[0], '{:.0f}', '?')}→{_f(r.peak_mib[1], '{:.0f}', '?')} "
              f"({r.peak_metric})")
        edit = " / ".join(t.strip() for t in r.edit.splitlines())
        where = (f"`{r.site}`" + (f" `{edit}`" if edit else "")) if r.site else "no site found"
        bound = _f(r.bound_pct, "{:.0f}", "n/a") + (
            f" ({r.extra['bound_from']})" if r.extra.get("bound_from") else "")
        cells = [r.name, r.verdict + (": " + r.reason if r.reason else ""),
                 f"{r.change_pct:+.1f}{ci} [{r.runs}]", bound, pe,
                 f"{_f(r.first_call_cost_ms, '{:+.0f}')}{be}", pk, energy_cell(r), r.check, where]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def rows_csv(rows: list[Row]) -> list[dict]:
    """CSV-contract rows (perflab.core.io): one per number, unsupported rows with the reason."""
    from perflab.attach import verdict as vmod

    out = []
    for r in rows:
        if r.change_pct is None:
            status = "error" if r.verdict == FAILED else "unsupported"
            out.append(vmod._row("whatif", r.name, "step_latency_rel", "median", None, "%",
                                 "steady", status, f"{r.verdict}: {r.reason}"))
            continue
        e_b, e_n = r.energy_j
        for metric, value, unit in (
                ("step_latency_rel", r.change_pct, "%"),
                ("step_latency_rel_ci_low", r.ci_pct[0], "%"),
                ("step_latency_rel_ci_high", r.ci_pct[1], "%"),
                ("example_time_gain", r.gain_per_example_pct, "%"),
                ("first_call_cost", r.first_call_cost_ms, "ms"),
                ("break_even_steps", r.break_even_steps, "steps"),
                ("recompiles_base", (r.extra.get("recompiles") or (None, None))[0], "count"),
                ("recompiles", (r.extra.get("recompiles") or (None, None))[1], "count"),
                ("peak_change", None if None in r.peak_mib else r.peak_mib[1] - r.peak_mib[0], "MiB"),
                ("energy_per_step_base", e_b and e_b[0], "J"),
                ("energy_per_step", e_n and e_n[0], "J"),
                ("energy_per_step_ci_low", e_n and e_n[1], "J"),
                ("energy_per_step_ci_high", e_n and e_n[2], "J")):
            if metric.startswith("recompiles") and value is None:
                continue  # no recompile on either side: no row
            ok = value is not None and math.isfinite(value)
            why = (r.energy_how if metric.startswith("energy") else
                   "no saving resolved beyond the floor to pay it back"
                   if metric == "break_even_steps" else
                   "not measured in this run")
            out.append(vmod._row("whatif", r.name, metric, "median", value if ok else None,
                                 unit, "steady", "ok" if ok else "unsupported", "" if ok else why))
    return out


def floor_row(floor: float | None, how: str) -> dict:
    """The between-run floor every change was judged against, as a CSV-contract row whose
    reason names the floor used and its instrument."""
    from perflab.attach import verdict as vmod

    ok = floor is not None
    return vmod._row("whatif", BASELINE, "between_run_floor", "value", floor, "%", "steady",
                     "ok" if ok else "unsupported", how)


# ------------------------------------------------------------------ the runs

@dataclass
class Plan:
    """What one invocation runs, and what it has measured so far."""

    command: list[str]
    settings: object  # patch spec | None -> the child's settings
    out_dir: Path
    runner: object
    budget: float | None
    params: dict
    started: float = field(default_factory=time.perf_counter)
    est: float = 0.0  # seconds a run takes: light_wall_s of the first, then the runs' mean
    walls: list[float] = field(default_factory=list)  # the walls of the runs after the first
    bases: list[dict] = field(default_factory=list)
    pairs: dict[str, list[tuple[dict, int]]] = field(default_factory=dict)
    failed: dict[str, dict | None] = field(default_factory=dict)
    count: int = 0
    since_base: int = 0  # intervention runs since the last baseline run

    def wants_base(self) -> bool:
        """Run the next baseline? Always after an intervention run (its bracket); the opening
        one only where an intervention and its bracket fit after it; one for the floor alone
        (the bracketed floor's third) only where the budget has room, and none before any
        intervention has run: a floor that gates nothing is not worth a run. Before any light
        run the estimate is the diagnosis run's wall less its instruments, a bound from above
        (its compile cache cold: 80 s on an H100 where each later run took 24-27 s), so the
        opening baseline, owed by the first change anyway, runs where it alone fits: it
        measures what a light run costs."""
        if self.since_base > 0:
            return True
        if not self.bases:
            return self.fits(3) or (not self.walls and self.fits(1))
        return bool(self.pairs or self.failed) and self.fits(1)

    def owed(self) -> int:
        """The runs an intervention run commits the plan to: itself and the baseline after it
        (its bracket), and the one before it if none has run. The floor's third baseline is
        not owed: an H100's 80 s budget on a 17 s run (34 s for the profiled first) once left
        no change measured because the count reserved it; two baselines give the exchangeable
        floor, said as the fallback."""
        return 2 if self.bases else 3

    def fits(self, runs: int) -> bool:
        return self.budget is None or \
            time.perf_counter() - self.started + self.est * runs <= self.budget

    def run(self, p: str | None) -> tuple[int, dict | None, float]:
        self.count += 1
        first = self.count == 1
        tag = "diagnosis" if first else p or "baseline"
        n = len(self.pairs.get(p, [])) + 1 if p else len(self.bases) + 1
        spec = {"name": p, **self.params.get(p, {})} if p else None
        rc, ev, wall = self.runner(self.command, self.settings(spec, first),
                                   self.out_dir / (tag if first else f"{tag}-{n}"))
        if self.count > 1:
            self.walls.append(wall)
            self.est = float(np.mean(self.walls))
        state = ("FAILED" if not ran(rc, ev) else
                 f"median step {np.median(steady_ms(ev)):.3g} ms")
        print(f"[{self.count}] {tag}{'' if first else f' #{n}'}: {state}, {wall:.1f} s "
              f"({time.perf_counter() - self.started:.0f} s spent)", file=sys.stderr)
        return rc, ev, wall


def whatif(argv: list[str], *, steps: int = DEFAULT_STEPS, warmup: int = 3, loss_steps: int = 5,
           seed: int = 0, budget: float | None = None, out: str | None = None,
           only: list[str] | None = None, params: dict | None = None,
           max_runs: int = MAX_RUNS, runner=None) -> int:
    """Run the plan; print the ranked table; write whatif.md/.csv. ``runner`` (tests) stands
    in for run.run_child."""
    from perflab.attach import verdict as vmod
    from perflab.core import io

    try:
        command = runmod.command_of(argv)
        runmod.check_script(command)
        if max_runs < 1 or steps < 2:
            raise WhatifError(f"--max-runs {max_runs} and --steps {steps}: give at least 1 "
                              "run and 2 steps")
    except runmod.RunError as exc:
        print(f"perflab whatif: {exc}", file=sys.stderr)
        return 2
    name = Path(command[1] if command[0] == "-m" else command[0]).stem
    out_dir = Path(out or Path("perflab-run") / f"{name}-whatif-{time.strftime('%Y%m%d-%H%M%S')}")
    script_dir = Path(command[0]).resolve().parent if command[0] != "-m" else Path.cwd()

    def settings(patch: dict | None, first: bool = False) -> dict:
        # only the first baseline's evidence is judged (the diagnosis): the other runs are
        # read for their step walls, losses and memory, so they skip the profiler's trace and
        # the work counters and ceilings (on an H100, 8 s and more of a 26 s run)
        return {"steps": steps, "seconds": None, "follow": False, "warmup": warmup,
                "roots": [str(script_dir), str(Path.cwd())], "no_step_s": NO_STEP_S,
                "patch": patch, "seed": seed, "loss_steps": loss_steps,
                "no_profile": not first, "no_work": not first}

    def child(cmd, run_settings, run_dir):
        # every run's output in its directory's output.log, the diagnosis run's too (its
        # script's prints and the profiler's own lines took half a newcomer's screen); a
        # run that breaks says its traceback, and the diagnosis run its log's tail
        return runmod.run_child(cmd, run_settings, run_dir, log=True)

    plan = Plan(command, settings, out_dir, runner or child, budget, params or {})
    # the diagnosis run: profiled and its work counted, so its steps are not a baseline's (an
    # H100's optimizer-bound script: 80 ms a step against its light repeats' 60; a CPU's
    # CNN: 67 against 75), and it is never compared; the baselines are light runs like the
    # interventions', from the first after it
    print(f"perflab whatif: [1] the diagnosis run (profiled; its output in "
          f"{out_dir / 'diagnosis' / runmod.CHILD_LOG})", file=sys.stderr)
    rc, ev, wall = plan.run(None)
    if not ran(rc, ev):
        tail = runmod.log_tail(out_dir / "diagnosis")
        print(f"perflab whatif: the diagnosis run gave no timed steps: "
              f"{runmod.outcome_line(rc, ev, command)}; {traceback_tail(ev)}"
              + (f"\nits output's last lines:\n{tail}" if tail else ""), file=sys.stderr)
        return rc or 1
    plan.est = light_wall_s(ev, wall)
    d, s, _ = vmod.judge(ev, out_dir / "diagnosis")
    print(f"baseline: verdict {d.verdict}", file=sys.stderr)
    registry = patches()
    rows: list[Row] = []
    applicable = []
    for n, entry in registry.items():
        if only and n not in only:
            continue
        why = entry.applies(ev)
        if why:
            rows.append(Row(n, NOT_APPLICABLE, why))
        else:
            applicable.append(n)
    names = order(applicable, d.verdict)
    n_steps = len(steady_ms(ev))
    size = block_size(n_steps)
    max_n = max_runs * max(1, n_steps // size)
    first = schedule(names, opening=True)
    print(f"perflab whatif: round 1: {len(first)} more runs of ~{plan.est:.0f} s each, "
          f"~{plan.est * len(first):.0f} s: " + ", ".join(p or BASELINE for p in first)
          + (f"; budget {budget:.0f} s" if budget else "")
          + f"; undecided changes get up to {max_runs} runs", file=sys.stderr)
    todo = first if names else []
    # rounds until no change wants another run: each change runs at most max_runs times,
    # so this ends; a change the floor leaves undecided only once more baselines have
    # narrowed it (a CPU's autocast at round 3 of 3, with one run) still gets its runs
    rnd = 0
    while todo:
        rnd += 1
        for p in todo:
            if p is not None and not plan.fits(plan.owed()):
                if rnd == 1:
                    rows.append(Row(p, NOT_RUN, f"not run: budget ({budget:.0f} s; "
                                f"{time.perf_counter() - plan.started:.0f} s spent, "
                                f"~{plan.est:.0f} s a run)"))
                continue
            if p is None and not plan.wants_base():
                continue
            rc2, ev2, _ = plan.run(p)
            plan.since_base = 0 if p is None else plan.since_base + 1
            if p is None:
                problem = rerun_problem(ev, rc2, ev2, command)
                if problem:
                    msg = f"the script cannot be re-run: {problem}. To measure it, {RERUN_FIX}"
                    print(f"perflab whatif: {msg}", file=sys.stderr)
                    io.atomic_write_text(out_dir / "whatif.md",
                                         f"# perflab whatif: {' '.join(command)}\n\n{msg}\n")
                    return rc2 or 1
                plan.bases.append(ev2)
            elif not ran(rc2, ev2):
                plan.failed[p] = ev2
            elif not ((ev2 or {}).get("patch") or {"applied": True}).get("applied", True):
                pr = ev2["patch"]
                rows.append(Row(p, NOT_APPLICABLE, f"not applied: {pr.get('error') or pr.get('detail')}"))
            else:
                plan.pairs.setdefault(p, []).append((ev2, len(plan.bases) - 1))
        floor, _ = floor_of(plan.bases, size)
        why = {p: another_run(judge_runs(run_diffs(plan.bases, prs, size), floor, max_n),
                              floor, len(prs), max_runs, len(plan.bases))
               for p, prs in plan.pairs.items() if p not in plan.failed}
        # the undecided first: the budget goes to them before a narrower floor
        pending = [p for p in why if why[p] == "undecided"] + \
            [p for p in why if why[p] == "narrow"]
        while pending and not plan.fits(len(schedule(pending, repeats=1))):
            pending.pop()  # the last is the diagnosis's least: the budget goes to the first
        if not pending:
            break
        todo = schedule(pending, repeats=1)
        said = {"undecided": "still undecided", "narrow": "inside the floor, run again to narrow it"}
        print(f"perflab whatif: round {rnd + 1}: " + "; ".join(
            f"{said[k]}: {', '.join(p for p in pending if why[p] == k)}"
            for k in said if any(why[p] == k for p in pending)), file=sys.stderr)
    floor, floor_how = floor_of(plan.bases, size)
    for p, ev2 in plan.failed.items():
        if p not in plan.pairs:
            rows.append(Row(p, FAILED, f"the patched run raised: {traceback_tail(ev2)}"))
    for p, prs in plan.pairs.items():
        row = measured_row(p, registry[p], plan.bases, prs, floor, max_n, size,
                           s.phase_share_pct, plan.params.get(p))
        over = [d for d in ((prs[0][0].get("patch") or {}).get("detail") or "").split("; ")
                if d.startswith("oversubscribed:")]  # the patch's own word on its runs' times
        row.reason = "; ".join(filter(None, [row.reason, *over]))
        if p in plan.failed:  # a later round's run raised where the first ran: said, kept
            row.reason = "; ".join(filter(None, [row.reason, "a later run of it raised: "
                                                 + traceback_tail(plan.failed[p])]))
        rows.append(row)
    spent = time.perf_counter() - plan.started
    head = [f"# perflab whatif: {' '.join(command)}", "",
            f"- baseline: {len(plan.bases)} runs, {steps} steps each ({warmup} warm-up), "
            f"seed {seed}, each timed as the interventions' runs are (the profiled diagnosis "
            "run before them is not compared: its instruments move its step time); "
            "between-run floor "
            + (f"±{floor:.2g} % ({floor_how})" if floor is not None else floor_how),
            f"- diagnosis: {d.verdict} (perflab.attach.verdict); its interventions ran first",
            f"- each change: per-block ({size} steps, mean wall) log differences against the baseline runs "
            "either side of it, decided by the stopping rule (perflab.instruments.sequential.compare) "
            f"against the floor; undecided changes re-run in rounds, up to {max_runs} runs each",
            f"- {plan.count} runs, {spent:.0f} s" + (f" of a {budget:.0f} s budget" if budget else ""),
            "- energy: " + (rows_energy_note(rows) or "no intervention measured")]
    busy = busy_note(plan.bases)
    if busy:
        head.insert(4, busy)
    md = markdown(rows, head)
    print(summary(rows, head[2:4] + ([busy] if busy else []), floor))
    io.atomic_write_text(out_dir / "whatif.md", md)
    io.write_results(out_dir / "whatif.csv", [*rows_csv(rows), floor_row(floor, floor_how)])
    print(f"whatif: {out_dir / 'whatif.md'}, rows: {out_dir / 'whatif.csv'}", file=sys.stderr)
    return 0


#: a baseline run whose median step is this many times the baselines' median (or under its
#: inverse) was slowed by something else on the machine: identical runs do not differ so
BUSY_RATIO = 1.5


def busy_note(bases: list[dict]) -> str:
    """A line naming the baseline runs a busy machine stalled ("" when none was): they are
    identical runs, so one far from the others' median is the machine, not the script, and
    it widens the floor every change is judged against (a newcomer's 2-core CPU: one
    baseline at 360 ms a step against 45, a floor of ±2600 %, and no change decided)."""
    meds = [float(np.median(steady_ms(b))) for b in bases if steady_ms(b)]
    if len(meds) < 2:
        return ""
    mid = float(np.median(meds))
    odd = [(i, m) for i, m in enumerate(meds, 1) if m > BUSY_RATIO * mid or m < mid / BUSY_RATIO]
    if not odd:
        return ""
    return ("- the machine was busy: " + ", ".join(f"baseline #{i} ran {m:.3g} ms a step"
                                                   for i, m in odd)
            + f" against the baselines' median {mid:.3g} ms; identical runs, so the floor "
            "widened by them is the machine's (run again on a quiet machine)")


#: a first-call (compile) difference this large is said on the change's terminal line
FIRST_CALL_SAID_MS = 1000.0


def first_call_note(r: Row) -> str:
    """The change's first-call cost where it is seconds (a compile change): on a CPU the
    recompiling script's dynamic=True left the steady step within the floor (-3.8 %) and
    saved 3.7 s of compiles (8 -> 1), which only whatif.md said."""
    c = r.first_call_cost_ms
    if c is None or not math.isfinite(c) or abs(c) < FIRST_CALL_SAID_MS:
        return ""
    recompiles = r.extra.get("recompiles")
    return (f"  first call {c / 1e3:+.1f} s"
            + (f", recompiles {recompiles[0]}→{recompiles[1]}" if recompiles else ""))


def summary(rows: list[Row], head: list[str], floor: float | None = None) -> str:
    """The terminal's one screen: a line per measured change (verdict, change and interval,
    where), the rows that did not run grouped by why, and the first speed-up's diff;
    whatif.md has every column (bound, first-call cost, memory, energy, losses). The floor
    bounds the log ratio, so its speed-up side is said in % too (a newcomer read −10.6 %
    beside "±11 %" as inside it; a speed-up passes it below −9.9 %)."""
    out = [*head]
    if floor is not None:
        out.append(f"- beyond the floor: faster below {pct_of_log(-log_pct(floor)):+.1f} % a "
                   f"step (the estimate), slower above {floor:+.1f} %")
    out.append("")
    measured = [r for r in ranked(rows) if r.change_pct is not None]
    width = max((len(r.name) for r in rows), default=10)
    for r in measured:
        ci = (f" ({r.ci_pct[0]:+.1f}..{r.ci_pct[1]:+.1f})" if r.ci_pct and all(
            math.isfinite(v) for v in r.ci_pct) else "")
        where = r.site.partition(": ")[0] or "?"
        out.append(f"  {r.name:<{width}}  {r.verdict.split(':')[0]:<16} "
                   f"{r.change_pct:+.1f} %{ci} [{r.runs} run{'s' * (r.runs != 1)}]  {where}"
                   + ("  losses: " + r.check.split(":")[0] if not r.check.startswith("ok")
                      else "")
                   + "".join(f"  ({d.split(' (')[0]})" for d in r.reason.split("; ")
                             if d.startswith("oversubscribed:"))
                   + first_call_note(r))
    for verdict in (FAILED, NOT_RUN, NOT_APPLICABLE):
        group = [r for r in rows if r.verdict == verdict and r.change_pct is None]
        if group:
            why = {r.reason.split(" (")[0] for r in group}
            out.append(f"  {verdict}: {', '.join(r.name for r in group)}"
                       + (f" ({next(iter(why))})" if len(why) == 1 else ""))
    best = next((r for r in measured if r.verdict == FASTER and r.edit), None)
    if best:
        out += ["", f"the change to make ({best.name}, {best.change_pct:+.1f} % a step), at "
                f"{best.site.partition(': ')[0]}:", *("  " + x for x in best.edit.splitlines())]
    elif not any(r.verdict == FASTER for r in measured):
        out += ["", "no change measured faster beyond the between-run floor"]
    return "\n".join(out)


def rows_energy_note(rows: list[Row]) -> str:
    """How energy was measured (or why not), once for the table."""
    return next((r.energy_how for r in rows if r.energy_how), "")


# ------------------------------------------------------------------ command line

def add_after_run(p) -> None:
    """`perflab run --whatif` (perflab.cli: perflab.attach.run cannot import this module,
    which imports it)."""
    p.add_argument("--whatif", action="store_true",
                   help="then measure each intervention that applies, as perflab whatif of the "
                   "same command does (its own seeded baseline runs; docs/whatif-script.md)")


def after_run(args, extra: list[str], rc: int) -> int:
    """The last step of `perflab run --whatif`, as diagnose's W01 is of diagnose: whatif
    starts its own baseline (fixed steps, a seed, losses kept), which the run's (timed by
    seconds, unseeded) cannot stand in for. Not after a run that failed."""
    if rc != 0 or not getattr(args, "whatif", False):
        return rc
    print("perflab run --whatif: each intervention that applies, measured", file=sys.stderr)
    return whatif([*args.script, *extra], steps=args.steps or DEFAULT_STEPS,
                  warmup=args.warmup, seed=args.seed or 0,
                  out=str(Path(args.out) / "whatif") if args.out else None)


_VALUED = ("--steps", "--warmup", "--out", "--budget", "--loss-steps", "--seed", "--only", "--set",
           "--max-runs")


def is_script_form(words: list[str]) -> bool:
    """`perflab whatif` of a script (python/python3 first, a .py, or -m) rather than a Workload."""
    if "--" in words:
        after = words[words.index("--") + 1:]
        first = after[0] if after else ""
        return first == "-m" or Path(first).name in runmod._PYTHONS or first.endswith(".py")
    first = next((a for k, a in enumerate(words) if not a.startswith("-")
                  and (k == 0 or words[k - 1] not in _VALUED)), "")
    return Path(first).name in runmod._PYTHONS or first.endswith(".py")


def add_arguments(p) -> None:
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"timed steps of every run (default {DEFAULT_STEPS})")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps left out (default 3)")
    p.add_argument("--loss-steps", type=int, default=5, help="first K losses compared (default 5)")
    p.add_argument("--seed", type=int, default=0, help="the script's RNG seed in every run")
    p.add_argument("--budget", help="wall budget, e.g. 90s or 3m: what does not fit is a "
                   "'not run: budget' row")
    p.add_argument("--max-runs", type=int, default=MAX_RUNS,
                   help=f"fresh runs of an undecided change at most (default {MAX_RUNS})")
    p.add_argument("--only", help="comma-separated intervention names")
    p.add_argument("--set", action="append", default=[], metavar="NAME:K=V,...",
                   help="a patch's parameters, e.g. loader_workers:num_workers=4 (repeatable)")
    p.add_argument("--out", help="where the runs and whatif.md/.csv go")
    p.add_argument("script", nargs="*", help="the script and its arguments (or after --)")


def main(argv: list[str] | None = None) -> int:
    import argparse

    head, command = runmod.split_argv(list(sys.argv[1:] if argv is None else argv))
    p = argparse.ArgumentParser(prog="perflab whatif",
                                description="each intervention measured: docs/whatif-script.md")
    add_arguments(p)
    a = p.parse_args(head)
    from perflab.kit import sampling

    try:
        budget = None if a.budget is None else sampling.parse_budget_s(a.budget)
        params = parse_params(a.set)
    except (ValueError, WhatifError) as exc:
        print(f"perflab whatif: {exc}", file=sys.stderr)
        return 2
    return whatif([*a.script, *command], steps=a.steps, warmup=a.warmup, loss_steps=a.loss_steps,
                  seed=a.seed, budget=budget, out=a.out,
                  only=a.only.split(",") if a.only else None, params=params,
                  max_runs=a.max_runs)


if __name__ == "__main__":
    sys.exit(main())
