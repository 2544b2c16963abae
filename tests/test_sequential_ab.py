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


# ------------------------------------------------------------------ a claim's own threshold
#: Monte-Carlo slack of a share over CLAIM_RUNS seeded A/Bs (about two standard errors)
CLAIM_RUNS, CLAIM_SLACK = 200, 0.06


def test_a_claim_the_fixed_contract_decides_the_adaptive_decides_too():
    """C40's shape: the change (-13 %) sits 7 points from the claim's threshold (-20 %), more
    than C00's floor for the fixed contract's 24 pairs (5 %) but less than its floor for the
    few pairs a stop on 0 fills. Stopping on the claim's threshold decides the claim at
    least as often as the fixed contract; stopping on 0 (the rule before) does not."""
    own = BENCH.claim_rates(-13.0, -20.0, CLAIM_RUNS, seed=11)
    assert own["fixed"] >= 0.6, own  # a case the fixed contract decides
    assert own["adaptive"] >= own["fixed"] - CLAIM_SLACK, own
    assert own["mean_blocks"] < own["max_blocks"], own  # and it stops before the budget
    on_zero = BENCH.claim_rates(-13.0, -20.0, CLAIM_RUNS, seed=11, thresholds=seq.NO_CHANGE)
    assert on_zero["adaptive"] < own["fixed"] - 0.2, on_zero  # the regression it fixes


def test_a_claim_inside_the_noise_stays_undecided_under_both_rules():
    """The change sits on the claim's threshold: neither contract decides the claim (beyond
    the error rate), and the adaptive rule says so after its budget, not sooner."""
    r = BENCH.claim_rates(-20.0, -20.0, CLAIM_RUNS, seed=12)
    assert r["fixed"] <= seq.ALPHA + CLAIM_SLACK / 2, r
    assert r["adaptive"] <= seq.ALPHA + CLAIM_SLACK / 2, r


def test_within_the_floor_is_called_only_inside_the_floor_the_budget_allows():
    """Values centred on the threshold, spread so that the interval lies inside the floor
    for the pairs run (10 %) but not inside the floor for the budget's (2 %): undecided, not
    'within the floor' (the claim at the budget's pairs might still decide it)."""
    x = np.random.default_rng(13).normal(5.0, 2.0, 40)
    narrowing = seq.against(x, (5.0,), lambda n: 10.0 if n < 80 else 2.0, max_n=80)
    assert narrowing.state == seq.UNDECIDED and not narrowing.futile, narrowing
    flat = seq.against(x, (5.0,), 10.0, max_n=80)
    assert flat.state == f"{seq.WITHIN_FLOOR} of 5 %", flat


def test_every_threshold_must_be_decided_and_beyond_the_floor_for_the_pairs_run():
    x = np.random.default_rng(14).normal(-13.0, 1.0, 40)
    both = seq.against(x, (-9.09, 11.1), 1.0)
    assert both.decided and both.parts == ((-9.09, seq.FASTER), (11.1, seq.FASTER))
    assert both.line("%", "blocks").startswith("decided: lower than -9.09 %; lower than 11.1 %")
    # the first edge 3.9 points away: decided against a 2 % floor, not against a 5 % one
    assert seq.against(x, (-9.09, 11.1), lambda n: 2.0).decided
    # against a 5 % floor the claim can never decide that edge: settled, within its floor
    wide = seq.against(x, (-9.09, 11.1), lambda n: 5.0, max_n=400)
    assert wide.parts == ((-9.09, seq.WITHIN_FLOOR), (11.1, seq.FASTER)), wide
    # a spread the interval cannot yet place: undecided, and the budget is not spent
    noisy = seq.against(x[:12] * 4 + 39, (-9.09, 11.1), 1.0, max_n=400)
    assert not noisy.decided and not noisy.futile, noisy
    assert noisy.line("%", "blocks").startswith("undecided within budget (12 blocks")


def test_context_interleaved_stops_on_the_thresholds_it_is_given(tiny_contract):
    from perflab.instruments import ab

    ctx = _ctx(tiny_contract)
    ctx.stop_floor = lambda pairs: 5.0
    ctx.interleaved(_sleeper(1), _sleeper(4), blocks=12, inner=3, warmup=1,
                    variant="b_minus_a", stop_at=(1000.0,))
    (row,) = _decisions(ctx)
    assert ab.decision_line(row["window"]).startswith("decided: lower than 1000 %"), row
