"""The chapter's PERFORMANCE LEDGER, filled from this run's results only.

Each line of the ledger cites the rows it came from (experiment / variant /
metric / statistic) in ``ledger.csv``. A line whose experiment was not run
says so instead of showing a number: the ledger never invents a row it
cannot measure honestly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd

from perflab import io, tables
from perflab.steps import PHASES

LEDGER_COLUMNS = ["section", "field", "value", "unit", "source"]


def _get(frame: pd.DataFrame, eid: str, variant: str, metric: str, statistic: str = "median"):
    """The measured row's value and sample count, or None when it was not measured."""
    rows = frame[frame.experiment == eid]
    value = tables.pick(rows, variant, metric, statistic)
    if isinstance(value, tables.Missing):
        return None
    return SimpleNamespace(value=float(value), n=tables.pick(rows, variant, metric, statistic,
                                                             field="n"))


def _provenance(csv_paths: Iterable[str | Path]) -> dict[str, dict[str, Any]]:
    out = {}
    for p in csv_paths:
        j = Path(p).with_suffix(".json")
        if j.is_file():
            data = json.loads(j.read_text())
            out[data["experiment"]] = data
    return out


def _fmt(v: float, digits: int = 3) -> str:
    return f"{v:.{digits}f}"


#: E15-E18 correctness columns in the ledger: (field, unit, experiment, variant suffix, metric)
INTERVENTION_CHECKS = (
    ("amp_fp16_loss_abs_diff", "abs", "E15", "fp16", "loss_abs_diff"),
    ("amp_bf16_loss_abs_diff", "abs", "E15", "bf16", "loss_abs_diff"),
    ("checkpointed_grad_max_abs_diff", "abs", "E16", "checkpointed_vs_normal",
     "grad_max_abs_diff"),
    ("accumulated_grad_max_abs_diff", "abs", "E17", "", "grad_max_abs_diff"),
    ("sdpa_out_max_abs_diff", "abs", "E18", "sdpa_vs_manual", "out_max_abs_diff"),
)


def _worst(frame: pd.DataFrame, eid: str, suffix: str, metric: str) -> float | None:
    """The largest measured value of ``metric`` over the variants ending in ``suffix``."""
    sel = frame[(frame.experiment == eid) & (frame.metric == metric) & (frame.status == "ok")
                & frame.variant.str.endswith(suffix)]
    return None if sel.empty else float(sel.value.max())


