"""The protocol of every experiment module (perflab/experiments/<slug>.py).

Modules are found by listing the package, so a new experiment is checked here with
nothing to register: its entry, script and test module (the files docs/developing.md's
"Adding an experiment" lists), its table, its figure with a caption, its report section, its
claims or the reason it has none, and its rule in the workflow.
Then the figures job's contract: every figure draws from a shipped run's rows, and one
that fails leaves the others drawn and says why.
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import sys
from pathlib import Path

import jinja2
import pytest
from docutils.core import publish_doctree

from perflab import experiments
from perflab.pipeline import config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from workflow_rules import rule_names  # noqa: E402

MODULES = experiments.modules()
#: a shipped run whose rows every figure is drawn from
SHIPPED = ROOT / "report" / "reference" / "cpu-2c" / "results"
#: experiments newer than the shipped runs, and the test that draws each one's figure
NOT_SHIPPED: dict[str, str] = {}  # none: the shipped CPU run (4bf7834) has R02
#: the files of an experiment of one job: the slice, its script, its test module (which also
#: holds its claims' cases). docs/developing.md's "Adding an experiment" lists exactly these
OWN_FILES = ("perflab/experiments/<slug>.py", "scripts/<slug>.py", "tests/test_<slug>.py")
DEVELOPING = ROOT / "docs" / "developing.md"


def test_the_package_holds_every_experiment():
    assert len(MODULES) >= 27
    assert {"C00", "E01", "E08", "E20", "E25", "R01"} <= set(MODULES)


@pytest.mark.parametrize("eid", list(MODULES))
def test_entry_names_its_module_and_its_script(eid):
    mod = MODULES[eid]
    entry = mod.ENTRY
    assert entry.eid == eid
    assert mod.__name__ == f"perflab.experiments.{entry.slug}"
    assert (ROOT / "scripts" / f"{entry.slug}.py").is_file(), f"no scripts/{entry.slug}.py"
    assert entry.title.strip()


def own_file(template: str, slug: str) -> Path:
    """``template``'s file for ``slug``; a slice with a library of its own is a sub-package."""
    path = ROOT / template.replace("<slug>", slug)
    if template.startswith("perflab/experiments/") and not path.is_file():
        return path.with_suffix("") / "__init__.py"
    return path


@pytest.mark.parametrize("eid", list(MODULES))
def test_every_experiment_has_its_own_files(eid):
    slug = MODULES[eid].ENTRY.slug
    missing = [t.replace("<slug>", slug) for t in OWN_FILES if not own_file(t, slug).is_file()]
    assert not missing, f"{eid} has no {', '.join(missing)}"


def adding_an_experiment(text: str) -> tuple[str, tuple[str, ...]]:
    """The "Adding an experiment" section of docs/developing.md, and the files its numbered
    steps name (each step's first code span)."""
    section = re.search(r"^### Adding an experiment\n(.*?)(?=^#)", text, re.M | re.S)
    assert section, "docs/developing.md has no section '### Adding an experiment'"
    body = section.group(1)
    return body, tuple(re.findall(r"^\d+\. `([^`]+)`", body, re.M))


def test_adding_an_experiment_lists_the_files_the_protocol_requires():
    """The docs' steps name the files :func:`test_every_experiment_has_its_own_files`
    requires, no more and no fewer, and say how many."""
    body, listed = adding_an_experiment(DEVELOPING.read_text())
    assert listed == OWN_FILES, listed
    count = ("no", "one", "two", "three", "four", "five", "six")[len(OWN_FILES)]
    assert f"{count.capitalize()} new files" in body


def test_a_step_missing_from_the_docs_is_caught():
    text = DEVELOPING.read_text()
    dropped = re.sub(r"^3\. `tests/test_<slug>.py`", "3. its test", text, flags=re.M)
    assert dropped != text
    assert adding_an_experiment(dropped)[1] == OWN_FILES[:2]


@pytest.mark.parametrize("eid", list(MODULES))
def test_the_script_hands_its_job_to_the_fork_server_before_any_import(eid):
    """A job pays for its imports unless delegate(globals()) comes before them
    (perflab/core/forkserver.py); the module docstring and a __future__ import may precede it."""
    tree = ast.parse((ROOT / "scripts" / f"{MODULES[eid].ENTRY.slug}.py").read_text())
    body = [n for n in tree.body[1:] if not (isinstance(n, ast.ImportFrom)
                                           and n.module == "__future__")]
    first_two = [ast.unparse(n) for n in body[:2]]
    assert first_two == ["from perflab.core.forkserver import delegate", "delegate(globals())"]


