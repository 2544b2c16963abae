"""E11, the accumulating branch: does a monitoring loop that keeps a graph-connected tensor
grow memory linearly, while the same loop under ``no_grad`` or with ``.item()`` stays flat,
and does ``empty_cache`` free any of it? Measured by scripts/e11_retained_leak.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.kit.claims import BYTES_EXACT, Absent, Evidence, claim, holds
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "E11",
    "retained_leak",
    "The accumulating branch: a retained reference grows memory linearly",
    "memory",
    cpu_behaviour="RSS instead of allocated (no allocator counter; empty_cache n/a); "
    "the retained graph's saved-tensor bytes are counted on both devices",
    report_section="10 · The accumulating branch",
)

#: its parameters (config key ``experiments.E11``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
iterations: {type: integer, minimum: 2, default: 60}
every:
  description: read the memory every this many iterations
  type: integer
  minimum: 1
  default: 10
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'iterations': 60, 'every': 10}}

# ------------------------------------------------------------------ the names its script writes

#: the three monitoring loops: the tensor kept (graph and all), under no_grad, as .item()
RETAINED_GRAPH, NO_GRAD, ITEM = "retained_graph", "no_grad", "item"
LOOPS = (RETAINED_GRAPH, NO_GRAD, ITEM)
ALL = "all"  # the comparison across the three loops

#: the process-level instrument: allocated (CUDA) or the process's RSS (CPU)
ALLOCATED, RSS = "allocated", "rss"
RETAINED_GRAPH_BYTES = "retained_graph_bytes"  # saved-for-backward bytes the kept list reaches
RETAINED_GRAPH_GROWTH = "retained_graph_growth"
MONITORED_METRIC = "monitored_metric"
MONITORED_METRIC_MAX_ABS_DIFF = "monitored_metric_max_abs_diff"


def mark_prefix(loop: str) -> str:
    """What the variants of ``loop``'s readings every ``every`` iterations start with."""
    return f"{loop}/i"


def mark_variant(loop: str, iteration: int) -> str:
    """The variant of ``loop``'s readings after ``iteration``."""
    return f"{mark_prefix(loop)}{iteration:02d}"


def final_variant(loop: str) -> str:
    return f"{loop}/final"


def after_empty_cache_variant(loop: str) -> str:
    return f"{loop}/after_empty_cache"


def growth_metric(instrument: str) -> str:
    """The least-squares slope of ``instrument`` over the per-iteration readings."""
    return f"{instrument}_growth"


def median_increment_metric(instrument: str) -> str:
    """The median iteration-to-iteration change of ``instrument`` (robust to one jump)."""
    return f"{instrument}_median_increment"


def _marks(r: pd.DataFrame, loop: str) -> list[str]:
    """The "iNN" marks of ``loop``'s readings, in order."""
    return sorted({v.removeprefix(f"{loop}/") for v in r.variant.unique()
                   if v.startswith(mark_prefix(loop))})


# ------------------------------------------------------------------ table


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """The leak: memory every N iterations, final, after empty_cache; growth; the metric."""
    r = rows_of("E11", frame)
    measured = ((r.metric == ALLOCATED) & (r.status == "ok")).any()
    instrument = ALLOCATED if measured else RSS
    records = []
    for loop in LOOPS:
        marks = _marks(r, loop)
        for metric, label in ((instrument, f"{instrument} MiB"),
                              (RETAINED_GRAPH_BYTES, "retained graph MiB")):
            rec = {"variant": loop, "instrument": label}
            rec.update({m: pick(r, f"{loop}/{m}", metric, "value") for m in marks})
            rec["final"] = pick(r, final_variant(loop), metric, "value")
            if metric == instrument:
                rec["after_empty_cache"] = pick(r, after_empty_cache_variant(loop), ALLOCATED,
                                                "value")
                rec["growth_mib_per_iter"] = pick(r, loop, growth_metric(instrument), "value")
                rec["median_step_mib"] = pick(r, loop, median_increment_metric(instrument),
                                              "value")
                rec["monitored_metric"] = pick(r, loop, MONITORED_METRIC, "value")
            else:
                rec["growth_mib_per_iter"] = pick(r, loop, RETAINED_GRAPH_GROWTH, "value")
            records.append(rec)
    records.append({"variant": ALL, "instrument": "monitored metric, max |difference|",
                    "monitored_metric": pick(r, ALL, MONITORED_METRIC_MAX_ABS_DIFF, "value")})
    return make_table(records)


# ------------------------------------------------------------------ figure

