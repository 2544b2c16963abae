"""C00: the read side of scripts/c00_calibration.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "C00",
        "calibration",
        "Calibration: the harness's own floors, the A/A noise floor, and peer timers",
        "calibration",
        cpu_behaviour="CUDA-event and do_bench rows unsupported; sync is a no-op, so its "
        "cost is a Python call",
    report_section="0 · Calibration: the harness's own floors",
)


#: why this experiment has no claim of its own
NO_CLAIMS = ("the calibration measures the harness itself (timer, process and profiler floors, "
             "the A/A noise floor, peer timers): the other claims are judged against its "
             "floors, so it has no finding of the chapter to reproduce")

#: the A/A floor's rows (variant, metric): the 95% upper bound of |median paired block
#: difference| / median(A) in %, the statistic every A/B is judged by (perflab.stats.aa_floor_pct)
AA_FLOOR = ("aa", "aa_median_diff_bound")
#: the same bound from blocks of the first calls only: does the floor depend on block length?
AA_FLOOR_SHORT = ("aa/short_blocks", "aa_median_diff_bound")
#: ms of one A/A block (calls per block x A's median call): the block length the floor is for
AA_BLOCK = ("aa", "block_duration")
#: calls per block of the short-block floor (at most the A/A's own calls per block)
AA_SHORT_INNER = 10


#: C00's table: (measurement, variant, metric, statistic)
C00_ROWS = (
    ("clock tick (perf_counter, measured)", "clock/perf_counter", "tick", "median"),
    ("clock resolution (declared)", "clock/perf_counter", "resolution_declared", "value"),
    ("one synchronize, idle device", "sync/idle", "sync_cost", "median"),
    ("empty call through the helper (timer floor)", "floor/empty_call", "call_latency", "median"),
    ("CUDA events: empty pair, device time", "events/empty_pair", "event_elapsed", "median"),
    ("CUDA events: host cost of recording a pair", "events/record_pair", "host_record_cost",
     "median"),
    ("fresh process: interpreter", "process/interpreter", "process_wall", "median"),
    ("fresh process: + import torch", "process/import_torch", "process_wall", "median"),
    ("fresh process: + device init", "process/device_init", "process_wall", "median"),
    ("reference step, unprofiled", "profiler/unprofiled", "step_latency", "median"),
    ("reference step, profiled", "profiler/profiled", "step_latency", "median"),
    ("profiler overhead", "profiler/overhead", "overhead_rel", "value"),
    ("A/A: B - A", "aa_b_minus_aa_a", "ab_effect", "value"),
    ("A/A floor: 95% bound of |median paired block difference|", *AA_FLOOR, "value"),
    ("A/A floor, blocks of the first calls only", *AA_FLOOR_SHORT, "value"),
    ("A/A block duration", *AA_BLOCK, "value"),
    ("planted 2x: B - A", "planted_2x_minus_planted_a", "ab_effect", "value"),
    ("planted 2x: relative", "planted_2x_minus_planted_a", "ab_effect_rel", "value"),
    ("step: project helper", "peer/helper", "step_latency", "median"),
    ("step: torch.utils.benchmark Timer", "peer/timer", "step_latency", "median"),
    ("step: triton do_bench", "peer/do_bench", "step_latency", "median"),
    ("Timer / helper", "peer/timer_over_helper", "ratio", "value"),
    ("do_bench / helper", "peer/do_bench_over_helper", "ratio", "value"),
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Calibration: the harness's floors, the A/A floor, the planted check, peer timers.

    One line per measurement with its value and unit; A/B lines add the
    judgement (bootstrap interval, p, resolved). The A/A floor is the 95% upper
    bound of the statistic every A/B is judged by (the median paired block
    difference, % of A) when both sides are copies of the same step; it holds
    for blocks about as long as the A/A's (its block duration); the short-block
    line shows how much it grows for shorter blocks.
    """
    r = rows_of("C00", frame)
    records = []
    for label, variant, metric, statistic in C00_ROWS:
        value = pick(r, variant, metric, statistic)
        unit = pick(r, variant, metric, statistic, field="unit")
        rec = {"measurement": label, "value": value,
               "unit": unit if not isinstance(unit, Missing) else "",
               "n": "" if isinstance(value, Missing) else pick(r, variant, metric, statistic,
                                                                field="n")}
        if metric == "ab_effect":
            rec["ci_low"] = pick(r, variant, "ab_ci_low", "value")
            rec["ci_high"] = pick(r, variant, "ab_ci_high", "value")
            rec["p"] = pick(r, variant, "ab_p", "value")
            rec["resolved"] = pick(r, variant, "ab_resolved", "value")
        records.append(rec)
    return make_table(records, ["measurement", "value", "unit", "n", "ci_low", "ci_high", "p",
                            "resolved"])


#: C00's left panel: (label, variant, metric), each a median in ms shown in µs
C00_COSTS = (
    ("clock tick", "clock/perf_counter", "tick"),
    ("idle synchronize", "sync/idle", "sync_cost"),
    ("empty call (helper)", "floor/empty_call", "call_latency"),
    ("CUDA event pair", "events/empty_pair", "event_elapsed"),
    ("event record (host)", "events/record_pair", "host_record_cost"),
    ("process: interpreter", "process/interpreter", "process_wall"),
    ("process: + torch", "process/import_torch", "process_wall"),
    ("process: + device", "process/device_init", "process_wall"),
)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The harness's own floors (log µs) and the A/A pair beside the planted 2x pair."""
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns
    from matplotlib.ticker import FixedLocator, FuncFormatter

    from perflab.figures import add_note, new_figure
    fig, (ax1, ax2) = new_figure("C00", rows, ncols=2, width=11)
    labels, values, notes = [], [], []
    for label, variant, metric in C00_COSTS:
        v = pick(rows, variant, metric)
        if isinstance(v, Missing):
            notes.append(f"{label}: {v}")
            continue
        labels.append(label)
        values.append(float(v) * 1e3)
    if values:
        sns.barplot(x=values, y=labels, ax=ax1, color=sns.color_palette()[0])
        ax1.set_xscale("log")
        ax1.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax1.set_xlabel("median, µs (log scale)")
    ax1.set_ylabel("")
    ax1.set_title("what the instruments cost", fontsize=10)
    add_note(ax1, notes, loc="upper right")
    s = samples[(samples.experiment == "C00")
                & samples.variant.isin(["aa_a", "aa_b", "planted_a", "planted_2x"])]
    if s.empty:
        add_note(ax2, ["no samples of the A/A or planted pairs"], loc="upper left")
    else:
        blocks = s.groupby(["variant", "block"]).value.median().reset_index()
        for variant, label, marker in (("aa_a", "A/A: A", "o"), ("aa_b", "A/A: B", "s"),
                                       ("planted_a", "planted: A", "^"),
                                       ("planted_2x", "planted: B = step twice", "v")):
            d = blocks[blocks.variant == variant]
            ax2.plot(d.block, d.value, marker=marker, label=label)
        ax2.set_xlabel("block (A and B alternate AB, BA, ...)")
        ax2.set_ylabel("block median, ms per call")
        ax2.xaxis.set_major_locator(FixedLocator(sorted(blocks.block.unique())))
        ax2.legend(loc="best", fontsize=8)
    floor = pick(rows, *AA_FLOOR, "value")
    ax2.set_title("A/A noise" + ("" if isinstance(floor, Missing)
                                 else f" (floor {float(floor):.2f}%)") + " vs a planted 2x",
                  fontsize=10)
    return fig
