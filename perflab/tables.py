"""The chapter's tables, regenerated from this run's result rows.

Each ``table_eXX(frame)`` takes the long frame of :func:`perflab.io.read_results`
(one experiment's rows or several experiments' rows concatenated) and returns a
small wide DataFrame in the layout of the chapter's table for that experiment.
Every number comes from a row; nothing is computed from assumptions.

A cell whose row did not measure (status ``unsupported``, ``oom`` or
``error``) holds the status word instead of a number, and the row's ``note``
column carries the reason. A cell whose row is absent says ``not run``.
Blank cells are not applicable to that row of the table (e.g. a backlog for a
synchronized series).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

NOT_RUN = "not run"


@dataclass(frozen=True)
class Missing:
    """A cell with no number: why (status) and, when the row gave one, the reason."""

    status: str
    reason: str = ""

    def __str__(self) -> str:
        return f"{self.status}: {self.reason}" if self.reason else self.status


def pick(
    frame: pd.DataFrame,
    variant: str,
    metric: str = "step_latency",
    statistic: str = "median",
    *,
    execution: str | None = None,
    field: str = "value",
) -> Any:
    """One value (or ``field``, e.g. ``"n"``) of the row matching the keys.

    Returns a :class:`Missing` when the row is absent or did not measure. A
    non-ok row is written once per variant/metric (statistic ``value``), so
    the statistic is not used to find it; and when a variant has no row for
    ``metric`` at all, a failure of the same variant under another metric
    explains the gap (e.g. a compiled step that never ran because compiling
    failed).
    """
    sel = frame[frame.variant == variant]
    if execution is not None:
        sel = sel[sel.execution == execution]
    if sel.empty:
        return Missing(NOT_RUN)
    same_metric = sel[sel.metric == metric]
    ok = same_metric[(same_metric.status == "ok") & (same_metric.statistic == statistic)]
    if not ok.empty:
        return ok.iloc[0][field]
    failed = same_metric[same_metric.status != "ok"]
    if failed.empty:
        failed = sel[sel.status != "ok"]
    if not failed.empty:
        row = failed.iloc[0]
        return Missing(row["status"], str(row["reason"]))
    return Missing(NOT_RUN if same_metric.empty else "not recorded")


def _rows(eid: str, frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame.experiment == eid]


def _variants(rows: pd.DataFrame, prefix: str) -> list[str]:
    """Variants named ``<prefix><N>`` (e.g. naive_loop_20), sorted by N."""
    names = [v for v in rows.variant.unique() if v.startswith(prefix)]
    return sorted(names, key=lambda v: int(v.removeprefix(prefix)))


def _frame(records: list[dict[str, Any]], columns: list[str] | None = None) -> pd.DataFrame:
    """Build a table; a Missing cell becomes its status word, its reason goes to ``note``.

    ``columns`` fixes the column order when records have different keys (a key
    a record lacks is a blank cell); ``note`` is kept only when some cell has a reason.
    """
    out = []
    for rec in records:
        reasons: list[str] = []
        row = {}
        for key, cell in rec.items():
            if isinstance(cell, Missing):
                if cell.reason and cell.reason not in reasons:
                    reasons.append(cell.reason)
                cell = cell.status
            row[key] = cell
        row["note"] = "; ".join(reasons)
        out.append(row)
    if not out:  # nothing to show (no rows of this experiment)
        return pd.DataFrame(columns=columns or [])
    table = pd.DataFrame(out)
    if columns is not None:
        table = table.reindex(columns=[*columns, "note"])
    if (table["note"] == "").all():
        table = table.drop(columns="note")
    return table


def table_e01(frame: pd.DataFrame) -> pd.DataFrame:
    """The lying benchmark: naive loops, then the synchronized and cold numbers."""
    r = _rows("E01", frame)
    records = []
    for v in _variants(r, "naive_loop_"):
        records.append({
            "measurement": f"naive loop of {v.removeprefix('naive_loop_')}",
            "n": pick(r, v, "reported_ms_per_step", "value", field="n"),
            "reported_ms_per_step": pick(r, v, "reported_ms_per_step", "value"),
            "backlog_ms": pick(r, v, "backlog_at_final_sync", "value"),
            "real_ms_per_step": pick(r, v, "real_ms_per_step", "value"),
        })
    # single-number rows: host_return is what an unsynchronized clock reports,
    # the other three are synchronized (real) times
    for label, variant, statistic, column in (
        ("synchronized + warmed, median", "synchronized_warmed", "median", "real_ms_per_step"),
        ("one step, host-visible return only (median)", "host_return", "median",
         "reported_ms_per_step"),
        ("first training step of the process", "first_step", "value", "real_ms_per_step"),
        ("unwarmed, median", "unwarmed", "median", "real_ms_per_step"),
    ):
        records.append({
            "measurement": label,
            "n": pick(r, variant, statistic=statistic, field="n"),
            column: pick(r, variant, statistic=statistic),
        })
    return _frame(records, ["measurement", "n", "reported_ms_per_step", "backlog_ms",
                            "real_ms_per_step"])


def table_e02(frame: pd.DataFrame) -> pd.DataFrame:
    """Four questions: one row per question, eager and compiled side by side."""
    r = _rows("E02", frame)
    records = []
    for v in r.variant.unique():  # the order the experiment measured them in
        records.append({
            "question": v,
            "mode": r[r.variant == v].iloc[0]["mode"],
            "eager_median_ms": pick(r, v, execution="eager"),
            "eager_iqr_ms": pick(r, v, statistic="iqr", execution="eager"),
            "compiled_median_ms": pick(r, v, execution="compiled"),
            "compiled_iqr_ms": pick(r, v, statistic="iqr", execution="compiled"),
            "compiled_first_call_ms": pick(r, v, "first_call", "value", execution="compiled"),
        })
    return _frame(records)


#: E03's statistics, in the chapter's order; tail_count is shown as "k/n"
E03_STATS = ("median", "iqr", "p25", "p75", "mean", "std", "min", "max")


def table_e03(frame: pd.DataFrame) -> pd.DataFrame:
    """Warmup and spread: one row per series (warmup N, then the long spread series)."""
    r = _rows("E03", frame)
    series = _variants(r, "warmup_") + [v for v in r.variant.unique()
                                        if not v.startswith("warmup_")]
    records = []
    for v in series:
        if v.startswith("warmup_"):
            label = f"warmup={v.removeprefix('warmup_')}"
        else:  # the long warmed series: say what it is from its window
            label = f"{v} ({pick(r, v, field='window')})"
        rec = {"series": label, "n": pick(r, v, field="n")}
        rec.update({f"{s}_ms": pick(r, v, statistic=s) for s in E03_STATS})
        tail, count = pick(r, v, statistic="tail_count"), pick(r, v, statistic="count")
        if isinstance(count, Missing):  # the sample count is also on every row
            count = pick(r, v, statistic="tail_count", field="n")
        # only the spread series records its tail; blank for the others
        if isinstance(tail, Missing) and tail.status == "not recorded":
            rec["above_median_plus_3iqr"] = ""
        elif isinstance(tail, Missing):
            rec["above_median_plus_3iqr"] = tail
        else:
            rec["above_median_plus_3iqr"] = f"{int(tail)}/{int(count)}"
        records.append(rec)
    return _frame(records)


def table_e04(frame: pd.DataFrame) -> pd.DataFrame:
    """Timer.blocked_autorange vs the helper: per-call median and IQR, and how each sampled."""
    r = _rows("E04", frame)
    timer = "timer_blocked_autorange"
    records = [
        {
            "instrument": "Timer.blocked_autorange",
            "median_ms": pick(r, timer),
            "iqr_ms": pick(r, timer, statistic="iqr"),
            "number_per_run": pick(r, timer, "number_per_run", "value"),
            "runs": pick(r, timer, "runs", "value"),
        },
        {
            # the helper's own sampling (warmup, repeats) is in its window text
            "instrument": f"helper ({pick(r, 'helper', field='window')})",
            "median_ms": pick(r, "helper"),
            "iqr_ms": pick(r, "helper", statistic="iqr"),
        },
    ]
    return _frame(records, ["instrument", "median_ms", "iqr_ms", "number_per_run", "runs"])


def table_e06(frame: pd.DataFrame) -> pd.DataFrame:
    """Two instruments: wall clock, CUDA events, host submission and their gap."""
    r = _rows("E06", frame)
    records = []
    for label, variant in (
        ("synchronized wall clock", "wall_clock"),
        ("CUDA events (device)", "cuda_events"),
        ("host submission only", "host_submission"),
        ("wall - events (per call, same calls)", "wall_minus_events"),
    ):
        records.append({
            "instrument": label,
            "median_ms": pick(r, variant),
            "iqr_ms": pick(r, variant, statistic="iqr"),
        })
    return _frame(records)


def table_e05(frame: pd.DataFrame) -> pd.DataFrame:
    """Seven phases: synchronized median, IQR, share; the unsynchronized brackets beside."""
    r = _rows("E05", frame)
    records = []
    for ph in ("input_wait", "host_to_device", "forward", "loss", "backward", "optimizer",
               "logging"):
        records.append({
            "phase": ph,
            "median_ms": pick(r, f"sync/{ph}", "phase_time"),
            "iqr_ms": pick(r, f"sync/{ph}", "phase_time", "iqr"),
            "share_pct": pick(r, f"sync/{ph}", "phase_share", "value"),
            "no_sync_median_ms": pick(r, f"nosync/{ph}", "phase_time"),
        })
    records.append({"phase": "sum of phases", "median_ms": pick(r, "sum_of_phases",
                                                                statistic="value")})
    records.append({"phase": "measured total (uninstrumented)",
                    "median_ms": pick(r, "uninstrumented_total"),
                    "iqr_ms": pick(r, "uninstrumented_total", statistic="iqr")})
    records.append({"phase": "sum - total", "median_ms": pick(r, "sum_minus_total",
                                                              statistic="value"),
                    "share_pct": pick(r, "sum_minus_total", "step_latency_relative", "value")})
    return _frame(records, ["phase", "median_ms", "iqr_ms", "share_pct", "no_sync_median_ms"])


def _pair_records(r: pd.DataFrame, a: str, b: str, label_a: str, label_b: str) -> list[dict]:
    """An interleaved pair's rows (Context.ab): each side, its block spread, the difference."""
    d = f"{b}_minus_{a}"
    out = []
    for label, v in ((label_a, a), (label_b, b)):
        out.append({
            "measurement": label,
            "median_ms": pick(r, v),
            "iqr_ms": pick(r, v, statistic="iqr"),
            "block_min_ms": pick(r, v, "block_median", "min"),
            "block_max_ms": pick(r, v, "block_median", "max"),
            "examples_per_s": pick(r, v, "throughput"),
        })
    out.append({
        "measurement": f"{label_b} - {label_a}",
        "median_ms": pick(r, d, statistic="value"),
        "change_pct": pick(r, d, "step_latency_relative", "value"),
        "wilcoxon_p": pick(r, d, "wilcoxon_p", "value"),
        "resolved": pick(r, d, "difference_resolved", "value"),
    })
    return out