@pytest.mark.parametrize("eid", list(MODULES))
def test_table_figure_caption_and_report_section(eid):
    mod = MODULES[eid]
    assert callable(mod.table)
    assert callable(mod.figure)
    assert (inspect.getdoc(mod.figure) or "").strip(), f"{eid}: figure() has no caption"
    # "<chapter section number> · <title>": the report's heading and the zip's category
    number, _, title = mod.ENTRY.report_section.partition(" · ")
    assert number.isdigit() and title.strip(), mod.ENTRY.report_section


@pytest.mark.parametrize("eid", list(MODULES))
def test_claims_or_the_reason_for_none(eid):
    mod = MODULES[eid]
    own = [c for c in experiments.claim_registry().values() if c.eid == eid]
    reason = getattr(mod, "NO_CLAIMS", None)
    if own:
        assert reason is None, f"{eid} has claims and a reason for having none"
    else:
        assert isinstance(reason, str) and reason.strip(), f"{eid}: no claim and no NO_CLAIMS"


@pytest.mark.parametrize("eid", list(MODULES))
def test_claims_that_read_samples_keep_them_in_a_shipped_run(eid):
    # a claim judged by its own interval over the raw samples is INCONCLUSIVE on a shipped
    # run without them: the entry's flag is what tells reference.ship to keep them
    source = inspect.getsource(MODULES[eid])
    reads = any(f in source for f in ("own_interval(", "interval_part(", "ev.series("))
    assert MODULES[eid].ENTRY.claims_read_samples == reads, eid


def test_each_claim_is_registered_with_its_modules_experiment():
    for c in experiments.claim_registry().values():
        defined_in = inspect.getmodule(c.check)
        owner = next((eid for eid, m in MODULES.items() if m is defined_in), None)
        if owner is not None:
            assert c.eid == owner, f"{c.cid} is defined in {owner}'s module but says {c.eid}"


def test_every_experiment_has_its_rule():
    missing = {m.ENTRY.slug for m in MODULES.values()} - rule_names()
    assert not missing, f"no rule named {sorted(missing)}"


@pytest.mark.parametrize("eid", list(MODULES))
def test_caption_renders_as_the_report_reads_it(eid):
    """Through Jinja (as `snakemake --report` does) to reStructuredText without a warning."""
    from perflab.experiments import caption, caption_rst

    text = jinja2.Environment().from_string(caption_rst(eid)).render()
    assert text.strip() == caption(eid)
    warnings = io.StringIO()
    publish_doctree(text, settings_overrides={"warning_stream": warnings, "report_level": 2})
    assert not warnings.getvalue(), f"{eid}: {warnings.getvalue()}"


#: then the runs kept as evidence one level down, for an experiment the main run predates
EVIDENCE = sorted(ROOT.glob("report/reference/*/*/results"))


def _plan(tmp_path: Path, eids: list[str]) -> list[dict[str, str]]:
    def run_of(eid):  # the first shipped run holding the experiment's rows
        slug = MODULES[eid].ENTRY.slug
        return next((d for d in (SHIPPED, *EVIDENCE) if (d / f"{slug}.csv").is_file()), SHIPPED)

    return [job for eid in eids for job in config.figure_plan(
        {"results_dir": run_of(eid).parent, "figures_dir": tmp_path,
         "resolved_tag": run_of(eid).name}, [eid])]


def test_every_figure_draws_from_a_shipped_run(tmp_path):
    from perflab.experiments import draw_figures

    # every experiment a shipped run has: D01 needs two devices, so no shipped run holds it
    # (tests/test_d01_data_parallel.py draws its figure from its own run); the shipped runs
    # predate the experiments of NOT_SHIPPED, whose tests draw their figures
    shipped = [e for e, m in MODULES.items()
               if any((d / f"{m.ENTRY.slug}.csv").is_file() for d in (SHIPPED, *EVIDENCE))]
    assert set(MODULES) - set(shipped) == {e for e, m in MODULES.items()
                                           if m.ENTRY.devices > 1} | set(NOT_SHIPPED)
    plan = _plan(tmp_path, shipped)
    assert draw_figures(plan) == {}
    for job in plan:
        assert Path(job["png"]).stat().st_size > 1000, job["eid"]
        assert Path(job["caption"]).read_text().strip(), job["eid"]


