"""One figure per experiment, drawn from its result rows and raw samples.

Every figure shares one style (:func:`apply_style`) and one title block (the
experiment's title over its contract). Summary numbers (medians, IQRs, loop
timings) come from the result rows through :func:`perflab.tables.pick`; the
distributions come from the samples CSV. A series that did not measure is not
drawn as zero: its place is labelled with its status and the reason is
written in a note inside the figure.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")  # no display: figures are files (set before pyplot is imported)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    FixedLocator,
    FuncFormatter,
    MaxNLocator,
    NullLocator,
    ScalarFormatter,
)

from perflab import io  # noqa: E402
from perflab.catalogue import EXPERIMENTS  # noqa: E402
from perflab.tables import Missing, pick  # noqa: E402

DPI = 110
#: a series spanning more than this ratio (max / min) is drawn on a log axis
LOG_RATIO = 20.0


def apply_style() -> None:
    """The one style of every perflab figure."""
    sns.set_theme(
        context="notebook",
        style="whitegrid",
        palette="colorblind",
        rc={
            "figure.dpi": DPI,
            "savefig.dpi": DPI,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "xtick.labelsize": 9,
            "ytick.labelsize": 9,
            "legend.fontsize": 9,
            "figure.titlesize": 12,
            "figure.titleweight": "bold",
        },
    )


# --------------------------------------------------------------------- helpers


def _num(cell) -> float | None:
    """A picked cell as a float, or None when the row did not measure."""
    return None if isinstance(cell, Missing) else float(cell)


def _contract_line(rows: pd.DataFrame) -> str:
    if rows.empty:
        return "no result rows"
    r = rows.iloc[0]  # the contract columns are the same on every row of one experiment
    return (f"{r['model']} · input {r['input_shape']} · {r['dtype']} · {r['device']} "
            f"({r['device_name']})")


def _new_figure(eid: str, rows: pd.DataFrame, ncols: int = 1, width: float = 7.5,
                height: float = 4.6, **kw) -> tuple[Figure, list[plt.Axes]]:
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False,
                             layout="constrained", **kw)
    title = EXPERIMENTS[eid].title if eid in EXPERIMENTS else eid
    fig.suptitle(f"{eid} · {title}\n{_contract_line(rows)}", fontsize=11)
    return fig, list(axes[0])


def _note(ax: plt.Axes, lines: list[str], loc: str = "lower right") -> None:
    """Write why some series are missing, in a box inside the axes."""
    if not lines:
        return
    text = "\n".join(textwrap.fill(s, 60) for s in dict.fromkeys(lines))  # dedupe, keep order
    x, ha = (0.98, "right") if "right" in loc else (0.02, "left")
    y, va = (0.03, "bottom") if "lower" in loc else (0.97, "top")
    ax.text(x, y, text, transform=ax.transAxes, ha=ha, va=va, fontsize=8,
            bbox=dict(boxstyle="round", facecolor="#fff4e5", edgecolor="#d08c2a"))


def _log_if_wide(ax: plt.Axes, values, axis: str = "y") -> None:
    v = np.asarray([x for x in values if x is not None and x > 0], dtype=float)
    if v.size and v.max() / v.min() > LOG_RATIO:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        # plain numbers (0.1, 1, 10) instead of powers of ten
        (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(
            FuncFormatter(lambda v, _: f"{v:g}"))


def _log2_x(ax: plt.Axes, ticks: list[int]) -> None:
    """A log2 x axis with a plain-number tick at each of ``ticks`` and a margin either side."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(ticks[0] / 1.5, ticks[-1] * 1.5)


def _samples(samples: pd.DataFrame, eid: str, variants: list[str]) -> pd.DataFrame:
    """The raw samples of ``variants``, in that order (as a categorical)."""
    s = samples[(samples.experiment == eid) & samples.variant.isin(variants)].copy()
    s["variant"] = pd.Categorical(s.variant, categories=variants, ordered=True)
    return s


def _bar_cell(rows: pd.DataFrame, variant: str, execution: str | None = None,
              metric: str = "step_latency"):
    """(median, lower error, upper error) from the rows, or a Missing.

    The error bar spans the interquartile range (p25..p75); a series that kept
    only its IQR gets a symmetric bar of that width.
    """
    med = pick(rows, variant, metric, execution=execution)
    if isinstance(med, Missing):
        return med
    p25 = _num(pick(rows, variant, metric, statistic="p25", execution=execution))
    p75 = _num(pick(rows, variant, metric, statistic="p75", execution=execution))
    if p25 is None or p75 is None:
        iqr = _num(pick(rows, variant, metric, statistic="iqr", execution=execution)) or 0.0
        return med, iqr / 2, iqr / 2
    return med, med - p25, p75 - med


def _bars(ax: plt.Axes, groups: list[str], series: dict[str, list]) -> list[str]:
    """Grouped bars with IQR error bars; returns notes for the cells that are Missing.

    ``series`` maps a legend label to one cell per group (see :func:`_bar_cell`).
    """
    colours = sns.color_palette(n_colors=max(len(series), 1))
    width = 0.8 / max(len(series), 1)
    notes, heights = [], []
    for i, (label, cells) in enumerate(series.items()):
        xs = np.arange(len(groups)) + (i - (len(series) - 1) / 2) * width
        for x, group, cell in zip(xs, groups, cells):
            if isinstance(cell, Missing):
                # no bar: say so at the bar's place instead of drawing a zero
                ax.text(x, 0.02, cell.status, transform=ax.get_xaxis_transform(), rotation=90,
                        ha="center", va="bottom", fontsize=8, color="#a35f00")
                if cell.reason:
                    notes.append(f"{group} ({label}): {cell}" if len(series) > 1
                                 else f"{group}: {cell}")
                continue
            med, lo, hi = cell
            heights += [med - lo, med + hi]
            ax.bar(x, med, width * 0.95, color=colours[i],
                   label=label if label not in ax.get_legend_handles_labels()[1] else None)
            ax.errorbar(x, med, yerr=[[lo], [hi]], fmt="none", ecolor="#222222", capsize=3, lw=1)
    ax.set_xticks(np.arange(len(groups)), [g.replace("_", "\n") for g in groups])
    _log_if_wide(ax, heights)
    if len(series) > 1:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return notes


def _box_strip(ax: plt.Axes, data: pd.DataFrame, labels: dict[str, str]) -> None:
    """Per-call samples of each series: a box (quartiles) with every sample on top."""
    sns.stripplot(data=data, x="variant", y="value", ax=ax, hue="variant", legend=False,
                  size=3.5, alpha=0.6, jitter=0.2, zorder=1)
    # an unfilled box drawn over the points, so the quartiles stay visible in a dense strip
    sns.boxplot(data=data, x="variant", y="value", ax=ax, showfliers=False, width=0.5,
                fill=False, color="#222222", linewidth=1.2, zorder=2)
    ax.set_xticks(ax.get_xticks(), [labels.get(t.get_text(), t.get_text())
                                    for t in ax.get_xticklabels()])
    ax.set_xlabel("")
    _log_if_wide(ax, data.value)


# --------------------------------------------------------------------- figures


