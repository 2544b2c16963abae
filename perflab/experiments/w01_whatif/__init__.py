"""W01, what if: every intervention that applies to the workload, measured on its step.

The chapter's method is measure -> localize -> intervene -> remeasure; E25 closes it for one
intervention on one model. W01 closes it for the workload at hand: a plan job reads which
interventions of :mod:`perflab.experiments.w01_whatif.whatif` apply (the rest are rows saying why not), then each
runs in a fresh process of its own (``scripts/w01_whatif.py``): the baseline loop and the
intervened one built from identical state, each first call timed (compile included), one
step of each compared (loss, gradients, update) within a stated tolerance, both warmed,
then interleaved free-running blocks judged by :func:`perflab.instruments.stats.judge`, and the peak
memory of each side alone. This module names the rows, ranks the interventions by the
measured gain (re-judged against C00's A/A floor when the run has one) and sets beside
each the bound the localization predicted (E05's phase shares, E13's sync tax, R01's
roofline), so the reader sees whether the mechanism explains the gain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from perflab.core.names import SAMPLING_DECISION
from perflab.experiments import (
    ConfigProblem,
    ConfigView,
    Experiment,
    e05_phases,
    e13_sync_tax,
    r01_roofline,
)
from perflab.experiments import floors as calibration
from perflab.experiments.w01_whatif import whatif
from perflab.instruments import ab
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

EID = "W01"
ENTRY = Experiment(
    EID,
    "whatif",
    "What if: each intervention that applies, measured against the baseline in its own process",
    "whatif",
    cpu_behaviour="CUDA-only interventions (fp16 with a GradScaler, CUDA graphs, pinned "
                  "memory) are rows saying why; peak memory is the VmHWM of a fresh process "
                  "per side",
    extra_outputs=(("md", ".md"),),
    report_section="26 · What if: each intervention measured",
    in_all=False,  # up to 3 min on the H200: perflab whatif / diagnose, or run=all,W01,
    own_rules=True,
)

#: its parameters (config key ``experiments.W01``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
# or a list, e.g. [fused_optimizer, compile_default]; each must apply
interventions:
  description: all, or a list of intervention names (perflab.experiments.w01_whatif.whatif.NAMES; checked in perflab/pipeline/config.py, each must apply)
  oneOf:
    - {type: string, enum: [all]}
    - {type: array, minItems: 1, items: {type: string}}
  default: all
# interleaved blocks per side (AB/BA), judged by perflab.instruments.stats.judge
blocks: {type: integer, minimum: 2, default: 12}
# steps per block, timed as free-running stretches of up to 10
inner: {type: integer, minimum: 1, default: 30}
# the baseline loop reads the loss on the host every step (E05's logging)
read_every:
  description: the baseline loop reads the loss on the host every N steps (0 never)
  type: integer
  minimum: 0
  default: 1
# device_accumulator: the loss summed on the device, read every 50 steps
log_every:
  description: the device accumulator's host read, every N steps
  type: integer
  minimum: 2
  default: 50
# larger_batch: this many times the workload's batch
batch_factor: {type: integer, minimum: 2, default: 2}
# loader_workers: the rebuilt DataLoader's workers; 0 = the job's cores
loader_workers:
  description: DataLoader workers of the rebuilt loader; 0 = the job's cores
  type: integer
  minimum: 0
  default: 0
# steps of each side alone for its peak memory (0: not measured)
peak_calls:
  description: steps of each side alone for its peak memory; 0 = not measured
  type: integer
  minimum: 0
  default: 3
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
# no compile and no peak processes at the tiny contract: they would dominate the test run
# (tests/test_w01_whatif.py measures both)
SCALES = {"tiny": {'interventions': ['fused_optimizer', 'autocast_bf16', 'device_accumulator', 'larger_batch'], 'blocks': 6, 'inner': 4, 'log_every': 4, 'peak_calls': 0}}
NO_CLAIMS = ("W01 measures the interventions that apply to the workload at hand; the "
             "chapter's one worked intervention is E25's claim C43")

# ------------------------------------------------------------------ the names its jobs write

BASELINE, INTERVENED, CHANGE, CHECK, PLAN, JOB = (
    "baseline", "intervened", "change", "check", "plan", "job")
PROBE = "probe"  # the plan job's reading of the workload's memory
APPLIES = "applies"  # plan: 1 when it applies, else an unsupported row with the reason
ACTIVATION_MEMORY, PERSISTENT_MEMORY = "activation_memory", "persistent_memory"
THROUGHPUT = "throughput"
THROUGHPUT_REL = f"{THROUGHPUT}{ab.REL}"  # % change of examples/s, intervened vs baseline
FIRST_CALL = "first_call"  # ms of each side's first call in its process
FIRST_CALL_COST = "first_call_cost"  # first call minus the side's steady step, ms
BREAK_EVEN = "break_even_steps"  # steps for the saving to repay the first-call cost
GRAPH_BREAKS = "graph_breaks"
#: compile_dynamic, per side: what the compiler did in its warm-up steps
RECOMPILES, GRAPHS, EAGER_FALLBACK = "recompiles", "graphs_compiled", "eager_fallback"
PEAK_CHANGE = "peak_change"  # intervened minus baseline peak, MiB (each side alone)
CHECK_METRICS = ("loss_rel_diff", "grad_rel_diff", "update_rel_diff")
TOLERANCE_SUFFIX = "_tol"
CORRECT = "correct"  # 1 when every check number is inside its tolerance, 0 when one is not;
#: a row saying "not decidable: why" where the baseline is not repeatable enough to judge
#: the baseline's first step run twice, from the same state, batch and RNG state: each check
#: number of the baseline against itself (the check decides only where these are small)
SELF_PREFIX = "self_"
#: the check's TF32 scale (CUDA, TF32 on): the baseline's first step as run against strict
#: fp32, loss and gradient relative differences (perflab.experiments.w01_whatif.whatif.tf32_aware's scale)
TF32_SCALE_METRICS = ("tf32_loss_rel_diff", "tf32_grad_rel_diff")
JOB_WALL = "job_wall"  # s, the intervention's whole fresh process (from its provenance)
#: JOB_WALL of the whole set: its jobs' own wall time summed (the plan's included), and
#: the span from the plan's start to the last job's results (other jobs may run between)
ALL_JOBS, SPAN = "all_jobs", "span"
#: the peak metric the change is taken on: the allocator's on CUDA, VmHWM on a CPU
PEAK_METRICS = ("peak_allocated", "peak_rss")


def variant(name: str, part: str) -> str:
    return f"{name}/{part}"


def throughput_change(time_change_pct: float) -> float:
    """The % change of examples/s when the time per example changes by ``time_change_pct``."""
    return 100 * (100 / (100 + time_change_pct) - 1)


def judged_metric(name: str) -> str:
    iv = whatif.REGISTRY.get(name)
    return iv.judged if iv else whatif.STEP_LATENCY


# ------------------------------------------------------------------ reading one intervention

FASTER, SLOWER, UNRESOLVED, NOT_APPLICABLE, FAILED = (
    "faster", "slower", "not resolved", "does not apply", "failed")
#: why a measured change is not resolved in a run without C00
NO_FLOOR = ("no A/A floor (C00 did not run): a change is resolved only beyond what two "
            "copies of the same step differ by")


@dataclass
class Outcome:
    """One intervention as the table shows it."""

    name: str
    verdict: str
    reason: str = ""
    change_pct: float | None = None  # of the judged time (step, or per example)
    ci_pct: tuple[float, float] | None = None
    throughput_pct: float | None = None
    bound_pct: float | None = None  # the most the localization says it can save, %
    bound_from: str = ""
    correct: bool | None = None  # None: no check, or not decidable (check_verdict says)
    check: str = ""
    check_verdict: str = "no check"  # whatif.OK, MISMATCH, NOT_DECIDABLE, or "no check"
    sampling: str = ""  # the adaptive A/B's decision line; "" under the fixed rule

    @property
    def gain_pct(self) -> float | None:
        return None if self.change_pct is None else -self.change_pct


def _value(r: pd.DataFrame, v: str, metric: str, statistic: str = "value") -> float | None:
    cell = pick(r, v, metric, statistic)
    return None if isinstance(cell, Missing) else float(cell)


def _why_not(r: pd.DataFrame, name: str) -> tuple[str, str] | None:
    """(verdict, reason) when the intervention was not measured."""
    plan = pick(r, variant(name, PLAN), APPLIES, "value")
    if isinstance(plan, Missing) and plan.status != "not run":
        return NOT_APPLICABLE, plan.reason
    change = pick(r, variant(name, CHANGE), judged_metric(name), "value")
    if isinstance(change, Missing):
        if change.status == "not run" and isinstance(plan, Missing):
            return None
        return (NOT_APPLICABLE if change.status == "unsupported" else FAILED,
                change.reason or change.status)
    return None


def outcome(frame: pd.DataFrame, name: str) -> Outcome | None:
    """The intervention's measured change, verdict, bound and check; None when absent."""
    r = rows_of(EID, frame)
    why = _why_not(r, name)
    if why is not None:
        return Outcome(name, *why)
    metric = judged_metric(name)
    ch = variant(name, CHANGE)
    rel = _value(r, ch, metric + ab.REL)
    if rel is None:
        return None
    effect = _value(r, ch, "ab_effect_rel")
    # the judgement's interval, relative to the same baseline as its effect: A's block medians
    base = _value(r, variant(name, BASELINE), ab.BLOCK_MEDIAN, "median")
    lo, hi = _value(r, ch, "ab_ci_low"), _value(r, ch, "ab_ci_high")
    # resolved only against an A/A floor (C00's): significance alone calls a no-op a change
    # in about one run in twenty
    floor = calibration.noise_floor_pct(frame, calibration.ab_pairs(r[r.variant == ch]))
    judged = calibration.verdict_of(frame, EID, ch) if floor is not None else None
    change = rel if effect is None else effect
    verdict = UNRESOLVED if judged != "resolved" else FASTER if change < 0 else SLOWER
    sampled = pick(r, ch, SAMPLING_DECISION, "value")
    sampling = "" if isinstance(sampled, Missing) else str(
        r[(r.variant == ch) & (r.metric == SAMPLING_DECISION)].window.iloc[0])
    sampling = ab.decision_line(sampling)
    if ab.undecided(sampling):
        # the stopping rule ran out of budget before deciding: no change is called either way
        verdict = UNRESOLVED
    o = Outcome(name, verdict, reason="" if floor is not None else NO_FLOOR, sampling=sampling,
                change_pct=change,
                ci_pct=(100 * lo / base, 100 * hi / base) if None not in (lo, hi, base) else None,
                throughput_pct=_value(r, ch, THROUGHPUT_REL))
    ok = pick(r, variant(name, CHECK), CORRECT, "value")
    o.correct = None if isinstance(ok, Missing) else bool(float(ok))
    o.check_verdict = (whatif.NOT_DECIDABLE if isinstance(ok, Missing)
                       and ok.reason.startswith(whatif.NOT_DECIDABLE) else "no check"
                       if isinstance(ok, Missing) else whatif.OK if o.correct else whatif.MISMATCH)
    o.check = ", ".join(f"{m.removesuffix('_rel_diff')} {v:.1e}" for m in CHECK_METRICS
                        if (v := _value(r, variant(name, CHECK), m)) is not None)
    unchecked = [m.removesuffix("_rel_diff") for m in CHECK_METRICS
                 if _value(r, variant(name, CHECK), m + TOLERANCE_SUFFIX) is None]
    if o.check and unchecked:
        o.check += f" ({', '.join(unchecked)} unchecked)"
    if isinstance(ok, Missing) and ok.reason:
        o.check += f"; {ok.reason}"
    if scale := tf32_scale(r, name):
        o.check += f"; {scale}"
    o.bound_pct, o.bound_from = predicted_bound(frame, name)
    return o