PAIR_COLUMNS = ["measurement", "median_ms", "iqr_ms", "block_min_ms", "block_max_ms",
                "examples_per_s", "change_pct", "wilcoxon_p", "resolved"]


def table_e07(frame: pd.DataFrame) -> pd.DataFrame:
    """Isolated .step() per optimizer, the one-step correctness check, the end-to-end pair."""
    r = _rows("E07", frame)
    records = [{"measurement": f".step() {v}", "median_ms": pick(r, v, "optimizer_step"),
                "iqr_ms": pick(r, v, "optimizer_step", "iqr")}
               for v in ("sgd", "sgd_momentum", "adamw_foreach", "adamw_fused")]
    records.append({
        "measurement": "one step fused vs foreach: max |diff| (parameter scale)",
        "max_abs_diff": pick(r, "fused_vs_foreach", "max_abs_diff", "value"),
        "parameter_scale": pick(r, "fused_vs_foreach", "parameter_scale", "value"),
    })
    records += _pair_records(r, "step_adamw_foreach", "step_adamw_fused",
                             "full step, AdamW foreach", "full step, AdamW fused")
    return _frame(records, [*PAIR_COLUMNS, "max_abs_diff", "parameter_scale"])


def table_e25(frame: pd.DataFrame) -> pd.DataFrame:
    """The worked pass, one line per step of measure / localize / intervene / remeasure."""
    r = _rows("E25", frame)
    shares = {ph: pick(r, f"localize/{ph}", "phase_share", "value") for ph in
              ("input_wait", "host_to_device", "forward", "loss", "backward", "optimizer",
               "logging")}
    measured = {k: v for k, v in shares.items() if not isinstance(v, Missing)}
    largest = max(measured, key=measured.get) if measured else Missing(NOT_RUN)
    records = [
        {"step": "measure", "quantity": "baseline step, AdamW foreach (median ms)",
         "value": pick(r, "baseline_adamw_foreach")},
        {"step": "measure", "quantity": "baseline IQR (ms)",
         "value": pick(r, "baseline_adamw_foreach", statistic="iqr")},
        {"step": "measure", "quantity": "baseline throughput (examples/s)",
         "value": pick(r, "baseline_adamw_foreach", "throughput")},
        {"step": "localize", "quantity": "largest phase", "value": largest},
        {"step": "localize", "quantity": "optimizer share (%)", "value": shares["optimizer"]},
        {"step": "localize", "quantity": "backward share (%)", "value": shares["backward"]},
        {"step": "localize", "quantity": "forward share (%)", "value": shares["forward"]},
        {"step": "correctness", "quantity": "one step fused vs foreach, max |diff|",
         "value": pick(r, "fused_vs_foreach", "max_abs_diff", "value")},
        {"step": "correctness", "quantity": "parameter scale (mean |p|)",
         "value": pick(r, "fused_vs_foreach", "parameter_scale", "value")},
        {"step": "remeasure", "quantity": "pair: AdamW foreach (median ms)",
         "value": pick(r, "adamw_foreach")},
        {"step": "remeasure", "quantity": "pair: AdamW fused (median ms)",
         "value": pick(r, "adamw_fused")},
        {"step": "remeasure", "quantity": "latency change (%)",
         "value": pick(r, "adamw_fused_minus_adamw_foreach", "step_latency_relative", "value")},
        {"step": "remeasure", "quantity": "throughput change (%)",
         "value": pick(r, "adamw_fused_minus_adamw_foreach", "throughput_relative", "value")},
        {"step": "remeasure", "quantity": "difference resolved (Wilcoxon p < 0.05)",
         "value": pick(r, "adamw_fused_minus_adamw_foreach", "difference_resolved", "value")},
        {"step": "tradeoff", "quantity": "peak allocated, foreach alone (MiB)",
         "value": pick(r, "adamw_foreach", "peak_allocated", "max")},
        {"step": "tradeoff", "quantity": "peak allocated, fused alone (MiB)",
         "value": pick(r, "adamw_fused", "peak_allocated", "max")},
    ]
    return _frame(records, ["step", "quantity", "value"])


