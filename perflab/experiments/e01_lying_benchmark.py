"""E01: the read side of scripts/e01_lying_benchmark.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import Absent, Evidence, claim, holds, judge, resolved
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, numbered_variants, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E01",
        "lying_benchmark",
        "The lying benchmark: unsynchronized loops vs the synchronized step",
        "hygiene",
        cpu_behaviour="no asynchrony: backlog ~0; cold first call vs unwarmed vs warmed",
    report_section='1 · The lying benchmark',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """The lying benchmark: naive loops, then the synchronized and cold numbers."""
    r = rows_of("E01", frame)
    records = []
    for v in numbered_variants(r, "naive_loop_"):
        records.append({
            "measurement": f"naive loop of {v.removeprefix('naive_loop_')}",
            "n": pick(r, v, "reported_ms_per_step", "value", field="n"),
            "reported_ms_per_step": pick(r, v, "reported_ms_per_step", "value"),
            "backlog_ms": pick(r, v, "backlog_at_final_sync", "value"),
            "real_ms_per_step": pick(r, v, "real_ms_per_step", "value"),
        })
    # single-number rows: host_return is what an unsynchronized clock reports,
    # the other three are synchronized (real) times
    for label, variant, statistic, column in (
        ("synchronized + warmed, median", "synchronized_warmed", "median", "real_ms_per_step"),
        ("one step, host-visible return only (median)", "host_return", "median",
         "reported_ms_per_step"),
        ("first training step of the process", "first_step", "value", "real_ms_per_step"),
        ("unwarmed, median", "unwarmed", "median", "real_ms_per_step"),
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
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    from perflab.figures import add_note, log_if_wide, new_figure, num
    r = rows[rows.experiment == "E01"]
    fig, (ax,) = new_figure("E01", r)
    loops = sorted(int(v.removeprefix("naive_loop_")) for v in r.variant.unique()
                   if v.startswith("naive_loop_"))
    reported = [num(pick(r, f"naive_loop_{n}", "reported_ms_per_step", "value")) for n in loops]
    real = [num(pick(r, f"naive_loop_{n}", "real_ms_per_step", "value")) for n in loops]
    backlog = [num(pick(r, f"naive_loop_{n}", "backlog_at_final_sync", "value")) for n in loops]
    notes = []
    if loops:
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
    else:
        notes.append(f"naive loops: {pick(r, 'naive_loop_0')}")
    synced = pick(r, "synchronized_warmed")
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


def _naive(ev: Evidence) -> list[tuple[int, str]]:
    loops = sorted((int(v.removeprefix("naive_loop_")), v) for v in
                   ev.variants("E01", "naive_loop_", "reported_ms_per_step", "value"))
    if not loops:
        raise Absent("no naive loop rows" + ("" if ev.has("E01") else " (E01 not run)"))
    return loops


@claim("C01", "E01", "a short unsynchronized loop under-reports the synchronized step time",
       chapter="9.491 ms reported vs 16.430 ms real (loop of 20)",
       tolerance="reported < 90% of the synchronized median, effect beyond its IQR")
def _short_loop_lies(ev):
    n, v = _naive(ev)[0]
    reported = ev.value("E01", v, "reported_ms_per_step", "value")
    real = ev.value("E01", "synchronized_warmed", "step_latency")
    iqr = ev.maybe("E01", "synchronized_warmed", "step_latency", "iqr")
    backlog = ev.maybe("E01", v, "backlog_at_final_sync", "value", 0.0)
    return judge(reported < 0.9 * real,
                 f"loop of {n}: {reported:.3f} ms reported vs {real:.3f} ms synchronized",
                 is_resolved=resolved(ev, "E01", "synchronized_warmed", real - reported, noise=iqr),
                 mechanism=f"only {backlog:.3f} ms was still queued at the final sync: "
                           "host and device run in step (no asynchrony to hide)")


@claim("C02", "E01", "the per-step time a longer unsynchronized loop reports approaches the real one",
       chapter="9.491 -> 14.692 -> 15.741 ms reported for loops of 20/100/400 (real ~16.08)",
       tolerance="reported/real of the longest loop > of the shortest, by more than 5 points")
def _longer_loop_converges(ev):
    loops = _naive(ev)
    ratios = []
    for n, v in (loops[0], loops[-1]):
        ratios.append(ev.value("E01", v, "reported_ms_per_step", "value")
                      / ev.value("E01", v, "real_ms_per_step", "value"))
    return holds(ratios[1] - ratios[0] > 0.05,
                 f"reported/real {ratios[0]:.2f} (loop of {loops[0][0]}) -> "
                 f"{ratios[1]:.2f} (loop of {loops[-1][0]})",
                 mechanism="the shortest loop already reports the real time: nothing was queued")


@claim("C03", "E01", "the first training step of a process is slower than the warmed step",
       chapter="20.890 ms first vs 16.430 ms warmed median",
       tolerance="first > warmed median + its IQR, and > 110% of it")
def _first_step_cold(ev):
    first = ev.value("E01", "first_step", "step_latency", "value")
    med = ev.value("E01", "synchronized_warmed", "step_latency")
    iqr = ev.maybe("E01", "synchronized_warmed", "step_latency", "iqr")
    return judge(first > 1.1 * med, f"first {first:.3f} ms vs warmed {med:.3f} ms",
                 is_resolved=resolved(ev, "E01", "first_step", first - med, noise=iqr))


@claim("C04", "E01", "one step timed at its host-visible return under-reports the step",
       chapter="4.866 ms vs 16.430 ms",
       tolerance="host-return median < 90% of the synchronized median, beyond the IQR")
def _host_return_lies(ev):
    host = ev.value("E01", "host_return", "step_latency")
    med = ev.value("E01", "synchronized_warmed", "step_latency")
    iqr = ev.maybe("E01", "synchronized_warmed", "step_latency", "iqr")
    # how much work a free-running loop leaves queued: ~0 without an asynchronous device;
    # on a GPU, a host as slow as the device leaves little (the H200's host-bound MLP)
    queued = ev.maybe("E01", "naive_loop_20", "backlog_at_final_sync", "value")
    if ev.device("E01").startswith("cuda") and queued is not None:
        why = (f"the host is about as slow as the device: only {queued:.2g} ms of work is "
               f"queued when it returns ({100 * queued / med:.0f}% of the step)")
    else:
        why = "the call returns when its work is done: no asynchronous queue"
    return judge(host < 0.9 * med, f"{host:.3f} ms at return vs {med:.3f} ms synchronized",
                 is_resolved=resolved(ev, "E01", "host_return", med - host, noise=iqr),
                 mechanism=why)
