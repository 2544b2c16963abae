"""One figure per experiment, drawn from its result rows and raw samples.

Every figure shares one style (:func:`apply_style`) and one title block (the
experiment's title over its contract). Summary numbers (medians, IQRs, loop
timings) come from the result rows through :func:`perflab.kit.tables.pick`; the
distributions come from the samples CSV. A series that did not measure is not
drawn as zero: its place is labelled with its status and the reason is
written in a note inside the figure.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

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
)

from perflab.core import io
from perflab.core.names import STEP_LATENCY
from perflab.instruments import ab
from perflab.kit.tables import Missing, pick  # noqa: E402

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


def num(cell) -> float | None:
    """A picked cell as a float, or None when the row did not measure."""
    return None if isinstance(cell, Missing) else float(cell)


def contract_line(rows: pd.DataFrame) -> str:
    if rows.empty:
        return "no result rows"
    r = rows.iloc[0]  # the contract columns are the same on every row of one experiment
    return (f"{r['model']} · input {r['input_shape']} · {r['dtype']} · {r['device']} "
            f"({r['device_name']})")


def new_figure(experiment, rows: pd.DataFrame, ncols: int = 1, width: float = 7.5,
                height: float = 4.6, **kw) -> tuple[Figure, list[plt.Axes]]:
    """A figure titled for ``experiment`` (anything with ``eid`` and ``title``: a slice's
    ``ENTRY``) and the contract of ``rows``."""
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False,
                             layout="constrained", **kw)
    fig.suptitle(f"{experiment.eid} · {experiment.title}\n{contract_line(rows)}", fontsize=11)
    return fig, list(axes[0])


def add_note(ax: plt.Axes, lines: list[str], loc: str = "lower right") -> None:
    """Write why some series are missing, in a box inside the axes."""
    if not lines:
        return
    text = "\n".join(textwrap.fill(s, 60) for s in dict.fromkeys(lines))  # dedupe, keep order
    x, ha = (0.98, "right") if "right" in loc else (0.02, "left")
    y, va = (0.03, "bottom") if "lower" in loc else (0.97, "top")
    ax.text(x, y, text, transform=ax.transAxes, ha=ha, va=va, fontsize=8,
            bbox=dict(boxstyle="round", facecolor="#fff4e5", edgecolor="#d08c2a"))


def log_if_wide(ax: plt.Axes, values, axis: str = "y") -> None:
    v = np.asarray([x for x in values if x is not None and x > 0], dtype=float)
    if v.size and v.max() / v.min() > LOG_RATIO:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        # plain numbers (0.1, 1, 10) instead of powers of ten
        (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(
            FuncFormatter(lambda v, _: f"{v:g}"))


def log2_x(ax: plt.Axes, ticks: list[int]) -> None:
    """A log2 x axis with a plain-number tick at each of ``ticks`` and a margin either side."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(ticks[0] / 1.5, ticks[-1] * 1.5)


def samples_of(samples: pd.DataFrame, eid: str, variants: list[str]) -> pd.DataFrame:
    """The raw samples of ``variants``, in that order (as a categorical)."""
    s = samples[(samples.experiment == eid) & samples.variant.isin(variants)].copy()
    s["variant"] = pd.Categorical(s.variant, categories=variants, ordered=True)
    return s


def bar_cell(rows: pd.DataFrame, variant: str, execution: str | None = None,
              metric: str = STEP_LATENCY):
    """(median, lower error, upper error) from the rows, or a Missing.

    The error bar spans the interquartile range (p25..p75); a series that kept
    only its IQR gets a symmetric bar of that width.
    """
    med = pick(rows, variant, metric, execution=execution)
    if isinstance(med, Missing):
        return med
    p25 = num(pick(rows, variant, metric, statistic="p25", execution=execution))
    p75 = num(pick(rows, variant, metric, statistic="p75", execution=execution))
    if p25 is None or p75 is None:
        iqr = num(pick(rows, variant, metric, statistic="iqr", execution=execution)) or 0.0
        return med, iqr / 2, iqr / 2
    return med, med - p25, p75 - med


