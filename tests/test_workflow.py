"""End to end: the whole workflow on the tiny contract, through Snakemake, in a temp directory.

One run (the session's shared run, tests/shared_run.py) feeds every check: the experiment
CSVs obey the contract, the ledger and the report exist and hold every experiment's table
and figure, a second invocation has nothing to do, and `--report` packs the outputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from shared_run import ROOT, TAG, snakemake

from perflab import experiments
from perflab.core import io
from perflab.experiments.catalogue import EXPERIMENTS as CATALOGUE
from perflab.pipeline import config

#: what the run below selects (`run: all` on a CPU): every experiment that needs one device
EXPERIMENTS = {eid: CATALOGUE[eid] for eid in config.by_default()}

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/browser.py

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run_dir(pipeline_run) -> Path:
    """The session's shared run (tests/shared_run.py); these tests are its end-to-end checks."""
    return pipeline_run


def test_every_experiment_wrote_contract_rows(run_dir):
    results = run_dir / "results" / TAG
    for eid, exp in EXPERIMENTS.items():
        csv = results / f"{exp.slug}.csv"
        frame = io.read_results([csv])  # validates every row against the contract
        assert set(frame.experiment) == {eid}
        assert (frame.status == "ok").any(), f"{eid} measured nothing"
        assert set(frame.device) == {"cpu"}
        samples = pd.read_csv(results / f"{exp.slug}_samples.csv")
        assert list(samples.columns) == io.SAMPLE_COLUMNS
        prov = json.loads((results / f"{exp.slug}.json").read_text())
        for key in ("environment", "contract", "started", "finished", "workloads"):
            assert key in prov, f"{eid} provenance lacks {key}"
        assert prov["contract"]["scale"] == "tiny"


def test_cuda_only_rows_are_honest_on_cpu(run_dir):
    frame = io.read_results([run_dir / "results" / TAG / "e06_events_vs_wall.csv"])
    events = frame[frame.variant == "cuda_events_device_ahead"]
    assert not events.empty and set(events.status) == {"unsupported"}
    assert events.reason.str.contains("CUDA").all()


def test_ledger_is_filled_from_the_csvs(run_dir):
    md = (run_dir / "results" / TAG / "ledger.md").read_text()
    assert "PERFORMANCE LEDGER" in md
    ledger = pd.read_csv(run_dir / "results" / TAG / "ledger.csv")
    med = ledger[(ledger.section == "benchmark") & (ledger.field == "step_latency_median")]
    e03 = io.read_results([run_dir / "results" / TAG / "e03_warmup_spread.csv"])
    expected = e03[(e03.variant == "spread") & (e03.statistic == "median")].value.iloc[0]
    assert float(med.value.iloc[0]) == pytest.approx(expected)
    assert f"{expected:.3f} ms" in md


def test_report_holds_every_table_and_figure(run_dir):
    html = (run_dir / "results" / TAG / "report.html").read_text()
    assert "PERFORMANCE LEDGER" in html
    for exp in EXPERIMENTS.values():
        assert exp.title in html, f"report lacks {exp.eid}"
        assert (run_dir / "figures" / TAG / f"{exp.slug}.png").stat().st_size > 1000
    # a figure that fails is drawn as a PNG saying why; the figures job's log names it
    assert "FAILED" not in (run_dir / "logs" / TAG / "figures.log").read_text()
    # every experiment's table and figure is in the page itself
    assert html.count("<table") >= len(EXPERIMENTS)
    assert html.count("data:image/png;base64,") >= len(EXPERIMENTS)
    # self-contained: nothing fetched from elsewhere when the page opens
    assert '<script src="http' not in html
    assert "<link rel=\"stylesheet\" href=\"http" not in html


