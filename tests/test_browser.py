"""The headless-browser checker itself: it must see what a broken page does wrong."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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
