"""Measure in rounds until the deciding numbers are decided or the job's budget is spent.

One loop for a job that samples adaptively (``sampling.rule: adaptive``): each round
measures a block and yields observations for each deciding quantity (e.g. E05's per-step
input share), which :class:`perflab.instruments.sequential.Rounds` judges against its
threshold. The loop stops when every quantity is decided (or futile: more than its
``max_n`` would not decide it), when ``max_n`` is reached, or when the budget is spent —
and says which, so a row can carry the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from perflab.instruments import sequential as seq

DECIDED, BUDGET, MAX_N, FUTILE = "decided", "budget spent", "max_n reached", "futile"
#: :func:`until_precise`'s stop when the estimate is as precise as its use needs
PRECISE = "precise enough"


@dataclass
class Outcome:
    rounds: int
    reason: str  # DECIDED, BUDGET, MAX_N or FUTILE
    decisions: dict[str, seq.Decision]
    elapsed_s: float


def until_decided(take: Callable[[int], Mapping[str, Sequence[float]]],
                  thresholds: Mapping[str, float], *, budget_s: float | None, max_n: int,
                  statistic: str = "mean", clock: Callable[[], float] = time.perf_counter,
                  ) -> Outcome:
    """Call ``take(round_index)`` (one measured block: {quantity: its observations}) until
    each quantity in ``thresholds`` is decided against its threshold, ``max_n``
    observations of each are in, or ``budget_s`` seconds have passed (None: no budget)."""
    rounds = {k: seq.Rounds(t, max_n=max_n, statistic=statistic) for k, t in thresholds.items()}
    t0, i = clock(), 0
    while True:
        got = take(i)
        i += 1
        for k, r in rounds.items():
            r.add(got[k])
        decisions = {k: r.decision for k, r in rounds.items()}
        elapsed = clock() - t0
        if all(d.decided for d in decisions.values()):
            return Outcome(i, DECIDED, decisions, elapsed)
        if all(r.done for r in rounds.values()):
            reason = MAX_N if any(len(r.values) >= max_n for r in rounds.values()) else FUTILE
            return Outcome(i, reason, decisions, elapsed)
        if _spent(elapsed, i, budget_s):
            return Outcome(i, BUDGET, decisions, elapsed)


def until_precise(take: Callable[[int], object], precise: Callable[[], bool], *,
                  budget_s: float | None, max_rounds: int, min_rounds: int = 1,
                  clock: Callable[[], float] = time.perf_counter) -> tuple[int, str, float]:
    """Call ``take(round_index)`` until ``precise()`` (an estimate, not a decision: e.g. the
    A/A floor known as closely as the comparisons it serves need), ``max_rounds`` rounds,
    or ``budget_s`` — never before ``min_rounds`` (fewer estimate nothing worth keeping).
    Returns (rounds, PRECISE / MAX_N / BUDGET, seconds)."""
    t0, i = clock(), 0
    while True:
        take(i)
        i += 1
        elapsed = clock() - t0
        if precise():
            return i, PRECISE, elapsed
        if i >= max_rounds:
            return i, MAX_N, elapsed
        if i >= min_rounds and _spent(elapsed, i, budget_s):
            return i, BUDGET, elapsed


def _spent(elapsed: float, rounds: int, budget_s: float | None) -> bool:
    """Would the next round overrun the budget? (It takes about as long as the mean one.)"""
    return budget_s is not None and elapsed + elapsed / rounds > budget_s
