"""E02 (four questions): the four answers are measured side by side, in a balanced round robin."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
from claims_rows import case, with_floor
from experiments import assert_cpu_scale_sets, run_tiny

from perflab import experiments
from perflab.core import io
from perflab.experiments import e02_four_questions as e02


def test_four_questions_are_interleaved(tiny_cfg, tmp_path):
    cfg = copy.deepcopy(tiny_cfg)
    cfg["experiments"]["E02"]["compile"] = False  # the eager round robin: compiling is slow here
    # experiments.E02.repeats (the CPU scale's 200) replaces timing.repeats
    blocks = cfg["experiments"]["E02"]["blocks"]
    cfg["experiments"]["E02"]["repeats"] = repeats = 3 * blocks
    assert cfg["timing"]["repeats"] // blocks != 3
    contract, out = run_tiny(cfg, "E02", tmp_path)
    rows = io.read_results([out["csv"]])
    samples = pd.read_csv(out["samples"])
    inner = repeats // blocks
    assert rows[rows.statistic == "median"].window.str.contains(f"blocks of {inner} calls").all()
    questions = ["forward_inference", "forward_grad", "forward_backward", "train_step"]
    assert list(dict.fromkeys(samples.variant)) == questions
    for q in questions:
        s = samples[samples.variant == q]
        # every block holds `inner` calls of every question: they ran next to each other
        assert s.block.value_counts().sort_index().to_dict() == {b: inner for b in range(blocks)}
        med = rows[(rows.variant == q) & (rows.statistic == "median")].value.iloc[0]
        assert med == pytest.approx(s.value.median())
    assert rows.sync_boundary.str.contains("Williams").all()
    t = experiments.table("E02", rows)
    assert t.question.tolist() == questions
    assert_cpu_scale_sets("E02", "repeats", 200, 400)


# ------------------------------------------------------------------ the claims' cases
# C05, C06: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e02_rows(inf=2.968, f=2.967, fb=8.094, t=16.45, floor_pct=2.0):
    return with_floor(floor_pct, *[("E02", v, "step_latency", "median", x) for v, x in (
        (e02.FORWARD_INFERENCE, inf), (e02.FORWARD_GRAD, f), (e02.FORWARD_BACKWARD, fb),
        (e02.TRAIN_STEP, t))])


case("C05", e02_rows, lambda: e02_rows(inf=3.5), lambda: e02_rows(inf=3.2, floor_pct=5.0))
case("C06", e02_rows, lambda: e02_rows(t=8.5),  # the optimizer adds 5%
     lambda: e02_rows(t=8.094 * 1.22, floor_pct=5.0))  # 22%, 2 points above 20
