"""E14, the profiler localizes; it does not measure: where the profiled steps spend their time
(each phase's ``record_function`` range, the top operators), and how much slower the profiled
step is than the same step unprofiled. Measured by scripts/e14_profiler.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perflab.core.names import STEP_LATENCY
from perflab.experiments import e05_phases
from perflab.kit.claims import (
    Absent,
    Evidence,
    Part,
    claim,
    judge,
    judge_parts,
    lead_against_floor,
    leader,
    pct,
    resolved,
)
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "E14",
    "profiler",
    "The profiler localizes; it does not measure",
    "localize",
    cpu_behaviour="CPU activity only: times per range and operator are host times",
    extra_outputs=(("trace", "_trace.json.gz"),),
    report_section="13 · The profiler localizes",
)

#: its parameters (config key ``experiments.E14``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
wait: {type: integer, minimum: 0, default: 5}
warmup: {type: integer, minimum: 0, default: 5}
active: {type: integer, minimum: 1, default: 10}
top_ops: {type: integer, minimum: 1, default: 10}
# sessions, each between two unprofiled blocks: one session's 10 steps against 400
# unprofiled read -11% and +10% in two runs of one CPU (a session lands in a fast or a
# slow stretch as a whole); six paired sessions give C33 the A/B judgement
sessions:
  description: >-
    profiling sessions, each bracketed by unprofiled calls (timing.repeats
    split among the brackets): C33 is their paired difference, judged as an
    A/B against C00's floor (the Wilcoxon test needs 6 to resolve anything)
  type: integer
  minimum: 1
  default: 6
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'wait': 1, 'warmup': 1, 'active': 2, 'top_ops': 5, 'sessions': 2}}

# ------------------------------------------------------------------ the names its script writes

#: the same step timed unprofiled, then over the profiler's active steps, and the difference
UNPROFILED, PROFILED, PROFILER_OVERHEAD = "unprofiled", "profiled", "profiler_overhead"
#: ms, and % of the unprofiled median (the A/B writer names the second: OVERHEAD + ab.REL)
OVERHEAD, OVERHEAD_REL = "overhead", "overhead_rel"
#: one variant per record_function range ("range:<phase>") and per top operator ("op:<name>")
RANGE_PREFIX, OP_PREFIX = "range:", "op:"
RANGE_DEVICE_TIME, RANGE_CPU_TIME = "range_device_time", "range_cpu_time"
OP_SELF_DEVICE_TIME, OP_SELF_CPU_TIME = "op_self_device_time", "op_self_cpu_time"


def range_variant(name: str) -> str:
    return f"{RANGE_PREFIX}{name}"


def op_variant(name: str) -> str:
    return f"{OP_PREFIX}{name}"


def _ranges(r: pd.DataFrame) -> list[str]:
    """The range variants in ``r``, in row order (the step's phase order)."""
    return [v for v in r.variant.unique() if v.startswith(RANGE_PREFIX)]


# ------------------------------------------------------------------ table


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Profiler: time per phase range, top operators, profiled vs unprofiled step.

    On CUDA a range's ``time_ms`` is device time (``host_ms`` beside it); on a
    CPU it is CPU time. Operators are ranked by self device time (CPU: self
    CPU time). ``n`` is active steps for ranges and steps, calls for operators.
    """
    r = rows_of("E14", frame)
    records = []
    for v in _ranges(r):
        device = pick(r, v, RANGE_DEVICE_TIME, "value")
        on_device = not isinstance(device, Missing)
        records.append({
            "measurement": f"range {v.removeprefix(RANGE_PREFIX)}",
            "what": "device time, all active steps" if on_device else
                    "CPU time, all active steps",
            "n": pick(r, v, RANGE_CPU_TIME, "value", field="n"),
            "time_ms": device if on_device else pick(r, v, RANGE_CPU_TIME, "value"),
            "host_ms": pick(r, v, RANGE_CPU_TIME, "value") if on_device else None,
        })
    for v in (v for v in r.variant.unique() if v.startswith(OP_PREFIX)):
        sel = r[(r.variant == v) & (r.status == "ok")]
        if sel.empty:
            continue
        row = sel.iloc[0]
        records.append({
            "measurement": f"op {v.removeprefix(OP_PREFIX)}",
            "what": "self device time" if row["metric"] == OP_SELF_DEVICE_TIME
                    else "self CPU time",
            "n": row["n"],
            "time_ms": row["value"],
        })
    for label, v in (("profiled step (median)", PROFILED),
                     ("unprofiled step (median)", UNPROFILED)):
        records.append({"measurement": label, "what": "synchronized wall clock",
                        "n": pick(r, v, STEP_LATENCY, field="n"),
                        "time_ms": pick(r, v, STEP_LATENCY)})
    records.append({"measurement": "profiler overhead", "what": "profiled - unprofiled",
                    "time_ms": pick(r, PROFILER_OVERHEAD, OVERHEAD, "value"),
                    "overhead_pct": pick(r, PROFILER_OVERHEAD, OVERHEAD_REL, "value")})
    return make_table(records, ["measurement", "what", "n", "time_ms", "host_ms", "overhead_pct"])


# ------------------------------------------------------------------ figure


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Where the profiled steps spend their time: each ``record_function`` range summed over
    the profiler's active steps (device time on CUDA, with host time beside it; CPU time on
    a CPU) and the top operators by self time. The line below compares the profiled step
    with the same step unprofiled: the profiler's overhead, which is why these bars localize
    and never time the real step.
    """
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import new_figure

    r = rows[rows.experiment == "E14"]
    fig, (left, right) = new_figure(ENTRY, r, ncols=2, width=12.5,
                                     gridspec_kw={"width_ratios": [1, 1.4]})
    _draw_ranges(left, r)
    _draw_ops(right, r)
    over = pick(r, PROFILER_OVERHEAD, OVERHEAD, "value")
    rel = pick(r, PROFILER_OVERHEAD, OVERHEAD_REL, "value")
    prof, plain = pick(r, PROFILED, STEP_LATENCY), pick(r, UNPROFILED, STEP_LATENCY)
    if not any(isinstance(c, Missing) for c in (over, rel, prof, plain)):
        fig.supxlabel(f"profiled step {prof:.3f} ms vs unprofiled {plain:.3f} ms (medians): "
                      f"the profiler adds {over:+.3f} ms ({rel:+.1f}%); the bars localize, "
                      "they do not time the real step", fontsize=9)
    return fig


def _draw_ranges(ax, r: pd.DataFrame) -> None:
    """Left panel: each range's device and host time, side by side."""
    import seaborn as sns

    from perflab.kit.figures import add_note

    ranges = _ranges(r)
    names = [v.removeprefix(RANGE_PREFIX) for v in ranges]
    on_device = any(not isinstance(pick(r, v, RANGE_DEVICE_TIME, "value"), Missing)
                    for v in ranges)
    series = {}
    if on_device:
        series["device time"] = [pick(r, v, RANGE_DEVICE_TIME, "value") for v in ranges]
    series["host (CPU) time"] = [pick(r, v, RANGE_CPU_TIME, "value") for v in ranges]
    colours = sns.color_palette(n_colors=len(series))
    width = 0.8 / len(series)
    notes = []
    for i, (label, cells) in enumerate(series.items()):
        xs = np.arange(len(names)) + (i - (len(series) - 1) / 2) * width
        for x, name, cell in zip(xs, names, cells):
            if isinstance(cell, Missing):
                notes.append(f"{name} ({label}): {cell}")
                continue
            ax.bar(x, float(cell), width * 0.95, color=colours[i],
                   label=label if label not in ax.get_legend_handles_labels()[1] else None)
    ax.set_xticks(np.arange(len(names)), names)
    n = pick(r, ranges[0], RANGE_CPU_TIME, "value", field="n") if ranges else None
    steps = "" if n is None or isinstance(n, Missing) else f" over {int(n)} profiled steps"
    ax.set_ylabel(f"ms{steps}")
    ax.set_title("record_function ranges" + (" (CPU: the CPU is the device)"
                                             if not on_device else ""), fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)
    add_note(ax, notes)


def _draw_ops(ax, r: pd.DataFrame) -> None:
    """Right panel: the top operators by self time."""
    import seaborn as sns

    from perflab.kit.figures import add_note

    ops = r[r.variant.str.startswith(OP_PREFIX) & (r.status == "ok")]
    if ops.empty:
        add_note(ax, ["no operator rows"], loc="upper left")
        return
    metric = ops.metric.iloc[0]
    ax.barh([v.removeprefix(OP_PREFIX) for v in ops.variant], ops.value,
            color=sns.color_palette()[2])
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlabel("self device time, ms" if metric == OP_SELF_DEVICE_TIME
                  else "self CPU time, ms")
    ax.set_title(f"top {len(ops)} operators by self time", fontsize=9)


# ------------------------------------------------------------------ claims


@claim("C33", "E14", "the profiler inflates the step it profiles",
       chapter="26.121 vs 16.532 ms (+58%)",
       tolerance="profiled median > unprofiled median, over sessions each bracketed by "
       "unprofiled calls: each session's median against its two brackets' mean, judged as "
       "an A/B (Wilcoxon over the sessions, effect outside C00's A/A floor)")
def _profiler_inflates(ev):
    over = ev.value("E14", PROFILER_OVERHEAD, OVERHEAD, "value")
    rel = ev.value("E14", PROFILER_OVERHEAD, OVERHEAD_REL, "value")
    # one session's steps move together (a session lands in a fast or a slow stretch as a
    # whole), so the unit of noise is the session: its paired difference, not its steps
    return judge_parts(Part(rel > 0, f"{over:+.3f} ms ({pct(rel)})",
                            resolved(ev, "E14", PROFILER_OVERHEAD, over),
                            name="the profiled step is slower",
                            mechanism="the profiled step was not slower"))


def _range_times(ev: Evidence) -> tuple[dict[str, float], str]:
    """({range: ms}, "device" or "CPU"): device time where it was measured, else CPU time."""
    for metric, what in ((RANGE_DEVICE_TIME, "device"), (RANGE_CPU_TIME, "CPU")):
        got = ev.variants("E14", RANGE_PREFIX, metric, "value")
        if got:
            return {v.removeprefix(RANGE_PREFIX): x for v, x in got.items()}, what
    raise Absent("no profiler ranges" + ("" if ev.has("E14") else " (E14 not run)"))


@claim("C34", "E14", "the profiler's proportions still localize the dominant phase",
       chapter="optimizer is the largest range (114.7 ms of device time) as in the phase split",
       tolerance="largest profiler range == largest synchronized phase of E05, each ahead of "
                 "its runner-up beyond the noise (E05: the 95% interval of the difference "
                 "of the two phases' medians over its steps; the profiler's ranges: the A/A "
                 "floor, C00)")
def _profiler_localizes(ev):
    ranges, what = _range_times(ev)
    # E05 is the reference this claim is about: without it there is nothing to compare with
    phase_top, _, phase_lead = e05_phases.largest_phase(ev)
    top, second = leader(ranges)
    range_lead = lead_against_floor(ev, ranges)
    # two tops are the same or different phases only where each order is beyond its noise
    decided = (phase_lead[0] and range_lead[0],
               f"E05: {phase_lead[1]}; profiler: {range_lead[1]}")
    return judge(top == phase_top, f"largest range {top} ({ranges[top]:.1f} ms {what}"
                 + (f", next {second} {ranges[second]:.1f}" if second else "")
                 + f"); largest phase {phase_top}", is_resolved=decided,
                 mechanism=f"the profiler ranks {top} first, the synchronized split {phase_top}")
