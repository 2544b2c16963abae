"""The child's evidence (observers.Observer.evidence) summarized, and written as CSV-contract rows.

Which steps count for what (their ``kind``, set by :func:`perflab.attach.observers.plan`):

- ``warmup``: the first steps (first calls, compilation, allocator growth): reported apart;
- ``syncs``, ``work``, ``profiled``, ``settle``: steps an instrument slowed (host reads
  located, work counted, the profiler, the profiler's trace written): never timed;
- ``observed`` (phase hooks on) and ``bare`` (phase hooks off, only the step clock): the
  steady state. The step's wall time is read from both; the phases from ``observed``; the
  observers' cost is ``observed`` against ``bare``, stretch by stretch (paired);
- a steady step during which Dynamo compiled a graph is a recompile: counted, not timed.

Phase shares are of the mean step (the mean of each phase over the sum of the means: the
sum of means is the mean of sums, so a phase that is long only on some steps, an
accumulation's optimizer, is charged its true share).
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perflab.core.names import PHASES

EID = "RUN"
TIMED = ("observed", "bare")
#: memory growth over the steady steps (MiB) below which a positive slope is not a finding:
#: a few allocator blocks
GROWTH_FLOOR_MIB = 4.0
#: share of consecutive timed steps whose step-end memory rose, at or above which memory
#: "grows every step" (an allocator that grows its pool once, or a cache that fills and
#: stops, rises in a few steps and then stays). Not 1: a CPU's resident set is counted in
#: pages the allocator caches, so a leak of a few MiB per step shows in most steps, not all
#: (on this CPU: 71-87% for leak.py, 43-47% for steps that keep nothing)
RISING_SHARE = 0.6


@dataclass
class Summary:
    unit: str
    steps_total: int
    warmup_ms: list[float]
    steady_ms: list[float]
    phase_mean_ms: dict[str, float]
    phase_share_pct: dict[str, float]
    micro_batches: float | None
    observed_steps: int
    recompile_steps: int
    memory_key: str = ""
    memory_series: list[float] = field(default_factory=list)
    memory_slope: tuple[float, float, float] | None = None  # (MiB/step, low, high)
    memory_steps_span: int = 0  # steps from the first timed step to the last
    memory_rising_share: float = 0.0  # of consecutive timed steps whose memory rose
    cost: dict | None = None


def _compiled(prev: dict, row: dict) -> int:
    return row["dynamo"].get("stats.unique_graphs", 0) - prev["dynamo"].get(
        "stats.unique_graphs", 0) if prev else 0


def summarize(ev: dict) -> Summary:
    steps = ev["steps"]
    compiled = {r["index"] for prev, r in zip([None] + steps[:-1], steps)
                if prev is not None and _compiled(prev, r) > 0 and r["kind"] != "warmup"}
    timed = [r for r in steps if r["kind"] in TIMED and r["wall_ms"] is not None
             and r["index"] not in compiled]
    observed = [r for r in timed if r["kind"] == "observed"]
    means = {p: float(np.mean([r["phases_ms"].get(p, 0.0) for r in observed])) if observed
             else 0.0 for p in PHASES}
    total = sum(means.values())
    shares = {p: 100 * v / total for p, v in means.items()} if total else {}
    s = Summary(ev["unit"], len(steps),
                [r["wall_ms"] for r in steps if r["kind"] == "warmup" and r["wall_ms"]],
                [r["wall_ms"] for r in timed], means if observed else {}, shares,
                float(np.mean([r["micro_batches"] for r in observed])) if observed else None,
                len(observed), len(compiled))
    mem_rows = [r for r in timed]
    if mem_rows:
        key = next(iter(k for k in ("allocated_mib", "rss_mib") if k in mem_rows[0]["memory"]),
                   "")
        if key:
            s.memory_key = key
            s.memory_series = [r["memory"][key] for r in mem_rows]
            if len(mem_rows) >= 6:
                from scipy.stats import theilslopes

                x = [r["index"] for r in mem_rows]
                # Theil-Sen is quadratic in the points: an evenly spaced subsample of a long
                # run (60 s of 7 ms steps is 8,000) estimates the same slope
                pick = np.unique(np.linspace(0, len(x) - 1, min(len(x), 400)).astype(int))
                slope, _, lo, hi = theilslopes(np.asarray(s.memory_series)[pick],
                                               np.asarray(x)[pick])
                s.memory_slope = (float(slope), float(lo), float(hi))
                s.memory_steps_span = x[-1] - x[0]
                rises = np.diff(s.memory_series)
                s.memory_rising_share = float(np.mean(rises > 0))
    s.cost = _cost(steps, compiled)
    return s


def _cost(steps: list[dict], compiled: set) -> dict | None:
    """The phase hooks' cost: each hooks-on stretch's median wall against the hooks-off
    stretch after it (paired, perflab.instruments.stats.judge)."""
    stretches: list[tuple[str, list[float]]] = []
    for r in steps:
        if r["kind"] not in TIMED or r["wall_ms"] is None or r["index"] in compiled:
            continue
        if stretches and stretches[-1][0] == r["kind"]:
            stretches[-1][1].append(r["wall_ms"])
        else:
            stretches.append((r["kind"], [r["wall_ms"]]))
    pairs = [(float(np.median(b)), float(np.median(a)))
             for (ka, a), (kb, b) in zip(stretches, stretches[1:])
             if ka == "observed" and kb == "bare"]
    if len(pairs) < 2:
        return None
    from perflab.instruments import stats

    bare, on = zip(*pairs)
    j = stats.judge(list(bare), list(on), paired=True)
    return {"pairs": len(pairs), "relative_pct": j.relative_pct, "ci_low_ms": j.ci_low,
            "ci_high_ms": j.ci_high, "p": j.p, "resolved": j.resolved,
            "bare_median_ms": float(np.median(bare)), "observed_median_ms": float(np.median(on))}


# ------------------------------------------------------------------ rows


def source_hash(script: str) -> str:
    try:
        return hashlib.sha256(Path(script).read_bytes()).hexdigest()[:12]
    except OSError:
        return "unreadable"


def workload_name(command: list[str]) -> str:
    """The contract's workload: the script and its arguments, and its source hash."""
    script = command[1] if command[0] == "-m" else command[0]
    h = source_hash(script) if command[0] != "-m" else "module"
    return f"{shlex.join(command)} (sha256 {h})"


