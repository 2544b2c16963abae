"""``perflab run --report`` and the attached run's ledger (perflab/attach/report.py, ledger.py).

Mostly on synthetic evidence written the way the run writes it (perflab.attach.run's
write_verdict, write_ledger; milliseconds): the page's first heading is that run's verdict
(two runs whose evidence says different things get different headings), nothing on it loads
from outside (the user's own text, a traceback or a loader line, is escaped), a run that
observed no step still gets a page saying so. Then the real thing once on this CPU: a script
that raises mid-run gets its report, judged on the steps before. Where a headless Chromium is
installed, the page is read at 1400 px as tests/test_browser.py reads the chapter report.
"""

from __future__ import annotations

import html
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from perflab.attach import evidence as evmod
from perflab.attach import ledger, observers, report, run
from perflab.core.names import PHASES

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import browser  # noqa: E402

HOSTILE = '<img src="https://example.invalid/pixel.png"><a href="http://example.invalid">x</a>'


def external(page: str) -> list[str]:
    """The src/href of the page's real tags (as a browser parses them) that leave the page."""

    class Links(HTMLParser):
        def handle_starttag(self, tag, attrs):
            self.found += [v for k, v in attrs if k in ("src", "href") and v
                           and re.match(r"\s*(https?:)?//", v, re.IGNORECASE)]

    parser = Links()
    parser.found = []
    parser.feed(page)
    return parser.found


def _evidence(phase_ms: dict, n: int = 30, *, site: str = "train.py:12: loader = DataLoader(ds)",
              traceback: str = "") -> dict:
    """Evidence as the child writes it (the steps following observers.plan)."""
    steps = []
    for i in range(n):
        kind = "warmup" if i < 3 else observers.plan(i - 3)
        wall = sum(phase_ms.values()) * (1.0 + 0.01 * (i % 3))
        steps.append({"index": i, "kind": kind, "t_end_s": i * wall / 1e3,
                      "wall_ms": wall if i else None,
                      "phases_ms": dict(phase_ms) if kind != "bare" else {},
                      "micro_batches": 1, "forwards": 1, "memory": {"rss_mib": 500.0},
                      "dynamo": {}})
    status = ({"exit": "raised", "code": 1, "exception": "RuntimeError: diverged",
               "traceback": traceback} if traceback else
              {"exit": "stopped", "stopped_by": "--steps"})
    return {"settings": {}, "unit": "optimizer step", "cuda": False, "device_name": "cpu",
            "torch": "2.x", "first_step_s": 1.0, "last_step_s": 2.0, "unix0": 0.0,
            "step_clock": observers.HOST_CLOCK, "steps": steps, "optimizers": ["AdamW"],
            "optimizer_sites": {"AdamW": "train.py:40: opt.step()"}, "models": ["Net"],
            "process_s": 5.0,
            "loaders": [{"site": site, "num_workers": 0, "pin_memory": False,
                         "batch_size": 8, "dataset": "DS"}],
            "host_reads": [], "sync_hits": [], "recompiles": [], "limit_hits": [],
            "compile_time_s": {}, "dynamo_final": {}, "profile": {}, "work": {},
            "ceilings": {}, "owners": {}, "status": status}


def _write_run(out: Path, ev: dict, script: Path) -> Path:
    """The files an attached run writes, from ``ev``, and its report."""
    out.mkdir(parents=True, exist_ok=True)
    command = [str(script), "--epochs", "1"]
    (out / "evidence.json").write_text(json.dumps(ev))
    outcome = run.outcome_line(0, ev, command)
    if ev["steps"]:
        d, s, extra, _, _ = run.write_verdict(out, ev, command, 5.0)
        run.write_ledger(out, ledger.build(command, ev, outcome, s, d, extra))
    else:
        run.write_ledger(out, ledger.build(command, ev, outcome))
    return report.write(out, command, outcome)


def _phases(**ms) -> dict:
    return {p: ms.get(p, 0.1) for p in PHASES}


@pytest.fixture
def script(tmp_path):
    s = tmp_path / "train.py"
    s.write_text("print('training')\n")
    return s


def _h1(page: str) -> str:
    heading = re.search(r"<h1>(.*?)</h1>", page, re.DOTALL).group(1)
    return html.unescape(re.sub(r"<[^>]+>", "", heading))


def test_the_first_heading_is_this_runs_verdict(tmp_path, script):
    slow_loader = _write_run(tmp_path / "a", _evidence(_phases(input_wait=30.0, forward=2,
                                                               backward=3)), script)
    slow_opt = _write_run(tmp_path / "b", _evidence(_phases(optimizer=30.0, forward=2,
                                                            backward=3)), script)
    a, b = slow_loader.read_text(), slow_opt.read_text()
    assert "waiting for input pipeline" in _h1(a) and "train.py on cpu" in _h1(a)
    assert "waiting for optimizer" in _h1(b)
    # the answer comes before any other section, and the chapter's claims are not there
    assert a.index('id="answer"') < a.index("<h2")
    assert "claims" not in a.lower()
    # the phases' bar, what was observed, the evidence rows, the ledger
    assert 'class="stack"' in a and "input_wait" in a
    for section in ("observed", "evidence", "ledger", "diagnosis"):
        assert f'id="{section}"' in a
    assert "train.py:12: loader = DataLoader(ds)" in a  # the advice at the user's line


