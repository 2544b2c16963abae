# Interventions, each with its correctness column (the chapter's and the article's).

# E15-E18


rule e15_amp:
    output:
        **exp_outputs("E15"),
    log:
        exp_log("E15"),
    params:
        contract=exp_contract("E15"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E15")


rule e16_checkpointing:
    output:
        **exp_outputs("E16"),
    log:
        exp_log("E16"),
    params:
        contract=exp_contract("E16"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E16")


rule e17_accumulation:
    output:
        **exp_outputs("E17"),
    log:
        exp_log("E17"),
    params:
        contract=exp_contract("E17"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E17")


rule e18_attention_seq:
    output:
        **exp_outputs("E18"),
    log:
        exp_log("E18"),
    params:
        contract=exp_contract("E18"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E18")


# E19-E24
# E19 compile A/B, E20 cold/warm compile cache, E21 recompilation, E22 benchmark
# matrix, E24 input pipeline.


rule e19_compile_ab:
    output:
        **exp_outputs("E19"),
    log:
        exp_log("E19"),
    params:
        contract=exp_contract("E19"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E19")


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


rule e21_recompile:
    output:
        **exp_outputs("E21"),
    log:
        exp_log("E21"),
    params:
        contract=exp_contract("E21"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E21")


rule e22_matrix:
    output:
        **exp_outputs("E22"),
    log:
        exp_log("E22"),
    params:
        contract=exp_contract("E22"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E22")


rule e24_input_pipeline:
    output:
        **exp_outputs("E24"),
    log:
        exp_log("E24"),
    params:
        contract=exp_contract("E24"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E24")
