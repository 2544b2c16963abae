"""perflab run: attach to an unmodified script (perflab/attach/).

Two kinds of test. The verdict on synthetic evidence (no subprocess: milliseconds), each
finding with a case where the evidence says yes, one where it says no, and one inside the
noise. Then the real thing on this CPU: the shipped example scripts run under
``python -m perflab run`` in a child process, small and with ``--steps`` small, each giving
the verdict its mechanism has on a CPU; and the bad inputs of issue 37, each with its
message.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perflab.attach import evidence as evmod
from perflab.attach import observers, run, verdict
from perflab.core.names import PHASES
from perflab.views import diagnose as dg

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "examples" / "scripts"


# ------------------------------------------------------------------ synthetic evidence


def _evidence(phase_ms: dict, *, n: int = 24, memory=None, graphs=None, loaders=True,
              work=None, ceilings=None) -> dict:
    """Evidence as the child writes it: ``n`` steps following observers.plan, each with the
    given phase times; ``memory(i)`` and ``graphs(i)`` per step index."""
    steps = []
    warm = 3
    for i in range(n):
        kind = "warmup" if i < warm else observers.plan(i - warm)
        wall = sum(phase_ms.values())
        steps.append({"index": i, "kind": kind, "t_end_s": i * wall / 1e3,
                      "wall_ms": wall if i else None,
                      "phases_ms": dict(phase_ms) if kind != "bare" else {},
                      "micro_batches": 1, "forwards": 1,
                      "memory": {"rss_mib": memory(i) if memory else 500.0},
                      "dynamo": {"stats.unique_graphs": graphs(i)} if graphs else {}})
    return {"settings": {}, "unit": "optimizer step", "cuda": False, "device_name": "cpu",
            "torch": "x", "first_step_s": 1.0, "steps": steps, "optimizers": ["AdamW"],
            "optimizer_sites": {"AdamW": "train.py:40: opt.step()"},
            "models": ["Net"], "process_s": 5.0,
            "loaders": [{"site": "train.py:12: loader = DataLoader(ds, batch_size=8)",
                         "num_workers": 0, "pin_memory": False, "batch_size": 8,
                         "dataset": "DS"}] if loaders else [],
            "host_reads": [], "sync_hits": [], "recompiles": [], "limit_hits": [],
            "compile_time_s": {},
            "dynamo_final": {"stats.unique_graphs": graphs(n - 1)} if graphs else {},
            "profile": {}, "work": work or {}, "ceilings": ceilings or {},
            "status": {"exit": "stopped", "stopped_by": "--steps"}}


def _phases(**ms) -> dict:
    return {p: ms.get(p, 0.1) for p in PHASES}


def test_a_step_waiting_on_its_loader_is_the_input_pipeline_named_at_the_loader_line():
    d, _, _ = verdict.judge(_evidence(_phases(input_wait=30.0, forward=2, backward=3)))
    assert d.verdict == "input_pipeline"
    assert "train.py:12" in d.intervention and "num_workers=0" in d.intervention


def test_a_step_with_a_small_input_wait_is_not_input_bound():
    d, _, _ = verdict.judge(_evidence(_phases(input_wait=1.0, forward=10, backward=20)))
    f = next(f for f in d.findings if f.bottleneck == "input_pipeline")
    assert f.outcome == dg.RULED_OUT and d.verdict != "input_pipeline"


def test_the_optimizer_as_the_largest_phase_is_the_verdict_named_at_its_first_step():
    d, _, _ = verdict.judge(_evidence(_phases(optimizer=30.0, forward=2, backward=3)))
    assert d.verdict == "optimizer" and "train.py:40" in d.intervention


def test_no_roofline_evidence_leaves_the_device_candidates_not_measured():
    d, _, _ = verdict.judge(_evidence(_phases(forward=10, backward=20)))
    assert d.verdict == "undetermined"
    assert next(f for f in d.findings if f.bottleneck == "device_compute"
                ).outcome == dg.NOT_MEASURED


def test_counted_work_against_the_ceilings_separates_compute_from_bandwidth():
    from perflab.instruments import roofline

    ceil = {"peak_flops": 1e11, "bandwidth": 1e10, "dtype": "float32", "matmul_n": 512}
    ev = _evidence(_phases(forward=10, backward=20), ceilings=ceil)
    ev["roofline"] = roofline.fractions(roofline.Work(int(2e9), int(2e7), 10), 30.0, 1e11, 1e10)
    assert verdict.judge(ev)[0].verdict == "device_compute"
    ev["roofline"] = roofline.fractions(roofline.Work(0, int(2e8), 10), 30.0, 1e11, 1e10)
    assert verdict.judge(ev)[0].verdict == "memory_bandwidth"
    # tiny work in a long step: far below both ceilings, per-operator overhead on a CPU
    ev["roofline"] = roofline.fractions(roofline.Work(int(1e6), int(1e5), 10), 30.0, 1e11, 1e10)
    assert verdict.judge(ev)[0].verdict == "host_overhead"


def test_memory_rising_every_step_is_a_leak_and_a_flat_or_one_jump_is_not():
    phases = _phases(forward=10, backward=20)
    _, _, x = verdict.judge(_evidence(phases, memory=lambda i: 500 + 3.0 * i))
    assert x["memory"].outcome == dg.FITS
    _, _, x = verdict.judge(_evidence(phases, memory=lambda i: 500.0))
    assert x["memory"].outcome == dg.RULED_OUT
    # the allocator growing its pool once: a slope, but not every step
    _, _, x = verdict.judge(_evidence(phases, memory=lambda i: 500 + (40 if i > 12 else 0)))
    assert x["memory"].outcome == dg.RULED_OUT
    # rising every step but by less than the floor over the run: inside the noise
    _, _, x = verdict.judge(_evidence(phases, memory=lambda i: 500 + 0.01 * i))
    assert x["memory"].outcome == dg.RULED_OUT


def test_a_leak_where_no_time_candidate_fits_is_the_verdict_not_a_footnote():
    """The cold try's case: leak.py read "undetermined" with the growth only under "also
    fits". Where no time candidate fits, the memory growth is the verdict; where one fits, it
    stays the verdict and the growth is reported beside it."""
    even = _phases(forward=10, loss=10, backward=10, optimizer=10, logging=10)
    d, _, x = verdict.judge(_evidence(even, memory=lambda i: 500 + 3.0 * i))
    assert x["memory"].outcome == dg.FITS and d.verdict == "memory_growth", d.verdict
    d, _, _ = verdict.judge(_evidence(even, memory=lambda i: 500.0))
    assert d.verdict != "memory_growth"
    d, _, x = verdict.judge(_evidence(_phases(optimizer=40, forward=5, backward=5),
                                      memory=lambda i: 500 + 3.0 * i))
    assert d.verdict == "optimizer" and x["memory"].outcome == dg.FITS


def test_steady_steps_that_compile_are_recompiling_and_first_call_compiles_are_not():
    phases = _phases(forward=10, backward=20)
    ev = _evidence(phases, graphs=lambda i: 1 + i // 2)  # a new graph every other step
    for r in ev["steps"]:
        if r["index"] % 2 == 0 and r["kind"] != "warmup":
            r["wall_ms"] = 500.0  # a compiling step is slow
    d, s, _ = verdict.judge(ev)
    assert d.verdict == "recompiling" and s.recompile_steps > 3
    # graphs compiled only during warm-up: not a finding
    d, s, _ = verdict.judge(_evidence(phases, graphs=lambda i: min(i, 2)))
    assert d.verdict != "recompiling" and s.recompile_steps == 0


def test_the_plan_times_only_stretches_with_the_hooks_on_and_off():
    kinds = [observers.plan(k) for k in range(30)]
    assert kinds[:observers.SYNC_STEPS] == ["syncs"] * observers.SYNC_STEPS
    # the step the profiler's window closes in (its trace written) is not timed
    first = kinds.index("settle")
    assert kinds[first - 1] == "profiled" and kinds[first + 1] in evmod.TIMED
    timed = [k for k in kinds if k in evmod.TIMED]
    assert timed[:observers.STRETCH] == ["observed"] * observers.STRETCH
    assert timed[observers.STRETCH:2 * observers.STRETCH] == ["bare"] * observers.STRETCH


class _FakeEvent:
    """A CUDA event whose moment is set by the test: the device's clock, planted."""
    now = [0.0]

    def __init__(self, enable_timing=True):
        self.t = None

    def record(self):
        self.t = _FakeEvent.now[0]

    def query(self):
        return True

    def elapsed_time(self, other):
        return other.t - self.t


