# E20 (compile cache, cold then warm): its own rules, and the helpers only they use (experiments of more
# than one job keep their rules here, workflow/rules/<slug>.smk, included by the Snakefile).

# E20 compile cache: a cold job (wipes the shared Inductor cache, compiles into it) and
# a warm job (a later fresh process reusing it) that writes E20's outputs.
from perflab.experiments import e20_compile_cache as perflab_e20  # noqa: E402


def e20_cold_outputs():
    return perflab_e20.e20_cold_outputs(perflab_config.result_dir(RUN))


def e20_cache_dir():
    return perflab_e20.e20_cache_dir(perflab_config.result_dir(RUN))


def e20_contract(phase):
    """E20's contract with the phase and the shared cache the harness must use."""
    return perflab_e20.e20_contract(
        exp_contract("E20"), phase, perflab_config.result_dir(RUN)
    )


def e20_cold_log():
    return f"{LOGS}/{EXPERIMENTS['E20'].slug}/cold.log"


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
