"""E24 (input pipeline): the worker sweep, its bookkeeping and its correctness, one run."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
from claims_rows import ab_rows, case, sample_series, with_floor, with_samples
from experiments import one_value, run_tiny

from perflab import experiments
from perflab.core import io
from perflab.experiments import e24_input_pipeline as e24_slice
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


# ------------------------------------------------------------------ the claims' cases
# C46, C47: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e24_workers(share=91.0, s0=61.0, s4=4.2, floor_pct=2.0, pair_p=None, wait_sd=1.0):
    """E24's rows, with the 0-worker steps' paired series (48 steps: the step about ``s0``
    and its input wait ``share`` % of it, give or take ``wait_sd`` ms)."""
    import numpy as np

    step = sample_series(s0, 0.02 * s0, 48, 8)
    wait = share / 100 * step + wait_sd * np.random.default_rng(9).standard_normal(48)
    specs = [("E24", e24_slice.REFERENCE, e24_slice.INPUT_WAIT_SHARE, "value", share),
             ("E24", e24_slice.workers_variant(0), e24_slice.STEP_LATENCY, "median", s0),
             ("E24", e24_slice.workers_variant(4), e24_slice.STEP_LATENCY, "median", s4),
             ("E24", e24_slice.workers_variant(4, pinned=True), e24_slice.STEP_LATENCY, "median",
              s4 * 0.9)]
    if pair_p is not None:  # the interleaved pair's own judgement (runs after E24 judged it)
        specs += ab_rows("E24", e24_slice.pair_variant(e24_slice.workers_variant(4)),
                         100 * (s4 - s0) / s0, base_ms=s0, p=pair_p)[4:]
    return with_samples(with_floor(floor_pct, *specs),
                        ("E24", e24_slice.REFERENCE, e24_slice.INPUT_WAIT, wait),
                        ("E24", e24_slice.REFERENCE, e24_slice.STEP_LATENCY, step))


case("C46", e24_workers, lambda: e24_workers(share=10.0),
     lambda: e24_workers(share=32.0, s0=20.4, s4=14.69, floor_pct=31.0))  # the noisy CPU rerun


def e24_copy(pinned=0.040, pageable=0.099, floor_pct=2.0, p=0.001):
    d = f"{e24_slice.COPY_PINNED}_minus_{e24_slice.COPY_PAGEABLE}"
    return with_floor(floor_pct,
                      ("E24", e24_slice.COPY_PINNED, e24_slice.HOST_TO_DEVICE, "median", pinned),
                      ("E24", e24_slice.COPY_PAGEABLE, e24_slice.HOST_TO_DEVICE, "median",
                       pageable),
                      *ab_rows("E24", d, 100 * (pinned - pageable) / pageable,
                               metric=e24_slice.HOST_TO_DEVICE, base_ms=pageable, p=p))


case("C47", e24_copy, lambda: e24_copy(pinned=0.2),
     lambda: e24_copy(pinned=0.098, p=0.4))
