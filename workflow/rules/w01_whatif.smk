# w01_whatif: its rules (an experiment of several jobs keeps them here; the helpers they
# call are in common.smk, with the others)


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
