"""Failure handling through Snakemake, on the tiny contract.

- An experiment that raises, runs out of memory, or is killed leaves no result
  file, and the next run completes it (tests/failing_workload.py injects each, all
  three in one run with --keep-going, each into its own experiment's job).
- With --keep-going, the report is still built, and names each failed
  experiment with its log's last lines.
- The whole run killed mid-job (the node lost): after `snakemake --unlock`, the
  rerun completes, because the default profile reruns incomplete jobs.
- Bad configuration stops `snakemake` (a real run, not a dry run) with one
  message naming the key, before any job starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from perflab.core import io
from perflab.experiments.catalogue import EXPERIMENTS

ROOT = Path(__file__).resolve().parents[1]
TAG = "failures"
FAILING = "E01"  # the experiment made to fail
OTHER = "E04"  # one that keeps working beside it
SLUG = EXPERIMENTS[FAILING].slug

pytestmark = pytest.mark.slow


def _config(work: Path) -> Path:
    """The tiny contract with the controlled workload built by tests/failing_workload.py."""
    cfg = {
        "tag": TAG,
        "device": "cpu",
        "workload": "broken",
        "workloads": {"broken": {"target": "failing_workload:make", "dim": 64, "depth": 2,
                                 "num_classes": 10, "batch": 16}},
    }
    path = work / "failing.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _env(fail: str = "", only: str = "") -> dict:
    env = {**os.environ, "PERFLAB_TEST_FAIL": fail, "PERFLAB_TEST_FAIL_ONLY": only}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH")) if p)
    return env


def _cmd(work: Path, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "snakemake",
        "-s", str(ROOT / "Snakefile"),
        "--directory", str(work),
        "--configfile", str(ROOT / "config" / "test.yaml"), str(_config(work)),
        "--cores", "1",
        *args,
    ]


def snakemake(work: Path, *args: str, fail: str = "", only: str = "",
              timeout: int = 900) -> tuple[int, str]:
    proc = subprocess.run(_cmd(work, *args), capture_output=True, text=True,
                          env=_env(fail, only), timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def _outputs(work: Path, eid: str) -> list[Path]:
    d = work / "results" / TAG
    slug = EXPERIMENTS[eid].slug
    return [d / f"{slug}.csv", d / f"{slug}_samples.csv", d / f"{slug}.json"]


def _assert_completed(work: Path, eid: str) -> None:
    frame = io.read_results([_outputs(work, eid)[0]])  # validates the contract
    assert set(frame.experiment) == {eid}
    assert (frame.status == "ok").any()


#: (experiment, fault injected into its job, what its log must show); one run injects all
#: three, each into its own job, beside OTHER, which keeps working
FAULTS = [
    (FAILING, "raise", "injected failure: the experiment raised"),
    ("E06", "oom", "OutOfMemoryError"),
    ("E07", "kill", "injecting 'kill'"),
]


@pytest.mark.background
def test_failed_experiments_leave_no_result_the_report_names_them_and_a_rerun_completes(
        tmp_path):
    """An experiment that raises, runs out of memory or is killed leaves no result file; with
    --keep-going the others still run and the report is built, naming each failure with its
    log's last lines; the next run (fixed) completes them and rebuilds the report in full."""
    run = f"run={','.join([e for e, _, _ in FAULTS] + [OTHER])}"
    fail = ",".join(f"{EXPERIMENTS[e].slug}={mode}" for e, mode, _ in FAULTS)
    rc, out = snakemake(tmp_path, "--keep-going", "--config", run, fail=fail)
    assert rc != 0, out
    results = tmp_path / "results" / TAG
    for eid, mode, evidence in FAULTS:
        slug = EXPERIMENTS[eid].slug
        assert f"Error in rule {slug}" in out, (mode, out[-4000:])
        assert f"perflab: {eid} failed" in out, (mode, out[-4000:])
        for f in _outputs(tmp_path, eid):
            assert not f.exists(), f"{mode}: {f.name} left behind"
        log = tmp_path / "logs" / TAG / f"{slug}.log"
        assert evidence in log.read_text(), (mode, log.read_text())
    _assert_completed(tmp_path, OTHER)
    html = (results / "report.html").read_text()
    assert "This run did not finish" in html
    for eid in [e for e, _, _ in FAULTS] + [OTHER]:
        assert EXPERIMENTS[eid].title in html, eid
    # the failed experiments: their status and the last lines of their logs
    assert html.count("<strong>failed</strong>") >= len(FAULTS)
    assert "injected failure: the experiment raised" in html
    # the working one: its table and figure
    assert "data:image/png;base64," in html
    # fixed: the next run completes them and rebuilds the report in full
    rc, out = snakemake(tmp_path, "--config", run)
    assert rc == 0, out[-4000:]
    for eid, _, _ in FAULTS:
        _assert_completed(tmp_path, eid)
    html = (results / "report.html").read_text()
    assert "This run did not finish" not in html
    assert "injected failure" not in html