#: E08's answer rows (perflab.sweep): variant -> label, and the column that decided it
E08_ANSWERS = (
    ("lowest_latency", "lowest-latency batch", "median_ms"),
    ("highest_throughput", "highest-throughput batch", "examples_per_s"),
    ("largest_that_fits", "largest batch that fits", None),
)


def table_e08(frame: pd.DataFrame) -> pd.DataFrame:
    """Batch sweep: the chapter's columns per batch size, then the sweep's three answers.

    Peak memory is the allocator's peak allocated / reserved on CUDA and the
    process's peak RSS (VmHWM) on the CPU; each answer row names its batch
    size and repeats the number that decided it.
    """
    r = _rows("E08", frame)
    sizes = _variants(r, "batch_")
    rss = (r.metric == "peak_rss").any()
    alloc = (r[r.metric == "peak_allocated"].status == "ok").any() or not rss
    mem = ([("peak_alloc_mib", "peak_allocated"), ("peak_resv_mib", "peak_reserved")]
           if alloc else []) + ([("peak_rss_mib", "peak_rss")] if rss else [])
    columns = ["batch", "median_ms", "iqr_ms", "examples_per_s", *(c for c, _ in mem),
               "per_example_ms", "answer"]

    def cells(v: str) -> dict[str, Any]:
        rec = {"median_ms": pick(r, v), "iqr_ms": pick(r, v, statistic="iqr"),
               "examples_per_s": pick(r, v, "throughput")}
        rec.update({c: pick(r, v, m, "value") for c, m in mem})
        rec["per_example_ms"] = pick(r, v, "latency_per_example")
        return rec

    records = [{"batch": int(v.removeprefix("batch_")), **cells(v), "answer": ""} for v in sizes]
    for variant, label, decided_by in E08_ANSWERS:
        b = pick(r, variant, "batch_size", "value")
        rec: dict[str, Any] = {"batch": b if isinstance(b, Missing) else int(b), "answer": label}
        if not isinstance(b, Missing) and decided_by:
            rec[decided_by] = cells(f"batch_{int(b)}")[decided_by]
        records.append(rec)
    return _frame(records, columns)


