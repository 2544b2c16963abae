"""E16 (activation checkpointing): correctness, time and memory bookkeeping in one run."""

from __future__ import annotations

import pytest
import torch
from claims_rows import case, with_floor
from experiments import (
    assert_cpu_scale_sets,
    assert_only_cuda_rows_unsupported,
    assert_round_robin_takes_the_warmup,
    one_value,
    pipeline_results,
)

from perflab import experiments
from perflab.experiments import e16_checkpointing as e16_slice
from perflab.instruments import interventions, workloads
from perflab.kit import tables


@pytest.fixture(scope="module")
def e16(pipeline_run, tiny_cfg):
    # the shared pipeline run's outputs (tests/shared_run.py): the experiment is not run again
    return pipeline_results(pipeline_run, tiny_cfg, "E16")


def test_rows_obey_the_contract(e16):
    rows, samples, _, _ = e16
    assert_only_cuda_rows_unsupported("E16", rows, samples)


def test_checkpointed_loss_and_gradients_equal_normal(e16):
    rows, _, contract, _ = e16
    for b in contract["params"]["batches"]:
        normal = one_value(rows, f"b{b}/normal", "loss")
        assert one_value(rows, f"b{b}/checkpointed", "loss") == pytest.approx(normal, rel=1e-6)
        assert one_value(rows, f"b{b}/checkpointed", "grad_norm") == pytest.approx(
            one_value(rows, f"b{b}/normal", "grad_norm"), rel=1e-6)
        d = f"b{b}/checkpointed_vs_normal"
        assert one_value(rows, d, "grad_max_abs_diff") <= 1e-5 * one_value(rows, d,
                                                                          "grad_scale")


def test_saving_and_ratios_come_from_the_peaks(e16):
    rows, _, contract, _ = e16
    for b in contract["params"]["batches"]:
        normal = one_value(rows, f"b{b}/normal", "peak_rss", "max")
        ck = one_value(rows, f"b{b}/checkpointed", "peak_rss", "max")
        assert one_value(rows, f"b{b}/checkpointed", "memory_saved") == pytest.approx(normal - ck)
        assert one_value(rows, f"b{b}/checkpointed", "memory_pct_of_normal") == pytest.approx(
            100 * ck / normal)
        a = one_value(rows, f"b{b}/normal", "step_latency", "median")
        c = one_value(rows, f"b{b}/checkpointed", "step_latency", "median")
        assert one_value(rows, f"b{b}/checkpointed", "time_pct_of_normal") == pytest.approx(
            100 * c / a)
        assert "fresh process" in rows[rows.metric == "peak_rss"].sync_boundary.iloc[0]


def test_table_and_figure(e16, tmp_path):
    rows, _, contract, out = e16
    t = experiments.table("E16", rows)
    assert len(t) == 2 * len(contract["params"]["batches"])
    assert list(t.config[:2]) == ["normal", "checkpointed"]
    assert not tables.format_table(t).empty
    png = experiments.make_figure("E16", out["csv"], out["samples"], tmp_path / "e16.png")
    assert png.stat().st_size > 0


def test_checkpointed_recomputes_in_backward_and_matches():
    torch.manual_seed(0)
    model = workloads.MLP(16, 3, 4)
    ck = interventions.Checkpointed(model)
    assert len(ck.blocks) == 3
    x = torch.randn(5, 16)
    calls = []
    h = model.body[0].register_forward_hook(lambda *a: calls.append(1))
    ck(x).sum().backward()
    assert len(calls) == 2  # forward, then again during backward: that is the trade
    h.remove()
    g_ck = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for a, b in zip(g_ck, (p.grad for p in model.parameters())):
        assert torch.equal(a, b)


def test_checkpointing_refuses_an_unknown_model():
    with pytest.raises(interventions.NotApplicable):
        interventions.Checkpointed(torch.nn.Linear(3, 3))


def test_the_round_robin_takes_the_experiments_warmup(tiny_cfg, tmp_path, monkeypatch):
    """The CPU scale's 5 warmup calls of each variant, not timing's 30 (its steps are
    0.15-0.19 s at batch 1024, and 30 outnumbered the 4 x 5 timed calls)."""
    assert_round_robin_takes_the_warmup(tiny_cfg, "E16", tmp_path, monkeypatch, batches=[8],
                                        blocks=1, inner=1, peak_calls=1)
    assert_cpu_scale_sets("E16", "warmup", 5, 30)


# ------------------------------------------------------------------ the claims' cases
# C37: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e16_rows(time_small=133.0, time_large=131.0, mem_small=100.0, mem_large=72.0, floor_pct=2.0):
    out = []
    for b, t, m in ((256, time_small, mem_small), (4096, time_large, mem_large)):
        v = e16_slice.batch_variant(b, e16_slice.CHECKPOINTED)
        out += [("E16", v, e16_slice.TIME_PCT_OF_NORMAL, "value", t),
                ("E16", v, e16_slice.MEMORY_PCT_OF_NORMAL, "value", m)]
    return with_floor(floor_pct, *out)


case("C37", e16_rows, lambda: e16_rows(mem_large=99.0),
     lambda: e16_rows(time_small=101.0, time_large=101.0, floor_pct=3.0))
