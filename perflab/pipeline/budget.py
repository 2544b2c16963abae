"""A run's wall budget (``perflab diagnose --budget 60s``), split across its jobs.

The split is what the pre-flight measured, not a guess: each job costs a start (the
process start the pre-flight child paid, or with the fork server only the build and first
step it paid: a fork skips the interpreter and torch import) plus its share of step calls.
The start-ups come off the top; the rest goes to each job in proportion to the seconds its
fixed-count contract would take (``preflight.estimate_s``), except the corroborating jobs
(``SMALL_SHARE``: E06 only corroborates), which get a small fixed share. The shares are
written into the config as ``sampling.job_budget_s`` (perflab.kit.sampling reads them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: jobs that only corroborate a verdict: a small fixed share of what is left after start-ups
SMALL_SHARE = {"E06": 0.05}
#: the diagnosis view and other non-measuring jobs count as one start each
_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_FORMAT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$")


class BudgetError(ValueError):
    """A budget that cannot be read or cannot pay for the run's start-ups: one line."""


def parse(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``1.5m``, ``2min``, ``1h``; BudgetError otherwise."""
    m = _FORMAT.match(str(text).lower())
    if not m or m.group(2) not in _UNITS:
        raise BudgetError(f"budget {text!r} is not a duration: give seconds (90, 90s) or "
                          "minutes (1.5m)")
    s = float(m.group(1)) * _UNITS[m.group(2)]
    if s <= 0:
        raise BudgetError(f"budget {text!r} must be above zero")
    return s


def start_s(answer: Mapping, child_wall_s: float, fork_server: bool) -> float:
    """One job's measured start cost: the pre-flight child's wall minus its timed steps and
    lock wait; with the fork server only its check (build and first step), since a fork
    inherits the server's interpreter and imports."""
    check = float(answer.get("check_s") or 0.0)
    if fork_server:
        return check
    return max(child_wall_s - float(answer.get("steps_s") or 0.0)
               - float(answer.get("lock_wait_s") or 0.0), check)


def split(total_s: float, fixed_s: Mapping[str, float], start_each_s: float,
          other_jobs: int = 1) -> dict[str, float]:
    """{"start-up": s, eid: s, ...} summing to ``total_s``.

    ``fixed_s``: each measuring job's seconds under the fixed-count contract; ``other_jobs``:
    jobs that only read results (the diagnosis view), one start each."""
    startup = start_each_s * (len(fixed_s) + other_jobs)
    left = total_s - startup
    if left <= 0:
        raise BudgetError(f"budget {total_s:g} s does not cover the start-up of "
                          f"{len(fixed_s) + other_jobs} jobs (about {startup:.0f} s measured): "
                          f"give --budget {max(2 * startup, startup + 10):.0f}s or more")
    small = {e: SMALL_SHARE[e] * left for e in fixed_s if e in SMALL_SHARE}
    rest = left - sum(small.values())
    weights = {e: max(s, 1e-9) for e, s in fixed_s.items() if e not in small}
    wsum = sum(weights.values())
    out = {"start-up": startup, **{e: (rest * w / wsum if wsum else 0.0)
                                   for e, w in weights.items()}, **small}
    return {k: out[k] for k in ["start-up", *fixed_s]}


def estimate_s(shares: Mapping[str, float], fixed_s: Mapping[str, float]) -> float:
    """The whole run's expected wall: start-ups plus each job's time, which is its fixed-count
    time when that fits its share and its share when not (a job stops at its budget)."""
    return shares["start-up"] + sum(min(shares[e], fixed_s[e]) for e in fixed_s)


def line(total_s: float, shares: Mapping[str, float], preflight_s: float,
         estimate: float) -> str:
    """``budget 60 s: start-up 12 s, C00 8 s, E05 10 s, ...; estimated 48 s``."""
    parts = ", ".join(f"{k} {v:.0f} s" for k, v in shares.items())
    return (f"budget {total_s:.0f} s: pre-flight {preflight_s:.0f} s (spent), {parts}; "
            f"estimated {preflight_s + estimate:.0f} s from the command to the verdict")


def config_value(shares: Mapping[str, float], total_s: float) -> str:
    """The ``sampling`` value for Snakemake's ``--config`` (YAML flow style)."""
    jobs = ", ".join(f"{e}: {s:.2f}" for e, s in shares.items() if e != "start-up")
    return f"sampling={{rule: adaptive, budget_s: {total_s:.2f}, job_budget_s: {{{jobs}}}}}"