#: E13's two A/B pairs: variant prefix -> label
E13_SETS = (("controlled", "controlled step"), ("small", "small fast step"))


def table_e13(frame: pd.DataFrame) -> pd.DataFrame:
    """Sync tax: none vs item_every per step, then the running mean read three ways."""
    r = _rows("E13", frame)
    records = []
    for prefix, label in E13_SETS:
        a, b, d = f"{prefix}/none", f"{prefix}/item_every", f"{prefix}/tax"
        sel = r[r.variant == a]
        records.append({
            "measurement": label,
            "model": sel.iloc[0]["model"] if not sel.empty else "",
            "none_median_ms": pick(r, a, "time_per_step"),
            "item_every_median_ms": pick(r, b, "time_per_step"),
            "difference_ms": pick(r, d, "tax", "value"),
            "change_pct": pick(r, d, "tax_rel", "value"),
            "none_examples_per_s": pick(r, a, "throughput", "value"),
            "item_every_examples_per_s": pick(r, b, "throughput", "value"),
            "item_every_rel_pct": pick(r, b, "throughput_rel", "value"),
            "block_spread_ms": pick(r, d, "block_spread", "value"),
            "resolved": pick(r, d, "tax_resolved", "value"),
        })
    means = [v for v in r.variant.unique() if v.startswith("running_mean/")]
    for v in means:
        value = pick(r, v, "mean_loss", "value")
        how = v.removeprefix("running_mean/")
        if how == "item_every_step":
            how = "every step (.item(), summed on the host)"
        elif how.startswith("every_"):
            how = f"every {how.removeprefix('every_')} steps (device-side running sum)"
        elif how == "once":
            how = "once at the end (device-side sum)"
        records.append({
            "measurement": f"running mean loss, read {how}",
            "mean_loss": value if isinstance(value, Missing) else f"{value:.6f}",
        })
    if means or not r[r.variant == "running_mean"].empty:
        records.append({
            "measurement": "running mean: max |difference| of the readings",
            "mean_loss": pick(r, "running_mean", "max_abs_diff", "value"),
        })
    return _frame(records, ["measurement", "model", "none_median_ms", "item_every_median_ms",
                            "difference_ms", "change_pct", "none_examples_per_s",
                            "item_every_examples_per_s", "item_every_rel_pct",
                            "block_spread_ms", "resolved", "mean_loss"])


