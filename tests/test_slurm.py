"""The SLURM profile against a real slurmctld: a single-node cluster on localhost.

Installs Debian's slurmctld, slurmd and munge (as root; skipped, with the reason,
where that cannot be done), starts one node with a fake GPU, submits a reduced
workflow (E01 and E03 at the tiny contract, then the ledger, figures and report)
through snakemake-executor-plugin-slurm with workflow/profiles/slurm, and checks:
the two experiments were SLURM jobs that asked for and got one GPU; the
aggregation rules ran on the submit host; the report was built; and teardown
leaves no daemon running. About 75 s on an idle 2-core machine (the cluster itself
starts in under a second; the rest is Snakemake, the two jobs and the report).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from perflab.experiments.catalogue import EXPERIMENTS

sys.path.insert(0, str(Path(__file__).resolve().parent))
import slurm_cluster  # noqa: E402
from workflow_rules import rule_names  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TAG = "slurm-tiny"
EXPERIMENTS_RUN = ("E01", "E03")
#: seconds the whole submission may take before the test gives up (it hangs, not fails,
#: when the status command cannot see jobs finish: see tests/slurm_cluster.py)
SUBMIT_TIMEOUT_S = 900



# ---------------------------------------------------------------- the profile itself (no SLURM)


def test_slurm_profile_covers_every_rule():
    profile = yaml.safe_load((ROOT / "workflow" / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["executor"] == "slurm"
    # defaults reach every rule, including ones added later
    assert {"mem_mb", "runtime"} <= set(profile["default-resources"])
    rules = rule_names()
    # a rule renamed without its override would silently lose it
    assert set(profile["set-resources"]) <= rules, set(profile["set-resources"]) - rules
    # the same defaults as the one it replaces
    default = yaml.safe_load((ROOT / "profiles" / "default" / "config.yaml").read_text())
    for key in ("rerun-incomplete", "show-failed-logs"):
        assert profile[key] == default[key]


def test_aggregation_rules_are_local():
    text = (ROOT / "workflow" / "rules" / "report.smk").read_text()
    block = text.split("localrules:", 1)[1].split("\n\n", 1)[0]
    local = {n.strip(" ,") for n in block.split() if n.strip(" ,")}
    # every rule that only reads result files: all but the experiments (and E20's warm job,
    # E09's snapshot job), which need the GPU node
    aggregation = {"ledger", "figures", "report_html", "e08_batch_sweep", "claims", "diagnosis",
                   "compare"}
    assert aggregation <= local, aggregation - local
    assert local <= rule_names()
    assert not any(r.startswith("e") and r[1:3].isdigit() and r != "e08_batch_sweep"
                   for r in local), "an experiment must not run on the submit host"


def test_the_data_parallel_job_is_one_slurm_job_of_n_tasks():
    """D01's resources, as the SLURM executor turns them into sbatch options (no cluster)."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    from perflab.experiments.d01_data_parallel.distributed import Plan, job_resources

    class Resources(dict):
        __getattr__ = dict.__getitem__

    params = {"run_uuid": "u", "slurm_logfile": "log", "comment_str": "c", "account": "",
              "partition": "", "workdir": "/w"}
    for plan, gpus, want in (
            (Plan(4, "nccl", 2, "cuda"), True,
             {"--nodes=1", "--ntasks=4", "--ntasks-per-gpu=1", "--cpus-per-task=2", "--gpus=4"}),
            (Plan(2, "gloo", 1, "cpu"), False, {"--nodes=1", "--ntasks=2", "--cpus-per-task=1"})):
        res = Resources(mem_mb=8000, runtime=60, **job_resources(plan, gpus=gpus))
        job = SimpleNamespace(resources=res, threads=plan.rank_threads)
        call = (get_submit_command(job, params) + set_gres_string(job)).split()
        assert want <= set(call), call
        # the job runs its own launcher in the allocation (no `srun -n1` around it)
        assert "mpi" in res


# ---------------------------------------------------------------- a real cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pytest.importorskip(
        "snakemake_executor_plugin_slurm",
        reason="snakemake-executor-plugin-slurm is not installed (pip install -e '.[test]')",
    )
    reason = slurm_cluster.why_unavailable()
    if reason:
        pytest.skip(f"no local SLURM: {reason}")
    try:
        slurm_cluster.install()
    except slurm_cluster.Unavailable as exc:
        pytest.skip(f"no local SLURM: {exc}")
    c = slurm_cluster.Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        c.start()
        yield c
    finally:
        # jobs still queued or running (a failed test) go first, then the daemons
        subprocess.run(["scancel", "--user", "root"], capture_output=True, timeout=30)
        c.stop()


