# Experiments of more than one job (the others: experiments.smk).


# E08: each batch size in its own job (fresh process), and replicates of one batch
# size (64_r1, ...: the between-process A/A), then the aggregation that writes E08's
# csv, samples and provenance with the sweep's three answers and the floor.
rule e08_batch:
    output:
        **e08_batch_outputs(),
    log:
        e08_batch_log(),
    params:
        contract=e08_batch_contract,
    wildcard_constraints:
        batch="[0-9]+(_r[0-9]+)?|interleaved",
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E08")


rule e08_batch_sweep:
    input:
        csv=e08_batch_files("csv"),
        samples=e08_batch_files("samples"),
        provenance=e08_batch_files("provenance"),
    output:
        **exp_outputs("E08"),
    log:
        exp_log("E08"),
    params:
        contract=exp_contract("E08"),
    conda:
        ENV
    script:
        exp_script("E08")


# E20 is two jobs sharing one Inductor cache directory: cold wipes it and compiles
# into it; warm, a later fresh process, reuses it and writes E20's outputs.
rule e20_compile_cold:
    output:
        **e20_cold_outputs(),
        cache=directory(e20_cache_dir()),
    log:
        e20_cold_log(),
    params:
        contract=e20_contract("cold"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E20")


rule e20_compile_cache:
    input:
        **e20_cold_outputs(),
        cache=e20_cache_dir(),
    output:
        **exp_outputs("E20"),
    log:
        exp_log("E20"),
    params:
        contract=e20_contract("warm"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E20")


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