def table_e14(frame: pd.DataFrame) -> pd.DataFrame:
    """Profiler: time per phase range, top operators, profiled vs unprofiled step.

    On CUDA a range's ``time_ms`` is device time (``host_ms`` beside it); on a
    CPU it is CPU time. Operators are ranked by self device time (CPU: self
    CPU time). ``n`` is active steps for ranges and steps, calls for operators.
    """
    r = _rows("E14", frame)
    records = []
    ranges = [v for v in r.variant.unique() if v.startswith("range:")]
    for v in ranges:
        device = pick(r, v, "range_device_time", "value")
        on_device = not isinstance(device, Missing)
        records.append({
            "measurement": f"range {v.removeprefix('range:')}",
            "what": "device time, all active steps" if on_device else
                    "CPU time, all active steps",
            "n": pick(r, v, "range_cpu_time", "value", field="n"),
            "time_ms": device if on_device else pick(r, v, "range_cpu_time", "value"),
            "host_ms": pick(r, v, "range_cpu_time", "value") if on_device else None,
        })
    for v in (v for v in r.variant.unique() if v.startswith("op:")):
        sel = r[(r.variant == v) & (r.status == "ok")]
        if sel.empty:
            continue
        row = sel.iloc[0]
        records.append({
            "measurement": f"op {v.removeprefix('op:')}",
            "what": "self device time" if row["metric"] == "op_self_device_time"
                    else "self CPU time",
            "n": row["n"],
            "time_ms": row["value"],
        })
    for label, v in (("profiled step (median)", "profiled"),
                     ("unprofiled step (median)", "unprofiled")):
        records.append({"measurement": label, "what": "synchronized wall clock",
                        "n": pick(r, v, "step_latency", field="n"),
                        "time_ms": pick(r, v, "step_latency")})
    records.append({"measurement": "profiler overhead", "what": "profiled - unprofiled",
                    "time_ms": pick(r, "profiler_overhead", "overhead", "value"),
                    "overhead_pct": pick(r, "profiler_overhead", "overhead_rel", "value")})
    return _frame(records, ["measurement", "what", "n", "time_ms", "host_ms", "overhead_pct"])


