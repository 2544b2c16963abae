"""E08: the read side of scripts/e08_batch_sweep.py (its entry, table, figure and claims)."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

import pandas as pd

from perflab.claims import (
    SEPARATE_PROCESSES,
    Absent,
    Evidence,
    Unmeasured,
    claim,
    holds,
    judge,
    pct,
)
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, numbered_variants, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E08",
        "batch_sweep",
        "Latency, throughput and peak memory across batch sizes",
        "localize",
        cpu_behaviour="peak RSS (VmHWM) of each batch size's fresh process instead of "
        "allocator counters; a scaled batch range",
    report_section='7 · Latency, throughput and peak memory',
)


#: ms per step of free-running stretches (one sync at each end): the rate throughput is from
FREE_RUNNING_STEP = "free_running_step"

#: E08's answer rows (perflab.sweep): variant -> label, and the column that decided it
E08_ANSWERS = (
    ("lowest_latency", "lowest-latency batch", "median_ms"),
    ("highest_throughput", "highest-throughput batch", "examples_per_s"),
    ("largest_that_fits", "largest batch that fits", None),
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Batch sweep: the chapter's columns per batch size, then the sweep's three answers.

    Peak memory is the allocator's peak allocated / reserved on CUDA and the
    process's peak RSS (VmHWM) on the CPU; examples/s is from free-running
    stretches (a training loop's rate; runs before it divided the batch by the
    synchronized per-call median, a row's sync boundary says which); each
    answer row names its batch size and repeats the number that decided it.
    """
    r = rows_of("E08", frame)
    sizes = numbered_variants(r, "batch_")
    rss = (r.metric == "peak_rss").any()
    alloc = (r[r.metric == "peak_allocated"].status == "ok").any() or not rss
    mem = ([("peak_alloc_mib", "peak_allocated"), ("peak_resv_mib", "peak_reserved")]
           if alloc else []) + ([("peak_rss_mib", "peak_rss")] if rss else [])
    columns = ["batch", "median_ms", "iqr_ms", "examples_per_s", *(c for c, _ in mem),
               "per_example_ms", "answer"]

    def cells(v: str) -> dict[str, Any]:
        rec = {"median_ms": pick(r, v), "iqr_ms": pick(r, v, statistic="iqr"),
               "examples_per_s": pick(r, v, "throughput")}
        rec.update({c: pick(r, v, m, "value") for c, m in mem})
        rec["per_example_ms"] = pick(r, v, "latency_per_example")
        return rec

    records = [{"batch": int(v.removeprefix("batch_")), **cells(v), "answer": ""} for v in sizes]
    for variant, label, decided_by in E08_ANSWERS:
        b = pick(r, variant, "batch_size", "value")
        rec: dict[str, Any] = {"batch": b if isinstance(b, Missing) else int(b), "answer": label}
        if not isinstance(b, Missing) and decided_by:
            rec[decided_by] = cells(f"batch_{int(b)}")[decided_by]
        records.append(rec)
    return make_table(records, columns)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The controlled training step swept over batch sizes (log2 axis), each batch size
    measured in its own fresh process: median ms per step with p25..p75 error bars, examples
    per second, and peak memory (peak allocated and reserved on CUDA, the process's peak RSS
    on the CPU), each panel marking its answer (lowest-latency batch, highest-throughput
    batch, largest batch that fits); a batch size that ran out of memory is labelled ``oom``
    instead of drawn.
    """
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.figures import bar_cell, log2_x, new_figure
    r = rows[rows.experiment == "E08"]
    shapes = [s for s in r.input_shape.unique() if s]
    title_rows = r.copy()
    if len(shapes) > 1:  # the title names the swept range, not the first batch's shape
        title_rows["input_shape"] = f"{shapes[0]} … {shapes[-1]}"
    fig, axes = new_figure("E08", title_rows, ncols=3, width=14.0, height=4.8)
    sizes = sorted(int(v.removeprefix("batch_")) for v in r.variant.unique()
                   if v.startswith("batch_"))
    rss = (r.metric == "peak_rss").any()
    alloc = (r[r.metric == "peak_allocated"].status == "ok").any() or not rss
    memory = ([("peak allocated", "peak_allocated"), ("peak reserved", "peak_reserved")]
              if alloc else []) + ([("peak RSS (VmHWM, whole process)", "peak_rss")] if rss
                                   else [])
    panels = [
        (axes[0], "ms per step (median, p25..p75)", [("median", "step_latency", "median")],
         "lowest_latency", "lowest latency"),
        (axes[1], "examples/s (B / median)", [("examples/s", "throughput", "median")],
         "highest_throughput", "highest throughput"),
        (axes[2], "peak MiB" + (" (CPU: process peak RSS)" if rss and not alloc else ""),
         [(label, m, "value") for label, m in memory], "largest_that_fits",
         "largest that fits"),
    ]
    notes: list[str] = []
    for ax, ylabel, series, answer, answer_label in panels:
        for i, (label, metric, statistic) in enumerate(series):
            xs, ys = [], []
            for b in sizes:
                cell = pick(r, f"batch_{b}", metric, statistic)
                if isinstance(cell, Missing):
                    continue
                xs.append(b)
                ys.append(float(cell))
                if metric == "step_latency":
                    bar = bar_cell(r, f"batch_{b}")
                    if not isinstance(bar, Missing):
                        ax.errorbar(b, bar[0], yerr=[[bar[1]], [bar[2]]], fmt="none",
                                    ecolor="#222222", capsize=3, lw=1)
            if xs:
                ax.plot(xs, ys, marker="os^"[i % 3], label=label if len(series) > 1 else None,
                        color=sns.color_palette()[i])
        # batch sizes that did not run: their status at their place
        for b in sizes:
            cell = pick(r, f"batch_{b}")
            if isinstance(cell, Missing):
                ax.text(b, 0.03, cell.status, transform=ax.get_xaxis_transform(), rotation=90,
                        ha="center", va="bottom", fontsize=8, color="#a35f00")
                if ax is axes[0]:
                    notes.append(textwrap.shorten(f"batch {b}: {cell}", 300))
        chosen = pick(r, answer, "batch_size", "value")
        if isinstance(chosen, Missing):
            ax.set_title(f"{answer_label}: {chosen.status}", fontsize=9)
        else:
            b = int(chosen)
            ax.axvline(b, color="#c0392b", lw=1.2, ls="--",
                       label=f"{answer_label}: B = {b}")
            ax.set_title(f"{answer_label}: B = {b}", fontsize=9)
        if sizes:
            # every swept size on the axis, the ones that did not run (labelled) too
            log2_x(ax, sizes)
        ax.set_xlabel("batch size B (log2)")
        ax.set_ylabel(ylabel)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=8)
    if not sizes:
        notes.append("no batch size has rows")
    if notes:  # why a batch size is missing, under the panels (not over the curves)
        fig.supxlabel("\n".join(textwrap.fill(n, 170) for n in dict.fromkeys(notes)),
                      x=0.01, ha="left", fontsize=8, color="#a35f00")
    return fig


def _sweep(ev: Evidence, metric: str, statistic: str = "median") -> list[tuple[int, float]]:
    got = sorted((int(v.removeprefix("batch_")), x) for v, x in
                 ev.variants("E08", "batch_", metric, statistic).items())
    if len(got) < 3:
        if not ev.has("E08"):
            raise Absent("E08 not run")
        raise Absent(f"fewer than three batch sizes with {metric}")
    return got


@claim("C19", "E08", "throughput rises with batch size (with diminishing returns)",
       chapter="2434 -> 30993 examples/s from batch 32 to 2048",
       tolerance="the largest batch has the highest throughput; each step up within 5% or higher")
def _throughput_rises(ev):
    t = _sweep(ev, "throughput")
    best = max(t, key=lambda bt: bt[1])[0]
    mono = all(b2 >= 0.95 * b1 for (_, b1), (_, b2) in zip(t, t[1:]))
    return holds(best == t[-1][0] and mono,
                 f"{t[0][1]:.0f} -> {t[-1][1]:.0f} examples/s (batch {t[0][0]} -> {t[-1][0]}); "
                 f"best at {best}",
                 mechanism=f"throughput peaks at batch {best} and falls beyond it")


@claim("C20", "E08", "latency is flat below a knee: small batches cost about the same per step",
       chapter="13.150 / 13.123 / 13.226 ms at batch 32 / 64 / 128",
       tolerance="median at the third-smallest batch within 10% of the smallest; undecided "
       "without a between-process floor (each batch size is its own process)")
def _latency_flat(ev):
    s = _sweep(ev, "step_latency")
    (b0, m0), (b2, m2) = s[0], s[2]
    rel = (m2 - m0) / m0
    # two processes' medians: C00's floor is within one process, so it cannot judge this
    return judge(rel <= 0.10, f"{m0:.3f} ms at {b0} vs {m2:.3f} ms at {b2} ({pct(100 * rel)})",
                 is_resolved=SEPARATE_PROCESSES,
                 mechanism="latency grows with the batch from the smallest one: no fixed-cost floor "
                           "(the step is compute-bound at every size)")


@claim("C21", "E08", "lowest latency, highest throughput and largest batch that fits are different answers",
       chapter="lowest latency at 64, highest throughput at 2048",
       tolerance="lowest-latency batch != highest-throughput batch")
def _three_answers(ev):
    lo = ev.value("E08", "lowest_latency", "batch_size", "value")
    hi = ev.value("E08", "highest_throughput", "batch_size", "value")
    return holds(lo != hi, f"lowest latency at {lo:.0f}, highest throughput at {hi:.0f}",
                 mechanism="one batch answers both questions here")


@claim("C22", "E08", "peak memory barely moves with batch until large batch",
       chapter="814 -> 820 MiB from batch 64 to 1024, 928 at 2048",
       tolerance="peak at the second-largest batch within 10% of the second-smallest")
def _peak_flat(ev):
    try:
        p = _sweep(ev, "peak_allocated", "value")
        what = "peak allocated"
    except (Absent, Unmeasured):
        p = _sweep(ev, "peak_rss", "value")
        what = "peak RSS"
    (b1, m1), (b2, m2) = p[1], p[-2]
    rel = (m2 - m1) / m1
    return holds(abs(rel) <= 0.10, f"{what} {m1:.1f} MiB at {b1} vs {m2:.1f} MiB at {b2} ({pct(100 * rel)})",
                 mechanism="activations are a real share of the peak here: it grows with the batch")