def tf32_scale(r: pd.DataFrame, name: str) -> str:
    """The TF32 scale the intervention's check was held to, in a phrase ("" where none was
    measured: a CPU, or TF32 off)."""
    got = [_value(r, variant(name, CHECK), m) for m in TF32_SCALE_METRICS]
    if None in got:
        return ""
    return f"TF32 scale loss {got[0]:.1e}, grad {got[1]:.1e}"


# ------------------------------------------------------------------ the localization's bound


def predicted_bound(frame: pd.DataFrame, name: str) -> tuple[float | None, str]:
    """(the most the intervention can save, % of the judged time; where that comes from).

    phases: the share of the step the phases it touches take (E05) — fusing an optimizer
    that is 24% of the step saves at most 24%. sync_tax: E13's tax of a per-step host
    read, as a share of the step that pays it. roofline: a larger batch spreads the other
    phases over more examples (at most their share) and can speed forward + backward up
    to the matmul ceiling at most (R01's achieved fraction). memory: none on time.
    """
    iv = whatif.REGISTRY.get(name)
    if iv is None or iv.bound == "memory":
        return None, "a memory intervention: no time bound (it may cost time)"
    shares = e05_phases.phase_shares(frame)
    if iv.bound == "sync_tax":
        tax = pick(rows_of("E13", frame), e13_sync_tax.CONTROLLED_TAX, e13_sync_tax.TAX_REL,
                   "value")
        if not isinstance(tax, Missing):
            t = float(tax)  # % of the step without the read; a tax inside the noise may be < 0
            return (max(0.0, 100 * t / (100 + t)),
                    f"E13: a per-step host read costs {t:+.1f}% of the step without it")
        iv_phases = iv.touches
    elif iv.bound == "roofline":
        eid, variant, metric, statistic = r01_roofline.forward_backward_row(
            r01_roofline.FLOPS_FRACTION)
        frac = pick(rows_of(eid, frame), variant, metric, statistic)
        if isinstance(frac, Missing) or not shares:
            return None, "needs E05 and R01"
        fb = shares.get("forward", 0.0) + shares.get("backward", 0.0)
        f = float(frac)
        if f > 100.0:  # not clipped to 100%: a ceiling exceeded is the instrument's error
            return None, (f"R01's forward + backward read {f:.0f}% of the matmul ceiling, "
                          "more than the device can do: an instrument error (a ceiling of "
                          "another precision), no bound")
        return ((100 - fb) + fb * (1 - f / 100),
                f"E05 + R01: {100 - fb:.0f}% outside forward + backward, which reach "
                f"{f:.0f}% of the matmul ceiling")
    else:
        iv_phases = iv.touches
    if not shares:
        return None, "needs E05's phase shares"
    total = sum(shares.get(ph, 0.0) for ph in iv_phases)
    return total, f"E05: {' + '.join(iv_phases)} {total:.1f}% of the step"


