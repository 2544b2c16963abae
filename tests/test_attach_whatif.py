"""perflab whatif of a script (perflab.attach.whatif): the statistics on evidence from one real
attached run whose step times are rescaled per run, and end to end on the known-answer scripts."""

from __future__ import annotations

import copy
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perflab.attach import run as runmod
from perflab.attach import whatif as wf

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "examples" / "scripts"
HAS_PATCHES = importlib.util.find_spec("perflab.attach.patches") is not None


@pytest.fixture(scope="module")
def real_ev(tmp_path_factory):
    """One real attached run of input_bound.py: the shape of the evidence, measured."""
    out = tmp_path_factory.mktemp("base")
    settings = {"steps": 24, "seconds": None, "follow": False, "warmup": 3,
                "roots": [str(SCRIPTS)], "no_step_s": 6.0}
    rc, ev, _ = runmod.run_child([str(SCRIPTS / "input_bound.py"), "--delay-ms", "0.2"],
                                 settings, out)
    assert ev is not None and ev["steps"], rc
    return ev


def _variant(ev, scale, rng, losses=None, raised=False, noise=0.01):
    """The real evidence's structure with synthetic step walls: 10 ms times ``scale``, with
    ``noise`` relative jitter (the real walls of a shared machine are too heavy-tailed to
    test the statistics with)."""
    e = copy.deepcopy(ev)
    for r in e["steps"]:
        if r["wall_ms"] is not None:
            r["wall_ms"] = 10.0 * scale * (1 + noise * rng.standard_normal())
    e["losses"] = list(losses if losses is not None else [2.0, 1.9, 1.8, 1.7, 1.6])
    if raised:
        e["status"] = {"exit": "raised", "exception": "RuntimeError",
                       "traceback": "Traceback (most recent call last):\n  File \"train.py\", "
                                    "line 9\nRuntimeError: patched run broke"}
    return e


class _Entry:
    def __init__(self, touches=("input_wait",), why=""):
        self.touches, self.why, self.title = touches, why, "test entry"

    def applies(self, ev):
        return self.why

    def edit(self, site, params):
        return f"- {site}\n+ {site} (patched)"


def _runner(ev, plan: dict, base_losses=None):
    """A stand-in for run.run_child: baselines at scale 1, each patch at its scale."""
    rng = np.random.default_rng(0)
    calls = []

    def run(command, settings, out_dir):
        p = settings["patch"]
        calls.append(p and p["name"])
        if p is None:
            losses = (base_losses or [[2.0, 1.9, 1.8, 1.7, 1.6]])[
                min(calls.count(None) - 1, len(base_losses or [0]) - 1)]
            return 0, _variant(ev, 1.0, rng, losses), 1.0
        scale, kw = plan[p["name"]]
        return (1 if kw.get("raised") else 0), _variant(ev, scale, rng, **kw), 1.0
    run.calls = calls
    return run


def _go(tmp_path, monkeypatch, ev, plan, registry, **kw):
    monkeypatch.setattr(wf, "patches", lambda: registry)
    runner = _runner(ev, plan, kw.pop("base_losses", None))
    rc = wf.whatif([str(SCRIPTS / "input_bound.py")], out=str(tmp_path), runner=runner, **kw)
    md = (tmp_path / "whatif.md").read_text() if (tmp_path / "whatif.md").is_file() else ""
    return rc, md, runner.calls


def _row(md, name):
    return next(line for line in md.splitlines() if line.startswith(f"| {name} |"))


def test_inside_floor_unresolved_beyond_faster_failed_and_not_applicable(tmp_path, monkeypatch,
                                                                         real_ev):
    plan = {"loader_workers": (0.5, {}), "loader_pinned": (1.0, {}),
            "fused_optimizer": (1.0, {"raised": True})}
    reg = {"loader_workers": _Entry(), "loader_pinned": _Entry(), "fused_optimizer": _Entry(),
           "tf32": _Entry(why="CUDA only: no CUDA device")}
    rc, md, calls = _go(tmp_path, monkeypatch, real_ev, plan, reg)
    assert rc == 0
    assert calls.count(None) >= 3, calls  # the first baseline plus at least two repeats
    assert _row(md, "loader_workers").split("|")[2].strip().startswith(wf.FASTER)
    assert _row(md, "loader_pinned").split("|")[2].strip().startswith(wf.UNRESOLVED)
    failed = _row(md, "fused_optimizer")
    assert wf.FAILED in failed and "patched run broke" in failed
    assert "CUDA only" in _row(md, "tf32")
    # ranked: the measured speed-up first
    assert md.index("| loader_workers |") < md.index("| loader_pinned |") < md.index("| tf32 |")
    assert (tmp_path / "whatif.csv").is_file()


