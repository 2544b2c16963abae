# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # perflab report
#
# The measurements of *Performance: What Is the Machine Waiting For?*, repeated on
# this machine. Every number below is read from this run's result files; a
# measurement this device cannot make is shown with its reason, never invented.

# %%
# Setup: where the results and figures are (set by scripts/render_report.py).
import base64
import html
import json
import os
from pathlib import Path

import pandas as pd
from IPython.display import HTML, display

from perflab import experiments
from perflab.core import env as perflab_env
from perflab.core import io, sanitize
from perflab.experiments.catalogue import EXPERIMENTS
from perflab.kit import claims, tables
from perflab.views import reference


class Markdown(HTML):
    """Markdown shown through the sanitising renderer (IPython's name, so every cell keeps
    using it): raw HTML in it (another run's directory name, a label in its diagnosis) is
    escaped, a script link defused, never live."""

    def __init__(self, text: str):
        super().__init__(sanitize.markdown_html(text))


RESULTS = Path(os.environ["PERFLAB_RESULTS"])
FIGURES = Path(os.environ["PERFLAB_FIGURES"])
if not RESULTS.is_dir():
    raise FileNotFoundError(f"PERFLAB_RESULTS={RESULTS} is not a directory")

# experiments of the catalogue whose result CSV is in the result directory
PRESENT = {eid: e for eid, e in EXPERIMENTS.items() if (RESULTS / f"{e.slug}.csv").is_file()}
ROWS = io.read_results([RESULTS / f"{e.slug}.csv" for e in PRESENT.values()])
PROVENANCE = {
    eid: io.read_json(RESULTS / f"{e.slug}.json")
    for eid, e in PRESENT.items()
    if (RESULTS / f"{e.slug}.json").is_file()
}
# a run that did not finish (perflab/views/partial.py): experiments that failed or did not run
FAILED = (json.loads(Path(os.environ["PERFLAB_FAILED"]).read_text())
          if os.environ.get("PERFLAB_FAILED") else {})


# the chapter's published numbers and any shipped reference run (report/reference/)
REFERENCE = Path(os.environ.get("PERFLAB_REFERENCE", reference.REFERENCE_DIR))
CHAPTER = (reference.load_chapter(REFERENCE) if (REFERENCE / "chapter.csv").is_file() else None)
RUNS = reference.load_runs(REFERENCE)
# the claims: this run's claims.csv (the `claims` rule), else evaluated here from the rows
CLAIMS = (io.read_table(RESULTS / "claims.csv", ["claim", "verdict"])
          if (RESULTS / "claims.csv").is_file() else experiments.evaluate_claims(ROWS))


def html_table(frame: pd.DataFrame, index: bool = False) -> HTML:
    """A DataFrame as an escaped HTML table."""
    return HTML(frame.to_html(index=index, escape=True, border=0, na_rep=""))


def key_value(pairs: dict) -> HTML:
    """A two-column table of fields and their values."""
    values = [str(v) for v in pairs.values()]
    return html_table(pd.DataFrame({"field": list(pairs), "value": values}))


# %%
if FAILED:
    display(Markdown(
        "## This run did not finish\n\n"
        f"{sum(f['status'] == 'failed' for f in FAILED.values())} experiment(s) failed, "
        f"{sum(f['status'] == 'incomplete' for f in FAILED.values())} did not finish and "
        f"{sum(f['status'] == 'not run' for f in FAILED.values())} did not run; this report "
        "shows what was measured. Fix the cause and run Snakemake again: only the missing "
        "experiments run, then the ledger and this report are rebuilt."))
    display(html_table(pd.DataFrame(
        [{"experiment": eid, "title": f["title"], "status": f["status"], "log": f["log"]}
         for eid, f in FAILED.items()])))

# %% [markdown]
# ## Claims
#
# Each finding of the chapter, evaluated on this run's rows: REPRODUCED, DIFFERS (with
# what was measured and the mechanism the data shows), INCONCLUSIVE (the effect is inside
# the measured noise, or there is no noise evidence to decide it by), ERROR (an instrument
# it needs failed), NOT RUN (its experiment did not run here) or UNSUPPORTED (this
# device cannot measure it). Each links to its evidence table below and names the command
# that reruns its experiment alone.

# %%
VERDICT_STYLE = {"REPRODUCED": "#1b7837", "DIFFERS": "#b2182b", "INCONCLUSIVE": "#8c6d1f",
                 "ERROR": "#762a83", "NOT RUN": "#666666", "UNSUPPORTED": "#666666"}


