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


#: C00's table: (measurement, variant, metric, statistic)
C00_ROWS = (
    ("clock tick (perf_counter, measured)", "clock/perf_counter", "tick", "median"),
    ("clock resolution (declared)", "clock/perf_counter", "resolution_declared", "value"),
    ("one synchronize, idle device", "sync/idle", "sync_cost", "median"),
    ("empty call through the helper (timer floor)", "floor/empty_call", "call_latency", "median"),
    ("CUDA events: empty pair, device time", "events/empty_pair", "event_elapsed", "median"),
    ("CUDA events: host cost of recording a pair", "events/record_pair", "host_record_cost",
     "median"),
    ("fresh process: interpreter", "process/interpreter", "process_wall", "median"),
    ("fresh process: + import torch", "process/import_torch", "process_wall", "median"),
    ("fresh process: + device init", "process/device_init", "process_wall", "median"),
    ("reference step, unprofiled", "profiler/unprofiled", "step_latency", "median"),
    ("reference step, profiled", "profiler/profiled", "step_latency", "median"),
    ("profiler overhead", "profiler/overhead", "overhead_rel", "value"),
    ("A/A: B - A (same step both sides)", "aa_b_minus_aa_a", "ab_effect", "value"),
    ("A/A noise floor", "aa", "aa_noise_floor", "value"),
    ("planted 2x: B - A", "planted_2x_minus_planted_a", "ab_effect", "value"),
    ("planted 2x: relative", "planted_2x_minus_planted_a", "ab_effect_rel", "value"),
    ("step: project helper", "peer/helper", "step_latency", "median"),
    ("step: torch.utils.benchmark Timer", "peer/timer", "step_latency", "median"),
    ("step: triton do_bench", "peer/do_bench", "step_latency", "median"),
    ("Timer / helper", "peer/timer_over_helper", "ratio", "value"),
    ("do_bench / helper", "peer/do_bench_over_helper", "ratio", "value"),
)


def table_c00(frame: pd.DataFrame) -> pd.DataFrame:
    """Calibration: the harness's floors, the A/A noise floor, the planted check, peer timers.

    One line per measurement with its value and unit; A/B lines add the
    judgement (bootstrap interval, p, resolved).
    """
    r = _rows("C00", frame)
    records = []
    for label, variant, metric, statistic in C00_ROWS:
        value = pick(r, variant, metric, statistic)
        unit = pick(r, variant, metric, statistic, field="unit")
        rec = {"measurement": label, "value": value,
               "unit": unit if not isinstance(unit, Missing) else "",
               "n": "" if isinstance(value, Missing) else pick(r, variant, metric, statistic,
                                                                field="n")}
        if metric == "ab_effect":
            rec["ci_low"] = pick(r, variant, "ab_ci_low", "value")
            rec["ci_high"] = pick(r, variant, "ab_ci_high", "value")
            rec["p"] = pick(r, variant, "ab_p", "value")
            rec["resolved"] = pick(r, variant, "ab_resolved", "value")
        records.append(rec)
    return _frame(records, ["measurement", "value", "unit", "n", "ci_low", "ci_high", "p",
                            "resolved"])


#: E09's boundaries, in step order
E09_BOUNDARIES = ("start", "zero_grad", "forward", "loss", "backward", "optimizer")


