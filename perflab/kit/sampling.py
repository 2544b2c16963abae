"""The run's sampling contract (config key ``sampling``), read in one place.

``rule``: ``adaptive`` — a measurement that feeds a verdict, a claim or an A/B samples in
rounds and stops when its deciding statistic is decided (perflab.instruments.sequential) or
its budget is spent; ``fixed`` — every count as configured (the contract before issue 40,
kept so one commit can measure both). ``budget_s``: the whole run's wall budget (``perflab
diagnose --budget``), or none. ``job_budget_s``: its split, experiment id -> seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ADAPTIVE, FIXED = "adaptive", "fixed"
RULES = (ADAPTIVE, FIXED)


def _section(config: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (config or {}).get("sampling") or {}


def rule(config: Mapping[str, Any] | None) -> str:
    """``adaptive`` (the default) or ``fixed``; anything else is a configuration error."""
    r = _section(config).get("rule", ADAPTIVE)
    if r not in RULES:
        raise ValueError(f"sampling.rule must be one of {RULES}, got {r!r}")
    return r


def budget_s(config: Mapping[str, Any] | None) -> float | None:
    """The whole run's wall budget in seconds, or None (no budget)."""
    b = _section(config).get("budget_s")
    return None if b is None else float(b)


def job_budget_s(config: Mapping[str, Any] | None, eid: str) -> float | None:
    """This experiment's share of the budget in seconds, or None (none was split)."""
    b = (_section(config).get("job_budget_s") or {}).get(eid)
    return None if b is None else float(b)