def claims_html(frame: pd.DataFrame) -> HTML:
    """The claims table; every text cell escaped, links only to anchors of this page."""
    esc = html.escape
    head = ("<tr><th>claim</th><th>statement</th><th>chapter</th><th>tolerance</th>"
            "<th>verdict</th><th>measured here</th><th>mechanism</th><th>evidence</th>"
            "<th>reproduce alone</th>"
            + "".join(f"<th>{esc(r.name)} verdict</th>" for r in RUNS if r.claims is not None)
            + "</tr>")
    # each shipped reference run's verdict on the same claim, beside this run's
    theirs = [dict(zip(r.claims.claim, r.claims.verdict)) for r in RUNS if r.claims is not None]
    body = []
    for r in frame.to_dict("records"):
        eid = str(r["experiment"])
        colour = VERDICT_STYLE.get(r["verdict"], "#000")
        anchor = eid.lower() if eid.lower().isalnum() else ""
        body.append(
            f"<tr><td>{esc(str(r['claim']))}</td><td>{esc(str(r['statement']))}</td>"
            f"<td>{esc(str(r['chapter']))}</td><td>{esc(str(r['tolerance']))}</td>"
            f"<td style=\"color:{colour};font-weight:bold\">{esc(str(r['verdict']))}</td>"
            f"<td>{esc(str(r['measured']))}</td><td>{esc(str(r['mechanism']))}</td>"
            f"<td><a href=\"#{anchor}\">{esc(eid)}</a></td>"
            f"<td><code>{esc(str(r['command']))}</code></td>"
            + "".join(f"<td>{esc(str(t.get(r['claim'], '')))}</td>" for t in theirs)
            + "</tr>")
    style = ("<style>table.claims td, table.claims th {text-align: left; "
             "vertical-align: top}</style>")
    return HTML(f"{style}<table class=\"claims\"><thead>{head}</thead><tbody>{''.join(body)}"
                "</tbody></table>")


counts = {v: int((CLAIMS.verdict == v).sum()) for v in claims.VERDICTS}
display(Markdown("**This run:** " + " · ".join(f"{v} {n}" for v, n in counts.items())))
display(claims_html(CLAIMS))
# the shipped reference runs' verdict counts, after this run's table
summary = {f"reference: {run.label}": {v: int((run.claims.verdict == v).sum())
                                       for v in claims.VERDICTS}
           for run in RUNS if run.claims is not None}
if summary:
    display(html_table(pd.DataFrame(summary).T.rename_axis("claims of").reset_index()))

# %% [markdown]
# ## Run and environment

# %%
if not PROVENANCE:
    display(Markdown("No provenance JSON in the result directory: environment unknown."))
else:
    first = next(iter(PROVENANCE.values()))
    contract, environment = first.get("contract", {}), first.get("environment", {})
    started = [p["started"] for p in PROVENANCE.values() if p.get("started")]
    finished = [p["finished"] for p in PROVENANCE.values() if p.get("finished")]
    display(key_value({
        "result directory": RESULTS.name,
        "tag": contract.get("tag", ""),
        "scale": contract.get("scale", ""),
        "device": f"{contract.get('device', '')} ({environment.get('device_name', '')})",
        "git commit": environment.get("git_commit", ""),
        "experiments": ", ".join(PROVENANCE),
        "first started": min(started, default=""),
        "last finished": max(finished, default=""),
    }))
    commits = {p.get("environment", {}).get("git_commit") for p in PROVENANCE.values()}
    if len(commits) > 1:
        display(Markdown("**Note:** the experiments ran at different commits: "
                         + ", ".join(sorted(map(str, commits)))))
    # each result records the code it was measured with (perflab.core.env.instrument_code)
    changed = perflab_env.code_changes(PROVENANCE)
    unrecorded = [eid for eid, p in PROVENANCE.items() if not p.get("instrument_code")]
    if changed:
        display(Markdown(
            "**Measured with other instrument code than this checkout** (rerun them to measure "
            "with this code; `--forcerun` the rule): " + "; ".join(
                f"{eid} ({', '.join(files)})" for eid, files in changed.items())))
    if unrecorded:
        display(Markdown("**Instrument code not recorded** (measured before results recorded "
                         "it): " + ", ".join(unrecorded)))
    # nested values (e.g. the thread environment) as one line each
    flat = {k: (", ".join(f"{kk}={vv}" for kk, vv in v.items()) if isinstance(v, dict) else v)
            for k, v in environment.items()}
    display(Markdown("### Environment"))
    display(key_value(flat))

# %% [markdown]
# ## PERFORMANCE LEDGER

