"""Real models' awkward shapes (tests/awkward_workloads.py) through the kit and the experiments.

Parameters without gradients, frozen parameters, several parameter groups,
buffers, tuple or dict outputs, integer inputs, and a workload with only a
loader and a train_step: each passes the pre-flight, runs the step every
experiment times, is localized by the phase hooks and gives E07's gradients
and agreement; then the experiments that touch parameters run on the case
that has them all, at the tiny contract and with their sweeps cut to one or
two points, and end with rows, never a crash.
"""

from __future__ import annotations

import copy
from pathlib import Path

import awkward_workloads as aw
import pytest
from experiments import run_tiny

from perflab.core import io
from perflab.instruments import interventions, memory, optim, phases, steps, workloads
from perflab.pipeline import config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("case", aw.CASES)
def test_each_case_runs_the_step_and_its_phases(case):
    target = f"awkward_workloads:{case}"
    w = workloads.check(target, "cpu")
    step = steps.build(w, "cpu", resident=False)
    start = copy.deepcopy(step.model)
    ms = phases.timed(step, None)
    ms()
    assert ms.entries["forward"] == ms.entries["backward"] == ms.entries["optimizer"] == 1
    grads = optim.step_gradients(step)
    named = dict(zip((n for n, _ in start.named_parameters()), grads, strict=True))
    if case in ("frozen", "all_cases", "own_step"):
        assert named["body.weight"] is None  # frozen: no gradient, and no crash
    if case in ("unused_head", "all_cases", "own_step"):
        assert named["unused.weight"] is None  # never in the forward: no gradient
    agree = optim.one_step_agreement(start, grads, optim.factory("adamw_foreach"),
                                     optim.factory("adamw_fused"))
    assert agree["max_abs_diff"] <= 1e-3 * agree["update_scale"]


def _cut(eid):
    """The tiny contract with each sweep at its smallest (CI time is scarce)."""
    cuts = {"E15": {"batches": [8], "precisions": ["fp32", "bf16"]},
            "E16": {"batches": [8]}, "E17": {"batch": 8, "ks": [1, 2]}}

    def patch(contract):
        contract["params"].update(cuts.get(eid, {}))

    return patch


@pytest.fixture
def peaks_in_process(monkeypatch):
    """E15-E17 measure each variant's CPU peak in a fresh process (seconds of imports each);
    here the variant is built and stepped in this process instead: the same build_variant,
    whose peak value no assertion reads."""
    def in_process(contract, kind, kw, calls):
        step = interventions.build_variant(contract, kind, **kw)
        for _ in range(calls):
            step()
        return {"peak_rss": memory.vmhwm_mib(), "rss_at_start": memory.rss_mib(),
                "vmhwm_reset": False}

    monkeypatch.setattr(interventions, "_fresh_process_peak", in_process)


@pytest.mark.parametrize("case, eids", [
    ("all_cases", ("E05", "E07", "E09", "R01", "E15", "E16", "E17")),
    ("own_step", ("E05", "E07", "R01", "E09", "E15")),
])
def test_experiments_that_touch_parameters_end_in_rows(case, eids, tmp_path,
                                                       peaks_in_process):
    cfg = config.load([ROOT / "config" / "test.yaml"],
                      {"device": "cpu", "workload": f"awkward_workloads:{case}"})
    for eid in eids:
        _, out = run_tiny(cfg, eid, tmp_path / eid, patch=_cut(eid))
        rows = io.read_results([out["csv"]])
        errors = rows[rows.status == "error"]
        assert errors.empty, (eid, errors.reason.tolist())
        skipped = rows[rows.status == "unsupported"]
        assert (skipped.reason.str.len() > 0).all()
        if case == "own_step" and eid in ("E09", "E15"):
            # they rebuild the step from make_batch and loss_fn, which this workload lacks
            assert skipped.reason.str.contains("gives no make_batch").any(), eid
        elif eid != "E16":  # E16 wraps the chapter's MLP blocks only; its rows say so
            assert (rows.status == "ok").any(), eid
