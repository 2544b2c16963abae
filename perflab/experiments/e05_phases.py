"""E05 · Localize: where does the training step's time go, phase by phase?

``scripts/e05_phases.py`` brackets the step into the seven phases of
:data:`perflab.core.names.PHASES` and times each with the device synchronized at every
boundary (each phase charged for its own work) and with the same brackets
unsynchronized (the first host read absorbs the backlog), beside the uninstrumented
step. This module names the rows it writes and reads them back: the table, the figure,
claims C10-C13, and :func:`phase_shares` / :func:`phase_share_row` for the ledger, the
diagnosis and E14's claim.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perflab.core.names import PHASES, STEP_LATENCY
from perflab.instruments import ab
from perflab.kit.claims import (
    Absent,
    Decision,
    Evidence,
    Part,
    claim,
    interval_part,
    judge,
    judge_parts,
    leader,
    medians,
    own_interval,
    pct,
)
from perflab.kit.claims import phase_shares as shares_of
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

EID = "E05"

ENTRY = Experiment(
    EID,
    "phases",
    "Localize: the seven phases of the step, with and without per-phase sync",
    "localize",
    cpu_behaviour="host-to-device is a no-op copy and sync is a no-op: no backlog to absorb",
    report_section="4 · Localize: decompose the step",
    claims_read_samples=True,
    diagnosis=("cpu", "cuda"),
    builds_the_contract=True,
)

#: its parameters (config key ``experiments.E05``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
# calls per series; null: timing.repeats (perflab diagnose: 100)
repeats:
  description: "calls per series (null: timing.repeats); perflab diagnose takes 100, enough for the phase shares' medians"
  oneOf: [{type: "null"}, {type: integer, minimum: 1}]
  default: null
# the phased and the uninstrumented steps in turn, AB|BA: C11 compares them
blocks:
  description: >-
    blocks the phased and the uninstrumented steps alternate in (AB, BA, ...), so a
    drift of the machine lands on both
  type: integer
  minimum: 1
  default: 10
"""

#: variant prefixes: each phase timed with the device synchronized at every boundary
#: (``sync/forward``), and the same brackets with no sync (``nosync/forward``)
SYNC, NOSYNC = "sync/", "nosync/"
#: the sum of the synchronized phase medians, the step without brackets, and sum - total
SUM_OF_PHASES = "sum_of_phases"
UNINSTRUMENTED_TOTAL = "uninstrumented_total"
#: its row of how many blocks the phased and uninstrumented steps alternated in (absent in a
#: run from before they did: one series after the other)
INTERLEAVED_BLOCKS = "interleaved_blocks"
#: under a budget, the deciding shares sampled until decided (variants of the
#: SAMPLING_DECISION rows): input wait + host-to-device, and the optimizer, per step
INPUT_SHARE_DECISION, OPTIMIZER_SHARE_DECISION = "input_share", "optimizer_share"
SUM_MINUS_TOTAL = "sum_minus_total"
#: one phase's time per step (ms), and its share of the sum of the phase medians (%)
PHASE_TIME = "phase_time"
PHASE_SHARE = "phase_share"
#: how many times a phase's hooks fired per step (perflab.instruments.phases): a phase the step never
#: entered, or entered twice, shows here
ENTRIES_PER_STEP = "entries_per_step"
#: where the step's batches came from, as every row's window names it: the workload's own
#: loader (input wait is then the loader's), or one batch served from host memory
FED_BY_LOADER, SERVED_BATCH = "the workload's loader", "one batch served from the host"
#: the metric of SUM_MINUS_TOTAL as % of the uninstrumented median (perflab.instruments.ab's name for a
#: difference relative to its baseline)
STEP_LATENCY_REL = STEP_LATENCY + ab.REL


def phase_share_row(phase: str) -> tuple[str, str, str, str]:
    """(experiment, variant, metric, statistic) of ``phase``'s synchronized share."""
    return EID, SYNC + phase, PHASE_SHARE, "value"