@pytest.fixture(scope="module")
def submitted(cluster, tmp_path_factory):
    """One workflow run through SLURM; (work dir, combined output, wall seconds)."""
    work = tmp_path_factory.mktemp("slurm-run")
    # the site's partition, set as the README says: in a copy of the profile
    profile = yaml.safe_load((ROOT / "workflow" / "profiles" / "slurm" / "config.yaml").read_text())
    profile["default-resources"]["slurm_partition"] = slurm_cluster.GPU_PARTITION
    profile_dir = tmp_path_factory.mktemp("profile")
    (profile_dir / "config.yaml").write_text(yaml.safe_dump(profile))
    cmd = [
        sys.executable, "-m", "snakemake",
        "-s", str(ROOT / "Snakefile"),
        "--directory", str(work),
        "--workflow-profile", str(profile_dir),
        "--configfile", str(ROOT / "config" / "test.yaml"),
        "--config", "device=cpu", f"run={','.join(EXPERIMENTS_RUN)}", "gpu_jobs=true",
        f"tag={TAG}",
        # the test cluster: no accounts, no sacct (squeue sees jobs for MinJobAge)
        "--slurm-no-account",
        "--slurm-status-command", "squeue",
        "--slurm-init-seconds-before-status-checks", "1",
        "--latency-wait", "5",
        "--jobs", "2",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    t0 = time.monotonic()
    # its own process group: on a hang, the whole of it is ended (by its pgid)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=SUBMIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"snakemake hung past {SUBMIT_TIMEOUT_S} s:\n{out[-6000:]}\n{cluster.logs()}")
    wall = time.monotonic() - t0
    print(f"SLURM workflow run: {wall:.0f} s")
    assert proc.returncode == 0, out[-8000:] + "\n" + cluster.logs()
    return work, out, wall


def _jobs(out: str) -> dict[str, str]:
    """rule name -> SLURM job id, from Snakemake's 'submitted with SLURM jobid' lines."""
    found = re.findall(r"submitted with SLURM jobid (\d+) \(log: \S*/rule_([A-Za-z0-9_]+)/", out)
    return {rule: jobid for jobid, rule in found}


@pytest.mark.slurm
def test_experiments_were_slurm_jobs_and_aggregation_ran_locally(submitted):
    _, out, _ = submitted
    jobs = _jobs(out)
    assert set(jobs) == {EXPERIMENTS[e].slug for e in EXPERIMENTS_RUN}, out[-4000:]
    for rule in ("ledger", "figures", "report_html"):
        assert f"localrule {rule}:" in out, f"{rule} did not run on the submit host"


@pytest.mark.slurm
def test_gpu_jobs_requested_and_got_a_gpu(submitted, cluster):
    _, out, _ = submitted
    for rule, jobid in _jobs(out).items():
        info = cluster.job(jobid)
        assert "JobState=COMPLETED" in info, info
        assert "TresPerJob=gres:gpu:1" in info, f"{rule} asked for no GPU:\n{info}"
        # allocated, not only asked for: the node's one GPU was the job's
        assert "JOB_GRES=gpu:1" in info, f"{rule} got no GPU:\n{info}"
        # the partition the profile names, not the cluster's default
        assert "Partition=" + slurm_cluster.GPU_PARTITION in info, info


@pytest.mark.slurm
def test_results_and_report_came_back(submitted):
    work, _, _ = submitted
    results = work / "results" / TAG
    for eid in EXPERIMENTS_RUN:
        assert (results / f"{EXPERIMENTS[eid].slug}.csv").stat().st_size > 0
    html = (results / "report.html").read_text()
    for eid in EXPERIMENTS_RUN:
        assert EXPERIMENTS[eid].title in html
    assert "PERFORMANCE LEDGER" in (results / "ledger.md").read_text()


@pytest.mark.slurm
def test_teardown_leaves_nothing_running(submitted, cluster):
    pids = dict(cluster.pids)
    assert {"slurmctld", "slurmd"} <= set(pids)
    subprocess.run(["scancel", "--user", "root"], capture_output=True, timeout=30)
    assert cluster.stop() == []
    for name, pid in pids.items():
        assert not slurm_cluster._alive(pid), f"{name} ({pid}) still running"
    assert not (slurm_cluster.CONF_DIR / "slurm.conf").exists()
    # no job step outlived its daemon
    steps = [p for p in Path("/proc").iterdir() if p.name.isdigit()
             and _comm(p) == "slurmstepd"]
    assert not steps, f"slurmstepd still running: {[p.name for p in steps]}"


def _comm(proc_dir: Path) -> str:
    try:
        stat = (proc_dir / "stat").read_text()
    except OSError:
        return ""
    return "" if stat.split(")")[-1].split()[0] == "Z" else (proc_dir / "comm").read_text().strip()