# ------------------------------------------------------------------ the ranking


def names_in(frame: pd.DataFrame) -> list[str]:
    """The interventions W01's rows mention, in the registry's order (then any other)."""
    r = rows_of(EID, frame)
    seen = dict.fromkeys(v.split("/", 1)[0] for v in r.variant if "/" in v)
    seen.pop(PROBE, None)
    return [n for n in whatif.NAMES if n in seen] + [n for n in seen if n not in whatif.REGISTRY]


_ORDER = {FASTER: 0, UNRESOLVED: 1, SLOWER: 2, FAILED: 3, NOT_APPLICABLE: 4}


def ranked(frame: pd.DataFrame) -> list[Outcome]:
    """Every intervention, by measured gain: faster first (a failed check after those that
    pass), then not resolved, slower, failed, not applicable."""
    out = [o for n in names_in(frame) if (o := outcome(frame, n)) is not None]
    return sorted(out, key=lambda o: (_ORDER[o.verdict], o.correct is False,
                                      -(o.gain_pct if o.gain_pct is not None else -math.inf)))


def best(frame: pd.DataFrame) -> Outcome | None:
    """The largest resolved gain whose one-step check passed; None when nothing is faster."""
    return next((o for o in ranked(frame) if o.verdict == FASTER and o.correct), None)


