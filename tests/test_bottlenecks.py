"""The verdict on workloads whose bottleneck is known by construction (examples/bottlenecks/).

Each case is diagnosed on this CPU as ``perflab diagnose`` diagnoses it — the same
scripts under the same contract (config/diagnose.yaml over the tiny test contract), run
in this process rather than each in a fresh one, for speed — with the experiments its
verdict needs only. Where the mechanism exists on a CPU (a slow loader, a per-tensor
optimizer, compute- vs bandwidth-bound arithmetic) the verdict must name it; where it
needs a device queue (a step that syncs, a host that cannot launch fast enough) the test
asserts the honest CPU answer. One case (the slow loader) runs through the command line end
to end instead, marked slow.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest
from experiments import run_tiny

from perflab import cli
from perflab.core import io
from perflab.pipeline import config
from perflab.views import diagnose

ROOT = config.ROOT
EXAMPLES = ROOT / "examples"
TEST_CONFIG = ROOT / "config" / "test.yaml"
#: R01's ceilings on realistic sizes: the tiny contract's 1 MiB copy is served from cache
#: and its 32/64 matmuls are far from this CPU's rate, so its ridge point is not this CPU's
CEILINGS = dict(matmul_sizes=[256, 512], dtypes=["float32"], copy_mib=64, target_ms=2.0,
                repeats=5)


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def verdict(case: str, run: str, tmp_path) -> diagnose.Diagnosis:
    """The diagnosis of ``bottlenecks.<case>:make_step`` from experiments ``run`` on the CPU."""
    target = f"bottlenecks.{case}:make_step"
    cfg = config.load([cli.DIAGNOSE_CONFIG, TEST_CONFIG],
                      {"device": "cpu", "workload": target, "run": run})

    def patch(contract):
        if contract["experiment"] == "R01":
            contract["params"].update(CEILINGS)

    csvs = [run_tiny(cfg, eid, tmp_path / eid, patch=patch)[1]["csv"]
            for eid in run.split(",")]
    return diagnose.diagnose(io.read_results(csvs))


def finding(d: diagnose.Diagnosis, name: str) -> diagnose.Finding:
    return next(f for f in d.findings if f.bottleneck == name)


def _why(d):
    return [(f.bottleneck, f.outcome, f.because) for f in d.findings]


def test_a_per_tensor_optimizer_over_many_small_parameters_is_the_optimizer(tmp_path):
    d = verdict("many_params", "E05", tmp_path)
    assert d.verdict == "optimizer", _why(d)


@pytest.mark.parametrize("case, expected", [("big_matmuls", "device_compute"),
                                            ("elementwise", "memory_bandwidth")])
def test_large_matmuls_are_compute_and_elementwise_chains_bandwidth(case, expected, tmp_path):
    d = verdict(case, "E05,R01", tmp_path)
    assert d.verdict == expected, _why(d)
    assert finding(d, "host_overhead").outcome == diagnose.RULED_OUT


def test_tiny_kernels_on_a_cpu_are_operator_overhead_without_a_device_queue(tmp_path):
    """No device queue to wait on here: what the CPU shows is the per-operator cost filling
    the step (forward + backward far below both ceilings), said as such."""
    d = verdict("tiny_kernels", "E05,R01", tmp_path)
    assert d.verdict == "host_overhead", _why(d)
    assert "no device queue observable here" in d.because
    assert [e.source for e in d.evidence] == ["R01 phase/forward_backward roofline_fraction median"]


def test_a_syncing_loss_on_a_cpu_is_not_called_a_sync(tmp_path):
    """The loss reads the device on the host per class and for NaN; on a CPU there is no
    device to wait for, so the verdict is not synchronization, and it says why."""
    d = verdict("syncing_loss", "E05,R01,R02", tmp_path)
    sync = finding(d, "synchronization")
    assert d.verdict != "synchronization"
    assert sync.outcome == diagnose.RULED_OUT and "no device queue" in sync.because


@pytest.mark.slow
@pytest.mark.background
def test_perflab_diagnose_names_the_slow_loader(tmp_path):
    """The command line end to end: pre-flight, Snakemake (E05 and R02, each a fresh
    process; W01's what-if step left out, tests/test_w01_whatif.py runs it), the diagnosis
    alone (no report), the verdict printed. The slow loader's only
    test (its E05 is not run a second time in this process)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-m", "perflab", "diagnose", "bottlenecks.slow_loader:make_step",
         "--device", "cpu", "--run", "E05,R02", "--no-whatif", "--configfile", str(TEST_CONFIG),
         "--directory", str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "**Verdict: input pipeline**" in proc.stdout
    assert "no device queue" in proc.stdout  # R02 on a CPU, in the sync candidate's row
    results = next((tmp_path / "results").glob("*slow_loader*"))
    rows = pd.read_csv(results / "diagnosis.csv", keep_default_na=False)
    cited = rows[rows.verdict.astype(str) == "True"].source
    assert cited.str.startswith("E05 sync/input_wait").any(), list(cited)
    assert (results / "r02_step_trace_trace.json.gz").stat().st_size > 0
    assert not (results / "report.html").exists()  # the diagnosis alone, by default
    assert proc.stderr.count("builds and steps") == 1  # one pre-flight, not two


def _recompiling(tmp_path, monkeypatch, **params) -> diagnose.Diagnosis:
    """E05 on examples/bottlenecks/recompiling.py (Dynamo with the eager backend: the same
    guards and recompiles as Inductor's, without its seconds of codegen per graph)."""
    import torch

    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 8)
    torch._dynamo.reset()
    cfg = config.load([cli.DIAGNOSE_CONFIG, TEST_CONFIG], {"device": "cpu", "run": "E05"})
    spec = {"target": "bottlenecks.recompiling:make_step",
            "params": {"backend": "eager", "recompile_limit": 4, **params}}

    def patch(contract):
        contract["workload"], contract["workloads"] = "recompiling", {"recompiling": spec}

    try:
        _, out = run_tiny(cfg, "E05", tmp_path, patch=patch)
    finally:
        torch._dynamo.reset()
    return diagnose.diagnose(io.read_results([out["csv"]]))


