"""E17: the read side of scripts/e17_accumulation.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import Absent, claim, holds
from perflab.experiments import Experiment
from perflab.tables import make_table, numbered_variants, peak_metric, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E17",
        "accumulation",
        "Gradient accumulation: gradient equivalence, time and peak memory against K",
        "interventions",
        cpu_behaviour="same with a smaller full batch; peak RSS (VmHWM) of a fresh process "
        "per K",
    report_section='16 · Gradient accumulation',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Accumulation: per K, the micro-batch, time, peak and the gradient equivalence."""
    r = rows_of("E17", frame)
    peak = peak_metric(r)
    records = []
    for k in numbered_variants(r, "k"):
        records.append({
            "K": int(k.removeprefix("k")), "micro_batch": pick(r, k, "micro_batch", "value"),
            "median_ms": pick(r, k), "time_pct": pick(r, k, "time_pct_of_k1", "value"),
            "peak_mib": pick(r, k, peak, "max"), "peak_pct": pick(r, k, "memory_pct_of_k1", "value"),
            "grad_max_abs_diff": pick(r, k, "grad_max_abs_diff", "value") if k != "k1" else "",
            "gradient_scale": pick(r, k, "grad_scale", "value") if k != "k1" else "",
            "gradient_max": pick(r, k, "grad_max", "value") if k != "k1" else "",
        })
    return make_table(records, ["K", "micro_batch", "median_ms", "time_pct", "peak_mib", "peak_pct",
                            "grad_max_abs_diff", "gradient_scale", "gradient_max"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Accumulation: time and peak memory against K, as % of K=1, one panel."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.figures import pct_panels

    r = rows[rows.experiment == "E17"]
    ks = numbered_variants(r, "k")
    return pct_panels("E17", rows, [("one optimizer step over the full batch", ks,
                                      [f"K={k.removeprefix('k')}" for k in ks], "k1")] if ks
                       else [], width=8.0)


@claim("C38", "E17", "accumulated gradients equal the full-batch gradient within roundoff; peak falls with K",
       chapter="max |diff| ~2e-9 vs gradient scale 1.7e-3; peak 100% -> 67% at K=8",
       tolerance="max |diff| < 1e-3 x gradient scale (the largest |g|, the chapter's scale; "
       "mean |g| where E17 wrote no max); peak at the largest K < at K=1")
def _accumulation(ev):
    diffs = ev.variants("E17", "k", "grad_max_abs_diff", "value")
    if not diffs:
        raise Absent("no gradient comparison" + ("" if ev.has("E17") else " (E17 not run)"))
    # the chapter sets the difference against the gradient's magnitude (1.7e-3, its largest
    # elements); a mean |g| over mostly-tiny elements would call fp32 summation order a bug
    scale = max(ev.variants("E17", "k", "grad_max", "value").values()
                or ev.variants("E17", "k", "grad_scale", "value").values(),
                default=float("nan"))
    peaks = sorted((int(v.removeprefix("k")), x) for v, x in ev.variants("E17", "k", "peak_allocated", "max").items())
    if not peaks:  # a CPU: each K's fresh-process peak RSS
        peaks = sorted((int(v.removeprefix("k")), x) for v, x in ev.variants("E17", "k", "peak_rss", "max").items())
    worst = max(diffs.values())
    ok = worst < 1e-3 * scale and len(peaks) >= 2 and peaks[-1][1] < peaks[0][1]
    return holds(ok, f"max |diff| {worst:.2e} (scale {scale:.2e}); peak K={peaks[0][0]} "
                 f"{peaks[0][1]:.1f} -> K={peaks[-1][0]} {peaks[-1][1]:.1f} MiB" if peaks else
                 f"max |diff| {worst:.2e}", mechanism="accumulation did not lower the peak here"
                 if worst < 1e-3 * scale else "the accumulated gradient differs beyond roundoff")
