"""E15 (mixed precision): numerics, finiteness, time and memory bookkeeping in one run.

No test asserts that a precision is faster or smaller: on a CPU autocast is
often slower, and that is a finding, not a failure.
"""

from __future__ import annotations

import copy

import pytest
from claims_rows import case, with_floor
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
from perflab.experiments import e15_amp as e15_slice
from perflab.instruments import interventions
from perflab.kit import tables


@pytest.fixture(scope="module")
def e15(pipeline_run, tiny_cfg):
    # the shared pipeline run's outputs (tests/shared_run.py): the experiment is not run again
    return pipeline_results(pipeline_run, tiny_cfg, "E15")


def test_rows_obey_the_contract(e15):
    rows, samples, _, _ = e15
    assert_only_cuda_rows_unsupported("E15", rows, samples)


def test_one_step_numerics_close_to_fp32(e15):
    rows, *_ = e15
    fp32 = one_value(rows, "numerics/fp32", "loss")
    for prec in ("fp16", "bf16"):
        loss = one_value(rows, f"numerics/{prec}", "loss")
        assert one_value(rows, f"numerics/{prec}", "loss_abs_diff") == pytest.approx(abs(loss - fp32))
        assert abs(loss - fp32) < 1e-2 * abs(fp32)
        assert one_value(rows, f"numerics/{prec}", "grad_norm_rel_diff") < 5e-2
        # the rows say which dtype ran: fp32 parameters under autocast
        dtype = rows[rows.variant == f"numerics/{prec}"].dtype.iloc[0]
        assert dtype == f"float32 params, autocast {dict(fp16='float16', bf16='bfloat16')[prec]}"
    # bf16's shorter mantissa deviates at least as much as fp16 does in the loss
    assert (one_value(rows, "numerics/bf16", "grad_norm_rel_diff")
            >= one_value(rows, "numerics/fp16", "grad_norm_rel_diff"))


def test_every_precision_stays_finite(e15):
    rows, _, contract, _ = e15
    n = contract["params"]["finite_steps"]
    for prec in ("fp32", "fp16", "bf16"):
        assert one_value(rows, f"finite/{prec}", "finite_losses") == n


def test_time_and_memory_ratios_are_consistent(e15):
    rows, samples, contract, _ = e15
    for b in contract["params"]["batches"]:
        base = one_value(rows, f"b{b}/fp32", "step_latency", "median")
        peak = one_value(rows, f"b{b}/fp32", "peak_rss", "max")
        for prec in ("fp32", "fp16", "bf16"):
            v = f"b{b}/{prec}"
            med = one_value(rows, v, "step_latency", "median")
            assert one_value(rows, v, "time_pct_of_fp32") == pytest.approx(100 * med / base)
            assert one_value(rows, v, "throughput", "median") == pytest.approx(b * 1e3 / med)
            assert one_value(rows, v, "memory_pct_of_fp32") == pytest.approx(
                100 * one_value(rows, v, "peak_rss", "max") / peak)
            # the peak of a fresh process is above what it held before the variant ran
            assert one_value(rows, v, "peak_rss", "max") >= one_value(rows, v, "rss_at_start")
            each = samples[(samples.variant == v) & (samples.metric == "step_latency")]
            assert len(each) == contract["params"]["blocks"] * contract["params"]["inner"]
            assert med == pytest.approx(each.value.median())


def test_table_and_figure(e15, tmp_path):
    rows, _, contract, out = e15
    t = experiments.table("E15", rows)
    b = contract["params"]["batches"][-1]
    line = t[(t.measurement == f"batch {b}") & (t.config == "bf16")]
    assert float(line.time_pct.iloc[0]) == pytest.approx(one_value(rows, f"b{b}/bf16",
                                                                   "time_pct_of_fp32"))
    assert (t.measurement == "one step vs fp32").sum() == 3
    assert not tables.format_table(t).empty
    png = experiments.make_figure("E15", out["csv"], out["samples"], tmp_path / "e15.png")
    assert png.stat().st_size > 0


