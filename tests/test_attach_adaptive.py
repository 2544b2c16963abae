"""perflab run stops on the verdict's decision (issue 40; perflab/attach/stopping.py).

On synthetic steps (no subprocess): a clear input share decides after the minimum; a share
sitting on its threshold stays undecided, and under a spent budget the stop says what it
lacked; a bad --budget is a one-line error (the parser's values: tests/test_sequential.py).
Then one example on this CPU stops by decision with fewer steps than its budget allowed
(counts, not times).
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from perflab.attach import observers, stopping
from perflab.core.names import PHASES
from perflab.views import diagnose as dg
from tests.test_attach import REPO, SCRIPTS, perflab_run


def _steps(n: int, input_pct, seed: int = 0) -> list[dict]:
    """``n`` steps following observers.plan (3 warm-up), each of 10 ms; ``input_pct(rng)``
    the input wait's share (%) of an observed step, the rest in the forward."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        kind = "warmup" if i < 3 else observers.plan(i - 3)
        x = float(np.clip(input_pct(rng), 0, 100)) / 10
        ph = {p: 0.0 for p in PHASES}
        ph.update(input_wait=x, forward=10.0 - x)
        out.append({"index": i, "kind": kind, "wall_ms": 10.0 if i else None,
                    "phases_ms": ph if kind != "bare" else {}, "dynamo": {},
                    "memory": {"rss_mib": 500.0}})
    return out


def test_a_clear_input_share_is_decided_after_the_minimum_and_not_before():
    steps = _steps(200, lambda r: r.normal(70, 5))
    first = next(k for k in range(20, 200) if stopping.look(steps[:k], 100)["decided"])
    got = stopping.look(steps[:first], 100)
    assert "input share" in got["line"] and "above 25 %" in got["line"]
    assert "optimizer share" in got["line"] and "below 25 %" in got["line"]
    assert stopping.pairs(steps[:first]) >= stopping.MIN_PAIRS
    assert got["timed_steps"] >= stopping.MEMORY_STEPS
    assert not stopping.look(steps[:first - 1], 100)["decided"]
    assert first < 120  # far fewer than the 200 steps a fixed budget would have run


def test_a_share_on_its_threshold_stays_undecided_and_the_budget_stop_says_what_it_lacked():
    t = dg.INPUT_SHARE_PCT
    # looked at after every pair, a share on its threshold decides in at most alpha of the
    # runs (anytime-valid): here at most 2 of 20 seeds (1 seen), seed 0 among the rest
    decided = [seed for seed in range(20) if any(
        stopping.look(_steps(300, lambda r: r.normal(t, 6), seed)[:k], 50)["decided"]
        for k in range(30, 300, 8))]
    assert len(decided) <= 2 and 0 not in decided
    obs, reason = _budget_stop()
    assert reason.startswith("budget spent (10 s): undecided: input share")
    rec = obs.status["stopping"]
    assert rec["stopped"] == "budget" and rec["lacking"] == ["input share"]
    ev = {"status": {**obs.status, "stopped_by": reason}}
    assert "it lacked: input share" in stopping.verdict_note(ev)


def test_a_budget_spent_before_the_sequences_first_look_says_what_budget_would_reach_it():
    # membw_bound.py on the loaded CPU: 8 timed steps of ~5 s in a 60 s budget. Its shares
    # are not on their thresholds: they were never looked at; a longer budget reaches them
    steps = _steps(20, lambda r: r.normal(70, 5))
    obs = SimpleNamespace(steps=steps, s={"budget_s": 10.0, "command_unix": 0.0},
                          status={}, _kind="observed", unix0=0.0)
    assert stopping.step_end(obs).startswith("budget spent")
    rec = obs.status["stopping"]
    assert rec["budget_to_decide_s"] > 10.0
    note = stopping.verdict_note({"status": {**obs.status, "stopped_by": "budget"}})
    assert "about --budget" in note and "no affordable budget" not in note


