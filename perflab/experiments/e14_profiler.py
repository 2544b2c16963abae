"""E14: the read side of scripts/e14_profiler.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perflab.claims import Absent, claim, holds, judge, pct, phase_shares, resolved
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E14",
        "profiler",
        "The profiler localizes; it does not measure",
        "localize",
        cpu_behaviour="CPU activity only: times per range and operator are host times",
        extra_outputs=(("trace", "_trace.json.gz"),),
    report_section='13 · The profiler localizes',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Profiler: time per phase range, top operators, profiled vs unprofiled step.

    On CUDA a range's ``time_ms`` is device time (``host_ms`` beside it); on a
    CPU it is CPU time. Operators are ranked by self device time (CPU: self
    CPU time). ``n`` is active steps for ranges and steps, calls for operators.
    """
    r = rows_of("E14", frame)
    records = []
    ranges = [v for v in r.variant.unique() if v.startswith("range:")]
    for v in ranges:
        device = pick(r, v, "range_device_time", "value")
        on_device = not isinstance(device, Missing)
        records.append({
            "measurement": f"range {v.removeprefix('range:')}",
            "what": "device time, all active steps" if on_device else
                    "CPU time, all active steps",
            "n": pick(r, v, "range_cpu_time", "value", field="n"),
            "time_ms": device if on_device else pick(r, v, "range_cpu_time", "value"),
            "host_ms": pick(r, v, "range_cpu_time", "value") if on_device else None,
        })
    for v in (v for v in r.variant.unique() if v.startswith("op:")):
        sel = r[(r.variant == v) & (r.status == "ok")]
        if sel.empty:
            continue
        row = sel.iloc[0]
        records.append({
            "measurement": f"op {v.removeprefix('op:')}",
            "what": "self device time" if row["metric"] == "op_self_device_time"
                    else "self CPU time",
            "n": row["n"],
            "time_ms": row["value"],
        })
    for label, v in (("profiled step (median)", "profiled"),
                     ("unprofiled step (median)", "unprofiled")):
        records.append({"measurement": label, "what": "synchronized wall clock",
                        "n": pick(r, v, "step_latency", field="n"),
                        "time_ms": pick(r, v, "step_latency")})
    records.append({"measurement": "profiler overhead", "what": "profiled - unprofiled",
                    "time_ms": pick(r, "profiler_overhead", "overhead", "value"),
                    "overhead_pct": pick(r, "profiler_overhead", "overhead_rel", "value")})
    return make_table(records, ["measurement", "what", "n", "time_ms", "host_ms", "overhead_pct"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Where the profiled steps spend their time: each ``record_function`` range summed over
    the profiler's active steps (device time on CUDA, with host time beside it; CPU time on
    a CPU) and the top operators by self time. The line below compares the profiled step
    with the same step unprofiled: the profiler's overhead, which is why these bars localize
    and never time the real step.
    """
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.figures import add_note, new_figure
    r = rows[rows.experiment == "E14"]
    fig, (left, right) = new_figure("E14", r, ncols=2, width=12.5,
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
    add_note(left, notes)

    ops = r[r.variant.str.startswith("op:") & (r.status == "ok")]
    if ops.empty:
        add_note(right, ["no operator rows"], loc="upper left")
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


@claim("C33", "E14", "the profiler inflates the step it profiles",
       chapter="26.121 vs 16.532 ms (+58%)", tolerance="profiled - unprofiled > 0, beyond the unprofiled IQR")
def _profiler_inflates(ev):
    over = ev.value("E14", "profiler_overhead", "overhead", "value")
    rel = ev.value("E14", "profiler_overhead", "overhead_rel", "value")
    iqr = ev.maybe("E14", "unprofiled", "step_latency", "iqr")
    return judge(over > 0, f"{over:+.3f} ms ({pct(rel)})",
                 is_resolved=resolved(ev, "E14", "profiler_overhead", over, noise=iqr),
                 mechanism="the profiled step was not slower")


@claim("C34", "E14", "the profiler's proportions still localize the dominant phase",
       chapter="optimizer is the largest range (114.7 ms of device time) as in the phase split",
       tolerance="largest profiler range == largest synchronized phase of E05")
def _profiler_localizes(ev):
    ranges = {v.removeprefix("range:"): x for v, x in ev.variants("E14", "range:", "range_device_time", "value").items()}
    what = "device"
    if not ranges:
        ranges = {v.removeprefix("range:"): x for v, x in ev.variants("E14", "range:", "range_cpu_time", "value").items()}
        what = "CPU"
    if not ranges:
        raise Absent("no profiler ranges" + ("" if ev.has("E14") else " (E14 not run)"))
    top = max(ranges, key=ranges.get)
    try:
        s = phase_shares(ev, "E05", "sync/")
        phase_top = max(s, key=s.get)
    except Absent:
        phase_top = "optimizer"  # the chapter's localization, when E05 has not run
    return holds(top == phase_top, f"largest range {top} ({ranges[top]:.1f} ms {what}); "
                 f"largest phase {phase_top}",
                 mechanism=f"the profiler ranks {top} first, the synchronized split {phase_top}")
