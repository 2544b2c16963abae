"""A report from a run that did not finish: what was measured, and what failed and why.

When a job fails, Snakemake skips everything downstream of it, the report
included. With ``--keep-going`` the other experiments still run; the
workflow's ``onerror`` hook (workflow/rules/report.smk) then calls
:func:`build`, which draws the figures of the experiments that have results (the
figures job needs them all, so it did not run), renders the same report notebook
from the result files that exist and names each selected experiment that has none: ``failed`` (one
of its jobs ran in this run and left a log but no result: the log's last lines
are shown), ``incomplete`` (some of its per-item jobs finished, the rest and
the aggregation did not run) or ``not run`` (a job it depends on failed, or the
run stopped first).

A failed experiment never has a result file (writes are atomic and Snakemake
removes a failed job's outputs), so "no CSV" is the test. The next run
rebuilds ledger and report through their rules, since the new CSVs are newer.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from perflab.experiments.catalogue import EXPERIMENTS
from perflab.pipeline import config as cfgmod

#: lines of a failed job's log shown in the report
EXCERPT_LINES = 25


def _logs_of(logs_dir: Path, slug: str) -> list[Path]:
    """The job logs of one experiment: its own, and those of its per-item jobs (E08's batches)."""
    found = [logs_dir / f"{slug}.log"]
    sub = logs_dir / slug
    if sub.is_dir():
        found += sorted(sub.glob("*.log"))
    return [p for p in found if p.is_file()]


def excerpt(path: Path, lines: int = EXCERPT_LINES) -> str:
    text = path.read_text(errors="replace").rstrip("\n").splitlines()
    return "\n".join(text[-lines:]) if text else "(the log is empty)"


def failures(cfg: Mapping[str, Any], experiments: Iterable[str], logs_dir: str | Path,
             since: float) -> dict[str, dict[str, str]]:
    """{eid: {status, title, log, excerpt}} for each selected experiment without a result file.

    ``since``: the run's start (epoch seconds); a log older than that is a previous run's.
    """
    logs_dir = Path(logs_dir)
    out: dict[str, dict[str, str]] = {}
    for eid in experiments:
        if Path(cfgmod.experiment_outputs(cfg, eid)["csv"]).is_file():
            continue
        exp = EXPERIMENTS[eid]
        logs = [p for p in _logs_of(logs_dir, exp.slug) if p.stat().st_mtime >= since - 1]
        # a job whose own result file exists finished (E08's batches, E20's cold/warm jobs)
        results = cfgmod.result_dir(cfg)
        unfinished = [p for p in logs
                      if not (results / p.relative_to(logs_dir)).with_suffix(".csv").is_file()]
        if unfinished:
            # the log written last is the job that failed (for E08: a batch, or the sweep)
            log = max(unfinished, key=lambda p: p.stat().st_mtime)
            out[eid] = {"status": "failed", "title": exp.title, "log": str(log),
                        "excerpt": excerpt(log)}
        elif logs:
            done = ", ".join(p.stem for p in sorted(logs))
            out[eid] = {"status": "incomplete", "title": exp.title, "log": "",
                        "excerpt": f"these of its jobs finished: {done}; the rest did not run "
                                   "(a job it depends on failed, or the run stopped first)"}
        else:
            out[eid] = {"status": "not run", "title": exp.title, "log": "",
                        "excerpt": "no job of this experiment ran: a job it depends on failed, "
                                   "or the run stopped before it started"}
    return out


def last_line(text: str) -> str:
    """The last non-empty line of a log excerpt: a failed job's exception."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "(the log is empty)"


def missing_lines(failed: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Markdown: each experiment without a result, its status and why (its log's last line)."""
    if not failed:
        return []
    out = ["**Not measured in this run** (the verdict is drawn from the experiments that ran; a "
           "candidate that needs a missing one says `not measured`):", ""]
    for eid, f in failed.items():
        why = last_line(f["excerpt"]) if f["status"] == "failed" else f["excerpt"]
        out.append(f"- {eid} ({f['title']}) {f['status']}: {why}"
                   + (f" (log: `{f['log']}`)" if f["log"] else ""))
    return out


def diagnosis(cfg: Mapping[str, Any], experiments: list[str], logs_dir: str | Path,
              since: float) -> Path:
    """The verdict drawn from the result files that exist, naming each experiment that has none.

    Writes ``diagnosis.md`` and ``diagnosis.csv`` in the run's result directory (paths are
    relative to the working directory, as the workflow's are); returns the Markdown's path.
    """
    import pandas as pd

    from perflab.core import io
    from perflab.views import diagnose

    results = cfgmod.result_dir(cfg)
    failed = failures(cfg, experiments, logs_dir, since)
    present = [cfgmod.experiment_outputs(cfg, e)["csv"] for e in experiments if e not in failed]
    frame = io.read_results(present) if present else pd.DataFrame(columns=io.COLUMNS)
    d = diagnose.diagnose(frame)
    table, md = diagnose.to_frame(d), diagnose.render_markdown(d)
    lines = md.splitlines()
    at = next((i + 1 for i, ln in enumerate(lines) if ln.startswith("**Verdict")), len(lines))
    if failed:
        lines = lines[:at] + [""] + missing_lines(failed) + lines[at:]
    md = "\n".join(lines).rstrip("\n") + "\n"
    gone = pd.DataFrame([{"candidate": "missing", "label": f"{eid} {f['status']}",
                          "outcome": f["status"], "verdict": False, "source": eid,
                          "because": last_line(f["excerpt"]) if f["status"] == "failed"
                          else f["excerpt"]} for eid, f in failed.items()],
                        columns=diagnose.COLUMNS)
    io.atomic_write_csv(results / "diagnosis.csv", pd.concat([table, gone], ignore_index=True)
                        if failed else table)
    out = results / "diagnosis.md"
    io.atomic_write_text(out, md)
    return out


def _render_report_module(root: Path):
    spec = importlib.util.spec_from_file_location("perflab_render_report",
                                                  root / "scripts" / "render_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(cfg: Mapping[str, Any], experiments: list[str], logs_dir: str | Path, since: float,
          root: str | Path) -> Path | None:
    """Ledger, figures and report from the result files that exist; return the report's path.

    Returns None (and says why on stderr) where there is nothing to report; then a
    report of an earlier run that no longer describes the results is removed
    (:func:`retire_stale_report`): a failed run never leaves one looking complete.
    """
    written = None
    try:
        written = _build(cfg, experiments, logs_dir, since, root)
    finally:
        if written is None:
            retire_stale_report(cfg, experiments, since)
    return written


def retire_stale_report(cfg: Mapping[str, Any], experiments: list[str], since: float) -> bool:
    """Remove ``report.html`` when it predates this (failed) run and no longer describes the
    results: an experiment's result is missing, or newer than the report. True if removed."""
    out = cfgmod.result_dir(cfg) / "report.html"
    if not out.is_file() or out.stat().st_mtime >= since - 1:
        return False
    made = out.stat().st_mtime
    csvs = [Path(cfgmod.experiment_outputs(cfg, e)["csv"]) for e in experiments]
    if all(c.is_file() and c.stat().st_mtime <= made for c in csvs):
        return False  # every result it shows is still the one it shows
    out.unlink()
    print(f"perflab: removed {out}: it was an earlier run's and no longer describes the "
          "results (this run failed; the next successful run rebuilds it)", file=sys.stderr)
    return True


def _build(cfg: Mapping[str, Any], experiments: list[str], logs_dir: str | Path, since: float,
           root: str | Path) -> Path | None:
    from perflab.core import io
    from perflab.views import ledger

    root = Path(root)
    results = cfgmod.result_dir(cfg)
    figures = Path(cfg["figures_dir"]) / cfg["resolved_tag"]
    failed = failures(cfg, experiments, logs_dir, since)
    present = [cfgmod.experiment_outputs(cfg, e)["csv"] for e in experiments if e not in failed]
    for eid, f in failed.items():
        print(f"perflab: {eid} {f['status']}" + (f" (log: {f['log']})" if f["log"] else ""),
              file=sys.stderr)
    if not failed:
        return None  # every experiment has its result: the failure was downstream of them
    if not present:
        print("perflab: no experiment has a result; no report written", file=sys.stderr)
        return None
    t0 = time.perf_counter()
    try:
        rows, md = ledger.build(present)
        io.atomic_write_csv(results / "ledger.csv", rows)
        io.atomic_write_text(results / "ledger.md", md)
    except Exception as exc:  # a ledger line may need an experiment that failed
        print(f"perflab: ledger of the partial run not built ({type(exc).__name__}: {exc})",
              file=sys.stderr)
        (results / "ledger.md").unlink(missing_ok=True)
    # the figures job needs every experiment's rows, so it never ran: draw those that exist
    from perflab.experiments import draw_figures

    draw_figures(cfgmod.figure_plan(cfg, [e for e in experiments if e not in failed]))
    out = results / "report.html"
    with tempfile.TemporaryDirectory(prefix="perflab-failed-") as tmp:
        failed_json = Path(tmp) / "failed.json"
        failed_json.write_text(json.dumps(failed, indent=1))
        saved = os.environ.get("PERFLAB_FAILED")
        os.environ["PERFLAB_FAILED"] = str(failed_json)
        try:
            _render_report_module(root).main(
                root / "report" / "perflab.py", results, figures, out, root
            )
        finally:
            if saved is None:
                os.environ.pop("PERFLAB_FAILED", None)
            else:
                os.environ["PERFLAB_FAILED"] = saved
    print(f"perflab: partial report ({len(present)} of {len(experiments)} experiments) -> {out} "
          f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return out
