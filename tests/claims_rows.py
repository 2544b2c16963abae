"""Rows for claim tests: contract rows from short specs, C00's A/A floor, an A/B's judgement.

Pure pandas, no experiment runs: each claim test builds the few rows its claim reads.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perflab import experiments
from perflab.core import io
from perflab.experiments.c00_calibration import AA_FLOOR
from perflab.instruments import ab
from perflab.kit import claims


def rows(*specs: tuple) -> pd.DataFrame:
    """Contract rows from (experiment, variant, metric, statistic, value[, status, reason])."""
    out = []
    for spec in specs:
        eid, variant, metric, statistic, value, *rest = spec
        status = rest[0] if rest else "ok"
        out.append({"experiment": eid, "variant": variant, "workload": "mlp", "model": "m",
                    "input_shape": "[1, 1]", "dtype": "float32", "device": "cpu",
                    "device_name": "cpu", "mode": "train", "execution": "eager",
                    "metric": metric, "window": "w", "sync_boundary": "s",
                    "statistic": statistic, "value": value if status == "ok" else None,
                    "unit": "ms", "n": 10, "status": status,
                    "reason": rest[1] if len(rest) > 1 else ""})
    frame = io.rows_to_frame(out)
    io.validate_rows(frame)
    return frame


def floor(pct: float) -> list[tuple]:
    """C00's A/A floor row (%)."""
    return [("C00", *AA_FLOOR, "value", pct)]


#: the shape of the peers' controlled step in :func:`with_process_floor` (not "[1, 1]", so
#: the other rows of a case never join the floor's processes)
PEER_SHAPE = "[256, 1]"


def peer_medians(pct: float, n: int = 4) -> list[float]:
    """``n`` (even) medians (ms) whose between-process floor is ``pct`` %: ln values +-d."""
    from scipy.stats import t as student_t

    d = np.log1p(pct / 100) / (student_t.ppf(0.975, n - 1) * np.sqrt(2) * np.sqrt(n / (n - 1)))
    return [3.0 * np.exp(d if k % 2 else -d) for k in range(n)]


def with_process_floor(frame: pd.DataFrame, pct: float | None, n: int = 4) -> pd.DataFrame:
    """``frame`` plus ``n`` of the run's jobs that time the controlled step (perflab.experiments.process_peers),
    their medians spread so that the between-process floor is ``pct`` %; None: none."""
    if pct is None:
        return frame
    peers = rows(*[(e, v, "step_latency", "median", m)
                   for (e, v), m in zip(experiments.process_peers(), peer_medians(pct, n))])
    return pd.concat([frame, peers.assign(input_shape=PEER_SHAPE)], ignore_index=True)


def without_process_floor(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without the peers :func:`with_process_floor` added."""
    return frame[frame.input_shape != PEER_SHAPE]


def with_floor(pct: float | None, *specs: tuple) -> pd.DataFrame:
    """Rows, plus C00's A/A floor (%) when ``pct`` is given."""
    return rows(*specs, *(floor(pct) if pct is not None else []))


def ab_rows(eid: str, variant: str, rel_pct: float, *, metric: str = "step_latency",
            base_ms: float = 10.0, p: float = 0.001, ci_pct: float = 0.5) -> list[tuple]:
    """The one A/B writer's rows under ``variant``: B - A of ``rel_pct`` % of A's ``base_ms``.

    The bootstrap interval is the effect +- ``ci_pct`` % of A; ``p`` the Wilcoxon p.
    ``difference_resolved`` is what the job itself decided (significance alone).
    """
    effect = rel_pct * base_ms / 100
    half = ci_pct * base_ms / 100
    significant = p < 0.05 and not (effect - half <= 0 <= effect + half)
    return [(eid, variant, metric, "value", effect),
            (eid, variant, metric + ab.REL, "value", rel_pct),
            (eid, variant, ab.WILCOXON_P, "value", p),
            (eid, variant, ab.RESOLVED, "value", float(significant)),
            (eid, variant, "ab_effect", "value", effect),
            (eid, variant, "ab_effect_rel", "value", rel_pct),
            (eid, variant, "ab_ci_low", "value", effect - half),
            (eid, variant, "ab_ci_high", "value", effect + half),
            (eid, variant, "ab_p", "value", p),
            (eid, variant, "ab_resolved", "value", float(significant))]


def sample_series(median: float, sd: float, n: int = 400, seed: int = 0) -> np.ndarray:
    """``n`` samples whose median is exactly ``median``: normal quantiles of spread ``sd``, in
    a seeded random order (a claim's own interval resamples them)."""
    from scipy.stats import norm

    q = norm.ppf((np.arange(n) + 0.5) / n)
    return median + sd * np.random.default_rng(seed).permutation(q)


def with_samples(frame: pd.DataFrame, *specs: tuple) -> pd.DataFrame:
    """``frame`` carrying raw samples from (experiment, variant, metric, values): the run's
    samples CSV, which :func:`verdict` hands to the claims beside the rows."""
    out = [{"experiment": e, "variant": v, "execution": "eager", "metric": m, "unit": "ms",
            "block": 0, "index": i, "value": float(x)}
           for e, v, m, values in specs for i, x in enumerate(values)]
    frame = frame.copy()
    frame.attrs["samples"] = pd.DataFrame(out, columns=io.SAMPLE_COLUMNS)
    return frame


def verdict(cid: str, frame: pd.DataFrame) -> claims.Verdict:
    # the rows go without the samples they carry: pandas compares attrs when it concatenates
    # frames, and a DataFrame in them has no truth value (a run's rows carry none)
    bare = frame.copy()
    bare.attrs = {}
    return experiments.claim_registry()[cid].evaluate(experiments.evidence(bare, frame.attrs.get("samples")))


def as_error(frame: pd.DataFrame, i: int) -> pd.DataFrame:
    """``frame`` with its ``i``-th row an instrument error (no value, a reason)."""
    out = frame.copy()
    out.loc[out.index[i], ["status", "reason", "value"]] = ["error", "instrument failed", None]
    return out


Rows = Callable[[], pd.DataFrame]


@dataclass(frozen=True)
class Case:
    """A claim's three cases: its finding holds, it fails, it is inside the noise.

    ``inside`` is None for a claim with no noise question (it declares ``exact``).
    ``holds_gives`` / ``fails_gives``: what the holding and the failing rows give.
    ``module``: the test module that registered them (its experiment's, tests/test_<slug>.py).
    """

    holds: Rows
    fails: Rows
    inside: Rows | None
    holds_gives: str = claims.REPRODUCED
    fails_gives: str = claims.DIFFERS
    module: str = ""


#: every claim's cases, by claim id (filled by each experiment's tests/test_<slug>.py)
CASES: dict[str, Case] = {}


def case(cid: str, holds: Rows, fails: Rows, inside: Rows | None = None, **kw) -> None:
    if cid in CASES:
        raise ValueError(f"{cid} has two sets of cases (a test module imported twice?)")
    # the caller's module: tests/test_claim_cases.py checks that it is the claim's experiment's
    module = sys._getframe(1).f_globals["__name__"]
    CASES[cid] = Case(holds, fails, inside, module=module, **kw)
