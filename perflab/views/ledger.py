"""The chapter's PERFORMANCE LEDGER, filled from this run's results only.

Each line of the ledger cites the rows it came from (experiment / variant /
metric / statistic) in ``ledger.csv``. A line whose experiment was not run
says so instead of showing a number: the ledger never invents a row it
cannot measure honestly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from perflab import experiments
from perflab.core import io
from perflab.core.names import PHASES, STEP_LATENCY
from perflab.core.rows import Rows
from perflab.experiments import c00_calibration as c00
from perflab.experiments import e01_lying_benchmark as e01
from perflab.experiments import e03_warmup_spread as e03
from perflab.experiments import e04_timer_vs_helper as e04
from perflab.experiments import e05_phases as e05
from perflab.experiments import e06_events_vs_wall as e06
from perflab.experiments import e07_optimizers as e07
from perflab.experiments import (
    e09_memory_by_phase,
    e15_amp,
    e16_checkpointing,
    e17_accumulation,
    e18_attention_seq,
    e19_compile_ab,
    e25_worked_pass,
    floors,
    r01_roofline,
    w01_whatif,
)
from perflab.experiments.catalogue import EXPERIMENTS
from perflab.kit import tables

LEDGER_COLUMNS = ["section", "field", "value", "unit", "source"]


def _get(frame: pd.DataFrame, eid: str, variant: str, metric: str, statistic: str = "median"):
    """The measured row (its ``value`` and ``n``), or None when it was not measured."""
    return Rows(frame).found(eid, variant, metric, statistic)


def _provenance(csv_paths: Iterable[str | Path]) -> dict[str, dict[str, Any]]:
    out = {}
    for p in csv_paths:
        j = Path(p).with_suffix(".json")
        if j.is_file():
            data = io.read_json(j)
            out[data["experiment"]] = data
    return out


def _fmt(v: float, digits: int = 3) -> str:
    return f"{v:.{digits}f}"


#: the interventions whose correctness line the ledger shows (E15-E18), each the worst case
#: over its variants from its module's ``correctness(rows)``
INTERVENTIONS = (e15_amp, e16_checkpointing, e17_accumulation, e18_attention_seq)


#: the experiments whose controlled workload is the chapter's contract, as each declares
#: (``Experiment.builds_the_contract``)
BENCHMARK_EXPERIMENTS = tuple(eid for eid, e in EXPERIMENTS.items() if e.builds_the_contract)


def build(csv_paths: list[str | Path]) -> tuple[pd.DataFrame, str]:
    """(ledger rows, ledger block as Markdown) for one device's result files."""
    frame = io.read_results(csv_paths)
    prov = _provenance(csv_paths)
    rows: list[dict[str, Any]] = []

    def add(section, field, value, unit="", source=""):
        rows.append(dict(section=section, field=field, value=value, unit=unit, source=source))

    run = _run_contract(prov)
    _workload_rows(run, add)
    bench = _benchmark_rows(frame, run, add)
    _hygiene_rows(frame, add)
    _instrument_rows(frame, add)
    _phase_rows(frame, add)
    _memory_rows(frame, add)
    _optimizer_correctness_rows(frame, add)
    _intervention_correctness_rows(frame, add)
    add("measurement", "boundary", "synchronized at both ends | uninstrumented | first step excluded"
        if bench else "no benchmark in this run")
    _roofline_and_verdict(frame, add)
    _whatif_rows(frame, add)
    _harness(frame, prov, add)
    _host_rows(prov, add)

    ledger = pd.DataFrame(rows, columns=LEDGER_COLUMNS)
    return ledger, render_markdown(ledger)


@dataclass
class _Run:
    """What the ledger reads from provenance: the contract, the environment, the workload."""

    contract: dict[str, Any]
    envr: dict[str, Any]
    wl: dict[str, Any]  # the controlled workload as built (description, batch size, ...)


def _run_contract(prov: dict[str, dict[str, Any]]) -> _Run:
    """The run's contract and environment (any job's provenance) and its controlled workload."""
    any_prov = next(iter(prov.values()), {})
    contract = any_prov.get("contract", {})
    wl_name = contract.get("workload", "")
    # the controlled workload as the benchmark experiments built it: interventions rebuild
    # it at other sizes (E16/E17 at batch 4096), so their provenance must not win
    wl = {}
    for eid in (*BENCHMARK_EXPERIMENTS, *prov):
        wl = prov.get(eid, {}).get("workloads", {}).get(wl_name) or {}
        if wl:
            break
    return _Run(contract, any_prov.get("environment", {}), wl)