# %%
ledger = RESULTS / "ledger.md"
if ledger.is_file():
    # the ledger is a fenced Markdown block: show its lines verbatim
    text = ledger.read_text().strip().removeprefix("```").removesuffix("```").strip("\n")
    display(HTML(f"<pre>{html.escape(text)}</pre>"))
else:
    display(Markdown("ledger.md not found: the ledger was not built."))

# %% [markdown]
# ## Reference numbers
#
# The chapter's own numbers (typed from its tables into the same CSV contract) and any
# reference run shipped with this repository, set beside this run in every section below.
# A ratio to the chapter is given only where the contract matches (same model, shape,
# dtype, mode, execution and unit); the `comparison` column says when it does not.

# %%
if CHAPTER is None:
    display(Markdown("No `report/reference/chapter.csv`: the chapter's numbers are not shown."))
else:
    env = CHAPTER.meta.get("environment", {})
    display(Markdown("### The chapter's environment"))
    display(key_value(env))
if RUNS:
    display(Markdown("### Shipped reference runs"))
    display(html_table(pd.DataFrame([{
        "run": r.name, "tag": r.meta.get("tag", ""), "device": r.label,
        "scale": r.meta.get("scale", ""), "commit": str(r.meta.get("commit", "")),
        "finished": r.meta.get("finished", ""), "experiments": len(r.meta.get("experiments", [])),
    } for r in RUNS])))
    for r in RUNS:
        if r.ledger_md:
            text = r.ledger_md.strip().removeprefix("```").removesuffix("```").strip("\n")
            display(HTML(f"<details><summary>ledger of {html.escape(r.label)}</summary>"
                         f"<pre>{html.escape(text)}</pre></details>"))
else:
    display(Markdown("No shipped reference run under `report/reference/` yet."))

# %% [markdown]
# ## Experiments, by chapter section

# %%
# the floors the calibration (C00) measured: every table below states them
from perflab.experiments import floors as calibration  # noqa: E402

FLOOR_NOTE = calibration.floor_note(ROWS)


# %%
def contract_tables(rows: pd.DataFrame) -> list[HTML]:
    """The experiment's contract fields, then each series' window and sync boundary."""
    shared = {}
    for col in ("workload", "model", "input_shape", "dtype", "device", "device_name", "mode",
                "execution"):
        values = [v for v in rows[col].unique() if v != ""]
        shared[col] = ", ".join(values)
    measured = rows[rows.status == "ok"]
    keys = ["variant", "execution", "window", "sync_boundary"]
    series = (measured.groupby(keys, sort=False)["metric"]
              .agg(lambda m: ", ".join(dict.fromkeys(m))).reset_index()
              .rename(columns={"sync_boundary": "sync boundary", "metric": "metrics"}))
    # the per-series windows are long: folded, openable without any script
    folded = HTML(f"<details><summary>window and sync boundary of each series "
                  f"({len(series)})</summary>{html_table(series).data}</details>")
    return [key_value(shared), folded]


def figure_html(eid: str) -> HTML | Markdown:
    """The experiment's PNG, inlined as base64 so the report is one self-contained file."""
    png = FIGURES / f"{EXPERIMENTS[eid].slug}.png"
    if not png.is_file():
        return Markdown(f"Figure not found ({png.name}).")
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return HTML(f'<img alt="{eid} figure" style="max-width:100%" '
                f'src="data:image/png;base64,{data}"/>')


def comparison_html(eid: str) -> HTML | Markdown:
    """This run beside the chapter (value, ratio, comparability) and every reference run."""
    side = reference.side_by_side(ROWS, eid, CHAPTER, RUNS)
    if side.empty:
        return Markdown("The chapter publishes no number for this table.")
    note = ""
    if "comparison" in side and side["comparison"].nunique() <= 1:
        # one verdict on comparability for the whole table: said once, above it
        why = next(iter(side["comparison"]), "")
        note = f"<p><em>Against the chapter: {html.escape(why)}</em></p>" if why else ""
        side = side.drop(columns="comparison")
    return HTML(note + html_table(tables.format_table(side)).data)


