"""Stop sampling when the answer is decided: anytime-valid intervals for rounds of samples.

A measurement that feeds a verdict (a phase share against its threshold, an A/B's change
against the A/A floor) need not run a fixed count: it can sample in rounds and stop as soon
as its deciding statistic is decided. Looking after every round and stopping on the first
"decided" inflates the error rate of a fixed-sample interval (with 40 looks, a nominal 5 %
test rejects a true null about a quarter of the time), so the interval here is a
**confidence sequence**: with probability at least ``1 - alpha`` it covers the true mean at
*every* sample size at once, so a stopping rule that looks at it after each round keeps its
error rate. Two sequences:

- the **median** (the default; what :func:`perflab.instruments.stats.judge` reports of paired
  differences): distribution-free. Below the true median each value falls with probability
  1/2, so the count of values under it, minus n/2, is a sum of centred coin flips; the
  two-sided normal-mixture boundary (Robbins; Howard, Ramdas, McAuliffe & Sekhon,
  "Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann. Statist. 2021)
  bounds that count at every n at once, and the order statistics whose ranks it allows are
  the interval (Howard & Ramdas, "Sequential estimation of quantiles", Bernoulli 2022). Valid
  for any continuous distribution: skewed, heavy-tailed, with outliers;
- the **mean**: the same boundary on the standardized sum with the sample spread plugged in
  (Waudby-Smith et al., "Time-uniform central limit theory", 2021), widened by a Student-t
  ratio for small ``n``; narrower, but only for well-behaved values (per-stretch shares).

``rho`` sets where the boundary is tightest (:func:`rho_for`). The seeded simulations in
tests/test_sequential.py look after every value and show the false-positive rate at or under
``alpha`` on normal, heavy-tailed, skewed and outlier-ridden values, where an ordinary 95 %
interval peeked at the same way is far above it.

Observations should be roughly independent and not heavy-tailed: block medians, per-step
shares, per-block relative differences — not single raw calls with their outliers.

Two rules read the interval:

- :func:`decide`: against a threshold ``t`` (ABOVE / BELOW: the interval clear of it) or a
  band ``(lo, hi)`` (ABOVE / BELOW: clear of the band; INSIDE: within it);
- :func:`compare`: an A/B's per-block relative differences against the A/A floor, by the
  rule :func:`perflab.instruments.stats.judge` applies to a fixed count (the interval
  excludes 0 and the estimate is beyond the floor), made valid under peeking; INSIDE when the
  whole interval lies within the floor;
- :func:`against`: the same for each threshold a claim sets the change against (2x, 5 %,
  both edges of a band), with a floor that may narrow as observations grow (C00's, for the
  pairs run); :func:`compare` is it with the one threshold 0.

An undecided state carries ``more_n``: about how many more observations would decide it if
the estimate and spread held; ``futile`` when that exceeds what the budget allows, so the
caller stops and says "undecided within budget" instead of sampling on.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Union

import numpy as np

#: the error rate of every sequential decision (perflab.instruments.stats.ALPHA's value)
ALPHA = 0.05
#: fewest observations before the first look (the plug-in spread needs a few)
MIN_N = 5
#: the boundary is tightest at this many observations unless the caller says (rho_for)
DEFAULT_N_OPT = 30

#: futility: looked at only after 1/FUTILITY_AFTER of the budget, and only when about
#: FUTILITY_MARGIN times the budget would still not decide
FUTILITY_AFTER, FUTILITY_MARGIN = 4, 2.0

ABOVE, BELOW, INSIDE, UNDECIDED = "above", "below", "inside", "undecided"
#: the threshold (% of A) an A/B's change is judged against when no claim sets others: 0,
#: its own question (faster, slower, or within the floor)
NO_CHANGE = (0.0,)
#: an A/B's states under :func:`compare` (B minus A: FASTER is a negative change of time)
FASTER, SLOWER, WITHIN_FLOOR = "lower", "higher", "within the floor"
INSTRUMENT = ("perflab.instruments.sequential: normal-mixture confidence sequence "
              "(anytime-valid, alpha {alpha:g})")


@functools.lru_cache(maxsize=4096)
def rho_for(v_opt: float, alpha: float = ALPHA) -> float:
    """The mixture parameter that makes the boundary tightest near intrinsic time ``v_opt``
    (``n`` for the mean's standardized sum, ``n / 4`` for the median's counts).

    Minimizes ``(v + rho) log((v + rho) / (rho alpha^2)) / v^2`` at ``v = v_opt`` (a 1-D
    search on a log grid: cheap, and exact enough for a width)."""
    v = max(float(v_opt), 0.25)
    grid = v * np.logspace(-3, 1, 400)
    width = (v + grid) * np.log((v + grid) / (grid * alpha ** 2))
    return float(grid[int(np.argmin(width))])


def boundary(v: float, rho: float, alpha: float = ALPHA) -> float:
    """The two-sided normal-mixture boundary on a sum whose variance proxy is ``v``."""
    return math.sqrt((v + rho) * math.log((v + rho) / (rho * alpha ** 2)))


@functools.lru_cache(maxsize=4096)
def _t_widening(n: int, alpha: float) -> float:
    """Student-t over normal quantile at ``n - 1`` degrees of freedom (1 for large n), at
    the quarter-alpha tail: the plug-in spread of a handful of values is itself uncertain,
    and the boundary's early looks are where it matters (at the half-alpha tail the
    simulation's error rate was 5.5 %)."""
    from scipy.stats import norm, t

    q = 1 - alpha / 4
    return float(t.ppf(q, n - 1) / norm.ppf(q)) if n > 1 else math.inf


