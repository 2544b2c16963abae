"""Reference numbers to set this machine's results beside.

Two kinds live under ``report/reference/``:

- ``chapter.csv`` (+ ``chapter.json``, its environment): the chapter's own
  published numbers (RTX 2060, compute capability 7.5, 12 GiB, PyTorch 2.6,
  CUDA 11.8) typed into the CSV contract of :mod:`perflab.core.io`, under the same
  experiment / variant / metric / statistic names the experiments write, so
  one join sets them beside any run. Rows of experiments the chapter reports
  only in prose carry the stated figure; ``window`` says how it was taken.
- ``<run>/``: a shipped reference run of this pipeline (e.g. the H200 and the
  2-core CPU), laid out by :func:`ship`: ``results/*.csv`` (+ provenance
  JSON), ``ledger.md``, ``claims.csv`` and ``run.json`` (tag, device, scale,
  commit, environment).

:func:`side_by_side` joins one experiment's rows with the chapter and every
reference run on (experiment, variant, metric, statistic) and says, row by
row, whether the contracts match (a ratio is only meaningful when the
workload, shape, dtype, mode and execution are the same).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perflab.core import env, io
from perflab.experiments import catalogue

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_DIR = io.REFERENCE_DIR
CHAPTER = "chapter"
#: the join: one measured quantity
KEYS = ["experiment", "variant", "metric", "statistic"]
#: fields that must agree for a ratio to compare like with like (device aside)
CONTRACT = ["model", "input_shape", "dtype", "mode", "execution", "unit"]


@dataclass
class ReferenceRun:
    """One set of reference rows: the chapter, or a shipped run of this pipeline."""

    name: str
    rows: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    claims: pd.DataFrame | None = None
    ledger_md: str = ""
    path: Path | None = None

    @property
    def label(self) -> str:
        env = self.meta.get("environment", {})
        device = env.get("gpu") or env.get("device_name") or self.meta.get("device", "")
        return f"{self.name} ({device})" if device else self.name


def load_chapter(root: str | Path | None = None) -> ReferenceRun:
    """The chapter's published numbers (validated against the CSV contract)."""
    root = Path(root) if root else REFERENCE_DIR
    rows = io.read_results([root / "chapter.csv"])
    meta_path = root / "chapter.json"
    meta = io.read_json(meta_path) if meta_path.is_file() else {}
    return ReferenceRun(CHAPTER, rows, meta, path=root)


def result_csvs(results: str | Path) -> list[Path]:
    """The experiment result CSVs of a result directory (not samples, not ledger/claims)."""
    results = Path(results)
    names = {f"{e.slug}.csv" for e in catalogue.EXPERIMENTS.values()}
    return sorted(p for p in results.glob("*.csv") if p.name in names)


def load_run(path: str | Path) -> ReferenceRun:
    """A shipped run: ``results/*.csv``, ``run.json`` and, when present, ledger and claims."""
    path = Path(path)
    meta = io.read_json(path / "run.json")
    rows = io.read_results(result_csvs(path / "results"))
    claims = io.read_table(path / "claims.csv", ["claim", "verdict"]) \
        if (path / "claims.csv").is_file() else None
    ledger = (path / "ledger.md").read_text() if (path / "ledger.md").is_file() else ""
    return ReferenceRun(path.name, rows, meta, claims, ledger, path)


def load_runs(root: str | Path | None = None) -> list[ReferenceRun]:
    """Every shipped run under ``root`` (a directory holding a ``run.json``), by name."""
    root = Path(root) if root else REFERENCE_DIR
    if not root.is_dir():
        return []
    return [load_run(p) for p in sorted(root.iterdir()) if (p / "run.json").is_file()]