def _workload_rows(run: _Run, add) -> None:
    """The header (model, optimizer, device) and the workload line, from provenance."""
    contract, envr, wl = run.contract, run.envr, run.wl
    device = contract.get("device", "")
    device_kind = "CUDA" if device.startswith("cuda") else "CPU"
    add("header", "model", wl.get("description", ""), source="provenance")
    add("header", "optimizer", wl.get("optimizer", ""), source="provenance")
    add("header", "device", f"{device_kind} ({envr.get('device_name', '')})", source="provenance")
    add("workload", "step", "train step")
    add("workload", "input_shape", wl.get("input_shape", ""), source="provenance")
    add("workload", "dtype", contract.get("dtype", ""), source="provenance")
    add("workload", "device", device, source="provenance")
    add("workload", "execution", "eager")
    add("workload", "scale", contract.get("scale", ""), source="provenance")
    add("workload", "threads", envr.get("torch_num_threads"), source="provenance")
    add("workload", "flush_denormal", contract.get("flush_denormal"), source="provenance")
    # fast: each job ran on the cores within 10% of its fastest (its provenance says which)
    add("workload", "host_cores", contract.get("host_cores"), source="provenance")


def _benchmark_rows(frame: pd.DataFrame, run: _Run, add) -> bool:
    """The benchmark line: the best warmed, synchronized series in this run; True if any."""
    bench = None
    for eid, variant in (
        (e03.EID, e03.SPREAD),
        (e01.EID, e01.SYNCHRONIZED_WARMED),
        (e04.EID, e04.HELPER),
        (e06.EID, e06.WALL[0]),
        ("E25", e25_worked_pass.BASELINE),
    ):
        stat_n = f"{eid} {variant}"
        med = _get(frame, eid, variant, STEP_LATENCY, "median")
        if med is not None:
            iqr = _get(frame, eid, variant, STEP_LATENCY, "iqr")
            bench = (med, iqr, stat_n)
            break
    if bench:
        med, iqr, src = bench
        batch = run.wl.get("batch_size")
        add("benchmark", "warmup", run.contract.get("timing", {}).get("warmup"), "calls",
            "contract")
        add("benchmark", "repeats", int(med.n), "calls", src)
        add("benchmark", "step_latency_median", med.value, "ms", src + " median")
        add("benchmark", "step_latency_iqr", iqr.value if iqr is not None else None, "ms", src + " iqr")
        if batch:
            add("benchmark", "examples_per_second", batch / med.value * 1e3, "examples/s",
                src + " median, batch " + str(batch))
    else:
        add("benchmark", "step_latency_median", None, "ms", "not measured: run E01, E03, E04 or E06")
    return bench is not None


def _hygiene_rows(frame: pd.DataFrame, add) -> None:
    """What the hygiene experiment exposed: the cold first step, a naive loop's report (E01)."""
    first = _get(frame, e01.EID, e01.FIRST_STEP, STEP_LATENCY, "value")
    if first is not None:
        add("hygiene", e01.FIRST_STEP, first.value, "ms", f"{e01.EID} {e01.FIRST_STEP}")
    loops = e01.loop_lengths(frame)
    if loops:
        shortest = e01.naive_loop(loops[0])
        rep = _get(frame, *e01.loop_row(loops[0], e01.REPORTED_MS_PER_STEP))
        back = _get(frame, *e01.loop_row(loops[0], e01.BACKLOG_AT_FINAL_SYNC))
        add("hygiene", f"{shortest}_reported", rep.value, "ms/step", f"{e01.EID} {shortest}")
        add("hygiene", f"{shortest}_backlog", back.value, "ms", f"{e01.EID} {shortest}")


