# fmt: off  (snakefmt cannot format a rule defined inside a function)
# The experiments of one job each: a fresh process running scripts/<slug>.py, whose
# params are its contract (the config slice it depends on: a change reruns it). Every
# timing job takes all of --cores (timing_threads), so two never overlap, and one GPU.
# The loop below makes one such rule per experiment module of perflab/experiments/, so
# a new experiment (its module and its script) needs nothing written here; a second loop
# makes the further processes claim_processes asks for. Experiments
# of more than one job have their rules in workflow/rules/<slug>.smk.


def experiment_rule(eid, k=1):
    """The rule of experiment `eid`, named after it (e05_phases, ...); with `k` >= 2, its
    further process k of `claim_processes` (e05_phases_p2), the same job writing its own files.

    A function, not the loop's body: `script:` is evaluated again when the job runs,
    and must then see this call's `eid`, not the loop variable's last value.
    """
    rule:
        name:
            EXPERIMENTS[eid].slug + (f"_p{k}" if k > 1 else "")
        output:
            **(exp_outputs(eid) if k == 1 else process_outputs(eid, k)),
        log:
            exp_log(eid, k),
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


# experiments of more than one job (perflab_config.OWN_JOBS: Experiment.own_rules), each in
# workflow/rules/<slug>.smk: E08 (a job per batch size, then the aggregation), E20 (a cold
# job, then a warm one), W01 (a plan, a job per intervention that applies, then the
# aggregation); and D01, one job of N ranks (its launch, threads and SLURM tasks its own)
for eid in EXPERIMENTS:
    if eid not in perflab_config.OWN_JOBS:
        experiment_rule(eid)
for eid, k in perflab_config.process_jobs(RUN):
    experiment_rule(eid, k)
