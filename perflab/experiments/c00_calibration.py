"""C00 · Calibration: what do the instruments cost, and how small an effect can we resolve?

``scripts/c00_calibration.py`` runs first and measures the harness's own floors (the
clock, an idle synchronize, an empty call through the helper, CUDA events, a fresh
process), the profiler's overhead, the A/A noise floor beside a planted 2x slowdown, and
the helper against peer timers. This module names those rows and reads them back: the
table, the figure, and :func:`floors`, the numbers the ledger and
:mod:`perflab.experiments.floors` (the floor every A/B is judged against) read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from perflab.core.names import STEP_LATENCY
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

EID = "C00"

ENTRY = Experiment(
    EID,
    "calibration",
    "Calibration: the harness's own floors, the A/A noise floor, and peer timers",
    "calibration",
    cpu_behaviour="CUDA-event and do_bench rows unsupported; sync is a no-op, so its "
    "cost is a Python call",
    report_section="0 · Calibration: the harness's own floors",
    diagnosis=("cpu", "cuda"),
    process_peer="peer/helper",
)

#: its parameters (config key ``experiments.C00``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
floor_repeats: {type: integer, minimum: 1, default: 1000}
# fresh children of each kind (bare; import torch + device init)
process_repeats: {type: integer, minimum: 1, default: 3}
# 48 block pairs (12, then 36 before; ~3 s more on the H200 than 36): the floor is the
# bound for a median of 12 pairs (and one per pair count up to the A/A's own, for A/Bs
# of other counts), and from 12 pairs alone that bound read 7.7% and 2.1% in two runs
# of one H200; with 36, E13's A/Bs of 48 pairs were held to the bound for 32
aa_blocks: {type: integer, minimum: 2, default: 48}
aa_inner: {type: integer, minimum: 1, default: 30}
# blocks per side of the planted 2x; null: aa_blocks
planted_blocks:
  description: "blocks per side of the planted 2x (null: aa_blocks)"
  oneOf: [{type: "null"}, {type: integer, minimum: 2}]
  default: 12
profiler_steps: {type: integer, minimum: 2, default: 20}
# the helper's calls against the peers; null: timing.repeats
peer_repeats:
  description: "the helper's calls of the step set against the peer timers (null: timing.repeats)"
  oneOf: [{type: "null"}, {type: integer, minimum: 1}]
  default: null
peer_min_run_time_s: {type: number, exclusiveMinimum: 0, default: 1.0}
do_bench_warmup_ms: {type: number, exclusiveMinimum: 0, default: 25}
do_bench_rep_ms: {type: number, exclusiveMinimum: 0, default: 100}
# diagnose: [clock, aa]
parts:
  description: "which calibrations run (perflab diagnose keeps clock and aa: the verdict reads only the A/A floor)"
  type: array
  items: {type: string, enum: [clock, events, process, aa, planted, profiler, peers]}
  minItems: 1
  uniqueItems: true
  default: [clock, events, process, aa, planted, profiler, peers]
"""

#: under a budget (sampling.rule adaptive) the A/A runs at least this many block pairs
#: before its floor's precision is judged (a floor for medians of fewer pairs than
#: FLOOR_REFERENCE_PAIRS is wider: a short A/A errs towards calling a difference noise,
#: never towards a finding)
AA_MIN_BLOCKS = 6
#: the params each optional part reads (``parts``): a part that does not run costs none of
#: them (perflab.pipeline.preflight's estimate skips them); ``peers`` also runs the helper
#: once at timing.repeats
PART_PARAMS = {"process": ("process_repeats",), "planted": ("planted_blocks",),
               "profiler": ("profiler_steps",),
               "peers": ("peer_repeats", "peer_min_run_time_s", "do_bench_warmup_ms",
                         "do_bench_rep_ms")}

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'floor_repeats': 50, 'process_repeats': 1, 'aa_blocks': 6, 'aa_inner': 3, 'profiler_steps': 4, 'peer_min_run_time_s': 0.05, 'do_bench_warmup_ms': 5, 'do_bench_rep_ms': 10}}

#: why this experiment has no claim of its own
NO_CLAIMS = ("the calibration measures the harness itself (timer, process and profiler floors, "
             "the A/A noise floor, peer timers): the other claims are judged against its "
             "floors, so it has no finding of the chapter to reproduce")