def test_second_invocation_has_nothing_to_do(run_dir):
    """One dry run: the default target and every target a claim's command names (``claims``
    included) exist and are already up to date."""

    # the claims of the experiments this run selected (D01 needs two GPUs or to be named)
    targets = sorted({c.target for c in experiments.claim_registry().values()
                      if c.target and c.eid in EXPERIMENTS} | {"claims"})
    proc = snakemake(run_dir, "--cores", "1", "-n", "all", *targets)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Nothing to be done" in proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def report_zip(run_dir) -> zipfile.ZipFile:
    """`snakemake --report` of the shared run, made once for the two checks of the zip."""
    out = run_dir / "report.zip"
    proc = snakemake(run_dir, "--report", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return zipfile.ZipFile(out)


def test_snakemake_report_zip(report_zip):
    names = report_zip.namelist()
    assert any(n.endswith("report.html") for n in names)
    assert sum(n.endswith(".png") for n in names) >= len(EXPERIMENTS)


def test_memory_snapshot_page_is_linked_from_the_report(run_dir):
    results = run_dir / "results" / TAG
    assert "unsupported" in (results / "memory_snapshot.html").read_text()  # CPU: says why
    assert 'href="memory_snapshot.html"' in (results / "report.html").read_text()


def test_calibration_runs_first(run_dir):
    results = run_dir / "results" / TAG
    started = {eid: json.loads((results / f"{exp.slug}.json").read_text())["started"]
               for eid, exp in EXPERIMENTS.items()}
    assert started["C00"] == min(started.values())


def test_compare_target_against_the_same_run(run_dir):
    # the `compare` target with this run's own directory: every ratio 1, no verdict changed
    proc = snakemake(run_dir, f"compare_to=results/{TAG}", "--cores", "1", "compare")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = run_dir / "results" / TAG / "compare"
    rows = pd.read_csv(out / "rows.csv")
    assert len(rows) > 0 and (rows.ratio.dropna() == 1.0).all()
    verdicts = pd.read_csv(out / "verdicts.csv")
    assert len(verdicts) > 0 and not verdicts.changed.any()
    assert (out / "compare.png").stat().st_size > 1000


# ---------------------------------------------------------------- claims and the report in a browser


def test_a_further_process_of_e05_decides_its_claims_with_it(run_dir):
    """The default claim_processes runs E05 twice; its claims say both processes judged them."""
    results = run_dir / "results" / TAG
    assert (results / "processes" / "e05_phases_p2.csv").is_file()
    frame = pd.read_csv(results / "claims.csv")
    c11 = frame[frame.claim == "C11"].iloc[0]
    assert "all 2 fresh processes of E05" in c11.tolerance
    assert "process 2" in c11.measured, c11.measured


def test_claims_table_is_written_and_shown_first(run_dir):
    from perflab.kit import claims

    results = run_dir / "results" / TAG
    frame = pd.read_csv(results / "claims.csv", keep_default_na=False)
    assert list(frame.columns) == claims.CLAIM_COLUMNS
    assert set(frame.verdict) <= set(claims.VERDICTS)
    assert set(frame.claim) == set(experiments.claim_registry())
    # a claim is judged from its experiment's rows: NOT RUN exactly where that experiment did
    # not run, and never "not run" where it ran (absent rows read as the experiment's absence)
    ran = frame.experiment.isin(set(EXPERIMENTS))
    assert (frame[~ran].verdict == claims.NOT_RUN).all(), frame[~ran][["claim", "verdict"]]
    said_absent = frame.apply(lambda c: f"({c.experiment} not run)" in c.measured, axis=1)
    assert not (ran & said_absent).any(), frame[ran & said_absent][["claim", "measured"]]
    assert (frame[ran].verdict == claims.REPRODUCED).any()
    html = (results / "report.html").read_text()
    # the claims table comes before the ledger and every experiment section
    first = html.index('class="claims"')
    assert first < html.index("PERFORMANCE LEDGER") < html.index('id="e01"')
    assert html.index("<table") == first - len("<table ")  # the first table of the page


def test_report_in_a_headless_browser(run_dir):
    browser = pytest.importorskip("browser", reason="tests/browser.py")
    if browser.find_browser() is None:
        pytest.skip("no Chromium on PATH (.ci/run installs Debian's chromium)")
    page = browser.inspect(run_dir / "results" / TAG / "report.html")
    assert page["console_errors"] == []
    assert page["external_requests"] == [] and page["scripts_external"] == []
    # every experiment's table and figure, and the claims table, are on the page
    assert page["tables"] >= 2 * len(EXPERIMENTS) + 1
    assert page["images"] >= len(EXPERIMENTS)
    assert page["images_decoded"] == page["images"]
    # every claim links to an anchor that exists
    for eid in EXPERIMENTS:
        assert eid.lower() in page["ids"], eid
    assert "Claims" in page["text"]
    assert any(v in page["text"] for v in ("REPRODUCED", "DIFFERS", "INCONCLUSIVE"))


def test_report_escapes_text_from_config_and_model_names(run_dir, tmp_path):
    """A model name or window that looks like HTML is shown as text, never run as markup."""
    import shutil

    evil = '<img src=x onerror="console.error(\'injected\')">MLP</table>'
    results = tmp_path / TAG
    shutil.copytree(run_dir / "results" / TAG, results)
    csv = results / "e01_lying_benchmark.csv"
    frame = pd.read_csv(csv, keep_default_na=False, dtype=str)
    frame["model"] = evil
    frame["window"] = "<b>" + frame["window"]
    frame.to_csv(csv, index=False)
    claims_csv = results / "claims.csv"
    c = pd.read_csv(claims_csv, keep_default_na=False, dtype=str)
    c.loc[0, "measured"] = evil
    c.to_csv(claims_csv, index=False)
    out = tmp_path / "report.html"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render_report.py"), "--results", str(results),
         "--figures", str(run_dir / "figures" / TAG), "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = out.read_text()
    assert evil not in html and "&lt;img src=x" in html
    browser = pytest.importorskip("browser")
    if browser.find_browser() is None:
        return
    page = browser.inspect(out)
    assert page["console_errors"] == []
    assert evil in page["text"]  # shown literally


def test_report_zip_has_a_category_per_chapter_section(report_zip):
    from perflab.views import reference

    zf = report_zip
    # the zip's top folder is named after the zip; its index is <top>/report.html
    index = next(n for n in zf.namelist() if n.count("/") == 1 and n.endswith("/report.html"))
    text = zf.read(index).decode()
    for eid in EXPERIMENTS:
        assert reference.section(eid).split(" · ", 1)[1] in text, eid
    assert "Claims" in text and "Ledger" in text
    assert any(n.endswith("claims.csv") for n in zf.namelist())
