"""The documentation: the README a newcomer reads, the site built from docs/ (issue 41).

The site is built with ``mkdocs build --strict`` (a broken link, a page left out of the nav,
or a missing anchor fails it); each experiment's page is generated from its slice of the
project (:mod:`perflab.views.experiment_pages`) and fails here when it is stale.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perflab.views import experiment_pages as ep

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _mkdocs(cwd: Path, site: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("mkdocs", reason="the test extra installs mkdocs (pip install -e '.[test]')")
    pytest.importorskip("material", reason="the test extra installs mkdocs-material")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    # not -q: it hides the warnings --strict counts, and a broken link then passes
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-d", str(site)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_site_builds_strict(tmp_path):
    r = _mkdocs(ROOT, tmp_path / "site")
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "site" / "experiments" / "e05_phases" / "index.html").is_file()


def test_strict_build_fails_on_a_broken_link(tmp_path):
    """The build above can fail: the same site with one link to a page that is not there."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "failures.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    r = _mkdocs(tmp_path, tmp_path / "site")
    assert r.returncode != 0
    assert "no-such-page.md" in r.stderr


def test_experiment_pages_are_current():
    assert ep.stale() == [], "run: python -m perflab.views.experiment_pages"


def test_a_stale_page_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(ep, "ROOT", tmp_path)
    monkeypatch.setattr(ep, "PAGES", tmp_path / "docs" / "experiments")
    monkeypatch.setattr(ep, "MKDOCS", tmp_path / "mkdocs.yml")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    assert ep.main([]) == 0
    assert ep.stale() == []
    page = tmp_path / "docs" / "experiments" / "e05_phases.md"
    page.write_text(page.read_text().replace("C11", "C99"))
    (tmp_path / "docs" / "experiments" / "e99_gone.md").write_text("# gone\n")
    assert ep.stale() == ["docs/experiments/e05_phases.md",
                          "docs/experiments/e99_gone.md (no such experiment)"]


def test_a_page_carries_its_slice():
    text = ep.page("E05")
    assert text.startswith("# E05 · ")
    assert "4 · Localize" in text  # its chapter section
    # its parameters as its module declares them: the default and the comment that says why
    assert "blocks:\n" in text and "default: 10" in text
    assert "# the phased and the uninstrumented" in text
    assert "E05: {repeats: 200}" in text  # the CPU scale's override
    assert "### C11:" in text and "`snakemake --cores 1 e05_phases`" in text


def test_yaml_block_keeps_comments_and_stops_at_the_next_key():
    text = ("top: 1\nexperiments:\n  # about A\n  A:\n    x: 1   # why\n    # inner\n"
            "    y: 2\n  # about B\n  B: {z: 3}\nscales:\n  cpu:\n    experiments:\n"
            "      A: {x: 9}\n")
    assert ep.yaml_block(text, ("experiments", "A")) == \
        "# about A\nA:\n  x: 1   # why\n  # inner\n  y: 2"
    assert ep.yaml_block(text, ("experiments", "B")) == "# about B\nB: {z: 3}"
    assert ep.yaml_block(text, ("scales", "cpu", "experiments", "A")) == "A: {x: 9}"
    assert ep.yaml_block(text, ("experiments", "C")) == ""


# ---------------------------------------------------------------- the README


def test_readme_is_short_and_keeps_cis_command():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = 'pip install torch==2.13.0 -e ".[test]" && python -m pytest'
    assert test_cmd in text and test_cmd in ci
    assert "pip install torch==2.13.0 -e . && snakemake --cores 1" in text


def test_readme_has_no_commit_hashes_or_dead_links():
    text = README.read_text()
    # a commit hash: 7-40 hex digits with at least one letter and one digit, as a word
    hashes = [h for h in re.findall(r"\b[0-9a-f]{7,40}\b", text)
              if re.search(r"[a-f]", h) and re.search(r"\d", h)]
    assert hashes == []
    for link in re.findall(r"\]\(([^)#]+)", text):
        if "://" not in link:
            assert (ROOT / link).exists(), link


def test_config_readme_for_the_catalog():
    text = (ROOT / "config" / "README.md").read_text()
    assert "snakemake --cores 1" in text and "config.yaml" in text


# ---------------------------------------------------------------- ARTIFACT.md


def test_artifact_is_short_and_its_tables_current():
    from perflab.views import artifact_table

    text = (ROOT / "ARTIFACT.md").read_text()
    assert len(text.splitlines()) <= 150
    assert artifact_table.render(text) == text, "run: python -m perflab.views.artifact_table"
    # every claim has its row, with a command and the two machines' costs
    from perflab.experiments import claim_registry as registry

    table = text.split(artifact_table.CLAIMS_BEGIN)[1].split(artifact_table.CLAIMS_END)[0]
    rows = [r for r in table.splitlines() if r.startswith("| C")]
    listed = set()
    for r in rows:
        for part in r.split("|")[1].split(","):
            a, _, b = part.strip().partition("–")
            listed |= {f"C{n:02d}" for n in range(int(a[1:]), int((b or a)[1:]) + 1)}
        assert "`snakemake --cores" in r
    assert listed == set(registry())


def test_a_stale_artifact_table_is_caught():
    from perflab.views import artifact_table

    text = (ROOT / "ARTIFACT.md").read_text().replace("| C10–C13 |", "| C10–C12 |")
    assert artifact_table.render(text) != text


def test_claims_needing_the_floor_run_c00_beside():
    from perflab.views import artifact_table

    assert artifact_table.needs_floor(["... each beyond the A/A floor (C00)"])
    assert not artifact_table.needs_floor(["decided by its own 95% interval"])
    assert artifact_table._ids(["C10", "C11", "C12", "C14"]) == "C10–C12, C14"


def test_each_shipped_run_has_its_story_beside_it():
    ref = ROOT / "report" / "reference"
    for run in ("cpu-2c", "h200"):
        assert (ref / run / "NOTES.md").is_file() and (ref / run / "run.json").is_file()
    assert (ref / "reproducibility" / "NOTES.md").is_file()
