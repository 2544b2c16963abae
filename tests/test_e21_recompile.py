"""E21 (recompilation): recompile counts from the compiler's counters, one run."""

from __future__ import annotations

import pytest
from claims_rows import case, rows
from experiments import one_value, pipeline_results

from perflab import experiments
from perflab.experiments import e21_recompile as e21_slice
from perflab.kit import tables


@pytest.fixture(scope="module")
def e21(pipeline_run, tiny_cfg):
    # the shared pipeline run's outputs (tests/shared_run.py): the experiment is not run again
    return pipeline_results(pipeline_run, tiny_cfg, "E21")


def test_only_the_fullgraph_break_is_not_ok(e21):
    rows, *_ = e21
    bad = rows[rows.status != "ok"]
    assert bad.variant.tolist() == ["fullgraph/data_dependent_branch"]
    assert bad.status.tolist() == ["error"]
    assert "fullgraph=True raised" in bad.reason.iloc[0]


def test_new_shapes_recompile_by_default_not_with_dynamic(e21):
    rows, _, contract, _ = e21
    batches = contract["params"]["batches"]
    # default: the first new shape recompiles (then with dynamic shapes)
    assert one_value(rows, f"shapes/default/batch_{batches[1]}", "graphs_compiled") >= 1
    assert one_value(rows, "shapes/default", "recompiles") >= 1
    # dynamic=True: one graph serves every batch size
    assert one_value(rows, "shapes/dynamic_true", "recompiles") == 0
    for b in batches[1:]:
        assert one_value(rows, f"shapes/dynamic_true/batch_{b}", "graphs_compiled") == 0
    # the recompile count is the sum of the per-call graph counts
    for v in ("shapes/default", "shapes/dynamic_true"):
        per_call = one_value(rows, v, "graphs_compiled") + sum(
            one_value(rows, f"{v}/batch_{b}", "graphs_compiled") for b in batches[1:])
        assert one_value(rows, v, "recompiles") == per_call - 1


def test_every_mode_ran_and_matches_eager(e21):
    rows, _, contract, _ = e21
    for mode in contract["params"]["modes"]:
        assert one_value(rows, f"mode/{mode}", "first_call") > 0
        assert one_value(rows, f"mode/{mode}", "max_abs_diff") < 1e-4
    diffs = rows[rows.metric == "max_abs_diff"]
    assert (diffs.value < 1e-4).all()


def test_graph_break_is_counted(e21):
    rows, *_ = e21
    assert one_value(rows, "graph_break/explain", "graph_breaks") >= 1
    assert one_value(rows, "graph_break/explain", "graphs") >= 2
    assert one_value(rows, "graph_break/compiled", "max_abs_diff") == 0


def test_table_and_figure(e21, tmp_path):
    rows, _, _, out = e21
    t = experiments.table("E21", rows)
    assert t.case.iloc[0] == "shapes/default"
    assert t.case.iloc[-2] == "fullgraph=True, data-dependent branch"
    assert t.graph_breaks.iloc[-2] == "error"
    assert not tables.format_table(t).empty
    png = experiments.make_figure("E21", out["csv"], out["samples"], tmp_path / "e21.png")
    assert png.stat().st_size > 0


# ------------------------------------------------------------------ the claims' cases
# C44, C45: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e21_rows(static=1, dynamic=0, raised=True, breaks=1, graphs=2, diff=1.8e-7):
    fullgraph = (("E21", e21_slice.FULLGRAPH_VARIANT, e21_slice.GRAPH_BREAK, "value", None, "error",
                  "fullgraph=True raised Unsupported") if raised else
                 ("E21", e21_slice.FULLGRAPH_VARIANT, e21_slice.GRAPH_BREAK, "value", 0.0))
    return rows(("E21", e21_slice.shapes_variant(e21_slice.DEFAULT_CASE), e21_slice.RECOMPILES,
                 "value", static),
                ("E21", e21_slice.shapes_variant(e21_slice.DYNAMIC_CASE), e21_slice.RECOMPILES,
                 "value", dynamic),
                ("E21", e21_slice.new_batch_variant(e21_slice.DEFAULT_CASE, 512),
                 e21_slice.NEW_SHAPE_FIRST_CALL, "value", 1995.0), fullgraph,
                ("E21", e21_slice.EXPLAIN_VARIANT, e21_slice.GRAPH_BREAKS, "value", breaks),
                ("E21", e21_slice.EXPLAIN_VARIANT, e21_slice.GRAPHS, "value", graphs),
                ("E21", e21_slice.BROKEN_COMPILED_VARIANT, e21_slice.MAX_ABS_DIFF, "value", diff))


case("C44", e21_rows, lambda: e21_rows(dynamic=1))
case("C45", e21_rows, lambda: e21_rows(raised=False))
