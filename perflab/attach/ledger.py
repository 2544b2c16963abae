"""The ledger of an attached run: what was run, what was timed and by which clock, and the
verdict, each row naming where it came from.

The chapter's ledger (perflab.views.ledger) reads an experiment run's rows; an attached run
has its own evidence, so its ledger is built here from it, in the same columns
(``LEDGER_COLUMNS``: section, field, value, unit, source). A quantity the run did not measure
is a row whose value is empty and whose source says why, never a number.
"""

from __future__ import annotations

import shlex
from typing import Any

import numpy as np
import pandas as pd

from perflab.attach import evidence as evmod
from perflab.core.names import PHASES
from perflab.views import diagnose as dg
from perflab.views.ledger import LEDGER_COLUMNS, fenced

EVIDENCE = "evidence.json"
#: the rows the timed figures come from (perflab.attach.evidence.rows)
TIMED = f"results.csv {evmod.EID} step step_latency"


def build(command: list[str], ev: dict | None, outcome: str, s: evmod.Summary | None = None,
          d: dg.Diagnosis | None = None, extra: dict | None = None,
          timings: dict | None = None) -> pd.DataFrame:
    """The ledger's rows. ``ev`` None: the script wrote no evidence; ``s``/``d`` None: no
    step was observed (the contract and the outcome only)."""
    rows: list[dict[str, Any]] = []

    def add(section, field, value, unit="", source=""):
        rows.append(dict(section=section, field=field, value=value, unit=unit, source=source))

    _contract(command, ev, outcome, add)
    if ev is not None and s is not None:
        _steps(ev, s, add)
        _phases(s, add)
        _observers(s, add)
        _observed(ev, add)
        _stopping(ev, add)
    if timings:
        for key in ("startup_s", "observed_s", "verdict_s"):
            if timings.get(key) is not None:
                add("time", key.removesuffix("_s"), timings[key], "s",
                    "timings.json (the wall clock across perflab and the script's process)")
    if d is not None:
        cited = "; ".join(e.source for e in d.evidence if e.value is not None)
        add("verdict", "waiting_for", d.label, "", cited or "perflab.attach.verdict")
        add("verdict", "because", d.because, "", cited or "perflab.attach.verdict")
        add("verdict", "next_intervention", d.intervention, "", "perflab.attach.verdict")
        mem = (extra or {}).get("memory")
        if mem is not None:
            add("verdict", "memory_grows_every_step", mem.outcome == dg.FITS, "",
                f"{mem.because} (perflab.attach.verdict.memory_growth)")
    else:
        add("verdict", "waiting_for", None, "", "no step was observed: nothing to judge")
    return pd.DataFrame(rows, columns=LEDGER_COLUMNS)


def _contract(command, ev, outcome, add) -> None:
    module = command[0] == "-m"
    script = command[1] if module else command[0]
    add("contract", "script", f"-m {script}" if module else script, "", "the command line")
    add("contract", "args", shlex.join(command[2:] if module else command[1:]), "",
        "the command line")
    add("contract", "source_sha256", evmod.source_hash(script) if not module else None, "",
        "sha256 of the script's file, first 12 hex digits (perflab.attach.evidence"
        ".source_hash)" if not module else "not hashed: a module is found by Python at run time")
    if ev is None:
        add("contract", "outcome", outcome, "", "the exit status (no evidence was written)")
        return
    add("contract", "device", ("cuda" if ev["cuda"] else "cpu") + f" ({ev['device_name']})",
        "", f"{EVIDENCE} cuda, device_name (the script's process)")
    add("contract", "torch", ev["torch"], "", f"{EVIDENCE} torch (the script's process)")
    add("contract", "step", ev["unit"], "",
        f"{EVIDENCE} unit (optimizer step hooks; per forward when none stepped)")
    add("contract", "models", ", ".join(ev["models"]) or "none observed", "",
        f"{EVIDENCE} models (the outermost module called in a step)")
    add("contract", "optimizers", ", ".join(ev["optimizers"]) or "none stepped", "",
        f"{EVIDENCE} optimizers (torch's global optimizer step hooks)")
    add("contract", "loader", ev["loaders"][0]["site"] if ev["loaders"] else "none", "",
        f"{EVIDENCE} loaders (the DataLoader's construction)" if ev["loaders"] else
        "no DataLoader was constructed")
    add("contract", "outcome", outcome, "", f"{EVIDENCE} status and the exit status")


