# Where memory goes: E09 memory by phase, E10 OOM decomposition, E11 retained-reference
# leak, E12 allocated / reserved / NVML; and the escalation tool, a memory snapshot of the
# controlled step rendered to HTML. Each experiment is its own job: a fresh process, so no
# allocator state carries over from another measurement.


rule e09_memory_by_phase:
    output:
        **exp_outputs("E09"),
    log:
        exp_log("E09"),
    params:
        contract=exp_contract("E09"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E09")


rule e10_oom_decomposition:
    output:
        **exp_outputs("E10"),
    log:
        exp_log("E10"),
    params:
        contract=exp_contract("E10"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E10")


rule e11_retained_leak:
    output:
        **exp_outputs("E11"),
    log:
        exp_log("E11"),
    params:
        contract=exp_contract("E11"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E11")


rule e12_alloc_reserved_smi:
    output:
        **exp_outputs("E12"),
    log:
        exp_log("E12"),
    params:
        contract=exp_contract("E12"),
    threads: timing_threads()
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        exp_script("E12")


# The escalation tool (optional: experiments.E09.snapshot): allocation history of a few
# controlled steps, rendered by PyTorch's own memory_viz; on a CPU an honest placeholder.
rule memory_snapshot:
    output:
        html=memory_snapshot_path(),
    log:
        f"{LOGS}/memory_snapshot.log",
    params:
        contract=exp_contract("E09"),
    resources:
        gpu=gpu_request(),
    conda:
        ENV
    script:
        "../../scripts/memory_snapshot.py"