def half_width(n: int, sigma: float, rho: float, alpha: float = ALPHA) -> float:
    """The mean's boundary half-width after ``n`` observations of spread ``sigma``."""
    return sigma / n * boundary(n, rho, alpha) if n >= 1 else math.inf


def _rank_slack(n: int, rho: float, alpha: float) -> float:
    """How far the count below the true median may stray from n/2, at every n at once:
    the count's steps are Bernoulli(1/2), 1/2-sub-Gaussian (variance proxy n/4)."""
    return boundary(n / 4, rho, alpha)


def interval(values: Sequence[float], *, statistic: str = "median", alpha: float = ALPHA,
             n_opt: int = DEFAULT_N_OPT) -> tuple[float, float, float]:
    """(estimate, low, high): the ``1 - alpha`` confidence sequence at the current ``n``.

    ``statistic="median"`` (the default): distribution-free — the order statistics whose
    ranks stay within the counting boundary of n/2; valid for any continuous distribution,
    skewed or heavy-tailed. ``"mean"``: the plug-in normal mixture (t-widened), narrower
    for well-behaved values (per-stretch shares), asymptotic for others."""
    x = np.sort(np.asarray(values, dtype=float))
    if not np.all(np.isfinite(x)):
        raise ValueError("a confidence sequence got a non-finite value")
    n = x.size
    if n < 2:
        m = float(x[0]) if n else math.nan
        return m, -math.inf, math.inf
    if statistic == "mean":
        sigma = float(x.std(ddof=1)) * _t_widening(n, alpha)
        h = half_width(n, sigma, rho_for(float(n_opt), alpha), alpha)
        m = float(x.mean())
        return m, m - h, m + h
    if statistic != "median":
        raise ValueError(f"statistic must be 'median' or 'mean', got {statistic!r}")
    u = _rank_slack(n, rho_for(n_opt / 4, alpha), alpha)
    k_lo, k_hi = math.ceil(n / 2 - u), math.floor(n / 2 + u) + 1
    low = float(x[k_lo - 1]) if k_lo >= 1 else -math.inf
    high = float(x[k_hi - 1]) if k_hi <= n else math.inf
    return float(np.median(x)), low, high