def table_e09(frame: pd.DataFrame) -> pd.DataFrame:
    """Memory by phase: allocated after each phase (cold, steady), peaks; the persistent parts.

    On CUDA the peak is max_memory_allocated and the hidden peak is the peak
    minus the largest boundary reading; on a CPU the phase cells are
    ``unsupported`` and the step's peak is the process's VmHWM. The breakdown
    rows give MiB and % (of allocated after the steady step on CUDA, of the
    counted tensors on a CPU, whose windows say so).
    """
    r = _rows("E09", frame)
    rss = (r.metric == "peak_rss").any()
    records = []
    for label in ("cold", "steady"):
        win = pick(r, label, "peak_rss" if rss else "peak_allocated", "value", field="window")
        # the window starts "step N of M": the row says which step it was
        step = " ".join(str(win).split()[:2]) if not isinstance(win, Missing) else ""
        rec = {"row": f"{step} ({label})" if step.startswith("step") else label}
        rec.update({f"{b}_mib": pick(r, f"{label}/{b}", "allocated", "value")
                    for b in E09_BOUNDARIES})
        rec["peak_alloc_mib"] = pick(r, label, "peak_allocated", "value")
        rec["hidden_peak_mib"] = pick(r, label, "hidden_peak", "value")
        rec["peak_resv_mib"] = pick(r, label, "peak_reserved", "value")
        if rss:
            rec["peak_rss_mib"] = pick(r, label, "peak_rss", "value")
        records.append(rec)
    for part in ("parameters", "gradients", "optimizer_state", "other"):
        records.append({"row": f"persistent: {part.replace('_', ' ')}",
                        "mib": pick(r, f"persistent/{part}", "bytes", "value"),
                        "share_pct": pick(r, f"persistent/{part}", "share", "value")})
    share = pick(r, "persistent", "share", "value")  # CPU: no denominator beyond the parts
    records.append({"row": "persistent (parameters + gradients + optimizer state)",
                    "mib": pick(r, "persistent", "bytes", "value"),
                    "share_pct": "" if isinstance(share, Missing) and share.status == NOT_RUN
                    else share})
    records.append({"row": "activations (steady: after forward - after zero_grad)",
                    "mib": pick(r, "activations", "bytes", "value")})
    records.append({"row": "optimizer state before step 1",
                    "mib": pick(r, "optimizer_state", "state_before_first_step", "value")})
    records.append({"row": "optimizer state after step 1",
                    "mib": pick(r, "optimizer_state", "state_after_first_step", "value")})
    records.append({"row": "step 1 optimizer phase: allocated jump",
                    "mib": pick(r, "optimizer_state", "first_step_allocated_jump", "value")})
    columns = ["row", *(f"{b}_mib" for b in E09_BOUNDARIES), "peak_alloc_mib",
               "hidden_peak_mib", "peak_resv_mib", *(["peak_rss_mib"] if rss else []),
               "mib", "share_pct"]
    return _frame(records, columns)


def table_e10(frame: pd.DataFrame) -> pd.DataFrame:
    """OOM decomposition: the evidence per batch size, persistent bytes, the OOM, the diagnosis."""
    r = _rows("E10", frame)
    records = []
    batches = _variants(r, "batch_")
    rss = (r.metric == "peak_rss").any()
    for v in batches:
        rec = {"evidence": f"batch {v.removeprefix('batch_')} (uncapped)",
               "peak_mib": pick(r, v, "peak_rss" if rss else "peak_allocated", "value"),
               "growth_mib_per_step": pick(r, v, "rss_growth" if rss else "allocated_growth",
                                           "value"),
               "first_step_alloc_mib": pick(r, v, "first_step_allocation", "value"),
               "optimizer_state_mib": pick(r, v, "optimizer_state_bytes", "value"),
               "gradients_mib": pick(r, v, "gradient_bytes", "value")}
        records.append(rec)
    records.append({"evidence": "parameter bytes", "value": pick(r, "parameters", "bytes",
                                                                  "value")})
    records.append({"evidence": "persistent (parameters + gradients + optimizer state)",
                    "value": pick(r, "persistent", "bytes", "value")})
    if (r.variant == "peak_moved_by_batch").any():
        records.append({"evidence": "peak moved by the batch size",
                        "value": pick(r, "peak_moved_by_batch", "peak_allocated", "value")})
    records.append({"evidence": "budget (emulated card)",
                    "value": pick(r, "capped_run", "budget", "value")})
    oom = pick(r, "capped_run", "oom", "value")
    if isinstance(oom, Missing) and oom.status == "oom":  # the failure, with its reason
        records.append({"evidence": "capped run: out of memory", "value": "OOM",
                        "because": oom.reason})
    else:
        records.append({"evidence": "capped run: out of memory (0 = every step ran)",
                        "value": oom})
    for metric in ("allocated_at_oom", "reserved_at_oom", "peak_allocated_before_oom"):
        if ((r.variant == "capped_run") & (r.metric == metric)).any():
            records.append({"evidence": f"capped run: {metric.replace('_', ' ')}",
                            "value": pick(r, "capped_run", metric, "value")})
    for branch in ("accumulating", "persistent", "shape_dependent", "allocator", "inconclusive"):
        v = f"diagnosis/{branch}"
        supported = pick(r, v, "supported", "value")
        why = pick(r, v, "supported", "value", field="window")
        records.append({"evidence": f"diagnosis: {branch.replace('_', '-')}",
                        "value": supported,
                        "because": "" if isinstance(why, Missing) else why})
    columns = ["evidence", "peak_mib", "growth_mib_per_step", "first_step_alloc_mib",
               "optimizer_state_mib", "gradients_mib", "value", "because"]
    return _frame(records, columns)


