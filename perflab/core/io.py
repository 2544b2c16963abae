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

import csv
import glob
import json
import math
import os
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from perflab.core.names import STEP_LATENCY

#: the shipped reference runs (report/reference/<name>, each with a run.json)
REFERENCE_DIR = Path(__file__).resolve().parents[2] / "report" / "reference"


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
#: statistics produced by :func:`perflab.instruments.stats.summarize`, in the order rows are written
SUMMARY_STATISTICS = (
    "median",
    "iqr",
    "p25",
    "p75",
    "mean",
    "std",
    "min",
    "max",
    "count",
    "tail_count",
)
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
    # the two A/B writers' vocabularies, now the one of perflab.instruments.ab
    (None, "step_latency_relative"): "step_latency_rel",
    (None, "forward_latency_relative"): "forward_latency_rel",
    (None, "host_to_device_relative"): "host_to_device_rel",
    (None, "paired_block_difference"): "block_pair_diff",
    (None, "tax_resolved"): "difference_resolved",
    (None, "cost_resolved"): "difference_resolved",
    # one name per quantity
    (None, "throughput_relative"): "throughput_rel",  # E25: the change, % of A's
    ("E13", "throughput_rel"): "throughput_pct_of_none",  # a ratio (100 = no change)
    (None, "time_per_step"): STEP_LATENCY,
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
    clean_stale_temps(path.parent, path.name)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{_TEMP_OWNER}.", suffix=".tmp",
                               dir=path.parent)
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


#: who writes a temp file: host and pid, so a later writer can tell a dead writer's leftover
_TEMP_OWNER = f"{socket.gethostname().split('.')[0] or 'host'}-{os.getpid()}"
#: a temp file of another host (a cluster's shared file system) is stale after this long
STALE_TEMP_S = 24 * 3600


def _writer_alive(owner: str, mtime: float) -> bool:
    """Whether the process that named a temp file ``owner`` (``host-pid``) may still write it."""
    host, _, pid = owner.rpartition("-")
    if host != _TEMP_OWNER.rpartition("-")[0] or not pid.isdigit():
        return time.time() - mtime < STALE_TEMP_S  # another machine's, or an older name
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def clean_stale_temps(directory: str | Path, name: str = "*") -> list[Path]:
    """Remove the hidden temp files of writes that died (killed mid-write) in ``directory``.

    A temp is ``.<file>.<host>-<pid>.<random>.tmp``; ``name`` limits the sweep to
    one destination file. A temp whose writer still runs (this host, a live pid)
    is left alone; one of another host, or without an owner, once a day old.
    Returns the paths removed.
    """
    removed = []
    pattern = "*" if name == "*" else glob.escape(name)
    for tmp in Path(directory).glob(f".{pattern}.*.tmp"):
        parts = tmp.name[: -len(".tmp")].rsplit(".", 2)
        owner = parts[1] if len(parts) == 3 else ""
        try:
            if _writer_alive(owner, tmp.stat().st_mtime):
                continue
            tmp.unlink()
            removed.append(tmp)
        except OSError:  # gone already (another cleaner), or not ours to remove
            pass
    return removed


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
    check_signs(frame)


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


