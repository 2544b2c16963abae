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


TABLES: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {
    "E01": table_e01,
    "E02": table_e02,
    "E03": table_e03,
    "E04": table_e04,
    "E06": table_e06,
}


def table(eid: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The table of experiment ``eid`` (e.g. "E01") from the result rows."""
    try:
        return TABLES[eid.upper()](frame)
    except KeyError:
        raise KeyError(f"no table for experiment {eid!r}; known: {sorted(TABLES)}") from None


def format_table(t: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """The table as text: ms with ``digits`` decimals, counts as integers, blanks for NaN."""

    def fmt(column: str, v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            # columns with a unit suffix are measurements; the rest are counts
            return f"{v:.{digits}f}" if column.endswith("_ms") or "_ms_" in column else f"{v:.0f}"
        return str(v)

    return pd.DataFrame({c: [fmt(c, v) for v in t[c]] for c in t.columns}, index=t.index)
