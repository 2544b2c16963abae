"""E21, recompilation (the companion article): does a compiled function recompile when it
meets a new input shape, does dynamic=True avoid it, what do the compile modes cost, and does
fullgraph=True turn a graph break into an error? Measured by scripts/e21_recompile.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.experiments.e19_compile_ab import FIRST_CALL, FORWARD_LATENCY, MAX_ABS_DIFF
from perflab.kit.claims import COUNTS_EXACT, Absent, Part, claim, holds, judge_parts
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "E21",
    "recompile",
    "Recompilation: new shapes, dynamic=True, modes, and a graph break under fullgraph",
    "interventions",
    workloads=("pointwise",),
    cpu_behaviour="same; reduce-overhead and max-autotune without CUDA graphs",
    report_section="21 · Article: recompilation",
)

#: its parameters (config key ``experiments.E21``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
# the pointwise chain at this depth: short compiles, same lesson
depth:
  description: depth of the pointwise chain compiled here (short compiles)
  type: integer
  minimum: 1
  default: 8
# the first is the base shape, then each new one once
batches:
  description: batch sizes called in order; the first is the base shape
  type: array
  items: {type: integer, minimum: 1}
  minItems: 2
  default: [256, 512, 128, 384]
repeats: {type: integer, minimum: 1, default: 50}
modes:
  description: torch.compile modes timed at the base shape
  type: array
  items: {type: string, enum: [default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs]}
  minItems: 1
  default: [default, reduce-overhead, max-autotune]
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'depth': 2, 'batches': [8, 16, 4], 'repeats': 3}}

# ------------------------------------------------------------------ the names its script writes

#: the shape cases: shapes/<dynamic> at the base batch, then shapes/<dynamic>/batch_<B> at
#: each new batch size; dynamic=None (the default) and dynamic=True
SHAPES_PREFIX, NEW_BATCH_PREFIX = "shapes/", "batch_"
DEFAULT_CASE, DYNAMIC_CASE = "default", "dynamic_true"
#: each shape case and the torch.compile(dynamic=...) it runs
DYNAMIC_CASES = ((DEFAULT_CASE, None), (DYNAMIC_CASE, True))
#: the mode cases: mode/<mode> at the base batch
MODE_PREFIX = "mode/"
#: fullgraph=True on a data-dependent branch, torch._dynamo.explain on it without
#: fullgraph, and the compiled pieces against eager
FULLGRAPH_VARIANT = "fullgraph/data_dependent_branch"
EXPLAIN_VARIANT, BROKEN_COMPILED_VARIANT = "graph_break/explain", "graph_break/compiled"

#: every case: its first call (FIRST_CALL; NEW_SHAPE_FIRST_CALL at a new batch), the graphs
#: that call compiled, the cache hits it got, the steady state (FORWARD_LATENCY) and
#: MAX_ABS_DIFF against eager; the base batch of a shape case: the recompiles over all
GRAPHS_COMPILED, FXGRAPH_CACHE_HIT = "graphs_compiled", "fxgraph_cache_hit"
NEW_SHAPE_FIRST_CALL, RECOMPILES = "new_shape_first_call", "recompiles"
#: the fullgraph case: the graph break (an error row when fullgraph raised); explain:
#: its graph-break and graph counts
GRAPH_BREAK, GRAPH_BREAKS, GRAPHS = "graph_break", "graph_breaks", "graphs"


def shapes_variant(case: str) -> str:
    return f"{SHAPES_PREFIX}{case}"


def new_batch_variant(case: str, batch: int) -> str:
    return f"{shapes_variant(case)}/{NEW_BATCH_PREFIX}{batch}"


def mode_variant(mode: str) -> str:
    return f"{MODE_PREFIX}{mode}"


def is_new_shape(variant: str) -> bool:
    return f"/{NEW_BATCH_PREFIX}" in variant


def _first_call_metric(variant: str) -> str:
    return NEW_SHAPE_FIRST_CALL if is_new_shape(variant) else FIRST_CALL


# ------------------------------------------------------------------ table and figure


def _cases(r: pd.DataFrame) -> list[str]:
    """The shape and mode cases, in the order they ran."""
    return [v for v in dict.fromkeys(r.variant) if v.startswith((SHAPES_PREFIX, MODE_PREFIX))]


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Recompilation: each case's first call, graphs compiled, steady state, correctness."""
    r = rows_of(ENTRY.eid, frame)
    records = []
    for v in _cases(r):
        new_shape = is_new_shape(v)
        records.append({
            "case": v,
            "first_call_ms": pick(r, v, _first_call_metric(v), "value"),
            "graphs_compiled": pick(r, v, GRAPHS_COMPILED, "value"),
            "steady_median_ms": pick(r, v, FORWARD_LATENCY),
            "recompiles": (pick(r, v, RECOMPILES, "value")
                           if v.startswith(SHAPES_PREFIX) and not new_shape else None),
            # a first call served from this job's cache (filled by an earlier case)
            "fxgraph_cache_hits": pick(r, v, FXGRAPH_CACHE_HIT, "value") if not new_shape else None,
            "max_abs_diff": pick(r, v, MAX_ABS_DIFF, "value"),
        })
    records.append({"case": "fullgraph=True, data-dependent branch",
                    "graph_breaks": pick(r, FULLGRAPH_VARIANT, GRAPH_BREAK, "value")})
    records.append({"case": "explain (no fullgraph)",
                    "graph_breaks": pick(r, EXPLAIN_VARIANT, GRAPH_BREAKS, "value"),
                    "graphs_compiled": pick(r, EXPLAIN_VARIANT, GRAPHS, "value"),
                    "max_abs_diff": pick(r, BROKEN_COMPILED_VARIANT, MAX_ABS_DIFF, "value")})
    return make_table(records, ["case", "first_call_ms", "graphs_compiled", "fxgraph_cache_hits",
                                "steady_median_ms", "recompiles", "graph_breaks",
                                "max_abs_diff"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Recompilation: first call of each case, graphs compiled written on each bar."""
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.kit.figures import add_note, log_if_wide, new_figure

    r = rows_of(ENTRY.eid, rows)
    fig, (ax,) = new_figure(ENTRY, r, width=10.0)
    values, labels, graphs = [], [], []
    notes = []
    for v in _cases(r):
        cell = pick(r, v, _first_call_metric(v), "value")
        if isinstance(cell, Missing):
            notes.append(f"{v}: {cell}")
            continue
        values.append(float(cell))
        labels.append(v)
        graphs.append(pick(r, v, GRAPHS_COMPILED, "value"))
    ax.barh(labels, values, color=sns.color_palette()[0])
    for i, (val, g) in enumerate(zip(values, graphs)):
        ax.text(val, i, f"  {g if isinstance(g, Missing) else int(g)} graph(s)", va="center",
                fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("first call at this shape / mode, ms")
    log_if_wide(ax, values, axis="x")
    brk = pick(r, EXPLAIN_VARIANT, GRAPH_BREAKS, "value")
    brk = brk if isinstance(brk, Missing) else int(brk)
    ax.set_title(f"without fullgraph, a data-dependent branch: {brk} graph break(s)", fontsize=9)
    add_note(ax, notes)
    return fig


# ------------------------------------------------------------------ claims

#: C44: the default compile must recompile at least this often over the new shapes;
#: dynamic=True not at all
MIN_RECOMPILES = 1
#: C45: the default compile splits the branch: at least this many breaks and graphs
MIN_BREAKS, MIN_GRAPHS = 1, 2
#: C45: ... and its pieces give eager's output within this (abs; the chain ends in a sigmoid)
AGREES_WITH_EAGER_WITHIN = 1e-4


@claim("C44", "E21", "a compiled function recompiles on a new input shape; dynamic=True does not",
       chapter="article: new shapes may trigger recompilation; dynamic shapes avoid it",
       tolerance=f"default: >= {MIN_RECOMPILES} recompile over the new shapes; dynamic=True: 0",
       exact=COUNTS_EXACT)
def _recompiles(ev):
    static = ev.value(ENTRY.eid, shapes_variant(DEFAULT_CASE), RECOMPILES, "value")
    dynamic = ev.value(ENTRY.eid, shapes_variant(DYNAMIC_CASE), RECOMPILES, "value")
    new = ev.variants(ENTRY.eid, f"{shapes_variant(DEFAULT_CASE)}/{NEW_BATCH_PREFIX}",
                      NEW_SHAPE_FIRST_CALL, "value")
    worst = max(new.values()) if new else float("nan")
    return holds(static >= MIN_RECOMPILES and dynamic == 0,
                 f"default recompiled {static:.0f}x (slowest new-shape first call {worst:.0f} ms), "
                 f"dynamic=True {dynamic:.0f}x",
                 mechanism="the default compile did not specialize on the shape here"
                 if static < MIN_RECOMPILES else "dynamic=True still recompiled")


@claim("C45", "E21", "fullgraph=True turns a graph break into an error",
       chapter="article: fullgraph=True fails on a graph break instead of splitting the graph",
       tolerance=f"fullgraph=True raises on the data-dependent branch; the default compile "
                 f"splits it (>= {MIN_BREAKS} graph break, >= {MIN_GRAPHS} graphs) and agrees "
                 f"with eager (max |diff| < {AGREES_WITH_EAGER_WITHIN:g})", exact=COUNTS_EXACT)
def _fullgraph(ev):
    eid = ENTRY.eid
    sel = ev.rows[(ev.rows.experiment == eid) & (ev.rows.variant == FULLGRAPH_VARIANT)]
    if sel.empty:
        raise Absent("no fullgraph row" + ("" if ev.has(eid) else f" ({eid} not run)"))
    raised = (sel.status == "error").any()
    breaks = ev.value(eid, EXPLAIN_VARIANT, GRAPH_BREAKS, "value")
    graphs = ev.value(eid, EXPLAIN_VARIANT, GRAPHS, "value")
    diff = ev.value(eid, BROKEN_COMPILED_VARIANT, MAX_ABS_DIFF, "value")
    reason = str(sel.iloc[0]["reason"])[:80] if raised else "no error"
    return judge_parts(
        Part(raised, reason, name="fullgraph=True raises",
             mechanism="fullgraph=True compiled the branch without error"),
        Part(breaks >= MIN_BREAKS and graphs >= MIN_GRAPHS,
             f"default compile: {breaks:.0f} break(s), {graphs:.0f} graphs",
             name="the default compile splits the graph",
             mechanism="the default compile did not break the graph"),
        Part(diff < AGREES_WITH_EAGER_WITHIN, f"max |diff| vs eager {diff:.2e}",
             name="the pieces agree with eager",
             mechanism=f"the split graph's output differs from eager by more than "
                       f"{AGREES_WITH_EAGER_WITHIN:g}"))