def ship(results: str | Path, dest: str | Path, *, commit: str | None = None) -> Path:
    """Copy a finished run (result dir of one tag) into ``dest`` as a reference run.

    Copies the experiment CSVs and their provenance JSON to ``dest/results/``,
    ``ledger.md``/``ledger.csv``/``claims.csv``/``diagnosis.md``/``diagnosis.csv`` and the self-contained
    ``report.html`` beside them, and writes
    ``run.json`` from the provenance (tag, device, scale, commit, environment).
    Samples and traces are left out (size), except the samples of the experiments
    whose claims judge a statistic by its own interval over them
    (``claims_read_samples``): everything needed to redraw every table and claim is kept,
    the further processes of ``claim_processes`` among it (``results/processes/``).
    """
    results, dest = Path(results), Path(dest)
    csvs = result_csvs(results)
    if not csvs:
        raise FileNotFoundError(f"no experiment CSVs in {results}")
    io.read_results(csvs)  # refuse to ship rows that break the contract
    (dest / "results").mkdir(parents=True, exist_ok=True)
    provenance = {}
    for csv in csvs:
        shutil.copy2(csv, dest / "results" / csv.name)
        js = csv.with_suffix(".json")
        if js.is_file():
            # committed with the repository: no machine's directories in it
            data = env.scrub_paths(io.read_json(js))
            io.atomic_write_json(dest / "results" / js.name, data)
            provenance[csv.stem] = data
    for e in catalogue.EXPERIMENTS.values():
        samples = results / f"{e.slug}_samples.csv"
        if e.claims_read_samples and samples.is_file():
            shutil.copy2(samples, dest / "results" / samples.name)
    # the further processes of claim_processes, whose claims must agree with their own job's:
    # rows, provenance and samples, so the claims are judged again from what is shipped
    csvs, samples = io.process_files(results)
    if csvs:
        io.read_processes(csvs, samples)  # refuse, as above
        out = dest / "results" / io.PROCESSES_DIR
        out.mkdir(exist_ok=True)
        for f in [*csvs, *samples]:
            shutil.copy2(f, out / f.name)
        for js in (p.with_suffix(".json") for p in csvs if p.with_suffix(".json").is_file()):
            io.atomic_write_json(out / js.name, env.scrub_paths(io.read_json(js)))
    for name in ("ledger.md", "ledger.csv", "claims.csv", "diagnosis.md", "diagnosis.csv",
                 "report.html"):
        if (results / name).is_file():
            shutil.copy2(results / name, dest / name)
    first = next(iter(provenance.values()), {})
    contract, environment = first.get("contract", {}), first.get("environment", {})
    commits = sorted({str(p.get("environment", {}).get("git_commit")) for p in provenance.values()})
    meta = {
        "tag": results.name,
        "device": contract.get("device", ""),
        "scale": contract.get("scale", ""),
        "commit": commit or (commits[0] if len(commits) == 1 else commits),
        "started": min((p.get("started", "") for p in provenance.values()), default=""),
        "finished": max((p.get("finished", "") for p in provenance.values()), default=""),
        "experiments": sorted(p.get("experiment", "") for p in provenance.values()),
        "environment": environment,
    }
    io.atomic_write_json(dest / "run.json", meta)
    return dest


def _contract_of(row: pd.Series) -> dict[str, str]:
    return {c: str(row.get(c, "")) for c in CONTRACT}


def comparability(mine: pd.Series, ref: pd.Series) -> tuple[bool, str]:
    """(ratio meaningful?, why) for one of this machine's rows against a reference row."""
    a, b = _contract_of(mine), _contract_of(ref)
    differ = [f"{c} {a[c]} vs {b[c]}" for c in CONTRACT if a[c] != b[c]]
    same_device = (mine.get("device_name") == ref.get("device_name"))
    if differ:
        kind = ("scaled CPU contract" if str(mine.get("device", "")).startswith("cpu")
                else "other contract")
        return False, f"{kind}: " + "; ".join(differ)
    if not same_device:
        return True, f"same contract, other device ({mine.get('device_name')} vs {ref.get('device_name')})"
    return True, "same contract, same device"


