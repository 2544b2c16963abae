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


def _samples(samples: pd.DataFrame, eid: str, variants: list[str]) -> pd.DataFrame:
    """The raw samples of ``variants``, in that order (as a categorical)."""
    s = samples[(samples.experiment == eid) & samples.variant.isin(variants)].copy()
    s["variant"] = pd.Categorical(s.variant, categories=variants, ordered=True)
    return s


def _bar_cell(rows: pd.DataFrame, variant: str, execution: str | None = None):
    """(median, lower error, upper error) from the rows, or a Missing.

    The error bar spans the interquartile range (p25..p75); a series that kept
    only its IQR gets a symmetric bar of that width.
    """
    med = pick(rows, variant, execution=execution)
    if isinstance(med, Missing):
        return med
    p25 = _num(pick(rows, variant, statistic="p25", execution=execution))
    p75 = _num(pick(rows, variant, statistic="p75", execution=execution))
    if p25 is None or p75 is None:
        iqr = _num(pick(rows, variant, statistic="iqr", execution=execution)) or 0.0
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


FIGURES: dict[str, Callable[[pd.DataFrame, pd.DataFrame], Figure]] = {
    "E01": fig_e01,
    "E02": fig_e02,
    "E03": fig_e03,
    "E04": fig_e04,
    "E06": fig_e06,
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
