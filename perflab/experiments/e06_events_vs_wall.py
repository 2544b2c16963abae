"""E06: the read side of scripts/e06_events_vs_wall.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import claim, holds
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E06",
        "events_vs_wall",
        "Two instruments: synchronized wall clock vs CUDA events",
        "localize",
        cpu_behaviour="wall clock only; CUDA events and host submission rows unsupported",
    report_section='5 · Two instruments',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Two instruments: wall clock, CUDA events, host submission and their gap."""
    r = rows_of("E06", frame)
    records = []
    for label, variant in (
        ("synchronized wall clock", "wall_clock"),
        ("CUDA events (device)", "cuda_events"),
        ("host submission only", "host_submission"),
        ("wall - events (per call, same calls)", "wall_minus_events"),
    ):
        records.append({
            "instrument": label,
            "median_ms": pick(r, variant),
            "iqr_ms": pick(r, variant, statistic="iqr"),
        })
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Median step time by the synchronized wall clock, CUDA events and host submission, with
    p25..p75 error bars; instruments this device cannot provide are labelled with their
    status and reason instead of drawn.
    """
    # plotting is imported here, not above: timing jobs import this module
    from perflab.figures import add_note, bar_cell, draw_bars, new_figure
    r = rows[rows.experiment == "E06"]
    fig, (ax,) = new_figure("E06", r, width=7.0)
    instruments = ["wall_clock", "cuda_events", "host_submission"]
    notes = draw_bars(ax, instruments, {"median": [bar_cell(r, v) for v in instruments]})
    gap = pick(r, "wall_minus_events")
    if isinstance(gap, Missing):
        notes.append(f"wall - events: {gap}")
    else:
        iqr = pick(r, "wall_minus_events", statistic="iqr")
        ax.set_title(f"wall - events = {gap:+.3f} ms per call (median; IQR {iqr:.3f})",
                     fontsize=9)
    ax.set_ylabel("median ms per step (error bar: p25..p75)")
    add_note(ax, notes, loc="upper right")
    return fig


@claim("C14", "E06", "on a device-bound step the synchronized wall clock and CUDA events agree",
       chapter="16.281 vs 15.945 ms (+0.336 ms, 2.1%)", tolerance="wall - events < 5% of wall")
def _events_agree(ev):
    gap = ev.value("E06", "wall_minus_events", "step_latency")
    ev.value("E06", "cuda_events", "step_latency")
    wall = ev.value("E06", "wall_clock", "step_latency")
    return holds(abs(gap) < 0.05 * wall, f"wall - events {gap:+.3f} ms of {wall:.3f} ms",
                 mechanism="host time is a real part of this step: the wall clock sees it, events do not")