#: the figure's legend for each loop
LOOP_LABELS = {RETAINED_GRAPH: "kept.append(metric) (graph kept)",
               NO_GRAD: "torch.no_grad()", ITEM: "metric.item()"}


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The leak plot: memory after every iteration, three variants; the retained graph's bytes."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import add_note, new_figure, num

    r = rows[rows.experiment == "E11"]
    fig, (ax, ax2) = new_figure(ENTRY, r, ncols=2, width=12.0)
    s = samples[samples.experiment == "E11"]
    instrument = s.metric.iloc[0] if not s.empty else ALLOCATED
    notes = []
    for loop, label in LOOP_LABELS.items():
        d = s[s.variant == loop]
        if d.empty:
            notes.append(f"{loop}: no samples (not run)")
            continue
        # the median iteration-to-iteration step: a one-off heap trim does not set it
        growth = num(pick(r, loop, median_increment_metric(instrument), "value"))
        ax.plot(d["index"], d.value, lw=2,
                label=f"{label}: {growth:+.3f} MiB/iter (median step)" if growth is not None
                else label)
        after = pick(r, after_empty_cache_variant(loop), ALLOCATED, "value")
        if not isinstance(after, Missing):
            ax.plot([d["index"].max()], [after], "x", ms=9, color="black",
                    label="after empty_cache()" if loop == RETAINED_GRAPH else None)
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"{instrument} MiB" + (" (process RSS)" if instrument == RSS else ""))
    ax.set_title("memory after every iteration")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)
    add_note(ax, notes)
    for loop, label in LOOP_LABELS.items():
        marks = sorted(int(m.removeprefix("i")) for m in _marks(r, loop))
        ys = [num(pick(r, mark_variant(loop, m), RETAINED_GRAPH_BYTES, "value")) for m in marks]
        if marks and all(y is not None for y in ys):
            ax2.plot(marks, ys, "o-", label=label)
    ax2.set_xlabel("iteration")
    ax2.set_ylabel("MiB saved for backward, reachable from the kept list")
    ax2.set_title("the retained graph, counted tensor by tensor")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(loc="upper left", fontsize=8)
    return fig


# ------------------------------------------------------------------ claims

#: C27: the retained loop ends above this multiple of where it started
RETAINED_GROWTH_MIN_X = 2
#: C27: ... growing steadily: its smallest step at least this fraction of its largest
STEADY_STEP_MIN_RATIO = 0.5
#: C27: the repaired loops end within this share (of the larger of their start and the
#: retained loop's growth) of where they started
REPAIRED_DRIFT_MAX_PCT = 5
#: C28: after empty_cache, allocated above the repaired loop still holds at least this
#: share of the retained graph's saved-tensor bytes
RETAINED_AFTER_EMPTY_CACHE_MIN_PCT = 90


def _leak_series(ev: Evidence, loop: str) -> list[float]:
    prefix = mark_prefix(loop)
    got = sorted((int(v.rsplit("/i", 1)[1]), x)
                 for v, x in ev.variants("E11", prefix, ALLOCATED, "value").items())
    if not got:  # a CPU has no live-tensor counter: the bytes the kept graphs hold
        got = sorted((int(v.rsplit("/i", 1)[1]), x) for v, x in
                     ev.variants("E11", prefix, RETAINED_GRAPH_BYTES, "value").items())
    if len(got) < 2:
        raise Absent("no allocation series for " + loop
                     + ("" if ev.has("E11") else " (E11 not run)"))
    return [x for _, x in got]


@claim("C27", "E11",
       "a retained graph-connected metric grows memory linearly; no_grad and .item() stay flat",
       chapter="164 -> 2400 MiB over 60 iterations; 124 and 162 MiB flat",
       tolerance=f"retained grows > {RETAINED_GROWTH_MIN_X}x; the repairs within "
                 f"{REPAIRED_DRIFT_MAX_PCT}% of their start", exact=BYTES_EXACT)
def _retained_leak(ev):
    kept = _leak_series(ev, RETAINED_GRAPH)
    flat = [_leak_series(ev, loop) for loop in (NO_GRAD, ITEM)]
    grows = kept[-1] > RETAINED_GROWTH_MIN_X * kept[0]
    steps = [b - a for a, b in zip(kept, kept[1:])]
    linear = min(steps) > STEADY_STEP_MIN_RATIO * max(steps) if steps else False
    drift = REPAIRED_DRIFT_MAX_PCT / 100
    stays = all(abs(s[-1] - s[0]) <= drift * max(s[0], kept[-1] - kept[0]) for s in flat)
    return holds(grows and linear and stays,
                 f"retained {kept[0]:.1f} -> {kept[-1]:.1f} MiB; no_grad {flat[0][0]:.1f} -> "
                 f"{flat[0][-1]:.1f}; item {flat[1][0]:.1f} -> {flat[1][-1]:.1f}",
                 mechanism="the retained loop does not grow steadily" if not (grows and linear)
                 else "a repaired loop still grows")


@claim("C28", "E11", "empty_cache frees nothing of the retained graph",
       chapter="2400.3 MiB before and after",
       tolerance=f"after empty_cache, allocated above the no_grad loop's >= "
                 f"{RETAINED_AFTER_EMPTY_CACHE_MIN_PCT}% of the retained graph's saved-tensor "
                 "bytes", exact=BYTES_EXACT)
def _empty_cache_no_fix(ev):
    # allocated counts live blocks and empty_cache releases only free cached ones, so
    # "allocated did not move" cannot fail; what can is that the bytes still held after it
    # are the retained graph's, by a second instrument (the graph's own tensor accounting)
    after = ev.value("E11", after_empty_cache_variant(RETAINED_GRAPH), ALLOCATED, "value")
    final = ev.value("E11", final_variant(RETAINED_GRAPH), ALLOCATED, "value")
    repaired = ev.value("E11", final_variant(NO_GRAD), ALLOCATED, "value")
    graph = ev.value("E11", final_variant(RETAINED_GRAPH), RETAINED_GRAPH_BYTES, "value")
    held = after - repaired
    return holds(held >= RETAINED_AFTER_EMPTY_CACHE_MIN_PCT / 100 * graph,
                 f"{final:.1f} -> {after:.1f} MiB across empty_cache; {held:.1f} MiB above the "
                 f"no_grad loop vs the retained graph's {graph:.1f} MiB",
                 mechanism="after empty_cache the allocator no longer holds the retained graph's "
                           "bytes: they were not live device tensors")
