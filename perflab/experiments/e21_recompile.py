"""E21: the read side of scripts/e21_recompile.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import Absent, claim, holds
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E21",
        "recompile",
        "Recompilation: new shapes, dynamic=True, modes, and a graph break under fullgraph",
        "interventions",
        workloads=("pointwise",),
        cpu_behaviour="same; reduce-overhead and max-autotune without CUDA graphs",
    report_section='21 · Article: recompilation',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Recompilation: each case's first call, graphs compiled, steady state, correctness."""
    r = rows_of("E21", frame)
    records = []
    for v in dict.fromkeys(r.variant):
        if v.startswith("shapes/") or v.startswith("mode/"):
            new_shape = "/batch_" in v
            records.append({
                "case": v,
                "first_call_ms": pick(r, v, "new_shape_first_call" if new_shape else "first_call",
                                      "value"),
                "graphs_compiled": pick(r, v, "graphs_compiled", "value"),
                "steady_median_ms": pick(r, v, "forward_latency"),
                "recompiles": (pick(r, v, "recompiles", "value")
                               if v.startswith("shapes/") and not new_shape else None),
                # a first call served from this job's cache (filled by an earlier case)
                "fxgraph_cache_hits": (pick(r, v, "fxgraph_cache_hit", "value")
                                       if not new_shape else None),
                "max_abs_diff": pick(r, v, "max_abs_diff", "value"),
            })
    records.append({"case": "fullgraph=True, data-dependent branch",
                    "graph_breaks": pick(r, "fullgraph/data_dependent_branch", "graph_break",
                                         "value")})
    records.append({"case": "explain (no fullgraph)",
                    "graph_breaks": pick(r, "graph_break/explain", "graph_breaks", "value"),
                    "graphs_compiled": pick(r, "graph_break/explain", "graphs", "value"),
                    "max_abs_diff": pick(r, "graph_break/compiled", "max_abs_diff", "value")})
    return make_table(records, ["case", "first_call_ms", "graphs_compiled", "fxgraph_cache_hits",
                            "steady_median_ms", "recompiles", "graph_breaks", "max_abs_diff"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Recompilation: first call of each case, graphs compiled written on each bar."""
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.figures import add_note, log_if_wide, new_figure
    r = rows[rows.experiment == "E21"]
    fig, (ax,) = new_figure("E21", r, width=10.0)
    cases = [v for v in dict.fromkeys(r.variant) if v.startswith(("shapes/", "mode/"))]
    values, labels, graphs = [], [], []
    notes = []
    for v in cases:
        metric = "new_shape_first_call" if "/batch_" in v else "first_call"
        cell = pick(r, v, metric, "value")
        if isinstance(cell, Missing):
            notes.append(f"{v}: {cell}")
            continue
        values.append(float(cell))
        labels.append(v)
        graphs.append(pick(r, v, "graphs_compiled", "value"))
    ax.barh(labels, values, color=sns.color_palette()[0])
    for i, (val, g) in enumerate(zip(values, graphs)):
        ax.text(val, i, f"  {g if isinstance(g, Missing) else int(g)} graph(s)", va="center",
                fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("first call at this shape / mode, ms")
    log_if_wide(ax, values, axis="x")
    brk = pick(r, "graph_break/explain", "graph_breaks", "value")
    brk = brk if isinstance(brk, Missing) else int(brk)
    ax.set_title(f"without fullgraph, a data-dependent branch: {brk} graph break(s)", fontsize=9)
    add_note(ax, notes)
    return fig


@claim("C44", "E21", "a compiled function recompiles on a new input shape; dynamic=True does not",
       chapter="article: new shapes may trigger recompilation; dynamic shapes avoid it",
       tolerance="default: >= 1 recompile over the new shapes; dynamic=True: 0")
def _recompiles(ev):
    static = ev.value("E21", "shapes/default", "recompiles", "value")
    dynamic = ev.value("E21", "shapes/dynamic_true", "recompiles", "value")
    new = ev.variants("E21", "shapes/default/batch_", "new_shape_first_call", "value")
    worst = max(new.values()) if new else float("nan")
    return holds(static >= 1 and dynamic == 0,
                 f"default recompiled {static:.0f}x (slowest new-shape first call {worst:.0f} ms), "
                 f"dynamic=True {dynamic:.0f}x",
                 mechanism="the default compile did not specialize on the shape here"
                 if static < 1 else "dynamic=True still recompiled")


@claim("C45", "E21", "fullgraph=True turns a graph break into an error",
       chapter="article: fullgraph=True fails on a graph break instead of splitting the graph",
       tolerance="fullgraph=True raises on the data-dependent branch; the default compile "
                 "splits it (>= 1 graph break, >= 2 graphs) and agrees with eager")
def _fullgraph(ev):
    sel = ev.rows[(ev.rows.experiment == "E21")
                  & (ev.rows.variant == "fullgraph/data_dependent_branch")]
    if sel.empty:
        raise Absent("no fullgraph row" + ("" if ev.has("E21") else " (E21 not run)"))
    raised = (sel.status == "error").any()
    breaks = ev.value("E21", "graph_break/explain", "graph_breaks", "value")
    graphs = ev.value("E21", "graph_break/explain", "graphs", "value")
    reason = str(sel.iloc[0]["reason"])[:80] if raised else "no error"
    return holds(raised and breaks >= 1 and graphs >= 2,
                 f"{reason}; default compile: {breaks:.0f} break(s), {graphs:.0f} graphs",
                 mechanism="fullgraph=True compiled the branch without error"
                 if not raised else "the default compile did not break the graph")
