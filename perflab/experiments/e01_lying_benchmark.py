"""E01 · The lying benchmark: what does an unsynchronized clock report about a step?

``scripts/e01_lying_benchmark.py`` runs unsynchronized training loops of several lengths
(what each loop's clock reports per step, the work still queued at the final sync, the
real per-step time), one step's host-visible return, the first step of the process, an
unwarmed series and the synchronized warmed median. This module names those rows and
reads them back: the table, the figure, claims C01-C04, and :func:`loop_lengths` /
:func:`loop_row` for the ledger and the diagnosis.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perflab.core.names import STEP_LATENCY
from perflab.kit.claims import (
    Absent,
    Evidence,
    claim,
    interval_part,
    judge,
    judge_parts,
    resolved,
)
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, numbered_variants, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

EID = "E01"

ENTRY = Experiment(
    EID,
    "lying_benchmark",
    "The lying benchmark: unsynchronized loops vs the synchronized step",
    "hygiene",
    cpu_behaviour="no asynchrony: backlog ~0; cold first call vs unwarmed vs warmed",
    report_section="1 · The lying benchmark",
    claims_read_samples=True,
    builds_the_contract=True,
    process_peer="synchronized_warmed",
)

#: its parameters (config key ``experiments.E01``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
loops:
  description: unsynchronized loop lengths
  type: array
  items: {type: integer, minimum: 1}
  minItems: 1
  default: [20, 100, 400]
# each length once a round: C01/C02 judge the ratio by its spread. 12 rounds, not 6
# (~11 s more on the H200): in one H200 run two of six rounds of the loop of 20 read 82-84%
# of their real time and four 99.5% (the host sped up late in the job), and a median of
# six with two outliers reaches below 90% in its bootstrap; of twelve it takes six.
# 24, not 12 (~23 s more there): C04's host-return ratio moved from 87% to 95% across one
# job's twelve rounds as the host's speed moved, and their median's interval (89.6..91.6%)
# straddled the 90% bound in one run of the pair at 5217a39 (92.2..94.5% in the other)
loop_rounds:
  description: >-
    rounds of the unsynchronized loops, each length once a round (the first round
    is the chapter's loop; C01 and C02 judge the reported/real ratio by its 95%
    interval over the rounds)
  type: integer
  minimum: 1
  default: 24
# synchronized calls of the warmed step; null: timing.repeats
repeats:
  description: "synchronized calls of the warmed step (null: timing.repeats)"
  oneOf: [{type: "null"}, {type: integer, minimum: 1}]
  default: null
# spread over the loop rounds (16 a round); C04 judges their ratio round by round
host_return_repeats:
  description: single steps timed to host-visible return (each from an empty queue)
  type: integer
  minimum: 1
  default: 384
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'loops': [5, 20, 40], 'loop_rounds': 3, 'host_return_repeats': 5}}

#: step-time variants (metric ``step_latency``): the process's first step, an unwarmed
#: series, one step's host-visible return, and the synchronized warmed series (the truth)
FIRST_STEP = "first_step"
UNWARMED = "unwarmed"
HOST_RETURN = "host_return"
#: the same calls as HOST_RETURN, each timed on to its completion (a sync right after it)
HOST_RETURN_COMPLETED = "host_return_completed"
#: HOST_RETURN's and HOST_RETURN_COMPLETED's calls are spread over the loop rounds; this
#: metric is each round's median of them (one sample a round), what C04 judges by
ROUND_MEDIAN = "round_median_latency"
SYNCHRONIZED_WARMED = "synchronized_warmed"
#: an unsynchronized loop of N steps is the variant ``naive_loop_<N>``
NAIVE_LOOP = "naive_loop_"
#: a loop's metrics: per step by its own clock, queued at its final sync, and the real time
REPORTED_MS_PER_STEP = "reported_ms_per_step"
BACKLOG_AT_FINAL_SYNC = "backlog_at_final_sync"
REAL_MS_PER_STEP = "real_ms_per_step"


def naive_loop(n: int) -> str:
    """The variant of the unsynchronized loop of ``n`` steps."""
    return f"{NAIVE_LOOP}{n}"


def loop_row(n: int, metric: str) -> tuple[str, str, str, str]:
    """(experiment, variant, metric, statistic) of one loop's ``metric``."""
    return EID, naive_loop(n), metric, "value"


