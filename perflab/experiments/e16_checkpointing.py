"""E16: the read side of scripts/e16_checkpointing.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import Absent, claim, holds, pct
from perflab.experiments import Experiment
from perflab.tables import make_table, peak_metric, pick, prefixed_numbers, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E16",
        "checkpointing",
        "Activation checkpointing at two batch sizes: peak memory, time, correctness",
        "interventions",
        cpu_behaviour="peak RSS (VmHWM) of a fresh process per variant; scaled batches",
    report_section='15 · Activation checkpointing',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Checkpointing at each batch size: time, peak memory and the correctness column."""
    r = rows_of("E16", frame)
    peak = peak_metric(r)
    records = []
    for b in prefixed_numbers(r, "b"):
        d = f"b{b}/checkpointed_vs_normal"
        for variant in ("normal", "checkpointed"):
            v = f"b{b}/{variant}"
            ck = variant == "checkpointed"
            records.append({
                "batch": b, "config": variant, "median_ms": pick(r, v),
                "examples_per_s": pick(r, v, "throughput"),
                "time_pct": pick(r, v, "time_pct_of_normal", "value"),
                "peak_mib": pick(r, v, peak, "max"),
                "saved_mib": pick(r, v, "memory_saved", "value") if ck else "",
                "mem_pct": pick(r, v, "memory_pct_of_normal", "value") if ck else "",
                "loss": pick(r, v, "loss", "value"),
                "grad_norm": pick(r, v, "grad_norm", "value"),
                "grad_max_abs_diff": pick(r, d, "grad_max_abs_diff", "value") if ck else "",
            })
    return make_table(records, ["batch", "config", "median_ms", "examples_per_s", "time_pct",
                            "peak_mib", "saved_mib", "mem_pct", "loss", "grad_norm",
                            "grad_max_abs_diff"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Checkpointing at each batch size: time and peak memory as % of the normal step."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.figures import pct_panels

    r = rows[rows.experiment == "E16"]
    groups = [(f"batch {b}", [f"b{b}/normal", f"b{b}/checkpointed"], ["normal", "checkpointed"],
               f"b{b}/normal") for b in prefixed_numbers(r, "b")]
    return pct_panels("E16", rows, groups, width=10.0)


@claim("C37", "E16", "checkpointing costs time at every batch and saves memory only when activations dominate",
       chapter="+33% time, nothing saved at 256; +31% time, 288 MiB (28%) saved at 4096",
       tolerance="time_rel > 0 at both; saved < 5% at the small batch and > 10% at the large")
def _checkpointing(ev):
    rows = ev.variants("E16", "b", "time_pct_of_normal", "value")
    sizes = sorted({v.split("/")[0] for v in rows if v.endswith("/checkpointed")},
                   key=lambda b: int(b.removeprefix("b")))
    if len(sizes) < 2:
        raise Absent("fewer than two batch sizes" + ("" if ev.has("E16") else " (E16 not run)"))
    v_s, v_l = f"{sizes[0]}/checkpointed", f"{sizes[-1]}/checkpointed"
    ts = ev.value("E16", v_s, "time_pct_of_normal", "value") - 100
    tl = ev.value("E16", v_l, "time_pct_of_normal", "value") - 100
    ss = 100 - ev.value("E16", v_s, "memory_pct_of_normal", "value")
    sl = 100 - ev.value("E16", v_l, "memory_pct_of_normal", "value")
    return holds(ts > 0 and tl > 0 and ss < 5 and sl > 10,
                 f"{sizes[0]}: {pct(ts)} time, {ss:.0f}% saved; {sizes[-1]}: {pct(tl)} time, {sl:.0f}% saved",
                 mechanism="activations set the peak at both batch sizes here" if ss >= 5
                 else "checkpointing saved little even at the large batch")