@dataclass(frozen=True)
class Decision:
    """Where the interval stands against the threshold, after ``n`` observations."""

    state: str  # ABOVE, BELOW, INSIDE, UNDECIDED (compare: FASTER, SLOWER, WITHIN_FLOOR too)
    n: int
    estimate: float
    low: float
    high: float
    threshold: tuple[float, float]  # (lo, hi); a single threshold t is (t, t)
    more_n: float | None = None  # undecided: about how many more would decide it (inf: never)
    futile: bool = False  # undecided, and more than the budget allows
    alpha: float = ALPHA
    #: :func:`against`: each threshold (% of A) and its own state
    parts: tuple[tuple[float, str], ...] = ()

    @property
    def decided(self) -> bool:
        return self.state != UNDECIDED

    def _against(self, unit: str) -> str:
        if self.parts and [t for t, _ in self.parts] != [0.0]:  # against: each threshold
            return ", ".join(f"{t:g} {unit}".strip() + f" ({state})" for t, state in self.parts)
        lo, hi = self.threshold
        return f"{lo:g} {unit}".strip() if lo == hi else f"{lo:g}..{hi:g} {unit}".strip()

    def line(self, unit: str = "", what: str = "observations") -> str:
        """One line: what was decided, on what interval, after how many."""
        conf = f"{100 * (1 - self.alpha):g}% anytime interval"
        iv = f"{self.low:.3g}..{self.high:.3g} {unit}".rstrip()
        if self.decided:
            said = (self.state if self.parts and [t for t, _ in self.parts] != [0.0]
                    else f"{self.state} {self._against(unit)}")
            return f"decided: {said} ({conf} {iv}, {self.n} {what})"
        more = ("" if self.more_n is None else
                "; no affordable amount more would decide it (the estimate sits on the "
                "threshold)" if not math.isfinite(self.more_n) else
                f"; about {math.ceil(self.more_n)} more {what} would decide it")
        return (f"undecided within budget ({self.n} {what}, {conf} {iv} against "
                f"{self._against(unit)}){more}")


def _band(threshold: float | tuple[float, float]) -> tuple[float, float]:
    if isinstance(threshold, (tuple, list)):
        lo, hi = (float(v) for v in threshold)
    else:
        lo = hi = float(threshold)
    if not lo <= hi:
        raise ValueError(f"a threshold band needs lo <= hi, got ({lo}, {hi})")
    return lo, hi


def _state(low: float, high: float, lo: float, hi: float) -> str:
    if low > hi:
        return ABOVE
    if high < lo:
        return BELOW
    if lo < hi and low >= lo and high <= hi:
        return INSIDE
    return UNDECIDED


def _projected(x: np.ndarray, n: int, statistic: str, rho: float, alpha: float
               ) -> tuple[float, float]:
    """The interval ``n`` observations would give if the values seen so far are what more
    observations look like (their spread, or their empirical quantiles, held)."""
    if statistic == "mean":
        m = float(x.mean())
        h = half_width(n, float(x.std(ddof=1)) * _t_widening(n, alpha), rho, alpha)
        return m - h, m + h
    frac = _rank_slack(n, rho, alpha) / n
    if frac >= 0.5:
        return -math.inf, math.inf
    lo, hi = np.quantile(x, [0.5 - frac, 0.5 + frac])
    return float(lo), float(hi)


