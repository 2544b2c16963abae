"""The A/A floor and the judgement it gates, on seeded synthetic noise.

The floor (:func:`perflab.instruments.stats.aa_floor_pct`) bounds the statistic
:func:`perflab.instruments.stats.judge` decides on — the median paired block difference in
% — under A/A. These tests simulate whole interleaved runs of a 3 ms step:
lognormal per-call noise, a multiplicative effect per block, a slow drift
across the run (sides placed AB, BA, ... in time, as :func:`perflab.instruments.timing.interleaved_ab`
runs them) and a fixed offset between the two copies of the step (two
independent models are never exactly alike). One A/A run gives the floor,
another run with a fresh pair of copies is judged against it: under A/A it
must be resolved at most 5% of the time, with a planted effect of twice the
floor at least 80% of the time.
"""

from __future__ import annotations

import numpy as np
import pytest

from perflab.instruments import stats

RUNS = 200  # simulated runs per question; seeded, so the rates below are exact for this seed
BLOCKS, INNER, STEP_MS = 12, 30, 3.0


def simulate(rng, *, effect_pct=0.0, runs=RUNS, call_sd=0.05, block_sd=0.01, drift=0.02,
             copy_sd=0.005, blocks=BLOCKS):
    """Block medians (runs, blocks) of A and of B for ``runs`` interleaved runs.

    ``effect_pct`` (a scalar or one value per run) multiplies every call of B.
    """
    BLOCKS = blocks  # noqa: N806 (the module's default, for this run)
    slots = np.arange(2 * BLOCKS)
    trend = 1 + drift * np.sin(2 * np.pi * slots / slots.size
                               + rng.uniform(0, 2 * np.pi, (runs, 1)))
    first = np.arange(BLOCKS) % 2 == 0  # AB in even block pairs, BA in odd ones
    slot_a = 2 * np.arange(BLOCKS) + ~first
    slot_b = 2 * np.arange(BLOCKS) + first
    copy = 1 + rng.normal(0, copy_sd, (runs, 1))
    effect = 1 + np.broadcast_to(np.asarray(effect_pct, float), (runs,))[:, None] / 100

    def side(slot):
        calls = STEP_MS * rng.lognormal(0, call_sd, (runs, BLOCKS, INNER))
        return np.median(calls, axis=2) * rng.lognormal(0, block_sd, (runs, BLOCKS)) * trend[:,
                                                                                            slot]

    return side(slot_a), side(slot_b) * copy * effect


def floors_of(a, b, pairs=None):
    return np.array([stats.aa_floor_pct(x, y, pairs=pairs) for x, y in zip(a, b)])


@pytest.fixture(scope="module")
def calibrated():
    """Per run: the floor from its own A/A, and an independent A/A judged against it."""
    rng = np.random.default_rng(2024)
    floor = floors_of(*simulate(rng))
    a, b = simulate(rng)
    return rng, floor, [stats.judge(x, y, noise_floor_pct=f) for x, y, f in zip(a, b, floor)]


def test_false_positive_rate_under_aa_is_at_most_5_percent(calibrated):
    _, floor, judged = calibrated
    false_positive = np.mean([j.resolved for j in judged])
    assert false_positive <= 0.05, false_positive
    # the control: significance alone (no floor) is fooled by the copies' offset more often,
    # so it is the floor that keeps the rate down here
    assert np.mean([j.significant for j in judged]) > 0.05
    assert 0 < np.median(floor) < 10


def test_power_at_twice_the_floor_is_at_least_80_percent(calibrated):
    rng, floor, _ = calibrated
    a, b = simulate(rng, effect_pct=2 * floor)
    judged = [stats.judge(x, y, noise_floor_pct=f) for x, y, f in zip(a, b, floor)]
    power = np.mean([j.resolved and j.effect > 0 for j in judged])
    assert power >= 0.80, power
    # and at half the floor the judgement mostly declines (it is the floor that gates)
    a, b = simulate(rng, effect_pct=0.5 * floor)
    assert np.mean([stats.judge(x, y, noise_floor_pct=f).resolved
                    for x, y, f in zip(a, b, floor)]) < 0.5


