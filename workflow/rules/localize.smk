# Localize before intervening: E05 phases, E06 two instruments, E07 optimizers,
# E08 batch sweep, E13 sync tax, E14 profiler, E23 instrument cost, E25 worked pass.


rule e06_events_vs_wall:
    output:
        **exp_outputs("E06"),
    log:
        exp_log("E06"),
    params:
        contract=exp_contract("E06"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E06")


rule e05_phases:
    output:
        **exp_outputs("E05"),
    log:
        exp_log("E05"),
    params:
        contract=exp_contract("E05"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E05")


rule e07_optimizers:
    output:
        **exp_outputs("E07"),
    log:
        exp_log("E07"),
    params:
        contract=exp_contract("E07"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E07")


rule e13_sync_tax:
    output:
        **exp_outputs("E13"),
    log:
        exp_log("E13"),
    params:
        contract=exp_contract("E13"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E13")


rule e14_profiler:
    output:
        **exp_outputs("E14"),
    log:
        exp_log("E14"),
    params:
        contract=exp_contract("E14"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E14")


rule e23_instrument_cost:
    output:
        **exp_outputs("E23"),
    log:
        exp_log("E23"),
    params:
        contract=exp_contract("E23"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E23")


rule e25_worked_pass:
    output:
        **exp_outputs("E25"),
    log:
        exp_log("E25"),
    params:
        contract=exp_contract("E25"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E25")


# E08: each batch size in its own job (fresh process), then the aggregation that
# writes E08's csv, samples and provenance with the sweep's three answers.
rule e08_batch:
    output:
        **e08_batch_outputs(),
    log:
        e08_batch_log(),
    params:
        contract=e08_batch_contract,
    wildcard_constraints:
        batch="[0-9]+",
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