#: (experiment, variant, metric, statistic) of the phase sum's distance from the step, %
SUM_GAP_ROW = (EID, SUM_MINUS_TOTAL, STEP_LATENCY_REL, "value")


def phase_shares(rows: pd.DataFrame) -> dict[str, float]:
    """{phase: % of the sum of the synchronized phase medians}, in the order of PHASES.

    Only the phases E05 measured; empty when it did not run.
    """
    if rows.empty:
        return {}
    r = rows_of(EID, rows)
    picked = {ph: pick(r, SYNC + ph, PHASE_SHARE, "value") for ph in PHASES}
    return {ph: float(v) for ph, v in picked.items() if not isinstance(v, Missing)}


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Seven phases: synchronized median, IQR, share; the unsynchronized brackets beside."""
    r = rows_of(EID, frame)
    records = [{
        "phase": ph,
        "median_ms": pick(r, SYNC + ph, PHASE_TIME),
        "iqr_ms": pick(r, SYNC + ph, PHASE_TIME, "iqr"),
        "share_pct": pick(r, SYNC + ph, PHASE_SHARE, "value"),
        "no_sync_median_ms": pick(r, NOSYNC + ph, PHASE_TIME),
    } for ph in PHASES]
    records.append({"phase": "sum of phases",
                    "median_ms": pick(r, SUM_OF_PHASES, statistic="value")})
    records.append({"phase": "measured total (uninstrumented)",
                    "median_ms": pick(r, UNINSTRUMENTED_TOTAL),
                    "iqr_ms": pick(r, UNINSTRUMENTED_TOTAL, statistic="iqr")})
    records.append({"phase": "sum - total",
                    "median_ms": pick(r, SUM_MINUS_TOTAL, statistic="value"),
                    "share_pct": pick(r, SUM_MINUS_TOTAL, STEP_LATENCY_REL, "value")})
    return make_table(records, ["phase", "median_ms", "iqr_ms", "share_pct", "no_sync_median_ms"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Median time of each of the seven phases with the device synchronized at every boundary
    and with the same brackets unsynchronized (where the first host read absorbs the queued
    work), and the sum of the synchronized phase medians beside the uninstrumented step.
    """
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.kit.figures import add_note, bar_cell, draw_bars, new_figure, num

    r = rows[rows.experiment == EID]
    fig, (ax, ax2) = new_figure(ENTRY, r, ncols=2, width=12.0,
                                gridspec_kw={"width_ratios": [3, 1]})
    phases = list(PHASES)
    notes = draw_bars(ax, phases, {
        "sync at every boundary": [bar_cell(r, SYNC + ph, metric=PHASE_TIME) for ph in phases],
        "no sync (submission times)": [bar_cell(r, NOSYNC + ph, metric=PHASE_TIME)
                                       for ph in phases],
    })
    ax.set_ylabel("median ms per phase (error bar: p25..p75)")
    ax.legend(loc="upper left", fontsize=8)
    add_note(ax, notes, loc="upper right")
    # the phase sum, stacked by phase, beside the uninstrumented step
    bottom = 0.0
    for ph, colour in zip(phases, sns.color_palette("tab10", len(phases))):
        v = num(pick(r, SYNC + ph, PHASE_TIME))
        if v is None:
            continue
        ax2.bar(0, v, bottom=bottom, color=colour, width=0.6, label=ph)
        bottom += v
    total = num(pick(r, UNINSTRUMENTED_TOTAL))
    if total is not None:
        ax2.bar(1, total, color="#555555", width=0.6)
    ax2.set_xticks([0, 1], ["sum of\nphase medians", "uninstrumented\nstep (median)"])
    ax2.set_ylabel("ms")
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _shares(ev: Evidence) -> dict[str, float]:
    """The synchronized phase shares as a claim reads them: :class:`Absent` when E05 wrote
    none, :class:`Unmeasured` when one of them is an error row."""
    return shares_of(ev, EID, SYNC)