# ------------------------------------------------------------------ the rows the job writes

#: the clock: its measured tick (median) and declared resolution (value)
CLOCK, TICK, RESOLUTION_DECLARED = "clock/perf_counter", "tick", "resolution_declared"
#: one synchronize on an idle device
SYNC_IDLE, SYNC_COST = "sync/idle", "sync_cost"
#: an empty callable timed through the helper: the floor of every timing
EMPTY_CALL, CALL_LATENCY = "floor/empty_call", "call_latency"
#: CUDA events: device time of an empty pair, and the host's cost of recording a pair
EVENTS_EMPTY_PAIR, EVENT_ELAPSED = "events/empty_pair", "event_elapsed"
EVENTS_RECORD_PAIR, HOST_RECORD_COST = "events/record_pair", "host_record_cost"
#: fresh processes, each stage (metric PROCESS_WALL) including the one before it
PROCESS_INTERPRETER = "process/interpreter"
PROCESS_IMPORT_TORCH = "process/import_torch"
PROCESS_DEVICE_INIT = "process/device_init"
PROCESS_WALL = "process_wall"
#: the reference step without and with the profiler (``step_latency``), and the overhead
PROFILER_UNPROFILED, PROFILER_PROFILED = "profiler/unprofiled", "profiler/profiled"
PROFILER_OVERHEAD, OVERHEAD_REL = "profiler/overhead", "overhead_rel"
#: the A/A pair (two independent copies of the step as A and B) and the planted 2x pair;
#: Context.ab writes each pair's judgement under ``<b>_minus_<a>``
AA_A, AA_B = "aa_a", "aa_b"
PLANTED_A, PLANTED_2X = "planted_a", "planted_2x"
#: the A/A floor's rows (variant, metric): the 95% upper bound of |median paired block
#: difference| / median(A) in %, the statistic every A/B is judged by (perflab.instruments.stats.aa_floor_pct),
#: for a median of FLOOR_REFERENCE_PAIRS pairs (or the A/A's own, if fewer): the run's floor,
#: for every statistic that is not an A/B of its own pair count
AA_FLOOR = ("aa", "aa_median_diff_bound")
#: the pairs the run's floor (AA_FLOOR) is for: the most common count of the project's A/Bs
FLOOR_REFERENCE_PAIRS = 12
#: the pair counts C00 also writes the floor for, up to its A/A's own (variant
#: FLOOR_PAIRS_VARIANT.format(m), metric AA_FLOOR[1]): an A/B of n block pairs is judged
#: against the largest m <= n written
FLOOR_PAIRS = (4, 6, 8, 12, 16, 24, 32, 36, 48)
FLOOR_PAIRS_VARIANT = "aa/pairs_{}"
#: the same bound from blocks of the first calls only: does the floor depend on block length?
AA_FLOOR_SHORT = ("aa/short_blocks", "aa_median_diff_bound")
#: ms of one A/A block (calls per block x A's median call): the block length the floor is for
AA_BLOCK = ("aa", "block_duration")
#: calls per block of the short-block floor (at most the A/A's own calls per block)
AA_SHORT_INNER = 10
#: under a budget an A/A block lasts at most about this long (ms), down to AA_SHORT_INNER
#: calls: its fixed 30 calls a block made the A/A's first rounds (AA_MIN_BLOCKS pairs, 360
#: calls) 48-57 s of a 133-159 ms step on an H100 (ViT-B/16, an input-bound ResNet-50),
#: where a step of a few ms spends 1-2 s. A floor from shorter blocks is wider, so it errs
#: towards calling a difference noise, never towards a finding; the block length it is for
#: is written beside it (AA_BLOCK)
AA_BUDGET_BLOCK_MS = 500.0


