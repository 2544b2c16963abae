"""The CSV contract: tidy rows that carry their measurement contract.

Every result row says what was measured (experiment, variant, workload,
model, input shape, dtype, device, mode, execution), how (metric, window,
sync boundary), which summary it is (statistic), the value with its unit and
sample count, and whether the measurement happened (status, with a reason
whenever it is not ``ok``). Tables are regenerated from these rows alone.

All writes are atomic: a temporary file in the destination directory, then a
rename, so a job that dies leaves either the old file or none, never half.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import traceback
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from perflab.stats import SUMMARY_STATISTICS

COLUMNS = [
    "experiment",
    "variant",
    "workload",
    "model",
    "input_shape",
    "dtype",
    "device",
    "device_name",
    "mode",
    "execution",
    "metric",
    "window",
    "sync_boundary",
    "statistic",
    "value",
    "unit",
    "n",
    "status",
    "reason",
]
STATUSES = ("ok", "unsupported", "oom", "error")
STATISTICS = (*SUMMARY_STATISTICS, "value")
#: columns that must be non-empty on every row
REQUIRED_TEXT = [
    "experiment",
    "variant",
    "workload",
    "dtype",
    "device",
    "mode",
    "execution",
    "metric",
    "window",
    "sync_boundary",
    "statistic",
    "unit",
    "status",
]
SAMPLE_COLUMNS = ["experiment", "variant", "execution", "metric", "unit", "block", "index", "value"]

#: (experiment, metric name) of runs written before perflab had one name per quantity ->
#: that name; experiment None: in every experiment. Applied where rows and samples are
#: read (:func:`read_results`, :func:`read_samples`), so older runs (the shipped reference
#: runs, a user's own) read as if written today. Nothing writes an old name where it is
#: old; only ever add to it.
RENAMED_METRICS: dict[tuple[str | None, str], str] = {
    # the two A/B writers' vocabularies, now the one of perflab.ab
    (None, "step_latency_relative"): "step_latency_rel",
    (None, "forward_latency_relative"): "forward_latency_rel",
    (None, "host_to_device_relative"): "host_to_device_rel",
    (None, "paired_block_difference"): "block_pair_diff",
    (None, "tax_resolved"): "difference_resolved",
    (None, "cost_resolved"): "difference_resolved",
    # one name per quantity
    (None, "throughput_relative"): "throughput_rel",  # E25: the change, % of A's
    ("E13", "throughput_rel"): "throughput_pct_of_none",  # a ratio (100 = no change)
    (None, "time_per_step"): "step_latency",
    (None, "budget"): "memory_budget",
    (None, "gradient_bytes"): "grad_bytes",
    (None, "gradient_max"): "grad_max",
    (None, "gradient_scale"): "grad_scale",
}


class ContractError(ValueError):
    """A result row that breaks the CSV contract."""


def atomic_write(path: str | Path, write, *, binary: bool = False) -> None:
    """Call ``write(fh)`` on a temp file beside ``path``, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", newline="")) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates 0600; give the result the permissions a plain open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda fh: fh.write(text))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def atomic_write_csv(path: str | Path, frame: pd.DataFrame) -> None:
    atomic_write(path, lambda fh: frame.to_csv(fh, index=False))


def validate_rows(frame: pd.DataFrame) -> None:
    """Raise :class:`ContractError` naming the first row that breaks the contract."""
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ContractError(f"missing contract columns: {missing}")
    extra = [c for c in frame.columns if c not in COLUMNS]
    if extra:
        raise ContractError(f"columns outside the contract: {extra}")
    for i, row in enumerate(frame.to_dict("records")):
        where = f"row {i} ({row.get('experiment')}/{row.get('variant')}/{row.get('metric')})"
        for col in REQUIRED_TEXT:
            v = row[col]
            if v is None or (isinstance(v, float) and math.isnan(v)) or str(v).strip() == "":
                raise ContractError(f"{where}: empty {col!r}")
        if row["status"] not in STATUSES:
            raise ContractError(f"{where}: status {row['status']!r} not in {STATUSES}")
        if row["statistic"] not in STATISTICS:
            raise ContractError(f"{where}: statistic {row['statistic']!r} not in {STATISTICS}")
        value = row["value"]
        is_nan = value is None or (isinstance(value, float) and math.isnan(value))
        if row["status"] == "ok":
            if is_nan:
                raise ContractError(f"{where}: status ok but no value")
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise ContractError(f"{where}: value {value!r} is not a number") from None
            if not math.isfinite(number):
                raise ContractError(f"{where}: non-finite value {value!r}")
        else:
            reason = row["reason"]
            if reason is None or (isinstance(reason, float) and math.isnan(reason)) or not str(reason).strip():
                raise ContractError(f"{where}: status {row['status']} needs a reason")
            if not is_nan:
                raise ContractError(f"{where}: status {row['status']} must not carry a value")


def rows_to_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    rows = list(rows)
    for i, r in enumerate(rows):
        extra = set(r) - set(COLUMNS)
        if extra:  # a misspelled column must not vanish silently
            raise ContractError(f"row {i}: keys outside the contract: {sorted(extra)}")
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
    return frame


def write_results(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Validate and atomically write result rows; return the frame written."""
    frame = rows_to_frame(rows)
    if frame.empty:
        raise ContractError("an experiment must write at least one row")
    validate_rows(frame)
    atomic_write_csv(path, frame)
    return frame


def write_samples(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(list(rows), columns=SAMPLE_COLUMNS)
    atomic_write_csv(path, frame)
    return frame


def renamed(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (rows or samples) with old metric names replaced (:data:`RENAMED_METRICS`)."""
    if "metric" not in frame.columns:
        return frame
    metric = frame.metric
    for (eid, old), new in RENAMED_METRICS.items():
        hit = (frame.metric == old) & ((frame.experiment == eid) if eid else True)
        if hit.any():
            metric = metric.mask(hit, new)
    return frame if metric is frame.metric else frame.assign(metric=metric)


def read_samples(path: str | Path) -> pd.DataFrame:
    """One raw-samples CSV: its numeric samples, old metric names replaced."""
    s = pd.read_csv(path, keep_default_na=False)
    missing = [c for c in SAMPLE_COLUMNS if c not in s.columns]
    if missing:
        raise ContractError(f"{path}: not a samples CSV (missing columns {missing})")
    s["value"] = pd.to_numeric(s["value"], errors="coerce")
    return renamed(s.dropna(subset=["value"]))


def read_results(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Concatenate result CSVs (validating each; old metric names replaced)."""
    frames = []
    for p in paths:
        # text is text: "n/a" or "None" in a window or reason must not become NaN
        f = pd.read_csv(p, keep_default_na=False, dtype=str)
        missing = [c for c in COLUMNS if c not in f.columns]
        if missing:
            raise ContractError(f"{p}: not a result CSV (missing columns {missing})")
        f["value"] = pd.to_numeric(f["value"].replace("", None), errors="coerce")
        f["n"] = pd.to_numeric(f["n"], errors="coerce")
        try:
            validate_rows(f)
        except ContractError as exc:
            raise ContractError(f"{p}: {exc}") from None
        frames.append(renamed(f))
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)


@contextmanager
def log_to(path: str | Path):
    """Send stderr to a job's log; a failure's traceback lands there before it propagates.

    Here, not in the runner, so the jobs that only read rows (figures, report, claims)
    log without importing torch.
    """
    saved = sys.stderr
    with open(path, "w") as fh:
        sys.stderr = fh
        try:
            yield
        except BaseException:
            traceback.print_exc()
            raise
        finally:
            sys.stderr = saved
