"""E09 (memory by phase): the persistent breakdown, the optimizer state of the first step,
honest CPU rows; the CUDA phase table through a fake allocator, and for real on a GPU.
"""

from __future__ import annotations

import pytest
from claims_rows import case, rows
from experiments import pipeline_results
from memory_checks import assert_rows_honest, cuda_cfg, run_fake_cuda, run_rows, status, value

from perflab import experiments
from perflab.experiments import e09_memory_by_phase as e09_slice
from perflab.views import ledger

BOUNDARIES = ("start", "zero_grad", "forward", "loss", "backward", "optimizer")
PARTS = ("parameters", "gradients", "optimizer_state")


@pytest.fixture(scope="module")
def e09(pipeline_run, tiny_cfg):
    # the shared pipeline run's outputs (tests/shared_run.py): the experiment is not run again
    rows, _, contract, out = pipeline_results(pipeline_run, tiny_cfg, "E09")
    return rows, contract, out


def _mlp_param_bytes(contract) -> float:
    p = contract["workloads"]["mlp"]["params"]
    d, k = p["dim"], p["num_classes"]
    return 4 * (p["depth"] * (d * d + d) + d * k + k) / 2**20  # fp32 weights and biases


def test_cpu_rows_are_honest(e09):
    rows, *_ = e09
    assert_rows_honest("E09", rows)
    for label in ("cold", "steady"):
        for b in BOUNDARIES:
            assert status(rows, f"{label}/{b}", "allocated") == "unsupported"
        assert value(rows, label, "peak_rss") > 0
        assert status(rows, label, "peak_allocated") == "unsupported"


def test_persistent_breakdown_counts_the_tensors(e09):
    rows, contract, _ = e09
    params = value(rows, "persistent/parameters", "bytes")
    assert params == pytest.approx(_mlp_param_bytes(contract))
    # one gradient per parameter, AdamW's two moments per parameter (+ a step counter each)
    assert value(rows, "persistent/gradients", "bytes") == pytest.approx(params)
    state = value(rows, "persistent/optimizer_state", "bytes")
    assert 2 * params <= state <= 2 * params + 0.01
    assert sum(value(rows, f"persistent/{p}", "share") for p in PARTS) == pytest.approx(100)
    assert value(rows, "persistent", "bytes") == pytest.approx(
        sum(value(rows, f"persistent/{p}", "bytes") for p in PARTS))


def test_optimizer_state_appears_on_the_first_step(e09):
    rows, *_ = e09
    assert value(rows, "optimizer_state", "state_before_first_step") == 0.0
    assert value(rows, "optimizer_state", "state_after_first_step") == pytest.approx(
        value(rows, "persistent/optimizer_state", "bytes"))


def test_table_figure_and_ledger_line(e09, tmp_path):
    rows, _, out = e09
    t = experiments.table("E09", rows)
    assert list(t.row[:2]) == ["step 1 (cold)", "step 3 (steady)"]
    assert "peak_rss_mib" in t.columns
    assert experiments.make_figure("E09", out["csv"], out["samples"], tmp_path / "e09.png").is_file()
    led, md = ledger.build([out["csv"]])
    mem = led[led.section == "memory"]
    assert set(mem.field) == {"peak_rss", "persistent"}
    assert "peak RSS (VmHWM, whole process)" in md


def test_cuda_branch_through_a_fake_allocator(tiny_cfg, tmp_path, monkeypatch):
    """The CUDA code path: every phase row, the hidden peak's arithmetic; no memory claim."""
    rows, _, out = run_fake_cuda(tiny_cfg, "E09", tmp_path, monkeypatch)
    assert_rows_honest("E09", rows)
    assert (rows.status == "ok").all()
    for label in ("cold", "steady"):
        top = max(value(rows, f"{label}/{b}", "allocated") for b in BOUNDARIES)
        assert value(rows, label, "max_boundary_allocated") == top
        assert value(rows, label, "hidden_peak") == pytest.approx(
            value(rows, label, "peak_allocated") - top)
    shares = [value(rows, f"persistent/{p}", "share") for p in (*PARTS, "other")]
    assert sum(shares) == pytest.approx(100)
    led, _ = ledger.build([out["csv"]])
    assert {"peak_allocated", "peak_reserved", "persistent", "activations"} <= set(
        led[led.section == "memory"].field)
    assert experiments.table("E09", rows).shape[0] == 11


def test_cuda_first_step_allocates_the_optimizer_state(tmp_path):
    cfg = cuda_cfg()
    rows, *_ = run_rows(cfg, "E09", tmp_path)
    state = value(rows, "optimizer_state", "state_after_first_step")
    jump = value(rows, "optimizer_state", "first_step_allocated_jump")
    assert jump >= state  # the moments appear on step 1's .step() (+ any rounding)
    for label in ("cold", "steady"):
        # the peak is of the step the boundaries were read in: never below the largest
        # reading, and the hidden peak is exactly the difference
        peak = value(rows, label, "peak_allocated")
        top = value(rows, label, "max_boundary_allocated")
        assert peak >= top
        assert value(rows, label, "hidden_peak") == pytest.approx(peak - top)
    # the steady step starts where the previous one ended: the state is already there
    assert value(rows, "steady/start", "allocated") >= value(rows, "cold/start", "allocated")


# ------------------------------------------------------------------ the claims' cases
# C23, C24, C25: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e09_rows(persistent=456.0, peak=589.0, boundary=475.0, jump=227.0, params=113.9):
    return rows(("E09", e09_slice.PERSISTENT, e09_slice.BYTES, "value", persistent),
                ("E09", e09_slice.STEADY, e09_slice.PEAK_ALLOCATED, "value", peak),
                ("E09", e09_slice.STEADY, e09_slice.MAX_BOUNDARY_ALLOCATED, "value", boundary),
                ("E09", e09_slice.OPTIMIZER_STATE, e09_slice.FIRST_STEP_ALLOCATED_JUMP, "value",
                 jump),
                ("E09", e09_slice.part_variant("parameters"), e09_slice.BYTES, "value", params))


case("C23", e09_rows, lambda: e09_rows(persistent=200.0))  # activations set the peak
case("C24", e09_rows, lambda: e09_rows(jump=0.5))  # SGD: no state on the first step
case("C25", e09_rows, lambda: e09_rows(peak=480.0))  # the peak is at a boundary