def test_a_figure_that_fails_leaves_the_others_and_says_why(tmp_path):
    from perflab.experiments import draw_figures

    plan = _plan(tmp_path, ["E01", "E05"])
    plan[1]["csv"] = str(tmp_path / "missing.csv")  # E05 cannot be drawn
    failed = draw_figures(plan)
    assert list(failed) == ["E05"] and "missing.csv" in failed["E05"]
    drawn, placeholder = (Path(job["png"]) for job in plan)
    assert drawn.stat().st_size > 1000 and placeholder.is_file()
    assert "could not be drawn" in Path(plan[1]["caption"]).read_text()
    assert "could not be drawn" not in Path(plan[0]["caption"]).read_text()


def test_reading_the_experiments_imports_neither_torch_nor_plotting():
    """The report, figures and aggregation jobs import every module: a torch or matplotlib
    import at module level costs each of them seconds (timing jobs must never draw)."""
    import subprocess

    code = ("import sys; import perflab.experiments.catalogue, perflab.kit.claims; "
            "print(sorted(m for m in ('torch', 'matplotlib', 'seaborn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# ------------------------------------------------------------------ the slice is the unit


def _schema_defaults(schema: dict) -> dict:
    return {k: v.get("default") for k, v in schema.get("properties", {}).items()}


@pytest.mark.parametrize("eid", list(MODULES))
def test_the_slice_declares_its_parameters_with_the_chapters_values(eid):
    """Its parameters are its module's (``SCHEMA``, a JSON-schema fragment): the run's schema
    holds them under experiments.<id>, and what the chapter runs (the default config on a
    CUDA machine, scale chapter) is their defaults, nothing else."""
    import yaml

    own = yaml.safe_load(MODULES[eid].SCHEMA) or {}
    schema = config.load_schema()["properties"]["experiments"]["properties"][eid]
    assert schema["properties"] == own
    chapter = config.load([], {"device": "cpu", "scale": "chapter"})["experiments"][eid]
    assert chapter == {**_schema_defaults(schema), **chapter} == {
        k: chapter[k] for k in _schema_defaults(schema)}
    assert {k: chapter[k] for k in own} == {k: v.get("default") for k, v in own.items()}


def test_a_schema_default_unlike_what_the_chapter_runs_is_caught(monkeypatch):
    """It can fail: a slice whose default differs from the chapter's value set in the config."""
    chapter = config.load([], {"device": "cpu", "scale": "chapter"})
    defaults = _schema_defaults(config.load_schema()["properties"]["experiments"]["properties"]["E03"])
    assert chapter["experiments"]["E03"]["spread_repeats"] == defaults["spread_repeats"]
    other = config.load([], {"device": "cpu", "scale": "chapter",
                             "experiments": {"E03": {"spread_repeats": 7}}})
    assert other["experiments"]["E03"]["spread_repeats"] != defaults["spread_repeats"]


@pytest.mark.parametrize("eid", [e for e, m in MODULES.items() if "tiny" in getattr(m, "SCALES", {})])
def test_the_slice_declares_its_test_sizes(eid):
    """Its sizes at the test contract (``SCALES['tiny']``) are what config/test.yaml runs."""
    tiny = config.load([ROOT / "config" / "test.yaml"], {"device": "cpu"})["experiments"][eid]
    declared = MODULES[eid].SCALES["tiny"]
    assert declared and config.deep_merge(tiny, declared) == tiny


@pytest.mark.parametrize("eid", list(MODULES))
def test_an_experiment_of_several_jobs_keeps_its_rules_beside_its_slug(eid):
    """own_rules: its rules in workflow/rules/<slug>.smk (included by the Snakefile's glob);
    one job: made by the loop of experiments.smk, and no such file."""
    entry = MODULES[eid].ENTRY
    smk = ROOT / "workflow" / "rules" / f"{entry.slug}.smk"
    assert smk.is_file() == entry.own_rules
    if entry.own_rules:
        assert f"rule {entry.slug}:" in smk.read_text()


def test_the_lists_of_experiments_are_read_from_the_slices():
    """What diagnose runs, the experiments of several jobs and those that build the contract
    are each slice's own declaration, not a list kept elsewhere."""
    from perflab import cli
    from perflab.views import ledger

    assert cli.DIAGNOSE_RUN["cpu"].split(",") == [
        e for e, m in MODULES.items() if "cpu" in m.ENTRY.diagnosis]
    assert "E06" in cli.DIAGNOSE_RUN["cuda"] and "E06" not in cli.DIAGNOSE_RUN["cpu"]
    assert set(config.OWN_JOBS) == {e for e, m in MODULES.items() if m.ENTRY.own_rules}
    assert set(ledger.BENCHMARK_EXPERIMENTS) == {
        e for e, m in MODULES.items() if m.ENTRY.builds_the_contract}