def aa_inner_under_budget(step_ms: float, aa_inner: int) -> int:
    """Calls per A/A block under a budget, for a step of ``step_ms``: the configured
    ``aa_inner``, or fewer where that many calls would last beyond AA_BUDGET_BLOCK_MS (never
    fewer than AA_SHORT_INNER, nor more than configured)."""
    if step_ms <= 0:
        return aa_inner
    fit = int(AA_BUDGET_BLOCK_MS // step_ms)
    return min(aa_inner, max(AA_SHORT_INNER, fit))


AA_DIFFERENCE, PLANTED_DIFFERENCE = f"{AA_B}_minus_{AA_A}", f"{PLANTED_2X}_minus_{PLANTED_A}"
#: peer timers on the same step (``step_latency``) and their medians over the helper's
PEER_HELPER, PEER_TIMER, PEER_DO_BENCH = "peer/helper", "peer/timer", "peer/do_bench"
PEER_TIMER_OVER_HELPER = "peer/timer_over_helper"
PEER_DO_BENCH_OVER_HELPER = "peer/do_bench_over_helper"
RATIO = "ratio"

# ------------------------------------------------------------------ what the views read

#: every line of the table: (measurement, variant, metric, statistic, key); ``key`` names
#: the number in :func:`floors` (the ledger's field), None for a line only the table shows
LINES = (
    ("clock tick (perf_counter, measured)", CLOCK, TICK, "median", "clock_tick_ms"),
    ("clock resolution (declared)", CLOCK, RESOLUTION_DECLARED, "value", None),
    ("one synchronize, idle device", SYNC_IDLE, SYNC_COST, "median", "sync_ms"),
    ("empty call through the helper (timer floor)", EMPTY_CALL, CALL_LATENCY, "median",
     "empty_call_ms"),
    ("CUDA events: empty pair, device time", EVENTS_EMPTY_PAIR, EVENT_ELAPSED, "median",
     "event_pair_ms"),
    ("CUDA events: host cost of recording a pair", EVENTS_RECORD_PAIR, HOST_RECORD_COST,
     "median", "event_record_ms"),
    ("fresh process: interpreter", PROCESS_INTERPRETER, PROCESS_WALL, "median",
     "process_interpreter_ms"),
    ("fresh process: + import torch", PROCESS_IMPORT_TORCH, PROCESS_WALL, "median",
     "process_import_torch_ms"),
    ("fresh process: + device init", PROCESS_DEVICE_INIT, PROCESS_WALL, "median",
     "process_device_init_ms"),
    ("reference step, unprofiled", PROFILER_UNPROFILED, STEP_LATENCY, "median", None),
    ("reference step, profiled", PROFILER_PROFILED, STEP_LATENCY, "median", None),
    ("profiler overhead", PROFILER_OVERHEAD, OVERHEAD_REL, "value", "profiler_overhead_pct"),
    ("A/A: B - A", AA_DIFFERENCE, "ab_effect", "value", None),
    ("A/A floor: 95% bound of |median paired block difference|", *AA_FLOOR, "value",
     "aa_floor_pct"),
    ("A/A floor, blocks of the first calls only", *AA_FLOOR_SHORT, "value", None),
    ("A/A block duration", *AA_BLOCK, "value", "aa_block_ms"),
    ("planted 2x: B - A", PLANTED_DIFFERENCE, "ab_effect", "value", None),
    ("planted 2x: relative", PLANTED_DIFFERENCE, "ab_effect_rel", "value", None),
    ("step: project helper", PEER_HELPER, STEP_LATENCY, "median", None),
    ("step: torch.utils.benchmark Timer", PEER_TIMER, STEP_LATENCY, "median", None),
    ("step: triton do_bench", PEER_DO_BENCH, STEP_LATENCY, "median", None),
    ("Timer / helper", PEER_TIMER_OVER_HELPER, RATIO, "value", "timer_over_helper"),
    ("do_bench / helper", PEER_DO_BENCH_OVER_HELPER, RATIO, "value", "do_bench_over_helper"),
)
#: (key, variant, metric, statistic) of the numbers :func:`floors` reads, in the table's order
FLOOR_ROWS = tuple((key, variant, metric, statistic)
                   for _, variant, metric, statistic, key in LINES if key)


def floors(frame: pd.DataFrame) -> dict[str, Any]:
    """The calibration's numbers by key (:data:`FLOOR_ROWS`); a Missing where not measured."""
    rows = frame[frame.experiment == EID]
    out: dict[str, Any] = {}
    for key, variant, metric, statistic in FLOOR_ROWS:
        v = pick(rows, variant, metric, statistic)
        out[key] = v if isinstance(v, Missing) else float(v)
    return out


# ------------------------------------------------------------------ table and figure


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Calibration: the harness's floors, the A/A floor, the planted check, peer timers.

    One line per measurement with its value and unit; A/B lines add the
    judgement (bootstrap interval, p, resolved). The A/A floor is the 95% upper
    bound of the statistic every A/B is judged by (the median paired block
    difference, % of A) when both sides are copies of the same step; it holds
    for blocks about as long as the A/A's (its block duration); the short-block
    line shows how much it grows for shorter blocks.
    """
    r = rows_of(EID, frame)
    records = []
    for label, variant, metric, statistic, _ in LINES:
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


#: the figure's left panel: (label, variant, metric), each a median in ms shown in µs
COST_BARS = (
    ("clock tick", CLOCK, TICK),
    ("idle synchronize", SYNC_IDLE, SYNC_COST),
    ("empty call (helper)", EMPTY_CALL, CALL_LATENCY),
    ("CUDA event pair", EVENTS_EMPTY_PAIR, EVENT_ELAPSED),
    ("event record (host)", EVENTS_RECORD_PAIR, HOST_RECORD_COST),
    ("process: interpreter", PROCESS_INTERPRETER, PROCESS_WALL),
    ("process: + torch", PROCESS_IMPORT_TORCH, PROCESS_WALL),
    ("process: + device", PROCESS_DEVICE_INIT, PROCESS_WALL),
)
#: the figure's right panel: each side of the two pairs, (variant, label, marker)
PAIR_SIDES = ((AA_A, "A/A: A", "o"), (AA_B, "A/A: B", "s"), (PLANTED_A, "planted: A", "^"),
              (PLANTED_2X, "planted: B = step twice", "v"))


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The harness's own floors (log µs) and the A/A pair beside the planted 2x pair."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import new_figure

    fig, (ax1, ax2) = new_figure(ENTRY, rows, ncols=2, width=11)
    _draw_costs(ax1, rows)
    _draw_pairs(ax2, rows, samples)
    return fig


def _draw_costs(ax, rows: pd.DataFrame) -> None:
    """What each instrument costs, one bar per :data:`COST_BARS` line, on a log µs axis."""
    import seaborn as sns
    from matplotlib.ticker import FuncFormatter

    from perflab.kit.figures import add_note

    labels, values, notes = [], [], []
    for label, variant, metric in COST_BARS:
        v = pick(rows, variant, metric)
        if isinstance(v, Missing):
            notes.append(f"{label}: {v}")
            continue
        labels.append(label)
        values.append(float(v) * 1e3)
    if values:
        sns.barplot(x=values, y=labels, ax=ax, color=sns.color_palette()[0])
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("median, µs (log scale)")
    ax.set_ylabel("")
    ax.set_title("what the instruments cost", fontsize=10)
    add_note(ax, notes, loc="upper right")


def _draw_pairs(ax, rows: pd.DataFrame, samples: pd.DataFrame) -> None:
    """The A/A pair's and the planted pair's block medians, block by block."""
    from matplotlib.ticker import FixedLocator

    from perflab.kit.figures import add_note

    s = samples[(samples.experiment == EID)
                & samples.variant.isin([variant for variant, _, _ in PAIR_SIDES])]
    if s.empty:
        add_note(ax, ["no samples of the A/A or planted pairs"], loc="upper left")
    else:
        blocks = s.groupby(["variant", "block"]).value.median().reset_index()
        for variant, label, marker in PAIR_SIDES:
            d = blocks[blocks.variant == variant]
            ax.plot(d.block, d.value, marker=marker, label=label)
        ax.set_xlabel("block (A and B alternate AB, BA, ...)")
        ax.set_ylabel("block median, ms per call")
        ax.xaxis.set_major_locator(FixedLocator(sorted(blocks.block.unique())))
        ax.legend(loc="best", fontsize=8)
    floor = pick(rows, *AA_FLOOR, "value")
    ax.set_title("A/A noise" + ("" if isinstance(floor, Missing)
                                else f" (floor {float(floor):.2f}%)") + " vs a planted 2x",
                 fontsize=10)