def _instrument_rows(frame: pd.DataFrame, add) -> None:
    """The step as each instrument saw it: wall clock, device time, idle-stream events, host
    submission, host-exposed time (E06) and Timer (E04)."""
    for _, (variant, metric) in e06.SERIES:
        r = _get(frame, e06.EID, variant, metric, "median")
        if r is not None:
            add("instruments", variant, r.value, "ms", f"{e06.EID} {variant} {metric} median")
    timer = _get(frame, e04.EID, e04.TIMER, STEP_LATENCY, "median")
    if timer is not None:
        add("instruments", e04.TIMER, timer.value, "ms", f"{e04.EID} median")


def _phase_rows(frame: pd.DataFrame, add) -> None:
    """Shares of the synchronized phase medians (E05), and their sum against the step."""
    shares = e05.phase_shares(frame)
    if shares:
        for ph, share in shares.items():
            eid, variant, metric, _ = e05.phase_share_row(ph)
            add("phases", ph, share, "%", f"{eid} {variant} {metric}")
        gap = _get(frame, *e05.SUM_GAP_ROW)
        if gap is not None:
            add("phases", e05.SUM_MINUS_TOTAL, gap.value, "%", f"{e05.EID} {e05.SUM_MINUS_TOTAL}")
    else:
        add("phases", "shares", None, "", "not measured in this run (needs E05)")


def _optimizer_correctness_rows(frame: pd.DataFrame, add) -> None:
    """The one-step fused-vs-foreach agreement (E07, else E25), or why not."""
    for eid in (e07.EID, "E25"):  # E25 writes this check under E07's names
        diff = _get(frame, eid, e07.FUSED_VS_FOREACH, e07.MAX_ABS_DIFF, "value")
        if diff is not None:
            add("correctness", "fused_vs_foreach_max_abs_diff", diff.value, "abs",
                f"{eid} {e07.FUSED_VS_FOREACH}")
            scale = _get(frame, eid, e07.FUSED_VS_FOREACH, e07.PARAMETER_SCALE, "value")
            if scale is not None:
                add("correctness", "parameter_scale", scale.value, "mean |p|",
                    f"{eid} {e07.FUSED_VS_FOREACH}")
            break
    else:
        add("correctness", "optimizer", None, "", "not measured in this run (needs E07)")


def _intervention_correctness_rows(frame: pd.DataFrame, add) -> None:
    """Compiled forward vs eager per workload (E19), then E15-E18's worst differences, each
    from its experiment module's correctness(rows)."""
    for module in (e19_compile_ab, *INTERVENTIONS):
        for field, diff, source in module.correctness(frame):
            add("correctness", field, diff, "abs", source)


#: R01 phases shown in the ledger's roofline line
ROOFLINE_PHASES = ("forward", "backward", "optimizer", r01_roofline.STEP)


def _roofline_and_verdict(frame: pd.DataFrame, add) -> None:
    """The roofline section (R01: each phase's achieved fraction of the measured ceilings)
    and the verdict section (perflab.views.diagnose over every row of the run)."""
    from perflab.views import diagnose

    measured = r01_roofline.ceilings_measured(frame)
    if not measured:
        add("roofline", "fractions", None, "", "not measured in this run (needs R01)")
    for ph in ROOFLINE_PHASES if measured else ():
        for metric, pct, source in r01_roofline.achieved_fractions(frame, ph):
            add("roofline", f"{ph}_{metric}", pct, "%", source)
    d = diagnose.diagnose(frame)
    cited = "; ".join(e.source for e in d.evidence if e.value is not None)
    add("verdict", "waiting_for", d.label, "", cited or "diagnosis")
    add("verdict", "because", d.because, "", cited or "diagnosis")
    add("verdict", "next_intervention", d.intervention, "", "perflab.views.diagnose")


def _whatif_rows(frame: pd.DataFrame, add) -> None:
    """W01's interventions ranked by measured gain (each field one intervention); nothing
    when the run has no W01 rows (it runs only when asked: perflab whatif or diagnose)."""
    for o in w01_whatif.ranked(frame):
        measured = o.change_pct is not None
        src = (f"W01 {w01_whatif.variant(o.name, w01_whatif.CHANGE)} ab_effect_rel" if measured
               else f"W01 {o.name}")
        add("whatif", o.name, o.change_pct, "%" if measured else "",
            f"{src}: {o.verdict}" + (", one-step check MISMATCH" if o.correct is False else "")
            + (f" — {o.reason}" if o.reason else ""))


