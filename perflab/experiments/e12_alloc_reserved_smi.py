"""E12: the read side of scripts/e12_alloc_reserved_smi.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import claim, holds
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E12",
        "alloc_reserved_smi",
        "Allocated, reserved, max reserved and NVML: four counters, four stories",
        "memory",
        cpu_behaviour="allocator and NVML counters are unsupported rows; the process RSS "
        "around the same large tensor is measured instead",
    report_section='11 · Allocated, reserved and the third number',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Four counters at four states, then what del and empty_cache moved."""
    r = rows_of("E12", frame)
    records = []
    for state, label in (("steady", "steady state"),
                         ("after_alloc", "after allocating the large tensor"),
                         ("after_del", "after del (Python reference gone)"),
                         ("after_empty_cache", "after torch.cuda.empty_cache()"),
                         ("delta/del", "moved by del"),
                         ("delta/empty_cache", "moved by empty_cache()")):
        records.append({"state": label,
                        "allocated_mib": pick(r, state, "allocated", "value"),
                        "reserved_mib": pick(r, state, "reserved", "value"),
                        "max_reserved_mib": pick(r, state, "max_reserved", "value"),
                        "nvml_process_mib": pick(r, state, "nvml_process", "value"),
                        "rss_mib": pick(r, state, "rss", "value")})
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The counters at each state: allocated, reserved, max reserved, NVML (CPU: RSS)."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.figures import add_note, draw_bars, new_figure
    r = rows[rows.experiment == "E12"]
    fig, (ax,) = new_figure("E12", r, width=10.0)
    states = ["steady", "after_alloc", "after_del", "after_empty_cache"]
    counters = [m for m in ("allocated", "reserved", "max_reserved", "nvml_process", "rss")
                if ((r.metric == m) & (r.status == "ok")).any()]
    series = {}
    for m in counters:
        series[m] = [(lambda c: c if isinstance(c, Missing) else (c, 0.0, 0.0))(
            pick(r, st, m, "value")) for st in states]
    notes = draw_bars(ax, states, series) if series else ["no counter measured"]
    for m in ("allocated", "nvml_process"):
        cell = pick(r, "steady", m, "value")
        if m not in counters and isinstance(cell, Missing):
            notes.append(f"{m}: {cell}")
    ax.set_ylabel("MiB: " + ", ".join(counters))
    add_note(ax, notes, loc="upper right")
    return fig


@claim("C29", "E12", "del lowers allocated, not reserved; empty_cache lowers reserved, not allocated",
       chapter="874 -> 474 allocated (reserved 1064 kept); empty_cache: reserved 1064 -> 542",
       tolerance="each counter moves by > 50 MiB or by < 1 MiB as stated")
def _three_counters(ev):
    a = {v: ev.value("E12", v, "allocated", "value") for v in ("after_alloc", "after_del", "after_empty_cache")}
    r = {v: ev.value("E12", v, "reserved", "value") for v in ("after_alloc", "after_del", "after_empty_cache")}
    ok = (a["after_alloc"] - a["after_del"] > 50 and abs(r["after_alloc"] - r["after_del"]) < 1
          and abs(a["after_del"] - a["after_empty_cache"]) < 1
          and r["after_del"] - r["after_empty_cache"] > 50)
    return holds(ok, f"allocated {a['after_alloc']:.0f}/{a['after_del']:.0f}/{a['after_empty_cache']:.0f}; "
                 f"reserved {r['after_alloc']:.0f}/{r['after_del']:.0f}/{r['after_empty_cache']:.0f} MiB",
                 mechanism="the caching allocator behaved differently on this device")