def fig_e01(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Loop length vs the per-step time the loop reports and the real one."""
    r = rows[rows.experiment == "E01"]
    fig, (ax,) = _new_figure("E01", r)
    loops = sorted(int(v.removeprefix("naive_loop_")) for v in r.variant.unique()
                   if v.startswith("naive_loop_"))
    reported = [_num(pick(r, f"naive_loop_{n}", "reported_ms_per_step", "value")) for n in loops]
    real = [_num(pick(r, f"naive_loop_{n}", "real_ms_per_step", "value")) for n in loops]
    backlog = [_num(pick(r, f"naive_loop_{n}", "backlog_at_final_sync", "value")) for n in loops]
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
    _log_if_wide(ax, [*reported, *real, _num(synced) if not isinstance(synced, Missing) else None])
    ax.set_xlabel("steps in the unsynchronized loop")
    ax.set_ylabel("ms per step")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best")
    _note(ax, notes)
    return fig


def fig_e02(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """The four questions, eager vs compiled steady state (median, IQR error bars)."""
    r = rows[rows.experiment == "E02"]
    fig, (ax,) = _new_figure("E02", r, width=8.0)
    questions = list(r.variant.unique())
    executions = [e for e in ("eager", "compiled") if (r.execution == e).any()]
    series = {ex: [_bar_cell(r, q, ex) for q in questions] for ex in executions}
    notes = _bars(ax, questions, series)
    if "compiled" in executions:
        # the first compiled call is compilation: printed, not drawn (it dwarfs the bars)
        firsts = [pick(r, q, "first_call", "value", execution="compiled") for q in questions]
        text = ", ".join(f"{q} {v / 1e3:.2f} s" for q, v in zip(questions, firsts)
                         if not isinstance(v, Missing))
        if text:
            ax.set_title(textwrap.fill(f"first compiled call (not drawn): {text}", 95),
                         fontsize=9)
    ax.set_ylabel("median ms per call (error bar: p25..p75)")
    ax.set_xlabel("")
    _note(ax, notes, loc="upper right")
    return fig


def fig_e03(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Per-call samples after each warmup, and the spread of the long warmed series."""
    r = rows[rows.experiment == "E03"]
    fig, (left, right) = _new_figure("E03", r, ncols=2, width=10.5,
                                     gridspec_kw={"width_ratios": [1.2, 1]})
    warmups = sorted((v for v in r.variant.unique() if v.startswith("warmup_")),
                     key=lambda v: int(v.removeprefix("warmup_")))
    data = _samples(samples, "E03", warmups)
    if data.empty:
        _note(left, ["warmup series: no samples (not run)"], loc="upper left")
    else:
        _box_strip(left, data, {w: f"warmup={w.removeprefix('warmup_')}" for w in warmups})
    left.set_title("each call of each warmup series")
    left.set_ylabel("ms per call (synchronized)")

    spread = _samples(samples, "E03", ["spread"])
    med, iqr = pick(r, "spread"), pick(r, "spread", statistic="iqr")
    if spread.empty or isinstance(med, Missing) or isinstance(iqr, Missing):
        _note(right, [f"spread: {med if isinstance(med, Missing) else 'no samples'}"],
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


def fig_e04(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Timer.blocked_autorange's per-call time of each block vs the helper's per-call samples."""
    r = rows[rows.experiment == "E04"]
    fig, (ax,) = _new_figure("E04", r, width=7.5)
    timer = "timer_blocked_autorange"
    data = _samples(samples, "E04", [timer, "helper"])
    per_run = pick(r, timer, "number_per_run", "value")
    labels = {
        timer: "Timer.blocked_autorange\n"
               + (f"(per-call time of each block of {int(per_run)})"
                  if not isinstance(per_run, Missing) else "(per-call time of each block)"),
        "helper": "helper\n(one synchronized call per sample)",
    }
    if data.empty:
        _note(ax, [f"Timer: {pick(r, timer)}", f"helper: {pick(r, 'helper')}"], loc="upper left")
    else:
        data["variant"] = data.variant.cat.remove_unused_categories()
        _box_strip(ax, data, labels)
    ax.set_ylabel("ms per call")
    return fig


def fig_e06(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """The same step by three instruments; unsupported instruments are labelled, not drawn."""
    r = rows[rows.experiment == "E06"]
    fig, (ax,) = _new_figure("E06", r, width=7.0)
    instruments = ["wall_clock", "cuda_events", "host_submission"]
    notes = _bars(ax, instruments, {"median": [_bar_cell(r, v) for v in instruments]})
    gap = pick(r, "wall_minus_events")
    if isinstance(gap, Missing):
        notes.append(f"wall - events: {gap}")
    else:
        iqr = pick(r, "wall_minus_events", statistic="iqr")
        ax.set_title(f"wall - events = {gap:+.3f} ms per call (median; IQR {iqr:.3f})",
                     fontsize=9)
    ax.set_ylabel("median ms per step (error bar: p25..p75)")
    _note(ax, notes, loc="upper right")
    return fig


def _pair_blocks(ax: plt.Axes, samples: pd.DataFrame, eid: str, a: str, b: str,
                 labels: tuple[str, str]) -> None:
    """An interleaved pair: each block's median for A and for B, block by block."""
    s = samples[(samples.experiment == eid) & samples.variant.isin([a, b])]
    if s.empty:
        _note(ax, ["no samples of the interleaved pair"], loc="upper left")
        return
    blocks = s.groupby(["variant", "block"]).value.median().reset_index()
    for variant, label, marker in ((a, labels[0], "o"), (b, labels[1], "s")):
        d = blocks[blocks.variant == variant]
        ax.plot(d.block, d.value, marker=marker, label=label)
    ax.set_xlabel("block (A and B alternate AB, BA, ...)")
    ax.set_ylabel("block median, ms per step")
    ax.xaxis.set_major_locator(FixedLocator(sorted(blocks.block.unique())))
    ax.legend(loc="best", fontsize=8)


def fig_e05(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Phase medians with and without per-phase sync; the phase sum against the total."""
    r = rows[rows.experiment == "E05"]
    fig, (ax, ax2) = _new_figure("E05", r, ncols=2, width=12.0,
                                 gridspec_kw={"width_ratios": [3, 1]})
    phases = ["input_wait", "host_to_device", "forward", "loss", "backward", "optimizer",
              "logging"]
    notes = _bars(ax, phases, {
        "sync at every boundary": [_bar_cell(r, f"sync/{ph}", metric="phase_time")
                                   for ph in phases],
        "no sync (submission times)": [_bar_cell(r, f"nosync/{ph}", metric="phase_time")
                                       for ph in phases],
    })
    ax.set_ylabel("median ms per phase (error bar: p25..p75)")
    ax.legend(loc="upper left", fontsize=8)
    _note(ax, notes, loc="upper right")
    # the phase sum, stacked by phase, beside the uninstrumented step
    bottom = 0.0
    for ph, colour in zip(phases, sns.color_palette("tab10", len(phases))):
        v = _num(pick(r, f"sync/{ph}", "phase_time"))
        if v is None:
            continue
        ax2.bar(0, v, bottom=bottom, color=colour, width=0.6, label=ph)
        bottom += v
    total = _num(pick(r, "uninstrumented_total"))
    if total is not None:
        ax2.bar(1, total, color="#555555", width=0.6)
    ax2.set_xticks([0, 1], ["sum of\nphase medians", "uninstrumented\nstep (median)"])
    ax2.set_ylabel("ms")
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def fig_e07(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Isolated .step() per optimizer; the full-step foreach/fused pair block by block."""
    r = rows[rows.experiment == "E07"]
    fig, (ax, ax2) = _new_figure("E07", r, ncols=2, width=12.0)
    opts = ["sgd", "sgd_momentum", "adamw_foreach", "adamw_fused"]
    notes = _bars(ax, opts, {"median": [_bar_cell(r, o, metric="optimizer_step") for o in opts]})
    ax.set_ylabel("isolated .step(), median ms (error bar: p25..p75)")
    diff = pick(r, "fused_vs_foreach", "max_abs_diff", "value")
    ax.set_title(f"one fused vs one foreach step: max |diff| = {diff}" if isinstance(diff, Missing)
                 else f"one fused vs one foreach step: max |diff| = {diff:.2e}", fontsize=9)
    _note(ax, notes, loc="upper right")
    _pair_blocks(ax2, samples, "E07", "step_adamw_foreach", "step_adamw_fused",
                 ("full step, AdamW foreach", "full step, AdamW fused"))
    return fig


def fig_e25(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """The worked pass: where the baseline's time goes, then the remeasured pair."""
    r = rows[rows.experiment == "E25"]
    fig, (ax, ax2) = _new_figure("E25", r, ncols=2, width=12.0)
    phases = ["input_wait", "host_to_device", "forward", "loss", "backward", "optimizer",
              "logging"]
    shares = [_num(pick(r, f"localize/{ph}", "phase_share", "value")) for ph in phases]
    ax.barh([ph for ph, v in zip(phases, shares) if v is not None],
            [v for v in shares if v is not None], color=sns.color_palette()[0])
    ax.invert_yaxis()
    ax.set_xlabel("share of the step, % (per-phase sync)")
    ax.set_title("localize: the baseline step (AdamW foreach)", fontsize=9)
    _pair_blocks(ax2, samples, "E25", "adamw_foreach", "adamw_fused",
                 ("AdamW foreach", "AdamW fused"))
    change = pick(r, "adamw_fused_minus_adamw_foreach", "step_latency_relative", "value")
    if not isinstance(change, Missing):
        ax2.set_title(f"remeasure: fused changes the step by {change:+.1f}%", fontsize=9)
    return fig


def fig_e08(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """ms/step, examples/s and peak MiB against the batch size (log2 x), side by side.

    Each panel marks the answer it gives (lowest latency, highest throughput,
    largest batch that fits); a batch size that did not run (e.g. ``oom``) is
    labelled at its place on every panel, not drawn as zero.
    """
    r = rows[rows.experiment == "E08"]
    shapes = [s for s in r.input_shape.unique() if s]
    title_rows = r.copy()
    if len(shapes) > 1:  # the title names the swept range, not the first batch's shape
        title_rows["input_shape"] = f"{shapes[0]} … {shapes[-1]}"
    fig, axes = _new_figure("E08", title_rows, ncols=3, width=14.0, height=4.8)
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
                    bar = _bar_cell(r, f"batch_{b}")
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
            _log2_x(ax, sizes)
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


def _block_series(samples: pd.DataFrame, eid: str, variant: str,
                  metric: str = "block_median") -> pd.DataFrame:
    """One variant's samples of ``metric`` (e.g. its block medians), by block."""
    s = samples[(samples.experiment == eid) & (samples.variant == variant)
                & (samples.metric == metric)]
    return s.sort_values(["block", "index"])


def fig_e13(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Per-block medians of A (no host read) and B (.item() every step), both workloads."""
    r = rows[rows.experiment == "E13"]
    fig, axes = _new_figure("E13", r, ncols=2, width=12.0)
    colours = sns.color_palette(n_colors=2)
    for ax, (prefix, label) in zip(axes, (("controlled", "controlled step"),
                                          ("small", "small fast step"))):
        notes, drawn = [], False
        for i, (side, side_label, marker) in enumerate((("none", "A: no host read", "o"),
                                                        ("item_every", "B: loss.item() every step",
                                                         "s"))):
            v = f"{prefix}/{side}"
            blocks = _block_series(samples, "E13", v)
            if blocks.empty:
                cell = pick(r, v, "time_per_step")
                notes.append(f"{side_label}: {cell if isinstance(cell, Missing) else 'no samples'}")
                continue
            each = _block_series(samples, "E13", v, "time_per_step")
            offset = -0.12 if i == 0 else 0.12
            ax.scatter(each.block + offset, each.value, s=10, alpha=0.35, color=colours[i],
                       zorder=1)
            ax.plot(blocks.block + offset, blocks.value, marker=marker, color=colours[i],
                    label=f"{side_label} (block median)", zorder=2)
            drawn = True
        if drawn:
            ticks = sorted(_block_series(samples, "E13", f"{prefix}/none").block.unique())
            ax.xaxis.set_major_locator(FixedLocator(ticks))
            ax.xaxis.set_major_formatter(FuncFormatter(
                lambda b, _: f"{int(b)}\n{'AB' if int(b) % 2 == 0 else 'BA'}"))
            ax.legend(loc="best", fontsize=8)
        tax = pick(r, f"{prefix}/tax", "tax", "value")
        rel = pick(r, f"{prefix}/tax", "tax_rel", "value")
        res = pick(r, f"{prefix}/tax", "tax_resolved", "value")
        model = r[r.variant == f"{prefix}/none"].model
        head = f"{label}" + (f" ({model.iloc[0]})" if not model.empty else "")
        if isinstance(tax, Missing) or isinstance(rel, Missing):
            ax.set_title(f"{head}\ntax: {tax}", fontsize=9)
        else:
            verdict = "" if isinstance(res, Missing) else (
                ", exceeds the block spread" if res else ", inside the block spread")
            ax.set_title(f"{head}\nB - A = {tax:+.3f} ms/step ({rel:+.1f}%){verdict}",
                         fontsize=9)
        ax.set_xlabel("block (order within the pair)")
        ax.set_ylabel("ms per step (dots: each timed stretch)")
        _note(ax, notes, loc="upper left")
    diff = pick(r, "running_mean", "max_abs_diff", "value")
    if not isinstance(diff, Missing):
        fig.supxlabel(f"running-mean loss read every step, every k steps and once: "
                      f"max |difference| = {diff:.2e}", fontsize=9)
    return fig


def fig_e14(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Time per record_function range and the top operators, over the profiled steps."""
    r = rows[rows.experiment == "E14"]
    fig, (left, right) = _new_figure("E14", r, ncols=2, width=12.5,
                                     gridspec_kw={"width_ratios": [1, 1.4]})
    ranges = [v for v in r.variant.unique() if v.startswith("range:")]
    names = [v.removeprefix("range:") for v in ranges]
    on_device = any(not isinstance(pick(r, v, "range_device_time", "value"), Missing)
                    for v in ranges)
    series = {}
    if on_device:
        series["device time"] = [pick(r, v, "range_device_time", "value") for v in ranges]
    series["host (CPU) time"] = [pick(r, v, "range_cpu_time", "value") for v in ranges]
    colours = sns.color_palette(n_colors=len(series))
    width = 0.8 / len(series)
    notes = []
    for i, (label, cells) in enumerate(series.items()):
        xs = np.arange(len(names)) + (i - (len(series) - 1) / 2) * width
        for x, name, cell in zip(xs, names, cells):
            if isinstance(cell, Missing):
                notes.append(f"{name} ({label}): {cell}")
                continue
            left.bar(x, float(cell), width * 0.95, color=colours[i],
                     label=label if label not in left.get_legend_handles_labels()[1] else None)
    left.set_xticks(np.arange(len(names)), names)
    n = pick(r, ranges[0], "range_cpu_time", "value", field="n") if ranges else None
    steps = "" if n is None or isinstance(n, Missing) else f" over {int(n)} profiled steps"
    left.set_ylabel(f"ms{steps}")
    left.set_title("record_function ranges" + (" (CPU: the CPU is the device)"
                                               if not on_device else ""), fontsize=9)
    if left.get_legend_handles_labels()[0]:
        left.legend(loc="upper left", fontsize=8)
    _note(left, notes)

    ops = r[r.variant.str.startswith("op:") & (r.status == "ok")]
    if ops.empty:
        _note(right, ["no operator rows"], loc="upper left")
    else:
        metric = ops.metric.iloc[0]
        right.barh([v.removeprefix("op:") for v in ops.variant], ops.value,
                   color=sns.color_palette()[2])
        right.invert_yaxis()
        right.tick_params(axis="y", labelsize=8)
        right.set_xlabel("self device time, ms" if metric == "op_self_device_time"
                         else "self CPU time, ms")
        right.set_title(f"top {len(ops)} operators by self time", fontsize=9)
    over = pick(r, "profiler_overhead", "overhead", "value")
    rel = pick(r, "profiler_overhead", "overhead_rel", "value")
    prof, plain = pick(r, "profiled"), pick(r, "unprofiled")
    if not any(isinstance(c, Missing) for c in (over, rel, prof, plain)):
        fig.supxlabel(f"profiled step {prof:.3f} ms vs unprofiled {plain:.3f} ms (medians): "
                      f"the profiler adds {over:+.3f} ms ({rel:+.1f}%); the bars localize, "
                      "they do not time the real step", fontsize=9)
    return fig


def fig_e23(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Cost of each instrument in % of its baseline, with the block-to-block spread."""
    r = rows[rows.experiment == "E23"]
    fig, (ax,) = _new_figure("E23", r, width=8.5)
    instruments = (("phase_sync", "per-phase\nsynchronize (x7)"),
                   ("item", ".item()\nevery step"),
                   ("profiler", "torch.profiler\nwith a schedule"))
    notes, ticks = [], []
    colour = sns.color_palette()[0]
    for x, (key, label) in enumerate(instruments):
        ticks.append(label)
        rel = pick(r, f"{key}/cost", "cost_rel", "value")
        cost = pick(r, f"{key}/cost", "cost", "value")
        base = pick(r, f"{key}/baseline", "time_per_step")
        noise = pick(r, f"{key}/cost", "block_spread", "value")
        if any(isinstance(c, Missing) for c in (rel, cost, base)):
            cell = next(c for c in (rel, cost, base) if isinstance(c, Missing))
            ax.text(x, 0.02, cell.status, transform=ax.get_xaxis_transform(), rotation=90,
                    ha="center", va="bottom", fontsize=8, color="#a35f00")
            notes.append(f"{label.replace(chr(10), ' ')}: {cell}")
            continue
        ax.bar(x, rel, 0.6, color=colour, alpha=0.8)
        if not isinstance(noise, Missing):
            ax.errorbar(x, rel, yerr=100 * noise / base, fmt="none", ecolor="#222222",
                        capsize=4, lw=1)
        diffs = _block_series(samples, "E23", f"{key}/cost", "block_pair_diff")
        if not diffs.empty:
            ax.scatter(np.full(len(diffs), x) + np.linspace(-0.15, 0.15, len(diffs)),
                       100 * diffs.value / base, s=12, color="#222222", alpha=0.6, zorder=3,
                       label="each block pair (instrumented - baseline)" if x == 0 else None)
        res = pick(r, f"{key}/cost", "cost_resolved", "value")
        verdict = "" if isinstance(res, Missing) else (", resolved" if res else ", unresolved")
        ticks[-1] = f"{label}\n{cost:+.3f} ms{verdict}"
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(instruments)), ticks)
    ax.set_ylabel("cost, % of the uninstrumented step\n(whisker: ± block spread)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)
    _note(ax, notes, loc="upper right")
    return fig


#: C00's left panel: (label, variant, metric), each a median in ms shown in µs
C00_COSTS = (
    ("clock tick", "clock/perf_counter", "tick"),
    ("idle synchronize", "sync/idle", "sync_cost"),
    ("empty call (helper)", "floor/empty_call", "call_latency"),
    ("CUDA event pair", "events/empty_pair", "event_elapsed"),
    ("event record (host)", "events/record_pair", "host_record_cost"),
    ("process: interpreter", "process/interpreter", "process_wall"),
    ("process: + torch", "process/import_torch", "process_wall"),
    ("process: + device", "process/device_init", "process_wall"),
)


def fig_c00(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """The harness's own floors (log µs) and the A/A pair beside the planted 2x pair."""
    fig, (ax1, ax2) = _new_figure("C00", rows, ncols=2, width=11)
    labels, values, notes = [], [], []
    for label, variant, metric in C00_COSTS:
        v = pick(rows, variant, metric)
        if isinstance(v, Missing):
            notes.append(f"{label}: {v}")
            continue
        labels.append(label)
        values.append(float(v) * 1e3)
    if values:
        sns.barplot(x=values, y=labels, ax=ax1, color=sns.color_palette()[0])
        ax1.set_xscale("log")
        ax1.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax1.set_xlabel("median, µs (log scale)")
    ax1.set_ylabel("")
    ax1.set_title("what the instruments cost", fontsize=10)
    _note(ax1, notes, loc="upper right")
    s = samples[(samples.experiment == "C00")
                & samples.variant.isin(["aa_a", "aa_b", "planted_a", "planted_2x"])]
    if s.empty:
        _note(ax2, ["no samples of the A/A or planted pairs"], loc="upper left")
    else:
        blocks = s.groupby(["variant", "block"]).value.median().reset_index()
        for variant, label, marker in (("aa_a", "A/A: A", "o"), ("aa_b", "A/A: B", "s"),
                                       ("planted_a", "planted: A", "^"),
                                       ("planted_2x", "planted: B = step twice", "v")):
            d = blocks[blocks.variant == variant]
            ax2.plot(d.block, d.value, marker=marker, label=label)
        ax2.set_xlabel("block (A and B alternate AB, BA, ...)")
        ax2.set_ylabel("block median, ms per call")
        ax2.xaxis.set_major_locator(FixedLocator(sorted(blocks.block.unique())))
        ax2.legend(loc="best", fontsize=8)
    floor = pick(rows, "aa", "aa_noise_floor", "value")
    ax2.set_title("A/A noise" + ("" if isinstance(floor, Missing)
                                 else f" (floor {float(floor):.2f}%)") + " vs a planted 2x",
                  fontsize=10)
    return fig


E09_BOUNDARIES = ("start", "zero_grad", "forward", "loss", "backward", "optimizer")


def fig_e09(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Allocated after each phase, cold and steady, with each step's peak; the persistent parts."""
    r = rows[rows.experiment == "E09"]
    fig, (ax, ax2) = _new_figure("E09", r, ncols=2, width=12.5,
                                 gridspec_kw={"width_ratios": [1.6, 1]})
    notes = []
    colours = sns.color_palette(n_colors=2)
    xs = np.arange(len(E09_BOUNDARIES))
    for colour, label in zip(colours, ("cold", "steady")):
        ys = [_num(pick(r, f"{label}/{b}", "allocated", "value")) for b in E09_BOUNDARIES]
        if any(y is None for y in ys):
            notes.append(f"{label} phases: {pick(r, f'{label}/start', 'allocated', 'value')}")
            continue
        win = pick(r, label, "peak_allocated", "value", field="window")
        step = " ".join(str(win).split()[:2]) if not isinstance(win, Missing) else label
        ax.plot(xs, ys, "o-", color=colour, label=f"{step} ({label}): after each phase")
        peak = pick(r, label, "peak_allocated", "value")
        hidden = pick(r, label, "hidden_peak", "value")
        if not isinstance(peak, Missing):
            ax.axhline(peak, color=colour, ls="--", lw=1,
                       label=f"{label} peak {peak:.1f} MiB"
                       + ("" if isinstance(hidden, Missing) else
                          f" ({hidden:+.1f} above every boundary)"))
    rss = [(label, pick(r, label, "peak_rss", "value")) for label in ("cold", "steady")]
    for label, v in rss:
        if not isinstance(v, Missing):
            notes.append(f"{label} step peak RSS (VmHWM, whole process): {v:.1f} MiB")
    ax.set_xticks(xs, E09_BOUNDARIES)
    ax.set_xlabel("after phase")
    ax.set_ylabel("allocated MiB")
    ax.set_title("allocated after each phase, and the step's peak")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)
    _note(ax, notes, loc="lower right")

    parts = ("parameters", "gradients", "optimizer_state", "other")
    vals = [(p, pick(r, f"persistent/{p}", "bytes", "value"),
             pick(r, f"persistent/{p}", "share", "value")) for p in parts]
    bottom, notes2 = 0.0, []
    for colour, (part, mib, share) in zip(sns.color_palette(n_colors=len(parts)), vals):
        if isinstance(mib, Missing):
            notes2.append(f"{part}: {mib}")
            continue
        ax2.bar(0, mib, 0.5, bottom=bottom, color=colour,
                label=f"{part.replace('_', ' ')}: {mib:.4g} MiB"
                + ("" if isinstance(share, Missing) else f" ({share:.0f}%)"))
        bottom += mib
    ax2.set_xticks([0], ["after the steady step"])
    ax2.set_xlim(-0.6, 1.6)
    ax2.set_ylabel("MiB")
    ax2.set_title("persistent breakdown")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(loc="upper right", fontsize=8)
    _note(ax2, notes2, loc="lower right")
    return fig


def fig_e10(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """The OOM's evidence: peak at two batch sizes against persistent state and the budget."""
    r = rows[rows.experiment == "E10"]
    fig, (ax, ax2) = _new_figure("E10", r, ncols=2, width=12.0)
    batches = sorted((v for v in r.variant.unique() if v.startswith("batch_")),
                     key=lambda v: int(v.removeprefix("batch_")))
    rss = (r.metric == "peak_rss").any()
    metric = "peak_rss" if rss else "peak_allocated"
    notes = []
    for x, v in enumerate(batches):
        peak = pick(r, v, metric, "value")
        if isinstance(peak, Missing):
            notes.append(f"{v}: {peak}")
            continue
        ax.bar(x, peak, 0.6, color=sns.color_palette()[0],
               label="peak (uncapped)" if x == 0 else None)
        ax.text(x, peak, f"{peak:.0f}", ha="center", va="bottom", fontsize=8)
    persistent = pick(r, "persistent", "bytes", "value")
    if not isinstance(persistent, Missing):
        ax.axhline(persistent, color="black", ls=":", lw=1.2,
                   label=f"parameters + gradients + optimizer state {persistent:.0f} MiB")
    budget = pick(r, "capped_run", "budget", "value")
    if not isinstance(budget, Missing):
        ax.axhline(budget, color="#c0392b", ls="--", lw=1.2, label=f"budget {budget:.0f} MiB")
    oom = pick(r, "capped_run", "oom", "value")
    if isinstance(oom, Missing):
        notes.append(f"capped run: {oom}")
    ax.set_xticks(range(len(batches)), [f"batch {v.removeprefix('batch_')}" for v in batches])
    ax.set_ylabel("peak RSS MiB (whole process)" if rss else "peak allocated MiB")
    ax.set_title("peak at two batch sizes")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower left", fontsize=8)
    _note(ax, notes, loc="upper right")

    # allocated after each repeated step: flat or climbing
    series = samples[(samples.experiment == "E10") & samples.metric.str.endswith("_after_step")]
    for v in batches:
        s = series[series.variant == v]
        if not s.empty:
            ax2.plot(s["index"], s.value, "o-", label=v.replace("_", " "))
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.set_xlabel("training step")
    ax2.set_ylabel(("RSS" if rss else "allocated") + " MiB after the step")
    ax2.set_title("repeated identical steps: flat or climbing")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=8)
    branches = [b for b in ("accumulating", "persistent", "shape_dependent", "allocator",
                            "inconclusive")
                if _num(pick(r, f"diagnosis/{b}", "supported", "value")) == 1.0]
    diag = pick(r, "diagnosis/persistent", "supported", "value")
    text = (f"diagnosis: {branches[0].replace('_', '-')}" if branches
            else f"diagnosis: {diag}")
    _note(ax2, [text], loc="lower right")
    return fig


def fig_e11(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """The leak plot: memory after every iteration, three variants; the retained graph's bytes."""
    r = rows[rows.experiment == "E11"]
    fig, (ax, ax2) = _new_figure("E11", r, ncols=2, width=12.0)
    s = samples[samples.experiment == "E11"]
    instrument = s.metric.iloc[0] if not s.empty else "allocated"
    labels = {"retained_graph": "kept.append(metric) (graph kept)",
              "no_grad": "torch.no_grad()", "item": "metric.item()"}
    notes = []
    for v, label in labels.items():
        d = s[s.variant == v]
        if d.empty:
            notes.append(f"{v}: no samples (not run)")
            continue
        # the median iteration-to-iteration step: a one-off heap trim does not set it
        growth = _num(pick(r, v, f"{instrument}_median_increment", "value"))
        ax.plot(d["index"], d.value, lw=2,
                label=f"{label}: {growth:+.3f} MiB/iter (median step)" if growth is not None
                else label)
        after = pick(r, f"{v}/after_empty_cache", "allocated", "value")
        if not isinstance(after, Missing):
            ax.plot([d["index"].max()], [after], "x", ms=9, color="black",
                    label="after empty_cache()" if v == "retained_graph" else None)
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"{instrument} MiB" + (" (process RSS)" if instrument == "rss" else ""))
    ax.set_title("memory after every iteration")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)
    _note(ax, notes)
    for v, label in labels.items():
        marks = sorted(int(x.removeprefix(f"{v}/i")) for x in r.variant.unique()
                       if x.startswith(f"{v}/i"))
        ys = [_num(pick(r, f"{v}/i{m:02d}", "retained_graph_bytes", "value")) for m in marks]
        if marks and all(y is not None for y in ys):
            ax2.plot(marks, ys, "o-", label=label)
    ax2.set_xlabel("iteration")
    ax2.set_ylabel("MiB saved for backward, reachable from the kept list")
    ax2.set_title("the retained graph, counted tensor by tensor")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(loc="upper left", fontsize=8)
    return fig


def fig_e12(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """The counters at each state: allocated, reserved, max reserved, NVML (CPU: RSS)."""
    r = rows[rows.experiment == "E12"]
    fig, (ax,) = _new_figure("E12", r, width=10.0)
    states = ["steady", "after_alloc", "after_del", "after_empty_cache"]
    counters = [m for m in ("allocated", "reserved", "max_reserved", "nvml_process", "rss")
                if ((r.metric == m) & (r.status == "ok")).any()]
    series = {}
    for m in counters:
        series[m] = [(lambda c: c if isinstance(c, Missing) else (c, 0.0, 0.0))(
            pick(r, st, m, "value")) for st in states]
    notes = _bars(ax, states, series) if series else ["no counter measured"]
    for m in ("allocated", "nvml_process"):
        cell = pick(r, "steady", m, "value")
        if m not in counters and isinstance(cell, Missing):
            notes.append(f"{m}: {cell}")
    ax.set_ylabel("MiB: " + ", ".join(counters))
    _note(ax, notes, loc="upper right")
    return fig
# E19-E24


def fig_e19(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Compile A/B: eager vs compiled block medians, one panel per workload."""
    r = rows[rows.experiment == "E19"]
    names = list(dict.fromkeys(v.split("/")[0] for v in r.variant if v.endswith("/eager")))
    fig, axes = _new_figure("E19", r, ncols=max(len(names), 1), width=6.0 * max(len(names), 1))
    for ax, name in zip(axes, names):
        _pair_blocks(ax, samples, "E19", f"{name}/eager", f"{name}/compiled",
                     ("eager", "compiled"))
        ax.set_ylabel("block median, ms per forward")
        speed = pick(r, f"{name}/compiled_vs_eager", "speedup")
        diff = pick(r, f"{name}/compiled_vs_eager", "max_abs_diff", "value")
        res = pick(r, f"{name}/compiled_minus_{name}/eager", "difference_resolved", "value")
        verdict = "resolved" if _num(res) == 1.0 else "inside the noise"
        ok = not isinstance(speed, Missing) and not isinstance(diff, Missing)
        ax.set_title(f"{name}: compiled {speed:.2f}x ({verdict}), max |diff| {diff:.1e}" if ok
                     else f"{name}: {speed}", fontsize=9)
    if not names:
        _note(axes[0], ["no eager/compiled pair in the rows"], loc="upper left")
    return fig


def fig_e20(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Compile break-even: cumulative time of N calls, eager vs compiled cold and warm."""
    r = rows[rows.experiment == "E20"]
    fig, (ax, ax2) = _new_figure("E20", r, ncols=2, width=12.0)
    notes, curves = [], {}
    eager = [_num(pick(r, f"{ph}/eager", "forward_latency")) for ph in ("cold", "warm")]
    eager = [e for e in eager if e is not None]
    for phase in ("cold", "warm"):
        first = _num(pick(r, f"{phase}/compiled", "first_call", "value"))
        steady = _num(pick(r, f"{phase}/compiled", "forward_latency"))
        if first is None or steady is None:
            notes.append(f"{phase}: {pick(r, f'{phase}/compiled', 'first_call', 'value')}")
            continue
        n = pick(r, f"{phase}/compiled_vs_eager", "break_even_calls", "value")
        if isinstance(n, Missing):
            notes.append(f"{phase}: never breaks even ({n.reason})")
        curves[phase] = (first, steady, _num(n))
    known = [n for *_, n in curves.values() if n is not None]
    calls = np.unique(np.logspace(0, np.log10(max([10.0, *(4 * n for n in known)])), 300).round())
    for (phase, (first, steady, n)), colour in zip(curves.items(), ("C1", "C2")):
        ax.plot(calls, first + (calls - 1) * steady / 1e3, color=colour,
                label=f"compiled, {phase} cache (first call {first:.2f} s)")
        if n is not None:
            ax.axvline(n, color=colour, ls=":", lw=1)
            ax.annotate(f"break-even {int(n)} calls", (n, first + (n - 1) * steady / 1e3),
                        fontsize=8, color=colour, xytext=(4, -12), textcoords="offset points")
    if eager:
        ax.plot(calls, calls * float(np.median(eager)) / 1e3, color="C0", label="eager")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of calls N")
    ax.set_ylabel("total time of N calls, s")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("break-even: where the compiled total drops below eager", fontsize=9)
    _note(ax, notes)
    if curves:
        names = list(curves)
        vals = [curves[p][0] for p in names]
        ax2.bar(names, vals, color=["C1", "C2"][:len(names)])
        for x, v in enumerate(vals):
            ax2.text(x, v, f"{v:.2f} s", ha="center", va="bottom", fontsize=9)
        ax2.set_ylabel("first compiled call of a fresh process, s")
        ratio = pick(r, "warm_vs_cold", "first_call_ratio", "value")
        if not isinstance(ratio, Missing):
            ax2.set_title(f"warm / cold first call = {ratio:.2f}", fontsize=9)
    return fig


def fig_e21(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Recompilation: first call of each case, graphs compiled written on each bar."""
    r = rows[rows.experiment == "E21"]
    fig, (ax,) = _new_figure("E21", r, width=10.0)
    cases = [v for v in dict.fromkeys(r.variant) if v.startswith(("shapes/", "mode/"))]
    values, labels, graphs = [], [], []
    notes = []
    for v in cases:
        metric = "new_shape_first_call" if "/batch_" in v else "first_call"
        cell = pick(r, v, metric, "value")
        if isinstance(cell, Missing):
            notes.append(f"{v}: {cell}")
            continue
        values.append(float(cell))
        labels.append(v)
        graphs.append(pick(r, v, "graphs_compiled", "value"))
    ax.barh(labels, values, color=sns.color_palette()[0])
    for i, (val, g) in enumerate(zip(values, graphs)):
        ax.text(val, i, f"  {g if isinstance(g, Missing) else int(g)} graph(s)", va="center",
                fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("first call at this shape / mode, ms")
    _log_if_wide(ax, values, axis="x")
    brk = pick(r, "graph_break/explain", "graph_breaks", "value")
    brk = brk if isinstance(brk, Missing) else int(brk)
    ax.set_title(f"without fullgraph, a data-dependent branch: {brk} graph break(s)", fontsize=9)
    _note(ax, notes)
    return fig


def fig_e22(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """The benchmark matrix: ms/step, examples/s and peak allocated for the four cells."""
    from perflab.tables import E22_CELLS

    r = rows[rows.experiment == "E22"]
    fig, axes = _new_figure("E22", r, ncols=3, width=14.0)
    cells = list(E22_CELLS)
    notes = _bars(axes[0], cells, {"ms/step": [_bar_cell(r, c) for c in cells]})
    axes[0].set_ylabel("ms per step, median (error bar: p25..p75)")
    thr = [pick(r, c, "throughput") for c in cells]
    notes += _bars(axes[1], cells, {"examples/s": [c if isinstance(c, Missing) else (c, 0, 0)
                                                   for c in thr]})
    axes[1].set_ylabel("examples/s (B / median step)")
    peaks = {m: [pick(r, c, m, "max") for c in cells] for m in ("peak_allocated", "peak_reserved")}
    missing = [c for v in peaks.values() for c in v if isinstance(c, Missing)]
    if len(missing) == 2 * len(cells):  # no peak measured: one note per reason, no empty bars
        axes[2].set_axis_off()
        _note(axes[2], [f"peak memory not measured: {c}" for c in missing], loc="upper left")
    else:
        notes += _bars(axes[2], cells, {m: [c if isinstance(c, Missing) else (c, 0, 0)
                                            for c in v] for m, v in peaks.items()})
        axes[2].set_ylabel("peak MiB")
    _note(axes[0], notes, loc="upper left")
    return fig


def fig_e24(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Where each DataLoader-fed step goes: input wait, host-to-device, compute."""
    r = rows[rows.experiment == "E24"]
    fig, (ax,) = _new_figure("E24", r, width=9.0)
    configs = [v for v in dict.fromkeys(r.variant) if v.startswith("workers_")]
    parts = ("input_wait", "host_to_device", "compute")
    bottom = np.zeros(len(configs))
    notes = []
    for i, part in enumerate(parts):
        vals = []
        for c in configs:
            cell = pick(r, c, part)
            if isinstance(cell, Missing):
                notes.append(f"{c}: {cell}")
            vals.append(_num(cell) or 0.0)
        ax.bar(configs, vals, bottom=bottom, label=part.replace("_", " "),
               color=sns.color_palette()[i])
        bottom += np.asarray(vals)
    for x, c in enumerate(configs):
        share = pick(r, c, "input_wait_share", "value")
        if not isinstance(share, Missing):
            ax.text(x, bottom[x], f"wait {share:.0f}%", ha="center", va="bottom", fontsize=8)
        else:  # not run: say so at its place instead of an empty slot
            ax.text(x, 0.02, share.status, transform=ax.get_xaxis_transform(), rotation=90,
                    ha="center", va="bottom", fontsize=8, color="#a35f00")
    if bottom.size and bottom.max() > 0:
        ax.set_ylim(0, bottom.max() * 1.6)  # room for the labels and the note above the bars
    ax.set_ylabel("median ms per step, by part\n(synchronized at each boundary)")
    ax.set_xticks(range(len(configs)), [c.replace("_", "\n", 1) for c in configs])
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    _note(ax, notes, loc="upper left")
    return fig


def fig_r01(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """The measured roofline with the step's phases on it; each phase's fraction of the ceilings."""
    r = rows[rows.experiment == "R01"]
    phase_rows = r[r.variant.str.startswith("phase/")]  # their contract line names the model
    fig, (ax, ax2) = _new_figure("R01", phase_rows if not phase_rows.empty else r, ncols=2,
                                 width=12.0)
    notes = []
    dtype = r.dtype.iloc[0] if not r.empty else "float32"
    ridge = _num(pick(r, "ceiling/ridge_point", "arithmetic_intensity", "value"))
    bw = _num(pick(r, "ceiling/memory_bandwidth", "bandwidth", "value"))
    peaks = {v.removeprefix("ceiling/matmul/"): _num(pick(r, v, "peak_flops", "value"))
             for v in r.variant.unique() if v.startswith("ceiling/matmul/")}
    phases = ["forward", "loss", "backward", "optimizer", "forward_backward", "step"]
    points = {ph: (_num(pick(r, f"phase/{ph}", "arithmetic_intensity")),
                   _num(pick(r, f"phase/{ph}", "achieved_flops"))) for ph in phases}
    xs = [x for x, y in points.values() if x and y]
    if bw and peaks and xs:
        lo, hi = min(xs + [ridge or 1.0]) / 10, max(xs + [ridge or 1.0]) * 10
        grid = np.geomspace(lo, hi, 200)
        for name, peak in peaks.items():
            if peak:
                ax.plot(grid, np.minimum(peak, grid * bw), lw=2 if name == dtype else 1,
                        ls="-" if name == dtype else "--", label=f"roof ({name} matmul)")
        for (ph, (x, y)), colour in zip(points.items(), sns.color_palette("tab10", len(phases))):
            if x and y:
                ax.scatter([x], [y], s=40, color=colour, zorder=3, label=ph)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=7, loc="lower right")
    else:
        notes.append("no phase with counted FLOPs, or a ceiling was not measured")
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax.set_ylabel("FLOP/s")
    ax.set_title("measured roofline; phases with counted FLOPs", fontsize=10)
    _note(ax, notes, loc="upper left")
    groups = ["host_to_device", *phases]
    notes2 = _bars(ax2, groups, {
        "% of peak FLOP/s": [_pct_cell(r, g, "flops_fraction") for g in groups],
        "% of bandwidth": [_pct_cell(r, g, "bandwidth_fraction") for g in groups],
    })
    ax2.set_ylabel("% of the measured ceiling")
    ax2.set_title("achieved fraction per phase", fontsize=10)
    ax2.tick_params(axis="x", labelsize=7)
    _note(ax2, notes2, loc="upper left")
    return fig


def _pct_cell(r: pd.DataFrame, phase: str, metric: str):
    cell = pick(r, f"phase/{phase}", metric)
    return cell if isinstance(cell, Missing) else (float(cell), 0.0, 0.0)


# ------------------------------------------------------------------ E15-E18 interventions


def _pct_cells(r: pd.DataFrame, variants: list[str], base: str, peak: str) -> dict[str, list]:
    """Two bar series in % of ``base``: the median step (IQR bars) and the peak memory."""
    b = _num(pick(r, base))
    b_mem = _num(pick(r, base, peak, "max"))
    time_cells, mem_cells = [], []
    for v in variants:
        cell = _bar_cell(r, v)
        if isinstance(cell, Missing) or not b:
            time_cells.append(cell if isinstance(cell, Missing) else Missing("not run"))
        else:
            time_cells.append(tuple(100 * x / b for x in cell))
        m = pick(r, v, peak, "max")
        if isinstance(m, Missing) or not b_mem:
            mem_cells.append(m if isinstance(m, Missing) else Missing("not run"))
        else:
            mem_cells.append((100 * float(m) / b_mem, 0.0, 0.0))
    what = "peak allocated" if peak == "peak_allocated" else "peak RSS (fresh process each)"
    return {"step time (median, p25..p75)": time_cells, what: mem_cells}


def _pct_panels(eid: str, rows: pd.DataFrame, groups: list[tuple[str, list[str], list[str], str]],
                width: float = 11.0) -> Figure:
    """One panel per group (title, variants, labels, baseline): time and peak as % bars."""
    from perflab.tables import _peak_metric

    r = rows[rows.experiment == eid]
    fig, axes = _new_figure(eid, r, ncols=max(len(groups), 1), width=width)
    peak = _peak_metric(r)
    notes: list[str] = []
    for ax, (title, variants, labels, base) in zip(axes, groups):
        series = _pct_cells(r, variants, base, peak)
        notes += _bars(ax, labels, series)
        ax.axhline(100, color="#555555", lw=0.8, ls=":")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(f"% of {labels[variants.index(base)] if base in variants else base}")
    if not groups:
        notes.append("no rows")
    _note(axes[-1], notes, loc="upper right")
    return fig


def fig_e15(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """AMP bars at each batch size: time and peak memory of fp16 and bf16 as % of fp32."""
    from perflab.tables import E15_PRECISIONS, _prefixed

    r = rows[rows.experiment == "E15"]
    precs = [p for p in E15_PRECISIONS if (r.variant.str.endswith("/" + p)).any()]
    groups = [(f"batch {b}", [f"b{b}/{p}" for p in precs], list(precs), f"b{b}/fp32")
              for b in _prefixed(r, "b")]
    return _pct_panels("E15", rows, groups)


def fig_e16(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Checkpointing at each batch size: time and peak memory as % of the normal step."""
    from perflab.tables import _prefixed

    r = rows[rows.experiment == "E16"]
    groups = [(f"batch {b}", [f"b{b}/normal", f"b{b}/checkpointed"], ["normal", "checkpointed"],
               f"b{b}/normal") for b in _prefixed(r, "b")]
    return _pct_panels("E16", rows, groups, width=10.0)


def fig_e17(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Accumulation: time and peak memory against K, as % of K=1, one panel."""
    from perflab.tables import _variants

    r = rows[rows.experiment == "E17"]
    ks = _variants(r, "k")
    return _pct_panels("E17", rows, [("one optimizer step over the full batch", ks,
                                      [f"K={k.removeprefix('k')}" for k in ks], "k1")] if ks
                       else [], width=8.0)


def fig_e18(rows: pd.DataFrame, samples: pd.DataFrame) -> Figure:
    """Attention against T on log axes: forward + backward ms and peak MiB, manual vs SDPA.

    A T where an implementation ran out of memory is marked with its status at
    that T on both panels instead of a point.
    """
    from perflab.tables import _peak_metric, _prefixed, e18_backends

    r = rows[rows.experiment == "E18"]
    title_rows = r[r.variant.str.endswith("/manual")]
    fig, axes = _new_figure("E18", title_rows if not title_rows.empty else r, ncols=2,
                            width=12.0)
    seqs = _prefixed(r, "T")
    peak = _peak_metric(r)
    notes: list[str] = []
    panels = [(axes[0], "fwd_bwd_latency", "median", "forward + backward ms (median)"),
              (axes[1], peak, "max", "peak allocated MiB" if peak == "peak_allocated"
               else "peak RSS MiB (fresh process per point)")]
    for ax, metric, statistic, ylabel in panels:
        drawn: list[float] = []
        for i, impl in enumerate(("manual", "sdpa")):
            xs, ys = [], []
            for T in seqs:
                cell = pick(r, f"T{T}/{impl}", metric, statistic)
                if isinstance(cell, Missing):
                    ax.text(T, 0.97 - 0.08 * i, f"{impl}: {cell.status}",
                            transform=ax.get_xaxis_transform(), rotation=90, ha="center",
                            va="top", fontsize=8, color=sns.color_palette()[i])
                    if cell.reason and ax is axes[0]:
                        notes.append(textwrap.shorten(f"T={T} {impl}: {cell}", 200))
                    continue
                xs.append(T)
                ys.append(float(cell))
            drawn += ys
            if xs:
                label = impl if impl == "manual" else "SDPA"
                ax.plot(xs, ys, marker="os"[i], label=label, color=sns.color_palette()[i])
        if seqs:
            _log2_x(ax, seqs)
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            # within one decade no major tick shows: label the minor ones instead
            narrow = bool(drawn) and max(drawn) < 10 * min(drawn)
            ax.yaxis.set_minor_formatter(FuncFormatter(
                (lambda v, _: f"{v:g}") if narrow else (lambda v, _: "")))
        ax.set_xlabel("sequence length T (log2)")
        ax.set_ylabel(ylabel)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=8)
    if seqs:
        ran = sorted({e18_backends(r, T) for T in seqs})
        axes[0].set_title("SDPA backend that ran: " + "; ".join(ran), fontsize=9)
    budget = pick(r, "budget", "memory_budget", "value")
    if not isinstance(budget, Missing):
        axes[1].set_title(f"allocator capped at {float(budget) / 1024:.1f} GiB", fontsize=9)
    if notes:
        fig.supxlabel("\n".join(textwrap.fill(n, 170) for n in dict.fromkeys(notes)),
                      x=0.01, ha="left", fontsize=8, color="#a35f00")
    return fig


FIGURES: dict[str, Callable[[pd.DataFrame, pd.DataFrame], Figure]] = {
    "C00": fig_c00,
    "E01": fig_e01,
    "E02": fig_e02,
    "E03": fig_e03,
    "E04": fig_e04,
    "E05": fig_e05,
    "E06": fig_e06,
    "E07": fig_e07,
    "E08": fig_e08,
    "E09": fig_e09,
    "E10": fig_e10,
    "E11": fig_e11,
    "E12": fig_e12,
    "E13": fig_e13,
    "E14": fig_e14,
    "E23": fig_e23,
    "E25": fig_e25,
    "E19": fig_e19,
    "E20": fig_e20,
    "E21": fig_e21,
    "E22": fig_e22,
    "E24": fig_e24,
    "R01": fig_r01,
    "E15": fig_e15,
    "E16": fig_e16,
    "E17": fig_e17,
    "E18": fig_e18,
}


def read_samples(path: str | Path | None) -> pd.DataFrame:
    """The raw samples CSV, or an empty frame when there is none."""
    if path is None or not Path(path).is_file():
        return pd.DataFrame(columns=io.SAMPLE_COLUMNS)
    s = pd.read_csv(path, keep_default_na=False)
    s["value"] = pd.to_numeric(s["value"], errors="coerce")
    return s.dropna(subset=["value"])


def make_figure(eid: str, csv_path: str | Path, samples_path: str | Path | None,
                out_png: str | Path) -> Path:
    """Draw experiment ``eid``'s figure and write it atomically to ``out_png``."""
    eid = eid.upper()
    if eid not in FIGURES:
        raise KeyError(f"no figure for experiment {eid!r}; known: {sorted(FIGURES)}")
    rows = io.read_results([csv_path])
    apply_style()
    fig = FIGURES[eid](rows, read_samples(samples_path))
    out = Path(out_png)
    try:
        # temp file in the destination directory, then a rename: never half a PNG
        io.atomic_write(out, lambda fh: fig.savefig(fh, format="png", dpi=DPI), binary=True)
    finally:
        plt.close(fig)
    return out