ORDER = list(EXPERIMENTS)  # the chapter's order
current = None
for eid in ORDER:
    experiment = EXPERIMENTS.get(eid)
    if reference.section(eid) != current:
        current = reference.section(eid)
        display(HTML(f"<h3>{html.escape(current)}</h3>"))
    title = experiment.title if experiment else "(not in this workflow yet)"
    display(HTML(f'<h4 id="{eid.lower()}">{eid} · {html.escape(title, quote=False)}</h4>'))
    if eid in FAILED:
        f = FAILED[eid]
        display(Markdown(f"**{f['status']}**" + (f" — last lines of `{f['log']}`:"
                                                  if f["log"] else f": {f['excerpt']}")))
        if f["log"]:
            display(HTML(f"<pre>{html.escape(f['excerpt'])}</pre>"))
        continue
    if experiment is None or eid not in PRESENT:
        display(Markdown("*not run* (no result file for this experiment in this run)"))
        if CHAPTER is not None and (CHAPTER.rows.experiment == eid).any():
            display(Markdown("**Beside the chapter**"))
            display(comparison_html(eid))
        continue
    rows = ROWS[ROWS.experiment == eid]
    if experiment.cpu_behaviour != "same" and not rows.device.str.startswith("cuda").any():
        display(Markdown(f"On a machine without CUDA: {experiment.cpu_behaviour}."))
    display(Markdown("**Contract**"))
    for part in contract_tables(rows):
        display(part)
    display(Markdown("**Table**"))
    display(html_table(tables.format_table(experiments.table(eid, rows))))
    display(Markdown(f"*{FLOOR_NOTE}*"))  # the harness floor every timing sits above (C00)
    display(Markdown("**Beside the chapter and the reference runs**"))
    display(comparison_html(eid))
    display(Markdown("**Figure**"))
    display(figure_html(eid))

# %% [markdown]
# ## Noise floor, A/B verdicts and GPU-state validity
#
# Every A/B comparison of this run, judged by one rule (`perflab.instruments.stats.judge`): Wilcoxon
# signed-rank on the paired block medians, a bootstrap interval of the effect, and C00's A/A
# floor — the 95% bound of the same statistic (median paired block difference, % of A) between
# two copies of the step; an effect inside it is inconclusive. Then, for each job, whether
# the GPU ran throttled or shared (NVML before and after the job).

# %%
from perflab.core import env as perflab_env  # noqa: E402

display(Markdown(FLOOR_NOTE))
comparisons = calibration.ab_comparisons(ROWS)
if comparisons.empty:
    display(Markdown("No A/B comparison in this run."))
else:
    display(html_table(tables.format_table(comparisons)))
validity = pd.DataFrame(
    [{"experiment": eid, **{k: (", ".join(v) if isinstance(v, list) else v)
                            for k, v in perflab_env.judge_gpu_state(p).items()}}
     for eid, p in PROVENANCE.items()], columns=["experiment", "status", "reasons"])
display(html_table(validity))
if (validity.status == "flagged").any():
    display(Markdown("**Flagged jobs ran throttled or shared: their numbers are not "
                     "comparable with an unflagged run.**"))

# %%
compare_dir = RESULTS / "compare"
if (compare_dir / "summary.md").is_file():
    display(Markdown("## Cross-run comparison"))
    display(Markdown((compare_dir / "summary.md").read_text()))
    png = compare_dir / "compare.png"
    if png.is_file():
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        display(HTML(f'<img alt="comparison" style="max-width:100%" '
                     f'src="data:image/png;base64,{data}"/>'))

# %% [markdown]
# ## Escalation: a memory snapshot
#
# When the aggregate counters stop being enough (a hidden peak whose owner matters),
# the allocator's history over a few controlled steps, rendered by PyTorch's memory_viz.

# %%
snapshot = RESULTS / "memory_snapshot.html"
if snapshot.is_file():
    display(HTML(f'<p><a href="{snapshot.name}">{snapshot.name}</a>: the allocation timeline '
                 "of the controlled step (the page beside this report; opening it loads "
                 "PyTorch's MemoryViz viewer over the network). Written by the "
                 "<code>memory_snapshot</code> rule; on a machine without CUDA it says why "
                 "there is none.</p>"))
else:
    display(Markdown("No memory snapshot in this run (`experiments.E09.snapshot` is off, or "
                     "E09 was not selected)."))

# %% [markdown]
# ## Diagnosis: what is the machine waiting for?
#
# Decided by rule (`perflab/views/diagnose.py`) from the rows above: each candidate's test, the
# rows it read, and the one intervention the verdict points to.

# %%
diagnosis_md, diagnosis_csv = RESULTS / "diagnosis.md", RESULTS / "diagnosis.csv"
if diagnosis_md.is_file():
    display(Markdown(diagnosis_md.read_text()))
    if diagnosis_csv.is_file():
        evidence = io.read_table(diagnosis_csv)
        shown = evidence[["label", "outcome", "source", "value", "unit", "test", "passes"]]
        display(HTML(f"<details><summary>every evidence row read ({len(shown)})</summary>"
                     f"{html_table(shown).data}</details>"))
else:
    display(Markdown("diagnosis.md not found: the diagnosis was not built."))
