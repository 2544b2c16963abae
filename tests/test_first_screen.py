"""The report's first screen (perflab.views.first_screen), read from the shipped CPU run's files;
and `snakemake --report`'s sections in the chapter's numeric order."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from perflab.core import io
from perflab.experiments.catalogue import EXPERIMENTS
from perflab.kit import claims
from perflab.views import first_screen, reference

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "report" / "reference" / "cpu-2c"


@pytest.fixture(scope="module")
def rows():
    return io.read_results(reference.result_csvs(SHIPPED / "results"))


def test_time_bar_is_e05s_phase_shares(rows):
    text = first_screen.time_html(rows)
    assert "Where the step&#x27;s time goes" in text and "optimizer 44%" in text
    widths = [float(w) for w in re.findall(r'<div style="width:([\d.]+)%', text)]
    assert 99 <= sum(widths) <= 101  # the phases' shares of their sum
    assert first_screen.device_idle(rows) == {}  # a CPU: R02 measured no device queue


def test_roofline_draws_the_phases_that_did_work(rows):
    svg = first_screen.roofline_svg(rows)
    assert svg.count("<circle") >= 2 and "forward" in svg and "backward" in svg
    assert "% of the roof" in svg and "peak " in svg
    # without R01's ceilings there is no roof to draw: nothing, not a guess
    assert first_screen.roofline_svg(rows[rows.experiment != "R01"]) == ""
    no_ceiling = rows[~((rows.experiment == "R01") & rows.variant.str.startswith("ceiling/"))]
    assert first_screen.roofline_svg(no_ceiling) == ""


def test_time_bar_says_when_e05_did_not_run(rows):
    assert "not measured in this run" in first_screen.time_html(rows[rows.experiment != "E05"])


def test_the_answer_names_the_verdict_its_evidence_and_next_step(tmp_path):
    text = first_screen.verdict_html(SHIPPED, "What is the machine waiting for?", "mlp")
    assert "<strong>optimizer</strong> — the optimizer is 44.0% of the step" in text
    assert "E05 sync/optimizer phase_share value" in text and "Next: fuse the optimizer" in text
    assert "perflab whatif mlp" in text  # W01 did not run in that run: said, not invented
    assert "No verdict: the diagnosis did not run" in first_screen.verdict_html(
        tmp_path, "t", "mlp")
    shutil.copy(SHIPPED / "diagnosis.csv", tmp_path / "diagnosis.csv")
    (tmp_path / "w01_whatif.md").write_text("## What if\n\n**Best measured:** fused_optimizer "
                                            "— time -59.4% [-69.9, -49.3]\n")
    assert "Measured (W01): Best measured: fused_optimizer — time -59.4%" in \
        first_screen.verdict_html(tmp_path, "t", "mlp")


def test_claims_tally_names_what_changed_against_the_reference():
    ours = pd.read_csv(SHIPPED / "claims.csv", keep_default_na=False, dtype=str)
    runs = reference.load_runs(ROOT / "report" / "reference")
    ref = first_screen.same_kind("cpu-2c-tiny", runs)
    assert ref is not None and str(ref.meta["tag"]).startswith("cpu")
    assert first_screen.same_kind("cuda-nvidia-h200", runs).meta["tag"].startswith("cuda")
    assert "no verdict changed" in first_screen.tally_html(ours, claims.VERDICTS, ref)
    changed = ours.copy()
    changed.loc[changed.claim == "C10", "verdict"] = "INCONCLUSIVE"
    was = ours.set_index("claim").verdict["C10"]
    assert first_screen.claim_changes(changed, ref.claims) == [("C10", was, "INCONCLUSIVE")]
    assert f"C10</a> {was} → INCONCLUSIVE" in first_screen.tally_html(changed, claims.VERDICTS,
                                                                      ref)
    # a run of one experiment leaves the others NOT RUN: no change of the machine
    one = ours.copy()
    one.loc[one.claim != "C10", "verdict"] = claims.NOT_RUN
    assert first_screen.claim_changes(one, ref.claims) == []


@pytest.mark.parametrize("mode, workload, shown", [
    ("auto", "mlp", True), ("auto", "", True), ("auto", "mypkg.models:make_step", False),
    ("all", "mypkg.models:make_step", True), ("none", "mlp", False)])
def test_chapter_claims_only_for_the_chapters_workload_unless_asked(mode, workload, shown):
    assert first_screen.show_claims(mode, workload, "mlp") is shown


def test_a_bad_claims_mode_is_refused():
    with pytest.raises(ValueError, match="report_claims"):
        first_screen.show_claims("sometimes", "mlp", "mlp")


def test_text_is_escaped():
    nav = first_screen.nav_html([("a\"b", "<script>", False)])
    assert "<script>" not in nav and "&lt;script&gt;" in nav


def test_report_categories_sort_in_the_chapters_order():
    sections = list(dict.fromkeys(reference.section(e) for e in EXPERIMENTS))
    categories = [reference.report_category(s) for s in sections]
    numbers = [int(s.split(" ", 1)[0]) for s in sections if s.split(" ", 1)[0].isdigit()]
    assert max(numbers) >= 10  # the case that sorted 10 before 2
    assert sorted(categories) == sorted(categories, key=lambda c: (
        int(c.split(" ", 1)[0]) if c.split(" ", 1)[0].isdigit() else 10_000, c))
    assert reference.report_category("4 · Localize") == "04 · Localize"
    assert reference.report_category("Other · E99") == "Other · E99"


def test_a_phase_whose_name_hides_what_it_holds_says_it():
    """"logging" is the phase of all else (an attached script's clipping and scheduler): the key
    says so; a phase whose name is its meaning keeps its bare name."""
    html = first_screen.stack_html({"forward": 60.0, "logging": 40.0}, "t")
    assert "logging (and the rest: clipping, scheduler, zero_grad) 40.0%" in html
    assert "forward 60.0%" in html