def rows(ev: dict, s: Summary, command: list[str]) -> list[dict]:
    """CSV-contract rows (perflab.core.io) of one attached run."""
    common = dict(experiment=EID, workload=workload_name(command),
                  model="+".join(ev["models"]) or "none observed", input_shape="",
                  dtype="as the script sets it", device="cuda" if ev["cuda"] else "cpu",
                  device_name=ev["device_name"], mode="train" if ev["unit"] ==
                  "optimizer step" else "inference", execution="attached",
                  sync_boundary="none: the script's own loop, free-running", reason="")
    out = []

    def add(variant, metric, statistic, value, unit, n, window):
        if value is None:
            return
        out.append({**common, "variant": variant, "metric": metric, "statistic": statistic,
                    "value": float(value), "unit": unit, "n": n, "status": "ok",
                    "window": window})

    from perflab.instruments.stats import summarize as stat
    steady = f"steady {ev['unit']}s, hooks on and off (instrument windows excluded)"
    if s.steady_ms:
        for k, v in stat(s.steady_ms).items():
            if k in ("median", "p25", "p75", "mean", "min", "max", "iqr"):
                add("step", "step_latency", k, v, "ms", len(s.steady_ms), steady)
    for i, w in enumerate(s.warmup_ms):
        add(f"warmup/{i + 1}", "step_latency", "value", w, "ms", 1,
            "a warm-up step (first calls, compilation)")
    for p in PHASES:
        if p in s.phase_share_pct:
            window = f"{s.observed_steps} steady steps with the phase hooks on (perflab.instruments.phases)"
            add(f"phase/{p}", "phase_time", "mean", s.phase_mean_ms[p], "ms",
                s.observed_steps, window)
            add(f"phase/{p}", "phase_share", "value", s.phase_share_pct[p], "%",
                s.observed_steps, window)
    add("step", "micro_batches", "mean", s.micro_batches, "count", s.observed_steps,
        "backward calls between two optimizer steps")
    add("compiler", "recompile_steps", "value", s.recompile_steps, "count", len(s.steady_ms),
        "steady steps during which Dynamo compiled a graph")
    if s.memory_slope:
        add("memory", f"{s.memory_key}_slope", "value", s.memory_slope[0], "MiB/step",
            len(s.memory_series), "Theil-Sen slope over the timed steps' step-end memory")
    if s.cost:
        add("observers", "step_latency_rel", "value", s.cost["relative_pct"], "%",
            s.cost["pairs"], "hooks-on stretch median against the hooks-off stretch after it")
    return out