#: E23's instruments: variant prefix -> the chapter's label
E23_INSTRUMENTS = (
    ("phase_sync", "per-phase synchronize (x7)"),
    ("item", ".item() every step"),
    ("profiler", "torch.profiler with a schedule"),
)


def table_e23(frame: pd.DataFrame) -> pd.DataFrame:
    """Forensic vs performance mode: each instrument's cost on the controlled step."""
    r = _rows("E23", frame)
    records = []
    for key, label in E23_INSTRUMENTS:
        base, inst, cost = f"{key}/baseline", f"{key}/instrumented", f"{key}/cost"
        records.append({
            "instrument": label,
            "baseline_median_ms": pick(r, base, "time_per_step"),
            "instrumented_median_ms": pick(r, inst, "time_per_step"),
            "cost_ms": pick(r, cost, "cost", "value"),
            "cost_pct": pick(r, cost, "cost_rel", "value"),
            "baseline_block_min_ms": pick(r, base, "block_median", "min"),
            "baseline_block_max_ms": pick(r, base, "block_median", "max"),
            "instrumented_block_min_ms": pick(r, inst, "block_median", "min"),
            "instrumented_block_max_ms": pick(r, inst, "block_median", "max"),
            "resolved": pick(r, cost, "cost_resolved", "value"),
        })
    return _frame(records)


# ------------------------------------------------------------------ E15-E18 interventions


def _peak_metric(r: pd.DataFrame) -> str:
    """The peak the device measured: allocator peak allocated (CUDA) or the process's VmHWM."""
    alloc = r[r.metric == "peak_allocated"]
    return "peak_allocated" if (alloc.status == "ok").any() or alloc.empty and not (
        r.metric == "peak_rss").any() else "peak_rss"


def _prefixed(r: pd.DataFrame, prefix: str, sep: str = "/") -> list[int]:
    """The sorted numbers N of variants named ``<prefix><N><sep>...`` (e.g. b256/fp32)."""
    out = set()
    for v in r.variant.unique():
        head = v.split(sep)[0]
        if head.startswith(prefix) and head.removeprefix(prefix).isdigit():
            out.add(int(head.removeprefix(prefix)))
    return sorted(out)


E15_PRECISIONS = ("fp32", "fp16", "bf16")