def test_a_step_that_recompiles_every_length_is_the_compiler(tmp_path, monkeypatch):
    """A new sequence length each step under dynamic=False: past the recompile limit the step
    runs eager. The verdict is the compiler, naming the dimension and the fix."""
    d = _recompiling(tmp_path, monkeypatch)
    assert d.verdict == "compiler", _why(d)
    assert "recompile limit" in d.because and "dimension 1" in d.because, d.because
    assert "dynamic=True" in d.intervention or "bucketed padding" in d.intervention
    rows = io.read_results([tmp_path / "e05.csv"])
    job = rows[rows.variant == "compiler/job"].set_index("metric")
    assert job.value["recompiles"] >= 3 and job.value["eager_fallback"] == 1
    assert set(job.execution) == {"eager: a frame hit Dynamo's recompile limit and runs "
                                  "uncompiled"}


def test_a_step_compiled_once_is_not_the_compiler(tmp_path, monkeypatch):
    """The same model fed one length: compiled once, never again, no fallback."""
    d = _recompiling(tmp_path, monkeypatch, lengths=1)
    comp = finding(d, "compiler")
    assert comp.outcome == diagnose.RULED_OUT and d.verdict != "compiler", _why(d)


def test_the_preflight_sets_compiling_steps_apart_from_the_steady_step(monkeypatch):
    """The recompiling example in the pre-flight: the steps that compiled (or met the
    recompile limit) are not timed as steady steps; with every timed step compiling there is
    no step time at all, never one made of compile time."""
    import torch

    from perflab.pipeline import preflight

    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 8)
    spec = {"device": "cpu", "target": "bottlenecks.recompiling:make_step", "tag": "t",
            "dtype": "float32", "params": {"backend": "eager", "recompile_limit": 4}}
    torch._dynamo.reset()
    try:
        got = preflight.measure_step(spec)  # 1 untimed + 5 timed: 3 recompile, 1 hits the limit
        assert got["compile_steps"] == 4 and got["step_ms"] is not None, got
        assert got["compiler"]["eager_fallback"] and "eager" in got["eager_note"]
        torch._dynamo.reset()
        monkeypatch.setattr(preflight, "TIMED_STEPS", 2)  # every timed step recompiles
        got = preflight.measure_step({**spec, "params": {"backend": "eager"}})
        assert got["step_ms"] is None and "never from compile time" in got["no_steady_step"]
        # under --budget it steps on until steady steps come (the recompile limit makes the
        # step eager), so the split has a step time; its compiling is each job's start
        torch._dynamo.reset()
        monkeypatch.setenv(preflight.PROBE_ENV, "1")
        monkeypatch.setattr(preflight, "probe_instruments", lambda *a: {})
        got = preflight.measure_step({**spec, "params": {"backend": "eager"}})
        assert got["step_ms"] is not None and got["stepped"] > 1 + preflight.TIMED_STEPS, got
        assert got["compiler"]["eager_fallback"]
        from perflab.pipeline import budget
        # a fork's start: its probe (0 here), the first check (it holds the first compile,
        # which the second check, from a warm cache, does not) and the rest of the compiling
        assert "check_warm_s" in got
        assert budget.start_s(got, 0.0, True, 0.0) == pytest.approx(
            got["check_s"] + got["compiler"]["compile_s"])
    finally:
        torch._dynamo.reset()