def draw_bars(ax: plt.Axes, groups: list[str], series: dict[str, list]) -> list[str]:
    """Grouped bars with IQR error bars; returns notes for the cells that are Missing.

    ``series`` maps a legend label to one cell per group (see :func:`bar_cell`).
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
    log_if_wide(ax, heights)
    if len(series) > 1:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return notes


def box_strip(ax: plt.Axes, data: pd.DataFrame, labels: dict[str, str]) -> None:
    """Per-call samples of each series: a box (quartiles) with every sample on top."""
    sns.stripplot(data=data, x="variant", y="value", ax=ax, hue="variant", legend=False,
                  size=3.5, alpha=0.6, jitter=0.2, zorder=1)
    # an unfilled box drawn over the points, so the quartiles stay visible in a dense strip
    sns.boxplot(data=data, x="variant", y="value", ax=ax, showfliers=False, width=0.5,
                fill=False, color="#222222", linewidth=1.2, zorder=2)
    ax.set_xticks(ax.get_xticks(), [labels.get(t.get_text(), t.get_text())
                                    for t in ax.get_xticklabels()])
    ax.set_xlabel("")
    log_if_wide(ax, data.value)


# --------------------------------------------------------------------- figures


def pair_blocks(ax: plt.Axes, samples: pd.DataFrame, eid: str, a: str, b: str,
                 labels: tuple[str, str]) -> None:
    """An interleaved pair: each block's median for A and for B, block by block."""
    s = samples[(samples.experiment == eid) & samples.variant.isin([a, b])
                & (samples.metric != ab.BLOCK_MEDIAN)]  # the calls, not the kept block medians
    if s.empty:
        add_note(ax, ["no samples of the interleaved pair"], loc="upper left")
        return
    blocks = s.groupby(["variant", "block"]).value.median().reset_index()
    for variant, label, marker in ((a, labels[0], "o"), (b, labels[1], "s")):
        d = blocks[blocks.variant == variant]
        ax.plot(d.block, d.value, marker=marker, label=label)
    ax.set_xlabel("block (A and B alternate AB, BA, ...)")
    ax.set_ylabel("block median, ms per step")
    ax.xaxis.set_major_locator(FixedLocator(sorted(blocks.block.unique())))
    ax.legend(loc="best", fontsize=8)


def block_series(samples: pd.DataFrame, eid: str, variant: str,
                  metric: str = "block_median") -> pd.DataFrame:
    """One variant's samples of ``metric`` (e.g. its block medians), by block."""
    s = samples[(samples.experiment == eid) & (samples.variant == variant)
                & (samples.metric == metric)]
    return s.sort_values(["block", "index"])


# E19-E24


# ------------------------------------------------------------------ E15-E18 interventions


def pct_cells(r: pd.DataFrame, variants: list[str], base: str, peak: str) -> dict[str, list]:
    """Two bar series in % of ``base``: the median step (IQR bars) and the peak memory."""
    b = num(pick(r, base))
    b_mem = num(pick(r, base, peak, "max"))
    time_cells, mem_cells = [], []
    for v in variants:
        cell = bar_cell(r, v)
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


def pct_panels(experiment, rows: pd.DataFrame, groups: list[tuple[str, list[str], list[str], str]],
                width: float = 11.0) -> Figure:
    """One panel per group (title, variants, labels, baseline): time and peak as % bars."""
    from perflab.kit.tables import peak_metric

    r = rows[rows.experiment == experiment.eid]
    fig, axes = new_figure(experiment, r, ncols=max(len(groups), 1), width=width)
    peak = peak_metric(r)
    notes: list[str] = []
    for ax, (title, variants, labels, base) in zip(axes, groups):
        series = pct_cells(r, variants, base, peak)
        notes += draw_bars(ax, labels, series)
        ax.axhline(100, color="#555555", lw=0.8, ls=":")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(f"% of {labels[variants.index(base)] if base in variants else base}")
    if not groups:
        notes.append("no rows")
    add_note(axes[-1], notes, loc="upper right")
    return fig




def read_samples(path: str | Path | None) -> pd.DataFrame:
    """The raw samples CSV, or an empty frame when there is none."""
    if path is None or not Path(path).is_file():
        return pd.DataFrame(columns=io.SAMPLE_COLUMNS)
    return io.read_samples(path)  # a malformed samples file is refused, named


def save(fig: Figure, out_png: str | Path) -> Path:
    out = Path(out_png)
    try:
        # temp file in the destination directory, then a rename: never half a PNG
        io.atomic_write(out, lambda fh: fig.savefig(fh, format="png", dpi=DPI), binary=True)
    finally:
        plt.close(fig)
    return out


def failure_figure(experiment, failure: str) -> Figure:
    """A PNG that says why ``experiment``'s figure (anything with ``eid`` and ``title``) is
    missing, in place of the figure."""
    fig, ax = plt.subplots(figsize=(7.5, 2.4), layout="constrained")
    fig.suptitle(f"{experiment.eid} · {experiment.title}", fontsize=11)
    ax.axis("off")
    ax.text(0.5, 0.5, "figure not drawn: " + textwrap.fill(failure, 90), ha="center",
            va="center", fontsize=9,
            bbox=dict(boxstyle="round", facecolor="#fde0dd", edgecolor="#b2182b"))
    return fig
