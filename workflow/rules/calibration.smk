# Calibration (runs first): the harness's own floors, the A/A noise floor every A/B is held
# to, the profiler's overhead and peer timers; then the cross-run comparison target.


rule c00_calibration:
    output:
        **exp_outputs("C00"),
    log:
        exp_log("C00"),
    params:
        contract=exp_contract("C00"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    priority: 100
    conda:
        ENV
    script:
        exp_script("C00")
