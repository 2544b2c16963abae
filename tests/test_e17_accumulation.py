"""E17 (gradient accumulation): the equivalence and the per-K bookkeeping in one run."""

from __future__ import annotations

import pytest
from claims_rows import case, rows
from experiments import (
    assert_cpu_scale_sets,
    assert_only_cuda_rows_unsupported,
    assert_round_robin_takes_the_warmup,
    one_value,
    pipeline_results,
    run_tiny,
)

from perflab import experiments
from perflab.core import io
from perflab.experiments import e17_accumulation as e17_slice
from perflab.kit import tables


@pytest.fixture(scope="module")
def e17(pipeline_run, tiny_cfg):
    # the shared pipeline run's outputs (tests/shared_run.py): the experiment is not run again
    return pipeline_results(pipeline_run, tiny_cfg, "E17")


def test_rows_obey_the_contract(e17):
    rows, samples, _, _ = e17
    assert_only_cuda_rows_unsupported("E17", rows, samples)


def test_accumulated_gradient_equals_the_full_batch_gradient(e17):
    rows, _, contract, _ = e17
    for k in contract["params"]["ks"]:
        if k == 1:
            assert not ((rows.variant == "k1") & (rows.metric == "grad_max_abs_diff")).any()
            continue
        diff = one_value(rows, f"k{k}", "grad_max_abs_diff")
        scale = one_value(rows, f"k{k}", "grad_scale")
        assert 0 < scale <= one_value(rows, f"k{k}", "grad_max")
        assert diff <= 1e-4 * scale  # roundoff, not a different gradient


def test_per_k_bookkeeping(e17):
    rows, _, contract, _ = e17
    batch = contract["params"]["batch"]
    base = one_value(rows, "k1", "step_latency", "median")
    peak = one_value(rows, "k1", "peak_rss", "max")
    for k in contract["params"]["ks"]:
        v = f"k{k}"
        assert one_value(rows, v, "micro_batch") == batch // k
        med = one_value(rows, v, "step_latency", "median")
        assert one_value(rows, v, "time_pct_of_k1") == pytest.approx(100 * med / base)
        assert one_value(rows, v, "memory_pct_of_k1") == pytest.approx(
            100 * one_value(rows, v, "peak_rss", "max") / peak)
        # examples/s counts the whole batch of one optimizer step, whatever K
        assert one_value(rows, v, "throughput", "median") == pytest.approx(batch * 1e3 / med)
        assert rows[rows.variant == v].input_shape.iloc[0].startswith(f"[{batch // k},")


def test_a_k_that_does_not_divide_the_batch_is_an_error_row(tiny_cfg, tmp_path):
    import copy

    cfg = copy.deepcopy(tiny_cfg)
    cfg["experiments"]["E17"].update(batch=12, ks=[1, 5], blocks=1, inner=1, peak_calls=1)
    _, out = run_tiny(cfg, "E17", tmp_path)  # its own run: a K that does not divide
    rows = io.read_results([out["csv"]])
    k5 = rows[rows.variant == "k5"]
    assert set(k5.status) == {"error"} and k5.reason.str.contains("does not divide").all()
    assert one_value(rows, "k1", "time_pct_of_k1") == pytest.approx(100)


def test_table_and_figure(e17, tmp_path):
    rows, _, contract, out = e17
    t = experiments.table("E17", rows)
    assert list(t.K) == contract["params"]["ks"]
    assert t.grad_max_abs_diff.iloc[0] == ""
    assert not tables.format_table(t).empty
    png = experiments.make_figure("E17", out["csv"], out["samples"], tmp_path / "e17.png")
    assert png.stat().st_size > 0


def test_the_ledger_carries_the_worst_equivalence(e17):
    from perflab.views import ledger

    rows, _, _, out = e17
    table, md = ledger.build([out["csv"]])
    line = table[(table.section == "correctness")
                 & (table.field == "accumulated_grad_max_abs_diff")]
    worst = rows[rows.metric == "grad_max_abs_diff"].value.max()
    assert float(line.value.iloc[0]) == pytest.approx(worst)
    assert f"accumulated grad max {worst:.1e}" in md


def test_the_round_robin_takes_the_experiments_warmup(tiny_cfg, tmp_path, monkeypatch):
    """The CPU scale's 5 warmup calls of each K, not timing's 30 (its steps are 0.15-0.17 s
    at batch 1024, and 30 outnumbered the 4 x 4 timed calls)."""
    assert_round_robin_takes_the_warmup(tiny_cfg, "E17", tmp_path, monkeypatch, batch=8,
                                        ks=[1, 2], blocks=1, inner=1, peak_calls=1)
    assert_cpu_scale_sets("E17", "warmup", 5, 30)


# ------------------------------------------------------------------ the claims' cases
# C38: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e17_rows(diff=2e-9, peak_k8=838.5):
    specs = [("E17", e17_slice.k_variant(k), e17_slice.GRAD_MAX_ABS_DIFF, "value", diff)
             for k in (2, 4, 8)]
    specs.append(("E17", e17_slice.k_variant(2), e17_slice.GRAD_SCALE, "value", 1.7e-3))
    specs += [("E17", e17_slice.k_variant(k), "peak_allocated", "max", p)
              for k, p in ((1, 1249.1), (2, 1054.2), (8, peak_k8))]
    return rows(*specs)


case("C38", e17_rows, lambda: e17_rows(peak_k8=1300.0))