def test_a_precision_that_fails_becomes_unsupported_rows(tiny_cfg, tmp_path, monkeypatch):
    real = interventions.amp_one_step

    def no_fp16(fresh, w, x, y, precision, *a, **k):
        if precision == "fp16":
            raise RuntimeError("fp16 autocast is not implemented here")
        return real(fresh, w, x, y, precision, *a, **k)

    monkeypatch.setattr(interventions, "amp_one_step", no_fp16)
    cfg = copy.deepcopy(tiny_cfg)
    cfg["experiments"]["E15"].update(batches=[8], finite_steps=2, blocks=1, inner=1, peak_calls=1)
    _, out = run_tiny(cfg, "E15", tmp_path)  # its own run: an injected failure
    rows = io.read_results([out["csv"]])
    fp16 = rows[rows.variant.str.endswith("/fp16")]
    assert set(fp16.status) == {"unsupported"}
    assert fp16.reason.str.contains("not implemented here").all()
    assert {"numerics/fp16", "b8/fp16"} <= set(fp16.variant)
    # the others still ran: bf16's loss and its time as a share of fp32's both measured
    bf16 = rows[rows.variant.str.endswith("/bf16")
                & rows.metric.isin(["loss", "time_pct_of_fp32"])]
    assert set(zip(bf16.variant, bf16.metric, bf16.status)) >= {
        ("numerics/bf16", "loss", "ok"), ("b8/bf16", "time_pct_of_fp32", "ok")}
    assert set(bf16.status) == {"ok"}
    t = experiments.table("E15", rows)
    assert "unsupported" in set(t[t.config == "fp16"].median_ms)


def test_the_round_robin_takes_the_experiments_warmup(tiny_cfg, tmp_path, monkeypatch):
    """The CPU scale's 5 warmup calls, not timing's 30: fp16 autocast is 1.1 s a step there
    at batch 512 (0.15 s at 64)."""
    assert_round_robin_takes_the_warmup(tiny_cfg, "E15", tmp_path, monkeypatch, batches=[8],
                                        finite_steps=2, blocks=1, inner=1, peak_calls=1)
    assert_cpu_scale_sets("E15", "warmup", 5, 30)


def test_only_a_missing_kernel_is_unsupported_any_other_failure_is_an_error():
    from experiments import load_script

    script = load_script("e15_amp")
    for exc in (RuntimeError('"addmm_impl_cpu_" not implemented for \'Half\''),
                NotImplementedError("fp16"), RuntimeError("bf16 is not supported on this GPU")):
        assert script.failure_status(exc) == "unsupported", exc
    for exc in (RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x3 and 4x4)"),
                ValueError("bad target"), TypeError("forward() missing 1 argument"),
                RuntimeError("CUDA error: an illegal memory access was encountered")):
        assert script.failure_status(exc) == "error", exc


# ------------------------------------------------------------------ the claims' cases
# C35, C36: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e15_rows(precision, small, large, floor_pct=2.0):
    return with_floor(floor_pct, ("E15", e15_slice.batch_variant(256, precision),
                                  e15_slice.TIME_PCT_OF_FP32, "value", small),
                      ("E15", e15_slice.batch_variant(2048, precision),
                       e15_slice.TIME_PCT_OF_FP32, "value", large))


case("C35", lambda: e15_rows(e15_slice.FP16, 95.5, 40.1),
     lambda: e15_rows(e15_slice.FP16, 95.0, 93.0, floor_pct=1.0),  # 2 points: decided below 10
     # 15 points, 5 from 10: the floor 8
     lambda: e15_rows(e15_slice.FP16, 95.0, 80.0, floor_pct=8.0))
case("C36", lambda: e15_rows(e15_slice.BF16, 135.4, 142.1),
     lambda: e15_rows(e15_slice.BF16, 122.0, 39.2),
     lambda: e15_rows(e15_slice.BF16, 103.0, 104.0, floor_pct=5.0))