def _budget_stop(input_pct: float = dg.INPUT_SHARE_PCT):
    """(the observer, its stop reason) of a run whose budget is spent (the command started at
    the epoch) with the input share at ``input_pct`` (on its threshold by default)."""
    steps = _steps(300, lambda r: r.normal(input_pct, 6), seed=0)
    obs = SimpleNamespace(steps=steps, s={"budget_s": 10.0, "command_unix": 0.0},
                          status={}, _kind="observed", unix0=0.0)
    return obs, stopping.step_end(obs)


def _findings(input_fits: bool) -> dg.Diagnosis:
    f = [dg.Finding("input_pipeline", dg.FITS if input_fits else dg.RULED_OUT, "input"),
         dg.Finding("optimizer", dg.RULED_OUT, "optimizer"),
         dg.Finding("host_overhead", dg.FITS, "host")]
    return dg.Diagnosis(f[0].bottleneck if input_fits else "host_overhead", "as measured", f)


@pytest.mark.parametrize("input_fits", [True, False])
def test_a_verdict_cut_short_by_the_budget_says_which_evidence_it_lacked(input_fits):
    obs, reason = _budget_stop()
    ev = {"status": {**obs.status, "stopped_by": reason}}
    d, mem = _findings(input_fits), dg.Finding("memory_growth", dg.RULED_OUT, "flat")
    assert stopping.mark_lacking(ev, d.findings, mem)
    d.rival, _ = dg._rival(d.findings, d.verdict)
    md = dg.render_markdown(d)
    # either way the input share decides the headline: as the verdict that lacks it, or as
    # the earlier candidate that would take it; never a plain verdict
    assert "too close to call" in md and "not decided within the --budget 10 s" in md
    assert "input share" in md and "the verdict lacked this evidence" in md
    assert not d.findings[1].borderline  # the optimizer share was decided (far below)
    from perflab.attach import ledger
    rows = []
    ledger._stopping(ev, lambda *r: rows.append(r[:3]))
    assert ("stopping", "stopped", "budget") in rows and ("stopping", "lacked",
                                                          "input share") in rows


def test_a_decided_run_marks_nothing():
    obs, reason = _budget_stop(input_pct=70)
    assert obs.status["stopping"]["stopped"] == "decided", reason
    d, mem = _findings(True), dg.Finding("memory_growth", dg.RULED_OUT, "flat")
    assert not stopping.mark_lacking({"status": obs.status}, d.findings, mem)
    assert not any(f.borderline for f in d.findings) and mem.because == "flat"
    from perflab.attach import ledger
    rows = []
    ledger._stopping({"status": obs.status}, lambda *r: rows.append(r[:3]))
    assert ("stopping", "stopped", "decided") in rows and not any(r[1] == "lacked" for r in rows)


def test_between_pairs_the_child_runs_on_without_looking():
    import time
    steps = _steps(60, lambda r: r.normal(70, 5))
    while steps[-1]["kind"] == "bare":
        steps.pop()
    obs = SimpleNamespace(steps=steps, s={"budget_s": 600.0, "command_unix": time.time()},
                          status={}, _kind="observed", unix0=0.0)
    assert stopping.step_end(obs) == ""


def test_the_looks_time_is_the_observers_not_the_next_steps():
    """A look costs the observers' time (seconds of imports on a loaded CPU at the first):
    charged to the next step, it diluted optimizer_bound's optimizer share below its
    threshold. A look that takes 50 ms leaves 1 ms steps at well under 50 ms."""
    import time

    looked = []

    def slow_look(obs):
        time.sleep(0.05)
        looked.append(len(obs.steps))
        return ""
    obs = observers.Observer({"warmup": 0, "no_profile": True, "budget_s": 60.0}, "/dev/null")
    obs.stop_rule = SimpleNamespace(step_end=slow_look, prepare=lambda: None)
    obs.steady_t0, obs._kind = 0.0, "observed"
    obs.steps = [{"index": i, "kind": "profiled", "wall_ms": 1.0, "phases_ms": {},
                  "dynamo": {}, "memory": {}} for i in range(7)]  # past the instrument windows
    obs._last_end = observers._clock()
    for _ in range(6):
        obs._step_end()
    assert len(looked) == 6
    assert all(r["wall_ms"] < 50 for r in obs.steps[8:])


