"""perflab.instruments.stats: summaries checked against values worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perflab.instruments import stats


def test_summarize_known_data_by_hand():
    # sorted [1, 2, 3, 4, 100], n = 5, linear interpolation at (n-1)*q:
    # p25 at position 1 -> 2, median at 2 -> 3, p75 at 3 -> 4, IQR 2
    # mean 110/5 = 22; deviations -21 -20 -19 -18 78 -> squares sum 7610, /4 = 1902.5
    # median + 3*IQR = 9 -> only 100 is in the tail
    s = stats.summarize([4, 100, 1, 3, 2])
    assert s["median"] == 3.0
    assert s["p25"] == 2.0
    assert s["p75"] == 4.0
    assert s["iqr"] == 2.0
    assert s["mean"] == 22.0
    assert s["std"] == pytest.approx(math.sqrt(1902.5))
    assert s["min"] == 1.0
    assert s["max"] == 100.0
    assert s["count"] == 5.0
    assert s["tail_count"] == 1.0


def test_summarize_interpolates_quartiles():
    # [1, 2, 3, 4]: p25 at 0.75 -> 1.75, median at 1.5 -> 2.5, p75 at 2.25 -> 3.25
    s = stats.summarize([1.0, 2.0, 3.0, 4.0])
    assert s["p25"] == pytest.approx(1.75)
    assert s["median"] == pytest.approx(2.5)
    assert s["p75"] == pytest.approx(3.25)
    assert s["iqr"] == pytest.approx(1.5)
    assert s["tail_count"] == 0.0


def test_summarize_keys_and_types():
    s = stats.summarize([0.5, 0.25, 0.75])
    assert tuple(s) == stats.SUMMARY_STATISTICS
    assert all(type(v) is float for v in s.values())


@pytest.mark.parametrize(
    "x, expected_tail",
    [
        (18.0, 0),  # exactly median + 3*IQR: not above, not in the tail
        (18.001, 1),
        (1000.0, 1),
    ],
)
def test_tail_count_threshold_is_strictly_above_median_plus_3_iqr(x, expected_tail):
    # [0..8] + [x] with x the maximum: p25 = 2.25, median = 4.5, p75 = 6.75 whatever x is,
    # so IQR = 4.5 and the threshold is 4.5 + 13.5 = 18
    s = stats.summarize([*range(9), x])
    assert (s["p25"], s["median"], s["p75"]) == (2.25, 4.5, 6.75)
    assert s["tail_count"] == expected_tail


def test_tail_count_counts_every_sample_above_threshold():
    # 21 of 400, as in the chapter: 379 samples in a tight band, 21 far out
    base = [10.0 + (i % 10) * 0.01 for i in range(379)]
    s = stats.summarize(base + [50.0] * 21)
    assert s["tail_count"] == 21.0
    assert s["count"] == 400.0


def test_tail_count_with_zero_iqr():
    s = stats.summarize([5.0] * 9 + [6.0])
    assert s["iqr"] == 0.0
    assert s["tail_count"] == 1.0


def test_single_sample():
    s = stats.summarize([7.0])
    assert s["std"] == 0.0
    assert s["iqr"] == 0.0
    assert s["median"] == s["mean"] == s["min"] == s["max"] == 7.0
    assert s["count"] == 1.0
    assert s["tail_count"] == 0.0


@pytest.mark.parametrize(
    "samples",
    [[], [1.0, float("nan")], [1.0, float("inf")], [float("-inf")]],
    ids=["empty", "nan", "inf", "-inf"],
)
def test_summarize_rejects_empty_or_non_finite(samples):
    with pytest.raises(ValueError):
        stats.summarize(samples)


@pytest.mark.parametrize(
    "diff, noise, expected",
    [
        (2.0, 1.0, True),
        (-2.0, 1.0, True),  # a slowdown is resolved too
        (1.0, 1.0, False),  # equal to the noise: inside it
        (0.5, 1.0, False),
        (0.5, -1.0, False),  # noise compared by magnitude
        (0.1, 0.0, True),
        (0.0, 0.0, False),
    ],
)
def test_resolved(diff, noise, expected):
    assert stats.resolved(diff, noise) is expected


def test_block_spread():
    assert stats.block_spread([3.0, 1.5, 2.0, 2.5]) == (1.5, 3.0)
    assert stats.block_spread([4.0]) == (4.0, 4.0)
    lo, hi = stats.block_spread([1, 2])
    assert type(lo) is float and type(hi) is float


def test_block_spread_rejects_empty():
    with pytest.raises(ValueError):
        stats.block_spread([])


def test_relative_change():
    assert stats.relative_change(110.0, 100.0) == pytest.approx(0.10)
    assert stats.relative_change(50.0, 100.0) == pytest.approx(-0.5)
    with pytest.raises(ZeroDivisionError):
        stats.relative_change(1.0, 0.0)


# --------------------------------------------------------------------------- block bootstrap


def _ar1(rng, n: int, phi: float) -> np.ndarray:
    """An autocorrelated series (AR(1), unit innovations) of median ~0."""
    e = rng.normal(size=n + 50)
    x = np.empty_like(e)
    x[0] = e[0]
    for i in range(1, e.size):
        x[i] = phi * x[i - 1] + e[i]
    return x[50:]


def _median_of_first(g):
    return np.median(g[:, 0], axis=-1)


def test_block_bootstrap_covers_the_median_of_an_autocorrelated_series():
    """Seeded: over 60 AR(1) series (phi 0.6, 400 steps) the moving-block interval of the
    median covers the true median (0) in at least 85% of them, where resampling single steps
    (blocks of one) covers visibly fewer: blocks keep the dependence a step series has."""
    rng = np.random.default_rng(7)
    blocks = singles = 0
    for k in range(60):
        x = _ar1(rng, 400, 0.6)
        _, lo, hi = stats.block_bootstrap_ci([x], _median_of_first, n_resamples=400, seed=k)
        blocks += lo <= 0 <= hi
        lo1, hi1 = stats._bootstrap_ci((x,), np.median, 0.95, 400, False, k)
        singles += lo1 <= 0 <= hi1
    assert blocks >= 51, blocks
    assert singles < blocks, (singles, blocks)


def test_block_bootstrap_resamples_one_group_together():
    """Series of one group share their resampled steps: the difference of two identical series
    is exactly 0 in every resample; two groups are resampled apart, so it is not."""
    x = np.random.default_rng(0).normal(size=100)
    same = stats.block_bootstrap_ci([np.vstack([x, x])],
                                    lambda g: np.median(g[:, 0] - g[:, 1], axis=-1))
    assert same == (0.0, 0.0, 0.0)
    _, lo, hi = stats.block_bootstrap_ci([x, x], lambda a, b: _median_of_first(a)
                                         - _median_of_first(b))
    assert lo < 0 < hi
    assert stats.block_length(400) == 7 and stats.block_length(1) == 1


def test_block_bootstrap_rejects_an_empty_group():
    with pytest.raises(ValueError, match="at least one sample"):
        stats.block_bootstrap_ci([[]], _median_of_first)
