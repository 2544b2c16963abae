"""E22 (benchmark matrix): four cells from one initial state, one run."""

from __future__ import annotations

import math

import pytest
from experiments import one_value, pipeline_results

from perflab import experiments
from perflab.kit import tables

CELLS = ("eager_fp32", "eager_amp", "compiled_fp32", "compiled_amp")


@pytest.fixture(scope="module")
def e22(pipeline_run, tiny_cfg):
    # the shared pipeline run's outputs (tests/shared_run.py): the experiment is not run again
    return pipeline_results(pipeline_run, tiny_cfg, "E22")


def test_four_cells_with_their_contract(e22):
    rows, samples, contract, _ = e22
    assert rows.variant.unique().tolist() == list(CELLS)
    for cell in CELLS:
        sel = rows[rows.variant == cell]
        assert set(sel.execution) == {cell.split("_")[0]}
        assert set(sel.dtype) == ({"autocast bfloat16"} if cell.endswith("amp") else {"float32"})
        assert len(samples[samples.variant == cell]) == contract["params"]["repeats"]
    # CPU: the peaks cannot be separated in one process; the rows say so
    bad = rows[rows.status != "ok"]
    assert set(bad.metric) == {"peak_allocated", "peak_reserved"}
    assert (bad.reason.str.len() > 0).all()


def test_throughput_is_batch_over_median(e22):
    rows, _, contract, _ = e22
    batch = contract["workloads"]["mlp"]["params"]["batch"]
    for cell in CELLS:
        med = one_value(rows, cell, "step_latency", "median")
        assert one_value(rows, cell, "throughput", "median") == pytest.approx(batch * 1e3 / med)


def test_correctness_column(e22):
    rows, *_ = e22
    assert one_value(rows, "eager_fp32", "loss_abs_diff_vs_eager_fp32") == 0
    # compiled fp32 computes the same loss within float32 tolerance
    assert one_value(rows, "compiled_fp32", "loss_abs_diff_vs_eager_fp32") < 1e-4
    for cell in ("eager_amp", "compiled_amp"):  # bf16: recorded, finite, not zero-checked
        assert math.isfinite(one_value(rows, cell, "loss_abs_diff_vs_eager_fp32"))
    # compiled cells' first step includes compilation
    for cell in ("compiled_fp32", "compiled_amp"):
        assert one_value(rows, cell, "first_step") > one_value(rows, cell, "step_latency", "max")


def test_table_and_figure(e22, tmp_path):
    rows, _, _, out = e22
    t = experiments.table("E22", rows)
    assert t.cell.tolist() == list(CELLS)
    assert (t.peak_allocated_mib == "unsupported").all()
    assert not tables.format_table(t).empty
    png = experiments.make_figure("E22", out["csv"], out["samples"], tmp_path / "e22.png")
    assert png.stat().st_size > 0