def test_a_recompiling_scripts_estimate_is_its_steady_steps_not_its_compiles():
    """recompile.py's shape: the first steady steps each compile a graph (5 s here) until
    Dynamo's limit, the rest run eager (10 ms). The estimate reads the eager steps: seconds,
    not the hours a compile's time per step would give (17.9 h before issue 40)."""
    import time

    steps = _steps(200, lambda r: r.normal(70, 5))
    for k, r in enumerate(steps):  # the first pair of stretches all compiles
        r["dynamo"] = {"stats.unique_graphs": min(k, 20)}
        if 3 <= k <= 20:
            r["wall_ms"] = 5000.0
    obs = SimpleNamespace(steps=[], s={"budget_s": 3600.0, "command_unix": time.time()},
                          status={}, unix0=0.0)
    for k in range(20, 200):  # the child's step ends, one by one
        obs.steps, obs._kind = steps[:k], steps[k]["kind"]
        if stopping.step_end(obs):
            break
    rec = obs.status["stopping"]
    assert rec["stopped"] == "decided" and rec["step_ms"] == 10.0
    assert rec["estimate_s"] < 60


def test_the_commands_start_is_its_interpreters():
    import os
    import time

    if not os.path.exists("/proc/uptime"):
        pytest.skip("no /proc: the parent's command_unix is the start")
    started, now = stopping.started_unix(os.getpid()), time.time()
    assert started is not None and 0 < now - started < 3600  # this process began before now
    assert stopping.started_unix(2 ** 22 + 12345) is None  # no such process


def test_a_bad_budget_on_the_command_line_is_a_one_line_error():
    p = subprocess.run([sys.executable, "-m", "perflab.attach.run", "--budget", "soon", "--",
                        "python", "x.py"], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2 and "bad budget 'soon'" in p.stderr
    assert len([x for x in p.stderr.splitlines() if "error" in x]) == 1


@pytest.mark.background
def test_input_bound_stops_by_decision_with_fewer_steps_than_its_budget_allowed(tmp_path):
    p, md = perflab_run(tmp_path, "--budget", "60s", str(SCRIPTS / "input_bound.py"))
    assert p.returncode == 0, p.stderr[-2000:]
    ev = json.loads((tmp_path / "out" / "evidence.json").read_text())
    rec = ev["status"]["stopping"]
    assert rec["stopped"] == "decided" and ev["status"]["stopped_by"].startswith("decided")
    # the stretches the budget allowed at the last look, against those observed: counts
    assert len(stopping.stretch_shares(ev["steps"], ("optimizer",))) < rec["max_stretches"]
    assert "step ~" in p.stderr and "to the verdict (budget 60 s)" in p.stderr
    assert "**Stopped**: decided after" in md and "Verdict: input pipeline" in md


def test_on_cuda_only_the_optimizer_share_is_sampled_the_trace_decides_input():
    # an input share on its threshold does not hold a CUDA run: its input test reads the
    # profiled window's trace (R02), not the phases
    steps = _steps(120, lambda r: r.normal(dg.INPUT_SHARE_PCT, 6), seed=3)
    assert [n for n, _, _ in stopping.tests(cuda=True)] == ["optimizer share"]
    k = next(k for k in range(20, 120) if stopping.look(steps[:k], 100, cuda=True)["decided"])
    assert "input share" not in stopping.look(steps[:k], 100, cuda=True)["line"]