def table_e11(frame: pd.DataFrame) -> pd.DataFrame:
    """The leak: memory every N iterations, final, after empty_cache; growth; the metric."""
    r = _rows("E11", frame)
    instrument = "allocated" if ((r.metric == "allocated") & (r.status == "ok")).any() else "rss"
    records = []
    for variant in ("retained_graph", "no_grad", "item"):
        marks = sorted({v.removeprefix(f"{variant}/") for v in r.variant.unique()
                        if v.startswith(f"{variant}/i")})
        for metric, label in ((instrument, f"{instrument} MiB"),
                              ("retained_graph_bytes", "retained graph MiB")):
            rec = {"variant": variant, "instrument": label}
            rec.update({m: pick(r, f"{variant}/{m}", metric, "value") for m in marks})
            rec["final"] = pick(r, f"{variant}/final", metric, "value")
            if metric == instrument:
                rec["after_empty_cache"] = pick(r, f"{variant}/after_empty_cache", "allocated",
                                                "value")
                rec["growth_mib_per_iter"] = pick(r, variant, f"{instrument}_growth", "value")
                rec["median_step_mib"] = pick(r, variant, f"{instrument}_median_increment",
                                              "value")
                rec["monitored_metric"] = pick(r, variant, "monitored_metric", "value")
            else:
                rec["growth_mib_per_iter"] = pick(r, variant, "retained_graph_growth", "value")
            records.append(rec)
    records.append({"variant": "all", "instrument": "monitored metric, max |difference|",
                    "monitored_metric": pick(r, "all", "monitored_metric_max_abs_diff",
                                             "value")})
    return _frame(records)


def table_e12(frame: pd.DataFrame) -> pd.DataFrame:
    """Four counters at four states, then what del and empty_cache moved."""
    r = _rows("E12", frame)
    records = []
    for state, label in (("steady", "steady state"),
                         ("after_alloc", "after allocating the large tensor"),
                         ("after_del", "after del (Python reference gone)"),
                         ("after_empty_cache", "after torch.cuda.empty_cache()"),
                         ("delta/del", "moved by del"),
                         ("delta/empty_cache", "moved by empty_cache()")):
        records.append({"state": label,
                        "allocated_mib": pick(r, state, "allocated", "value"),
                        "reserved_mib": pick(r, state, "reserved", "value"),
                        "max_reserved_mib": pick(r, state, "max_reserved", "value"),
                        "nvml_process_mib": pick(r, state, "nvml_process", "value"),
                        "rss_mib": pick(r, state, "rss", "value")})
    return _frame(records)
# E19-E24


def table_e19(frame: pd.DataFrame) -> pd.DataFrame:
    """Compile A/B: one row per workload, eager vs compiled steady state, correctness, peaks."""
    r = _rows("E19", frame)
    records = []
    names = dict.fromkeys(v.split("/")[0] for v in r.variant if v.endswith("/eager"))
    for name in names:
        e, c, d = f"{name}/eager", f"{name}/compiled", f"{name}/compiled_vs_eager"
        m = "forward_latency"
        records.append({
            "workload": name,
            "model": r[r.variant == e].iloc[0]["model"] if (r.variant == e).any() else "",
            "eager_median_ms": pick(r, e, m),
            "eager_block_min_ms": pick(r, e, "block_median", "min"),
            "eager_block_max_ms": pick(r, e, "block_median", "max"),
            "compiled_median_ms": pick(r, c, m),
            "compiled_block_min_ms": pick(r, c, "block_median", "min"),
            "compiled_block_max_ms": pick(r, c, "block_median", "max"),
            "speedup_x": pick(r, d, "speedup"),
            "resolved": pick(r, f"{c}_minus_{e}", "difference_resolved", "value"),
            "compiled_first_call_ms": pick(r, c, "first_call", "value"),
            "max_abs_diff": pick(r, d, "max_abs_diff", "value"),
            "eager_peak_allocated_mib": pick(r, e, "peak_allocated", "max"),
            "compiled_peak_allocated_mib": pick(r, c, "peak_allocated", "max"),
        })
    return _frame(records)