def explained(o: Outcome) -> str:
    """Does the localization's bound account for the measured gain?"""
    if o.bound_pct is None or o.verdict != FASTER:
        return ""
    low = o.gain_pct if o.ci_pct is None else -o.ci_pct[1]  # the gain's smallest plausible
    return ("within the bound" if low <= o.bound_pct + 1e-9 else
            "beyond the bound: a mechanism the localization did not see")


# ------------------------------------------------------------------ table


def _cell(r: pd.DataFrame, name: str, part: str, metric: str, scale: float = 1.0) -> Any:
    cell = pick(r, variant(name, part), metric, "value")
    return cell if isinstance(cell, Missing) else float(cell) * scale


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """The what-if table, ranked by measured gain, each beside the bound the localization set."""
    r = rows_of(EID, frame)
    records = []
    for i, o in enumerate(ranked(frame), 1):
        iv = whatif.REGISTRY.get(o.name)
        rec = {"rank": i, "intervention": o.name, "what": iv.title if iv else "",
               "verdict": o.verdict}
        if o.verdict in (NOT_APPLICABLE, FAILED):
            rec["why"] = o.reason
            records.append(rec)
            continue
        rec.update({
            "time_change_pct": o.change_pct,
            "ci_low_pct": o.ci_pct[0] if o.ci_pct else None,
            "ci_high_pct": o.ci_pct[1] if o.ci_pct else None,
            "throughput_change_pct": o.throughput_pct,
            "bound_pct": o.bound_pct, "bound": o.bound_from, "explained": explained(o),
            "peak_change_mib": _cell(r, o.name, CHANGE, PEAK_CHANGE),
            "first_call_cost_s": _cell(r, o.name, INTERVENED, FIRST_CALL_COST, 1e-3),
            "break_even_steps": (_cell(r, o.name, CHANGE, BREAK_EVEN)
                                 if o.verdict == FASTER else None),
            "correct": {whatif.OK: "yes", whatif.MISMATCH: "MISMATCH"}.get(
                o.check_verdict, o.check_verdict),
            "check": o.check,
            "job_s": _cell(r, o.name, JOB, JOB_WALL),
            "sampling": o.sampling or "fixed count",
        })
        records.append(rec)
    return make_table(records, ["rank", "intervention", "what", "verdict", "time_change_pct",
                                "ci_low_pct", "ci_high_pct", "throughput_change_pct",
                                "bound_pct", "bound", "explained", "peak_change_mib",
                                "first_call_cost_s", "break_even_steps", "correct", "check",
                                "job_s", "sampling", "why"])