def _whatif_line(ledger: pd.DataFrame) -> list[str]:
    """The ledger's what-if line, or none when W01 did not run."""
    rows = ledger[ledger.section == "whatif"]
    if rows.empty:
        return []
    parts = []
    for f, v, src in zip(rows.field, rows.value, rows.source):
        verdict = src.split(": ", 1)[1].split(" — ", 1)[0]
        parts.append(f"{f} {float(v):+.1f}% ({verdict})" if pd.notna(v) else f"{f}: {verdict}")
    return ["what if     " + " | ".join(parts)]


def _harness(frame: pd.DataFrame, prov: dict[str, dict[str, Any]], add) -> None:
    """The harness's own floors (C00) and the GPU-state validity of every job."""
    from perflab.core import env

    f = c00.floors(frame)
    if isinstance(f["empty_call_ms"], tables.Missing):
        add("harness", "floors", None, "", "not measured in this run (needs C00)")
    for key, variant, metric, statistic in c00.FLOOR_ROWS:
        if not isinstance(f[key], tables.Missing):
            unit = "%" if key.endswith("_pct") else "x" if "_over_" in key else "ms"
            add("harness", key, f[key], unit, f"{c00.EID} {variant} {metric} {statistic}")
    # the floor of comparisons between separate processes (the run's jobs of one step)
    between, how = floors.run_process_floor(frame, experiments.process_peers())
    if between is not None:
        add("harness", "process_floor_pct", between, "%",
            f"perflab.instruments.stats.process_floor_pct of step_latency median over {how}")
    flagged = {eid: env.judge_gpu_state(p) for eid, p in prov.items()}
    known = {eid: v for eid, v in flagged.items() if v["status"] != "unknown"}
    bad = {eid: v for eid, v in known.items() if v["status"] == "flagged"}
    if not known:
        add("validity", "gpu_state", None, "", "no GPU state recorded (CPU run or NVML absent)")
    elif not bad:
        add("validity", "gpu_state", f"all {len(known)} GPU jobs ran unthrottled and alone", "",
            "provenance gpu_state_before/after")
    else:
        add("validity", "gpu_state", "; ".join(f"{eid}: {', '.join(v['reasons'])}"
                                               for eid, v in bad.items()),
            "flagged", "provenance gpu_state_before/after")


def _host_rows(prov: dict[str, dict[str, Any]], add) -> None:
    """The host-CPU validity of every job: the hypervisor's steal and other work on the
    machine while it ran (:func:`perflab.core.env.host_contention`), worst job named."""
    hosts = {eid: p["host_cpu"] for eid, p in prov.items() if isinstance(p.get("host_cpu"), dict)}
    if not hosts:
        add("validity", "host_cpu", None, "",
            "no host CPU times recorded (a run from before they were, or not Linux)")
        return
    steal = max(hosts, key=lambda e: hosts[e]["steal_pct"])
    busy = max(hosts, key=lambda e: hosts[e]["other_busy_cores"])
    bad = {eid: h for eid, h in hosts.items() if h.get("status") == "flagged"}
    if bad:
        add("validity", "host_cpu", "; ".join(f"{eid}: {', '.join(h['reasons'])}"
                                              for eid, h in bad.items()),
            "flagged", "provenance host_cpu (/proc/stat over each job)")
        return
    add("validity", "host_cpu",
        f"all {len(hosts)} jobs: steal at most {hosts[steal]['steal_pct']:.2g}% ({steal}), "
        f"other work at most {hosts[busy]['other_busy_cores']:.2g} cores busy ({busy})", "",
        "provenance host_cpu (/proc/stat over each job)")


