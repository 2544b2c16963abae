"""E01 (the lying benchmark): the synchronized step takes a scale's repeats."""

from __future__ import annotations

import copy

import pandas as pd
from experiments import assert_cpu_scale_sets, run_tiny

from perflab.core import io
from perflab.experiments import e01_lying_benchmark as e01


def test_the_synchronized_step_takes_the_experiments_repeats(tiny_cfg, tmp_path):
    # experiments.E01.repeats (the CPU scale's 200) replaces timing.repeats for the
    # synchronized, warmed step; the loops keep their lengths
    cfg = copy.deepcopy(tiny_cfg)
    cfg["experiments"]["E01"]["repeats"] = repeats = 7
    assert cfg["timing"]["repeats"] != repeats
    contract, out = run_tiny(cfg, "E01", tmp_path)
    rows = io.read_results([out["csv"]])
    samples = pd.read_csv(out["samples"])
    synced = rows[rows.variant == e01.SYNCHRONIZED_WARMED]
    assert len(synced) and (synced.n == repeats).all()
    assert (samples.variant == e01.SYNCHRONIZED_WARMED).sum() == repeats
    for n in contract["params"]["loops"]:
        assert (rows.variant == e01.naive_loop(n)).any()
    assert_cpu_scale_sets("E01", "repeats", 200, 400)
