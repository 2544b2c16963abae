"""Robust summaries of timing samples.

The chapter reports the median and the interquartile range (IQR) of a warmed,
synchronized series; the mean and std are kept beside them because their
disagreement with the median is itself evidence (a cold first step or a
one-sided tail pulls the mean, not the median).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perflab.core.io import SUMMARY_STATISTICS  # noqa: F401 (summarize's order; the rows' vocabulary)


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """Median, IQR, quartiles, mean, std, min, max, count and tail count.

    ``tail_count`` counts samples above ``median + 3 * IQR``: the chapter's
    measure of a one-sided tail (21/400 on its shared desktop GPU).
    Quartiles use linear interpolation (numpy's default); ``std`` is the sample
    standard deviation (ddof=1), 0 for a single sample.
    """
    a = np.asarray(samples, dtype=float)
    if a.size == 0:
        raise ValueError("summarize() needs at least one sample")
    if not np.all(np.isfinite(a)):
        raise ValueError("summarize() got a non-finite sample")
    p25, median, p75 = np.percentile(a, [25, 50, 75])
    iqr = p75 - p25
    return {
        "median": float(median),
        "iqr": float(iqr),
        "p25": float(p25),
        "p75": float(p75),
        "mean": float(a.mean()),
        "std": float(a.std(ddof=1)) if a.size > 1 else 0.0,
        "min": float(a.min()),
        "max": float(a.max()),
        "count": float(a.size),
        "tail_count": float(np.count_nonzero(a > median + 3 * iqr)),
    }


def relative_change(new: float, base: float) -> float:
    """(new - base) / base, the signed fraction reported as % in tables."""
    if base == 0:
        raise ZeroDivisionError("relative change against a zero baseline")
    return (new - base) / base


def block_spread(block_values: Sequence[float]) -> tuple[float, float]:
    """(min, max) of per-block medians: the chapter's "block spread"."""
    a = np.asarray(block_values, dtype=float)
    return float(a.min()), float(a.max())


def resolved(diff: float, noise: float) -> bool:
    """True when an effect is larger than the noise it is judged against.

    ``noise`` is a non-negative spread measured in the same run (IQR of the
    samples, or block-to-block spread for interleaved A/B). An effect inside
    the noise is reported as unresolved, never as a speedup.
    """
    return abs(diff) > abs(noise)


# --------------------------------------------------------------------------- judging a difference

#: significance level of every A/B judgement in the pipeline
ALPHA = 0.05


@dataclass(frozen=True)
class Judgement:
    """The verdict on a B-versus-A difference, with the numbers it rests on.

    ``effect`` is in the unit of the inputs (ms for step times): the median of
    the paired differences ``b_i - a_i`` (paired) or ``median(b) - median(a)``
    (independent samples). ``relative_pct`` is ``100 * effect / median(a)``.
    ``ci_low``/``ci_high`` bound ``effect`` (``scipy.stats.bootstrap``, percentile
    interval, fixed seed). ``p`` is from ``test``: Wilcoxon signed-rank on the
    paired differences, or Mann-Whitney U on independent samples.
    """

    effect: float
    relative_pct: float
    ci_low: float
    ci_high: float
    p: float
    test: str
    n: int  # paired differences, or the smaller side's sample count
    significant: bool  # p < alpha and the interval excludes 0
    noise_floor_pct: float | None  # the A/A floor it was judged against (None: none known)
    exceeds_floor: bool | None  # |relative_pct| > noise_floor_pct (None without a floor)
    resolved: bool  # significant, and above the floor when a floor is known

    @property
    def verdict(self) -> str:
        """``"resolved"`` or ``"inconclusive"`` (the effect is inside the noise)."""
        return "resolved" if self.resolved else "inconclusive"


def _bootstrap_ci(data: tuple, statistic, confidence: float, n_resamples: int,
                  paired: bool, seed: int) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic(*data, axis=-1)`` (vectorised, seeded)."""
    from scipy.stats import bootstrap

    if min(len(d) for d in data) < 2:
        point = float(statistic(*data, axis=-1))
        return point, point
    kw = dict(confidence_level=confidence, n_resamples=n_resamples, method="percentile",
              paired=paired, vectorized=True)
    try:
        res = bootstrap(data, statistic, rng=np.random.default_rng(seed), **kw)
    except TypeError:  # scipy < 1.15 names the generator random_state
        res = bootstrap(data, statistic, random_state=np.random.default_rng(seed), **kw)
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (np.isfinite(lo) and np.isfinite(hi)):  # every resample alike
        point = float(statistic(*data, axis=-1))
        return point, point
    return lo, hi


def block_length(n: int) -> int:
    """The block length of a moving-block bootstrap of ``n`` consecutive samples: n^(1/3),
    rounded (1 for n < 2; 7 for 400). The usual order for a series whose dependence dies
    out within a few samples (a step series drifts with clocks, caches and the host)."""
    return max(1, round(n ** (1 / 3))) if n >= 2 else 1


def _block_indices(rng: np.random.Generator, n: int, length: int,
                   n_resamples: int) -> np.ndarray:
    """(n_resamples, n) indices of moving blocks of ``length`` consecutive samples."""
    blocks = -(-n // length)
    starts = rng.integers(0, n - length + 1, (n_resamples, blocks))
    idx = (starts[:, :, None] + np.arange(length)).reshape(n_resamples, -1)
    return idx[:, :n]


def block_bootstrap_ci(groups: Sequence[np.ndarray], statistic, *,
                       confidence: float = 0.95, n_resamples: int = 2000,
                       seed: int = 0) -> tuple[float, float, float]:
    """(point, low, high): a statistic of sample series and its percentile bootstrap interval,
    resampling moving blocks of consecutive samples (:func:`block_length`), not samples.

    A step series is autocorrelated (a slow stretch lasts several steps), so resampling single
    samples, as :func:`_bootstrap_ci` does for independent block medians, would make the
    interval too narrow; blocks keep the dependence within them. ``groups`` is a sequence of
    2-D arrays (series x samples): the series of one group were measured together, sample i of
    each in the same step (E05's phases), so one set of block indices resamples all of them;
    different groups were measured apart (one after the other) and are resampled
    independently, so the interval covers each series' sampling noise, not a drift between
    them. ``statistic(*resampled)`` receives each group as (resamples, series, samples) and
    returns (resamples,); it is called once on the data for the point estimate. Seeded.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    data = [np.atleast_2d(np.asarray(g, dtype=float)) for g in groups]
    if not data or any(g.shape[1] == 0 for g in data):
        raise ValueError("block_bootstrap_ci() needs at least one sample in every group")
    point = float(np.asarray(statistic(*[g[None] for g in data])).reshape(-1)[0])
    rng = np.random.default_rng(seed)
    resampled = [g[:, _block_indices(rng, g.shape[1], block_length(g.shape[1]),
                                     n_resamples)].transpose(1, 0, 2) for g in data]
    values = np.asarray(statistic(*resampled), dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return point, point, point
    tail = (1 - confidence) / 2
    lo, hi = np.quantile(values, [tail, 1 - tail])
    return point, float(lo), float(hi)


def _median_diff(x, y, axis=-1):
    return np.median(y, axis=axis) - np.median(x, axis=axis)


def judge(
    a: Sequence[float],
    b: Sequence[float],
    *,
    paired: bool = True,
    diffs: Sequence[float] | None = None,
    noise_floor_pct: float | None = None,
    alpha: float = ALPHA,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> Judgement:
    """Is B different from A beyond the noise? The one judgement every A/B uses.

    Parameters
    ----------
    a, b
        Values of the two sides in one unit (ms). ``paired=True``: one value
        per interleaved block (block medians), ``a[i]`` and ``b[i]`` measured
        next to each other; ``paired=False``: independent samples.
    diffs
        Paired differences to use instead of ``b[i] - a[i]`` (e.g. a profiled
        block against the mean of the unprofiled blocks around it).
    noise_floor_pct
        The A/A noise floor of this machine in % (see :func:`aa_floor_pct`),
        or None when no A/A experiment ran; an effect must exceed it to be resolved.

    Returns a :class:`Judgement`: resolved when ``p < alpha``, the bootstrap
    interval of the effect excludes 0, and ``|relative_pct|`` exceeds the
    floor (when one is given). Anything else is inconclusive: the claim's
    INCONCLUSIVE verdict, never reported as a speedup or a cost.
    """
    from scipy.stats import mannwhitneyu, wilcoxon

    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.size == 0 or b_arr.size == 0:
        raise ValueError("judge() needs values on both sides")
    base = float(np.median(a_arr))
    if paired or diffs is not None:
        d = (np.asarray(diffs, dtype=float) if diffs is not None
             else b_arr - a_arr if a_arr.size == b_arr.size else None)
        if d is None:
            raise ValueError("paired judgement needs as many values of A as of B")
        effect = float(np.median(d))
        lo, hi = _bootstrap_ci((d,), np.median, confidence, n_resamples, False, seed)
        p = float(wilcoxon(d).pvalue) if d.size >= 2 and np.any(d != 0) else 1.0
        test, n = "wilcoxon signed-rank on paired differences", int(d.size)
    else:
        effect = float(np.median(b_arr) - base)
        lo, hi = _bootstrap_ci((a_arr, b_arr), _median_diff, confidence, n_resamples, False,
                               seed)
        p = (float(mannwhitneyu(b_arr, a_arr, alternative="two-sided").pvalue)
             if min(a_arr.size, b_arr.size) >= 2 else 1.0)
        test, n = "mann-whitney U on independent samples", int(min(a_arr.size, b_arr.size))
    if not np.isfinite(p):
        p = 1.0
    rel = 100 * effect / base if base else float("nan")
    significant, exceeds, resolved = decide(p=p, ci_low=lo, ci_high=hi, relative_pct=rel,
                                            noise_floor_pct=noise_floor_pct, alpha=alpha)
    return Judgement(effect=effect, relative_pct=rel, ci_low=lo, ci_high=hi, p=p, test=test,
                     n=n, significant=significant, noise_floor_pct=noise_floor_pct,
                     exceeds_floor=exceeds, resolved=resolved)


def decide(*, p: float, ci_low: float, ci_high: float, relative_pct: float,
           noise_floor_pct: float | None, alpha: float = ALPHA) -> tuple[bool, bool | None, bool]:
    """(significant, exceeds_floor, resolved): the rule :func:`judge` applies to its numbers.

    Exposed so a judgement already written as rows (``ab_p``, ``ab_ci_low``,
    ``ab_ci_high``, ``ab_effect_rel``) can be re-judged later against an A/A
    floor measured in another job, by the same rule.
    """
    significant = bool(p < alpha and (ci_low > 0 or ci_high < 0))
    exceeds = None if noise_floor_pct is None else bool(abs(relative_pct) > noise_floor_pct)
    return significant, exceeds, significant and exceeds is not False


#: confidence of the A/A floor: the share of A/A comparisons whose effect stays below it
AA_FLOOR_CONFIDENCE = 0.95


def aa_floor_pct(a_blocks: Sequence[float], b_blocks: Sequence[float], *,
                 pairs: int | None = None, confidence: float = AA_FLOOR_CONFIDENCE,
                 n_resamples: int = 2000, seed: int = 0) -> float:
    """The A/A noise floor in %: how large the A/B statistic gets when nothing differs.

    The statistic is the one :func:`judge` gates: the median of the paired
    block differences ``b_i - a_i`` relative to ``median(a)``, in %. Given the
    blocks of an A/A run (the same step on both sides, two independent copies,
    interleaved), the floor is the ``confidence`` quantile of ``|statistic|``
    over bootstrap resamples of the block pairs (pairs drawn with replacement,
    seeded): a one-sided upper bound on how far an A/A comparison's effect
    reaches on this machine. An A/B whose ``|relative_pct|`` is not above it
    cannot be told from running two copies of the same code.

    ``pairs`` is how many block pairs the gated statistic is a median of (an A/B's own
    count); each resample then draws that many pairs of the A/A (an m-out-of-n
    bootstrap). An A/A of more pairs than the A/B it gates so estimates the spread of
    that A/B's statistic with less noise of its own: from 12 pairs the 95% bound is itself
    a coarse estimate (one H200 read 7.7% and 2.1% in two runs of one machine, where
    resampling those runs' pair differences puts the expected bound near 5-6% for both).
    Default: the A/A's own count.
    """
    a_arr, b_arr = np.asarray(a_blocks, dtype=float), np.asarray(b_blocks, dtype=float)
    if a_arr.size == 0 or a_arr.size != b_arr.size:
        raise ValueError("an A/A floor needs as many blocks of A as of B (at least one)")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    m = a_arr.size if pairs is None else int(pairs)
    if m < 1:
        raise ValueError(f"a floor is for a median of at least one block pair, got {pairs}")
    idx = np.random.default_rng(seed).integers(0, a_arr.size, (n_resamples, m))
    rel = 100 * np.median((b_arr - a_arr)[idx], axis=1) / np.median(a_arr[idx], axis=1)
    return float(np.quantile(np.abs(rel), confidence))


def aa_floor_interval_pct(a_blocks: Sequence[float], b_blocks: Sequence[float], *,
                          pairs: int | None = None, level: float = 0.90,
                          n_outer: int = 100, n_resamples: int = 400,
                          seed: int = 0) -> tuple[float, float]:
    """How precisely :func:`aa_floor_pct` is known from these blocks: the ``level``
    percentile interval of the floor over bootstrap resamples of the block pairs (each
    resample's floor recomputed, ``n_resamples`` inner draws; seeded). A precision to stop
    measuring the floor on, not a decision: the floor is an estimate that comparisons
    read, and they need it only so closely."""
    a_arr, b_arr = np.asarray(a_blocks, dtype=float), np.asarray(b_blocks, dtype=float)
    if a_arr.size < 2 or a_arr.size != b_arr.size:
        raise ValueError("an A/A floor's interval needs as many blocks of A as of B (at "
                         "least two)")
    rng = np.random.default_rng(seed)
    floors = []
    for _ in range(n_outer):
        idx = rng.integers(0, a_arr.size, a_arr.size)
        floors.append(aa_floor_pct(a_arr[idx], b_arr[idx], pairs=pairs,
                                   n_resamples=n_resamples, seed=int(rng.integers(2 ** 31))))
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(floors, [tail, 100 - tail])
    return float(lo), float(hi)


def process_floor_pct(*groups: Sequence[float],
                      confidence: float = AA_FLOOR_CONFIDENCE) -> float:
    """The between-process A/A floor in %: how far one fresh process's statistic lands from
    another's when both ran the same contract.

    Each of ``groups`` holds one statistic (a median step latency, a throughput) per fresh
    process of one contract, R >= 2 of them. With ``s`` the standard deviation of
    ``ln(values)`` about each group's own mean, pooled over the groups (``df`` = the
    processes less one per group), the floor is ``100 * (exp(q) - 1)`` for
    ``q = t(1/2 + confidence/2, df) * sqrt(2) * s``: the two-sided prediction bound of the
    log ratio of two *further* processes' statistics of one contract, so a comparison of two
    separate processes of the same code lands outside it ``1 - confidence`` of the time
    (exactly, when the log statistic is normal across processes with one spread for every
    group). Few processes give a wide Student factor (df = 3: 4.50 s), never an optimistic
    one. Several groups (contracts whose process-to-process spread is alike, such as
    neighbouring batch sizes) pool their degrees of freedom.
    """
    from scipy.stats import t as student_t

    if not groups:
        raise ValueError("a between-process floor needs at least one group of processes")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    logs = []
    for g in groups:
        x = np.asarray(g, dtype=float)
        if x.size < 2:
            raise ValueError("a between-process floor needs the statistic of at least two "
                             f"processes of one contract, got {x.size}")
        if not np.all(np.isfinite(x)) or np.any(x <= 0):
            raise ValueError(f"a between-process floor needs positive finite values, got {x}")
        logs.append(np.log(x))
    df = sum(x.size - 1 for x in logs)
    s = float(np.sqrt(sum(float(((x - x.mean()) ** 2).sum()) for x in logs) / df))
    q = float(student_t.ppf(0.5 + confidence / 2, df)) * np.sqrt(2) * s
    return float(100 * np.expm1(q))


def bracketed_floor_pct(aa_log_pct: Sequence[float], *,
                        confidence: float = AA_FLOOR_CONFIDENCE) -> float:
    """The between-run floor of a *bracketed* comparison in %: how far one run's statistic
    lands from the geometric mean of the runs either side of it when all three ran the same
    code, as a two-sided prediction bound at ``confidence``.

    It bounds what an interleaved A/B (B, I, B, I, B, ...) reads when each intervention run
    is compared with the geometric mean of the baseline runs before and after it
    (perflab.attach.whatif): that bracket removes a machine's drift that is linear over the
    pair, and so does this floor's A/A analogue, where :func:`process_floor_pct` treats the
    runs as exchangeable and counts the drift as noise.

    ``aa_log_pct``: for each interior run i of R >= 3 consecutive runs of one contract, in
    order, ``a_i = 100 ln(x_i / sqrt(x_{i-1} x_{i+1}))`` of the statistic the comparisons use
    (m = R - 2 values). Model: ``ln x_i = drift_i + e_i``, the ``e_i`` independent
    N(0, sigma^2), the drift linear over any three neighbours; then ``a = D e`` with ``D``'s
    rows ``(-1/2, 1, -1/2)``, so ``Cov(a) = sigma^2 C`` with ``C`` 1.5 on the diagonal, -1
    beside it, 1/4 two off, 0 beyond (overlapping brackets share runs: neighbours correlate
    at -2/3). The rows of ``D`` span the space orthogonal to a constant and a linear trend, so
    ``s^2 = a' C^-1 a / m`` is the residual variance of a straight line fitted to the m + 2
    log values, ``m s^2 / sigma^2`` is chi-square with exactly ``df = m = R - 2`` degrees of
    freedom (the correlation is accounted for, not ignored), and a further bracketed
    comparison of the same code, ``e - (e' + e'')/2``, has variance ``1.5 sigma^2`` and mean 0:
    the floor is ``100 (exp(q/100) - 1)`` with ``q = t(1/2 + confidence/2, df) sqrt(1.5) s``.

    Where it is approximate, it errs wide: drift that bends within a bracket adds to the
    ``a_i`` as to the comparisons (a wider floor, not a narrower one); a comparison made of
    several runs' blocks (a change re-run in rounds) varies less than the one run the floor
    predicts. The comparison's two baseline runs are among the R, so it is not independent of
    ``s``; the seeded simulations (tests/test_stats_bracketed.py) show the rate of A/A
    comparisons outside the floor at or below ``1 - confidence``. Few runs give a wide
    Student factor (R = 3: df 1, t 12.7; R = 4: 4.30; R = 6: 2.78), never an optimistic one.
    """
    from scipy.stats import t as student_t

    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    a = np.asarray(aa_log_pct, dtype=float)
    if a.ndim != 1 or a.size < 1:
        raise ValueError("a bracketed floor needs the A/A log ratio of at least one run between "
                         f"two others (three runs), got {a.size} values")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"a bracketed floor needs finite log ratios, got {a}")
    m = a.size
    cov = 1.5 * np.eye(m) - np.eye(m, k=1) - np.eye(m, k=-1) \
        + 0.25 * (np.eye(m, k=2) + np.eye(m, k=-2))
    s2 = float(a @ np.linalg.solve(cov, a)) / m
    q = float(student_t.ppf(0.5 + confidence / 2, m)) * np.sqrt(1.5 * s2)
    return float(100 * np.expm1(q / 100))


#: metrics of the rows :func:`judgement_rows` writes under an A/B's difference variant
JUDGEMENT_METRICS = ("ab_effect", "ab_effect_rel", "ab_ci_low", "ab_ci_high", "ab_p",
                     "ab_resolved", "ab_exceeds_floor")


def judgement_rows(j: Judgement, unit: str = "ms") -> list[tuple[str, float, str, str]]:
    """(metric, value, unit, how) of the rows that report ``j`` beside an A/B.

    The same metrics under every A/B's difference variant, so the report can
    list every comparison of a run and re-judge it against the A/A floor.
    """
    ci = f"{round(100 * 0.95)}% bootstrap interval (percentile) of the effect"
    rows = [
        ("ab_effect", j.effect, unit, "B minus A: median of the paired block differences"
         if j.test.startswith("wilcoxon") else "B minus A: difference of the medians"),
        ("ab_effect_rel", j.relative_pct, "%", "effect relative to A's median"),
        ("ab_ci_low", j.ci_low, unit, ci + ", low end"),
        ("ab_ci_high", j.ci_high, unit, ci + ", high end"),
        ("ab_p", j.p, "p", j.test),
        ("ab_resolved", float(j.resolved), "bool",
         f"1 when p < {ALPHA}, the interval excludes 0"
         + (f" and |effect| > the A/A floor {j.noise_floor_pct:.3g}%" if j.noise_floor_pct
            is not None else " (no A/A floor known in this job)") + "; else 0 (inconclusive)"),
    ]
    if j.exceeds_floor is not None:
        rows.append(("ab_exceeds_floor", float(j.exceeds_floor), "bool",
                     f"1 when |effect| > the A/A floor {j.noise_floor_pct:.3g}%"))
    return rows
