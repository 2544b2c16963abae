"""E05: the read side of scripts/e05_phases.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import Absent, claim, holds, judge, pct, phase_shares, resolved
from perflab.experiments import Experiment
from perflab.tables import make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E05",
        "phases",
        "Localize: the seven phases of the step, with and without per-phase sync",
        "localize",
        cpu_behaviour="host-to-device is a no-op copy and sync is a no-op: no backlog to absorb",
    report_section='4 · Localize: decompose the step',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Seven phases: synchronized median, IQR, share; the unsynchronized brackets beside."""
    r = rows_of("E05", frame)
    records = []
    for ph in ("input_wait", "host_to_device", "forward", "loss", "backward", "optimizer",
               "logging"):
        records.append({
            "phase": ph,
            "median_ms": pick(r, f"sync/{ph}", "phase_time"),
            "iqr_ms": pick(r, f"sync/{ph}", "phase_time", "iqr"),
            "share_pct": pick(r, f"sync/{ph}", "phase_share", "value"),
            "no_sync_median_ms": pick(r, f"nosync/{ph}", "phase_time"),
        })
    records.append({"phase": "sum of phases", "median_ms": pick(r, "sum_of_phases",
                                                                statistic="value")})
    records.append({"phase": "measured total (uninstrumented)",
                    "median_ms": pick(r, "uninstrumented_total"),
                    "iqr_ms": pick(r, "uninstrumented_total", statistic="iqr")})
    records.append({"phase": "sum - total", "median_ms": pick(r, "sum_minus_total",
                                                              statistic="value"),
                    "share_pct": pick(r, "sum_minus_total", "step_latency_rel", "value")})
    return make_table(records, ["phase", "median_ms", "iqr_ms", "share_pct", "no_sync_median_ms"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Median time of each of the seven phases with the device synchronized at every boundary
    and with the same brackets unsynchronized (where the first host read absorbs the queued
    work), and the sum of the synchronized phase medians beside the uninstrumented step.
    """
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.figures import add_note, bar_cell, draw_bars, new_figure, num
    r = rows[rows.experiment == "E05"]
    fig, (ax, ax2) = new_figure("E05", r, ncols=2, width=12.0,
                                 gridspec_kw={"width_ratios": [3, 1]})
    phases = ["input_wait", "host_to_device", "forward", "loss", "backward", "optimizer",
              "logging"]
    notes = draw_bars(ax, phases, {
        "sync at every boundary": [bar_cell(r, f"sync/{ph}", metric="phase_time")
                                   for ph in phases],
        "no sync (submission times)": [bar_cell(r, f"nosync/{ph}", metric="phase_time")
                                       for ph in phases],
    })
    ax.set_ylabel("median ms per phase (error bar: p25..p75)")
    ax.legend(loc="upper left", fontsize=8)
    add_note(ax, notes, loc="upper right")
    # the phase sum, stacked by phase, beside the uninstrumented step
    bottom = 0.0
    for ph, colour in zip(phases, sns.color_palette("tab10", len(phases))):
        v = num(pick(r, f"sync/{ph}", "phase_time"))
        if v is None:
            continue
        ax2.bar(0, v, bottom=bottom, color=colour, width=0.6, label=ph)
        bottom += v
    total = num(pick(r, "uninstrumented_total"))
    if total is not None:
        ax2.bar(1, total, color="#555555", width=0.6)
    ax2.set_xticks([0, 1], ["sum of\nphase medians", "uninstrumented\nstep (median)"])
    ax2.set_ylabel("ms")
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


@claim("C10", "E05", "the optimizer is the largest phase of the controlled step",
       chapter="optimizer 51.3%, backward 28.4%, forward 17.4%",
       tolerance="optimizer has the largest share")
def _optimizer_largest(ev):
    s = phase_shares(ev, "E05", "sync/")
    top = max(s, key=s.get)
    opt = s.get("optimizer", float("nan"))
    second = max((p for p in s if p != "optimizer"), key=s.get, default="")
    return holds(top == "optimizer", f"optimizer {opt:.1f}%, next {second} {s.get(second, 0):.1f}%",
                 mechanism=f"{top}, not the optimizer, is the largest phase here "
                           f"({s[top]:.1f}% vs {opt:.1f}%)")


@claim("C11", "E05", "per-phase synchronization moves the total by little: the phase sum is near the uninstrumented step",
       chapter="sum 17.560 vs total 16.758 ms (+4.8%)", tolerance="|sum - total| < 10% of total")
def _phase_sum_close(ev):
    rel = ev.value("E05", "sum_minus_total", "step_latency_rel", "value")
    return holds(abs(rel) < 10, f"sum - total {pct(rel)}",
                 mechanism="per-phase synchronization perturbs this step by more than 10%")


@claim("C12", "E05", "without per-phase sync the first host read (logging) absorbs the backlog",
       chapter="logging 11.683 ms unsynchronized vs 0.064 ms synchronized",
       tolerance="unsynchronized logging is the largest unsynchronized phase and beyond the noise")
def _logging_absorbs(ev):
    ns = {v.removeprefix("nosync/"): x for v, x in ev.variants("E05", "nosync/", "phase_time").items()}
    if not ns:
        raise Absent("no unsynchronized phases" + ("" if ev.has("E05") else " (E05 not run)"))
    synced = ev.value("E05", "sync/logging", "phase_time")
    iqr = ev.maybe("E05", "nosync/logging", "phase_time", "iqr")
    top = max(ns, key=ns.get)
    return judge(top == "logging", f"unsynchronized logging {ns['logging']:.3f} ms "
                 f"(synchronized {synced:.3f}); largest unsynchronized phase {top}",
                 is_resolved=resolved(ev, "E05", "nosync/logging", ns["logging"] - synced, noise=iqr),
                 mechanism=f"no queued device work to absorb: {top} keeps its own time")


@claim("C13", "E05", "input wait is not the bottleneck (the batch is resident)",
       chapter="input_wait 0.2%", tolerance="share < 5%")
def _input_wait_small(ev):
    s = phase_shares(ev, "E05", "sync/")
    return holds(s["input_wait"] < 5, f"{s['input_wait']:.1f}%",
                 mechanism="input wait is a real share of this step: look at the data path first")