def _more(x: np.ndarray, statistic: str, rho: float, alpha: float,
          decides: Callable[[float, float, int], bool]) -> float:
    """About how many observations beyond ``len(x)`` would decide (inf: none would);
    ``decides(low, high, n)``: whether the interval ``n`` observations would give decides."""
    n = x.size
    total = n
    while not decides(*_projected(x, total, statistic, rho, alpha), total):
        total *= 2
        if total > 2 ** 22:
            return math.inf
    lo_n, hi_n = max(total // 2, n), total
    while hi_n - lo_n > 1:
        mid = (lo_n + hi_n) // 2
        lo_n, hi_n = (lo_n, mid) if decides(*_projected(x, mid, statistic, rho, alpha), mid) \
            else (mid, hi_n)
    return float(max(hi_n - n, 1))


def _futile(n: int, more: float, max_n: int | None, min_n: int) -> bool:
    """Stop undecided: the budget is spent, or a quarter of it is and even twice the budget
    would not decide it. (Not earlier: a projection from the first few values is noisy, and
    stopping on it costs power — the simulations in tests/test_sequential.py measure both.)"""
    if max_n is None:
        return False
    return n >= max_n or (n >= max(2 * min_n, max_n // FUTILITY_AFTER)
                          and n + more > FUTILITY_MARGIN * max_n)


def _rho(statistic: str, n_opt: int, alpha: float) -> float:
    return rho_for(float(n_opt) if statistic == "mean" else n_opt / 4, alpha)


def _n_opt(n_opt: int | None, max_n: int | None) -> int:
    return n_opt or (min(max(max_n // 2, MIN_N), DEFAULT_N_OPT) if max_n else DEFAULT_N_OPT)


def decide(values: Sequence[float], threshold: float | tuple[float, float], *,
           max_n: int | None = None, min_n: int = MIN_N, alpha: float = ALPHA,
           n_opt: int | None = None, statistic: str = "median") -> Decision:
    """Where the median (or mean) of ``values`` stands against ``threshold`` (a value or a
    band).

    Undecided before ``min_n`` observations. ``max_n`` (the budget in observations) makes
    an undecided state ``futile`` when about ``more_n`` more would take it past the budget.
    ``n_opt``: where the boundary is tightest (default: half of ``max_n``, at most 30: tuning it later costs the early looks, which decide the clear cases, more than it gains late)."""
    lo, hi = _band(threshold)
    x = np.asarray(values, dtype=float)
    n = int(x.size)
    n_opt = _n_opt(n_opt, max_n)
    if n < max(min_n, 2):
        est = float(np.median(x)) if n else math.nan
        return Decision(UNDECIDED, n, est, -math.inf, math.inf, (lo, hi), None,
                        bool(max_n is not None and n >= max_n), alpha)
    est, low, high = interval(x, statistic=statistic, alpha=alpha, n_opt=n_opt)
    state = _state(low, high, lo, hi)
    if state != UNDECIDED:
        return Decision(state, n, est, low, high, (lo, hi), None, False, alpha)
    more = _more(x, statistic, _rho(statistic, n_opt, alpha), alpha,
                 lambda a, b, _n: _state(a, b, lo, hi) != UNDECIDED)
    futile = _futile(n, more, max_n, min_n)
    return Decision(state, n, est, low, high, (lo, hi), more, futile, alpha)


#: a floor (%) that may depend on the observations run: a number, None (not measured), or
#: ``floor(n)``, the floor a claim holds ``n`` observations to (C00's narrows as they grow)
Floor = Union[float, None, Callable[[int], Union[float, None]]]


def _floor_at(floor: Floor, n: int) -> float:
    got = floor(n) if callable(floor) else floor
    return abs(float(got)) if got is not None else 0.0


def _against_one(low: float, high: float, est: float, t: float, now: float, end: float
                 ) -> str:
    """One threshold ``t`` of an A/B's change: SLOWER / FASTER when the interval excludes
    ``t`` and the estimate lies farther from it than the floor ``now`` (what the claim
    requires of the pairs run); WITHIN_FLOOR when the whole interval lies within ``t`` +-
    ``end``, the floor of the most observations the budget allows: the claim could not
    decide it even then; otherwise undecided."""
    if (low > t or high < t) and abs(est - t) > now:
        return SLOWER if low > t else FASTER
    if end > 0 and low >= t - end and high <= t + end:
        return WITHIN_FLOOR
    return UNDECIDED


def _settled(parts: Sequence[tuple[float, str]]) -> str:
    """The combined state: UNDECIDED while any threshold is; else each threshold's state."""
    if any(state == UNDECIDED for _, state in parts):
        return UNDECIDED
    if len(parts) == 1 and parts[0][0] == 0:
        return parts[0][1]  # the A/B's own question: lower / higher / within the floor
    return "; ".join(f"{state} {'than' if state != WITHIN_FLOOR else 'of'} {t:g} %"
                     for t, state in parts)


def against(diffs_pct: Sequence[float], thresholds: Sequence[float], floor_pct: Floor, *,
            max_n: int | None = None, min_n: int = MIN_N, alpha: float = ALPHA,
            n_opt: int | None = None, statistic: str = "median") -> Decision:
    """An A/B's change judged against each threshold a claim sets it against (in % of A:
    0 for "faster", 5 for "costs less than 5 %", both edges of a band), as the claim judges
    a fixed count (:func:`perflab.kit.claims.ab_against`), made valid under repeated looks.

    Decided only when every threshold is: the interval excludes it and the estimate lies
    farther from it than the floor for the observations run (``floor_pct(n)``), or the
    whole interval lies within the floor of it for the most observations the budget allows
    (``floor_pct(max_n)``; the narrowest: an early stop is never judged against a wider
    floor than the budget would have had). The state of each threshold is in ``parts``.
    ``floor_pct`` None: only the exclusion of a threshold decides it. Futile (stop
    undecided) by the projection only for the A/B's own question (:data:`NO_CHANGE`); with
    a claim's thresholds, only when ``max_n`` are spent."""
    ts = tuple(float(t) for t in thresholds)
    if not ts:
        raise ValueError("an A/B needs at least one threshold to be judged against")
    x = np.asarray(diffs_pct, dtype=float)
    n = int(x.size)
    n_opt = _n_opt(n_opt, max_n)
    end = _floor_at(floor_pct, max_n if max_n is not None else n)

    def parts_of(a: float, b: float, e: float, m: int) -> tuple[tuple[float, str], ...]:
        now = _floor_at(floor_pct, m)
        return tuple((t, _against_one(a, b, e, t, now, min(end, now))) for t in ts)

    now = _floor_at(floor_pct, n)
    band = (-now or 0.0, now) if ts == NO_CHANGE else (min(ts), max(ts))
    if n < max(min_n, 2):
        est = float(np.median(x)) if n else math.nan
        return Decision(UNDECIDED, n, est, -math.inf, math.inf, band, None,
                        bool(max_n is not None and n >= max_n), alpha,
                        tuple((t, UNDECIDED) for t in ts))
    est, low, high = interval(x, statistic=statistic, alpha=alpha, n_opt=n_opt)
    parts = parts_of(low, high, est, n)
    state = _settled(parts)
    if state != UNDECIDED:
        return Decision(state, n, est, low, high, band, None, False, alpha, parts)
    more = _more(x, statistic, _rho(statistic, n_opt, alpha), alpha,
                 lambda a, b, m: _settled(parts_of(a, b, est, m)) != UNDECIDED)
    # a claim's own thresholds: sampled until decided or the budget is spent. The futility
    # projection holds today's estimate, and its distance from the threshold, set against a
    # floor that narrows with n, is too noisy to stop on: in scripts/bench_sequential.py's
    # C40-shaped case it cut the claims decided from 93.5 % to 60 % (docs/sampling.md)
    futile = (_futile(n, more, max_n, min_n) if ts == NO_CHANGE
              else max_n is not None and n >= max_n)
    return Decision(UNDECIDED, n, est, low, high, band, more, futile, alpha, parts)


def compare(diffs_pct: Sequence[float], floor_pct: float | None, *,
            max_n: int | None = None, min_n: int = MIN_N, alpha: float = ALPHA,
            n_opt: int | None = None, statistic: str = "median") -> Decision:
    """An A/B's change, judged as :func:`perflab.instruments.stats.judge` judges a fixed
    count, made valid under repeated looks: :func:`against` the one threshold 0.

    ``diffs_pct``: per-block relative differences B vs A in % (e.g. ``100 (b_i - a_i) /
    a_i`` of interleaved block medians). FASTER (``"lower"``) / SLOWER (``"higher"``): the
    interval excludes 0 and the estimate (the median difference, judge's effect) is beyond
    the floor; WITHIN_FLOOR: the whole interval lies inside ``(-floor, +floor)`` (no change
    the floor could show); otherwise undecided. ``floor_pct`` None (no A/A floor measured):
    only the exclusion of 0 decides, and nothing can be decided within a floor."""
    return against(diffs_pct, NO_CHANGE, floor_pct, max_n=max_n, min_n=min_n, alpha=alpha,
                   n_opt=n_opt, statistic=statistic)


@dataclass
class Rounds:
    """Sample in rounds until decided, futile, or out of budget::

        r = Rounds(25.0, max_n=200)
        while not r.done:
            r.add(measure_a_round())
        r.decision.line("%", "steps")

    ``rule``: :func:`decide` (a threshold or band) or :func:`compare` (an A/B against the
    floor ``threshold``)."""

    threshold: float | tuple[float, float] | None
    max_n: int
    min_n: int = MIN_N
    alpha: float = ALPHA
    rule: str = "decide"  # or "compare"
    statistic: str = "median"
    values: list[float] = field(default_factory=list)
    decision: Decision | None = None

    def add(self, values: Sequence[float] | float) -> Decision:
        self.values.extend(np.atleast_1d(np.asarray(values, dtype=float)).tolist())
        judge = compare if self.rule == "compare" else decide
        self.decision = judge(self.values, self.threshold, max_n=self.max_n,
                              min_n=self.min_n, alpha=self.alpha, statistic=self.statistic)
        return self.decision

    @property
    def done(self) -> bool:
        d = self.decision
        return d is not None and (d.decided or d.futile or len(self.values) >= self.max_n)