def markdown(frame: pd.DataFrame) -> str:
    """The what-if table as Markdown (``perflab whatif`` prints it), best line first."""
    t = table(frame)
    if t.empty:
        return "## What if\n\nNo intervention was planned (W01 did not run).\n"
    b = best(frame)
    head = (f"**Best measured:** {b.name} — time {b.change_pct:+.1f}%"
            + (f" [{b.ci_pct[0]:+.1f}, {b.ci_pct[1]:+.1f}]" if b.ci_pct else "")
            + f", throughput {b.throughput_pct:+.1f}%" if b else
            "**No intervention is measurably faster** (with a passing one-step check).")
    cols = [c for c in ("rank", "intervention", "verdict", "time_change_pct", "ci_low_pct",
                        "ci_high_pct", "throughput_change_pct", "bound_pct", "explained",
                        "peak_change_mib", "first_call_cost_s", "break_even_steps", "correct",
                        "job_s", "sampling", "why") if c in t.columns]
    shown = t[cols].map(lambda v: f"{v:.3g}" if isinstance(v, float) and not math.isnan(v)
                        else ("" if v is None or (isinstance(v, float) and math.isnan(v))
                              else str(v)))
    lines = ["## What if", "", head, "", "| " + " | ".join(cols) + " |",
             "| " + " | ".join("---" for _ in cols) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in shown.itertuples(index=False)]
    r = rows_of(EID, frame)
    # the floor of the interventions' own block pairs (each A/B is judged against it)
    pairs = [calibration.ab_pairs(g) for _, g in r.groupby("variant")
             if (g.metric == "ab_effect").any()]
    floor = calibration.noise_floor_pct(frame, min((p for p in pairs if p), default=None))
    total, span = (pick(r, v, JOB_WALL, "value") for v in (ALL_JOBS, SPAN))
    if not isinstance(total, Missing):
        lines += ["", f"W01's jobs took {float(total):.0f} s together (the plan and each "
                  "intervention's fresh process: job_s)"
                  + ("" if isinstance(span, Missing) else
                     f"; {float(span):.0f} s passed from the plan's start to the last result")
                  + "."]
    tf32 = [f"{o.name}: {s}" for o in ranked(frame) if (s := tf32_scale(r, o.name))]
    if tf32:
        lines += ["", "One-step check where TF32 may run (CUDA): where strict fp32 moves the "
                  "baseline's step further than the baseline moves from itself (TF32 observed), "
                  f"the loss and gradient limits are the larger of the fp32 limit and "
                  f"{whatif.TF32_FACTOR:g} x the baseline's own TF32 rounding (its first step "
                  "as run against strict fp32), capped at what TF32 rounding can do, and the "
                  "update is unchecked once the gradient is past its fp32 limit — "
                  + "; ".join(tf32) + "."]
    lines += ["", "Time change: the judged time (ms per step; per example for a larger batch), "
              "median of the paired block differences with its 95% bootstrap interval; "
              + (f"judged against C00's A/A floor of {floor:.2g}%." if floor is not None
                 else f"not resolved: {NO_FLOOR}.")]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ figure


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Each measured intervention's change of the judged time (%, with the 95% interval of the
    paired block differences), ranked by gain: green faster, orange slower, grey not resolved;
    those that do not apply, or failed, listed in the note. The bound the localization
    predicted is in the table beside each.
    """
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.kit.figures import add_note, new_figure

    r = rows[rows.experiment == EID]
    fig, (ax,) = new_figure(ENTRY, r, width=9.0)
    outs = ranked(rows)
    shown = [o for o in outs if o.change_pct is not None]
    colours = {FASTER: sns.color_palette()[2], SLOWER: sns.color_palette()[3],
               UNRESOLVED: "#999999"}
    for i, o in enumerate(shown):
        err = None if o.ci_pct is None else [[o.change_pct - o.ci_pct[0]],
                                              [o.ci_pct[1] - o.change_pct]]
        ax.barh(i, o.change_pct, xerr=err, color=colours[o.verdict], capsize=3)
    ax.set_yticks(range(len(shown)), [o.name for o in shown])
    ax.invert_yaxis()
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel("change of the judged time, % (negative: faster)")
    # the fastest are on top, their bars to the left: the upper right is free
    add_note(ax, [f"{o.name}: {o.verdict}" for o in outs if o.change_pct is None],
             loc="upper right")
    return fig


# ------------------------------------------------------------------ for the diagnosis


def describe(o: Outcome) -> str:
    """One intervention's measured result in a phrase."""
    if o.change_pct is None:
        return f"{o.name}: {o.verdict} ({o.reason})" if o.reason else f"{o.name}: {o.verdict}"
    ci = f" [{o.ci_pct[0]:+.1f}, {o.ci_pct[1]:+.1f}]" if o.ci_pct else ""
    check = {whatif.OK: "check ok", whatif.MISMATCH: "check MISMATCH"}.get(
        o.check_verdict, f"check {o.check_verdict}")
    bound = (f"; bound {o.bound_pct:.0f}% ({o.bound_from})" if o.bound_pct is not None else "")
    return f"{o.name}: time {o.change_pct:+.1f}%{ci}, {o.verdict}, {check}{bound}"


