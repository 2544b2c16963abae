"""perflab.instruments.stats.bracketed_floor_pct: the floor of a run against the geometric mean
of its two neighbours, on seeded simulations (no timing)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import t as student_t

from perflab.instruments import stats


def _aa(log_levels):
    """100 ln(x_i / sqrt(x_{i-1} x_{i+1})) of every interior run."""
    L = np.asarray(log_levels, float)
    return 100 * (L[1:-1] - (L[:-2] + L[2:]) / 2)


def test_equals_the_prediction_bound_from_a_straight_line_fit():
    """The correlated A/A ratios carry exactly the residual variance of a line fitted to the
    runs' log levels, with R - 2 degrees of freedom."""
    rng = np.random.default_rng(0)
    for runs in (3, 4, 7):
        L = 0.05 * np.arange(runs) + 0.1 * rng.standard_normal(runs)
        x = np.arange(runs)
        res = L - np.polyval(np.polyfit(x, L, 1), x)
        s = 100 * np.sqrt((res ** 2).sum() / (runs - 2))
        want = 100 * np.expm1(student_t.ppf(0.975, runs - 2) * np.sqrt(1.5) * s / 100)
        assert stats.bracketed_floor_pct(_aa(L)) == pytest.approx(want, rel=1e-9)
    # a purely linear drift leaves nothing: the floor is 0
    assert stats.bracketed_floor_pct(_aa(0.2 * np.arange(6))) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("runs", [3, 4, 6])
def test_a_further_bracketed_aa_comparison_lands_outside_at_most_5_percent(runs):
    """Linear drift plus run noise; the comparison shares its two baselines with the floor's
    runs, as in whatif (intervention between baselines 0 and 1)."""
    rng = np.random.default_rng(runs)
    n, out = 4000, 0
    for _ in range(n):
        L = 0.1 * np.arange(runs) * 2 + 0.05 * rng.standard_normal(runs)
        x = 0.1 + 0.05 * rng.standard_normal()
        q = 100 * np.log1p(stats.bracketed_floor_pct(_aa(L)) / 100)
        out += abs(100 * (x - (L[0] + L[1]) / 2)) > q
    assert out / n <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / n), out / n  # 5 %, within 2 s.e.
    assert out / n >= 0.03  # and not a floor so wide it says nothing


def test_drift_widens_the_exchangeable_floor_not_this_one():
    rng = np.random.default_rng(1)
    L = np.log(16) + np.log(29 / 16) * np.arange(6) / 5 + 0.03 * rng.standard_normal(6)
    assert stats.bracketed_floor_pct(_aa(L)) < 0.2 * stats.process_floor_pct(np.exp(L))


def test_bad_input_is_one_line():
    with pytest.raises(ValueError, match="three runs"):
        stats.bracketed_floor_pct([])
    with pytest.raises(ValueError, match="finite"):
        stats.bracketed_floor_pct([1.0, float("nan")])
    with pytest.raises(ValueError, match="confidence"):
        stats.bracketed_floor_pct([1.0], confidence=1.0)