@pytest.mark.background
def test_run_killed_mid_job_is_rerun(tmp_path):
    """SIGKILL to the whole run while a job measures: no result, and the rerun completes."""
    rule = SLUG
    log = tmp_path / "logs" / TAG / f"{SLUG}.log"
    proc = subprocess.Popen(_cmd(tmp_path, rule, "--config", "run=E01"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=_env("hang"), start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if log.is_file() and "injecting 'hang'" in log.read_text():
                break
            assert proc.poll() is None, "the run ended before the job hung"
            time.sleep(0.5)
        else:
            pytest.fail("the job never started")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its job, as a lost node would
        proc.wait()
    for f in _outputs(tmp_path, FAILING):
        assert not f.exists(), f"{f.name} left behind"
    # Snakemake's own record: the job's outputs are marked incomplete
    assert any((tmp_path / ".snakemake" / "incomplete").rglob("*")), "no incomplete marker"
    # the killed run's lock stays (Snakemake cannot tell a dead run from a live one)
    rc, out = snakemake(tmp_path, rule, "--config", "run=E01")
    assert rc != 0 and "--unlock" in out, out[-3000:]
    rc, out = snakemake(tmp_path, "--unlock", "--config", "run=E01")
    assert rc == 0, out[-3000:]
    # the default profile's rerun-incomplete: the marked job simply runs again
    rc, out = snakemake(tmp_path, rule, "--config", "run=E01")
    assert rc == 0, out[-4000:]
    _assert_completed(tmp_path, FAILING)


# (config patch, key the one message must name)
BAD_CLI = [
    ({"bogus": 1}, "bogus"),
    ({"run": "E01,E99"}, "run"),
    ({"timing": {"repeats": 0}}, "timing.repeats"),
    ({"gpu_jobs": "maybe"}, "gpu_jobs"),
    ({"results_dir": str(ROOT / "README.md")}, "results_dir"),
]


@pytest.mark.parametrize("patch, key", BAD_CLI, ids=[k for _, k in BAD_CLI])
def test_bad_config_stops_a_real_run_before_any_job(tmp_path, patch, key):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(patch))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
         "--directory", str(tmp_path), "--cores", "1",
         "--configfile", str(ROOT / "config" / "test.yaml"), str(bad), "--config", "device=cpu"],
        capture_output=True, text=True, timeout=300, env=_env(),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert out.count("config error at ") == 1, out
    assert f"config error at '{key}'" in out, out
    assert "Select jobs to execute" not in out and "rule e0" not in out, out
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()


def test_failures_tell_failed_from_incomplete_from_not_run(tmp_path):
    """A run stopped mid-way (the H200 case): E08's batches that finished and E20's cold job
    are not failures; only a job that left a log and no result failed."""
    from perflab.views import partial

    cfg = {"results_dir": str(tmp_path / "results"), "resolved_tag": TAG}
    results, logs = tmp_path / "results" / TAG, tmp_path / "logs" / TAG
    since = time.time()
    for sub, names in (("e08_batch_sweep", ("b32", "b64")), ("e20_compile_cache", ("cold",))):
        (results / sub).mkdir(parents=True)
        (logs / sub).mkdir(parents=True, exist_ok=True)
        for name in names:
            (logs / sub / f"{name}.log").write_text(f"{name} ran\n")
            (results / sub / f"{name}.csv").write_text("x\n")
    (logs / "e13_sync_tax.log").write_text("KeyboardInterrupt\n")  # stopped mid-job
    (logs / "e08_batch_sweep" / "b128.log").write_text("CUDA error\n")  # one batch failed
    got = partial.failures(cfg, ["E08", "E13", "E20", "E21"], logs, since)
    assert {eid: f["status"] for eid, f in got.items()} == {
        "E08": "failed", "E13": "failed", "E20": "incomplete", "E21": "not run"}
    assert got["E08"]["log"].endswith("b128.log") and "CUDA error" in got["E08"]["excerpt"]
    assert "cold" in got["E20"]["excerpt"] and not got["E20"]["log"]
    # with the failed batch removed, E08 too only did not finish
    (logs / "e08_batch_sweep" / "b128.log").unlink()
    assert partial.failures(cfg, ["E08"], logs, since)["E08"]["status"] == "incomplete"