def render_markdown(ledger: pd.DataFrame) -> str:
    """The ledger block in the chapter's layout, as a fenced Markdown block."""

    def val(section, field, digits=3):
        r = ledger[(ledger.section == section) & (ledger.field == field)]
        if r.empty or r.iloc[0].value is None or (isinstance(r.iloc[0].value, float)
                                                   and pd.isna(r.iloc[0].value)):
            return None
        v = r.iloc[0].value
        return _fmt(v, digits) if isinstance(v, float) else str(v)

    def missing(section):
        r = ledger[ledger.section == section]
        return r.iloc[0].source if not r.empty else "not measured"

    lines = [
        f"PERFORMANCE LEDGER   {val('header', 'model') or '?'}   "
        f"{val('header', 'optimizer') or '?'}   {val('header', 'device') or '?'}",
        "",
        f"workload    train step | batch {val('workload', 'input_shape')} | "
        f"{val('workload', 'dtype')} | {val('workload', 'device')} | eager | "
        f"scale {val('workload', 'scale')} | threads {val('workload', 'threads')}"
        + (" | denormals flushed" if val("workload", "flush_denormal") == "True" else "")
        + (" | fastest host cores" if val("workload", "host_cores") == "fast" else ""),
    ]
    med = val("benchmark", "step_latency_median")
    if med:
        eps = val("benchmark", "examples_per_second", 0)
        lines.append(
            f"benchmark   warmup {val('benchmark', 'warmup')} | repeats {val('benchmark', 'repeats')} | "
            f"step latency {med} ms (IQR {val('benchmark', 'step_latency_iqr')})"
            + (f" | {eps} examples/s" if eps else "")
        )
    else:
        lines.append(f"benchmark   {missing('benchmark')}")
    hyg = []
    if val("hygiene", e01.FIRST_STEP):
        hyg.append(f"first step {val('hygiene', e01.FIRST_STEP)} ms")
    for f in ledger[(ledger.section == "hygiene") & ledger.field.str.endswith("_reported")].field:
        base = f.removesuffix("_reported")
        n = base.rsplit("_", 1)[1]
        hyg.append(f"naive loop of {n} reports {val('hygiene', f)} ms/step with "
                   f"{val('hygiene', base + '_backlog', 1)} ms still queued")
    if hyg:
        lines.append("hygiene     " + " | ".join(hyg))
    ins = []
    for f, label in ((e06.WALL[0], "wall"), (e06.DEVICE[0], "device (events, device ahead)"),
                     (e06.IDLE_EVENTS[0], "events on an idle stream"),
                     (e06.SUBMISSION[0], "host submission"),
                     (e06.HOST_EXPOSED[0], "host-exposed (wall - device)"),
                     (e04.TIMER, "Timer")):
        v = val("instruments", f)
        if v:
            ins.append(f"{label} {v} ms")
    if ins:
        lines.append("instruments " + " | ".join(ins))
    labels = {"input_wait": "input wait", "host_to_device": "h2d"}
    phase_rows = ledger[(ledger.section == "phases") & ledger.field.isin(PHASES)
                        & ledger.value.notna()]
    if not phase_rows.empty:
        parts = [f"{labels.get(f, f)} {float(v):.1f}%" for f, v in
                 zip(phase_rows.field, phase_rows.value)]
        gap = val("phases", e05.SUM_MINUS_TOTAL, 1)
        lines.append("phases      " + " | ".join(parts)
                     + (f" | sum vs total {gap}%" if gap else ""))
    else:
        lines.append(f"phases      {missing('phases')}")
    lines.append(f"memory      {_memory_line(val) or missing('memory')}")
    diff = ledger[(ledger.section == "correctness")
                  & (ledger.field == "fused_vs_foreach_max_abs_diff")]
    if not diff.empty:
        scale = val("correctness", "parameter_scale", 4)
        lines.append(f"correctness one fused-optimizer step within {float(diff.value.iloc[0]):.1e}"
                     f"/element of foreach" + (f" (parameter scale {scale})" if scale else ""))
    else:
        lines.append(f"correctness {missing('correctness')}")
    compiled = ledger[(ledger.section == "correctness")
                      & ledger.field.str.match(r"compiled_.+_max_abs_diff")]
    if not compiled.empty:
        parts = [f"{f.removeprefix('compiled_').removesuffix('_max_abs_diff')} "
                 f"{float(v):.1e}" for f, v in zip(compiled.field, compiled.value)]
        lines.append("            torch.compile forward vs eager, max |diff|: " + ", ".join(parts))
    # each correctness line's source names its experiment first
    source_eid = ledger.source.astype(str).str.split(" ").str[0]
    got = ledger[(ledger.section == "correctness")
                 & source_eid.isin([m.ENTRY.eid for m in INTERVENTIONS])]
    checks = [f"{f.removesuffix('_abs_diff').replace('_', ' ')} {float(v):.1e}"
              for f, v in zip(got.field, got.value)]
    if checks:
        lines.append("            interventions (max |diff|): " + " | ".join(checks))
    lines += [
        f"measurement {val('measurement', 'boundary')}",
    ]
    roof = []
    for ph in ROOFLINE_PHASES:
        f = val("roofline", f"{ph}_{r01_roofline.FLOPS_FRACTION}", 1)
        b = val("roofline", f"{ph}_{r01_roofline.BANDWIDTH_FRACTION}", 1)
        if f is not None:
            roof.append(f"{ph} {f}% of peak FLOP/s, {b}% of bandwidth")
    lines.append("roofline    " + (" | ".join(roof) if roof else missing("roofline")))
    verdict = val("verdict", "waiting_for")
    if verdict:
        lines.append(f"verdict     waiting for {verdict}: {val('verdict', 'because')}")
        lines.append(f"next        {val('verdict', 'next_intervention')}")
    lines += _whatif_line(ledger)
    lines += _harness_lines(ledger, val, missing)
    return fenced("\n".join(lines))


