# Benchmark hygiene (the chapter up to "Localize before intervening"):
# E01 lying benchmark, E02 four questions, E03 warmup & spread, E04 Timer vs helper.


rule e01_lying_benchmark:
    output:
        **exp_outputs("E01"),
    log:
        exp_log("E01"),
    params:
        contract=exp_contract("E01"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E01")


rule e02_four_questions:
    output:
        **exp_outputs("E02"),
    log:
        exp_log("E02"),
    params:
        contract=exp_contract("E02"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E02")


rule e03_warmup_spread:
    output:
        **exp_outputs("E03"),
    log:
        exp_log("E03"),
    params:
        contract=exp_contract("E03"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E03")


rule e04_timer_vs_helper:
    output:
        **exp_outputs("E04"),
    log:
        exp_log("E04"),
    params:
        contract=exp_contract("E04"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E04")