def beside_hypothesis(frame: pd.DataFrame, hypothesised: tuple[str, ...]) -> list[str]:
    """The diagnosis's lines: the best measured intervention beside the hypothesised one.

    Empty when W01 did not run, so a run without it reads as before.
    """
    if rows_of(EID, frame).empty:
        return []
    b = best(frame)
    lines = ["**Best measured intervention (W01):** "
             + (describe(b) if b else "none is measurably faster with a passing one-step "
                "check") + "."]
    tested = [o for n in hypothesised if (o := outcome(frame, n)) is not None]
    if tested:
        same = b is not None and b.name == tested[0].name
        lines.append("**The hypothesis, measured:** " + "; ".join(describe(o) for o in tested)
                     + (" — the verdict's intervention is the best measured." if same else "."))
    return lines


def check_config(cfg: dict, view: ConfigView) -> None:
    """W01's interventions: each a known name, none that cannot apply on this device."""
    from perflab.experiments.w01_whatif import whatif

    key = "experiments.W01.interventions"
    requested = cfg["experiments"]["W01"]["interventions"]
    try:
        names = whatif.selected(requested)
    except ValueError as exc:
        raise ConfigProblem(key, str(exc)) from None
    if requested == "all":
        return
    cannot = whatif.device_reasons(view.device.split(":", 1)[0])
    bad = [n for n in names if n in cannot]
    if bad:
        usable = [n for n in whatif.NAMES if n not in cannot]
        raise ConfigProblem(key, f"{bad[0]} does not apply on {view.device}: "
                                 f"{cannot[bad[0]]} (these can here: {', '.join(usable)})")
