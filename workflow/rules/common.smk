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
    # name the files the kept values came from: perflab diagnose passes its own contract
    # (config/diagnose.yaml), and a newcomer who set nothing read "your values" as a mistake
    print(
        f"perflab: scale {RUN['resolved_scale']} sets defaults, not what the config files "
        f"({', '.join(os.path.basename(f) for f in workflow.config_settings.configfiles)})"
        " or --config set; kept: "
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
            category=perflab_reference.report_category(perflab_reference.section(e)),
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


def set_aside_changed_results():
    """A result whose rows or samples are no longer the bytes its job wrote (an edit, a
    corrupt file) is measured again: the file is moved aside (kept, renamed), so Snakemake
    sees it missing and runs its job; it would otherwise see it present and up to date
    (perflab/core/integrity.py)."""
    from perflab.core import integrity

    jobs = [exp_outputs(e) for e in selected()]
    jobs += [process_outputs(e, k) for e, k in perflab_config.process_jobs(RUN)]
    for f in [f for outs in jobs for f in integrity.changed(outs)]:
        kept = integrity.set_aside(f)
        print(
            f"perflab: {f} changed since its job wrote it: kept as {kept}, measured again",
            file=sys.stderr,
        )


if not workflow.remote_exec:
    set_aside_changed_results()


def final_outputs():
    # `--config script="train.py --epochs 1"`: that script's verdict alone
    if RUN["script"]:
        return [f"{RESULTS}/run/diagnosis.md"]
    return [
        # targets too, so a deleted result file is measured again (perflab_config.result_files)
        *perflab_config.result_files(RUN, selected()),
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


def retire_stale_report():
    """An earlier run's report.html is removed once the results it shows have changed (or
    its own job was due and did not run): never left looking current (perflab/views/partial.py).
    """
    from perflab.views import partial

    if RUN["script"]:  # an attached script's run measures none of the report's results
        return
    try:
        due = any(j.rule.name == "report_html" for j in workflow.dag.needrun_jobs())
    except Exception:
        due = False
    partial.retire_stale_report(RUN, selected(), RUN_STARTED, outdated=due)


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
        retire_stale_report()
        return

    try:
        partial.build(RUN, selected(), LOGS, RUN_STARTED, workflow.basedir)
    except Exception as exc:
        print(
            f"perflab: partial report failed: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
    retire_stale_report()  # none written (a job downstream of the results failed)


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
from perflab.pipeline import budget as perflab_budget  # noqa: E402

FORK_SERVER = {}


def start_fork_server():
    wanted = str(RUN.get("fork_server", True)).lower() == "true"
    if not wanted or not workflow.local_exec or workflow.remote_exec:
        # a server perflab's command started serves no job of this run
        os.environ.pop(perflab_forkserver.ENV_SOCKET, None)
        return
    if os.environ.get(perflab_forkserver.ENV_SOCKET):
        return  # perflab's command started it before its pre-flight (perflab/cli.py)
    sock = os.path.join(tempfile.gettempdir(), f"perflab-fork-{os.getpid()}.sock")
    log = f"{LOGS}/fork_server.log"
    FORK_SERVER.update(
        proc=perflab_forkserver.start(
            sock, log, RUN["device"], perflab_budget.JOB_IMPORTS
        ),
        socket=sock,
    )
    os.environ[perflab_forkserver.ENV_SOCKET] = sock


def stop_fork_server():
    if FORK_SERVER:
        perflab_forkserver.stop(FORK_SERVER["proc"], FORK_SERVER["socket"])
        os.environ.pop(perflab_forkserver.ENV_SOCKET, None)


# when the run started: the summary marks a file older than it as an earlier run's
from perflab.views import first_screen as perflab_first_screen  # noqa: E402
from perflab.views import summary as perflab_summary  # noqa: E402

RUN_STARTED = time.time()


def print_summary():
    """The verdict, the claims' tally (the chapter's workload only, as in the report) and
    the report's path, on stderr beside Snakemake's own lines; for `--config script=...`,
    that script's verdict alone (results/<tag>/run/)."""
    if RUN["script"]:
        lines = perflab_summary.lines(f"{RESULTS}/run", RUN_STARTED, claims=False)
        print("\n".join(lines), file=sys.stderr)
        return
    chapter = perflab_config.load_yaml(perflab_config.DEFAULT_CONFIG)["workload"]
    claims = perflab_first_screen.show_claims(
        RUN["report_claims"], RUN["workload"], chapter
    )
    lines = perflab_summary.lines(RESULTS, RUN_STARTED, claims)
    print("\n".join(lines), file=sys.stderr)


onstart:
    before_first_job()


# every run ends with its summary (plain snakemake too); not a dry run, which makes nothing
onsuccess:
    stop_fork_server()
    # a run that re-measured without asking for the report
    if not workflow.remote_exec:
        retire_stale_report()
    if not workflow.dryrun and not workflow.remote_exec:
        print_summary()


# E08 batch sweep: one job per batch size (a fresh process each, so no allocator
# carry-over biases a peak), the replicates of one batch size (further fresh processes
# of its contract: the between-process A/A), then one job aggregating them
# (perflab/experiments/e08_batch_sweep/sweep.py).
from perflab.experiments.e08_batch_sweep import sweep as perflab_sweep  # noqa: E402


def e08_batches():
    return perflab_sweep.batches(exp_contract("E08"))


def e08_batch_outputs():
    """csv, samples and provenance of the per-batch job, with the {batch} wildcard (a batch
    size, 64, or a replicate of one, 64_r1)."""
    return perflab_sweep.batch_outputs(perflab_config.result_dir(RUN), "{batch}")


def e08_batch_log():
    return f"{LOGS}/{EXPERIMENTS['E08'].slug}/b{{batch}}.log"


def e08_batch_files(kind):
    """The per-job files (`kind`: csv, samples or provenance) the aggregation reads."""
    d = perflab_config.result_dir(RUN)
    jobs = perflab_sweep.jobs(exp_contract("E08"))
    return [perflab_sweep.batch_outputs(d, *job)[kind] for job in jobs]


def e08_batch_contract(wildcards):
    """E08's contract with this job's batch size (and replicate) in place of the list."""
    batch, replicate = perflab_sweep.parse_job(wildcards.batch)
    return perflab_sweep.batch_contract(exp_contract("E08"), batch, replicate)


# E20 compile cache: a cold job (wipes the shared Inductor cache, compiles into it) and
# a warm job (a later fresh process reusing it) that writes E20's outputs.
from perflab.experiments import e20_compile_cache as perflab_e20  # noqa: E402


def e20_cold_outputs():
    return perflab_e20.e20_cold_outputs(perflab_config.result_dir(RUN))


def e20_cache_dir():
    return perflab_e20.e20_cache_dir(perflab_config.result_dir(RUN))


def e20_contract(phase):
    """E20's contract with the phase and the shared cache the harness must use."""
    return perflab_e20.e20_contract(
        exp_contract("E20"), phase, perflab_config.result_dir(RUN)
    )


def e20_cold_log():
    return f"{LOGS}/{EXPERIMENTS['E20'].slug}/cold.log"


# W01 what if: a plan job (a checkpoint: which interventions apply), one job per
# intervention that applies (a fresh process each), then the aggregation (perflab/experiments/w01_whatif/whatif.py).
from perflab.experiments.w01_whatif import whatif as perflab_whatif  # noqa: E402


def w01_job_outputs(job):
    """csv, samples and provenance of a W01 job: the plan, or "{intervention}"."""
    return perflab_whatif.job_outputs(perflab_config.result_dir(RUN), job)


def w01_job_log(job):
    return f"{LOGS}/{EXPERIMENTS['W01'].slug}/{job}.log"


def w01_intervention_contract(wildcards):
    """W01's contract with this job's intervention in place of the list."""
    return perflab_whatif.intervention_contract(
        exp_contract("W01"), wildcards.intervention
    )


def w01_files(kind):
    """The files (`kind`: csv, samples or provenance) of every intervention the plan found
    to apply: known once the plan (a checkpoint) has run."""

    def files(wildcards):
        with open(checkpoints.w01_plan.get().output.applies) as fh:
            names = json.load(fh)
        return [w01_job_outputs(n)[kind] for n in names]

    return files


def w01_context():
    """The localization and calibration results W01's table reads, when this run has them."""
    return [exp_outputs(e)["csv"] for e in perflab_whatif.CONTEXT if e in selected()]


# W01 (what if): the plan reads which interventions apply to the workload (a checkpoint:
# the jobs after it are known once it has run); each that applies is measured against the
# baseline in a fresh process of its own; the aggregation ranks them by measured gain.


# D01 data parallel: one job launching its ranks (perflab.experiments.d01_data_parallel.distributed). Its launch (ranks,
# backend, threads per rank) is part of its contract. A launch this machine cannot make
# stops the run only when D01 is selected: elsewhere the workflow parses all the same, and
# the job, if asked for by name, says why it cannot run.
from perflab.experiments.d01_data_parallel import (
    distributed as perflab_distributed,
)  # noqa: E402


def d01_on_cluster():
    return workflow.non_local_exec or workflow.remote_exec


def d01_plan():
    cluster = d01_on_cluster()
    try:
        return perflab_distributed.plan(
            exp_contract("D01"),
            visible_cuda=None if cluster else visible_cuda(),
            cores=timing_threads(),
            cores_per_rank=cluster,
        )
    except perflab_distributed.PlanError as exc:
        if "D01" not in selected():
            return None
        raise WorkflowError(f"config error at '{exc.key}': {exc.message}") from None


def visible_cuda():
    """CUDA devices this host sees (torch asked only where the run is on CUDA)."""
    if not RUN["resolved_device"].startswith("cuda"):
        return 0
    import torch

    return torch.cuda.device_count()


def d01_contract():
    """D01's contract with its launch, when selected (by hand the script plans its own)."""
    p = d01_plan()
    c = exp_contract("D01")
    return perflab_distributed.with_plan(c, p) if p else c


def d01_threads():
    """Locally every core of --cores (the ranks share them); on a cluster, per rank (task)."""
    return timing_threads()


def d01_resources():
    return perflab_distributed.job_resources(d01_plan(), gpus=bool(gpu_request()))

# Data parallel (D01): one job whose script starts N ranks through torch.distributed's
# standard launcher (torchrun; gloo on a CPU, NCCL on GPUs) and merges their per-step
# records. Selected by `run: all` only on a machine with two or more CUDA devices; named
# (`run: all,D01`), it runs anywhere. On SLURM it is one job of N tasks on one node,
# a GPU per rank on CUDA (perflab.experiments.d01_data_parallel.distributed.job_resources).