def table_e15(frame: pd.DataFrame) -> pd.DataFrame:
    """Mixed precision: the one-step numerics against fp32, then time and memory per batch size.

    Three separate answers, never merged: numerics (loss and gradient-norm
    deviation, all losses finite), time (ms/step, examples/s, % of fp32) and
    peak memory (% of fp32), each batch size on its own lines.
    """
    r = _rows("E15", frame)
    peak = _peak_metric(r)
    precisions = [p for p in E15_PRECISIONS if (r.variant.str.endswith("/" + p)).any()]
    records = []
    for prec in precisions:
        v = f"numerics/{prec}"
        records.append({
            "measurement": "one step vs fp32", "config": prec,
            "loss": pick(r, v, "loss", "value"),
            "loss_abs_diff": pick(r, v, "loss_abs_diff", "value") if prec != "fp32" else "",
            "grad_norm": pick(r, v, "grad_norm", "value"),
            "grad_norm_rel_diff": (pick(r, v, "grad_norm_rel_diff", "value")
                                   if prec != "fp32" else ""),
            "finite_steps": pick(r, f"finite/{prec}", "finite_losses", "value"),
        })
    for b in _prefixed(r, "b"):
        for prec in precisions:
            v = f"b{b}/{prec}"
            records.append({
                "measurement": f"batch {b}", "config": prec,
                "median_ms": pick(r, v), "examples_per_s": pick(r, v, "throughput"),
                "peak_mib": pick(r, v, peak, "max"),
                "time_pct": pick(r, v, "time_pct_of_fp32", "value"),
                "mem_pct": pick(r, v, "memory_pct_of_fp32", "value"),
            })
    return _frame(records, ["measurement", "config", "median_ms", "examples_per_s", "peak_mib",
                            "time_pct", "mem_pct", "loss", "loss_abs_diff", "grad_norm",
                            "grad_norm_rel_diff", "finite_steps"])


def table_e16(frame: pd.DataFrame) -> pd.DataFrame:
    """Checkpointing at each batch size: time, peak memory and the correctness column."""
    r = _rows("E16", frame)
    peak = _peak_metric(r)
    records = []
    for b in _prefixed(r, "b"):
        d = f"b{b}/checkpointed_vs_normal"
        for variant in ("normal", "checkpointed"):
            v = f"b{b}/{variant}"
            ck = variant == "checkpointed"
            records.append({
                "batch": b, "config": variant, "median_ms": pick(r, v),
                "examples_per_s": pick(r, v, "throughput"),
                "time_pct": pick(r, v, "time_pct_of_normal", "value"),
                "peak_mib": pick(r, v, peak, "max"),
                "saved_mib": pick(r, v, "memory_saved", "value") if ck else "",
                "mem_pct": pick(r, v, "memory_pct_of_normal", "value") if ck else "",
                "loss": pick(r, v, "loss", "value"),
                "grad_norm": pick(r, v, "grad_norm", "value"),
                "grad_max_abs_diff": pick(r, d, "grad_max_abs_diff", "value") if ck else "",
            })
    return _frame(records, ["batch", "config", "median_ms", "examples_per_s", "time_pct",
                            "peak_mib", "saved_mib", "mem_pct", "loss", "grad_norm",
                            "grad_max_abs_diff"])


def table_e17(frame: pd.DataFrame) -> pd.DataFrame:
    """Accumulation: per K, the micro-batch, time, peak and the gradient equivalence."""
    r = _rows("E17", frame)
    peak = _peak_metric(r)
    records = []
    for k in _variants(r, "k"):
        records.append({
            "K": int(k.removeprefix("k")), "micro_batch": pick(r, k, "micro_batch", "value"),
            "median_ms": pick(r, k), "time_pct": pick(r, k, "time_pct_of_k1", "value"),
            "peak_mib": pick(r, k, peak, "max"), "peak_pct": pick(r, k, "memory_pct_of_k1", "value"),
            "grad_max_abs_diff": pick(r, k, "grad_max_abs_diff", "value") if k != "k1" else "",
            "gradient_scale": pick(r, k, "gradient_scale", "value") if k != "k1" else "",
            "gradient_max": pick(r, k, "gradient_max", "value") if k != "k1" else "",
        })
    return _frame(records, ["K", "micro_batch", "median_ms", "time_pct", "peak_mib", "peak_pct",
                            "grad_max_abs_diff", "gradient_scale", "gradient_max"])


