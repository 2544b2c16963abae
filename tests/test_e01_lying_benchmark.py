"""E01 (the lying benchmark): the synchronized step takes a scale's repeats."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
from claims_rows import case, rows, sample_series, with_samples
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


@pytest.mark.parametrize("rule", ["adaptive", "fixed"])
def test_the_rounds_stop_once_the_claims_quantities_are_decided(tiny_cfg, tmp_path, rule):
    """Under the adaptive rule (the default) the loop rounds stop once C01's, C02's and C04's
    quantities are decided against their bounds: on a CPU (no queue) a loop reports its
    real time and the host returns when the step is done, all three far from their bounds,
    so 24 rounds are not needed; the fixed rule runs every round, and says nothing of it."""
    cfg = copy.deepcopy(tiny_cfg)
    cfg["experiments"]["E01"].update(loop_rounds=24, loops=[2, 4], repeats=5)
    if rule == "fixed":
        cfg["sampling"] = {"rule": "fixed"}
    contract, out = run_tiny(cfg, "E01", tmp_path)
    rows = io.read_results([out["csv"]])
    samples = pd.read_csv(out["samples"])
    loops = samples[(samples.variant == e01.naive_loop(2))
                    & (samples.metric == e01.REPORTED_MS_PER_STEP)]
    decided = rows[rows.metric == "sampling_decision"]
    if rule == "fixed":
        assert len(loops) == 24 and decided.empty
        return
    assert len(decided) == 3, decided
    assert decided.reason.str.startswith("decided").all(), decided.reason.tolist()
    assert 2 <= len(loops) < 24 and (decided.n == len(loops)).all()
    # the round medians C04 reads: one a round that ran
    medians = samples[(samples.variant == e01.HOST_RETURN)
                      & (samples.metric == e01.ROUND_MEDIAN)]
    assert len(medians) == len(loops)


# ------------------------------------------------------------------ the claims' cases
# C01, C02, C03, C04: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e01_loops(short=(9.491, 16.43), long=(15.741, 16.08), spread=0.005, rounds=6):
    """Loops of 20 and 400 in ``rounds`` rounds: (reported, real) ms per step of each, the
    first round's as the rows and every round's as samples, the reported time of each round
    off by a relative ``spread`` (its real time steady)."""
    specs, series = [], []
    for n, (reported, real) in ((20, short), (400, long)):
        v = e01.naive_loop(n)
        specs += [("E01", v, e01.REPORTED_MS_PER_STEP, "value", reported),
                  ("E01", v, e01.REAL_MS_PER_STEP, "value", real),
                  ("E01", v, e01.BACKLOG_AT_FINAL_SYNC, "value", (real - reported) * n)]
        series += [("E01", v, e01.REPORTED_MS_PER_STEP,
                    [reported, *sample_series(reported, spread * reported, rounds - 1, n)]),
                   ("E01", v, e01.REAL_MS_PER_STEP, [real] * rounds)]
    return with_samples(rows(*specs), *series)


case("C01", e01_loops, lambda: e01_loops(short=(2.914, 2.92)),  # the host-bound H200
     lambda: e01_loops(short=(14.5, 16.43), spread=0.04))  # 88%, rounds 4% apart
case("C02", e01_loops, lambda: e01_loops(short=(2.914, 2.92), long=(3.0, 3.0)),
     lambda: e01_loops(short=(14.8, 16.43), long=(15.6, 16.08), spread=0.04))  # +7 points


def e01_steps(first=20.89, host=4.866, med=16.43, iqr=0.19):
    return rows(("E01", e01.FIRST_STEP, "step_latency", "value", first),
                ("E01", e01.HOST_RETURN, "step_latency", "median", host),
                ("E01", e01.SYNCHRONIZED_WARMED, "step_latency", "median", med),
                ("E01", e01.SYNCHRONIZED_WARMED, "step_latency", "iqr", iqr))


case("C03", e01_steps, lambda: e01_steps(first=16.5), lambda: e01_steps(first=18.1, iqr=0.5))


def e01_sampled(host=4.866, med=16.43, host_sd=0.3, sd=0.2, paired=True):
    """E01's step rows and the raw samples of its host-return series (20 calls), those calls
    timed to completion (``paired``; else a run from before they were) and the synchronized
    series (400): C04's ratio is judged by their own interval."""
    frame = e01_steps(host=host, med=med, iqr=1.349 * sd)
    series = [("E01", e01.HOST_RETURN, "step_latency", sample_series(host, host_sd, 20)),
              ("E01", e01.SYNCHRONIZED_WARMED, "step_latency", sample_series(med, sd, 400, 1))]
    if paired:
        frame = pd.concat([frame, rows(("E01", e01.HOST_RETURN_COMPLETED, "step_latency",
                                        "median", med))], ignore_index=True)
        series.append(("E01", e01.HOST_RETURN_COMPLETED, "step_latency",
                       sample_series(med, sd, 20, 2)))
    return with_samples(frame, *series)


def e01_rounds(ratios=(0.29, 0.30, 0.31, 0.28, 0.30, 0.30), med=16.43):
    """E01's step rows with its host-return calls spread over the loop rounds: each round's
    median at return is ``ratio`` x that round's median to completion (``med``, steady)."""
    r = np.asarray(ratios, dtype=float)
    frame = e01_steps(host=float(np.median(r)) * med, med=med)
    frame = pd.concat([frame, rows(("E01", e01.HOST_RETURN_COMPLETED, "step_latency",
                                    "median", med))], ignore_index=True)
    return with_samples(frame, ("E01", e01.HOST_RETURN, e01.ROUND_MEDIAN, r * med),
                        ("E01", e01.HOST_RETURN_COMPLETED, e01.ROUND_MEDIAN, [med] * len(r)))


# the rounds: all near 30%; all near 99% (the host-bound H200); from 76% to 99%, the host's
# speed drifting through the job, so the ratio's median over them is not clear of 90%
case("C04", e01_rounds, lambda: e01_rounds((0.99, 0.98, 0.99, 1.0, 0.97, 0.99)),
     lambda: e01_rounds((0.76, 0.99, 0.80, 0.97, 0.85, 0.95)))
