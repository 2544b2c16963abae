"""E08 · Latency, throughput, peak memory: which batch size answers which question?

``scripts/e08_batch_sweep.py`` times the controlled training step at each swept batch
size, each in a fresh process of its own (ms/step, examples/s, ms/example, peak memory),
then every size once more, together in one process (the interleaved job: a balanced round
robin of blocks), and :mod:`perflab.experiments.e08_batch_sweep.sweep` aggregates them with the sweep's three answers
(lowest-latency batch, highest-throughput batch, largest batch that fits). This module names
those rows and reads them back: the table, the figure and claims C19-C22 (C19-C21 compare
sizes by the interleaved series where the run has them).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from perflab.core.names import STEP_LATENCY, THROUGHPUT
from perflab.core.rows import find

# the run-wide between-process floor, and the variant names it reads of E08's jobs
from perflab.experiments.floors import (  # noqa: F401 (re-exported for E08's readers)
    BATCH,
    REPLICATE,
    SAME_STEP,
    run_process_floor,
)
from perflab.kit.claims import (
    BYTES_EXACT,
    MIN_INTERVAL_SAMPLES,
    Absent,
    Evidence,
    Part,
    Series,
    against_process_floor,
    claim,
    holds,
    interval_part,
    judge_parts,
    own_interval,
    pct,
)
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, numbered_variants, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

EID = "E08"

ENTRY = Experiment(
    EID,
    "batch_sweep",
    "Latency, throughput and peak memory across batch sizes",
    "localize",
    cpu_behaviour="peak RSS (VmHWM) of each batch size's fresh process instead of "
    "allocator counters; a scaled batch range",
    report_section="7 · Latency, throughput and peak memory",
    claims_read_samples=True,
    own_rules=True,
)

#: its parameters (config key ``experiments.E08``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
batches:
  description: batch sizes swept, each in its own fresh process
  type: array
  items: {type: integer, minimum: 1}
  minItems: 1
  default: [32, 64, 128, 256, 512, 1024, 2048]
repeats:
  description: synchronized repeats per batch size
  type: integer
  minimum: 2
  default: 200
# further fresh processes of each replicated batch (~7 s each on the H200), for E08's own
# between-process floor; which: the N largest swept (replicate_largest; 0: the controlled
# batch). They decided C19's top step before the interleaved job, which now does, so
# none by default: the run's floor still comes from its jobs that time the controlled
# step (C00, E01, E03, E04, E14 and this sweep's batch of it), at no extra job
replicates:
  description: >-
    further fresh processes of each replicated batch size's contract
    (replicate_largest); the controlled batch's are pooled with the run's other
    jobs that time the controlled step into the between-process A/A that
    comparisons of separate processes are judged against, the largest batches'
    give their own floor to comparisons between them; 0 = none beyond those jobs
  type: integer
  minimum: 0
  default: 0
replicate_largest:
  description: >-
    the batch sizes replicated: the N largest swept; 0 = the controlled batch
    when swept, else the smallest
  type: integer
  minimum: 0
  default: 2
# one more job: every batch size in one process, 10 round-robin blocks of 10 synchronized
# calls and a free-running stretch of 10 steps each (~10 s on the H200): C19-C21 compare
# sizes by these series, measured together, not by separate processes (whose medians of
# one step moved 2.95-3.45 ms across one H200 run's jobs: an 84% floor in another)
interleaved_blocks:
  description: >-
    one more job times every batch size in one process, in this many
    round-robin blocks (balanced order): C19-C21 compare batch sizes by these
    series, measured together; 0 = no such job (the claims then judge the
    separate processes against the between-process floor), and fewer than 3
    blocks give no interval (the same fallback)
  type: integer
  minimum: 0
  default: 10
interleaved_inner:
  description: >-
    per block and batch size, this many synchronized calls, then a
    free-running stretch of as many steps
  type: integer
  minimum: 1
  default: 10
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'batches': [4, 8], 'repeats': 5, 'replicates': 1, 'replicate_largest': 0, 'interleaved_blocks': 3, 'interleaved_inner': 2}}

#: batch size B is the variant ``batch_<B>``: ``step_latency``, ``throughput`` (examples/s,
#: from FREE_RUNNING_STEP) and LATENCY_PER_EXAMPLE, with the peak memory of its process (MiB)
LATENCY_PER_EXAMPLE = "latency_per_example"
#: ms per step of free-running stretches (one sync at each end): the rate throughput is from
FREE_RUNNING_STEP = "free_running_step"
#: the peaks: the caching allocator's on CUDA, the process's resident set (VmHWM) on the CPU
PEAK_ALLOCATED, PEAK_RESERVED = "peak_allocated", "peak_reserved"
CUDA_PEAKS = (PEAK_ALLOCATED, PEAK_RESERVED)
CPU_PEAK = "peak_rss"
#: the sweep's three answers, each a variant whose metric BATCH_SIZE holds the batch size
LOWEST_LATENCY = "lowest_latency"
HIGHEST_THROUGHPUT = "highest_throughput"
LARGEST_THAT_FITS = "largest_that_fits"
BATCH_SIZE = "batch_size"

#: the floor's rows, variant ``between_process/<metric>`` for step_latency and throughput:
#: PROCESS_FLOOR, the 95% prediction bound of the relative gap between two fresh processes
#: of one contract (perflab.instruments.stats.process_floor_pct), and PROCESS_GAP_MAX, the largest gap
#: seen among them (both %)
BETWEEN_PROCESS = "between_process"
PROCESS_FLOOR, PROCESS_GAP_MAX = "process_floor", "process_gap_max"
#: the statistics a between-process floor is measured for (each judged by its own)
FLOOR_METRICS = (STEP_LATENCY, THROUGHPUT)
#: ``between_process/replicates`` JOB_WALL: seconds the replicate jobs ran (their
#: provenance's wall_s, summed: interpreter start and imports not included)
REPLICATES, JOB_WALL = f"{BETWEEN_PROCESS}/replicates", "job_wall"


#: the interleaved job: every batch size in one process, in a balanced round robin of blocks
#: (each block: INTERLEAVED_INNER-many synchronized calls, then a free-running stretch of as
#: many steps), so the comparisons C19-C21 make between batch sizes are of series measured
#: together, not of separate processes. Batch B's rows are the variant ``interleaved/batch_<B>``
#: (step_latency, FREE_RUNNING_STEP, throughput); its job is batch 0 in sweep's (batch,
#: replicate) keys, named INTERLEAVED
INTERLEAVED = "interleaved"
INTERLEAVED_JOB = (0, 0)


def batch_variant(batch: int | str) -> str:
    """The variant of batch size ``batch``."""
    return f"{BATCH}{batch}"


def batch_of(variant: str) -> int:
    """The batch size of a ``batch_<B>`` variant."""
    return int(variant.removeprefix(BATCH))


def interleaved_variant(batch: int) -> str:
    """The variant of batch size ``batch`` in the interleaved job."""
    return f"{INTERLEAVED}/{batch_variant(batch)}"


def replicate_variant(batch: int, replicate: int) -> str:
    """The variant of replicate ``replicate`` (1, 2, ...) of batch size ``batch``."""
    return f"{REPLICATE}{replicate}/{batch_variant(batch)}"


def job_variant(batch: int, replicate: int = 0) -> str:
    """The variant one E08 job writes: its batch size's, or (replicate >= 1) a replicate's;
    the interleaved job (batch 0) writes one per batch size and is named INTERLEAVED."""
    if (batch, replicate) == INTERLEAVED_JOB:
        return INTERLEAVED
    return replicate_variant(batch, replicate) if replicate else batch_variant(batch)


def floor_variant(metric: str) -> str:
    """The variant of the between-process floor of ``metric`` (step_latency, throughput)."""
    return f"{BETWEEN_PROCESS}/{metric}"


def replicates_in(r: pd.DataFrame) -> list[tuple[int, int, str]]:
    """(batch, replicate, variant) of each replicate in E08's rows, in replicate order."""
    found = []
    for v in r.variant.unique():
        if v.startswith(REPLICATE):
            k, _, b = v.removeprefix(REPLICATE).partition("/")
            found.append((batch_of(b), int(k), v))
    return sorted(found, key=lambda x: (x[1], x[0]))


