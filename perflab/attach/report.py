"""``perflab run --report``: one self-contained HTML page of an attached run, its first screen
this script's verdict.

Built from the files the run wrote under ``--out`` (``diagnosis.csv``/``.md``,
``ledger.csv``, ``results.csv``, ``evidence.json``, the trace), with the chapter report's
pieces (perflab.views.first_screen: its style, answer box and stacked bar) and nothing of
the chapter's claims: they judge the chapter's model, not this script. No notebook kernel,
no network, no script: every text is escaped, the Markdown goes through
perflab.core.sanitize, and nothing is loaded from outside the page.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd

from perflab.core import io
from perflab.core.names import PHASES
from perflab.views import first_screen

REPORT = "report.html"
#: the page's own additions to the chapter report's style (no notebook body here)
PAGE_STYLE = """<style>
body {font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 12px 24px;
  font-size: 14px; line-height: 1.4; color: #222}
main table {border-collapse: collapse; font-size: 13px; margin: 6px 0 14px 0;
  display: block; max-width: 100%; overflow-x: auto}
main th, main td {border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: left;
  vertical-align: top}
main pre {background: #f6f6f6; padding: 8px; font-size: 12px}
</style>"""
#: where diagnosis.md's verdict starts (perflab.views.diagnose.render_markdown); the lines
#: before it are what the run observed (perflab.attach.run.render)
VERDICT_HEAD = "## What is the machine waiting for?"
#: the run's own files, named at the page's end (the trace's name is in the evidence)
FILES = ("evidence.json", "results.csv", "diagnosis.md", "diagnosis.csv", "ledger.md",
         "ledger.csv", "timings.json")
#: diagnosis.csv's columns shown in the evidence table
EVIDENCE_COLUMNS = ["label", "outcome", "because", "source", "value", "unit", "test", "passes"]


def _short(cell: str) -> str:
    """A measured decimal to 4 significant digits (a hash or a count is left as it is)."""
    try:
        return f"{float(cell):.4g}" if "." in cell else cell
    except ValueError:
        return cell


def _table(frame: pd.DataFrame) -> str:
    shown = frame.apply(lambda col: col.astype(str).map(_short))
    return shown.to_html(index=False, escape=True, border=0, na_rep="")


def _read_csv(path: Path) -> pd.DataFrame | None:
    return pd.read_csv(path, keep_default_na=False, dtype=str) if path.is_file() else None


def _markdown(text: str) -> str:
    """Markdown through the project's sanitizer; escaped preformatted text where mistune is
    not installed (a machine with only torch and the scientific stack)."""
    from perflab.core import sanitize

    try:
        return sanitize.markdown_html(text)
    except ModuleNotFoundError:
        return f"<pre>{html.escape(text)}</pre>"


def _phase_shares(results: pd.DataFrame | None) -> dict[str, float]:
    """The phases' shares of the mean step from the run's CSV-contract rows."""
    if results is None:
        return {}
    r = results[(results.metric == "phase_share") & (results.statistic == "value")]
    got = {v.removeprefix("phase/"): float(x) for v, x in zip(r.variant, r.value)}
    return {p: got[p] for p in PHASES if p in got}


def _device_idle(out_dir: Path, ev: dict | None) -> dict[str, float]:
    """On CUDA, the profiled window's device busy and idle split, read from the kept trace as
    the verdict read it (R02's rows: perflab.attach.verdict.engine_rows)."""
    if not ev or not ev.get("cuda") or not ev.get("steps"):
        return {}
    from perflab.attach import evidence as evmod
    from perflab.attach import verdict as vmod

    return first_screen.device_idle(vmod.engine_rows(ev, evmod.summarize(ev), out_dir))


def _ledger_value(ledger: pd.DataFrame | None, section: str, field: str) -> str:
    if ledger is None:
        return ""
    r = ledger[(ledger.section == section) & (ledger.field == field)]
    return str(r.value.iloc[0]) if not r.empty else ""


def answer_html(out_dir: Path, title: str, outcome: str, ledger: pd.DataFrame | None,
                diag: pd.DataFrame | None) -> str:
    """The answer box: the verdict in the heading, its evidence, what to do next, how the
    script ended, the observers' cost."""
    esc = html.escape
    label = _ledger_value(ledger, "verdict", "waiting_for")
    head = (f"{esc(title)}: waiting for <strong>{esc(label)}</strong>" if label and diag is not None
            else f"{esc(title)}: no verdict")
    out = [f'<div class="answer" id="answer"><h1>{head}</h1>']
    if diag is None:
        out.append(f'<p class="verdict">No verdict: {esc(outcome)}.</p>')
    else:
        out.append(first_screen.chosen_html(out_dir / "diagnosis.csv"))
        grows = diag[(diag.candidate == "memory_growth") & (diag.outcome == "fits")]
        if not grows.empty:
            out.append(f"<p><strong>Also: memory grows every step</strong> — "
                       f"{esc(grows.because.iloc[0])}. {esc(grows.intervention.iloc[0])}.</p>")
    out.append(f"<p>{esc(outcome[:1].upper() + outcome[1:])}.</p>")
    cost = _ledger_value(ledger, "observers", "cost_pct")
    if ledger is not None and cost not in ("", "None", "nan"):
        resolved = _ledger_value(ledger, "observers", "cost_resolved")
        out.append(f"<p>Observers' cost (phase hooks on against off, paired stretches): "
                   f"{float(cost):+.2g}% of the step"
                   + (" (resolved)" if resolved == "True" else " (not resolved: within the "
                      "noise)") + "; the timed figures include both.</p>")
    elif ledger is not None and diag is not None:
        out.append("<p>Observers' cost: not measured (fewer than 2 hooks-on/off stretch pairs "
                   "in the budget).</p>")
    out.append("</div>")
    return "".join(out)


def build(out_dir: Path, command: list[str], outcome: str) -> str:
    """The page, from the run's files in ``out_dir``."""
    from perflab.attach import evidence as evmod

    esc = html.escape
    out_dir = Path(out_dir)
    ev_path = out_dir / "evidence.json"
    ev = json.loads(ev_path.read_text()) if ev_path.is_file() else None
    diag = _read_csv(out_dir / "diagnosis.csv")
    ledger = _read_csv(out_dir / "ledger.csv")
    results = _read_csv(out_dir / "results.csv")
    name = Path(command[1] if command[0] == "-m" else command[0]).name
    device = ev["device_name"] if ev else "this machine"
    body = [answer_html(out_dir, f"{name} on {device}", outcome, ledger, diag)]
    shares = _phase_shares(results)
    if shares:
        n = _ledger_value(ledger, "steps", "timed")
        body.append(first_screen.stack_html(
            shares, "Where the step's time goes (the phase hooks, % of the mean steady step"
            + (f", {n} timed steps" if n else "") + ")"))
    idle = _device_idle(out_dir, ev)
    if idle:
        body.append(first_screen.stack_html(idle, "The device during the profiled window "
                                            "(% of its time: busy, and idle by cause)"))
    clock = (ev or {}).get("step_clock")
    body.append(f"<p>The command: <code>{esc(evmod.workload_name(command))}</code>"
                + (f"; step times by {esc(clock)}" if clock else "") + ".</p>")
    md = out_dir / "diagnosis.md"
    observed, _, diagnosis = (md.read_text() if md.is_file() else "").partition(VERDICT_HEAD)
    if observed.strip():
        # diagnosis.md's head: its title, then one line per thing observed
        lines = observed.strip().splitlines()
        body += ["<h2 id=\"observed\">What was observed</h2>",
                 _markdown("\n".join(lines[1:] if lines[0].startswith("# ") else lines))]
    if diag is not None:
        rows = diag[[c for c in EVIDENCE_COLUMNS if c in diag]].copy()
        # a candidate's label, outcome and reason once, on its first evidence row
        rows.loc[diag.candidate.eq(diag.candidate.shift()).values,
                 ["label", "outcome", "because"]] = ""
        body += ["<h2 id=\"evidence\">The evidence: each candidate's test and the rows it "
                 "read</h2>", _table(rows)]
    if ledger is not None:
        body += ["<h2 id=\"ledger\">The ledger: each figure and where it came from</h2>",
                 _table(ledger)]
    if diagnosis.strip():
        body += ["<h2 id=\"diagnosis\">The diagnosis in full</h2>", _markdown(diagnosis)]
    tb = ((ev or {}).get("status") or {}).get("traceback")
    if tb:
        body += ["<h2 id=\"traceback\">The script's traceback</h2>",
                 f"<pre>{esc(tb)}</pre>"]
    trace = ((ev or {}).get("profile") or {}).get("trace")
    files = [f for f in (*FILES, trace) if f and (out_dir / f).is_file()]
    body.append("<p>This run's files, beside this page: " + ", ".join(
        f"<code>{esc(f)}</code>" for f in files) + (f" (<code>{esc(trace)}</code>: the "
        "profiled window, open it in Perfetto)" if trace in files else "") + ".</p>")
    body.append("<p><em>Every number on this page is read from this run's files; a quantity "
                "the run did not measure is said to be so, never invented.</em></p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>perflab run · {esc(name)}</title>{first_screen.STYLE}{PAGE_STYLE}"
            "</head><body><main>" + "\n".join(body) + "</main></body></html>\n")


def write(out_dir: Path, command: list[str], outcome: str) -> Path:
    path = Path(out_dir) / REPORT
    io.atomic_write_text(path, build(out_dir, command, outcome))
    return path
