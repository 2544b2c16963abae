"""E23: the read side of scripts/e23_instrument_cost.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perflab.claims import claim, judge, pct, resolved
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E23",
        "instrument_cost",
        "Forensic vs performance mode: what each instrument costs",
        "localize",
    report_section='20 · Forensic vs performance mode',
)


#: E23's instruments: variant prefix -> the chapter's label
E23_INSTRUMENTS = (
    ("phase_sync", "per-phase synchronize (x7)"),
    ("item", ".item() every step"),
    ("profiler", "torch.profiler with a schedule"),
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Forensic vs performance mode: each instrument's cost on the controlled step."""
    r = rows_of("E23", frame)
    records = []
    for key, label in E23_INSTRUMENTS:
        base, inst, cost = f"{key}/baseline", f"{key}/instrumented", f"{key}/cost"
        records.append({
            "instrument": label,
            "baseline_median_ms": pick(r, base, "step_latency"),
            "instrumented_median_ms": pick(r, inst, "step_latency"),
            "cost_ms": pick(r, cost, "cost", "value"),
            "cost_pct": pick(r, cost, "cost_rel", "value"),
            "baseline_block_min_ms": pick(r, base, "block_median", "min"),
            "baseline_block_max_ms": pick(r, base, "block_median", "max"),
            "instrumented_block_min_ms": pick(r, inst, "block_median", "min"),
            "instrumented_block_max_ms": pick(r, inst, "block_median", "max"),
            "resolved": pick(r, cost, "difference_resolved", "value"),
        })
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """What each instrument costs on the controlled step, in % of the same step without it:
    per-phase synchronization, ``.item()`` every step (interleaved A/B) and the profiler
    (bracketed by unprofiled series before and after). Whiskers span ± the block-to-block
    spread, dots are the block-by-block differences, and the tick labels give the cost in ms
    and whether it is resolved.
    """
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.figures import add_note, block_series, new_figure
    r = rows[rows.experiment == "E23"]
    fig, (ax,) = new_figure("E23", r, width=8.5)
    instruments = (("phase_sync", "per-phase\nsynchronize (x7)"),
                   ("item", ".item()\nevery step"),
                   ("profiler", "torch.profiler\nwith a schedule"))
    notes, ticks = [], []
    colour = sns.color_palette()[0]
    for x, (key, label) in enumerate(instruments):
        ticks.append(label)
        rel = pick(r, f"{key}/cost", "cost_rel", "value")
        cost = pick(r, f"{key}/cost", "cost", "value")
        base = pick(r, f"{key}/baseline", "step_latency")
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
        diffs = block_series(samples, "E23", f"{key}/cost", "block_pair_diff")
        if not diffs.empty:
            ax.scatter(np.full(len(diffs), x) + np.linspace(-0.15, 0.15, len(diffs)),
                       100 * diffs.value / base, s=12, color="#222222", alpha=0.6, zorder=3,
                       label="each block pair (instrumented - baseline)" if x == 0 else None)
        res = pick(r, f"{key}/cost", "difference_resolved", "value")
        verdict = "" if isinstance(res, Missing) else (", resolved" if res else ", unresolved")
        ticks[-1] = f"{label}\n{cost:+.3f} ms{verdict}"
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(instruments)), ticks)
    ax.set_ylabel("cost, % of the uninstrumented step\n(whisker: ± block spread)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)
    add_note(ax, notes, loc="upper right")
    return fig


@claim("C42", "E23", "per-phase synchronization costs a few percent of the step; the profiler far more",
       chapter="+0.8 ms (+5%) vs +9.6 ms (+58%)",
       tolerance="phase-sync cost < 10%; profiler cost > phase-sync cost")
def _instrument_costs(ev):
    ps = ev.value("E23", "phase_sync/cost", "cost_rel", "value")
    pr = ev.value("E23", "profiler/cost", "cost_rel", "value")
    res = resolved(ev, "E23", "profiler/cost", ev.value("E23", "profiler/cost", "cost", "value"))
    return judge(ps < 10 and pr > ps, f"phase sync {pct(ps)}, profiler {pct(pr)}", is_resolved=res,
                 mechanism="per-phase synchronization is not cheap here" if ps >= 10
                 else "the profiler costs no more than per-phase sync here")
