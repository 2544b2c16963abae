"""The chapter's tables, regenerated from this run's result rows.

Each ``table_eXX(frame)`` takes the long frame of :func:`perflab.core.io.read_results`
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
from typing import Any

import pandas as pd

# the one row lookup, under the names the experiment modules import from here
from perflab.core.rows import NOT_RUN, Missing, pick  # noqa: F401


def rows_of(eid: str, frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame.experiment == eid]


def numbered_variants(rows: pd.DataFrame, prefix: str) -> list[str]:
    """Variants named ``<prefix><N>`` (e.g. naive_loop_20), sorted by N."""
    names = [v for v in rows.variant.unique() if v.startswith(prefix)]
    return sorted(names, key=lambda v: int(v.removeprefix(prefix)))


def make_table(records: list[dict[str, Any]], columns: list[str] | None = None) -> pd.DataFrame:
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


# E19-E24


# ------------------------------------------------------------------ E15-E18 interventions


def peak_metric(r: pd.DataFrame) -> str:
    """The peak the device measured: allocator peak allocated (CUDA) or the process's VmHWM."""
    alloc = r[r.metric == "peak_allocated"]
    return "peak_allocated" if (alloc.status == "ok").any() or alloc.empty and not (
        r.metric == "peak_rss").any() else "peak_rss"


def prefixed_numbers(r: pd.DataFrame, prefix: str, sep: str = "/") -> list[int]:
    """The sorted numbers N of variants named ``<prefix><N><sep>...`` (e.g. b256/fp32)."""
    out = set()
    for v in r.variant.unique():
        head = v.split(sep)[0]
        if head.startswith(prefix) and head.removeprefix(prefix).isdigit():
            out.add(int(head.removeprefix(prefix)))
    return sorted(out)


def largest(frame: pd.DataFrame, eid: str, metric: str, suffix: str = "") -> float | None:
    """The largest measured ``metric`` of ``eid`` over its variants ending in ``suffix``
    (e.g. the worst correctness difference over batch sizes); None when none was measured."""
    sel = frame[(frame.experiment == eid) & (frame.metric == metric) & (frame.status == "ok")
                & frame.variant.str.endswith(suffix)]
    return None if sel.empty else float(sel.value.max())


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