def test_on_cuda_a_step_is_timed_by_the_device_not_by_the_host_running_ahead(monkeypatch):
    """The host returns from launching a step long before the device has done it (E01): 1 ms of
    host time per step for 30 ms of device work. The steps' times are the events' (30 ms a
    step, forward 10 and backward 20), the host's kept beside them."""
    monkeypatch.setattr(observers.torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(observers.torch.cuda, "synchronize", lambda: None)
    obs = observers.Observer({"warmup": 0, "no_profile": True}, "/dev/null")
    obs.cuda, obs.steady_t0 = True, 0.0
    device = {"forward": 10.0, "loss": 0.0, "backward": 20.0, "optimizer": 0.0}
    obs._mark(-1, observers.STEP_END)
    for i in range(3):
        for phase, ms in device.items():
            obs._mark(i, phase)
            _FakeEvent.now[0] += ms
        obs._mark(i, observers.STEP_END)
        obs.steps.append({"index": i, "kind": "observed", "wall_ms": 1.0,
                          "phases_ms": {p: 0.25 for p in device}})
    obs._resolve(block=True)
    obs._device_times()
    assert [r["wall_ms"] for r in obs.steps] == [30.0, 30.0, 30.0]
    assert all(r["host_wall_ms"] == 1.0 for r in obs.steps)
    assert obs.steps[1]["phases_ms"]["backward"] == 20.0 and obs.steps[1]["phases_ms"]["forward"] == 10.0
    obs._resolve(block=True)  # resolving again counts nothing twice
    obs._device_times()
    assert obs.steps[2]["phases_ms"]["backward"] == 20.0


def test_on_cuda_the_observers_step_end_work_is_not_the_steps(monkeypatch):
    """A host-bound step on CUDA: the device idles while the observers do their step-end work
    (here 50 ms: the evidence file written, the profiler's trace); the step is timed from the
    start mark after that work, so each step reads its own 30 ms. Without start marks (an
    older evidence's shape) it is timed from the last step's end."""
    monkeypatch.setattr(observers.torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(observers.torch.cuda, "synchronize", lambda: None)
    for starts, expect in ((True, [30.0, 30.0, 30.0]), (False, [30.0, 80.0, 80.0])):
        obs = observers.Observer({"warmup": 0, "no_profile": True}, "/dev/null")
        obs.cuda, obs.steady_t0 = True, 0.0
        obs._mark(-1, observers.STEP_END)
        for i in range(3):
            if starts:
                obs._mark(i, observers.STEP_START)
            for phase, ms in {"forward": 10.0, "backward": 20.0}.items():
                obs._mark(i, phase)
                _FakeEvent.now[0] += ms
            obs._mark(i, observers.STEP_END)
            _FakeEvent.now[0] += 50.0  # the observers' work after the step's end
            obs.steps.append({"index": i, "kind": "observed", "wall_ms": 1.0,
                              "phases_ms": {"forward": 0.5, "backward": 0.5}})
        obs._resolve(block=True)
        obs._device_times()
        assert [r["wall_ms"] for r in obs.steps] == expect
        assert obs.steps[2]["phases_ms"] == {"forward": 10.0, "backward": 20.0}


def test_rows_keep_the_csv_contract_and_name_the_script_and_its_hash(tmp_path):
    from perflab.core import io

    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    ev = _evidence(_phases(input_wait=30.0))
    s = evmod.summarize(ev)
    frame = io.rows_to_frame(evmod.rows(ev, s, [str(script), "--epochs", "1"]))
    io.validate_rows(frame)
    assert frame.workload.str.contains("--epochs 1").all()
    assert frame.workload.str.contains(evmod.source_hash(str(script))).all()


# ------------------------------------------------------------------ bad input, no child


def test_a_missing_script_and_one_that_does_not_parse_are_one_line_each(tmp_path):
    with pytest.raises(run.RunError, match="no such script"):
        run.check_script(run.command_of(["python", str(tmp_path / "nope.py")]))
    bad = tmp_path / "bad.py"
    bad.write_text("def f(:\n")
    with pytest.raises(run.RunError, match="does not parse: line 1"):
        run.check_script(run.command_of([str(bad)]))
    with pytest.raises(run.RunError, match="no script given"):
        run.command_of(["python"])


# ------------------------------------------------------------------ the real thing


def perflab_run(tmp_path, *args: str, timeout: int = 240) -> tuple[subprocess.CompletedProcess,
                                                                    str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "perflab", "run", "--out", str(out), *args],
                       env=env, capture_output=True, text=True, timeout=timeout,
                       cwd=tmp_path)
    md = (out / "diagnosis.md").read_text() if (out / "diagnosis.md").is_file() else ""
    return p, md


def _verdict_line(md: str) -> str:
    return next((x for x in md.splitlines() if x.startswith("**Verdict")), "")


@pytest.mark.background
def test_perflab_run_names_the_slow_loader_of_an_unmodified_script(tmp_path):
    p, md = perflab_run(tmp_path, "--steps", "8", "--", "python",
                        str(SCRIPTS / "input_bound.py"), "--epochs", "1", "--delay-ms", "2")
    assert p.returncode == 0, p.stderr
    assert "epoch 0 step 0" in p.stdout  # the script's own output passes through
    assert "Verdict: input pipeline" in _verdict_line(md)
    assert re.search(r"input_bound.py:\d+: loader = DataLoader\(", md)  # its line
    assert "stopped cleanly by perflab" in p.stderr


@pytest.mark.background
@pytest.mark.parametrize("script, args, expected", [
    ("optimizer_bound.py", ["--params", "300"], "Verdict: optimizer"),
    ("recompile.py", ["--backend", "aot_eager", "--depth", "1"], "Verdict: recompiling"),
    ("leak.py", ["--batch-size", "256"], "memory grows every step"),
])
def test_perflab_run_gives_each_known_answer_on_a_cpu(tmp_path, script, args, expected):
    p, md = perflab_run(tmp_path, "--steps", "8", "--", "python", str(SCRIPTS / script), *args)
    assert p.returncode == 0, p.stderr[-2000:]
    assert expected in md, md


@pytest.mark.background
def test_a_host_read_is_located_at_the_users_line_and_not_called_a_sync_on_a_cpu(tmp_path):
    p, md = perflab_run(tmp_path, "--steps", "4", "--", "python", str(SCRIPTS / "sync_item.py"),
                        "--hidden", "64")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "sync_item.py:34: total += loss.item()" in md
    assert "Verdict: synchronization" not in md


@pytest.mark.background
def test_a_script_that_raises_before_its_first_step_keeps_its_traceback(tmp_path):
    s = tmp_path / "boom.py"
    s.write_text("import torch\n\ndef main():\n    raise ValueError('bad config')\n\n"
                 "main()\n")
    p, _ = perflab_run(tmp_path, str(s))
    assert p.returncode == 1
    assert "ValueError: bad config" in p.stderr and 'boom.py", line 4' in p.stderr
    assert "no training step was observed: the script never called optimizer.step()" \
        in p.stderr


@pytest.mark.background
def test_a_script_with_no_step_within_the_budget_is_stopped_and_said_so(tmp_path):
    s = tmp_path / "idle.py"
    s.write_text("import time\nwhile True:\n    time.sleep(0.05)\n")
    p, _ = perflab_run(tmp_path, "--seconds", "2", str(s), timeout=60)
    assert "no step within" in p.stderr and "no training step was observed" in p.stderr


@pytest.mark.background
def test_two_optimizers_are_both_named_and_the_step_ends_at_the_first(tmp_path):
    s = tmp_path / "gan.py"
    s.write_text(
        "import torch\nfrom torch import nn\n"
        "g, d = nn.Linear(8, 8), nn.Linear(8, 1)\n"
        "og, od = torch.optim.Adam(g.parameters()), torch.optim.SGD(d.parameters(), lr=0.1)\n"
        "for i in range(200):\n"
        "    fake = g(torch.randn(16, 8))\n"
        "    ld = d(fake.detach()).mean(); od.zero_grad(); ld.backward(); od.step()\n"
        "    lg = -d(fake).mean(); og.zero_grad(); lg.backward(); og.step()\n")
    p, md = perflab_run(tmp_path, "--steps", "8", str(s))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "optimizer(s) SGD, Adam (a step ends at SGD's step)" in md
    assert "2 micro-batches (backward calls) per step" in md


def test_on_cuda_the_profiled_window_is_read_as_r02_and_the_sync_named_at_the_users_line(
        tmp_path):
    """A hand-built Kineto trace (R02's test window: an item() in the loss, twice) stands
    for the script's profiled window; the sync debug mode located the call in the loss."""
    import json

    from test_r02_step_trace import kineto

    (tmp_path / "trace.json").write_text(json.dumps(kineto()))
    ev = _evidence(_phases(forward=0.03, loss=0.025, backward=0.015, input_wait=0.02))
    ev["cuda"], ev["profile"] = True, {"trace": "trace.json"}
    ev["sync_hits"] = [{"step": 3, "phase": "loss", "site": "train.py:88: loss.item()"},
                       {"step": 4, "phase": "loss", "site": "train.py:88: loss.item()"}]
    d, _, _ = verdict.judge(ev, tmp_path)
    sync = next(f for f in d.findings if f.bottleneck == "synchronization")
    assert sync.outcome != dg.NOT_MEASURED
    assert "1x per step" in sync.because and "train.py:88: loss.item()" in sync.because
    inp = next(f for f in d.findings if f.bottleneck == "input_pipeline")
    assert "R02" in inp.because  # decided by the trace, not the hooks' submission times
    # no trace kept: the trace-based tests say what they need
    ev["profile"] = {}
    d, _, _ = verdict.judge(ev, tmp_path)
    assert next(f for f in d.findings if f.bottleneck == "synchronization"
                ).outcome == dg.NOT_MEASURED


def test_a_share_whose_interval_holds_the_threshold_is_not_decided_and_says_what_would():
    ev = _evidence(_phases(input_wait=5.0, forward=10, backward=5))
    jitter = [0.5, 18.0, 1.0, 12.0]  # input 25% of the step on average, widely spread
    observed = [r for r in ev["steps"] if r["kind"] == "observed"]
    for r, j in zip(observed, jitter * 10):
        r["phases_ms"]["input_wait"] = j
    d, _, _ = verdict.judge(ev)
    f = next(f for f in d.findings if f.bottleneck == "input_pipeline")
    assert "not decided within this budget" in f.borderline and "--steps" in f.borderline
    # the same mean, steady: decided
    d, _, _ = verdict.judge(_evidence(_phases(input_wait=30.0, forward=10, backward=5)))
    assert not next(f for f in d.findings if f.bottleneck == "input_pipeline").borderline


@pytest.mark.background
def test_a_module_run_with_dash_m_sees_its_own_argv_and_working_directory(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(
        "import os, sys\nimport torch\n"
        "print('argv', sys.argv[1:], 'cwd', os.getcwd() == os.environ['EXPECT_CWD'])\n"
        "m = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(int(sys.argv[2])):\n"
        "    loss = m(torch.randn(8, 4)).pow(2).mean()\n"
        "    opt.zero_grad(); loss.backward(); opt.step()\n")
    os.environ["EXPECT_CWD"] = str(tmp_path)
    try:
        p, md = perflab_run(tmp_path, "--steps", "4", "--", "python", "-m", "mypkg.train",
                            "--n", "500")
    finally:
        del os.environ["EXPECT_CWD"]
    assert p.returncode == 0, p.stderr[-2000:]
    assert "argv ['--n', '500'] cwd True" in p.stdout
    assert "**Verdict" in md


@pytest.mark.slow
def test_the_snakemake_rule_runs_a_script_to_its_verdict(tmp_path):
    """The script's verdict, and only it, closes the run; the chapter's report and verdict of
    an earlier run in the same directory are left as they were (a script's run measures
    none of them)."""
    from perflab.pipeline import config

    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    chapter = tmp_path / "results" / config.load([], {"device": "cpu"})["resolved_tag"]
    chapter.mkdir(parents=True)
    (chapter / "report.html").write_text("<html>an earlier chapter run</html>")
    (chapter / "diagnosis.csv").write_text("candidate,label,verdict,because\n"
                                           "optimizer,optimizer,True,planted earlier\n")
    os.utime(chapter / "report.html", (1, 1))
    script = f"--steps 4 -- {SCRIPTS / 'input_bound.py'} --epochs 1"
    p = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"),
                        "--cores", "1", "--config", f"script={script}", "device=cpu"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    md = (chapter / "run" / "diagnosis.md").read_text()
    assert "Verdict: input pipeline" in md
    assert "epoch 0 step 0" in next(tmp_path.glob("logs/*/perflab_run.log")).read_text()
    assert "perflab: verdict: input pipeline" in p.stderr, p.stderr[-1500:]
    assert "planted earlier" not in p.stderr and "claims:" not in p.stderr
    assert (chapter / "report.html").is_file()  # not the script's to remove


def test_the_script_starts_at_the_double_dash_or_at_the_first_plain_word():
    assert run.split_argv(["--steps", "5", "train.py", "--epochs", "1"]) == (
        ["--steps", "5"], ["train.py", "--epochs", "1"])
    assert run.split_argv(["--follow", "--", "python", "-m", "pkg.train", "--steps", "3"]) == (
        ["--follow"], ["python", "-m", "pkg.train", "--steps", "3"])
    assert run.command_of(["python3", "-m", "pkg.train"]) == ["-m", "pkg.train"]


@pytest.mark.background
def test_a_script_that_never_steps_an_optimizer_is_measured_per_forward_and_says_so(tmp_path):
    s = tmp_path / "infer.py"
    s.write_text("import torch\nm = torch.nn.Linear(64, 10).eval()\nwith torch.no_grad():\n"
                 "    for i in range(100000):\n        y = m(torch.randn(32, 64))\n")
    p, md = perflab_run(tmp_path, "--steps", "4", str(s))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "per forward (no optimizer step was observed" in md


#: a script that raises at its 41st step (also tests/test_attach_report.py's)
CRASH = ("import torch\nm = torch.nn.Linear(8, 1)\n"
         "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
         "for i in range(10000):\n"
         "    loss = m(torch.randn(4, 8)).pow(2).mean()\n"
         "    opt.zero_grad(); loss.backward(); opt.step()\n"
         "    if i == 40:\n        raise RuntimeError('diverged')\n")


@pytest.mark.background
def test_a_script_that_raises_mid_run_is_judged_on_the_steps_before(tmp_path):
    s = tmp_path / "crash.py"
    s.write_text(CRASH)
    p, md = perflab_run(tmp_path, "--steps", "1000", str(s))
    assert p.returncode == 1
    assert "RuntimeError: diverged" in p.stderr and "raised RuntimeError: diverged" in p.stderr
    assert "**Verdict" in md and "41 observed" in md


def test_an_unresolved_cost_says_which_test_held_it_back():
    """A 95 % interval clear of 0 beside "p=0.062, not resolved" read as a contradiction: the
    line says the call needs the test and the interval both, or that the floor held it."""
    from perflab.attach import run as runmod

    assert "p=0.062 >= 0.05" in runmod._unresolved_why(0.062)
    assert "interval or the A/A floor" in runmod._unresolved_why(0.01)


def test_the_terminal_shows_the_verdict_first_on_one_screen():
    """A newcomer's `perflab run` printed diagnosis.md whole (51 lines, the verdict under 12
    bullets): the terminal keeps the verdict, its runner-up, the next intervention and the
    run's steps, phases and stop, verdict first; the candidates' table and evidence rows stay
    in the file."""
    md = "\n".join([
        "# perflab run: train.py", "", "- **Steps**: per optimizer step; 40 timed",
        "- **Time**: 14.3 s in all", "- **Phases** (mean ms per step): input_wait 14.1 (28%)",
        "- **Memory owners**: parameters 0.4 MiB", "- **Stopped**: decided after 51 steps", "",
        "## What is the machine waiting for?", "", "**Verdict: input pipeline** — 28.3%.", "",
        "Evidence:", "- `E05 sync/input_wait phase_share value` = 28.2 %", "",
        "Also fits, later in the order: device compute.", "",
        "**Next intervention:** train.py:82: loader = DataLoader(...)", "",
        "| candidate | outcome | because |", "| --- | --- | --- |",
        "| optimizer | ruled out | 2.4% |"])
    out = run.screen(md).splitlines()
    assert out[0].startswith("**Verdict: input pipeline**"), out
    assert out[1].startswith("Also fits") and out[2].startswith("**Next intervention:**")
    assert [t.split("**")[1] for t in out if t.startswith("- **")] == [
        "Steps", "Phases", "Stopped"]
    assert not any(t.startswith(("|", "Evidence", "- `E05", "- **Memory")) for t in out), out
    assert "Verdict:** none drawn" in run.screen("# perflab run: x\n\n- **Steps**: 0")
