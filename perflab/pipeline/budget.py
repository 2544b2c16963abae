"""A run's wall budget (``perflab diagnose --budget 60s``), split across its jobs.

The split is what the pre-flight measured, not a guess: each job costs a start (the
process start the pre-flight child paid, or with the fork server only the build and first
step it paid: a fork skips the interpreter and torch import) plus its share of step calls.
The start-ups come off the top; the rest goes to each job in proportion to the seconds its
fixed-count contract would take (``preflight.estimate_s``); a job that runs a fixed count
whatever its budget (R01, R02) is given what that count takes, and one that only
corroborates (E06) a small fixed share. The shares are
written into the config as ``sampling.job_budget_s`` (perflab.kit.sampling reads them).
"""

from __future__ import annotations

from collections.abc import Mapping

#: the jobs that sample until decided and stop at their share (rule adaptive); every other
#: job runs its fixed count, so its share is what that count takes
ADAPTIVE = ("C00", "E05", "W01")
#: the jobs that only corroborate (E06, the second instrument): each stops at a small
#: fixed share of what the start-ups leave, or at its fixed count if that is less
CORROBORATING = ("E06",)
CORROBORATION_SHARE = 0.10
#: the least share an adaptive job is given: a few rounds
MIN_JOB_S = 2.0
#: an adaptive job runs at most this many times its fixed count (C00's A/A: max_rounds;
#: E05: max_n), so its share is spent up to that, not only up to its fixed count
MAX_OVER_FIXED = 2


#: what a job imports first (fresh in each fork: the server never preloads perflab): the
#: fork server's probe imports them too, so its time (forkserver.probe_s) is a job's start
JOB_IMPORTS = ("perflab.pipeline.runner",)
#: beside the sampling config: the shares, each job's fixed-count estimate and the probes
ESTIMATE_FILE = "budget_estimate.json"


class BudgetError(ValueError):
    """A budget that cannot pay for the run's start-ups: one line; ``need_s``: the least
    that would, beyond the pre-flight."""

    def __init__(self, message: str, need_s: float):
        super().__init__(message)
        self.need_s = need_s


def start_s(answer: Mapping, child_wall_s: float, fork_server: bool,
            fork_device_s: float | None = None) -> float:
    """One job's measured start cost: the pre-flight child's wall minus its timed steps and
    lock wait; with the fork server its device start and its check (build and first step),
    since a fork inherits the server's interpreter and imports. ``fork_device_s``: what the
    server's probe fork took to start the device — the pre-flight child's own device start
    (``device_init_s``) read the device's libraries from a cold disk, which a fork after it
    does not (on an H100, 4.5-6.6 s a start estimated, 1-3 s run). A compiled step's
    compiling (the pre-flight's) is part of every job's start."""
    # a job compiles the step afresh (its compile cache is its own), as the pre-flight did
    compiling = float((answer.get("compiler") or {}).get("compile_s") or 0.0)
    check = float(answer.get("check_s") or 0.0) + compiling
    if fork_server:
        if fork_device_s is not None and answer.get("check_warm_s") is not None \
                and not compiling:
            # the probe paid the libraries' first use in a fork, the second check the build
            # and first step without it (the first check's 4.3-6.5 s held that first use on
            # an H100 whose jobs started in 2-3 s). Not for a compiled step: the first check
            # holds its first compile, cold as a job's (the recompiling example: 15 s of
            # it), which the second, from the same cache, does not (estimated 43 % short)
            return fork_device_s + float(answer["check_warm_s"]) + compiling
        device = fork_device_s if fork_device_s is not None else \
            float(answer.get("device_init_s") or 0.0)
        return check + device
    return max(child_wall_s - float(answer.get("steps_s") or 0.0)
               - float(answer.get("lock_wait_s") or 0.0)
               - float(answer.get("server_wait_s") or 0.0),
               check + float(answer.get("device_init_s") or 0.0))


def least_s(contracts: Mapping[str, Mapping], fixed_s: Mapping[str, float]
            ) -> dict[str, float]:
    """The least share each adaptive job can use: the fraction of its fixed count it runs
    before its first look (C00: AA_MIN_BLOCKS of its A/A's pairs; E05: one of its blocks),
    at least MIN_JOB_S."""
    from perflab.experiments.c00_calibration import AA_MIN_BLOCKS

    first = {"C00": lambda p: AA_MIN_BLOCKS / max(1, p.get("aa_blocks") or 1),
             "E05": lambda p: 1 / max(1, p.get("blocks") or 1)}
    out = {}
    for e in (e for e in fixed_s if e in ADAPTIVE):
        part = first.get(e, lambda p: 0.0)((contracts.get(e) or {}).get("params", {}))
        out[e] = max(MIN_JOB_S, min(1.0, part) * fixed_s[e])
    return out