def read_results(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Concatenate result CSVs (validating each; old metric names replaced)."""
    frames = []
    for p in paths:
        # text is text: "n/a" or "None" in a window or reason must not become NaN
        f = read_csv_checked(p, count_key="rows")
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


# ---------------------------------------------------------------- malformed files
# Every reader of a run's files (ledger, claims, diagnosis, figures, report, compare)
# goes through these: a file that is not what a job wrote is refused, naming the
# file, the row and the reason, never read as silent garbage.

#: time units, and the metrics that are durations (never negative) in them: those named
#: here at any statistic; those ending in a suffix here as summaries of their samples (an
#: A/B writes its B - A under the side's metric with statistic ``value``, perflab.instruments.ab); a
#: variant named ``b_minus_a`` is a difference, which may be negative
TIME_UNITS = ("ns", "us", "ms", "s")
DURATION_SUFFIXES = ("_latency", "_time")
DURATION_METRICS = ("block_median", "first_call", "first_step", "tick", "event_elapsed",
                    "process_wall")
#: statistics that are spreads (never negative, whatever the unit)
SPREADS = ("iqr", "std")


def check_signs(frame: pd.DataFrame) -> None:
    """Raise :class:`ContractError` at the first row whose sign is impossible: a negative
    duration (see :data:`TIME_UNITS`), a negative spread, or a negative sample count ``n``."""
    if frame.empty:
        return
    value = pd.to_numeric(frame["value"], errors="coerce")
    n = pd.to_numeric(frame["n"], errors="coerce")
    metric, variant = frame["metric"].astype(str), frame["variant"].astype(str)
    summary = frame["statistic"] != "value"
    duration = (frame["unit"].isin(TIME_UNITS) & ~variant.str.contains("_minus_")
                & (metric.isin(DURATION_METRICS) | (metric.str.endswith(DURATION_SUFFIXES)
                                                    & summary)))
    checks = (
        (frame["statistic"].isin(SPREADS) & (value < 0), "negative spread"),
        (duration & (value < 0), "negative duration"),
        (n < 0, "negative sample count n"),
    )
    for bad, what in checks:
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            r = frame.iloc[i]
            raise ContractError(
                f"row {i} ({r['experiment']}/{r['variant']}/{r['metric']}): {what} "
                f"({r['statistic']} {r['value']} {r['unit']}, n {r['n']})")


def _provenance_of(csv: Path) -> Path:
    """The provenance JSON a job writes beside its CSV (``x.csv``/``x_samples.csv`` -> ``x.json``)."""
    stem = csv.name.removesuffix(".csv").removesuffix("_samples")
    return csv.with_name(f"{stem}.json")


def read_json(path: str | Path) -> dict:
    """A JSON object from a file, or a :class:`ContractError` naming the file and the reason."""
    path = Path(path)
    if not path.is_file():
        raise ContractError(f"{path}: does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not text.strip():
        raise ContractError(f"{path}: empty file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ContractError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: "
                            f"{exc.msg})") from None
    if not isinstance(data, dict):
        raise ContractError(f"{path}: must hold a JSON object, not {type(data).__name__}")
    return data


def read_csv_checked(path: str | Path, *, count_key: str | None = None,
                     allow_empty: bool = False) -> pd.DataFrame:
    """A CSV as text cells, or a :class:`ContractError` naming the file, the row and the reason.

    Refused: a missing or empty file; bytes that are not UTF-8 text; a line that does
    not parse; a header without rows (unless ``allow_empty``); a row with fewer fields
    than the header, or a last line without its newline (a file cut short); and, where
    the job's provenance JSON lies beside the file and records a count under
    ``count_key`` (``rows`` or ``samples``), any other number of rows — how a file cut
    at a row boundary is caught.
    """
    path = Path(path)
    if not path.is_file():
        raise ContractError(f"{path}: does not exist")
    raw = path.read_bytes()
    if not raw.strip():
        raise ContractError(f"{path}: empty file")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); "
                            "not a file a job wrote") from None
    if not raw.endswith(b"\n"):
        raise ContractError(f"{path}: the last line has no newline: the file was cut short")
    _check_fields(path, raw.decode("utf-8"))
    try:
        # text is text: "n/a" or "None" in a window or reason must not become NaN
        f = pd.read_csv(path, keep_default_na=False, dtype=str)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ContractError(f"{path}: does not parse as CSV ({str(exc).strip()})") from None
    if f.empty and not allow_empty:
        raise ContractError(f"{path}: a header and no rows")
    if count_key:
        _check_count(path, len(f), count_key)
    return f


def _check_fields(path: Path, text: str) -> None:
    """Every record has the header's number of fields (pandas would take a longer first
    row's extra fields as an index, and fill a shorter row's missing ones)."""
    reader = csv.reader(text.splitlines(keepends=True))
    try:
        header = next(reader, [])
        for i, record in enumerate(reader):
            if len(record) != len(header):
                what = "a line cut short" if len(record) < len(header) else "more than the header"
                raise ContractError(f"{path}: row {i} (line {reader.line_num}) has "
                                    f"{len(record)} of {len(header)} fields: {what}")
    except csv.Error as exc:
        raise ContractError(f"{path}: does not parse as CSV (line {reader.line_num}: {exc})") \
            from None


def _check_count(path: Path, n: int, key: str) -> None:
    prov = _provenance_of(path)
    if not prov.is_file():
        return  # no job's record beside it (the chapter's numbers, a hand-made file)
    data = read_json(prov)
    expected = data.get(key)
    if isinstance(expected, int) and "experiment" in data and expected != n:
        raise ContractError(f"{path}: {n} rows, but the job that wrote it recorded {expected} "
                            f"in {prov.name}: the file was cut short or changed since")


#: the folder of a result directory the further processes of ``claim_processes`` write to:
#: apart from the experiments' own files, which the tables, figures and ledger read
PROCESSES_DIR = "processes"


def read_processes(csvs: Iterable[str | Path], samples: Iterable[str | Path] = ()
                   ) -> dict[str, list[tuple[pd.DataFrame, pd.DataFrame | None]]]:
    """{experiment: [(rows, samples), ...]}: the further processes of ``claim_processes``,
    each one's result CSV and (where given, in the same order) its samples CSV."""
    csvs, samples = list(csvs), list(samples)
    if samples and len(samples) != len(csvs):
        raise ContractError(f"{len(csvs)} process CSVs but {len(samples)} samples CSVs: "
                            "one samples CSV per process, in the same order")
    out: dict[str, list] = {}
    for i, path in enumerate(csvs):
        rows = read_results([path])
        smp = read_samples(samples[i]) if samples else None
        for eid in rows.experiment.unique():
            out.setdefault(eid, []).append((rows[rows.experiment == eid], smp))
    return out