def largest_phase(ev: Evidence, prefix: str = SYNC) -> tuple[str, str, Decision]:
    """The largest phase (``prefix``: synchronized or not), the runner-up, and whether the
    largest is ahead beyond the noise.

    Decided when the 95% interval of the difference of the two phases' medians, over E05's
    steps (both phases are timed in the same steps: one group, block bootstrap), lies above
    0: the noise of a difference of medians, not the IQR of single steps (which bounds one
    step's spread). No raw samples: not resolved, with the reason.
    """
    times = {v.removeprefix(prefix): x for v, x in ev.variants(EID, prefix, PHASE_TIME).items()}
    ranked = times or (_shares(ev) if prefix == SYNC else {})
    if not ranked:
        raise Absent(f"no {prefix} phase times" + ("" if ev.has(EID) else f" ({EID} not run)"))
    top, second = leader(ranked)
    if not second:
        return top, second, (True, "one phase")
    if not times:
        return top, second, (False, "not resolved: no phase times")
    pair = [[(EID, prefix + top, PHASE_TIME), (EID, prefix + second, PHASE_TIME)]]
    holds, (decided, how) = own_interval(ev, pair, _lead_of_first, (0, math.inf), unit=" ms")
    gap = times[top] - times[second]
    return top, second, (bool(decided and holds), f"{top} - {second} {gap:.3g} ms: {how}")


def _lead_of_first(joint):
    """The first series' median minus the second's, both from the same steps."""
    m = medians(joint)
    return m[:, 0] - m[:, 1]


def fed_by_loader(ev: Evidence) -> bool:
    """Did the workload's own loader feed E05's step (else one batch served from the host)?"""
    r = ev.of(EID)
    return bool(r[r.variant == SYNC + "input_wait"].window.str.contains(FED_BY_LOADER,
                                                                         regex=False).any())


#: C11: the phase sum is "near" the uninstrumented step within this % of it
SUM_GAP_PCT = 10
#: C13: input wait is no bottleneck below this share of the step (%)
INPUT_WAIT_PCT = 5


@claim("C10", EID, "the optimizer is the largest phase of the controlled step",
       chapter="optimizer 51.3%, backward 28.4%, forward 17.4%",
       tolerance="optimizer has the largest share, ahead of the next phase by the 95% "
                 "interval of the difference of their medians over E05's steps (block "
                 "bootstrap)")
def _optimizer_largest(ev):
    s = _shares(ev)
    top, _, lead = largest_phase(ev)
    opt = s.get("optimizer", float("nan"))
    second = max((p for p in s if p != "optimizer"), key=s.get, default="")
    return judge(top == "optimizer",
                 f"optimizer {opt:.1f}%, next {second} {s.get(second, 0):.1f}%",
                 is_resolved=lead,
                 mechanism=f"{top}, not the optimizer, is the largest phase here "
                           f"({s.get(top, float('nan')):.1f}% vs {opt:.1f}%)")


@claim("C11", EID, "per-phase synchronization moves the total by little: the phase sum is near "
       "the uninstrumented step",
       chapter="sum 17.560 vs total 16.758 ms (+4.8%)",
       tolerance=f"|sum - total| < {SUM_GAP_PCT}% of total, decided by the 95% interval of "
                 "(sum - total) / total over E05's samples (block bootstrap; the phased and "
                 "the uninstrumented steps measured in turn, resampled together)")
