"""E24 (input pipeline): the worker sweep, its bookkeeping and its correctness, one run."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
from experiments import one_value, run_tiny

from perflab import experiments
from perflab.core import io
from perflab.experiments.e24_input_pipeline import dataset as pipeline
from perflab.kit import tables

TOO_MANY = 4096  # more workers than any test machine has cores: must be skipped, not run


@pytest.fixture(scope="module")
def e24(tiny_cfg, tmp_path_factory):
    cfg = copy.deepcopy(tiny_cfg)
    # its own run, not the shared pipeline's: a worker count above the cores must be skipped
    cfg["experiments"]["E24"]["workers"] = [0, 1, 2, TOO_MANY]
    contract, out = run_tiny(cfg, "E24", tmp_path_factory.mktemp("e24"))
    return io.read_results([out["csv"]]), pd.read_csv(out["samples"]), contract, out


def _run_counts():
    return [k for k in (0, 1, 2) if k <= pipeline.available_cores()]


def test_non_ok_rows_are_the_cpu_copy_rows_and_the_skipped_count(e24):
    rows, *_ = e24
    bad = rows[rows.status != "ok"]
    assert f"workers_{TOO_MANY}" in set(bad.variant)
    assert {"copy/pageable", "copy/pinned"} <= set(bad.variant)
    assert (bad.reason.str.len() > 0).all()
    assert not (rows[rows.status == "ok"].variant.str.contains("pinned|copy")).any()


def test_parts_and_share_agree_with_the_samples(e24):
    rows, samples, contract, _ = e24
    blocks, steps = contract["params"]["blocks"], contract["params"]["steps"]
    for k in _run_counts():
        v = f"workers_{k}"
        s = samples[samples.variant == v]
        by = {m: s[s.metric == m].value.to_numpy() for m in
              ("input_wait", "host_to_device", "compute", "step_latency")}
        assert all(len(x) == blocks * steps for x in by.values())
        # the configurations ran interleaved: every block holds steps of every one of them
        assert s[s.metric == "step_latency"].block.value_counts().to_dict() == {
            b: steps for b in range(blocks)}
        # each step is its three parts, bracketed back to back
        assert by["step_latency"] == pytest.approx(
            by["input_wait"] + by["host_to_device"] + by["compute"], rel=1e-6, abs=1e-6)
        assert one_value(rows, v, "input_wait_share") == pytest.approx(
            100 * by["input_wait"].sum() / by["step_latency"].sum())
        assert 0 <= one_value(rows, v, "input_wait_share") <= 100


def test_same_batches_same_losses_whatever_the_workers(e24):
    rows, *_ = e24
    for k in _run_counts()[1:]:
        assert one_value(rows, f"workers_{k}", "loss_max_abs_diff_vs_workers_0") == 0


def test_most_workers_judged_against_none_block_by_block(e24):
    rows, samples, contract, _ = e24
    from perflab.instruments import stats

    most = f"workers_{max(_run_counts())}"
    s = samples[samples.metric == "step_latency"]
    a = s[s.variant == "workers_0"].groupby("block").value.median().tolist()
    b = s[s.variant == most].groupby("block").value.median().tolist()
    j = stats.judge(a, b)
    d = f"pair/{most}_minus_workers_0"
    assert one_value(rows, d, "ab_effect") == pytest.approx(j.effect)
    assert one_value(rows, d, "ab_p") == pytest.approx(j.p)


def test_dataset_serves_the_pool_unchanged():
    import torch

    x = torch.arange(12.0).reshape(3, 4)
    y = torch.tensor([0, 1, 2])
    ds = pipeline.PreparedDataset(x, y, 7, item_ops=3)
    assert len(ds) == 7
    xi, yi = ds[4]
    assert torch.equal(xi, x[1]) and int(yi) == 1


def test_table_and_figure(e24, tmp_path):
    rows, _, _, out = e24
    t = experiments.table("E24", rows)
    assert t.configuration.tolist()[0] == "workers_0"
    assert t.configuration.tolist()[-2:] == ["bare copy/pageable", "bare copy/pinned"]
    assert not tables.format_table(t).empty
    png = experiments.make_figure("E24", out["csv"], out["samples"], tmp_path / "e24.png")
    assert png.stat().st_size > 0
