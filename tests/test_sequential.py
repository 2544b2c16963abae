"""perflab.instruments.sequential: error rates that survive peeking, shown by seeded simulation.

Each simulation looks after every observation (the worst case for peeking) and stops on the
first decision. Under A/A the false-positive rate stays at or under 5 %, where a fixed-count
95 % interval peeked at the same way does not; at twice the floor the power is at least 80 %
within a budget of twice the fixed count; and a clear effect stops far earlier than the fixed
count (the calls saved). Seeded: the rates are exact properties of these draws.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from perflab.instruments import sequential as seq

RUNS = 600
LOOKS = 100


def _draws(kind: str, rng: np.random.Generator, n: int) -> np.ndarray:
    """Zero-median values: normal, heavy-tailed (t, 3 dof), skewed (lognormal, sigma 1), and
    block-median-like timing noise with occasional outliers."""
    if kind == "normal":
        return rng.normal(0, 1, n)
    if kind == "t3":
        return rng.standard_t(3, n)
    if kind == "lognormal":
        return rng.lognormal(0, 1, n) - 1.0  # median of lognormal(0, 1) is 1
    x = rng.normal(0, 1, n)
    out = rng.random(n) < 0.05
    return np.where(out, x + rng.exponential(8, n), x) - 0.0


def _first_decision(x: np.ndarray, statistic: str) -> bool:
    for n in range(seq.MIN_N, x.size + 1):
        _, lo, hi = seq.interval(x[:n], statistic=statistic)
        if lo > 0 or hi < 0:
            return True
    return False


@pytest.mark.parametrize("kind", ["normal", "t3", "lognormal", "outliers"])
def test_false_positives_stay_under_alpha_when_looking_after_every_value(kind):
    rng = np.random.default_rng(11)
    hits = 0
    for _ in range(RUNS):
        x = _draws(kind, rng, LOOKS)
        if kind == "outliers":  # centre on the true median of that mixture
            x = x - np.median(_draws(kind, np.random.default_rng(0), 200_000))
        hits += _first_decision(x, "median")
    assert hits / RUNS <= seq.ALPHA


def test_the_mean_sequence_holds_on_well_behaved_values():
    rng = np.random.default_rng(12)
    hits = sum(_first_decision(rng.normal(0, 1, LOOKS), "mean") for _ in range(RUNS))
    assert hits / RUNS <= seq.ALPHA


def test_a_fixed_count_interval_peeked_at_does_inflate_the_error():
    """The reason for the module: the same looks at an ordinary 95 % t-interval reject a true
    null far more than 5 % of the time (this test fails if peeking were harmless)."""
    from scipy.stats import t

    rng = np.random.default_rng(13)
    hits = 0
    for _ in range(RUNS):
        x = rng.normal(0, 1, LOOKS)
        for n in range(seq.MIN_N, LOOKS + 1):
            m, s = x[:n].mean(), x[:n].std(ddof=1)
            h = t.ppf(0.975, n - 1) * s / math.sqrt(n)
            if m - h > 0 or m + h < 0:
                hits += 1
                break
    assert hits / RUNS > 3 * seq.ALPHA


def _ab_run(effect: float, floor: float, max_n: int, rng) -> seq.Decision:
    x = rng.normal(effect, 1, max_n)
    for n in range(seq.MIN_N, max_n + 1):
        d = seq.compare(x[:n], floor, max_n=max_n)
        if d.decided or d.futile:
            return d
    return d


@pytest.mark.parametrize("fixed_blocks", [12, 36])
def test_ab_rule_error_power_and_savings(fixed_blocks):
    """The A/B rule with the floor an A/A of ``fixed_blocks`` pairs gives (about 1.96 x 1.25
    sigma / sqrt(m): the 95 % bound of a median of m paired differences), a budget of twice
    that count: A/A calls a change <= 5 %; at twice the floor >= 80 % are called, in fewer
    blocks on average than the budget; at five times the floor, fewer than the fixed count."""
    floor = 1.96 * 1.25 / math.sqrt(fixed_blocks)
    budget = 2 * fixed_blocks
    rng = np.random.default_rng(14)
    aa = [_ab_run(0.0, floor, budget, rng) for _ in range(400)]
    assert np.mean([d.state in (seq.FASTER, seq.SLOWER) for d in aa]) <= seq.ALPHA
    at2 = [_ab_run(2 * floor, floor, budget, rng) for _ in range(400)]
    assert np.mean([d.state == seq.SLOWER for d in at2]) >= 0.8
    assert np.mean([d.n for d in at2]) < budget
    at5 = [_ab_run(-5 * floor, floor, budget, rng) for _ in range(200)]
    assert np.mean([d.state == seq.FASTER for d in at5]) >= 0.95
    assert np.mean([d.n for d in at5]) < fixed_blocks


def test_a_threshold_far_away_is_decided_early_and_one_on_it_is_not():
    rng = np.random.default_rng(15)
    far = seq.Rounds(25.0, max_n=200)
    while not far.done:
        far.add(rng.normal(70, 5, 4))
    assert far.decision.state == seq.ABOVE and far.decision.n <= 12
    assert "decided: above 25 %" in far.decision.line("%", "steps")
    on = seq.Rounds(25.0, max_n=80)
    while not on.done:
        on.add(rng.normal(25, 5, 4))
    d = on.decision
    assert not d.decided and d.futile and d.low < 25 < d.high
    assert d.line("%", "steps").startswith("undecided within budget (")


def test_inside_a_band_is_a_decision_and_more_n_says_what_would_decide():
    rng = np.random.default_rng(16)
    x = rng.normal(0, 1, 400)
    d = seq.decide(x, (-1.0, 1.0))
    assert d.state == seq.INSIDE
    near = seq.decide(rng.normal(1.3, 1, 12), 1.0)
    assert not near.decided and near.more_n is not None and math.isfinite(near.more_n)
    assert f"about {math.ceil(near.more_n)} more" in near.line()


def test_compare_within_the_floor_and_without_a_floor():
    rng = np.random.default_rng(17)
    tight = seq.compare(rng.normal(0, 0.2, 200), 2.0)
    assert tight.state == seq.WITHIN_FLOOR
    no_floor = seq.compare(rng.normal(-3, 1, 30), None)
    assert no_floor.state == seq.FASTER
    small = seq.compare(rng.normal(0.3, 0.1, 60), 1.0)  # real but under the floor
    assert small.state == seq.WITHIN_FLOOR


def test_too_few_values_and_bad_input():
    assert not seq.decide([1.0, 2.0], 0.0).decided
    with pytest.raises(ValueError, match="non-finite"):
        seq.interval([1.0, float("nan"), 2.0])
    with pytest.raises(ValueError, match="lo <= hi"):
        seq.decide([1.0] * 10, (2.0, 1.0))
    with pytest.raises(ValueError, match="statistic"):
        seq.interval([1.0] * 10, statistic="mode")


def test_the_sampling_contract_is_read_in_one_place():
    from perflab.kit import sampling

    assert sampling.rule({}) == sampling.ADAPTIVE
    cfg = {"sampling": {"rule": "fixed", "budget_s": 60, "job_budget_s": {"E05": 9.5}}}
    assert sampling.rule(cfg) == sampling.FIXED
    assert sampling.budget_s(cfg) == 60.0 and sampling.job_budget_s(cfg, "E05") == 9.5
    assert sampling.job_budget_s(cfg, "C00") is None
    with pytest.raises(ValueError, match="sampling.rule"):
        sampling.rule({"sampling": {"rule": "sometimes"}})


def test_budget_parser_reads_units_and_refuses_nonsense():
    from perflab.kit.sampling import parse_budget_s

    assert [parse_budget_s(t) for t in ("60", "60s", "2m", "1.5min", "1h")] == [
        60.0, 60.0, 120.0, 90.0, 3600.0]
    for bad in ("0", "-1", "ten", "5d", ""):
        with pytest.raises(ValueError, match="bad budget"):
            parse_budget_s(bad)
