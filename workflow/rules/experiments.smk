# fmt: off  (snakefmt cannot format a rule defined inside a function)
# The experiments of one job each: a fresh process running scripts/<slug>.py, whose
# params are its contract (the config slice it depends on: a change reruns it). Every
# timing job takes all of --cores (timing_threads), so two never overlap, and one GPU.
# The loop below makes one such rule per experiment module of perflab/experiments/, so
# a new experiment (its module and its script) needs nothing written here. Experiments
# of more than one job have their rules in multi_job.smk.


def experiment_rule(eid):
    """The rule of experiment `eid`, named after it (e05_phases, ...).

    A function, not the loop's body: `script:` is evaluated again when the job runs,
    and must then see this call's `eid`, not the loop variable's last value.
    """
    rule:
        name:
            EXPERIMENTS[eid].slug
        output:
            **exp_outputs(eid),
        log:
            exp_log(eid),
        params:
            contract=exp_contract(eid),
        threads: timing_threads()
        resources:
            gpu=gpu_request(),
        # the calibration runs first: every A/B verdict is held to its floors
        priority: 100 if eid == "C00" else 0
        conda:
            ENV
        script:
            exp_script(eid)


#: experiments of more than one job, in multi_job.smk: E08 (a job per batch size, then
#: the aggregation), E20 (a cold job, then a warm one), W01 (a plan, a job per intervention
#: that applies, then the aggregation); and D01, one job of N ranks (data_parallel.smk: its
#: launch, threads and SLURM tasks are its own)
OWN_SHAPE = ("E08", "E20", "W01", "D01")

for eid in EXPERIMENTS:
    if eid not in OWN_SHAPE:
        experiment_rule(eid)
