"""E15: the read side of scripts/e15_amp.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import Absent, against_floor, claim, holds, judge
from perflab.experiments import Experiment
from perflab.tables import make_table, peak_metric, pick, prefixed_numbers, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E15",
        "amp",
        "Mixed precision: numerics, time and memory of fp32, autocast fp16 and bf16",
        "interventions",
        cpu_behaviour="CPU autocast (bf16; fp16 where it runs, else unsupported rows); "
        "peak RSS (VmHWM) of a fresh process per variant",
    report_section='14 · Mixed precision',
)


E15_PRECISIONS = ("fp32", "fp16", "bf16")


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Mixed precision: the one-step numerics against fp32, then time and memory per batch size.

    Three separate answers, never merged: numerics (loss and gradient-norm
    deviation, all losses finite), time (ms/step, examples/s, % of fp32) and
    peak memory (% of fp32), each batch size on its own lines.
    """
    r = rows_of("E15", frame)
    peak = peak_metric(r)
    precisions = [p for p in E15_PRECISIONS if (r.variant.str.endswith("/" + p)).any()]
    records = []
    for prec in precisions:
        v = f"numerics/{prec}"
        records.append({
            "measurement": "one step vs fp32", "config": prec,
            "loss": pick(r, v, "loss", "value"),
            "loss_abs_diff": pick(r, v, "loss_abs_diff", "value") if prec != "fp32" else "",
            "grad_norm": pick(r, v, "grad_norm", "value"),
            "grad_norm_rel_diff": (pick(r, v, "grad_norm_rel_diff", "value")
                                   if prec != "fp32" else ""),
            "finite_steps": pick(r, f"finite/{prec}", "finite_losses", "value"),
        })
    for b in prefixed_numbers(r, "b"):
        for prec in precisions:
            v = f"b{b}/{prec}"
            records.append({
                "measurement": f"batch {b}", "config": prec,
                "median_ms": pick(r, v), "examples_per_s": pick(r, v, "throughput"),
                "peak_mib": pick(r, v, peak, "max"),
                "time_pct": pick(r, v, "time_pct_of_fp32", "value"),
                "mem_pct": pick(r, v, "memory_pct_of_fp32", "value"),
            })
    return make_table(records, ["measurement", "config", "median_ms", "examples_per_s", "peak_mib",
                            "time_pct", "mem_pct", "loss", "loss_abs_diff", "grad_norm",
                            "grad_norm_rel_diff", "finite_steps"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """AMP bars at each batch size: time and peak memory of fp16 and bf16 as % of fp32."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.figures import pct_panels

    r = rows[rows.experiment == "E15"]
    precs = [p for p in E15_PRECISIONS if (r.variant.str.endswith("/" + p)).any()]
    groups = [(f"batch {b}", [f"b{b}/{p}" for p in precs], list(precs), f"b{b}/fp32")
              for b in prefixed_numbers(r, "b")]
    return pct_panels("E15", rows, groups)


@claim("C35", "E15", "fp16 autocast helps more at large batch than at small",
       chapter="95.5% of fp32 time at batch 256, 40.1% at 2048",
       tolerance="fp16 time_rel at the large batch < at the small batch by > 10 points, "
       "beyond the A/A floor (C00)")
def _fp16_large_batch(ev):
    rels = {v.split("/")[0]: x for v, x in ev.variants("E15", "b", "time_pct_of_fp32", "value").items()
            if v.endswith("/fp16")}
    if len(rels) < 2:
        raise Absent("fewer than two fp16 batch sizes" + ("" if ev.has("E15") else " (E15 not run)"))
    sizes = sorted(rels, key=lambda b: int(b.removeprefix("b")))
    small, large = rels[sizes[0]], rels[sizes[-1]]
    return judge(small - large > 10, f"{small:.1f}% at {sizes[0]}, {large:.1f}% at {sizes[-1]}",
                 is_resolved=against_floor(ev, small - large, 10, agree=False),
                 mechanism="fp16 changes the step time about equally at both batch sizes")


@claim("C36", "E15", "bf16 autocast is slower than fp32 (hardware-dependent: no bf16 tensor cores on cc 7.5)",
       chapter="135.4% and 142.1% of fp32 time", tolerance="bf16 time_rel > 100% at every batch")
def _bf16_slower(ev):
    rels = {v: x for v, x in ev.variants("E15", "b", "time_pct_of_fp32", "value").items() if v.endswith("/bf16")}
    if not rels:
        raise Absent("no bf16 rows" + ("" if ev.has("E15") else " (E15 not run)"))
    txt = ", ".join(f"{v.split('/')[0]} {x:.1f}%" for v, x in sorted(rels.items()))
    return holds(all(x > 100 for x in rels.values()), txt,
                 mechanism="this device has a native bf16 path: bf16 is not slower than fp32")
