"""The headless-browser checker itself: it must see what a broken page does wrong."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import browser  # noqa: E402

pytestmark = pytest.mark.skipif(browser.find_browser() is None,
                                reason="no Chromium on PATH (.ci/run installs Debian's chromium)")


def test_checker_reports_console_errors_exceptions_and_external_loads(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text('<html><body><table><tr><td>1</td></tr></table>'
                    '<img src="https://example.invalid/x.png">'
                    '<script>console.error("boom"); missing_function();</script></body></html>')
    got = browser.inspect(page)
    assert got["tables"] == 1 and got["images"] == 1 and got["images_decoded"] == 0
    assert any("boom" in e for e in got["console_errors"])
    assert any(e.startswith("exception") for e in got["console_errors"])
    assert got["external_requests"] == ["https://example.invalid/x.png"]


def test_checker_passes_a_clean_self_contained_page(tmp_path):
    png = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
    page = tmp_path / "ok.html"
    page.write_text(f'<html><body><h4 id="e01">E01</h4><table><tr><td>1</td></tr></table>'
                    f'<img src="data:image/png;base64,{png}"></body></html>')
    got = browser.inspect(page)
    assert got["console_errors"] == [] and got["external_requests"] == []
    assert got["images_decoded"] == 1 and "e01" in got["ids"]


def test_checker_measures_a_page_wider_than_the_window(tmp_path):
    page = tmp_path / "wide.html"
    page.write_text('<html><body><table style="width:3000px"><tr><td>wide</td></tr></table>'
                    '</body></html>')
    got = browser.inspect(page)
    assert got["view_width"] == browser.VIEWPORT["width"]
    assert got["page_width"] > got["view_width"] and got["tables_past_edge"] == 1
    assert got["answer_box"] is None  # a page without the report's answer


# ---------------------------------------------------------------- the report, read at 1400 px

SHIPPED = ROOT / "report" / "reference" / "cpu-2c"


@pytest.fixture(scope="module")
def shipped_report(tmp_path_factory):
    """The report of the shipped 2-core CPU run, rendered by this checkout."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import render_report
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    base = tmp_path_factory.mktemp("report")
    results = base / "cpu-2c"
    shutil.copytree(SHIPPED / "results", results)
    for name in ("claims.csv", "diagnosis.csv", "diagnosis.md", "ledger.md", "ledger.csv"):
        shutil.copy(SHIPPED / name, results / name)
    (base / "figures").mkdir()
    out = base / "report.html"
    render_report.main(ROOT / "report" / "perflab.py", results, base / "figures", out, ROOT)
    return browser.inspect(out)


def test_report_answers_on_its_first_screen(shipped_report):
    got = shipped_report
    top, bottom = got["answer_box"]
    assert 0 <= top and bottom <= got["view_height"], got["answer_box"]
    text = got["text"]
    assert "The machine is waiting for: optimizer" in text
    first = text.index("The machine is waiting for")
    assert first < text.index("Where the step's time goes") < text.index("claims here:") \
        < text.index("Run and environment\n", first)


def test_report_fits_the_window_and_stays_offline(shipped_report):
    got = shipped_report
    assert got["page_width"] <= got["view_width"]  # no horizontal page scroll
    assert got["tables_past_edge"] == 0  # every table fits or scrolls inside the page
    assert got["external_requests"] == [] and got["console_errors"] == []
    for anchor in ("answer", "Claims", "sec-4-localize-decompose-the-step", "claim-c10"):
        assert anchor in got["ids"], anchor
