# e20_compile_cache: its rules (an experiment of several jobs keeps them here; the helpers they
# call are in common.smk, with the others)


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
