"""The stopping rule as W01 and the adaptive interleaved A/B apply it (issue 40, item 2).

Seeded simulations of block medians (lognormal noise, a shared drift per pair, occasional
outliers: scripts/bench_sequential.py) run through timing.rounds_until_decided, the loop
timing.sequential_ab runs, at W01's round size and maximum: false positives under A/A at or
under 5 %, power at twice the floor at least 80 %, and fewer stretches timed than the fixed
contract. Then the loop on real calls: a clear change stops early, a change sitting at the
floor runs to the maximum, a budget stops it, and the fixed rule is interleaved_ab unchanged.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from experiments import load_script

from perflab.instruments import sequential as seq
from perflab.instruments import timing

BENCH = load_script("bench_sequential")
RUNS = 1000
#: Monte-Carlo slack: about two standard errors of a rate near 5 % (resp. 80 %) over RUNS
FPR_SLACK, POWER_SLACK = 0.015, 0.025


@pytest.fixture(scope="module")
def aa():
    return BENCH.rates(0.0, RUNS, seed=1)


def test_false_positives_under_aa_at_most_alpha(aa):
    assert aa["changed"] <= seq.ALPHA + FPR_SLACK, aa


def test_power_at_twice_the_floor(aa):
    r = BENCH.rates(2 * BENCH.FLOOR_PCT, RUNS, seed=2)
    assert r["slower"] >= 0.8 - POWER_SLACK, r


def test_fewer_stretches_than_the_fixed_contract_where_the_change_is_clear():
    r = BENCH.rates(2 * BENCH.FLOOR_PCT, 300, seed=3)
    assert r["mean_blocks"] < BENCH.FIXED_STRETCHES, r


def test_without_a_floor_aa_still_rarely_calls_a_change():
    r = BENCH.rates(0.0, 400, seed=4, floor_pct=0.0)
    assert r["changed"] <= seq.ALPHA + 0.025, r
    assert r["within"] == 0.0  # with no floor nothing is decided inside it


def _rounds(effect_pct: float, noise: float, seed: int):
    """run_round for rounds_until_decided: B ``effect_pct`` % slower, lognormal noise."""
    rng = np.random.default_rng(seed)
    a, b = [], []

    def run_round(k):
        for _ in range(k):
            a.append(10 * rng.lognormal(0, noise))
            b.append(a[-1] * (1 + effect_pct / 100) * rng.lognormal(0, noise))
        return a, b
    return run_round


def test_a_clear_change_stops_at_the_first_look_that_can_decide():
    d = timing.rounds_until_decided(_rounds(-20.0, 0.01, 5), floor_pct=2.0, max_blocks=72)
    assert d.state == seq.FASTER
    assert d.n < 72 / 4


def test_a_change_at_the_floor_runs_to_the_maximum_undecided():
    # block noise wider than the floor: neither beyond it nor inside it within 24 blocks
    d = timing.rounds_until_decided(_rounds(2.0, 0.03, 6), floor_pct=2.0, max_blocks=24)
    assert d.state == seq.UNDECIDED and d.n == 24
    assert d.line("%", "blocks").startswith("undecided within budget (24 blocks")


def test_an_expired_budget_stops_after_the_round_under_way():
    d = timing.rounds_until_decided(_rounds(0.0, 0.05, 7), floor_pct=0.5, max_blocks=72,
                                    expired=lambda: True)
    assert d.n == timing.ROUND_BLOCKS and not d.decided


def _sleeper(ms: float):
    return lambda: time.sleep(ms / 1e3)


def test_sequential_ab_on_real_calls_stops_early_on_a_clear_change():
    res, d = timing.sequential_ab(_sleeper(1), _sleeper(4), max_blocks=40, inner=1, warmup=1,
                                  sync=lambda: None, floor_pct=5.0)
    assert d.state == seq.SLOWER
    assert len(res.a_blocks) == len(res.b_blocks) == d.n < 40
    assert res.order[:2] == ["AB", "BA"]


def test_the_fixed_rule_is_interleaved_ab_unchanged():
    calls = []
    res = timing.interleaved_ab(lambda: calls.append("A"), lambda: calls.append("B"),
                                blocks=4, inner=2, warmup=1, sync=lambda: None)
    assert calls == ["A", "B"] + ["A"] * 2 + ["B"] * 2 + ["B"] * 2 + ["A"] * 2 \
        + ["A"] * 2 + ["B"] * 2 + ["B"] * 2 + ["A"] * 2
    assert len(res.a_blocks) == 4 and len(res.a_samples) == 8


# ------------------------------------------------------------------ the chapter's A/Bs


def test_adaptive_blocks_are_shorter_and_at_most_twice_the_fixed_calls():
    for blocks, inner in ((12, 30), (8, 3), (24, 30), (2, 5), (6, 1)):
        most, small = timing.adaptive_sizes(blocks, inner)
        assert small < inner or inner == 1
        assert most * small <= timing.MAX_CALLS_FACTOR * blocks * inner
        assert most >= timing.ROUND_BLOCKS


def _ctx(tiny_contract, **sampling):
    from perflab.pipeline import runner

    contract = {**tiny_contract("E07"), **({"sampling": sampling} if sampling else {})}
    return runner.Context("E07", contract, log=lambda m: None)


def _decisions(ctx) -> list[dict]:
    from perflab.core.names import SAMPLING_DECISION

    return [r for r in ctx.rows if r["metric"] == SAMPLING_DECISION]


def test_context_interleaved_under_the_fixed_rule_runs_the_configured_blocks(tiny_contract):
    ctx = _ctx(tiny_contract, rule="fixed")
    ctx.stop_floor = lambda pairs: 5.0
    res = ctx.interleaved(_sleeper(1), _sleeper(4), blocks=3, inner=2, warmup=0,
                          variant="b_minus_a")
    assert len(res.a_blocks) == 3 and len(res.a_samples) == 6
    assert _decisions(ctx) == []


def test_context_interleaved_adaptive_stops_a_clear_change_and_says_so(tiny_contract):
    from perflab.instruments import ab

    ctx = _ctx(tiny_contract)  # no sampling section: the default rule, adaptive
    ctx.stop_floor = lambda pairs: 5.0
    res = ctx.interleaved(_sleeper(1), _sleeper(4), blocks=12, inner=3, warmup=1,
                          variant="b_minus_a")
    most, small = timing.adaptive_sizes(12, 3)
    assert len(res.a_samples) == small * len(res.a_blocks)
    assert len(res.a_samples) < 12 * 3 and len(res.a_blocks) < most  # fewer than fixed
    (row,) = _decisions(ctx)
    assert row["variant"] == "b_minus_a" and row["value"] == len(res.a_blocks)
    assert ab.decision_line(row["window"]).startswith("decided: higher")
    assert not ab.undecided(row["window"])
    from perflab.core.names import SAMPLING_FIXED_PAIRS

    (filled,) = [r for r in ctx.rows if r["metric"] == SAMPLING_FIXED_PAIRS]
    assert filled["value"] == pytest.approx(len(res.a_blocks) * small / 3)


def test_an_undecided_adaptive_ab_says_undecided_within_budget(tiny_contract):
    from perflab.instruments import ab

    ctx = _ctx(tiny_contract)
    ctx.stop_floor = None  # no floor: only excluding 0 decides, and A is B
    ctx.interleaved(_sleeper(1), _sleeper(1), blocks=2, inner=1, warmup=0, variant="b_minus_a")
    (row,) = _decisions(ctx)
    assert ab.undecided(row["window"]), row["window"]


def test_the_stop_floor_is_read_from_c00_beside_the_job(tmp_path):
    from claims_rows import floor, rows

    from perflab.core import io
    from perflab.pipeline import runner

    job = tmp_path / "e07_optimizers.csv"
    assert runner._run_floor(str(job)) is None  # no C00 results: no floor
    io.atomic_write_csv(tmp_path / "c00_calibration.csv", rows(*floor(3.5)))
    assert runner._run_floor(str(job))(12) == pytest.approx(3.5)
    # a job that writes into its experiment's own folder (E20's cold job) finds it one up
    assert runner._run_floor(str(tmp_path / "e20_compile_cache" / "cold.csv"))(12) == \
        pytest.approx(3.5)
