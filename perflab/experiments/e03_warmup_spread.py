"""E03: the read side of scripts/e03_warmup_spread.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import Absent, claim, holds, judge, resolved
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, numbered_variants, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment("E03", "warmup_spread", "Warmup and spread", "hygiene",
    report_section='3 · Benchmark hygiene',
)


#: E03's statistics, in the chapter's order; tail_count is shown as "k/n"
E03_STATS = ("median", "iqr", "p25", "p75", "mean", "std", "min", "max")


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Warmup and spread: one row per series (warmup N, then the long spread series)."""
    r = rows_of("E03", frame)
    series = numbered_variants(r, "warmup_") + [v for v in r.variant.unique()
                                        if not v.startswith("warmup_")]
    records = []
    for v in series:
        if v.startswith("warmup_"):
            label = f"warmup={v.removeprefix('warmup_')}"
        else:  # the long warmed series: say what it is from its window
            label = f"{v} ({pick(r, v, field='window')})"
        rec = {"series": label, "n": pick(r, v, field="n")}
        rec.update({f"{s}_ms": pick(r, v, statistic=s) for s in E03_STATS})
        tail, count = pick(r, v, statistic="tail_count"), pick(r, v, statistic="count")
        if isinstance(count, Missing):  # the sample count is also on every row
            count = pick(r, v, statistic="tail_count", field="n")
        # only the spread series records its tail; blank for the others
        if isinstance(tail, Missing) and tail.status == "not recorded":
            rec["above_median_plus_3iqr"] = ""
        elif isinstance(tail, Missing):
            rec["above_median_plus_3iqr"] = tail
        else:
            rec["above_median_plus_3iqr"] = f"{int(tail)}/{int(count)}"
        records.append(rec)
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Every synchronized call of the series measured after each warmup length (box and
    points), and the histogram of the long warmed series with its median and the median +
    3·IQR tail threshold.
    """
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.figures import add_note, box_strip, new_figure, samples_of
    r = rows[rows.experiment == "E03"]
    fig, (left, right) = new_figure("E03", r, ncols=2, width=10.5,
                                     gridspec_kw={"width_ratios": [1.2, 1]})
    warmups = sorted((v for v in r.variant.unique() if v.startswith("warmup_")),
                     key=lambda v: int(v.removeprefix("warmup_")))
    data = samples_of(samples, "E03", warmups)
    if data.empty:
        add_note(left, ["warmup series: no samples (not run)"], loc="upper left")
    else:
        box_strip(left, data, {w: f"warmup={w.removeprefix('warmup_')}" for w in warmups})
    left.set_title("each call of each warmup series")
    left.set_ylabel("ms per call (synchronized)")

    spread = samples_of(samples, "E03", ["spread"])
    med, iqr = pick(r, "spread"), pick(r, "spread", statistic="iqr")
    if spread.empty or isinstance(med, Missing) or isinstance(iqr, Missing):
        add_note(right, [f"spread: {med if isinstance(med, Missing) else 'no samples'}"],
              loc="upper left")
    else:
        sns.histplot(spread.value, ax=right, bins=30, color=sns.color_palette()[0])
        right.axvline(med, color="black", lw=1.2, label=f"median {med:.3f} ms")
        right.axvline(med + 3 * iqr, color="#c0392b", lw=1.2, ls="--",
                      label=f"median + 3·IQR = {med + 3 * iqr:.3f} ms")
        tail, count = pick(r, "spread", statistic="tail_count"), pick(r, "spread",
                                                                       statistic="count")
        if not isinstance(tail, Missing) and not isinstance(count, Missing):
            right.set_title(f"{int(count)} warmed steps: {int(tail)}/{int(count)} above "
                            "median + 3·IQR")
        right.legend(loc="upper right")
        right.set_xlabel("ms per step (synchronized)")
        right.set_ylabel("steps")
    return fig


@claim("C07", "E03", "the median is robust to the cold first step; the mean is not",
       chapter="warmup 0: mean 17.338 vs median 16.390 (max 96.2); medians within 0.09 ms",
       tolerance="warmup-0 mean - median > 3x the median's move across warmups")
def _median_robust(ev):
    wus = sorted(int(v.removeprefix("warmup_")) for v in ev.variants("E03", "warmup_", "step_latency"))
    if len(wus) < 2:
        raise Absent("fewer than two warmup series" + ("" if ev.has("E03") else " (E03 not run)"))
    lo, hi = f"warmup_{wus[0]}", f"warmup_{wus[-1]}"
    mean0, med0 = ev.value("E03", lo, "step_latency", "mean"), ev.value("E03", lo, "step_latency")
    medhi = ev.value("E03", hi, "step_latency")
    iqr = ev.value("E03", hi, "step_latency", "iqr")
    mean_pull, median_move = mean0 - med0, abs(med0 - medhi)
    max0 = ev.maybe("E03", lo, "step_latency", "max", float("nan"))
    return judge(mean_pull > 3 * median_move,
                 f"warmup {wus[0]}: mean - median {mean_pull:+.3f} ms; median moved "
                 f"{median_move:.3f} ms to warmup {wus[-1]}",
                 is_resolved=resolved(ev, "E03", lo, mean_pull, noise=iqr),
                 mechanism=f"the slowest unwarmed call ({max0:.3f} ms) is not far enough out "
                           "to pull the mean")


@claim("C08", "E03", "warmed steps have a one-sided tail: mean above median, some steps above median + 3 IQR",
       chapter="mean 16.525 > median 16.449; 21/400 above median + 3 IQR",
       tolerance="mean > median and at least 1% of steps in the tail")
def _one_sided_tail(ev):
    mean, med = ev.value("E03", "spread", "step_latency", "mean"), ev.value("E03", "spread", "step_latency")
    tail = ev.value("E03", "spread", "step_latency", "tail_count")
    count = ev.value("E03", "spread", "step_latency", "count")
    return holds(mean > med and tail / count >= 0.01,
                 f"mean {mean:.3f} vs median {med:.3f} ms; {int(tail)}/{int(count)} in the tail",
                 mechanism="no borrowed-GPU tail here: the warmed distribution is tight")
