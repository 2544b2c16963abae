"""The one row lookup: single values out of a run's long frame (:func:`perflab.core.io.read_results`).

Every view asks the same question — the value of (experiment, variant, metric, statistic) —
and :func:`find` is the one answer: the ``ok`` row, or a :class:`Missing` saying why there is
none. A non-ok row (unsupported, oom, error) is written once per variant and metric under
statistic ``value``, so the statistic is not used to find it; when the variant has no row for
the metric at all, a failure of the same variant under another metric explains the gap (e.g.
a compiled step that never ran because compiling failed).

Two ways to ask, one implementation:

- Missing-returning (:func:`pick`, :meth:`Rows.pick`): tables, figures, the ledger, the
  diagnosis and the calibration show a missing number as its status word;
- raising (:meth:`Rows.row`, :meth:`Rows.value`; ``perflab.kit.claims.Evidence`` is
  :class:`Rows`): a claim stops at :class:`Absent` (NOT RUN) or :class:`Unmeasured`
  (UNSUPPORTED; DIFFERS for an oom, a finding; ERROR for an instrument error), since
  missing evidence is never support.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from perflab.core.names import STEP_LATENCY

NOT_RUN = "not run"
#: the metric has rows, but not the statistic asked for
NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class Missing:
    """A cell with no number: why (status) and, when the row gave one, the reason."""

    status: str
    reason: str = ""

    def __str__(self) -> str:
        return f"{self.status}: {self.reason}" if self.reason else self.status


class Absent(Exception):
    """A row the claim needs is not in the results."""


class Unmeasured(Exception):
    """The row exists with a status other than ok (unsupported, oom, error).

    ``where`` names the row ("E08 batch_64 step_latency") when the lookup knows it.
    """

    def __init__(self, status: str, reason: str, where: str = ""):
        super().__init__(f"{status}: {reason}")
        self.status, self.reason, self.where = status, reason, where


def find(frame: pd.DataFrame, variant: str, metric: str, statistic: str = "median", *,
         execution: str | None = None, any_metric: bool = True) -> pd.Series | Missing:
    """The first ok row of ``variant``/``metric``/``statistic`` in ``frame``, or why not.

    ``frame`` holds one experiment's rows. ``any_metric``: let a non-ok row of the same
    variant under another metric explain a metric with no rows (the claims do not: for
    them that is an absent row).
    """
    # masks over the columns, one row taken at the end: selecting sub-frames at each step
    # copied every column each time (most of the report's and the claims' time)
    col = {c: frame[c].to_numpy() for c in ("variant", "metric", "status", "statistic")}
    sel = col["variant"] == variant
    if execution is not None:
        sel &= frame["execution"].to_numpy() == execution
    if not sel.any():
        return Missing(NOT_RUN)
    same_metric = sel & (col["metric"] == metric)
    not_ok = col["status"] != "ok"
    ok = same_metric & ~not_ok & (col["statistic"] == statistic)
    if ok.any():
        return frame.iloc[int(ok.argmax())]
    failed = same_metric & not_ok
    if not failed.any() and any_metric:
        failed = sel & not_ok
    if failed.any():
        row = frame.iloc[int(failed.argmax())]
        return Missing(row["status"], str(row["reason"]))
    return Missing(NOT_RECORDED if same_metric.any() else NOT_RUN)


def pick(frame: pd.DataFrame, variant: str, metric: str = STEP_LATENCY,
         statistic: str = "median", *, execution: str | None = None,
         field: str = "value") -> Any:
    """One value (or ``field``, e.g. ``"n"``) of :func:`find`'s row, or its :class:`Missing`."""
    got = find(frame, variant, metric, statistic, execution=execution)
    return got if isinstance(got, Missing) else got[field]


