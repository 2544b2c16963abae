# E08 (batch sweep): its own rules, and the helpers only they use (experiments of more
# than one job keep their rules here, workflow/rules/<slug>.smk, included by the Snakefile).

# E08 batch sweep: one job per batch size (a fresh process each, so no allocator
# carry-over biases a peak), the replicates of one batch size (further fresh processes
# of its contract: the between-process A/A), then one job aggregating them
# (perflab/experiments/e08_batch_sweep/sweep.py).
from perflab.experiments.e08_batch_sweep import sweep as perflab_sweep  # noqa: E402


def e08_batches():
    return perflab_sweep.batches(exp_contract("E08"))


def e08_batch_outputs():
    """csv, samples and provenance of the per-batch job, with the {batch} wildcard (a batch
    size, 64, or a replicate of one, 64_r1)."""
    return perflab_sweep.batch_outputs(perflab_config.result_dir(RUN), "{batch}")


def e08_batch_log():
    return f"{LOGS}/{EXPERIMENTS['E08'].slug}/b{{batch}}.log"


def e08_batch_files(kind):
    """The per-job files (`kind`: csv, samples or provenance) the aggregation reads."""
    d = perflab_config.result_dir(RUN)
    jobs = perflab_sweep.jobs(exp_contract("E08"))
    return [perflab_sweep.batch_outputs(d, *job)[kind] for job in jobs]


def e08_batch_contract(wildcards):
    """E08's contract with this job's batch size (and replicate) in place of the list."""
    batch, replicate = perflab_sweep.parse_job(wildcards.batch)
    return perflab_sweep.batch_contract(exp_contract("E08"), batch, replicate)


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