def _pick(rows: pd.DataFrame, ref: pd.Series) -> pd.Series | None:
    """This run's row for the reference row's key (same execution preferred)."""
    # masks, one row taken at the end (a sub-frame per key copied every column each time)
    def col(k: str) -> np.ndarray:
        return rows[k].to_numpy()

    sel = np.ones(len(rows), dtype=bool)
    for k in KEYS:
        sel &= col(k) == ref[k]
    if not sel.any():
        # a non-ok row is written once per variant/metric under statistic "value"
        sel = ((col("experiment") == ref.experiment) & (col("variant") == ref.variant)
               & (col("metric") == ref.metric) & (col("status") != "ok"))
        if not sel.any():
            return None
    same = sel & (col("execution") == ref.execution)
    return rows.iloc[int((same if same.any() else sel).argmax())]


def _cell(row: pd.Series | None) -> Any:
    if row is None:
        return "not run"
    if row["status"] != "ok":
        return row["status"]
    return float(row["value"])


def side_by_side(rows: pd.DataFrame, eid: str, chapter: ReferenceRun | None,
                 runs: list[ReferenceRun] = ()) -> pd.DataFrame:
    """This machine beside the chapter (value, ratio, comparability) and each reference run.

    One line per quantity the chapter published for ``eid`` (or, without a
    chapter row, per median/value a reference run has). ``ratio to chapter`` is
    this machine / the chapter, given only when the contracts match
    (``comparison`` says why not otherwise); ``ratio to <run>`` likewise for
    each reference run.
    """
    keyed: dict[tuple, dict[str, Any]] = {}
    # the quantities compared: the chapter's; without any, a reference run's headline rows
    leaders = [chapter] if chapter is not None and (chapter.rows.experiment == eid).any() \
        else [r for r in runs if (r.rows.experiment == eid).any()][:1]
    for ref in leaders:
        sel = ref.rows[ref.rows.experiment == eid]
        if ref.name != CHAPTER:
            sel = sel[sel.statistic.isin(["median", "value"])]
        for _, rr in sel.iterrows():
            keyed.setdefault(tuple(rr[k] for k in KEYS),
                             {"variant": rr.variant, "metric": rr.metric,
                              "statistic": rr.statistic, "unit": rr.unit, "_ref": rr})
    for ref in ([chapter] if chapter is not None else []) + list(runs):
        for _, rr in ref.rows[ref.rows.experiment == eid].iterrows():
            line = keyed.get(tuple(rr[k] for k in KEYS))
            if line is not None:
                line[ref.name] = _cell(rr)
                line[f"_row:{ref.name}"] = rr
    mine_rows = rows[rows.experiment == eid] if not rows.empty else rows
    out = []
    for line in keyed.values():
        ref_row = line.pop("_ref")
        mine = _pick(mine_rows, ref_row) if not mine_rows.empty else None
        rec = {k: line[k] for k in ("variant", "metric", "statistic", "unit")}
        rec["this machine"] = _cell(mine)
        if chapter is not None:
            ch = line.get(CHAPTER, "")
            rec["chapter"] = ch
            ratio, why = "", ""
            if mine is not None and mine["status"] == "ok" and CHAPTER in line:
                ok, why = comparability(mine, ref_row)
                if ok and isinstance(ch, float) and ch != 0:
                    ratio = float(mine["value"]) / ch
            rec["ratio to chapter"] = ratio
            rec["comparison"] = why
        for run in runs:
            rec[run.name] = line.get(run.name, "")
            theirs = line.get(f"_row:{run.name}")
            ratio = ""
            if (mine is not None and theirs is not None and mine["status"] == "ok"
                    and theirs["status"] == "ok" and comparability(mine, theirs)[0]
                    and float(theirs["value"]) != 0):
                ratio = float(mine["value"]) / float(theirs["value"])
            rec[f"ratio to {run.name}"] = ratio
        out.append(rec)
    return pd.DataFrame(out)




def section(eid: str) -> str:
    """The chapter section of experiment ``eid`` (an unknown id gets its own heading)."""
    e = catalogue.EXPERIMENTS.get(eid.upper())
    return e.report_section if e is not None and e.report_section else f"Other · {eid.upper()}"


def section_key(eid: str) -> tuple[int, str]:
    """Sort key: the chapter's section order, then the experiment id."""
    head = section(eid).split(" ", 1)[0]
    return (int(head) if head.isdigit() else 10_000, eid.upper())