def split(total_s: float, fixed_s: Mapping[str, float], start_each_s: float,
          other_jobs: int = 1, least: Mapping[str, float] | None = None,
          further_jobs: int = 0, other_start_s: float | None = None) -> dict[str, float]:
    """{"start-up": s, eid: s, ...} summing to ``total_s`` (what is left of the budget once
    the pre-flight has run).

    ``fixed_s``: each measuring job's seconds under the fixed-count contract, each costing
    ``start_each_s`` to start (its build, first step and compiling), as do ``further_jobs``
    (further processes of an experiment); ``other_jobs``: starts that measure nothing
    (Snakemake, the diagnosis view), each ``other_start_s`` (default ``start_each_s``): they
    build and compile nothing (a recompiling step's start was 27 s, theirs 1-4 s). A job
    that does not stop on its budget (not in ``ADAPTIVE``) is given what its fixed count
    takes: splitting time it will spend anyway would make the estimate wrong; a job that only
    corroborates (``CORROBORATING``) gets at most ``CORROBORATION_SHARE`` of what the
    start-ups leave; the adaptive jobs share the rest in proportion to their fixed-count
    seconds."""
    measuring = len(fixed_s) + further_jobs
    startup = start_each_s * measuring + other_jobs * (
        start_each_s if other_start_s is None else other_start_s)
    reserved = {e: (min(s, CORROBORATION_SHARE * max(0.0, total_s - startup))
                    if e in CORROBORATING else s)
                for e, s in fixed_s.items() if e not in ADAPTIVE}
    left = total_s - startup - sum(reserved.values())
    adaptive = {e: max(s, 1e-9) for e, s in fixed_s.items() if e in ADAPTIVE}
    floor = {e: (least or {}).get(e, MIN_JOB_S) for e in adaptive}
    if left <= 0 or (adaptive and left < MIN_JOB_S * len(adaptive)):
        # what the budget it suggests must pay: every start, the fixed counts and each
        # adaptive job's first rounds, which it runs whatever its share (a newcomer given
        # the least that covered the first two was then told the run would overrun it)
        first = sum(max(MIN_JOB_S, floor[e]) for e in adaptive)
        need = startup + sum(reserved.values()) + first
        raise BudgetError(
            f"{max(total_s, 0):.0f} s left of the budget does not cover the start-up of "
            f"{measuring} measuring jobs and {other_jobs} other processes ({startup:.0f} s "
            f"measured), the jobs that run a fixed count ({sum(reserved.values()):.0f} s) and "
            f"the first rounds of the adaptive ones ({first:.0f} s): at least {need:.0f} s",
            need)
    wsum, spare = sum(adaptive.values()), left - sum(floor.values())
    if spare < 0:
        # the first rounds are estimated beyond what is left: each adaptive job runs them
        # anyway (fewer decide nothing), so the shares follow them and the estimate
        # (estimate_s with ``least``) says the run will overrun, rather than refusing on an
        # estimate from the pre-flight's few early steps
        fsum = sum(floor.values())
        return {"start-up": startup, **reserved,
                **{e: left * floor[e] / fsum for e in adaptive}}
    # each adaptive job its first rounds, then the rest by its fixed count's weight
    out = {"start-up": startup, **reserved,
           **{e: floor[e] + spare * w / wsum for e, w in adaptive.items()}}
    return {k: out[k] for k in ["start-up", *fixed_s]}


def estimate_s(shares: Mapping[str, float], fixed_s: Mapping[str, float],
               least: Mapping[str, float] | None = None) -> float:
    """The whole run's expected wall: start-ups plus each job's time, which is its fixed-count
    time (an adaptive job's: up to MAX_OVER_FIXED times it, where a fast step's A/A runs to
    its maximum) when that fits its share and its share when not (a job stops at its budget)
    — but never less than its first rounds (``least``), which it runs whatever its share."""
    least = least or {}
    most = {e: fixed_s[e] * (MAX_OVER_FIXED if e in ADAPTIVE else 1) for e in fixed_s}
    return shares["start-up"] + sum(
        max(min(shares[e], most[e]), min(least.get(e, 0.0), fixed_s[e])) for e in fixed_s)