class Rows:
    """One run's rows, looked up by experiment (each experiment's rows split off once)."""

    def __init__(self, rows: pd.DataFrame, samples: pd.DataFrame | None = None):
        self.rows = rows
        #: the run's raw samples (:data:`perflab.core.io.SAMPLE_COLUMNS`), None when it has none
        #: (the shipped reference runs carry none)
        self.samples = samples
        self._of: dict[str, pd.DataFrame] = {}

    def of(self, eid: str) -> pd.DataFrame:
        """The rows of experiment ``eid``."""
        if eid not in self._of:
            self._of[eid] = self.rows[self.rows.experiment == eid]
        return self._of[eid]

    def has(self, eid: str) -> bool:
        return not self.rows.empty and not self.of(eid).empty

    def pick(self, eid: str, variant: str, metric: str, statistic: str = "median",
             **kw: Any) -> Any:
        """:func:`pick` in experiment ``eid``: a value, or a :class:`Missing`."""
        return pick(self.of(eid), variant, metric, statistic, **kw)

    def found(self, eid: str, variant: str, metric: str,
              statistic: str = "median") -> pd.Series | None:
        """The measured row (its value, n, ...), or None when it was not measured."""
        got = find(self.of(eid), variant, metric, statistic)
        return None if isinstance(got, Missing) else got

    def row(self, eid: str, variant: str, metric: str, statistic: str = "median") -> pd.Series:
        """The measured row; raises :class:`Absent` or :class:`Unmeasured` when there is none."""
        if self.rows.empty:
            raise Absent(f"{eid} not run")
        got = find(self.of(eid), variant, metric, statistic, any_metric=False)
        if not isinstance(got, Missing):
            return got
        if got.status not in (NOT_RUN, NOT_RECORDED):
            raise Unmeasured(got.status, got.reason, f"{eid} {variant} {metric}")
        raise Absent(f"no row {eid} {variant} {metric} {statistic}"
                     + ("" if self.has(eid) else f" ({eid} not run)"))

    def value(self, eid: str, variant: str, metric: str, statistic: str = "median") -> float:
        return float(self.row(eid, variant, metric, statistic)["value"])

    def maybe(self, eid: str, variant: str, metric: str, statistic: str = "median",
              default: float | None = None) -> float | None:
        """:meth:`value`, or ``default`` when the row is absent or did not measure."""
        try:
            return self.value(eid, variant, metric, statistic)
        except (Absent, Unmeasured):
            return default

    def variants(self, eid: str, prefix: str, metric: str, statistic: str = "median") -> dict:
        """{variant: value} for ok rows whose variant starts with ``prefix``.

        Raises :class:`Unmeasured` when one of those variants' rows is an ``error``: a
        series with a failed instrument in it is not evidence of its shape (an ``oom`` or
        ``unsupported`` row is left out: it says what the device could not do).
        """
        if self.rows.empty:
            return {}
        r = self.of(eid)
        sel = r[r.variant.str.startswith(prefix) & (r.metric == metric)]
        failed = sel[sel.status == "error"]
        if not failed.empty:
            row = failed.iloc[0]
            raise Unmeasured("error", str(row["reason"]), f"{eid} {row['variant']} {metric}")
        sel = sel[(sel.statistic == statistic) & (sel.status == "ok")]
        return {v: float(x) for v, x in zip(sel.variant, sel.value)}

    def series(self, eid: str, variant: str, metric: str) -> np.ndarray | None:
        """The raw samples of one series in the order they were taken, or None when the run
        has no samples of it (no samples file, or the experiment wrote none)."""
        s = self.samples
        if s is None or s.empty:
            return None
        sel = s[(s.experiment == eid) & (s.variant == variant) & (s.metric == metric)]
        if sel.empty:
            return None
        return sel.sort_values("index", kind="stable")["value"].to_numpy(dtype=float)

    def device(self, eid: str) -> str:
        """The device experiment ``eid`` ran on ("" when it did not run)."""
        sel = self.of(eid)
        return str(sel.iloc[0]["device"]) if not sel.empty else ""

    def is_cuda(self, eid: str) -> bool:
        """Did any row of experiment ``eid`` run on a CUDA device?"""
        return bool(self.of(eid).device.astype(str).str.startswith("cuda").any())