def test_diagnosis_first_and_budget(tmp_path, monkeypatch, real_ev):
    names = ["fused_optimizer", "loader_workers", "loader_pinned"]
    assert wf.order(names, "input_pipeline")[:2] == ["loader_workers", "loader_pinned"]
    assert wf.main(["--budget", "soon", "--", "python", "x.py"]) == 2  # one-line error
    plan = {n: (1.0, {}) for n in names}
    rc, md, calls = _go(tmp_path, monkeypatch, real_ev, plan, {n: _Entry() for n in names},
                        budget=0.0)
    assert rc == 0 and all(c is None for c in calls)
    assert all("not run: budget" in _row(md, n) for n in names)


def test_nondeterministic_baseline_is_not_checked_and_loss_mismatch(tmp_path, monkeypatch,
                                                                      real_ev):
    reg = {"loader_workers": _Entry()}
    rc, md, _ = _go(tmp_path, monkeypatch, real_ev, {"loader_workers": (1.0, {})}, reg,
                    base_losses=[[2.0, 1.9, 1.8], [2.0, 1.95, 1.7]])
    assert "not deterministic run to run: correctness not checked" in md
    assert " ok" not in _row(md, "loader_workers").split("|")[9]
    # deterministic baseline, losses off by 10%: a mismatch, not ok
    check = wf.loss_check("loader_workers", [[2.0, 1.9], [2.0, 1.9]], [2.2, 2.1])
    assert check.startswith("MISMATCH")
    assert wf.loss_check("loader_workers", [[2.0, 1.9], [2.0, 1.9]], [2.0, 1.9]).startswith("ok")


def test_judge_change_needs_a_floor():
    rng = np.random.default_rng(1)
    a = list(10 + 0.1 * rng.standard_normal(40))
    b = list(5 + 0.1 * rng.standard_normal(40))
    assert wf.judge_change(a, b, None)[0] == wf.UNRESOLVED  # no floor: never a speed-up
    assert wf.judge_change(a, b, 5.0)[0] == wf.FASTER
    assert wf.judge_change(a, [x * 1.01 for x in a], 5.0)[0] == wf.UNRESOLVED
    # the floor bounds the log ratio: floor 100 % -> a speed-up must be below -50 %
    assert wf.judge_change(a, b, 150.0)[0] == wf.UNRESOLVED
    assert wf.beyond_floor(-60.0, 100.0) and not wf.beyond_floor(-40.0, 100.0)
    assert wf.parse_params(["loader_workers:num_workers=4"]) == {"loader_workers": {"num_workers": 4}}


def test_cannot_rerun_is_named(tmp_path, monkeypatch, real_ev):
    monkeypatch.setattr(wf, "patches", lambda: {})
    n = []

    def runner(command, settings, out_dir):
        n.append(1)
        return (0, copy.deepcopy(real_ev), 1.0) if len(n) == 1 else (1, None, 1.0)
    rc = wf.whatif([str(SCRIPTS / "input_bound.py")], out=str(tmp_path), runner=runner)
    assert rc == 1 and not (tmp_path / "whatif.md").exists()


def test_script_form_detection():
    assert wf.is_script_form(["--", "python", "train.py"])
    assert wf.is_script_form(["--", "-m", "pkg.train"])
    assert wf.is_script_form(["--budget", "3m", "train.py", "--epochs", "1"])
    assert not wf.is_script_form(["mypkg.models:make_step"])
    assert not wf.is_script_form(["mypkg.models:make_step", "--", "--cores", "2"])


@pytest.mark.skipif(not HAS_PATCHES, reason="the child side (perflab.attach.patches) is not merged")
def test_end_to_end_input_bound_loader_workers(tmp_path):
    script = SCRIPTS / "input_bound.py"
    line = next(i for i, t in enumerate(script.read_text().splitlines(), 1)
                if re.search(r"DataLoader\(", t))
    r = subprocess.run([sys.executable, "-m", "perflab.attach.whatif", "--steps", "12",
                        "--only", "loader_workers", "--set", "loader_workers:num_workers=4",
                        "--out", str(tmp_path), "--", "python", str(script), "--delay-ms", "4"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    row = _row((tmp_path / "whatif.md").read_text(), "loader_workers")
    assert wf.FASTER in row and f"input_bound.py:{line}:" in row


@pytest.mark.skipif(not HAS_PATCHES, reason="the child side (perflab.attach.patches) is not merged")
def test_end_to_end_optimizer_bound(tmp_path):
    r = subprocess.run([sys.executable, "-m", "perflab.attach.whatif", "--steps", "12",
                        "--only", "foreach_optimizer,fused_optimizer", "--out", str(tmp_path),
                        "--", "python", str(SCRIPTS / "optimizer_bound.py")],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    md = (tmp_path / "whatif.md").read_text()
    assert "| foreach_optimizer |" in md and "| fused_optimizer |" in md
