"""Robust summaries of timing samples.

The chapter reports the median and the interquartile range (IQR) of a warmed,
synchronized series; the mean and std are kept beside them because their
disagreement with the median is itself evidence (a cold first step or a
one-sided tail pulls the mean, not the median).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: statistics produced by :func:`summarize`, in the order rows are written
SUMMARY_STATISTICS = (
    "median",
    "iqr",
    "p25",
    "p75",
    "mean",
    "std",
    "min",
    "max",
    "count",
    "tail_count",
)


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