def test_floor_is_the_bound_of_the_judged_statistic():
    a = [10.0, 10.0, 10.0, 10.0]
    # every paired difference 0.2 ms: every resample's median is 0.2 ms = 2% of A
    assert stats.aa_floor_pct(a, [10.2] * 4) == pytest.approx(2.0)
    assert stats.judge(a, [10.2] * 4).relative_pct == pytest.approx(2.0)
    # one pair: the floor is that pair's |difference| in %
    assert stats.aa_floor_pct([5.0], [4.5]) == pytest.approx(10.0)
    # the sign does not matter, and identical sides have no floor
    assert stats.aa_floor_pct(a, [9.8] * 4) == pytest.approx(2.0)
    assert stats.aa_floor_pct(a, a) == 0.0


def test_floor_grows_with_confidence_and_is_seeded():
    rng = np.random.default_rng(5)
    a, b = 3 + rng.normal(0, 0.05, 12), 3 + rng.normal(0, 0.05, 12)
    lo, hi = (stats.aa_floor_pct(a, b, confidence=c) for c in (0.5, 0.95))
    assert 0 < lo < hi
    assert stats.aa_floor_pct(a, b) == stats.aa_floor_pct(a, b)
    # above the observed |median difference|: a bound, not an estimate of it
    assert hi > abs(stats.judge(a, b).relative_pct)


def test_floor_rejects_bad_input():
    with pytest.raises(ValueError, match="as many blocks"):
        stats.aa_floor_pct([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="as many blocks"):
        stats.aa_floor_pct([], [])
    with pytest.raises(ValueError, match="confidence"):
        stats.aa_floor_pct([1.0], [1.0], confidence=1.5)


def test_a_longer_aa_bounds_a_shorter_ab_with_less_noise_and_the_same_rates():
    """C00 runs 36 pairs and bounds a median of 12 of them: the floor of a 12-pair A/B.

    Against floors from 12-pair A/As: about the same size (it bounds the same statistic),
    a smaller run-to-run spread (the point of the longer A/A), and the judgement it gates
    keeps its false-positive rate and its power.
    """
    rng = np.random.default_rng(7)
    short = floors_of(*simulate(rng))
    long = floors_of(*simulate(rng, blocks=36), pairs=BLOCKS)
    assert 0.7 < np.median(long) / np.median(short) < 1.3

    def spread(f):  # p90 - p10 over the median: the floor's run-to-run spread
        return np.subtract(*np.percentile(f, [90, 10])) / np.median(f)

    assert spread(long) < 0.8 * spread(short), (spread(long), spread(short))
    a, b = simulate(rng)
    false_positive = np.mean([stats.judge(x, y, noise_floor_pct=f).resolved
                              for x, y, f in zip(a, b, long)])
    assert false_positive <= 0.05, false_positive
    a, b = simulate(rng, effect_pct=2 * long)
    power = np.mean([(j := stats.judge(x, y, noise_floor_pct=f)).resolved and j.effect > 0
                     for x, y, f in zip(a, b, long)])
    assert power >= 0.80, power


def test_fewer_pairs_a_wider_floor():
    rng = np.random.default_rng(11)
    a, b = 3 + rng.normal(0, 0.1, 36), 3 + rng.normal(0, 0.1, 36)
    by_pairs = [stats.aa_floor_pct(a, b, pairs=m) for m in (4, 12, 36)]
    assert by_pairs[0] > by_pairs[1] > by_pairs[2] > 0
    # the default is the A/A's own count
    assert stats.aa_floor_pct(a, b) == stats.aa_floor_pct(a, b, pairs=36)
    with pytest.raises(ValueError, match="at least one block pair"):
        stats.aa_floor_pct(a, b, pairs=0)