def _phase_sum_close(ev):
    rel = ev.value(*SUM_GAP_ROW)
    phases = list(_shares(ev))
    # the phases' samples share their steps; interleaved in blocks with them, the
    # uninstrumented step's sample i lies in sample i's block: one group, resampled together
    # (a run from before: it ran after them, resampled apart)
    total = (EID, UNINSTRUMENTED_TOTAL, STEP_LATENCY)
    together = ev.maybe(EID, UNINSTRUMENTED_TOTAL, INTERLEAVED_BLOCKS, "value") is not None
    groups = ([[*map(_phase_series, phases), total]] if together
              else [[_phase_series(p) for p in phases], [total]])

    def gap_pct(*g):
        m = np.concatenate([medians(x) for x in g], axis=-1)  # (resamples, phases + total)
        return 100 * (m[:, :-1].sum(axis=-1) - m[:, -1]) / m[:, -1]

    return judge_parts(interval_part(
        ev, rel, f"sum - total {pct(rel)}", groups, gap_pct, (-SUM_GAP_PCT, SUM_GAP_PCT),
        mechanism=f"per-phase synchronization perturbs this step by more than {SUM_GAP_PCT}%"))


def _phase_series(phase: str) -> tuple[str, str, str]:
    """The raw samples of one synchronized phase (one per step)."""
    return EID, SYNC + phase, PHASE_TIME


@claim("C12", EID, "without per-phase sync the first host read (logging) absorbs the backlog",
       chapter="logging 11.683 ms unsynchronized vs 0.064 ms synchronized",
       tolerance="unsynchronized logging is the largest unsynchronized phase (ahead by the "
                 "95% interval of the difference of the two medians) and longer than synchronized logging (by the 95% interval of the "
                 "difference of their medians, block bootstrap)")
def _logging_absorbs(ev):
    top, _, lead = largest_phase(ev, NOSYNC)
    free = ev.value(EID, NOSYNC + "logging", PHASE_TIME)
    synced = ev.value(EID, SYNC + "logging", PHASE_TIME)
    # two series measured one after the other: the difference of their medians by its own
    # interval (an IQR is the spread of single steps, not the noise of a median)
    groups = [[(EID, NOSYNC + "logging", PHASE_TIME)], [_phase_series("logging")]]
    # two parts, each against its own noise: where the backlog lands, and that it lands
    return judge_parts(
        Part(top == "logging", f"largest unsynchronized phase {top}", lead,
             name="logging is the largest unsynchronized phase",
             mechanism=f"little device work is queued for the first host read: {top} keeps "
                       "its own time (the host is about as slow as the device)"
             if ev.is_cuda(EID) else f"no asynchronous device: each phase's work is done "
                                     f"when it returns, so {top} keeps its own time"),
        interval_part(ev, free - synced,
                      f"unsynchronized logging {free:.3f} ms (synchronized {synced:.3f})",
                      groups, _median_gap, (0, math.inf), unit=" ms",
                      name="logging absorbs queued work",
                      mechanism="the first host read waits for nothing: no backlog"))


def _median_gap(a, b):
    """The first series' median minus the second's (resampled groups)."""
    return medians(a)[:, 0] - medians(b)[:, 0]


@claim("C13", EID, "input wait is not the bottleneck of the measured step",
       chapter="input_wait 0.2% (the chapter's batch is resident)",
       tolerance=f"input wait < {INPUT_WAIT_PCT}% of the step, decided by the share's 95% "
                 "interval over E05's steps (block bootstrap): the workload's own loader where "
                 "it has one, else one batch served from host memory (~0 by construction: it "
                 "tests the hand-over, not a pipeline)")
def _input_wait_small(ev):
    s = _shares(ev)
    share = s["input_wait"]
    phases = list(s)
    at = phases.index("input_wait")
    source = ("fed by the workload's loader" if fed_by_loader(ev) else
              "one batch served from host memory, no loader; E24 measures a DataLoader's wait")

    def share_pct(synced):  # the row's statistic: a median over the sum of the medians
        m = medians(synced)
        return 100 * m[:, at] / m.sum(axis=-1)

    return judge_parts(interval_part(
        ev, share, f"input wait {share:.1f}% of the step ({source})",
        [[_phase_series(p) for p in phases]], share_pct, (-math.inf, INPUT_WAIT_PCT),
        mechanism="input wait is a real share of this step: the step waits on its data; look "
                  "at the data path first (workers, pinned memory: E24)"))
