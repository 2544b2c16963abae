"""E18: the read side of scripts/e18_attention_seq.py (its entry, table, figure and claims)."""

from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import Absent, claim, holds
from perflab.experiments import Experiment
from perflab.tables import (
    NOT_RUN,
    Missing,
    make_table,
    peak_metric,
    pick,
    prefixed_numbers,
    rows_of,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E18",
        "attention_seq",
        "Attention against sequence length: manual vs scaled_dot_product_attention",
        "interventions",
        workloads=("attention",),
        cpu_behaviour="a smaller T range; no memory cap (CUDA allocator only): peak RSS "
        "(VmHWM) of a fresh process per variant",
    report_section='17 · Sequence length',
)


def e18_backends(r: pd.DataFrame, T: int, metric: str = "backend_ran") -> str:
    """The SDPA backends with value 1 under ``metric`` at T, e.g. 'efficient_attention'."""
    sel = r[r.variant.str.startswith(f"T{T}/sdpa_backend/") & (r.metric == metric)
            & (r.status == "ok")]
    names = [v.rsplit("/", 1)[1] for v, x in zip(sel.variant, sel.value) if x == 1]
    return ", ".join(names) if names else ("none recognised" if not sel.empty else NOT_RUN)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Manual vs SDPA attention per T: ms and peak MiB of each, agreement, the backend that ran."""
    r = rows_of("E18", frame)
    peak = peak_metric(r)
    records = []
    for T in prefixed_numbers(r, "T"):
        d = f"T{T}/sdpa_vs_manual"
        records.append({
            "T": T, "manual_ms": pick(r, f"T{T}/manual", "fwd_bwd_latency"),
            "manual_mib": pick(r, f"T{T}/manual", peak, "max"),
            "sdpa_ms": pick(r, f"T{T}/sdpa", "fwd_bwd_latency"),
            "sdpa_mib": pick(r, f"T{T}/sdpa", peak, "max"),
            "out_max_abs_diff": pick(r, d, "out_max_abs_diff", "value"),
            "grad_max_abs_diff": pick(r, d, "grad_max_abs_diff", "value"),
            "sdpa_backend_ran": e18_backends(r, T),
            "sdpa_backends_eligible": e18_backends(r, T, "backend_eligible"),
        })
    return make_table(records, ["T", "manual_ms", "manual_mib", "sdpa_ms", "sdpa_mib",
                            "out_max_abs_diff", "grad_max_abs_diff", "sdpa_backend_ran",
                            "sdpa_backends_eligible"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Attention against T on log axes: forward + backward ms and peak MiB, manual vs SDPA.

    A T where an implementation ran out of memory is marked with its status at
    that T on both panels instead of a point.
    """
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns
    from matplotlib.ticker import FuncFormatter

    from perflab.figures import log2_x, new_figure

    r = rows[rows.experiment == "E18"]
    title_rows = r[r.variant.str.endswith("/manual")]
    fig, axes = new_figure("E18", title_rows if not title_rows.empty else r, ncols=2,
                            width=12.0)
    seqs = prefixed_numbers(r, "T")
    peak = peak_metric(r)
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
            log2_x(ax, seqs)
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


@claim("C39", "E18", "manual attention memory grows ~T^2 and OOMs first; SDPA allocates far less",
       chapter="manual 576 -> 2160 MiB (T 1024 -> 2048), OOM at 4096; SDPA 354 MiB at 4096",
       tolerance="manual peak ratio per doubling >= 3; SDPA peak < manual at the largest shared T")
def _attention_memory(ev):
    def series(impl):
        got = ({v: x for v, x in ev.variants("E18", "T", "peak_allocated", "max").items()
                if v.endswith(f"/{impl}")}
               or {v: x for v, x in ev.variants("E18", "T", "peak_rss", "max").items()
                   if v.endswith(f"/{impl}")})
        return {int(v.split("/")[0].removeprefix("T")): x for v, x in got.items()}

    man, sd = sorted(series("manual").items()), series("sdpa")
    if len(man) < 2:
        raise Absent("fewer than two manual sequence lengths" + ("" if ev.has("E18") else " (E18 not run)"))
    (t1, m1), (t2, m2) = man[-2], man[-1]
    per_doubling = (m2 / m1) ** (1 / math.log2(t2 / t1))
    shared = max(t for t, _ in man if t in sd) if any(t in sd for t, _ in man) else None
    smaller = shared is not None and sd[shared] < dict(man)[shared]
    return holds(per_doubling >= 3 and smaller,
                 f"manual x{per_doubling:.2f} per doubling (T {t1} -> {t2}); "
                 + (f"SDPA {sd[shared]:.1f} vs manual {dict(man)[shared]:.1f} MiB at T={shared}"
                    if shared else "no shared T"),
                 mechanism="the manual peak is not dominated by the T x T score matrix at these sizes")