def fenced(text: str) -> str:
    """``text`` in a Markdown code fence it cannot close: one backtick longer than the longest
    run of backticks in it (a workload's description is the user's text)."""
    import re

    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}\n"


def _harness_lines(ledger: pd.DataFrame, val, missing) -> list[str]:
    """The ledger's harness and validity lines (C00 floors, GPU-state and host-CPU gates)."""
    us = {k: val("harness", k, 6) for k in ("sync_ms", "empty_call_ms", "event_pair_ms")}
    if not us["empty_call_ms"]:
        lines = [f"harness     {missing('harness')}"]
    else:
        parts = [f"timer floor {float(us['empty_call_ms']) * 1e3:.2f} us",
                 f"sync {float(us['sync_ms']) * 1e3:.2f} us" if us["sync_ms"] else None,
                 f"event pair {float(us['event_pair_ms']) * 1e3:.2f} us"
                 if us["event_pair_ms"] else None]
        dev = val("harness", "process_device_init_ms", 0)
        if dev:
            parts.append(f"process floor {float(dev) / 1e3:.2f} s")
        prof = val("harness", "profiler_overhead_pct", 1)
        if prof:
            parts.append(f"profiler {prof}%")
        aa = val("harness", "aa_floor_pct", 2)
        if aa:
            block = val("harness", "aa_block_ms", 0)
            parts.append(f"A/A floor within a process {aa}% (95% bound of |median paired "
                         "block difference|, two copies of the step"
                         + (f", {block} ms blocks)" if block else ")"))
        between = val("harness", "process_floor_pct", 2)
        if between:
            parts.append(f"A/A floor between processes {between}% (95% bound of the gap "
                         "between two fresh processes' medians of one step, from the run's "
                         "jobs that time it)")
        for key, label in (("timer_over_helper", "Timer/helper"),
                           ("do_bench_over_helper", "do_bench/helper")):
            v = val("harness", key, 3)
            if v:
                parts.append(f"{label} {v}x")
        lines = ["harness     " + " | ".join(p for p in parts if p)]
    v = val("validity", "gpu_state")
    lines.append(f"validity    {v if v else missing('validity')}")
    host = ledger[(ledger.section == "validity") & (ledger.field == "host_cpu")]
    if not host.empty:
        h = host.iloc[0]
        lines.append(f"host        {'FLAGGED ' if h.unit == 'flagged' else ''}"
                     f"{val('validity', 'host_cpu') or h.source}")
    return lines


def _memory_rows(frame: pd.DataFrame, add) -> None:
    """The memory line's fields from E09's steady step (first step excluded), or why not."""
    found = e09_memory_by_phase.steady_memory(frame)
    for field, mib, source in found:
        add("memory", field, mib, "MiB", source)
    if not found:
        add("memory", "peak", None, "", "not measured in this run (needs E09)")


def _memory_line(val) -> str:
    parts = [f"{label} {val('memory', field, 1)} MiB"
             for field, _, _, label in e09_memory_by_phase.STEADY_MEMORY
             if val("memory", field, 1)]
    return " | ".join(parts)