def test_the_page_loads_nothing_from_outside_even_from_the_users_own_text(tmp_path, script):
    ev = _evidence(_phases(input_wait=30.0), site=f"train.py:12: {HOSTILE}",
                   traceback=f"Traceback:\n  {HOSTILE}\nRuntimeError: diverged")
    page = _write_run(tmp_path / "r", ev, script).read_text()
    assert len(external(HOSTILE)) == 2  # the check sees what it must
    assert external(page) == []
    assert not re.search(r"url\(\s*['\"]?\s*(https?:)?//", page)  # nor from the style
    assert "&lt;img src=" in page  # shown, escaped
    assert "<script" not in page and "RuntimeError: diverged" in page


def test_a_run_without_a_step_gets_a_page_that_says_so(tmp_path, script):
    ev = _evidence(_phases(), n=0)
    page = _write_run(tmp_path / "r", ev, script).read_text()
    assert "no verdict" in _h1(page)
    assert "no training step was observed" in page
    led = pd.read_csv(tmp_path / "r" / "ledger.csv", keep_default_na=False)
    assert led[led.field == "waiting_for"].value.iloc[0] == ""


def test_on_cuda_the_device_bar_is_read_from_the_kept_trace(tmp_path, script):
    """R02's test window stands for the profiled window: the page shows the device's busy
    and idle split beside the phases, and the ledger the device's clock."""
    from test_r02_step_trace import kineto

    out = tmp_path / "r"
    out.mkdir()
    (out / "trace.json").write_text(json.dumps(kineto()))
    ev = _evidence(_phases(forward=0.03, loss=0.025, backward=0.015, input_wait=0.02))
    ev.update(cuda=True, device_name="NVIDIA H200", step_clock=observers.DEVICE_CLOCK,
              profile={"trace": "trace.json"})
    page = _write_run(out, ev, script).read_text()
    assert "The device during the profiled window" in page and "device busy" in page
    assert "on NVIDIA H200" in _h1(page)
    led = pd.read_csv(out / "ledger.csv", keep_default_na=False).set_index("field")
    assert led.value["step_clock"] == observers.DEVICE_CLOCK
    # without its trace the bar is left out, not guessed
    (out / "trace.json").unlink()
    assert "The device during the profiled window" not in _write_run(out, ev, script).read_text()


def test_the_ledger_names_the_scripts_hash_and_the_step_clock(tmp_path, script):
    _write_run(tmp_path / "r", _evidence(_phases(input_wait=30.0, forward=2)), script)
    led = pd.read_csv(tmp_path / "r" / "ledger.csv", keep_default_na=False, dtype=str)
    assert list(led.columns) == ["section", "field", "value", "unit", "source"]
    assert (led.source != "").all()  # every row names where it came from

    def row(field):
        return led[led.field == field].iloc[0]

    assert row("source_sha256").value == evmod.source_hash(str(script)) != "unreadable"
    assert row("args").value == "--epochs 1"
    assert row("step_clock").value == observers.HOST_CLOCK
    median = row("step_ms_median")
    assert float(median.value) > 0 and observers.HOST_CLOCK in median.source
    assert "results.csv RUN step step_latency median" in median.source
    assert row("waiting_for").value == "input pipeline"
    assert row("cost_pct").value != "" or "not measured" in row("cost_pct").source
    md = (tmp_path / "r" / "ledger.md").read_text()
    assert md.startswith("```") and "source_sha256 " + row("source_sha256").value in md


def test_the_report_is_read_at_1400_px_with_the_verdict_on_its_first_screen(tmp_path, script):
    if browser.find_browser() is None:
        pytest.skip("no Chromium on PATH (.ci/run installs Debian's chromium)")
    page = _write_run(tmp_path / "r", _evidence(_phases(optimizer=30.0, forward=2)), script)
    got = browser.inspect(page)
    assert got["console_errors"] == [] and got["external_requests"] == []
    top, bottom = got["answer_box"]
    assert 0 <= top and bottom <= got["view_height"], got["answer_box"]
    assert "waiting for optimizer" in got["text"]
    assert got["page_width"] <= got["view_width"] and got["tables_past_edge"] == 0


@pytest.mark.background
def test_a_script_that_raises_mid_run_gets_its_report(tmp_path):
    from test_attach import CRASH, perflab_run

    s = tmp_path / "crash.py"
    s.write_text(CRASH)
    p, _ = perflab_run(tmp_path, "--report", "--steps", "1000", str(s))
    out = tmp_path / "out"
    assert p.returncode == 1, p.stderr[-2000:]
    assert p.stdout.rstrip().splitlines()[-1] == f"report: {out / 'report.html'}"
    page = (out / "report.html").read_text()
    verdict = pd.read_csv(out / "ledger.csv", keep_default_na=False).set_index("field")
    assert f"waiting for {verdict.value['waiting_for']}" in _h1(page)
    assert "raised RuntimeError: diverged" in page and "41 observed" in page
    assert "RuntimeError: diverged" in page.split('id="traceback"')[1]
    assert external(page) == []