def process_files(result_dir: str | Path) -> tuple[list[Path], list[Path]]:
    """The further processes' result CSVs under ``result_dir`` (:data:`PROCESSES_DIR`), and
    their samples CSVs where every one has them (else none)."""
    d = Path(result_dir) / PROCESSES_DIR
    csvs = sorted(p for p in d.glob("*.csv") if not p.name.endswith("_samples.csv"))
    samples = [p.with_name(p.stem + "_samples.csv") for p in csvs]
    return csvs, (samples if all(p.is_file() for p in samples) else [])


def read_samples(path: str | Path) -> pd.DataFrame:
    """One raw-samples CSV (:data:`SAMPLE_COLUMNS`), old metric names replaced; checked as
    :func:`read_csv_checked` checks (its count against the provenance's ``samples``),
    every value a finite number."""
    path = Path(path)
    f = read_csv_checked(path, count_key="samples", allow_empty=True)
    missing = [c for c in SAMPLE_COLUMNS if c not in f.columns]
    if missing:
        raise ContractError(f"{path}: not a samples CSV (missing columns {missing})")
    values = pd.to_numeric(f["value"], errors="coerce")
    bad = ~values.map(lambda v: math.isfinite(v) if v == v else False)
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise ContractError(f"{path}: row {i} (line {i + 2}): sample value "
                            f"{f['value'].iloc[i]!r} is not a finite number")
    out = f.copy()
    out["value"] = values.astype(float)
    for col in ("block", "index"):
        out[col] = pd.to_numeric(out[col], errors="coerce")
    return renamed(out)


def read_table(path: str | Path, required: Iterable[str] = ()) -> pd.DataFrame:
    """A derived table (``claims.csv``, ``diagnosis.csv``, ...) checked as
    :func:`read_csv_checked` checks, with the columns ``required``."""
    path = Path(path)
    f = read_csv_checked(path)
    missing = [c for c in required if c not in f.columns]
    if missing:
        raise ContractError(f"{path}: missing columns {missing}")
    # checked: now read as its readers always have (numbers as numbers)
    return pd.read_csv(path, keep_default_na=False)


# ------------------------------------------------------------------ a run's result files

def result_dir(d: str | Path) -> tuple[Path, Path]:
    """Where a run keeps its result CSVs, and where its ``claims.csv`` is.

    A result directory (``results/<tag>``) holds both; a shipped reference run
    (``report/reference/<name>``, with a ``run.json``) keeps its CSVs under
    ``results/`` and its claims beside them.
    """
    d = Path(d)
    if (d / "run.json").is_file() and (d / "results").is_dir():
        return d / "results", d
    return d, d


def result_csvs(d: str | Path) -> list[Path]:
    """The result CSVs of a directory: top-level ``*.csv`` with the contract's columns."""
    out = []
    for p in sorted(Path(d).glob("*.csv")):
        if p.name.endswith("_samples.csv"):
            continue
        # a file that is not a CSV at all (garbage, empty, cut short) is refused, named
        head = read_csv_checked(p, allow_empty=True)
        if all(c in head.columns for c in COLUMNS):
            out.append(p)
    return out


def load_rows(d: str | Path) -> pd.DataFrame:
    return read_results(result_csvs(d))


def load_samples(d: str | Path) -> pd.DataFrame:
    frames = []
    for p in sorted(Path(d).glob("*_samples.csv")):
        head = read_csv_checked(p, allow_empty=True)  # garbage, empty, cut: refused
        if all(c in head.columns for c in SAMPLE_COLUMNS):  # else not ours to read
            frames.append(read_samples(p))
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=SAMPLE_COLUMNS)
