# Helpers shared by the workflow's .smk files: the validated configuration,
# output paths and per-experiment contracts, computed here and nowhere else.
import glob
import os
import sys

from snakemake.exceptions import WorkflowError

# the package imports here even before `pip install -e .`; jobs need it installed
sys.path.insert(0, workflow.basedir)

from perflab import config as perflab_config  # noqa: E402
from perflab import reference as perflab_reference  # noqa: E402
from perflab.catalogue import EXPERIMENTS  # noqa: E402

try:
    RUN = perflab_config.resolve(config)
except perflab_config.ConfigError as exc:
    raise WorkflowError(str(exc)) from None

TAG = RUN["resolved_tag"]
RESULTS = f"{RUN['results_dir']}/{TAG}"
FIGURES = f"{RUN['figures_dir']}/{TAG}"
LOGS = f"logs/{TAG}"


def exp_outputs(eid):
    """csv, samples and provenance paths of experiment `eid`."""
    return perflab_config.experiment_outputs(RUN, eid)


def exp_log(eid):
    return f"{LOGS}/{EXPERIMENTS[eid].slug}.log"


def exp_contract(eid):
    """The config slice the job depends on (a change to it reruns the job)."""
    return perflab_config.contract(RUN, eid)


ENV = "../../envs/perflab.yaml"


def exp_script(eid):
    return f"../../scripts/{EXPERIMENTS[eid].slug}.py"


def gpu_request():
    """GPU jobs ask for one GPU, so a multi-core run never shares it between two timing jobs."""
    return 1 if RUN["resolved_device"].startswith("cuda") else 0


def timing_threads():
    """A timing job takes every core it is given: two timing jobs never overlap locally."""
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
    return f"{FIGURES}/{EXPERIMENTS[eid].slug}.png"


def figure_inputs(wildcards):
    """The figure of experiment {eid} reads its rows and its raw samples."""
    out = exp_outputs(wildcards.eid.upper())
    return {"csv": out["csv"], "samples": out["samples"]}


def figure_section(wildcards):
    """`snakemake --report` category of a figure: its chapter section."""
    return perflab_reference.section(wildcards.eid)


def reference_inputs():
    """The chapter's numbers and any shipped reference run the report sets beside this run."""
    root = os.path.join(workflow.basedir, "report", "reference")
    return sorted(
        glob.glob(os.path.join(root, "chapter.*"))
        + glob.glob(os.path.join(root, "*", "run.json"))
    )


def final_outputs():
    return [
        f"{RESULTS}/ledger.md",
        f"{RESULTS}/claims.csv",
        f"{RESULTS}/report.html",
        *[figure_path(e) for e in selected()],
    ]


# E08 batch sweep: one job per batch size (a fresh process each, so no allocator
# carry-over biases a peak), then one job aggregating them (perflab/sweep.py).
from perflab import sweep as perflab_sweep  # noqa: E402


def e08_batches():
    return perflab_sweep.batches(exp_contract("E08"))


def e08_batch_outputs():
    """csv, samples and provenance of the per-batch job, with the {batch} wildcard."""
    return perflab_sweep.batch_outputs(perflab_config.result_dir(RUN), "{batch}")


def e08_batch_log():
    return f"{LOGS}/{EXPERIMENTS['E08'].slug}/b{{batch}}.log"


def e08_batch_files(kind):
    """The per-batch files (`kind`: csv, samples or provenance) the aggregation reads."""
    d = perflab_config.result_dir(RUN)
    return [perflab_sweep.batch_outputs(d, b)[kind] for b in e08_batches()]


def e08_batch_contract(wildcards):
    """E08's contract with this job's batch size in place of the list of batch sizes."""
    return perflab_sweep.batch_contract(exp_contract("E08"), int(wildcards.batch))
