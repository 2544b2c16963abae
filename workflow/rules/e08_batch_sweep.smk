# e08_batch_sweep: its rules (an experiment of several jobs keeps them here; the helpers they
# call are in common.smk, with the others)


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