def build(csv_paths: list[str | Path]) -> tuple[pd.DataFrame, str]:
    """(ledger rows, ledger block as Markdown) for one device's result files."""
    frame = io.read_results(csv_paths)
    prov = _provenance(csv_paths)
    rows: list[dict[str, Any]] = []

    def add(section, field, value, unit="", source=""):
        rows.append(dict(section=section, field=field, value=value, unit=unit, source=source))

    any_prov = next(iter(prov.values()), {})
    contract = any_prov.get("contract", {})
    envr = any_prov.get("environment", {})
    wl_name = contract.get("workload", "")
    wl = {}
    for p in prov.values():
        wl = p.get("workloads", {}).get(wl_name) or wl
    device = contract.get("device", "")
    device_kind = "CUDA" if device.startswith("cuda") else "CPU"
    timing = contract.get("timing", {})

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

    # benchmark: the best warmed, synchronized series in this run
    bench = None
    for eid, variant, stat_n in (
        ("E03", "spread", "E03 spread"),
        ("E01", "synchronized_warmed", "E01 synchronized_warmed"),
        ("E04", "helper", "E04 helper"),
        ("E06", "wall_clock", "E06 wall_clock"),
        ("E25", "baseline_adamw_foreach", "E25 baseline_adamw_foreach"),
    ):
        med = _get(frame, eid, variant, "step_latency", "median")
        if med is not None:
            iqr = _get(frame, eid, variant, "step_latency", "iqr")
            bench = (med, iqr, stat_n)
            break
    if bench:
        med, iqr, src = bench
        batch = wl.get("batch_size")
        add("benchmark", "warmup", timing.get("warmup"), "calls", "contract")
        add("benchmark", "repeats", int(med.n), "calls", src)
        add("benchmark", "step_latency_median", med.value, "ms", src + " median")
        add("benchmark", "step_latency_iqr", iqr.value if iqr is not None else None, "ms", src + " iqr")
        if batch:
            add("benchmark", "examples_per_second", batch / med.value * 1e3, "examples/s",
                src + " median, batch " + str(batch))
    else:
        add("benchmark", "step_latency_median", None, "ms", "not measured: run E01, E03, E04 or E06")

    # instruments: what the hygiene experiments exposed about the boundaries
    first = _get(frame, "E01", "first_step", "step_latency", "value")
    if first is not None:
        add("hygiene", "first_step", first.value, "ms", "E01 first_step")
    loops = frame[(frame.experiment == "E01") & frame.variant.str.startswith("naive_loop_")
                  & (frame.status == "ok")]
    if not loops.empty:
        shortest = min(loops.variant.unique(), key=lambda v: int(v.rsplit("_", 1)[1]))
        rep = _get(frame, "E01", shortest, "reported_ms_per_step", "value")
        back = _get(frame, "E01", shortest, "backlog_at_final_sync", "value")
        add("hygiene", f"{shortest}_reported", rep.value, "ms/step", f"E01 {shortest}")
        add("hygiene", f"{shortest}_backlog", back.value, "ms", f"E01 {shortest}")
    for variant in ("wall_clock", "cuda_events", "host_submission", "wall_minus_events"):
        r = _get(frame, "E06", variant, "step_latency", "median")
        if r is not None:
            add("instruments", variant, r.value, "ms", f"E06 {variant} median")
    timer = _get(frame, "E04", "timer_blocked_autorange", "step_latency", "median")
    if timer is not None:
        add("instruments", "timer_blocked_autorange", timer.value, "ms", "E04 median")

    # phases: shares of the synchronized phase medians (E05)
    shares = {ph: _get(frame, "E05", f"sync/{ph}", "phase_share", "value") for ph in PHASES}
    if any(v is not None for v in shares.values()):
        for ph, r in shares.items():
            if r is not None:
                add("phases", ph, r.value, "%", f"E05 sync/{ph} phase_share")
        gap = _get(frame, "E05", "sum_minus_total", "step_latency_relative", "value")
        if gap is not None:
            add("phases", "sum_minus_total", gap.value, "%", "E05 sum_minus_total")
    else:
        add("phases", "shares", None, "", "not measured in this run (needs E05)")
    add("memory", "peak", None, "", "not measured in this run (needs E09)")
    # correctness: the one-step fused-vs-foreach agreement (E07, else E25)
    for eid in ("E07", "E25"):
        diff = _get(frame, eid, "fused_vs_foreach", "max_abs_diff", "value")
        if diff is not None:
            add("correctness", "fused_vs_foreach_max_abs_diff", diff.value, "abs",
                f"{eid} fused_vs_foreach")
            scale = _get(frame, eid, "fused_vs_foreach", "parameter_scale", "value")
            if scale is not None:
                add("correctness", "parameter_scale", scale.value, "mean |p|",
                    f"{eid} fused_vs_foreach")
            break
    else:
        add("correctness", "optimizer", None, "", "not measured in this run (needs E07)")
    # the interventions' correctness columns, each the worst case over its variants
    for field, unit, eid, suffix, metric in INTERVENTION_CHECKS:
        worst = _worst(frame, eid, suffix, metric)
        if worst is not None:
            add("correctness", field, worst, unit,
                f"{eid} {'*/' + suffix if suffix else 'every variant'} {metric} (max)")
    add("measurement", "boundary", "synchronized at both ends | uninstrumented | first step excluded"
        if bench else "no benchmark in this run")

    ledger = pd.DataFrame(rows, columns=LEDGER_COLUMNS)
    return ledger, render_markdown(ledger)


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
        + (" | denormals flushed" if val("workload", "flush_denormal") == "True" else ""),
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
    if val("hygiene", "first_step"):
        hyg.append(f"first step {val('hygiene', 'first_step')} ms")
    for f in ledger[(ledger.section == "hygiene") & ledger.field.str.endswith("_reported")].field:
        base = f.removesuffix("_reported")
        n = base.rsplit("_", 1)[1]
        hyg.append(f"naive loop of {n} reports {val('hygiene', f)} ms/step with "
                   f"{val('hygiene', base + '_backlog', 1)} ms still queued")
    if hyg:
        lines.append("hygiene     " + " | ".join(hyg))
    ins = []
    for f, label in (("wall_clock", "wall"), ("cuda_events", "events"),
                     ("host_submission", "host submission"),
                     ("wall_minus_events", "wall - events"),
                     ("timer_blocked_autorange", "Timer")):
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
        gap = val("phases", "sum_minus_total", 1)
        lines.append("phases      " + " | ".join(parts)
                     + (f" | sum vs total {gap}%" if gap else ""))
    else:
        lines.append(f"phases      {missing('phases')}")
    lines.append(f"memory      {missing('memory')}")
    diff = ledger[(ledger.section == "correctness")
                  & (ledger.field == "fused_vs_foreach_max_abs_diff")]
    if not diff.empty:
        scale = val("correctness", "parameter_scale", 4)
        lines.append(f"correctness one fused-optimizer step within {float(diff.value.iloc[0]):.1e}"
                     f"/element of foreach" + (f" (parameter scale {scale})" if scale else ""))
    else:
        lines.append(f"correctness {missing('correctness')}")
    fields = [f for f, *_ in INTERVENTION_CHECKS]
    got = ledger[(ledger.section == "correctness") & ledger.field.isin(fields)]
    checks = [f"{f.removesuffix('_abs_diff').replace('_', ' ')} {float(v):.1e}"
              for f, v in zip(got.field, got.value)]
    if checks:
        lines.append("            interventions (max |diff|): " + " | ".join(checks))
    lines += [
        f"measurement {val('measurement', 'boundary')}",
    ]
    return "```\n" + "\n".join(lines) + "\n```\n"
