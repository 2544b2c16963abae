"""E13 (sync tax): the contract, the A/B bookkeeping and the running-mean check in one run.

No test asserts a time or that the tax is positive: on a shared 2-core CPU the
tax is expected to be ~0 and its sign is noise.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from claims_rows import ab_rows, case, rows, with_floor
from experiments import ab_sizes, assert_outputs_obey_the_contract, one_value, pipeline_results

from perflab import experiments
from perflab.core.names import SAMPLING_DECISION, SAMPLING_FIXED_PAIRS
from perflab.experiments import e13_sync_tax as e13_slice
from perflab.instruments import ab, profiling, stats
from perflab.kit import tables

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "e13_sync_tax.py"


@pytest.fixture(scope="module")
def e13(pipeline_run, tiny_cfg):
    """One E13 run on the tiny contract: (rows, samples, contract, outputs)."""
    # the shared pipeline run's outputs (tests/shared_run.py): the experiment is not run again
    return pipeline_results(pipeline_run, tiny_cfg, "E13")


def test_outputs_obey_the_contract(e13):
    rows, samples, _, out = e13
    assert_outputs_obey_the_contract("E13", rows, samples, out)


def test_expected_variants_and_metrics(e13):
    rows, *_ = e13
    for prefix in ("controlled", "small"):
        for side in ("none", "item_every"):
            v = f"{prefix}/{side}"
            for metric in ("step_latency", "block_median", "throughput",
                           "throughput_pct_of_none"):
                assert ((rows.variant == v) & (rows.metric == metric)).any(), (v, metric)
        for metric in ("tax", "tax_rel", "block_spread", "difference_resolved", "block_pair_diff"):
            assert ((rows.variant == f"{prefix}/tax") & (rows.metric == metric)).any()
    # the two pairs measure different workloads, and each row says which
    assert set(rows[rows.variant == "controlled/none"].workload) == {"mlp"}
    assert set(rows[rows.variant == "small/none"].workload) == {"small_mlp"}
    # every row states where its window and sync boundary are
    assert (rows.window.str.len() > 0).all() and (rows.sync_boundary.str.len() > 0).all()


def test_cpu_window_says_the_tax_is_expected_near_zero(e13):
    rows, *_ = e13
    tax = rows[(rows.variant == "controlled/tax")
               & ~rows.metric.isin([SAMPLING_DECISION, SAMPLING_FIXED_PAIRS])]
    assert not tax.empty and tax.window.str.contains("expected to be ~0").all()


def test_block_counts_match_params(e13):
    rows, samples, contract, _ = e13
    p = contract["params"]
    k = min(10, p["inner"])
    calls = max(1, p["inner"] // k)
    for prefix in ("controlled", "small"):
        n, per = ab_sizes(rows, f"{prefix}/tax", p["blocks"], calls)
        for side in ("none", "item_every"):
            v = f"{prefix}/{side}"
            blocks = samples[(samples.variant == v) & (samples.metric == "block_median")]
            assert sorted(blocks.block) == list(range(n))
            each = samples[(samples.variant == v) & (samples.metric == "step_latency")]
            assert len(each) == n * per
            assert each.groupby("block").size().tolist() == [per] * n
            med = rows[(rows.variant == v) & (rows.metric == "block_median")]
            assert set(med.n) == {n}


def test_difference_spread_and_throughput_are_consistent(e13):
    rows, samples, contract, _ = e13
    batch = {"controlled": contract["workloads"]["mlp"]["params"]["batch"],
             "small": contract["workloads"]["small_mlp"]["params"]["batch"]}
    for prefix in ("controlled", "small"):
        a = one_value(rows, f"{prefix}/none", "step_latency", "median")
        b = one_value(rows, f"{prefix}/item_every", "step_latency", "median")
        tax = one_value(rows, f"{prefix}/tax", "tax")
        assert tax == pytest.approx(b - a)
        assert one_value(rows, f"{prefix}/tax", "tax_rel") == pytest.approx(100 * (b - a) / a)
        widths = [one_value(rows, f"{prefix}/{s}", "block_median", "max")
                  - one_value(rows, f"{prefix}/{s}", "block_median", "min")
                  for s in ("none", "item_every")]
        spread = one_value(rows, f"{prefix}/tax", "block_spread")
        assert spread == pytest.approx(max(widths))
        # resolved is the one judgement of every A/B (stats.judge on the paired block medians)
        blocks = {side: samples[(samples.variant == f"{prefix}/{side}")
                                & (samples.metric == "block_median")].sort_values("block").value
                  for side in ("none", "item_every")}
        j = stats.judge(blocks["none"].tolist(), blocks["item_every"].tolist())
        assert one_value(rows, f"{prefix}/tax", "difference_resolved") == float(j.resolved)
        assert one_value(rows, f"{prefix}/tax", "ab_resolved") == float(j.resolved)
        assert one_value(rows, f"{prefix}/tax", "ab_p") == pytest.approx(j.p)
        assert one_value(rows, f"{prefix}/tax", "ab_effect") == pytest.approx(j.effect)
        for side, med in (("none", a), ("item_every", b)):
            assert one_value(rows, f"{prefix}/{side}", "throughput") == pytest.approx(
                batch[prefix] * 1e3 / med)
        assert one_value(rows, f"{prefix}/none", "throughput_pct_of_none") == \
            pytest.approx(100.0)
        # the per-sample median in the rows is the median of the samples file
        each = samples[(samples.variant == f"{prefix}/none")
                       & (samples.metric == "step_latency")]
        assert a == pytest.approx(each.value.median())


def test_running_means_agree(e13):
    rows, _, contract, _ = e13
    every = contract["params"]["log_every"]
    means = [one_value(rows, v, "mean_loss") for v in
             ("running_mean/item_every_step", f"running_mean/every_{every}",
              "running_mean/once")]
    assert all(math.isfinite(m) for m in means)
    diff = one_value(rows, "running_mean", "max_abs_diff")
    assert diff == pytest.approx(max(means) - min(means), abs=1e-12)
    assert diff < 1e-4 * abs(means[0])


def test_table_and_figure(e13, tmp_path):
    rows, _, _, out = e13
    t = experiments.table("E13", rows)
    assert t.measurement.tolist()[:2] == ["controlled step", "small fast step"]
    assert t.difference_ms.iloc[0] == pytest.approx(one_value(rows, "controlled/tax", "tax"))
    assert t.measurement.str.startswith("running mean").sum() == 4
    assert not tables.format_table(t).empty
    png = experiments.make_figure("E13", out["csv"], out["samples"], tmp_path / "e13.png")
    assert png.stat().st_size > 0


# ------------------------------------------------------------------ the helpers


def test_free_running_calls_the_step_k_times():
    calls = []
    profiling.free_running(lambda: calls.append(1), 7)()
    assert len(calls) == 7
    with pytest.raises(ValueError):
        profiling.free_running(lambda: None, 0)


def test_paired_cost_keeps_the_block_spread_and_uses_the_one_judgement():
    a_blk = [1.0, 1.1, 1.0, 1.05, 0.98, 1.02, 1.0, 1.04]
    b_blk = [v + 0.5 + 0.01 * i for i, v in enumerate(a_blk)]
    pc = ab.paired_cost([1.0, 1.0, 1.1], [1.5, 1.6, 1.5], a_blk, b_blk)
    assert pc.diff == pytest.approx(0.5)
    assert pc.rel == pytest.approx(0.5)
    assert pc.noise == pytest.approx(0.12)
    assert pc.block_diffs == pytest.approx([b - a for a, b in zip(a_blk, b_blk)])
    assert pc.resolved and pc.judgement == stats.judge(a_blk, b_blk)
    # two blocks cannot resolve anything (Wilcoxon's smallest p is 0.5)
    two = ab.paired_cost([1.0, 1.0, 1.1], [1.5, 1.6, 1.5], [1.0, 1.1], [1.5, 1.55])
    assert not two.resolved and two.judgement.p == pytest.approx(0.5)
    # given block differences replace b_i - a_i
    given = ab.paired_cost([1.0], [1.05], a_blk, b_blk, block_diffs=[0.0] * 8)
    assert given.block_diffs == [0.0] * 8 and not given.resolved


# ------------------------------------------------------------------ the claims' cases
# C30, C31, C32: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e13_rows(prefix, rel, floor_pct=0.5, p=0.001):
    v = e13_slice.tax_variant(prefix)
    return with_floor(floor_pct, *ab_rows("E13", v, rel, metric=e13_slice.TAX, base_ms=16.0, p=p))


for _cid, _prefix in (("C30", e13_slice.CONTROLLED), ("C31", e13_slice.SMALL)):
    case(_cid, lambda p=_prefix: e13_rows(p, 2.7),
         lambda p=_prefix: e13_rows(p, 9.9, floor_pct=1.0),  # decided above the 5% bound
         lambda p=_prefix: e13_rows(p, 2.7, floor_pct=3.0))  # a real tax? not beyond the floor


def e13_mean(agree):
    return rows(("E13", e13_slice.RUNNING_MEAN, e13_slice.AGREE, "value", agree),
                ("E13", e13_slice.RUNNING_MEAN, e13_slice.MAX_ABS_DIFF, "value",
                 1e-7 if agree else 1e-3))


case("C32", lambda: e13_mean(1.0), lambda: e13_mean(0.0))