def table_e20(frame: pd.DataFrame) -> pd.DataFrame:
    """Cold vs warm Inductor cache: first compiled call, steady state, break-even."""
    r = _rows("E20", frame)
    records = []
    for phase in ("cold", "warm"):
        c, e, d = f"{phase}/compiled", f"{phase}/eager", f"{phase}/compiled_vs_eager"
        records.append({
            "cache": phase,
            "first_compiled_call_s": pick(r, c, "first_call", "value"),
            "fxgraph_cache_hits": pick(r, c, "inductor/fxgraph_cache_hit", "value"),
            "fxgraph_cache_misses": pick(r, c, "inductor/fxgraph_cache_miss", "value"),
            "eager_steady_ms": pick(r, e, "forward_latency"),
            "compiled_steady_ms": pick(r, c, "forward_latency"),
            "break_even_calls": pick(r, d, "break_even_calls", "value"),
            "max_abs_diff": pick(r, d, "max_abs_diff", "value"),
            "cache_files_before": pick(r, f"{phase}/cache", "cache_files_before", "value"),
        })
    records.append({"cache": "warm vs cold",
                    "first_call_ratio": pick(r, "warm_vs_cold", "first_call_ratio", "value"),
                    "first_call_saved_s": pick(r, "warm_vs_cold", "first_call_saved", "value")})
    return _frame(records)


def table_e21(frame: pd.DataFrame) -> pd.DataFrame:
    """Recompilation: each case's first call, graphs compiled, steady state, correctness."""
    r = _rows("E21", frame)
    records = []
    for v in dict.fromkeys(r.variant):
        if v.startswith("shapes/") or v.startswith("mode/"):
            new_shape = "/batch_" in v
            records.append({
                "case": v,
                "first_call_ms": pick(r, v, "new_shape_first_call" if new_shape else "first_call",
                                      "value"),
                "graphs_compiled": pick(r, v, "graphs_compiled", "value"),
                "steady_median_ms": pick(r, v, "forward_latency"),
                "recompiles": (pick(r, v, "recompiles", "value")
                               if v.startswith("shapes/") and not new_shape else None),
                # a first call served from this job's cache (filled by an earlier case)
                "fxgraph_cache_hits": (pick(r, v, "fxgraph_cache_hit", "value")
                                       if not new_shape else None),
                "max_abs_diff": pick(r, v, "max_abs_diff", "value"),
            })
    records.append({"case": "fullgraph=True, data-dependent branch",
                    "graph_breaks": pick(r, "fullgraph/data_dependent_branch", "graph_break",
                                         "value")})
    records.append({"case": "explain (no fullgraph)",
                    "graph_breaks": pick(r, "graph_break/explain", "graph_breaks", "value"),
                    "graphs_compiled": pick(r, "graph_break/explain", "graphs", "value"),
                    "max_abs_diff": pick(r, "graph_break/compiled", "max_abs_diff", "value")})
    return _frame(records, ["case", "first_call_ms", "graphs_compiled", "fxgraph_cache_hits",
                            "steady_median_ms", "recompiles", "graph_breaks", "max_abs_diff"])


#: E22's four cells, in the article's order
E22_CELLS = ("eager_fp32", "eager_amp", "compiled_fp32", "compiled_amp")


def table_e22(frame: pd.DataFrame) -> pd.DataFrame:
    """The benchmark matrix: one row per cell."""
    r = _rows("E22", frame)
    records = []
    for cell in E22_CELLS:
        sel = r[r.variant == cell]
        records.append({
            "cell": cell,
            "dtype": sel.iloc[0]["dtype"] if not sel.empty else "",
            "ms_per_step": pick(r, cell),
            "iqr_ms": pick(r, cell, statistic="iqr"),
            "examples_per_s": pick(r, cell, "throughput"),
            "first_step_ms": pick(r, cell, "first_step", "value"),
            "peak_allocated_mib": pick(r, cell, "peak_allocated", "max"),
            "peak_reserved_mib": pick(r, cell, "peak_reserved", "max"),
            "loss_abs_diff_vs_eager_fp32": pick(r, cell, "loss_abs_diff_vs_eager_fp32", "value"),
        })
    return _frame(records)


