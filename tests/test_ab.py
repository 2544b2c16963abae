"""The one A/B writer: Context.ab and profiling.record_pair write the same rows by the same names."""

from __future__ import annotations

import statistics

import pandas as pd
import pytest

from perflab.core import io
from perflab.instruments import ab, profiling, timing
from perflab.pipeline import runner

A_BLOCKS = [1.0, 1.1, 1.0, 1.05, 0.98, 1.02, 1.0, 1.04]
INNER = 3


def _result(shift: float) -> timing.ABResult:
    """An A/B of 8 blocks of 3 samples; B is A plus ``shift`` plus a little drift."""
    res = timing.ABResult()
    for i, a in enumerate(A_BLOCKS):
        b = a + shift + 0.001 * i
        res.a_samples += [a - 0.01, a, a + 0.01]
        res.b_samples += [b - 0.01, b, b + 0.01]
        res.a_blocks.append(a)
        res.b_blocks.append(b)
    return res


def _ctx(tiny_contract) -> runner.Context:
    return runner.Context("E07", tiny_contract("E07"), log=lambda m: None)


def _frame(ctx) -> pd.DataFrame:
    frame = io.rows_to_frame(ctx.rows)
    io.validate_rows(frame)
    return frame


def _value(frame, variant, metric, statistic="value"):
    sel = frame[(frame.variant == variant) & (frame.metric == metric)
                & (frame.statistic == statistic)]
    assert len(sel) == 1, (variant, metric, statistic)
    return float(sel.value.iloc[0])


def test_context_ab_writes_the_vocabulary_and_judges_the_difference(tiny_contract):
    ctx = _ctx(tiny_contract)
    d = ctx.ab(_result(0.5), a="x", b="y", window="w", batch_size=64)
    f = _frame(ctx)
    dv = "y_minus_x"
    diff = f[f.variant == dv]
    assert {"step_latency", "step_latency" + ab.REL, ab.BLOCK_SPREAD, ab.BLOCK_PAIR_DIFF,
            ab.WILCOXON_P, ab.RESOLVED, "ab_resolved", "ab_p"} <= set(diff.metric)
    a_med, b_med = statistics.median(_result(0.5).a_samples), statistics.median(_result(0.5).b_samples)
    assert d["a"] == pytest.approx(a_med) and d["b"] == pytest.approx(b_med)
    assert _value(f, dv, "step_latency") == pytest.approx(b_med - a_med)
    assert _value(f, dv, "step_latency_rel") == pytest.approx(100 * (b_med - a_med) / a_med)
    assert _value(f, dv, ab.RESOLVED) == 1.0 == _value(f, dv, "ab_resolved") and d["resolved"]
    assert _value(f, dv, ab.WILCOXON_P) == _value(f, dv, "ab_p") == d["p"]
    assert _value(f, "x", "block_median", "min") == min(A_BLOCKS)
    assert _value(f, "y", "throughput", "median") == pytest.approx(64 / b_med * 1e3)
    # every sample of each side and of the block differences reaches the samples file
    s = pd.DataFrame(ctx.samples)
    assert len(s[(s.variant == "x") & (s.metric == "step_latency")]) == len(A_BLOCKS) * INNER
    assert sorted(s[(s.variant == dv) & (s.metric == ab.BLOCK_PAIR_DIFF)].block) == list(range(8))


def test_a_difference_inside_the_noise_is_not_resolved(tiny_contract):
    ctx = _ctx(tiny_contract)
    res = _result(0.0)
    res.b_blocks = list(reversed(res.a_blocks))  # same values, no consistent sign
    d = ctx.ab(res, a="x", b="y", window="w")
    assert not d["resolved"] and _value(_frame(ctx), "y_minus_x", ab.RESOLVED) == 0.0


def test_record_pair_is_the_same_writer(tiny_contract):
    """The profiling pair (a named difference metric, given block ids) writes the same names."""
    res = _result(0.5)
    by_ab, by_pair = _ctx(tiny_contract), _ctx(tiny_contract)
    by_ab.ab(res, a="x", b="y", window="w")
    block_of = [i // INNER for i in range(len(res.a_samples))]
    profiling.record_pair(by_pair, metric="step_latency", window="w",
                          sides=[("x", res.a_samples, block_of, res.a_blocks, "s"),
                                 ("y", res.b_samples, block_of, res.b_blocks, "s")],
                          diff_variant="y/cost", diff_metric="cost")
    fa, fp = _frame(by_ab), _frame(by_pair)
    names = {m.replace("step_latency", "cost") for m in fa[fa.variant == "y_minus_x"].metric}
    assert names == set(fp[fp.variant == "y/cost"].metric)
    assert set(fa[fa.variant == "x"].metric) == set(fp[fp.variant == "x"].metric)
    assert _value(fp, "y/cost", "cost_rel") == pytest.approx(_value(fa, "y_minus_x",
                                                                    "step_latency_rel"))


def _old_row(eid, metric):
    return {"experiment": eid, "variant": "v", "workload": "mlp", "dtype": "float32",
            "device": "cpu", "mode": "train", "execution": "eager", "metric": metric,
            "window": "w", "sync_boundary": "s", "statistic": "value", "value": 1.0,
            "unit": "x", "n": 1, "status": "ok", "reason": ""}


def test_old_names_read_as_the_one_vocabulary(tmp_path):
    io.write_results(tmp_path / "old.csv", [
        _old_row("E13", "tax_resolved"), _old_row("E13", "paired_block_difference"),
        _old_row("E13", "tax_rel"), _old_row("E13", "throughput_rel"),
        _old_row("E25", "throughput_relative"), _old_row("E25", "throughput_rel")])
    assert list(io.read_results([tmp_path / "old.csv"]).metric) == [
        "difference_resolved", "block_pair_diff", "tax_rel", "throughput_pct_of_none",
        "throughput_rel", "throughput_rel"]  # E13's old ratio is not E25's change
    io.write_samples(tmp_path / "old_samples.csv",
                     [{"experiment": "E05", "variant": "sum_minus_total", "execution": "eager",
                       "metric": "step_latency_relative", "unit": "%", "block": 0, "index": 0,
                       "value": 2.0}])
    assert list(io.read_samples(tmp_path / "old_samples.csv").metric) == ["step_latency_rel"]


def test_renaming_takes_one_step():
    """Every old name reads as its new one, and a new name is never renamed again."""
    old = io.rows_to_frame([_old_row(eid or "E99", m) for eid, m in io.RENAMED_METRICS])
    once = io.renamed(old)
    assert list(once.metric) == list(io.RENAMED_METRICS.values())
    assert once.equals(io.renamed(once))
