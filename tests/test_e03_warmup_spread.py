"""The cases of E03's claims (C07, C08): rows where each finding holds, fails, and sits
inside the noise, registered with claims_rows.case and run by tests/test_claim_cases.py."""

from __future__ import annotations

from claims_rows import case, rows, sample_series, with_samples

from perflab.experiments import e03_warmup_spread as e03

# ------------------------------------------------------------------ the claims' cases
# C07, C08: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e03_warmups(first=96.2, med0=16.390, sd=0.15, n=100, seed=3):
    """The unwarmed series (its rows and raw samples): a cold first call of ``first`` ms,
    then ``n - 1`` calls about ``med0``."""
    x = [first, *sample_series(med0, sd, n - 1, seed)]
    frame = rows(("E03", e03.warmup_variant(0), "step_latency", "mean", sum(x) / n),
                 ("E03", e03.warmup_variant(0), "step_latency", "median", med0))
    return with_samples(frame, ("E03", e03.warmup_variant(0), "step_latency", x))


# the chapter's 96.2 ms first call moves the mean 0.8 ms, ~25x its noise (0.03 ms), the
# median less than a tenth of its own. A warm first call (16.4 ms) moves neither: the mean
# is not pulled. A first call of 19.4 ms moves the mean ~0.03 ms, about its noise
case("C07", e03_warmups, lambda: e03_warmups(first=16.4),
     lambda: e03_warmups(first=19.4))


def e03_spread(med=16.449, sd=0.14, tail=21, count=400, tail_ms=1.5):
    """E03's warmed series: ``count - tail`` calls about ``med`` and ``tail`` of them
    ``tail_ms`` above it (past median + 3 IQR); its rows computed from those samples."""
    import numpy as np

    x = np.r_[sample_series(med, sd, count - tail, 2), np.full(tail, med + tail_ms)]
    x = x[np.random.default_rng(5).permutation(count)]
    q75, q25 = np.percentile(x, [75, 25])
    frame = rows(*[("E03", e03.SPREAD, "step_latency", stat, v) for stat, v in (
        ("mean", x.mean()), ("median", np.median(x)), ("std", x.std(ddof=1)),
        ("tail_count", float((x > np.median(x) + 3 * (q75 - q25)).sum())), ("count", count))])
    return with_samples(frame, ("E03", e03.SPREAD, "step_latency", x))


# 21/400 steps 1.5 ms out: mean - median ~0.08 ms, clear of 0; no tail (0/400, its interval
# below 1%); 4/400: the share's interval straddles 1%
case("C08", e03_spread, lambda: e03_spread(tail=0), lambda: e03_spread(tail=4))