def estimate_low_s(shares: Mapping[str, float], fixed_s: Mapping[str, float],
                   least: Mapping[str, float]) -> float:
    """The run's wall if every adaptive job decides at its first look (its ``least``): an
    adaptive job that decides early stops well inside its share, so :func:`estimate_s` is
    the high end and this the low end."""
    return shares["start-up"] + sum(
        min(fixed_s[e], least[e]) if e in least else min(shares[e], fixed_s[e])
        for e in fixed_s)


def line(total_s: float, shares: Mapping[str, float], preflight_s: float,
         estimate: float, low: float | None = None) -> str:
    """``budget 60 s: start-up 12 s, C00 8 s, E05 10 s, ...; estimated 30-48 s``."""
    parts = ", ".join(f"{k} {v:.0f} s" for k, v in shares.items())
    span = "" if low is None or round(low) >= round(estimate) else f"{preflight_s + low:.0f}-"
    # the middle: a job decides early where its step is slow and runs to its maximum where
    # it is fast, so neither end is the likely wall (the 2-core CPU: the MLP 22-57 s for a
    # 40.5 s wall, tiny_kernels 18-21 s for 20.3 s)
    about = f", about {preflight_s + (low + estimate) / 2:.0f} s" if span else ""
    return (f"budget {total_s:.0f} s: pre-flight {preflight_s:.0f} s (spent), {parts}; "
            f"estimated {span}{preflight_s + estimate:.0f} s from the command to the verdict"
            + (f"{about} (the low end if every adaptive job decides at its first look)"
               if span else ""))


def sized_for_step(contracts: Mapping[str, Mapping], step_ms: float) -> dict[str, dict]:
    """The params a budget sizes by the step: {experiment: {param: value}} where they differ
    from the contract's. C00's A/A blocks: at most about half a second a block
    (c00_calibration.aa_inner_under_budget), so a long step's first rounds fit a minute —
    only where no A/B is judged against the floor (no W01): an A/B's blocks are as long as
    configured, and a floor from shorter blocks is wider (on a CPU GPT-2 8.0 % from blocks of
    0.5 s against 3.6 % from 1.3 s, and a what-if's -7.9 % [-11.4, -5.5] went unresolved)."""
    from perflab.experiments.c00_calibration import aa_inner_under_budget

    out: dict[str, dict] = {}
    params = (contracts.get("C00") or {}).get("params") or {}
    if "W01" not in contracts and isinstance(params.get("aa_inner"), int):
        inner = aa_inner_under_budget(step_ms, params["aa_inner"])
        if inner != params["aa_inner"]:
            out["C00"] = {"aa_inner": inner}
    return out


def write_config(path, shares: Mapping[str, float], total_s: float,
                 processes: Mapping[str, int] | None = None,
                 params: Mapping[str, Mapping] | None = None) -> None:
    """The ``sampling`` section as a config file for Snakemake's ``--configfile`` (its
    ``--config`` reads a nested number as a string). An experiment that runs ``processes[e]``
    processes (claim_processes) gives each its part of its share. ``params``
    (:func:`sized_for_step`) go under ``experiments``, over the run's own."""
    import yaml

    from perflab.core import io

    jobs = {e: round(float(s) / (processes or {}).get(e, 1), 2)
            for e, s in shares.items() if e != "start-up"}
    doc: dict = {"sampling": {"rule": "adaptive", "budget_s": round(total_s, 2),
                              "job_budget_s": jobs}}
    if params:
        doc["experiments"] = {e: dict(p) for e, p in params.items()}
    text = yaml.safe_dump(doc, sort_keys=False)
    io.atomic_write_text(path, text)


def write_estimate(path, shares: Mapping[str, float], fixed: Mapping[str, float],
                   start_s: float, probes: Mapping[str, float] | None) -> None:
    """What the split was made of, beside the sampling config: each job's share (s), what
    its fixed count was estimated to take (s), a job's start (s) and the pre-flight's probes,
    so a run's jobs' ``wall_s`` can be set against them (scripts/bench_diagnose.py)."""
    import json

    from perflab.core import io

    doc = {"shares_s": {e: round(float(v), 3) for e, v in shares.items()},
           "fixed_s": {e: round(float(v), 3) for e, v in fixed.items()},
           "start_s": round(float(start_s), 3),
           "probes": {k: float(v) for k, v in (probes or {}).items()}}
    io.atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