def _steps(ev, s, add) -> None:
    clock = ev.get("step_clock") or "not recorded (evidence from before step_clock)"
    add("steps", "observed", s.steps_total, "count", f"{EVIDENCE} steps")
    add("steps", "warmup", sum(1 for r in ev["steps"] if r["kind"] == "warmup"), "count",
        f"{EVIDENCE} steps of kind warmup (--warmup; reported apart, never timed)")
    add("steps", "timed", len(s.steady_ms), "count",
        f"{EVIDENCE} steady steps, hooks on and off (instrument windows and recompiles "
        "excluded)")
    add("steps", "step_clock", clock, "", f"{EVIDENCE} step_clock")
    for stat, q in (("median", 50), ("p25", 25), ("p75", 75)):
        add("steps", f"step_ms_{stat}", float(np.percentile(s.steady_ms, q))
            if s.steady_ms else None, "ms",
            f"{TIMED} {stat} (clock: {clock})" if s.steady_ms else "no timed step")
    for i, w in enumerate(s.warmup_ms):
        add("steps", f"warmup_ms_{i + 1}", w, "ms",
            f"results.csv {evmod.EID} warmup/{i + 1} step_latency (the first step has no start)")
    add("steps", "recompile_steps", s.recompile_steps, "count",
        f"results.csv {evmod.EID} compiler recompile_steps (Dynamo's counters)")
    if s.micro_batches is not None:
        add("steps", "micro_batches", s.micro_batches, "count",
            f"results.csv {evmod.EID} step micro_batches (backward calls per step)")


def _phases(s, add) -> None:
    if not s.phase_share_pct:
        add("phases", "shares", None, "", "no steady step with the phase hooks on")
        return
    for p in PHASES:
        if p in s.phase_share_pct:
            add("phases", p, s.phase_share_pct[p], "%",
                f"results.csv {evmod.EID} phase/{p} phase_share: {s.observed_steps} steps, "
                f"mean {s.phase_mean_ms[p]:.3g} ms (perflab.instruments.phases' hooks)")


def _observers(s, add) -> None:
    c = s.cost
    if not c:
        add("observers", "cost_pct", None, "%", "not measured: fewer than 2 hooks-on/off "
            "stretch pairs in the budget (more steps would measure it)")
        return
    add("observers", "cost_pct", c["relative_pct"], "%",
        f"results.csv {evmod.EID} observers step_latency_rel: {c['pairs']} paired stretches, "
        "hooks on against off (perflab.instruments.stats.judge)")
    add("observers", "cost_ci_ms", f"{c['ci_low_ms']:.3g}..{c['ci_high_ms']:.3g}", "ms",
        "95% interval of the paired difference (perflab.instruments.stats.judge)")
    add("observers", "cost_resolved", bool(c["resolved"]), "",
        f"p = {c['p']:.2g} (perflab.instruments.stats.judge)")


