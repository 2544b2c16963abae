"""E19 (compile A/B): the contract, the pair's bookkeeping and the correctness column, one run.

No test asserts a speedup: on a shared 2-core CPU at the tiny contract it is noise.
"""

from __future__ import annotations

import pytest
from claims_rows import ab_rows, case, with_floor
from experiments import ab_sizes, one_value, pipeline_results

from perflab import experiments
from perflab.core import io
from perflab.experiments import e19_compile_ab as e19_slice
from perflab.kit import tables


@pytest.fixture(scope="module")
def e19(pipeline_run, tiny_cfg):
    # the shared pipeline run's outputs (tests/shared_run.py): the experiment is not run again
    return pipeline_results(pipeline_run, tiny_cfg, "E19")


def test_rows_obey_the_contract_and_say_why_not(e19):
    rows, samples, _, _ = e19
    assert (rows.experiment == "E19").all()
    assert list(samples.columns) == io.SAMPLE_COLUMNS
    bad = rows[rows.status != "ok"]
    # only the CPU's peak-memory rows may be missing, each with its reason
    assert set(bad.metric) <= {"peak_allocated"}
    assert (bad.reason.str.len() > 0).all()


def test_both_workloads_pair_eager_with_compiled(e19):
    rows, samples, contract, _ = e19
    p = contract["params"]
    for name in ("mlp", "pointwise"):
        e, c = f"{name}/eager", f"{name}/compiled"
        assert set(rows[rows.variant == e].workload) == {name}
        # the compiled side says it was compiled, in its rows and its samples
        assert set(rows[rows.variant == c].execution) == {"compiled"}
        assert set(samples[samples.variant == c].execution) == {"compiled"}
        assert set(rows[rows.variant == e].execution) == {"eager"}
        a = one_value(rows, e, "forward_latency", "median")
        b = one_value(rows, c, "forward_latency", "median")
        assert one_value(rows, f"{name}/compiled_vs_eager", "speedup", "median") == \
            pytest.approx(a / b)
        n, per = ab_sizes(rows, f"{c}_minus_{e}", p["blocks"], p["inner"])
        calls = samples[(samples.variant == c) & (samples.metric == "forward_latency")]
        assert len(calls) == n * per
        # each block's median goes to the samples file too (the block spread)
        assert len(samples[(samples.variant == c) & (samples.metric == "block_median")]) == n
        # the first compiled call includes compilation: it exceeds every steady call
        first = one_value(rows, c, "first_call")
        assert first > one_value(rows, c, "forward_latency", "max")


def test_compiled_output_within_tolerance(e19):
    rows, *_ = e19
    for name in ("mlp", "pointwise"):
        assert 0 <= one_value(rows, f"{name}/compiled_vs_eager", "max_abs_diff") < 1e-4


def test_table_and_figure(e19, tmp_path):
    rows, _, _, out = e19
    t = experiments.table("E19", rows)
    assert t.workload.tolist() == ["mlp", "pointwise"]
    assert t.speedup_x.iloc[1] == pytest.approx(
        one_value(rows, "pointwise/compiled_vs_eager", "speedup", "median"))
    assert not tables.format_table(t).empty
    png = experiments.make_figure("E19", out["csv"], out["samples"], tmp_path / "e19.png")
    assert png.stat().st_size > 0


def test_ledger_cites_the_compile_correctness(e19):
    from perflab.views import ledger

    rows, _, _, out = e19
    book, md = ledger.build([out["csv"]])
    got = book[book.field == "compiled_pointwise_max_abs_diff"]
    assert len(got) == 1
    assert float(got.value.iloc[0]) == one_value(rows, "pointwise/compiled_vs_eager",
                                                 "max_abs_diff")
    assert got.source.iloc[0] == "E19 pointwise/compiled_vs_eager max_abs_diff"
    assert "torch.compile forward vs eager" in md


# ------------------------------------------------------------------ the claims' cases
# C40: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e19_rows(mlp=0.988, pointwise=12.4, floor_pct=1.0):
    specs = []
    for prefix, speedup in ((e19_slice.MLP, mlp), (e19_slice.POINTWISE, pointwise)):
        specs.append(("E19", e19_slice.comparison_variant(prefix), e19_slice.SPEEDUP, "median",
                      speedup))
        specs += ab_rows("E19", e19_slice.difference_variant(prefix), 100 * (1 / speedup - 1),
                         metric=e19_slice.FORWARD_LATENCY, base_ms=3.0)
    return with_floor(floor_pct, *specs)


case("C40", e19_rows, lambda: e19_rows(mlp=1.389),
     lambda: e19_rows(mlp=1.05, floor_pct=6.0))  # 4.8% faster: 4.3 points from the band's edge