def process_floor_of(frame: pd.DataFrame, metric: str = STEP_LATENCY,
                     field: str = "value") -> Any:
    """The between-process floor of ``metric`` (%) in a run's rows (``field="n"``: over how
    many processes), or its :class:`Missing`."""
    return pick(rows_of(EID, frame), floor_variant(metric), PROCESS_FLOOR, "value", field=field)


def _peak_metrics(r: pd.DataFrame) -> tuple[bool, bool]:
    """(allocator peaks measured, process peak RSS present) in E08's rows."""
    rss = (r.metric == CPU_PEAK).any()
    alloc = (r[r.metric == PEAK_ALLOCATED].status == "ok").any() or not rss
    return alloc, rss


#: the table's answer lines: (variant, label, the column that decided it)
ANSWER_LINES = (
    (LOWEST_LATENCY, "lowest-latency batch", "median_ms"),
    (HIGHEST_THROUGHPUT, "highest-throughput batch", "examples_per_s"),
    (LARGEST_THAT_FITS, "largest batch that fits", None),
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Batch sweep: the chapter's columns per batch size, then the sweep's three answers.

    Peak memory is the allocator's peak allocated / reserved on CUDA and the
    process's peak RSS (VmHWM) on the CPU; examples/s is from free-running
    stretches (a training loop's rate; runs before it divided the batch by the
    synchronized per-call median, a row's sync boundary says which); each
    answer row names its batch size and repeats the number that decided it.
    The ``interleaved_*`` columns, where the run has the interleaved job, are
    every size's median and examples/s measured together in one process: the
    series the claims compare sizes by.
    """
    r = rows_of(EID, frame)
    sizes = numbered_variants(r, BATCH)
    alloc, rss = _peak_metrics(r)
    mem = ([("peak_alloc_mib", PEAK_ALLOCATED), ("peak_resv_mib", PEAK_RESERVED)]
           if alloc else []) + ([("peak_rss_mib", CPU_PEAK)] if rss else [])
    together = r.variant.str.startswith(f"{INTERLEAVED}/").any()
    columns = ["batch", "median_ms", "iqr_ms", "examples_per_s", *(c for c, _ in mem),
               "per_example_ms",
               *(("interleaved_median_ms", "interleaved_examples_per_s") if together else ()),
               "answer"]

    def cells(v: str) -> dict[str, Any]:
        rec = {"median_ms": pick(r, v), "iqr_ms": pick(r, v, statistic="iqr"),
               "examples_per_s": pick(r, v, "throughput")}
        rec.update({c: pick(r, v, m, "value") for c, m in mem})
        rec["per_example_ms"] = pick(r, v, LATENCY_PER_EXAMPLE)
        return rec

    def interleaved_cells(b: int) -> dict[str, Any]:
        if not together:
            return {}
        v = interleaved_variant(b)
        return {"interleaved_median_ms": pick(r, v),
                "interleaved_examples_per_s": pick(r, v, "throughput")}

    records = [{"batch": batch_of(v), **cells(v), **interleaved_cells(batch_of(v)), "answer": ""}
               for v in sizes]
    records += [{"batch": b, **cells(v), "answer": f"replicate {k} (a further process)"}
                for b, k, v in replicates_in(r)]
    for variant, label, decided_by in ANSWER_LINES:
        b = pick(r, variant, BATCH_SIZE, "value")
        rec: dict[str, Any] = {"batch": b if isinstance(b, Missing) else int(b), "answer": label}
        if not isinstance(b, Missing) and decided_by:
            rec[decided_by] = cells(batch_variant(int(b)))[decided_by]
        records.append(rec)
    floors = _floor_lines(r)
    from perflab.experiments import process_peers

    run_floor, how = run_process_floor(frame, process_peers())
    if run_floor is not None:  # the floor the claims use: the run's jobs of the controlled step
        floors.append({"batch": "", "answer": f"between-process floor the claims use (95% "
                       f"bound, {how})", "floor_pct": run_floor})
    return make_table(records + floors, columns + (["floor_pct", "max_gap_pct"] if floors else []))


def _floor_lines(r: pd.DataFrame) -> list[dict[str, Any]]:
    """E08's own between-process floor of each statistic (over its replicates), with the
    largest gap seen (none without replicates)."""
    out = []
    replicated = sorted({b for b, _, _ in replicates_in(r)})
    for metric, label in ((STEP_LATENCY, "median ms"), ("throughput", "examples/s")):
        floor = find(r, floor_variant(metric), PROCESS_FLOOR, "value")
        if isinstance(floor, Missing) and floor.status in ("not run", "unsupported"):
            continue
        n = "" if isinstance(floor, Missing) else f", {int(floor['n'])} processes"
        out.append({"batch": replicated[0] if len(replicated) == 1 else "",
                    "answer": f"between-process floor, {label} (95% bound{n})",
                    "floor_pct": pick(r, floor_variant(metric), PROCESS_FLOOR, "value"),
                    "max_gap_pct": pick(r, floor_variant(metric), PROCESS_GAP_MAX, "value")})
    return out


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The controlled training step swept over batch sizes (log2 axis), each batch size
    measured in its own fresh process: median ms per step with p25..p75 error bars, examples
    per second (dashed, where the run has it: every size measured together in the
    interleaved job, the series the claims compare sizes by), and peak memory (peak allocated and reserved on CUDA, the process's peak RSS
    on the CPU), each panel marking its answer (lowest-latency batch, highest-throughput
    batch, largest batch that fits); a batch size that ran out of memory is labelled ``oom``
    instead of drawn. Hollow markers, when configured: the replicates, further fresh
    processes of the replicated batch sizes' contracts, with E08's own between-process
    floor in the legend; the claims judge a comparison between two replicated sizes by it,
    and pool the controlled batch's replicates with the run's other jobs of that step.
    """
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import new_figure

    r = rows[rows.experiment == EID]
    shapes = [s for s in r.input_shape.unique() if s]
    title_rows = r.copy()
    if len(shapes) > 1:  # the title names the swept range, not the first batch's shape
        title_rows["input_shape"] = f"{shapes[0]} … {shapes[-1]}"
    fig, axes = new_figure(ENTRY, title_rows, ncols=3, width=14.0, height=4.8)
    sizes = sorted(batch_of(v) for v in r.variant.unique() if v.startswith(BATCH))
    alloc, rss = _peak_metrics(r)
    memory = ([("peak allocated", PEAK_ALLOCATED), ("peak reserved", PEAK_RESERVED)]
              if alloc else []) + ([("peak RSS (VmHWM, whole process)", CPU_PEAK)] if rss
                                   else [])
    panels = [
        (axes[0], "ms per step (median, p25..p75)", [("median", STEP_LATENCY, "median")],
         LOWEST_LATENCY, "lowest latency"),
        (axes[1], "examples/s", [("examples/s", "throughput", "median")],
         HIGHEST_THROUGHPUT, "highest throughput"),
        (axes[2], "peak MiB" + (" (CPU: process peak RSS)" if rss and not alloc else ""),
         [(label, m, "value") for label, m in memory], LARGEST_THAT_FITS,
         "largest that fits"),
    ]
    notes: list[str] = []
    for ax, ylabel, series, answer, answer_label in panels:
        notes += _draw_panel(ax, r, sizes, series, answer, answer_label,
                             note_missing=ax is axes[0])
        ax.set_ylabel(ylabel)
    for ax, metric in zip(axes, FLOOR_METRICS):
        _draw_replicates(ax, r, metric)
        _draw_interleaved(ax, r, sizes, metric)
    if not sizes:
        notes.append("no batch size has rows")
    if notes:  # why a batch size is missing, under the panels (not over the curves)
        fig.supxlabel("\n".join(textwrap.fill(n, 170) for n in dict.fromkeys(notes)),
                      x=0.01, ha="left", fontsize=8, color="#a35f00")
    return fig


def _draw_interleaved(ax, r: pd.DataFrame, sizes: list[int], metric: str) -> None:
    """The interleaved job's medians of ``metric`` (every size in one process), dashed."""
    got = [(b, pick(r, interleaved_variant(b), metric)) for b in sizes]
    got = [(b, float(x)) for b, x in got if not isinstance(x, Missing)]
    if got:
        ax.plot(*zip(*got), ls="--", marker=".", color="#555555",
                label="interleaved, every size in one process (the claims' series)")
        ax.legend(loc="best", fontsize=8)


def _draw_replicates(ax, r: pd.DataFrame, metric: str) -> None:
    """The replicates' medians of ``metric`` as hollow markers, the floor in their label."""
    xs, ys = [], []
    for b, _, v in replicates_in(r):
        cell = pick(r, v, metric)
        if not isinstance(cell, Missing):
            xs.append(b)
            ys.append(float(cell))
    if not xs:
        return
    floor = process_floor_of(r, metric)
    label = (f"replicates (between-process floor {floor:.1f}%)"
             if not isinstance(floor, Missing) else f"replicates (floor: {floor.status})")
    ax.scatter(xs, ys, facecolors="none", edgecolors="#222222", s=45, zorder=3, label=label)
    ax.legend(loc="best", fontsize=8)


def _draw_panel(ax, r: pd.DataFrame, sizes: list[int], series: list[tuple[str, str, str]],
                answer: str, answer_label: str, *, note_missing: bool) -> list[str]:
    """One panel: each (label, metric, statistic) over the batch sizes, and its answer.

    Returns the notes on batch sizes that did not run (when ``note_missing``).
    """
    import seaborn as sns

    from perflab.kit.figures import bar_cell, log2_x

    for i, (label, metric, statistic) in enumerate(series):
        xs, ys = [], []
        for b in sizes:
            cell = pick(r, batch_variant(b), metric, statistic)
            if isinstance(cell, Missing):
                continue
            xs.append(b)
            ys.append(float(cell))
            if metric == STEP_LATENCY:
                bar = bar_cell(r, batch_variant(b))
                if not isinstance(bar, Missing):
                    ax.errorbar(b, bar[0], yerr=[[bar[1]], [bar[2]]], fmt="none",
                                ecolor="#222222", capsize=3, lw=1)
        if xs:
            ax.plot(xs, ys, marker="os^"[i % 3], label=label if len(series) > 1 else None,
                    color=sns.color_palette()[i])
    notes = []
    # batch sizes that did not run: their status at their place
    for b in sizes:
        cell = pick(r, batch_variant(b))
        if isinstance(cell, Missing):
            ax.text(b, 0.03, cell.status, transform=ax.get_xaxis_transform(), rotation=90,
                    ha="center", va="bottom", fontsize=8, color="#a35f00")
            if note_missing:
                notes.append(textwrap.shorten(f"batch {b}: {cell}", 300))
    chosen = pick(r, answer, BATCH_SIZE, "value")
    if isinstance(chosen, Missing):
        ax.set_title(f"{answer_label}: {chosen.status}", fontsize=9)
    else:
        b = int(chosen)
        ax.axvline(b, color="#c0392b", lw=1.2, ls="--", label=f"{answer_label}: B = {b}")
        ax.set_title(f"{answer_label}: B = {b}", fontsize=9)
    if sizes:
        # every swept size on the axis, the ones that did not run (labelled) too
        log2_x(ax, sizes)
    ax.set_xlabel("batch size B (log2)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    return notes


def _sweep(ev: Evidence, metric: str, statistic: str = "median") -> list[tuple[int, float]]:
    got = sorted((batch_of(v), x) for v, x in ev.variants(EID, BATCH, metric, statistic).items())
    if len(got) < 3:
        if not ev.has(EID):
            raise Absent(f"{EID} not run")
        raise Absent(f"fewer than three batch sizes with {metric}")
    return got


#: C19: throughput may dip by this % from one batch size to the next and still "rise"
THROUGHPUT_DIP_PCT = 5
#: C20: latency is flat when the third-smallest batch is within this % of the smallest
FLAT_LATENCY_PCT = 10
#: C22: peak memory barely moves when the second-largest batch is within this % of the
#: second-smallest (the smallest, when three batches are configured)
FLAT_PEAK_PCT = 10


#: how C19-C21 are decided: by the 95% interval of the interleaved job's series (every batch
#: size in one process, round robin), sizes compared as measured together; in a run without
#: them, each batch size is its own process, so C00's A/A (within one process) does not
#: bound their differences: the run's processes of one step do (run_process_floor), or
#: E08's replicates where both batch sizes compared were replicated (pair_floor)
BY_PROCESS_FLOOR = ("decided by the 95% block-bootstrap interval of the interleaved job's "
                    "series (every batch size in one process, in a balanced round robin); "
                    "in a run without them, against the run's between-process floor (each "
                    "batch size is its own process), or against E08's own floor of the "
                    "statistic where both batch sizes compared were replicated")
#: how a claim's text says its sizes were compared by the interleaved job
TOGETHER = "interleaved in one process"


def interleaved_series(ev: Evidence, metric: str, sizes) -> dict[int, Series] | None:
    """batch -> the interleaved job's series of ``metric`` (step_latency, or
    FREE_RUNNING_STEP for the rate) for each of ``sizes``; None when the run has not got all
    of them with enough samples for an interval (a run before the job, ``interleaved_blocks``
    0 or under 3, a size that did not fit beside the others): the claims then judge the
    separate processes."""
    keys = {b: (EID, interleaved_variant(b), metric) for b in sizes}
    for key in keys.values():
        x = ev.series(*key)
        if x is None or len(x) < MIN_INTERVAL_SAMPLES:
            return None
    return keys


def _rel_medians(group: np.ndarray) -> np.ndarray:
    """100 x (median of the second series / median of the first - 1), per resample."""
    m = np.median(group, axis=-1)
    return 100 * (m[:, 1] / m[:, 0] - 1)


def _rates(sizes) -> Callable[[np.ndarray], np.ndarray]:
    """The examples/s of each size per resample of their free-running series (ms/step):
    B / median ms per step, as the throughput rows are."""
    b = np.asarray(sizes, dtype=float)[None, :]
    return lambda group: 1e3 * b / np.median(group, axis=-1)


def pair_floor(ev, metric: str, b1: int, b2: int) -> tuple[float | None, str] | None:
    """The between-process floor (%, which processes) a comparison of batch ``b1``'s process
    with ``b2``'s is judged by when E08 replicated both: its own floor of ``metric``, the
    process-to-process spread measured at the sizes compared. A device-bound large batch
    does not vary between processes as the host-bound controlled step does, so the run's
    floor (the controlled step's processes) would bound it by another step's spread. None
    (the caller takes the run's floor) when either size was not replicated or the floor
    was not measured."""
    r = rows_of(EID, ev.rows)
    replicated = {b for b, _, _ in replicates_in(r)}
    if not {b1, b2} <= replicated:
        return None
    floor = find(r, floor_variant(metric), PROCESS_FLOOR, "value")
    if isinstance(floor, Missing):
        return None
    sizes = ", ".join(map(str, sorted(replicated)))
    return float(floor["value"]), f"{EID}'s {metric} over {int(floor['n'])} processes of batch {sizes}"


@claim("C19", EID, "throughput rises with batch size (with diminishing returns)",
       chapter="2434 -> 30993 examples/s from batch 32 to 2048",
       tolerance="the largest batch above the smallest and above every other batch; each step "
       f"up within {THROUGHPUT_DIP_PCT}% or higher (every step decided); each part "
       f"{BY_PROCESS_FLOOR} of the throughput")
def _throughput_rises(ev):
    t = _sweep(ev, "throughput")
    il = interleaved_series(ev, FREE_RUNNING_STEP, [b for b, _ in t])
    if il is not None:
        return _throughput_rises_together(ev, il)
    (b0, x0), (bn, xn) = t[0], t[-1]
    best = max(t, key=lambda bt: bt[1])[0]
    rise = 100 * (xn / x0 - 1)
    lead = 100 * (xn / max(x for _, x in t[:-1]) - 1)  # < 0: another batch beats the largest
    runner_up = max(t[:-1], key=lambda bt: bt[1])[0]

    def floor(value, a, b, threshold=0.0):
        return against_process_floor(ev, value, threshold,
                                     floor=pair_floor(ev, "throughput", a, b))

    # every step judged against its own floor (two replicated sizes have their own, the
    # others the run's), so the smallest step being decided does not decide the rest: the
    # part reports a step that is decided below the dip, else one still undecided, else
    # the smallest
    steps = [(b1, b2, v, floor(v, b1, b2, -THROUGHPUT_DIP_PCT))
             for (b1, x1), (b2, x2) in zip(t, t[1:]) for v in [100 * (x2 / x1 - 1)]]
    down = [s for s in steps if s[2] < -THROUGHPUT_DIP_PCT and s[3][0]]
    open_ = [s for s in steps if not s[3][0]]
    b1, b2, step, step_decided = min(down or open_ or steps, key=lambda s: s[2])
    which = "smallest step up" if step == min(s[2] for s in steps) else "step up"

    return judge_parts(
        Part(rise > 0, f"{x0:.0f} -> {xn:.0f} examples/s (batch {b0} -> {bn}, {pct(rise)})",
             floor(rise, b0, bn), name="throughput rises",
             mechanism=f"batch {bn} runs fewer examples/s than batch {b0}"),
        Part(lead > 0, f"best at {best}: batch {bn} {pct(lead)} against the next best "
             f"({runner_up})",
             floor(lead, runner_up, bn), name="the largest batch is the fastest",
             mechanism=f"throughput peaks at batch {best} and falls beyond it"),
        Part(step >= -THROUGHPUT_DIP_PCT, f"{which} {pct(step)} ({b1} -> {b2})",
             step_decided, name="no step down",
             mechanism=f"throughput falls from batch {b1} to {b2}"))


def _throughput_rises_together(ev, il: dict[int, Series]):
    """C19 on the interleaved job's free-running stretches: each part by its own interval."""
    sizes = sorted(il)
    group = [[il[b] for b in sizes]]
    rate = _rates(sizes)
    x = {b: ev.value(EID, interleaved_variant(b), "throughput") for b in sizes}
    b0, bn = sizes[0], sizes[-1]
    runner_up = max(sizes[:-1], key=x.get)
    best = max(sizes, key=x.get)
    rise = 100 * (x[bn] / x[b0] - 1)
    lead = 100 * (x[bn] / x[runner_up] - 1)

    def step_of(j):
        return lambda g: 100 * (rate(g)[:, j + 1] / rate(g)[:, j] - 1)

    # every step judged by its own interval; the part reports a step decided below the
    # dip, else one still undecided, else the smallest
    steps = []
    for j, (b1, b2) in enumerate(zip(sizes, sizes[1:])):
        v = 100 * (x[b2] / x[b1] - 1)
        ok, decided = own_interval(ev, group, step_of(j), (-THROUGHPUT_DIP_PCT, math.inf))
        steps.append((b1, b2, v, decided, ok))
    down = [st for st in steps if st[3][0] and not st[4]]
    open_ = [st for st in steps if not st[3][0]]
    b1, b2, step, step_decided, step_ok = min(down or open_ or steps, key=lambda st: st[2])
    which = "smallest step up" if step == min(st[2] for st in steps) else "step up"
    return judge_parts(
        interval_part(ev, rise, f"{x[b0]:.0f} -> {x[bn]:.0f} examples/s (batch {b0} -> {bn}, "
                      f"{pct(rise)}, {TOGETHER})", group,
                      lambda g: 100 * (rate(g)[:, -1] / rate(g)[:, 0] - 1), (0, math.inf),
                      name="throughput rises",
                      mechanism=f"batch {bn} runs fewer examples/s than batch {b0}"),
        interval_part(ev, lead, f"best at {best}: batch {bn} {pct(lead)} against the next "
                      f"best ({runner_up})", group,
                      lambda g: 100 * (rate(g)[:, -1] / rate(g)[:, :-1].max(axis=1) - 1),
                      (0, math.inf), name="the largest batch is the fastest",
                      mechanism=f"throughput peaks at batch {best} and falls beyond it"),
        Part(step >= -THROUGHPUT_DIP_PCT if step_ok is None else step_ok,
             f"{which} {pct(step)} ({b1} -> {b2})", step_decided, name="no step down",
             mechanism=f"throughput falls from batch {b1} to {b2}"))


def _latency_rel(ev, lo: int, hi: int) -> tuple[dict[int, Series] | None, float, float, float]:
    """(the interleaved series of ``lo`` and ``hi``, or None; their medians (ms); the rise
    from ``lo`` to ``hi`` (%)): the interleaved job's medians where it has both, else the
    per-batch processes'."""
    il = interleaved_series(ev, STEP_LATENCY, {lo, hi})
    name = interleaved_variant if il is not None else batch_variant
    m_lo = ev.value(EID, name(lo), STEP_LATENCY)
    m_hi = ev.value(EID, name(hi), STEP_LATENCY)
    return il, m_lo, m_hi, 100 * (m_hi / m_lo - 1)


def _latency_part(ev, lo: int, hi: int, region, measured: str, mechanism: str,
                  threshold: float) -> Part:
    """A part on the latency rise from batch ``lo`` to ``hi``: by the interleaved series'
    own interval where the run has them, else against the between-process floor."""
    il, _, _, rel = _latency_rel(ev, lo, hi)
    if il is not None:
        return interval_part(ev, rel, f"{measured}, {TOGETHER}", [[il[lo], il[hi]]],
                             _rel_medians, region, mechanism=mechanism)
    decided = against_process_floor(ev, rel, threshold,
                                    floor=pair_floor(ev, STEP_LATENCY, lo, hi))
    return Part(region[0] < rel < region[1], measured, decided, mechanism)


@claim("C20", EID, "latency is flat below a knee: small batches cost about the same per step",
       chapter="13.150 / 13.123 / 13.226 ms at batch 32 / 64 / 128",
       tolerance=f"median at the third-smallest batch within {FLAT_LATENCY_PCT}% of the "
       f"smallest, {BY_PROCESS_FLOOR} of the median step latency")
def _latency_flat(ev):
    s = _sweep(ev, STEP_LATENCY)
    b0, b2 = s[0][0], s[2][0]
    _, m0, m2, rel = _latency_rel(ev, b0, b2)
    return judge_parts(_latency_part(
        ev, b0, b2, (-math.inf, FLAT_LATENCY_PCT),
        f"{m0:.3f} ms at {b0} vs {m2:.3f} ms at {b2} ({pct(rel)})",
        "latency grows with the batch from the smallest one: no fixed-cost floor (the step "
        "is compute-bound at every size)", FLAT_LATENCY_PCT))


@claim("C21", EID, "lowest latency, highest throughput and largest batch that fits are "
       "different answers",
       chapter="lowest latency at 64, highest throughput at 2048",
       tolerance="the highest-throughput batch's median step latency more than "
       f"{FLAT_LATENCY_PCT}% above the lowest-latency batch's (past the knee C20 puts "
       f"below it), {BY_PROCESS_FLOOR}; the largest batch that fits is reported, not "
       "judged (the sweep stops at its largest size)")
def _three_answers(ev):
    lo = int(ev.value(EID, LOWEST_LATENCY, BATCH_SIZE, "value"))
    hi = int(ev.value(EID, HIGHEST_THROUGHPUT, BATCH_SIZE, "value"))
    # falsifiable: the batch that answers "throughput" must cost latency beyond the knee,
    # else one batch size answers both questions (a fixed cost hides the batch)
    _, m_lo, m_hi, rel = _latency_rel(ev, lo, hi)
    return judge_parts(_latency_part(
        ev, lo, hi, (FLAT_LATENCY_PCT, math.inf),
        f"lowest latency at {lo} ({m_lo:.3f} ms), highest throughput at {hi} "
        f"({m_hi:.3f} ms, {pct(rel)})",
        f"the highest-throughput batch {hi} steps within {FLAT_LATENCY_PCT}% of the lowest "
        "latency: one batch size answers both questions", FLAT_LATENCY_PCT))


@claim("C22", EID, "peak memory barely moves with batch until large batch",
       chapter="814 -> 820 MiB from batch 64 to 1024, 928 at 2048",
       tolerance=f"peak at the second-largest batch within {FLAT_PEAK_PCT}% of the "
       "second-smallest (of the smallest when three batches are configured)",
       exact=BYTES_EXACT)
def _peak_flat(ev):
    try:
        p = _sweep(ev, PEAK_ALLOCATED, "value")
        what = "peak allocated"
    except Absent:  # no allocator counter (CPU): each batch size's fresh-process RSS
        p = _sweep(ev, CPU_PEAK, "value")
        what = "peak RSS"
    # the second-smallest and the second-largest are one batch when three are configured
    (b1, m1), (b2, m2) = (p[1] if len(p) > 3 else p[0]), p[-2]
    rel = (m2 - m1) / m1
    return holds(abs(rel) <= FLAT_PEAK_PCT / 100,
                 f"{what} {m1:.1f} MiB at {b1} vs {m2:.1f} MiB at {b2} ({pct(100 * rel)})",
                 mechanism="activations are a real share of the peak here: it grows with the batch")
