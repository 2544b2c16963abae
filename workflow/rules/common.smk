# Helpers shared by the workflow's .smk files: the validated configuration,
# output paths and per-experiment contracts, computed here and nowhere else.
import glob
import json
import os
import sys
import tempfile

from snakemake.exceptions import WorkflowError

# the package imports here even before `pip install -e .`; so do the jobs, which
# inherit this environment (locally, in a conda env of --sdm conda, through sbatch
# on a cluster): they import this checkout's perflab, not another installed copy
sys.path.insert(0, workflow.basedir)
from perflab.pipeline import config as perflab_config  # noqa: E402
from perflab.views import reference as perflab_reference  # noqa: E402
from perflab.experiments.catalogue import EXPERIMENTS  # noqa: E402

perflab_config.export_import_path(workflow.basedir)

try:
    # Snakemake has read the config files already, but keeps a key given twice silently:
    # read again strictly (a duplicate names its file and line). What the user set
    # (their files and --config) is a layer a scale never overrides.
    perflab_config.load_yaml(perflab_config.DEFAULT_CONFIG)
    USER_CONFIG = perflab_config.user_layer(
        workflow.config_settings.configfiles, dict(workflow.config_settings.config)
    )
    # submitting to a cluster (not a job on its node): the GPU is on the nodes, not here
    RUN = perflab_config.resolve(
        config,
        check_device=workflow.local_exec or workflow.remote_exec,
        user=USER_CONFIG,
    )
except perflab_config.ConfigError as exc:
    raise WorkflowError(str(exc)) from None
if RUN["scale_kept"] and not workflow.remote_exec:
    print(
        f"perflab: scale {RUN['resolved_scale']} sets defaults, not your values; kept: "
        + "; ".join(
            f"{k}={v['yours']!r} (the scale's: {v['scale']!r})"
            for k, v in RUN["scale_kept"].items()
        )
        + " (recorded as scale_kept in each affected contract)",
        file=sys.stderr,
    )

TAG = RUN["resolved_tag"]
RESULTS = f"{RUN['results_dir']}/{TAG}"
LOGS = f"logs/{TAG}"


def exp_outputs(eid):
    """csv, samples and provenance paths of experiment `eid`."""
    return perflab_config.experiment_outputs(RUN, eid)


def exp_log(eid, k=1):
    return f"{LOGS}/{EXPERIMENTS[eid].slug}" + (f"_p{k}" if k > 1 else "") + ".log"


def process_outputs(eid, k):
    """csv, samples and provenance of further process `k` of `eid` (claim_processes)."""
    return perflab_config.process_outputs(RUN, eid, k)


def selected_process_files(kind):
    """The further processes' files (`kind`: csv or samples) the claims job reads."""
    return [process_outputs(e, k)[kind] for e, k in perflab_config.process_jobs(RUN)]


def exp_contract(eid):
    """The config slice the job depends on (a change to it reruns the job)."""
    return perflab_config.contract(RUN, eid)


ENV = "../../envs/perflab.yaml"


def exp_script(eid):
    return f"../../scripts/{EXPERIMENTS[eid].slug}.py"


def gpu_request():
    """GPU jobs ask for one GPU, so a multi-core run never shares it between two timing jobs.

    `gpu_jobs: true` asks for one whatever the device (a cluster whose submit host has none).
    """
    want = RUN.get("gpu_jobs", "auto")
    if want == "auto":
        return 1 if RUN["resolved_device"].startswith("cuda") else 0
    return int(want in (True, "true"))


def timing_threads():
    """A timing job takes every core it is given: two timing jobs never overlap locally.

    On a cluster (submitting, or a job on its node) --cores means nothing to a job:
    each asks for `threads` cores (1 when auto), the same number on both sides.
    """
    if workflow.non_local_exec or workflow.remote_exec:
        return RUN["threads"] if isinstance(RUN["threads"], int) else 1
    try:
        return workflow.cores
    except WorkflowError:  # no --cores given (e.g. --report): nothing will run
        return 1


def selected():
    return RUN["resolved_experiments"]


def selected_csvs():
    return [exp_outputs(e)["csv"] for e in selected()]


def selected_samples():
    return [exp_outputs(e)["samples"] for e in selected()]


def figure_path(eid):
    return perflab_config.figure_outputs(RUN, eid)["png"]


def figure_plan():
    """What the figures job draws: each selected experiment's rows, samples, PNG, caption."""
    return perflab_config.figure_plan(RUN, selected())