def _observed(ev, add) -> None:
    """Host reads located, the compiler, memory, the counted work."""
    from perflab.attach import verdict as vmod

    inst = ("torch.cuda.set_sync_debug_mode in the sync steps" if ev["cuda"] else
            "Tensor.item/tolist/cpu/numpy/__bool__ wrapped in the sync steps (a sync on CUDA)")
    reads = vmod.host_reads(ev)
    for site, per_step in reads[:8]:
        add("host_reads", site, per_step, "per step", inst)
    if not reads:
        add("host_reads", "located", 0, "count", inst)
    dyn = ev.get("dynamo_final") or {}
    if dyn.get("stats.unique_graphs"):
        src = f"{EVIDENCE} dynamo_final (Dynamo's counters)"
        add("compiler", "graphs", dyn["stats.unique_graphs"], "count", src)
        add("compiler", "recompiles", len(ev.get("recompiles") or []), "count",
            f"{EVIDENCE} recompiles (Dynamo's stated reasons)")
        add("compiler", "graph_breaks", sum(v for k, v in dyn.items()
                                            if k.startswith("graph_break.")), "count", src)
        add("compiler", "compile_s", sum((ev.get("compile_time_s") or {}).values()), "s",
            f"{EVIDENCE} compile_time_s (torch's compile-time counters)")
        add("compiler", "recompile_limit_hit", bool(ev.get("limit_hits")), "",
            f"{EVIDENCE} limit_hits (a frame fell back to eager)")
    else:
        add("compiler", "graphs", 0, "count", "the script compiled no graph (Dynamo's counters)")
    own = ev.get("owners") or {}
    for k in ("parameters_mib", "gradients_mib", "optimizer_state_mib"):
        if k in own:
            add("memory", k.removesuffix("_mib"), own[k], "MiB",
                f"{EVIDENCE} owners, at the end (perflab.instruments.memory)")
    peak = [r["memory"]["max_allocated_mib"] for r in ev["steps"]
            if r["kind"] in evmod.TIMED and "max_allocated_mib" in r["memory"]]
    if peak:
        add("memory", "step_peak_allocated", max(peak), "MiB",
            f"{EVIDENCE} steps' max_allocated_mib (torch.cuda.max_memory_allocated)")
    s_key = next((k for k in ("allocated_mib", "rss_mib") if ev["steps"]
                  and k in ev["steps"][-1]["memory"]), None)
    if s_key:
        add("memory", f"step_end_{s_key.removesuffix('_mib')}", ev["steps"][-1]["memory"][s_key],
            "MiB", f"{EVIDENCE} the last step's {s_key}")
    f, ceil = ev.get("roofline") or {}, ev.get("ceilings") or {}
    for k, unit in (("arithmetic_intensity", "FLOP/B"), ("flops_fraction", "%"),
                    ("bandwidth_fraction", "%")):
        if k in f:
            add("roofline", k, f[k], unit, "one step's forward + backward counted (R01's "
                f"counters) over the steady time, against the {ceil.get('dtype', '')} "
                "ceilings measured after the script")


def _stopping(ev, add) -> None:
    """How the run stopped (perflab.attach.stopping): the contract, decided or cut short by
    the budget and what it lacked, the pre-flight estimate."""
    st = ev["status"].get("stopping")
    src = f"{EVIDENCE} status.stopping (perflab.attach.stopping)"
    if not st:
        add("stopping", "contract", "fixed", "", f"{EVIDENCE} status: no stopping rule ("
            f"stopped by {ev['status'].get('stopped_by') or ev['status'].get('exit')})")
        return
    add("stopping", "contract", st["contract"], "", src)
    add("stopping", "stopped", st.get("stopped") or "not by the rule", "", src)
    if st.get("stopped") == "budget":
        add("stopping", "lacked", "; ".join(st.get("lacking", [])), "",
            f"{src}: the tests undecided when the budget was spent")
    add("stopping", "budget", st["budget_s"], "s", "--budget")
    add("stopping", "estimate", st.get("estimate_s"), "s",
        f"{src}: the pre-flight estimate at the first stretch pair" if st.get("estimate_s")
        else "no estimate: no stretch pair was seen")


def _cell(v, unit: str) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "not measured"
    if isinstance(v, float):
        return f"{v:.3g}" + (f" {unit}" if unit and unit != "count" else "")
    return f"{v}" + (f" {unit}" if unit and unit != "count" else "")


def render_markdown(ledger: pd.DataFrame) -> str:
    """One line per section, ``field value`` joined by ``|``, in a fence; the sources are in
    ledger.csv."""
    head = {f: v for f, v in zip(ledger.field, ledger.value)
            if f in ("script", "optimizers", "device")}
    lines = [f"PERFORMANCE LEDGER (perflab run)   {head.get('script')}   "
             f"{head.get('optimizers') or 'no optimizer'}   {head.get('device') or '?'}", ""]
    for section, part in ledger.groupby("section", sort=False):
        cells = [f"{f} {_cell(v, u)}" for f, v, u in zip(part.field, part.value, part.unit)]
        lines.append(f"{section:<11} " + " | ".join(cells))
    return fenced("\n".join(lines))
