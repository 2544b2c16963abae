# W01 (what if): its own rules, and the helpers only they use (experiments of more
# than one job keep their rules here, workflow/rules/<slug>.smk, included by the Snakefile).

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


checkpoint w01_plan:
    output:
        **w01_job_outputs(perflab_whatif.PLAN),
    log:
        w01_job_log(perflab_whatif.PLAN),
    params:
        contract=exp_contract("W01"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("W01")


rule w01_intervention:
    output:
        **w01_job_outputs("{intervention}"),
    log:
        w01_job_log("{intervention}"),
    params:
        contract=w01_intervention_contract,
    wildcard_constraints:
        intervention="|".join(perflab_whatif.NAMES),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("W01")


rule w01_whatif:
    input:
        plan_csv=w01_job_outputs(perflab_whatif.PLAN)["csv"],
        plan_samples=w01_job_outputs(perflab_whatif.PLAN)["samples"],
        plan_provenance=w01_job_outputs(perflab_whatif.PLAN)["provenance"],
        csv=w01_files("csv"),
        samples=w01_files("samples"),
        provenance=w01_files("provenance"),
        context=w01_context(),
    output:
        **exp_outputs("W01"),
    log:
        exp_log("W01"),
    params:
        contract=exp_contract("W01"),
    conda:
        ENV
    script:
        exp_script("W01")