def loop_lengths(rows: pd.DataFrame) -> list[int]:
    """The lengths of the unsynchronized loops with measured rows, ascending."""
    r = rows[(rows.experiment == EID) & (rows.status == "ok")]
    return sorted(int(v.removeprefix(NAIVE_LOOP)) for v in r.variant.unique()
                  if v.startswith(NAIVE_LOOP))


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """The lying benchmark: naive loops, then the synchronized and cold numbers."""
    r = rows_of(EID, frame)
    records = []
    for v in numbered_variants(r, NAIVE_LOOP):
        records.append({
            "measurement": f"naive loop of {v.removeprefix(NAIVE_LOOP)}",
            "n": pick(r, v, REPORTED_MS_PER_STEP, "value", field="n"),
            "reported_ms_per_step": pick(r, v, REPORTED_MS_PER_STEP, "value"),
            "backlog_ms": pick(r, v, BACKLOG_AT_FINAL_SYNC, "value"),
            "real_ms_per_step": pick(r, v, REAL_MS_PER_STEP, "value"),
        })
    # single-number rows: host_return is what an unsynchronized clock reports,
    # the other three are synchronized (real) times
    for label, variant, statistic, column in (
        ("synchronized + warmed, median", SYNCHRONIZED_WARMED, "median", "real_ms_per_step"),
        ("one step, host-visible return only (median)", HOST_RETURN, "median",
         "reported_ms_per_step"),
        ("the same steps, to their completion (median)", HOST_RETURN_COMPLETED, "median",
         "real_ms_per_step"),
        ("first training step of the process", FIRST_STEP, "value", "real_ms_per_step"),
        ("unwarmed, median", UNWARMED, "median", "real_ms_per_step"),
    ):
        records.append({
            "measurement": label,
            "n": pick(r, variant, statistic=statistic, field="n"),
            column: pick(r, variant, statistic=statistic),
        })
    return make_table(records, ["measurement", "n", "reported_ms_per_step", "backlog_ms",
                                "real_ms_per_step"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Per-step time reported by unsynchronized training loops of increasing length (log scale)
    against the real per-step time after the final synchronize, with the synchronized,
    warmed median as a horizontal line.
    """
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import add_note, log_if_wide, new_figure, num

    r = rows[rows.experiment == EID]
    fig, (ax,) = new_figure(ENTRY, r)
    loops = sorted(int(v.removeprefix(NAIVE_LOOP)) for v in r.variant.unique()
                   if v.startswith(NAIVE_LOOP))
    reported = [num(pick(r, naive_loop(n), REPORTED_MS_PER_STEP, "value")) for n in loops]
    real = [num(pick(r, naive_loop(n), REAL_MS_PER_STEP, "value")) for n in loops]
    backlog = [num(pick(r, naive_loop(n), BACKLOG_AT_FINAL_SYNC, "value")) for n in loops]
    notes = []
    if loops:
        _draw_loops(ax, loops, reported, real, backlog)
    else:
        notes.append(f"naive loops: {pick(r, naive_loop(0))}")
    synced = pick(r, SYNCHRONIZED_WARMED)
    if isinstance(synced, Missing):
        notes.append(f"synchronized + warmed median: {synced}")
    else:
        ax.axhline(synced, color="black", lw=1.2, ls=":",
                   label=f"synchronized + warmed median: {synced:.3f} ms")
    log_if_wide(ax, [*reported, *real, num(synced) if not isinstance(synced, Missing) else None])
    ax.set_xlabel("steps in the unsynchronized loop")
    ax.set_ylabel("ms per step")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best")
    add_note(ax, notes)
    return fig


def _draw_loops(ax, loops: list[int], reported: list, real: list, backlog: list) -> None:
    """The loops' reported and real per-step times over the loop length, backlog annotated."""
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    # real first, with bigger markers: where nothing is queued the two coincide
    ax.plot(loops, real, "s-", ms=9, lw=2.5, alpha=0.6, label="real: loop + final sync")
    ax.plot(loops, reported, "o--", ms=5, label="reported by the loop's clock")
    for n, y, b in zip(loops, real, backlog):
        if y is not None and b is not None:
            ax.annotate(f"+{b:.1f} ms queued", (n, y), textcoords="offset points",
                        xytext=(0, 9), ha="center", fontsize=8)
    ax.margins(x=0.1, y=0.15)
    ax.set_xscale("log")
    # label exactly the loop lengths that were run
    ax.xaxis.set_major_locator(FixedLocator(loops))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())


def _naive(ev: Evidence) -> list[tuple[int, str]]:
    loops = sorted((int(v.removeprefix(NAIVE_LOOP)), v) for v in
                   ev.variants(EID, NAIVE_LOOP, REPORTED_MS_PER_STEP, "value"))
    if not loops:
        raise Absent("no naive loop rows" + ("" if ev.has(EID) else f" ({EID} not run)"))
    return loops


#: C01, C04: a clock under-reports the step when it reads below this % of the synchronized
#: median
UNDER_REPORT_PCT = 90
#: C02: a longer loop's reported/real ratio must rise by more than this (fraction points)
CONVERGENCE_POINTS = 5
#: C03: the first step is cold when it exceeds this % of the warmed median
COLD_FIRST_PCT = 110
#: C04's mechanism reads the backlog of the chapter's shortest loop
CHAPTER_SHORT_LOOP = 20


def _no_backlog(ev: Evidence, loop: str, step_ms: float) -> str:
    """Why a clock read at the host's return is not far from the real step here."""
    queued = ev.maybe(EID, loop, BACKLOG_AT_FINAL_SYNC, "value")
    if ev.device(EID).startswith("cuda") and queued is not None:
        # a host as slow as the device leaves little queued (the H200's host-bound MLP)
        return (f"the host is about as slow as the device: only {queued:.2g} ms of work is "
                f"queued when it returns ({100 * queued / step_ms:.0f}% of the step)")
    return "the call returns when its work is done: no asynchronous queue"


def _loop_series(v: str) -> list[tuple[str, str, str]]:
    """The series of one loop length's rounds: its reported and real ms per step."""
    return [(EID, v, REPORTED_MS_PER_STEP), (EID, v, REAL_MS_PER_STEP)]


def _ratio_pct(ev: Evidence, v: str) -> tuple[float, str]:
    """(reported / real of a loop length, %; in words): the first loop's, and the median of
    every round's when the run has them."""
    reported = ev.value(EID, v, REPORTED_MS_PER_STEP, "value")
    real = ev.value(EID, v, REAL_MS_PER_STEP, "value")
    text = f"{reported:.3f} ms reported vs {real:.3f} ms real ({100 * reported / real:.0f}%"
    rep, rl = (ev.series(*key) for key in _loop_series(v))
    if rep is None or rl is None or len(rep) < 2:
        return 100 * reported / real, text + ")"
    ratio = 100 * float(np.median(rep / rl))
    return ratio, text + f"; median of {len(rep)} loops {ratio:.0f}%)"


def _median_ratio(g):
    """100 x the median over the rounds of reported / real (a resampled group of the two)."""
    return 100 * np.median(g[:, 0] / g[:, 1], axis=-1)


def _ratio_rise(g):
    """The longest loop's median reported/real less the shortest's, in points (one group:
    the shortest's two series, then the longest's, round by round)."""
    return 100 * (np.median(g[:, 2] / g[:, 3], axis=-1) - np.median(g[:, 0] / g[:, 1], axis=-1))


@claim("C01", EID, "a short unsynchronized loop under-reports the synchronized step time",
       chapter="9.491 ms reported vs 16.430 ms real (loop of 20)",
       tolerance=f"the shortest loop's reported ms/step < {UNDER_REPORT_PCT}% of the same "
       "loop's real ms/step (its clock read after the final sync), decided by the 95% "
       "interval of the ratio's median over the rounds of loops (block bootstrap)")
def _short_loop_lies(ev):
    # the loop against itself: what its clock said, and what it took once its queue drained
    # (a separately synchronized median would compare two measurements, not one loop's lie)
    n, v = _naive(ev)[0]
    ratio, text = _ratio_pct(ev, v)
    return judge_parts(interval_part(
        ev, ratio, f"loop of {n}: {text}", [_loop_series(v)], _median_ratio,
        (-math.inf, UNDER_REPORT_PCT),
        mechanism=_no_backlog(ev, v, ev.value(EID, v, REAL_MS_PER_STEP, "value"))))


@claim("C02", EID, "the per-step time a longer unsynchronized loop reports approaches the real one",
       chapter="9.491 -> 14.692 -> 15.741 ms reported for loops of 20/100/400 (real ~16.08)",
       tolerance="reported/real of the longest loop > of the shortest, by more than "
       f"{CONVERGENCE_POINTS} points, decided by the 95% interval of the rise in the ratios' "
       "medians over the rounds of loops (block bootstrap; both lengths run in each round)")
def _longer_loop_converges(ev):
    loops = _naive(ev)
    (short, vs), (long, vl) = loops[0], loops[-1]
    rs, _ = _ratio_pct(ev, vs)
    rl, _ = _ratio_pct(ev, vl)
    return judge_parts(interval_part(
        ev, rl - rs, f"reported/real {rs / 100:.2f} (loop of {short}) -> {rl / 100:.2f} "
        f"(loop of {long})", [_loop_series(vs) + _loop_series(vl)], _ratio_rise,
        (CONVERGENCE_POINTS, math.inf), unit=" points",
        mechanism="the shortest loop already reports the real time: "
                  + _no_backlog(ev, vs, ev.value(EID, vs, REAL_MS_PER_STEP, "value"))))


@claim("C03", EID, "the first training step of a process is slower than the warmed step",
       chapter="20.890 ms first vs 16.430 ms warmed median",
       tolerance=f"first > {COLD_FIRST_PCT}% of the warmed median, by more than its IQR")
def _first_step_cold(ev):
    first = ev.value(EID, FIRST_STEP, STEP_LATENCY, "value")
    med = ev.value(EID, SYNCHRONIZED_WARMED, STEP_LATENCY)
    iqr = ev.maybe(EID, SYNCHRONIZED_WARMED, STEP_LATENCY, "iqr")
    bound = COLD_FIRST_PCT / 100 * med
    # one sample against a bound set on the warmed series: decided beyond that series' IQR
    return judge(first > bound, f"first {first:.3f} ms vs warmed {med:.3f} ms",
                 is_resolved=resolved(ev, EID, FIRST_STEP, first - bound, noise=iqr),
                 mechanism="the first step costs what a warmed one does: nothing left to "
                           "initialize or compile on the first call")


@claim("C04", EID, "one step timed at its host-visible return under-reports the step",
       chapter="4.866 ms vs 16.430 ms",
       tolerance=f"host-return median < {UNDER_REPORT_PCT}% of the median of the same calls "
       "timed to completion, decided by the 95% interval of the ratio's median over the rounds "
       "of E01 (each round's calls a sample; block bootstrap); a run without rounds: of the "
       "paired calls, or of the synchronized series, resampled apart")
def _host_return_lies(ev):
    host = ev.value(EID, HOST_RETURN, STEP_LATENCY)
    same = ev.maybe(EID, HOST_RETURN_COMPLETED, STEP_LATENCY)
    rounds = [ev.series(EID, v, ROUND_MEDIAN) for v in (HOST_RETURN, HOST_RETURN_COMPLETED)]
    if same is not None and all(r is not None for r in rounds) and len(rounds[0]) >= 2:
        # the host's speed drifts through the job (the H200's host returned at 95% in one run
        # and 76% in the next, each tight over 200 consecutive calls): spread over the rounds,
        # the calls say how far the ratio moves within the job
        ratio = 100 * float(np.median(rounds[0] / rounds[1]))
        return judge_parts(interval_part(
            ev, ratio, f"{host:.3f} ms at return vs {same:.3f} ms when the same calls "
            f"completed ({100 * host / same:.0f}%; median of {len(rounds[0])} rounds "
            f"{ratio:.0f}%)", [[(EID, HOST_RETURN, ROUND_MEDIAN),
                                (EID, HOST_RETURN_COMPLETED, ROUND_MEDIAN)]],
            _median_ratio, (-math.inf, UNDER_REPORT_PCT),
            mechanism=_no_backlog(ev, naive_loop(CHAPTER_SHORT_LOOP), same)))
    if same is None:  # a run from before each call was timed to its completion as well
        against, what = SYNCHRONIZED_WARMED, "synchronized"
        groups = [[(EID, HOST_RETURN, STEP_LATENCY)],
                  [(EID, SYNCHRONIZED_WARMED, STEP_LATENCY)]]
    else:
        against, what = HOST_RETURN_COMPLETED, "when the same calls completed"
        groups = [[(EID, HOST_RETURN, STEP_LATENCY),
                   (EID, HOST_RETURN_COMPLETED, STEP_LATENCY)]]
    med = ev.value(EID, against, STEP_LATENCY)
    # a ratio of two medians: its noise is theirs (the samples' IQR is not a median's noise)
    return judge_parts(interval_part(
        ev, 100 * host / med, f"{host:.3f} ms at return vs {med:.3f} ms {what} "
        f"({100 * host / med:.0f}%)", groups, _medians_ratio_pct,
        (-math.inf, UNDER_REPORT_PCT),
        mechanism=_no_backlog(ev, naive_loop(CHAPTER_SHORT_LOOP), med)))


def _medians_ratio_pct(*groups):
    """100 x the median of the first series over the second's: two series of one group
    (resampled together) or the first series of each of two groups (resampled apart)."""
    a, b = (groups[0][:, 0], groups[0][:, 1]) if len(groups) == 1 else \
        (groups[0][:, 0], groups[1][:, 0])
    return 100 * np.median(a, axis=-1) / np.median(b, axis=-1)