def e18_backends(r: pd.DataFrame, T: int, metric: str = "backend_ran") -> str:
    """The SDPA backends with value 1 under ``metric`` at T, e.g. 'efficient_attention'."""
    sel = r[r.variant.str.startswith(f"T{T}/sdpa_backend/") & (r.metric == metric)
            & (r.status == "ok")]
    names = [v.rsplit("/", 1)[1] for v, x in zip(sel.variant, sel.value) if x == 1]
    return ", ".join(names) if names else ("none recognised" if not sel.empty else NOT_RUN)


def table_e18(frame: pd.DataFrame) -> pd.DataFrame:
    """Manual vs SDPA attention per T: ms and peak MiB of each, agreement, the backend that ran."""
    r = _rows("E18", frame)
    peak = _peak_metric(r)
    records = []
    for T in _prefixed(r, "T"):
        d = f"T{T}/sdpa_vs_manual"
        records.append({
            "T": T, "manual_ms": pick(r, f"T{T}/manual", "fwd_bwd_latency"),
            "manual_mib": pick(r, f"T{T}/manual", peak, "max"),
            "sdpa_ms": pick(r, f"T{T}/sdpa", "fwd_bwd_latency"),
            "sdpa_mib": pick(r, f"T{T}/sdpa", peak, "max"),
            "out_max_abs_diff": pick(r, d, "out_max_abs_diff", "value"),
            "grad_max_abs_diff": pick(r, d, "grad_max_abs_diff", "value"),
            "sdpa_backend_ran": e18_backends(r, T),
            "sdpa_backends_eligible": e18_backends(r, T, "backend_eligible"),
        })
    return _frame(records, ["T", "manual_ms", "manual_mib", "sdpa_ms", "sdpa_mib",
                            "out_max_abs_diff", "grad_max_abs_diff", "sdpa_backend_ran",
                            "sdpa_backends_eligible"])


TABLES: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {
    "E01": table_e01,
    "E02": table_e02,
    "E03": table_e03,
    "E04": table_e04,
    "E05": table_e05,
    "E06": table_e06,
    "E07": table_e07,
    "E08": table_e08,
    "E13": table_e13,
    "E14": table_e14,
    "E23": table_e23,
    "E25": table_e25,
    "E15": table_e15,
    "E16": table_e16,
    "E17": table_e17,
    "E18": table_e18,
}


def table(eid: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The table of experiment ``eid`` (e.g. "E01") from the result rows."""
    try:
        return TABLES[eid.upper()](frame)
    except KeyError:
        raise KeyError(f"no table for experiment {eid!r}; known: {sorted(TABLES)}") from None


def format_table(t: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """The table as text: ms with ``digits`` decimals, counts as integers, blanks for NaN.

    Columns named for counts (``n``, ``runs``, ...) print as integers; ms
    columns with ``digits`` decimals; any other number keeps its magnitude
    (a 3.7e-9 difference must not print as 0).
    """
    counts = {"n", "runs", "number_per_run", "batch", "resolved", "examples_per_s"}

    def fmt(column: str, v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if column.endswith("_ms") or "_ms_" in column:
                return f"{v:.{digits}f}"
            if column in counts or (float(v).is_integer() and abs(v) >= 1):
                return f"{v:.0f}"
            a = abs(v)
            if a >= 100:
                return f"{v:.0f}"
            if a >= 0.01 or a == 0:
                return f"{v:.{digits}g}" if a < 1 else f"{v:.{digits}f}".rstrip("0").rstrip(".")
            return f"{v:.2e}"
        return str(v)

    return pd.DataFrame({c: [fmt(c, v) for v in t[c]] for c in t.columns}, index=t.index)
