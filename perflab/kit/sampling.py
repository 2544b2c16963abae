"""The run's sampling contract (config key ``sampling``), read in one place.

``rule``: ``adaptive`` — a measurement that feeds a verdict, a claim or an A/B samples in
rounds and stops when its deciding statistic is decided (perflab.instruments.sequential) or
its budget is spent; ``fixed`` — every count as configured (the contract before issue 40,
kept so one commit can measure both). ``budget_s``: the whole run's wall budget (``perflab
diagnose --budget``), or none. ``job_budget_s``: its split, experiment id -> seconds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

ADAPTIVE, FIXED = "adaptive", "fixed"
RULES = (ADAPTIVE, FIXED)

_UNIT_S = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_budget_s(text: str) -> float:
    """A wall budget as a user types it (``60``, ``60s``, ``2m``, ``1.5min``, ``1h``) ->
    seconds. One parser for every command's ``--budget``; ValueError in one line."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*", str(text).lower())
    if not m or m.group(2) not in _UNIT_S or float(m.group(1)) <= 0:
        raise ValueError(f"bad budget {text!r}: give seconds or minutes, e.g. 60, 60s, 2m, 1h")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def budget_arg(text: str) -> float:
    """:func:`parse_budget_s` as an argparse ``type=``: a bad value is argparse's one-line
    usage error naming the option, before anything runs."""
    import argparse

    try:
        return parse_budget_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
