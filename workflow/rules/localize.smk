# Localize before intervening: E06 two instruments (wall clock vs CUDA events).


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
