"""E02 (four questions): the four answers are measured side by side, in a balanced round robin."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
from experiments import assert_cpu_scale_sets, run_tiny

from perflab import experiments
from perflab.core import io


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
