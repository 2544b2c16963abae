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