def figure_reports():
    """The figures job's PNGs, each marked for `snakemake --report`.

    Its caption is the experiment's figure() docstring, which the job writes beside the
    PNG (so the caption is the drawing code's own); its category is its chapter section.
    The caption path is absolute: Snakemake resolves a relative one from this file.
    """
    return {
        EXPERIMENTS[e].slug: report(
            f["png"],
            caption=os.path.abspath(f["caption"]),
            category=perflab_reference.section(e),
            labels={"experiment": e, "title": EXPERIMENTS[e].title},
        )
        for e in selected()
        for f in [perflab_config.figure_outputs(RUN, e)]
    }


def reference_inputs():
    """The chapter's numbers and any shipped reference run the report sets beside this run."""
    root = os.path.join(workflow.basedir, "report", "reference")
    return sorted(
        glob.glob(os.path.join(root, "chapter.*"))
        + glob.glob(os.path.join(root, "*", "run.json"))
    )


def final_outputs():
    # `--config script="train.py --epochs 1"`: that script's verdict alone
    if RUN["script"]:
        return [f"{RESULTS}/run/diagnosis.md"]
    return [
        f"{RESULTS}/ledger.md",
        f"{RESULTS}/claims.csv",
        f"{RESULTS}/report.html",
        f"{RESULTS}/diagnosis.md",
        *[figure_path(e) for e in selected()],
        *compare_outputs(),
        *memory_snapshot_outputs(),
    ]


def compare_outputs():
    """The cross-run comparison (rule `compare`) when `compare_to` names a directory."""
    return [f"{RESULTS}/compare/summary.md"] if RUN["compare_to"] else []


# The memory snapshot (the escalation tool): one HTML page beside the report, when E09
# runs with `snapshot: true`.
def memory_snapshot_path():
    return f"{RESULTS}/memory_snapshot.html"


def memory_snapshot_outputs():
    if "E09" in selected() and exp_contract("E09")["params"].get("snapshot", False):
        return [memory_snapshot_path()]
    return []


# A run that failed (with --keep-going: after everything else that could run) still
# gets its report when the report was asked for: the experiments that have results,
# and each that has none named failed, with its log's last lines (perflab/views/partial.py).
import time

RUN_STARTED = time.time()


def partial_report():
    if workflow.remote_exec:
        return
    target = f"{RESULTS}/report.html"
    try:
        wanted = {str(f) for f in workflow.dag.derived_targetfiles}
    except Exception:
        wanted = set()
    from perflab.views import partial

    # not asked for: still, an earlier run's report must not outlive its results
    if target not in wanted:
        partial.retire_stale_report(RUN, selected(), RUN_STARTED)
        return

    try:
        partial.build(RUN, selected(), LOGS, RUN_STARTED, workflow.basedir)
    except Exception as exc:
        print(
            f"perflab: partial report failed: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )


# Before the first job (never in a dry run, nor when nothing is to be done): temps left by
# jobs killed mid-write are removed, the controlled workload is built and stepped in a
# child process (`perflab check`'s pre-flight, then a few timed full-batch steps), and the
# measurement time of the jobs about to run is estimated (perflab/pipeline/preflight.py). A failure
# is one message, and no job starts.
from perflab.pipeline import preflight as perflab_preflight  # noqa: E402


def before_first_job():
    if workflow.remote_exec:
        return
    local = getattr(workflow, "_localrules", set())
    contracts = [
        job.params.contract
        for job in workflow.dag.needrun_jobs()
        if "contract" in job.params.keys() and job.rule.name not in local
    ]
    if contracts:  # its imports overlap the pre-flight
        start_fork_server()
    perflab_preflight.before_first_job(RUN, contracts, RESULTS)


# A local run's experiment jobs start as forks of one server that has imported torch and
# nothing else (perflab/core/forkserver.py): each is still a new process of its own, without the
# interpreter's import (3.3 s a job on the H200). Stopped when the run ends.
from perflab.core import forkserver as perflab_forkserver  # noqa: E402

FORK_SERVER = {}


def start_fork_server():
    wanted = str(RUN.get("fork_server", True)).lower() == "true"
    if not wanted or not workflow.local_exec or workflow.remote_exec:
        return
    sock = os.path.join(tempfile.gettempdir(), f"perflab-fork-{os.getpid()}.sock")
    log = f"{LOGS}/fork_server.log"
    FORK_SERVER.update(
        proc=perflab_forkserver.start(sock, log, RUN["device"]), socket=sock
    )
    os.environ[perflab_forkserver.ENV_SOCKET] = sock


def stop_fork_server():
    if FORK_SERVER:
        perflab_forkserver.stop(FORK_SERVER["proc"], FORK_SERVER["socket"])
        os.environ.pop(perflab_forkserver.ENV_SOCKET, None)


onstart:
    before_first_job()


onsuccess:
    stop_fork_server()