def table_e24(frame: pd.DataFrame) -> pd.DataFrame:
    """Input pipeline: one row per loader configuration, then the pageable/pinned copy pair."""
    r = _rows("E24", frame)
    records = []
    for v in dict.fromkeys(r.variant):
        if not v.startswith("workers_"):
            continue
        records.append({
            "configuration": v,
            "step_median_ms": pick(r, v),
            "input_wait_median_ms": pick(r, v, "input_wait"),
            "host_to_device_median_ms": pick(r, v, "host_to_device"),
            "compute_median_ms": pick(r, v, "compute"),
            # summed wait / summed step: a few long waits weigh in full, unlike the medians
            "input_wait_share_of_summed_steps_pct": pick(r, v, "input_wait_share", "value"),
            "examples_per_s": pick(r, v, "throughput"),
            "first_batch_wait_ms": pick(r, v, "first_batch_wait", "value"),
            "loss_max_abs_diff": pick(r, v, "loss_max_abs_diff_vs_workers_0", "value"),
        })
    for v in ("copy/pageable", "copy/pinned"):
        records.append({"configuration": f"bare {v}",
                        "host_to_device_median_ms": pick(r, v, "host_to_device"),
                        "bandwidth_gb_per_s": pick(r, v, "bandwidth")})
    return _frame(records)
#: R01's phases and phase groups, in table order
R01_PHASES = ("host_to_device", "forward", "loss", "backward", "optimizer", "forward_backward",
              "step")


def table_r01(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured ceilings, then each phase's work, time and achieved fraction of them."""
    r = _rows("R01", frame)
    records = []
    for v in sorted(x for x in r.variant.unique() if x.startswith("ceiling/matmul/")):
        records.append({"item": v.removeprefix("ceiling/"),
                        "TFLOP_per_s": _scaled(pick(r, v, "peak_flops", "value"), 1e12)})
    records.append({"item": "memory bandwidth",
                    "GB_per_s": _scaled(pick(r, "ceiling/memory_bandwidth", "bandwidth",
                                             "value"), 1e9)})
    for kind in ("host_to_device", "device_to_host"):
        cell = pick(r, f"copy/{kind}", "bandwidth")
        records.append({"item": f"copy {kind}", "GB_per_s": _scaled(cell, 1e9)})
    records.append({"item": "ridge point (FLOP/B)",
                    "intensity_FLOP_per_B": pick(r, "ceiling/ridge_point",
                                                 "arithmetic_intensity", "value")})
    for ph in R01_PHASES:
        v = f"phase/{ph}"
        records.append({
            "item": f"phase {ph}",
            "median_ms": pick(r, v, "phase_time"),
            "GFLOP": _scaled(pick(r, v, "flops", "value"), 1e9),
            "MB": _scaled(pick(r, v, "bytes", "value"), 1e6),
            "TFLOP_per_s": _scaled(pick(r, v, "achieved_flops"), 1e12),
            "pct_of_peak_flops": pick(r, v, "flops_fraction"),
            "GB_per_s": _scaled(pick(r, v, "achieved_bandwidth"), 1e9),
            "pct_of_bandwidth": pick(r, v, "bandwidth_fraction"),
            "intensity_FLOP_per_B": pick(r, v, "arithmetic_intensity"),
            "pct_of_roofline": pick(r, v, "roofline_fraction"),
        })
    return _frame(records, ["item", "median_ms", "GFLOP", "MB", "TFLOP_per_s",
                            "pct_of_peak_flops", "GB_per_s", "pct_of_bandwidth",
                            "intensity_FLOP_per_B", "pct_of_roofline"])


def _scaled(cell: Any, unit: float) -> Any:
    """A picked number divided by ``unit``; a Missing passes through."""
    return cell if isinstance(cell, Missing) else float(cell) / unit
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
    "C00": table_c00,
    "E01": table_e01,
    "E02": table_e02,
    "E03": table_e03,
    "E04": table_e04,
    "E05": table_e05,
    "E06": table_e06,
    "E07": table_e07,
    "E08": table_e08,
    "E09": table_e09,
    "E10": table_e10,
    "E11": table_e11,
    "E12": table_e12,
    "E13": table_e13,
    "E14": table_e14,
    "E23": table_e23,
    "E25": table_e25,
    "E19": table_e19,
    "E20": table_e20,
    "E21": table_e21,
    "E22": table_e22,
    "E24": table_e24,
    "R01": table_r01,
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
